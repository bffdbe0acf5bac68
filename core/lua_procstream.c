/* lua_procstream.c — the bare process-stream decoder (class `moonbox.procstream`, procstream.h)
 * that specs and scripted fakes feed by hand, and what it shares with the loop-driven stream of
 * lua_pstream.c (`moonbox.pstream`): the stream names, the sink specs, the facts as Lua tables
 * and the decoder's methods (read_from, total, diag), all declared in lua_moonbox.h.
 *
 *   local d = core.procstream{ max_message=, max_line=, queue_max=, raw=, proto=, stdout = sink, stderr = sink }
 *     (sinks "discard" | "queue" | { tail = n }) d:push(chunk) → true | nil, err;
 *     d:finish() → true | nil, err; d:facts(); d:read(stream) → bytes | false; d:discard(stream);
 *     d:read_from(stream, offset) → text, next_offset, lossy;  d:total(stream);  d:diag()
 *     (the same meanings as a process stream's: lua_pstream.c)
 *
 * Facts: {kind="start", pid=} {kind="pgid", value=} {kind="spawn_error", errno=, message=}
 * {kind="exit", value=} {kind="signal", value=} {kind="empty"} {kind="done"}
 * {kind="end", exit_code=, exited=, status=, error=} {kind="stream_end"}
 * {kind="stream_error", code=, message=} {kind="sink_error", stream=, errno=, message=}. */
#include "lua_moonbox.h"
#include "pstream.h" /* MB_PS_SINK_ERROR, the fact a pstream adds */
#include "moonbox_protocol.h"
#include <stdint.h>
#include <string.h>

#define MB_PS_MT "moonbox.procstream"

int mb_lua_check_stream(lua_State *L, int arg) {
  static const char *const names[] = {"stdout", "stderr", NULL};
  return luaL_checkoption(L, arg, NULL, names);
}

/* See lua_moonbox.h. */
int mb_lua_sink_spec(lua_State *L, int t, const char *fn, const char *name, const char *queue_name, int fd_ok,
                     size_t *max, int *fd) {
  int kind = 0;
  lua_getfield(L, t, name);
  if (lua_isnil(L, -1)) {
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    const char *v = lua_tostring(L, -1);
    if (strcmp(v, queue_name) == 0) kind = 1;
    else if (strcmp(v, "discard") != 0)
      luaL_error(L, "%s: %s must be 'discard', '%s', {tail=n}%s", fn, name, queue_name, fd_ok ? " or {fd=n}" : "");
  } else if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "tail");
    lua_getfield(L, -2, "fd");
    int has_tail = !lua_isnil(L, -2), has_fd = !lua_isnil(L, -1);
    if (has_tail && !has_fd) {
      int ok;
      lua_Integer m = lua_tointegerx(L, -2, &ok);
      if (!ok || m < 0 || (lua_Unsigned)m > SIZE_MAX / 2)
        luaL_error(L, "%s: %s.tail must be a non-negative integer", fn, name);
      kind = 2;
      *max = (size_t)m;
    } else if (has_fd && !has_tail && fd_ok) {
      int ok;
      lua_Integer f = lua_tointegerx(L, -1, &ok);
      if (!ok || f < 0 || f > INT32_MAX) luaL_error(L, "%s: %s.fd must be a descriptor", fn, name);
      kind = 3;
      *fd = (int)f;
    } else {
      luaL_error(L, "%s: %s must have exactly one of tail=%s", fn, name, fd_ok ? " or fd=" : "");
    }
    lua_pop(L, 2);
  } else {
    luaL_error(L, "%s: %s must be a string or a table", fn, name);
  }
  lua_pop(L, 1);
  return kind;
}

static void push_fact(lua_State *L, const struct mb_ps_fact *f) {
  static const char *const names[] = {
    NULL, "start", "pgid", "spawn_error", "exit", "signal", "empty", "done", "end",
    "stream_end", "stream_error", "sink_error"};
  lua_createtable(L, 0, 4);
  mb_lua_set_str(L, "kind", f->kind > 0 && f->kind <= MB_PS_SINK_ERROR ? names[f->kind] : "unknown");
  switch (f->kind) {
  case MB_PS_START: mb_lua_set_int(L, "pid", f->value); break;
  case MB_PS_PGID: case MB_PS_EXIT: case MB_PS_SIGNAL: mb_lua_set_int(L, "value", f->value); break;
  case MB_PS_SPAWN_ERROR:
    mb_lua_set_int(L, "errno", f->value);
    mb_lua_set_str(L, "message", f->text);
    break;
  case MB_PS_END:
    mb_lua_set_int(L, "exit_code", f->value);
    lua_pushboolean(L, f->flag);
    lua_setfield(L, -2, "exited");
    mb_lua_set_str(L, "status", f->text);
    if (f->code[0]) mb_lua_set_str(L, "error", f->code);
    break;
  case MB_PS_STREAM_ERROR:
    mb_lua_set_str(L, "code", f->code);
    mb_lua_set_str(L, "message", f->text);
    break;
  case MB_PS_SINK_ERROR:
    mb_lua_set_str(L, "stream", f->stream ? "stderr" : "stdout");
    mb_lua_set_int(L, "errno", f->value);
    mb_lua_set_str(L, "message", f->text);
    break;
  default: break;
  }
}

