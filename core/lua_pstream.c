/* lua_pstream.c — the loop-driven stream of a running process, decoded in C (class
 * `moonbox.pstream`, pstream.h). It hands out the same facts as the bare decoder of
 * lua_procstream.c (`moonbox.procstream`) and shares its decoder methods and readers.
 *
 *   local s = core.pstream(http_opts, cfg, on_change)  → stream | nil, err
 *     http_opts: as core.http_request (url, headers, body, timeouts...); cfg: { max_message=,
 *     max_line=, raw = bool, high_water=, stdout = sink, stderr = sink } with sink one of
 *     "discard" | "pipe" | { tail = maxBytes } | { fd = n }. on_change() is called (no
 *     arguments, protected, never inside libcurl) when facts arrive, when a stream a reader
 *     asked for (s:want) has bytes or ended, and when the stream closes.
 *   s:facts()          → list of facts not taken yet (possibly empty)
 *   s:closed()         → false | true (complete) | true, err (how it failed)
 *   s:status()         → HTTP status | nil (no headers yet);  s:error_body() → bytes
 *   s:read(stream [, max]) → bytes | nil (end of the stream) | false (nothing yet: s:want it)
 *   s:want(stream);  s:discard(stream);  s:seal(stream) (takes no more, keeps what it holds);
 *   s:cancel();  s:close() (frees; also __gc/__close)
 *   s:read_from(stream, offset) → text, next_offset, lossy;  s:total(stream);  s:diag()
 *   s:info() → { received=, pauses=, max_buffered=, paused= }
 *
 *   local s = core.pstream_spawn({ argv=, env=, cwd=, stdin_pipe=, stdin_inherit=, pty=, rows=, cols= }, cfg, fn)
 *     (stdin_inherit: the process reads this process's own stdin, e.g. a `cat` that turns it into
 *     a stream a task reads without blocking the loop)
 *     the same object for a process on this host (its stdout an mbwrap frame stream, or with
 *     cfg.raw / pty plain bytes); also s:pid(), s:kill(sig), s:write(data [, max_pending]),
 *     s:write_pending(), s:want_write() (notify once written), s:close_input(), s:resize(r, c)
 *
 *   cfg.proto: the stream is envd's binary codec (application/connect+proto).
 *
 * Facts: as lua_procstream.c lists them. */
#include "lua_moonbox.h"
#include "moonbox.h"
#include "pstream.h"
#include "moonbox_protocol.h"
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MB_PST_MT "moonbox.pstream"
#define MB_READ_MAX_DEFAULT (1 << 20)

struct mb_lua_pst {
  struct mb_pstream *s;
  mb_lua_host *h;
  int cb_ref;
  int fds[2];                   /* FD sink descriptors, -1 otherwise (stdio flushed first) */
  struct mb_lua_http_bufs bufs; /* body pieces live as long as the stream */
};

static struct mb_lua_pst *mb_check_pst(lua_State *L) {
  struct mb_lua_pst *u = luaL_checkudata(L, 1, MB_PST_MT);
  if (!u->s) luaL_error(L, "process stream is closed");
  return u;
}

const struct mb_procstream *mb_lua_pstream_decoder(lua_State *L, int idx) {
  struct mb_lua_pst *u = luaL_testudata(L, idx, MB_PST_MT);
  if (!u) return NULL;
  if (!u->s) luaL_error(L, "process stream is closed");
  return mb_pstream_decoder(u->s);
}

static void mb_pst_changed(struct mb_pstream *s, void *ud) {
  (void)s;
  struct mb_lua_pst *u = ud;
  mb_lua_host_call(u->h, u->cb_ref); /* last: the callback may close u */
}

/* The arguments of core.pstream / pstream_spawn (opts, cfg, on_change) checked, and cfg read:
 * limits, codec and the two sinks. */
