/* lua_moonbox.c — luaopen_moonbox_core: the `moonbox.core` table, filled by each lua_*.c
 * (and core.version, core.error_codes). The embedding API that sets a Lua state up is runtime.c. */
#include "lua_moonbox.h"
#include "errors.h"
#include "moonbox.h"
#include "moonbox_protocol.h"
#include <signal.h>

/* core.error_codes: the list of error_codes.def in its order, { name =, meaning =, modules = }
 * each; a family (codes made at run time) is { name = "TOOL_*", prefix = "TOOL_", family = true }. */
static void add_code(lua_State *L, const char *name, const char *prefix, const char *meaning, const char *modules) {
  lua_createtable(L, 0, 5);
  mb_lua_set_str(L, "name", name);
  mb_lua_set_str(L, "meaning", meaning);
  mb_lua_set_str(L, "modules", modules);
  if (prefix) {
    mb_lua_set_str(L, "prefix", prefix);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "family");
  }
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
}

static void push_error_codes(lua_State *L) {
  lua_newtable(L);
#define MB_ERROR(name, meaning, modules) add_code(L, #name, NULL, meaning, modules);
#define MB_ERROR_FAMILY(prefix, meaning, modules) add_code(L, #prefix "_*", #prefix "_", meaning, modules);
#include "error_codes.def"
}

/* core.limits: the protocol constants (moonbox_protocol.h), for Lua to use rather than copy */
static void push_limits(lua_State *L) {
  lua_createtable(L, 0, 5);
  mb_lua_set_int(L, "frame_data_max", MB_FRAME_DATA_MAX);
  mb_lua_set_int(L, "frame_line_min", MB_FRAME_LINE_MIN_LIMIT);
  mb_lua_set_int(L, "frame_line_default", MB_FRAME_LINE_DEFAULT);
  mb_lua_set_int(L, "max_message", MB_PROC_MAX_MESSAGE);
  mb_lua_set_int(L, "stdin_arg_max", MB_STDIN_ARG_MAX);
}

int luaopen_moonbox_core(lua_State *L) {
  /* A reader that went away (a child's stdin, a socket) must be an EPIPE error, never a
   * signal that kills the host: libuv leaves SIGPIPE to the application. Only a default
   * disposition is changed (an embedder's own choice stands); children get the default back
   * (libuv resets dispositions in every child, mbwrap in every program it runs). */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  lua_newtable(L);
  mb_lua_open_codec(L);
  mb_lua_open_envdec(L);
  mb_lua_open_framedec(L);
  mb_lua_open_rpc(L);
  mb_lua_open_loop(L);
  mb_lua_open_http(L);
  mb_lua_open_proc(L);
  mb_lua_open_pstream(L);
  mb_lua_open_procstream(L);
  mb_lua_open_host(L);
  mb_lua_open_fd(L);
  mb_lua_open_signal(L);
  mb_lua_open_resolve(L);
  mb_lua_open_daemon(L);
  mb_lua_open_egress(L);
  mb_lua_open_tty(L);
  mb_lua_open_sync(L);
  mb_lua_open_ignore(L);
  lua_pushliteral(L, MOONBOX_VERSION);
  lua_setfield(L, -2, "version");
  push_limits(L);
  lua_setfield(L, -2, "limits");
  push_error_codes(L);
  lua_setfield(L, -2, "error_codes");
  return 1;
}

