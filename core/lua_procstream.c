/* lua_procstream.c — core.procstream{...}: an mbwrap process stream decoded in C (procstream.h).
 *
 *   local ps = core.procstream{ max_message = n, max_line = n, pty = bool,
 *     stdout = "buffer" | "discard" | { tail = maxBytes } | { fd = n },  stderr = (same) }
 *   pty = true: a terminal's stream (no mbwrap frames): event.data.pty bytes go to the stdout
 *   sink (r.stdout for "buffer"); facts are start, end, stream_end, stream_error, sink_error.
 *   ps:push(chunk)   → r | nil, err    r = { <facts...>, stdout = bytes?, stderr = bytes? }
 *   ps:finish()      → true | nil, err
 *   ps:read_from(stream, offset) → text, next_offset, lossy      (stream "stdout"|"stderr")
 *   ps:total(stream) → bytes so far;  ps:discard(stream);  ps:diag() → wrapper stderr text
 *
 * Facts, in stream order: {kind="start", pid=} {kind="pgid", value=} {kind="spawn_error",
 * errno=, message=} {kind="exit", value=} {kind="signal", value=} {kind="empty"} {kind="done"}
 * {kind="end", exit_code=, exited=, status=, error=} {kind="stream_end"}
 * {kind="stream_error", code=, message=} {kind="sink_error", stream=, errno=, message=}.
 * r.stdout / r.stderr carry the BUFFER sink's bytes of this push (absent when none). FD sinks on
 * 1 and 2 flush Lua's io.stdout / io.stderr (the C stdio streams) first, so output stays ordered. */
#include "lua_moonbox.h"
#include "procstream.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MB_PS_MT "moonbox.procstream"

struct mb_lua_ps {
  struct mb_procstream *ps;
  int fds[2]; /* FD sink descriptors, -1 otherwise */
};

static struct mb_lua_ps *mb_check_ps(lua_State *L) {
  struct mb_lua_ps *u = luaL_checkudata(L, 1, MB_PS_MT);
  if (!u->ps) luaL_error(L, "procstream is closed");
  return u;
}

static int mb_check_stream(lua_State *L, int arg) {
  static const char *const names[] = {"stdout", "stderr", NULL};
  return luaL_checkoption(L, arg, NULL, names);
}

static size_t mb_opt_limit(lua_State *L, const char *field, lua_Integer def) {
  lua_getfield(L, 1, field);
  lua_Integer v = lua_isnil(L, -1) ? def : luaL_checkinteger(L, -1);
  lua_pop(L, 1);
  if (v < 1 || (lua_Unsigned)v > SIZE_MAX) luaL_error(L, "procstream: %s must be a positive integer", field);
  return (size_t)v;
}

/* Reads the sink spec in field `name` of the options table (argument 1). */
static void mb_sink_spec(lua_State *L, const char *name, struct mb_ps_sink *s) {
  memset(s, 0, sizeof *s);
  s->kind = MB_PS_DISCARD;
  s->fd = -1;
  lua_getfield(L, 1, name);
  if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "discard") == 0)) {
  } else if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "buffer") == 0) {
    s->kind = MB_PS_BUFFER;
  } else if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "tail");
    lua_getfield(L, -2, "fd");
    if (!lua_isnil(L, -2) && lua_isnil(L, -1)) {
      lua_Integer m = luaL_checkinteger(L, -2);
      if (m < 0 || (lua_Unsigned)m > SIZE_MAX) luaL_error(L, "procstream: %s.tail must be >= 0", name);
      s->kind = MB_PS_TAIL;
      s->max = (size_t)m;
    } else if (lua_isnil(L, -2) && !lua_isnil(L, -1)) {
      lua_Integer fd = luaL_checkinteger(L, -1);
      if (fd < 0 || fd > INT32_MAX) luaL_error(L, "procstream: %s.fd must be a descriptor", name);
      s->kind = MB_PS_FD;
      s->fd = (int)fd;
    } else {
      luaL_error(L, "procstream: %s must have exactly one of tail= or fd=", name);
    }
    lua_pop(L, 2);
  } else {
    luaL_error(L, "procstream: %s must be 'buffer', 'discard', {tail=n} or {fd=n}", name);
  }
  lua_pop(L, 1);
}

static int l_procstream(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  struct mb_ps_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.max_message = mb_opt_limit(L, "max_message", 4 * 1024 * 1024);
  cfg.max_line = mb_opt_limit(L, "max_line", 40000);
  if (cfg.max_message > UINT32_MAX) luaL_error(L, "procstream: max_message must be <= 4294967295");
  lua_getfield(L, 1, "pty");
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) luaL_error(L, "procstream: pty must be a boolean");
  cfg.pty = lua_toboolean(L, -1);
  lua_pop(L, 1);
  mb_sink_spec(L, "stdout", &cfg.sink[0]);
  mb_sink_spec(L, "stderr", &cfg.sink[1]);
  struct mb_lua_ps *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->ps = NULL;
  luaL_setmetatable(L, MB_PS_MT);
  for (int i = 0; i < 2; i++) u->fds[i] = cfg.sink[i].kind == MB_PS_FD ? cfg.sink[i].fd : -1;
  u->ps = mb_procstream_new(&cfg);
  if (!u->ps) return luaL_error(L, "out of memory");
  return 1;
}