static void pst_config(lua_State *L, const char *fn, struct mb_pst_config *cfg) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  memset(cfg, 0, sizeof *cfg);
  cfg->max_message = (size_t)mb_lua_opt_int(L, 2, fn, "max_message", MB_PROC_MAX_MESSAGE, 1, UINT32_MAX);
  cfg->max_line = (size_t)mb_lua_opt_int(L, 2, fn, "max_line", MB_FRAME_LINE_DEFAULT, 1, 64 * 1024 * 1024);
  cfg->high_water = (size_t)mb_lua_opt_int(L, 2, fn, "high_water", 256 * 1024, 1, 1 << 30);
  cfg->raw = mb_lua_opt_bool(L, 2, fn, "raw", 0);
  cfg->proto = mb_lua_opt_bool(L, 2, fn, "proto", 0);
  static const int kinds[] = {MB_PST_DISCARD, MB_PST_PIPE, MB_PST_TAIL, MB_PST_FD};
  for (int i = 0; i < 2; i++) {
    cfg->sink[i].fd = -1;
    cfg->sink[i].kind = kinds[mb_lua_sink_spec(L, 2, fn, i ? "stderr" : "stdout", "pipe", 1, &cfg->sink[i].max, &cfg->sink[i].fd)];
  }
}

/* A new stream object (on the stack) for cfg; what Lua's io wrote to a sink's fd comes first. */
static struct mb_lua_pst *pst_new(lua_State *L, const struct mb_pst_config *cfg) {
  mb_lua_host *h = mb_lua_host_of(L);
  struct mb_lua_pst *u = mb_lua_new_object(L, sizeof *u, 1, MB_PST_MT);
  u->h = h;
  u->cb_ref = LUA_NOREF;
  for (int i = 0; i < 2; i++) {
    u->fds[i] = cfg->sink[i].kind == MB_PST_FD ? cfg->sink[i].fd : -1;
    if (u->fds[i] == 1) fflush(stdout);
    else if (u->fds[i] == 2) fflush(stderr);
  }
  return u;
}

/* After mb_pstream_start/spawn: the stream object at ui, or the error. */
static int pst_started(lua_State *L, struct mb_lua_pst *u, int ui, int rc, const struct mb_error *err) {
  if (rc != MB_OK) return mb_lua_push_error(L, err->code == rc ? mb_error_code(err) : mb_errcode(rc), err->message);
  lua_pushvalue(L, 3);
  u->cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, ui);
  return 1;
}

static int l_pstream(lua_State *L) {
  struct mb_pst_config cfg;
  pst_config(L, "pstream", &cfg);
  struct mb_lua_pst *u = pst_new(L, &cfg);
  int ui = lua_gettop(L);
  mb_http_opts o;
  if (mb_lua_http_opts(L, 1, &o, &u->bufs) < 0) return 2;
  if (u->bufs.body_table) {
    lua_getfield(L, 1, "body");
    lua_setiuservalue(L, ui, 1);
  }
  struct mb_error err;
  mb_error_clear(&err);
  int rc = mb_pstream_start(mb_lua_host_loop(u->h), &o, &cfg, mb_pst_changed, u, &u->s, &err);
  if (o.own_body_fd && rc != MB_OK) close(o.body_fd);
  return pst_started(L, u, ui, rc, &err);
}

/* core.pstream_spawn({argv=, env=, cwd=, stdin_pipe=, stdin_inherit=, pty=, rows=, cols=}, cfg, on_change):
 * a local source (pstream.h, mb_pstream_spawn). env: NAME → value (nil inherits ours). */
