/* lua_moonbox.h — how the Lua binding files register into the `moonbox.core` table.
 * Each lua_<concept>.c defines one mb_lua_open_<concept>(L): it sets its functions as fields of
 * the table at the top of the stack and leaves the stack as it found it. lua_moonbox.c creates
 * the table and calls them all (luaopen_moonbox_core). */
#ifndef MB_LUA_MOONBOX_H
#define MB_LUA_MOONBOX_H
#include <lua.h>
#include <lauxlib.h>
#include "errors.h"
#include "loop.h"
#include "moonbox.h"   /* the public half: mb_lua_use_loop, luaopen_moonbox_core */

/* lua_loop.c: the host of a Lua state (one per state, in its registry): its loop and the
 * plumbing that calls Lua callbacks in protected mode on the thread that drives the loop. */
typedef struct mb_lua_host mb_lua_host;
/* The host of L (created on first use, closed with the state). */
mb_lua_host *mb_lua_host_of(lua_State *L);
mb_loop *mb_lua_host_loop(mb_lua_host *h);
/* Calls the Lua function at registry ref (no arguments) in protected mode on the thread that
 * drives the loop (inside core.run), or on the state's main thread when the host is external
 * (an embedder runs the loop itself: mb_lua_host_set_external). An error is recorded, stops
 * the loop, and is returned by the next core.run. Otherwise does nothing. */
void mb_lua_host_call(mb_lua_host *h, int ref);
void mb_lua_host_set_external(lua_State *L, int on);

void mb_lua_open_codec(lua_State *L);   /* lua_codec.c: envelopes, base64, sha256, signatures, codes */
void mb_lua_open_envdec(lua_State *L);  /* lua_envdec.c: the envelope decoder */
void mb_lua_open_framedec(lua_State *L); /* lua_framedec.c: the frame decoder */
void mb_lua_open_rpc(lua_State *L);     /* lua_rpc.c: envd's messages in the binary codec */
void mb_lua_open_loop(lua_State *L);    /* lua_loop.c: now, timers, run */
void mb_lua_open_http(lua_State *L);    /* lua_http.c: requests and streams */
void mb_lua_open_proc(lua_State *L);    /* lua_proc.c: host child processes (uv_spawn) */
void mb_lua_open_pstream(lua_State *L);    /* lua_pstream.c: a process's stream, loop-driven, decoded in C */
void mb_lua_open_procstream(lua_State *L); /* lua_procstream.c: the bare process-stream decoder */
void mb_lua_open_host(lua_State *L);    /* lua_host.c: pid, executable, environment, memory, loop */
void mb_lua_open_fd(lua_State *L);      /* lua_fd.c: owned descriptors: lock files, secret pipes */
void mb_lua_open_signal(lua_State *L);  /* lua_signal.c: signal watches */
void mb_lua_open_resolve(lua_State *L); /* lua_resolve.c: the host's resolver */
void mb_lua_open_daemon(lua_State *L);  /* lua_daemon.c: a detached background program, its files and pid */
void mb_lua_open_egress(lua_State *L);  /* lua_egress.c: sandboxd's egress decision (core.egress) */
void mb_lua_open_tty(lua_State *L);     /* lua_tty.c: the host terminal: raw mode and back, its size */

/* lua_util.c: helpers for the binding files.
 * Every operational failure is `nil, err`: err is a table {code=, message=, ...} with the one
 * error metatable of moonbox ("moonbox.error", shared with lua/moonbox/errors.lua: __tostring
 * gives "CODE: message"). Each push function returns how many values it pushed. */
void mb_lua_error_mt(lua_State *L);                                          /* pushes it */
int mb_lua_push_error(lua_State *L, const char *code, const char *message); /* nil, err */
int mb_lua_push_mberror(lua_State *L, const struct mb_error *e); /* nil, err (mb_errcode, message) */
/* Registers metatable `name` once: a table of `methods` as its __index, `meta` (__gc, __close...)
 * set on it directly. Leaves the stack as it found it. */
void mb_lua_new_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta);
/* A new object of class `mt` pushed: a userdata of `size` bytes, all zero, with nuv user values. */
void *mb_lua_new_object(lua_State *L, size_t size, int nuv, const char *mt);
/* A handle: an object of class mt whose userdata is one pointer to what it binds, NULL once
 * closed. new pushes one (its pointer NULL: the caller sets *slot); check → the pointer of the
 * one at idx, or raises "<what> is closed"; take → the pointer, the object closed (__gc, close). */
void **mb_lua_new_handle(lua_State *L, int nuv, const char *mt);
void *mb_lua_check_handle(lua_State *L, int idx, const char *mt, const char *what);
void *mb_lua_take_handle(lua_State *L, int idx, const char *mt);
/* What a call that fails with *e (failed != 0) returns to Lua: true, or nil, err. */
int mb_lua_push_result(lua_State *L, int failed, const struct mb_error *e);
/* t[k] = v for the table at the top of the stack. */
void mb_lua_set_int(lua_State *L, const char *k, lua_Integer v);
void mb_lua_set_str(lua_State *L, const char *k, const char *v);

/* lua_args.c: the argument readers every binding uses. `fn` names the binding's function in the
 * errors, which raise ("spawn: argv[2] must be a string", "procstream: max_line must be an
 * integer from 1 to 67108864"). Counts are checked before anything is allocated; arrays live in
 * userdata on the Lua stack, so a raise leaks nothing. */