/* See lua_moonbox.h. */
int mb_lua_push_facts(lua_State *L, const struct mb_ps_fact *f, size_t n) {
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    push_fact(L, &f[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int push_tail(lua_State *L, const unsigned char *a, size_t al, const unsigned char *b,
                        size_t bl, uint64_t next, int lossy) {
  luaL_Buffer buf;
  luaL_buffinit(L, &buf);
  if (al) luaL_addlstring(&buf, (const char *)a, al);
  if (bl) luaL_addlstring(&buf, (const char *)b, bl);
  luaL_pushresult(&buf);
  lua_pushinteger(L, (lua_Integer)next);
  lua_pushboolean(L, lossy);
  return 3;
}

/* ---- core.procstream ---- */

static struct mb_procstream *mb_check_ps(lua_State *L) { return mb_lua_check_handle(L, 1, MB_PS_MT, "procstream"); }

static int l_procstream(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  struct mb_ps_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.max_message = (size_t)mb_lua_opt_int(L, 1, "procstream", "max_message", MB_PROC_MAX_MESSAGE, 1, UINT32_MAX);
  cfg.max_line = (size_t)mb_lua_opt_int(L, 1, "procstream", "max_line", MB_FRAME_LINE_DEFAULT, 1, 64 * 1024 * 1024);
  size_t qmax = (size_t)mb_lua_opt_int(L, 1, "procstream", "queue_max", 64 * 1024 * 1024, 1, 1 << 30);
  cfg.raw = mb_lua_opt_bool(L, 1, "procstream", "raw", 0);
  cfg.proto = mb_lua_opt_bool(L, 1, "procstream", "proto", 0);
  for (int i = 0; i < 2; i++) {
    size_t max = 0;
    int fd = -1;
    int kind = mb_lua_sink_spec(L, 1, "procstream", i ? "stderr" : "stdout", "queue", 0, &max, &fd);
    cfg.sink[i].kind = kind == 1 ? MB_PS_QUEUE : kind == 2 ? MB_PS_TAIL : MB_PS_DISCARD;
    cfg.sink[i].max = kind == 1 ? qmax : max;
  }
  void **u = mb_lua_new_handle(L, 0, MB_PS_MT);
  *u = mb_procstream_new(&cfg);
  if (!*u) return luaL_error(L, "out of memory");
  return 1;
}

static int ps_push(lua_State *L) {
  struct mb_procstream *u = mb_check_ps(L);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  struct mb_error err;
  return mb_lua_push_result(L, mb_procstream_push(u, s, len, &err), &err);
}

static int ps_finish(lua_State *L) {
  struct mb_procstream *u = mb_check_ps(L);
  struct mb_error err;
  return mb_lua_push_result(L, mb_procstream_finish(u, &err), &err);
}

static int ps_facts(lua_State *L) {
  struct mb_procstream *u = mb_check_ps(L);
  struct mb_ps_fact f[MB_PS_FACTS_MAX];
  return mb_lua_push_facts(L, f, mb_procstream_take_facts(u, f, MB_PS_FACTS_MAX));
}

static int ps_read(lua_State *L) {
  struct mb_procstream *u = mb_check_ps(L);
  int k = mb_lua_check_stream(L, 2);
  size_t n;
  const unsigned char *p = mb_procstream_peek(u, k, &n);
  if (n == 0) { lua_pushboolean(L, 0); return 1; }
  lua_pushlstring(L, (const char *)p, n);
  mb_procstream_consume(u, k, n);
  return 1;
}

static int ps_discard(lua_State *L) {
  struct mb_procstream *u = mb_check_ps(L);
  mb_procstream_discard(u, mb_lua_check_stream(L, 2));
  return 0;
}

static int ps_gc(lua_State *L) {
  mb_procstream_free(mb_lua_take_handle(L, 1, MB_PS_MT));
  return 0;
}

/* ---- what both classes share: their decoder's tails (declared in lua_moonbox.h) ---- */

/* The decoder of either object: a process stream's is its procstream. */
static const struct mb_procstream *decoder_arg(lua_State *L) {
  const struct mb_procstream *d = mb_lua_pstream_decoder(L, 1);
  return d ? d : mb_check_ps(L);
}

int mb_lua_dec_read_from(lua_State *L) {
  const struct mb_procstream *d = decoder_arg(L);
  int k = mb_lua_check_stream(L, 2);
  lua_Integer from = luaL_optinteger(L, 3, 0);
  const unsigned char *a, *b;
  size_t al, bl;
  uint64_t next;
  int lossy;
  mb_procstream_read_from(d, k, from < 0 ? 0 : (uint64_t)from, &a, &al, &b, &bl, &next, &lossy);
  return push_tail(L, a, al, b, bl, next, lossy);
}

int mb_lua_dec_total(lua_State *L) {
  const struct mb_procstream *d = decoder_arg(L);
  lua_pushinteger(L, (lua_Integer)mb_procstream_total(d, mb_lua_check_stream(L, 2)));
  return 1;
}

int mb_lua_dec_diag(lua_State *L) {
  size_t n;
  const char *t = mb_procstream_diag(decoder_arg(L), &n);
  lua_pushlstring(L, t, n);
  return 1;
}

void mb_lua_open_procstream(lua_State *L) {
  static const luaL_Reg ps[] = {
    {"push", ps_push}, {"finish", ps_finish}, {"facts", ps_facts}, {"read", ps_read},
    {"discard", ps_discard}, {"read_from", mb_lua_dec_read_from}, {"total", mb_lua_dec_total},
    {"diag", mb_lua_dec_diag}, {NULL, NULL}};
  static const luaL_Reg ps_meta[] = {{"__gc", ps_gc}, {"__close", ps_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_PS_MT, ps, ps_meta);
  lua_pushcfunction(L, l_procstream);
  lua_setfield(L, -2, "procstream");
}