static int l_pstream_spawn(lua_State *L) {
  struct mb_pst_config cfg;
  pst_config(L, "pstream_spawn", &cfg);
  cfg.proto = 0; /* a local process writes frames, never envd messages */
  struct mb_pst_spawn sp;
  memset(&sp, 0, sizeof sp);
  sp.argv = (const char *const *)mb_lua_argv(L, 1, "pstream_spawn");
  sp.env = (const char *const *)mb_lua_env(L, 1, "pstream_spawn");
  sp.cwd = mb_lua_opt_str(L, 1, "pstream_spawn", "cwd", NULL);
  sp.stdin_pipe = mb_lua_opt_bool(L, 1, "pstream_spawn", "stdin_pipe", 0);
  sp.stdin_inherit = mb_lua_opt_bool(L, 1, "pstream_spawn", "stdin_inherit", 0);
  sp.pty = mb_lua_opt_bool(L, 1, "pstream_spawn", "pty", 0);
  sp.rows = (unsigned short)mb_lua_opt_int(L, 1, "pstream_spawn", "rows", 24, 1, 65535);
  sp.cols = (unsigned short)mb_lua_opt_int(L, 1, "pstream_spawn", "cols", 80, 1, 65535);
  struct mb_lua_pst *u = pst_new(L, &cfg);
  int ui = lua_gettop(L);
  struct mb_error err;
  mb_error_clear(&err);
  int rc = mb_pstream_spawn(mb_lua_host_loop(u->h), &sp, &cfg, mb_pst_changed, u, &u->s, &err);
  return pst_started(L, u, ui, rc, &err);
}

static int pst_pid(lua_State *L) {
  lua_pushinteger(L, mb_pstream_pid(mb_check_pst(L)->s));
  return 1;
}

static int signum_of(lua_State *L, int idx) {
  static const char *const names[] = {"SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1",
                                      "SIGUSR2", "SIGSTOP", "SIGCONT", "SIGTSTP", NULL};
  static const int nums[] = {SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP, SIGCONT, SIGTSTP};
  if (lua_type(L, idx) == LUA_TNUMBER) return (int)luaL_checkinteger(L, idx);
  return nums[luaL_checkoption(L, idx, NULL, names)];
}

/* s:kill(sig) → true | nil, err  (local sources) */
static int pst_kill(lua_State *L) {
  struct mb_lua_pst *u = mb_check_pst(L);
  struct mb_error err;
  return mb_lua_push_result(L, mb_pstream_kill(u->s, signum_of(L, 2), &err), &err);
}

/* s:write(data, max_pending) → true | nil, err: queued for the process's stdin or PTY */
static int pst_write(lua_State *L) {
  struct mb_lua_pst *u = mb_check_pst(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  lua_Integer max = mb_lua_opt_arg_int(L, 3, "write", "max_pending", 1 << 20, 1, LUA_MAXINTEGER);
  struct mb_error err;
  return mb_lua_push_result(L, mb_pstream_write(u->s, p, n, (size_t)max, &err), &err);
}

static int pst_write_pending(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_pstream_write_pending(mb_check_pst(L)->s));
  return 1;
}

static int pst_want_write(lua_State *L) {
  mb_pstream_want_write(mb_check_pst(L)->s);
  return 0;
}

static int pst_close_input(lua_State *L) {
  struct mb_error err;
  return mb_lua_push_result(L, mb_pstream_close_input(mb_check_pst(L)->s, &err), &err);
}

static int pst_resize(lua_State *L) {
  struct mb_lua_pst *u = mb_check_pst(L);
  lua_Integer rows = mb_lua_check_int(L, 2, "resize", "rows", 1, 65535);
  lua_Integer cols = mb_lua_check_int(L, 3, "resize", "cols", 1, 65535);
  struct mb_error err;
  return mb_lua_push_result(L, mb_pstream_resize(u->s, (unsigned)rows, (unsigned)cols, &err), &err);
}

static int pst_facts(lua_State *L) {
  struct mb_lua_pst *u = mb_check_pst(L);
  struct mb_ps_fact f[MB_PS_FACTS_MAX + 2];
  return mb_lua_push_facts(L, f, mb_pstream_take_facts(u->s, f, MB_PS_FACTS_MAX + 2));
}

static int pst_closed(lua_State *L) {
  struct mb_lua_pst *u = mb_check_pst(L);
  const struct mb_error *e;
  if (!mb_pstream_closed(u->s, &e)) { lua_pushboolean(L, 0); return 1; }
  lua_pushboolean(L, 1);
  if (e->code == MB_OK) return 1;
  mb_lua_push_mberror(L, e);
  lua_remove(L, -2); /* the nil */
  return 2;
}

