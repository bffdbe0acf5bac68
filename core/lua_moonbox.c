/* lua_moonbox.c — luaopen_moonbox_core: the `moonbox.core` table, filled by each lua_*.c
 * (and core.version, core.error_codes). The embedding API that sets a Lua state up is runtime.c. */
#include "lua_moonbox.h"
#include "errors.h"
#include "moonbox.h"
#include <signal.h>

/* core.error_codes: the list of error_codes.def in its order, { name =, meaning =, modules = }
 * each; a family (codes made at run time) is { name = "TOOL_*", prefix = "TOOL_", family = true }. */
static void add_code(lua_State *L, const char *name, const char *prefix, const char *meaning, const char *modules) {
  lua_createtable(L, 0, 5);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, meaning);
  lua_setfield(L, -2, "meaning");
  lua_pushstring(L, modules);
  lua_setfield(L, -2, "modules");
  if (prefix) {
    lua_pushstring(L, prefix);
    lua_setfield(L, -2, "prefix");
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

int luaopen_moonbox_core(lua_State *L) {
  /* A reader that went away (a child's stdin, a socket) must be an EPIPE error, never a
   * signal that kills the host: libuv leaves SIGPIPE to the application. Only a default
   * disposition is changed (an embedder's own choice stands); children get the default back
   * (libuv resets dispositions in every child, mbwrap in every program it runs). */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  lua_newtable(L);
  mb_lua_open_codec(L);
  mb_lua_open_rpc(L);
  mb_lua_open_loop(L);
  mb_lua_open_http(L);
  mb_lua_open_proc(L);
  mb_lua_open_procstream(L);
  mb_lua_open_host(L);
  mb_lua_open_daemon(L);
  mb_lua_open_egress(L);
  mb_lua_open_tty(L);
  mb_lua_open_sync(L);
  lua_pushliteral(L, MOONBOX_VERSION);
  lua_setfield(L, -2, "version");
  push_error_codes(L);
  lua_setfield(L, -2, "error_codes");
  return 1;
}