static void mb_flush_for(const struct mb_lua_ps *u) {
  for (int i = 0; i < 2; i++) {
    if (u->fds[i] == 1) fflush(stdout);
    else if (u->fds[i] == 2) fflush(stderr);
  }
}

static void mb_set_str(lua_State *L, const char *k, const char *v) {
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void mb_set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

static void mb_push_facts(lua_State *L, struct mb_procstream *ps) {
  static const char *const names[] = {
    NULL, "start", "pgid", "spawn_error", "exit", "signal", "empty", "done", "end",
    "stream_end", "stream_error", "sink_error"};
  const struct mb_ps_fact *f;
  size_t n = mb_procstream_facts(ps, &f);
  lua_createtable(L, (int)n, 2);
  for (size_t i = 0; i < n; i++, f++) {
    lua_createtable(L, 0, 4);
    mb_set_str(L, "kind", names[f->kind]);
    switch (f->kind) {
    case MB_PS_START: mb_set_int(L, "pid", f->value); break;
    case MB_PS_PGID: case MB_PS_EXIT: case MB_PS_SIGNAL: mb_set_int(L, "value", f->value); break;
    case MB_PS_SPAWN_ERROR:
      mb_set_int(L, "errno", f->value);
      mb_set_str(L, "message", f->text);
      break;
    case MB_PS_END:
      mb_set_int(L, "exit_code", f->value);
      lua_pushboolean(L, f->flag);
      lua_setfield(L, -2, "exited");
      mb_set_str(L, "status", f->text);
      if (f->code[0]) mb_set_str(L, "error", f->code);
      break;
    case MB_PS_STREAM_ERROR:
      mb_set_str(L, "code", f->code);
      mb_set_str(L, "message", f->text);
      break;
    case MB_PS_SINK_ERROR:
      mb_set_str(L, "stream", f->stream ? "stderr" : "stdout");
      mb_set_int(L, "errno", f->value);
      mb_set_str(L, "message", f->text);
      break;
    default: break;
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  for (int s = 0; s < 2; s++) {
    size_t len;
    const unsigned char *p = mb_procstream_buffered(ps, s, &len);
    if (len) {
      lua_pushlstring(L, (const char *)p, len);
      lua_setfield(L, -2, s ? "stderr" : "stdout");
    }
  }
}

static int l_ps_push(lua_State *L) {
  struct mb_lua_ps *u = mb_check_ps(L);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  mb_flush_for(u);
  struct mb_error err;
  if (mb_procstream_push(u->ps, s, len, &err)) return mb_lua_push_mberror(L, &err);
  mb_push_facts(L, u->ps);
  return 1;
}

static int l_ps_finish(lua_State *L) {
  struct mb_lua_ps *u = mb_check_ps(L);
  struct mb_error err;
  if (mb_procstream_finish(u->ps, &err)) return mb_lua_push_mberror(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_ps_read_from(lua_State *L) {
  struct mb_lua_ps *u = mb_check_ps(L);
  int stream = mb_check_stream(L, 2);
  lua_Integer from = luaL_optinteger(L, 3, 0);
  const unsigned char *a, *b;
  size_t al, bl;
  uint64_t next;
  int lossy;
  mb_procstream_read_from(u->ps, stream, from < 0 ? 0 : (uint64_t)from, &a, &al, &b, &bl, &next,
                          &lossy);
  luaL_Buffer buf;
  luaL_buffinit(L, &buf);
  if (al) luaL_addlstring(&buf, (const char *)a, al);
  if (bl) luaL_addlstring(&buf, (const char *)b, bl);
  luaL_pushresult(&buf);
  lua_pushinteger(L, (lua_Integer)next);
  lua_pushboolean(L, lossy);
  return 3;
}

static int l_ps_total(lua_State *L) {
  struct mb_lua_ps *u = mb_check_ps(L);
  lua_pushinteger(L, (lua_Integer)mb_procstream_total(u->ps, mb_check_stream(L, 2)));
  return 1;
}

static int l_ps_discard(lua_State *L) {
  struct mb_lua_ps *u = mb_check_ps(L);
  int stream = mb_check_stream(L, 2);
  mb_procstream_discard(u->ps, stream);
  u->fds[stream] = -1;
  return 0;
}

static int l_ps_diag(lua_State *L) {
  struct mb_lua_ps *u = mb_check_ps(L);
  size_t len;
  const char *d = mb_procstream_diag(u->ps, &len);
  lua_pushlstring(L, d, len);
  return 1;
}

static int l_ps_gc(lua_State *L) {
  struct mb_lua_ps *u = luaL_checkudata(L, 1, MB_PS_MT);
  mb_procstream_free(u->ps);
  u->ps = NULL;
  return 0;
}

void mb_lua_open_procstream(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"push", l_ps_push}, {"finish", l_ps_finish}, {"read_from", l_ps_read_from},
    {"total", l_ps_total}, {"discard", l_ps_discard}, {"diag", l_ps_diag}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_ps_gc}, {"__close", l_ps_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_PS_MT, methods, meta);
  lua_pushcfunction(L, l_procstream);
  lua_setfield(L, -2, "procstream");
}