static int pst_status(lua_State *L) {
  long st = mb_pstream_status(mb_check_pst(L)->s);
  if (!st) return 0;
  lua_pushinteger(L, st);
  return 1;
}

static int pst_error_body(lua_State *L) {
  size_t n;
  const char *p = mb_pstream_error_body(mb_check_pst(L)->s, &n);
  lua_pushlstring(L, p, n);
  return 1;
}

static int pst_read(lua_State *L) {
  struct mb_lua_pst *u = mb_check_pst(L);
  int k = mb_lua_check_stream(L, 2);
  lua_Integer max = mb_lua_opt_arg_int(L, 3, "read", "max", MB_READ_MAX_DEFAULT, 1, LUA_MAXINTEGER);
  size_t n;
  const unsigned char *p = mb_pstream_peek(u->s, k, &n);
  if (n == 0) {
    if (mb_pstream_eof(u->s, k)) lua_pushnil(L);
    else lua_pushboolean(L, 0);
    return 1;
  }
  if ((lua_Unsigned)max < n) n = (size_t)max;
  lua_pushlstring(L, (const char *)p, n);
  mb_pstream_consume(u->s, k, n); /* may resume the transfer: p is not used after this */
  return 1;
}

static int pst_want(lua_State *L) {
  mb_pstream_want(mb_check_pst(L)->s, mb_lua_check_stream(L, 2));
  return 0;
}

static int pst_discard(lua_State *L) {
  struct mb_lua_pst *u = mb_check_pst(L);
  int k = mb_lua_check_stream(L, 2);
  mb_pstream_discard(u->s, k);
  u->fds[k] = -1;
  return 0;
}

static int pst_seal(lua_State *L) {
  mb_pstream_seal(mb_check_pst(L)->s, mb_lua_check_stream(L, 2));
  return 0;
}

static int pst_cancel(lua_State *L) {
  mb_pstream_cancel(mb_check_pst(L)->s);
  return 0;
}

static int pst_info(lua_State *L) {
  mb_http_info i;
  mb_pstream_info(mb_check_pst(L)->s, &i);
  lua_createtable(L, 0, 4);
  mb_lua_set_int(L, "received", (lua_Integer)i.received);
  mb_lua_set_int(L, "pauses", (lua_Integer)i.pauses);
  mb_lua_set_int(L, "max_buffered", (lua_Integer)i.max_buffered);
  lua_pushboolean(L, i.paused);
  lua_setfield(L, -2, "paused");
  return 1;
}

static int pst_close(lua_State *L) {
  struct mb_lua_pst *u = luaL_checkudata(L, 1, MB_PST_MT);
  mb_pstream_free(u->s);
  u->s = NULL;
  if (u->cb_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, u->cb_ref);
  u->cb_ref = LUA_NOREF;
  return 0;
}

void mb_lua_open_pstream(lua_State *L) {
  static const luaL_Reg pst[] = {
    {"facts", pst_facts}, {"closed", pst_closed}, {"status", pst_status},
    {"error_body", pst_error_body}, {"read", pst_read}, {"want", pst_want},
    {"discard", pst_discard}, {"seal", pst_seal}, {"cancel", pst_cancel}, {"read_from", mb_lua_dec_read_from},
    {"total", mb_lua_dec_total}, {"diag", mb_lua_dec_diag}, {"info", pst_info}, {"close", pst_close},
    {"pid", pst_pid}, {"kill", pst_kill}, {"write", pst_write}, {"write_pending", pst_write_pending},
    {"want_write", pst_want_write}, {"close_input", pst_close_input}, {"resize", pst_resize},
    {NULL, NULL}};
  static const luaL_Reg pst_meta[] = {{"__gc", pst_close}, {"__close", pst_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_PST_MT, pst, pst_meta);
  lua_pushcfunction(L, l_pstream);
  lua_setfield(L, -2, "pstream");
  lua_pushcfunction(L, l_pstream_spawn);
  lua_setfield(L, -2, "pstream_spawn");
}