#define MB_LUA_MAX_ARGS 4096   /* argv entries, for every binding that starts a program */
#define MB_LUA_MAX_ENV 65536   /* environment entries */
#define MB_LUA_MAX_FDS 8       /* descriptors handed to a child (inherit_fds, fds) */
/* An integer in min..max: field of table t (def when absent), positional argument idx
 * (required), or positional argument idx (def when none or nil). def is not range-checked. */
lua_Integer mb_lua_opt_int(lua_State *L, int t, const char *fn, const char *field, lua_Integer def,
                           lua_Integer min, lua_Integer max);
lua_Integer mb_lua_check_int(lua_State *L, int idx, const char *fn, const char *what, lua_Integer min, lua_Integer max);
lua_Integer mb_lua_opt_arg_int(lua_State *L, int idx, const char *fn, const char *what, lua_Integer def,
                               lua_Integer min, lua_Integer max);
/* Field of table t: a boolean (strictly), def when absent. */
int mb_lua_opt_bool(lua_State *L, int t, const char *fn, const char *field, int def);
/* Field of table t: a string or absent. Pushes one value (the string, or nil) that keeps the
 * string alive; → the string (*len its length when len) or NULL. */
const char *mb_lua_opt_str(lua_State *L, int t, const char *fn, const char *field, size_t *len);
/* The list of strings at idx (`what` in errors), min..max entries: out[0..n-1] (and lens[i] when
 * lens), out[n] = NULL, so out has room for max + 1. The strings live as long as the list. → n */
size_t mb_lua_check_strings(lua_State *L, int idx, const char *fn, const char *what, size_t min, size_t max,
                            char **out, size_t *lens);
/* Field argv of table t: 1..MB_LUA_MAX_ARGS strings. Pushes one value, a userdata that holds the
 * NULL-terminated array and keeps its strings alive; → the array. */
char **mb_lua_argv(lua_State *L, int t, const char *fn);
/* Field env of table t: absent (→ NULL; pushes nil) or a table NAME = value of strings, at most
 * MB_LUA_MAX_ENV. Pushes one value, a userdata that holds the NULL-terminated "NAME=VALUE"
 * array and keeps its strings alive; → the array. */
char **mb_lua_env(lua_State *L, int t, const char *fn);
/* Field of table t: absent or a list of at most MB_LUA_MAX_FDS descriptors (0..INT_MAX) into
 * out. → how many. Leaves the stack as it found it. */
size_t mb_lua_opt_fds(lua_State *L, int t, const char *fn, const char *field, int *out);

/* lua_http.c: an HTTP options table (url, method, headers, body, body_file, body_fd, stream,
 * max_bytes, buffer_bytes, timeout_ms, connect_timeout_ms, idle_timeout_ms, ca_file, connect_to) read into *o. Strings stay
 * on the Lua stack (the caller keeps them there until the request has started; `body` as a
 * list of strings must be anchored for the request's whole life when b->body_table is set).
 * Bad arguments raise; → 0, or -1 with nil, err pushed (a body_file that cannot be opened). */
#include "http.h"
#define MB_LUA_HTTP_MAX_PARTS 64
#define MB_HTTP_MAX_REQ_HEADERS 256
struct mb_lua_http_bufs {
  const char *lines[MB_HTTP_MAX_REQ_HEADERS];
  struct mb_http_part parts[MB_LUA_HTTP_MAX_PARTS];
  char *connect_to[MB_HTTP_MAX_CONNECT_TO + 1];
  int body_table;
  int source_ok;                /* set by the caller: body_source accepted (it anchors it) */
  struct mb_http_source source; /* body_source's, when given */
};
int mb_lua_http_opts(lua_State *L, int t, mb_http_opts *o, struct mb_lua_http_bufs *b);

/* lua_procstream.c: what the two process-stream classes share (moonbox.procstream, the bare
 * decoder, and moonbox.pstream of lua_pstream.c, whose decoder is a procstream). */
struct mb_ps_fact;
struct mb_procstream;
/* Argument arg: "stdout" (0) or "stderr" (1). */
int mb_lua_check_stream(lua_State *L, int arg);
/* A sink spec in field `name` of table t: "discard" | queue_name | {tail=n} | {fd=n} (fd only
 * when fd_ok). → kind: 0 discard, 1 queue, 2 tail (*max), 3 fd (*fd). Bad specs raise. */
int mb_lua_sink_spec(lua_State *L, int t, const char *fn, const char *name, const char *queue_name, int fd_ok,
                     size_t *max, int *fd);
/* The facts a take function handed out, pushed as one Lua list. → 1 */
int mb_lua_push_facts(lua_State *L, const struct mb_ps_fact *f, size_t n);
/* The decoder methods of both classes (argument 1 either object): read_from, total, diag. */
int mb_lua_dec_read_from(lua_State *L);
int mb_lua_dec_total(lua_State *L);
int mb_lua_dec_diag(lua_State *L);
/* lua_pstream.c: the decoder of the process stream at idx (raises when it is closed), or NULL
 * when idx holds no process stream. */
const struct mb_procstream *mb_lua_pstream_decoder(lua_State *L, int idx);

/* lua_sync.c: the host side of workspace sync (core.sync_root). A pack at idx
 * as an HTTP body source (the caller anchors the pack for the request's life). → 0, or -1 when
 * idx is not an open pack. */
void mb_lua_open_sync(lua_State *L);
void mb_lua_open_ignore(lua_State *L); /* lua_ignore.c: rule sets (core.ignore_new) */
int mb_lua_pack_source(lua_State *L, int idx, struct mb_http_source *out);
#endif
