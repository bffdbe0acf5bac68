/* lua_moonbox.c — luaopen_moonbox_core: the `moonbox.core` table, filled by each lua_*.c
 * (and core.version). The embedding API that sets a Lua state up is runtime.c. */
#include "lua_moonbox.h"
#include "moonbox.h"
#include <signal.h>

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
  return 1;
}

