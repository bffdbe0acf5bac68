/* lua_moonbox.c — luaopen_moonbox_core: the `moonbox.core` table, filled by each lua_*.c
 * (and core.version). The embedding API that sets a Lua state up is runtime.c. */
#include "lua_moonbox.h"
#include "moonbox.h"

int luaopen_moonbox_core(lua_State *L) {
  lua_newtable(L);
  mb_lua_open_codec(L);
  mb_lua_open_loop(L);
  mb_lua_open_http(L);
  mb_lua_open_proc(L);
  mb_lua_open_procstream(L);
  mb_lua_open_host(L);
  lua_pushliteral(L, MOONBOX_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}

