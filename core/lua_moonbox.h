/* lua_moonbox.h — how the Lua binding files register into the `moonbox.core` table.
 * Each lua_<concept>.c defines one mb_lua_open_<concept>(L): it sets its functions as fields of
 * the table at the top of the stack and leaves the stack as it found it. lua_moonbox.c creates
 * the table and calls them all (luaopen_moonbox_core). */
#ifndef MB_LUA_MOONBOX_H
#define MB_LUA_MOONBOX_H
#include <lua.h>
#include <lauxlib.h>

void mb_lua_open_codec(lua_State *L);   /* lua_codec.c: envelopes, frames, base64, sha256 */
void mb_lua_open_loop(lua_State *L);    /* lua_loop.c: now, timers, run */
void mb_lua_open_http(lua_State *L);    /* lua_http.c: requests and streams */
void mb_lua_open_proc(lua_State *L);    /* lua_proc.c: host child processes (uv_spawn) */
void mb_lua_open_procstream(lua_State *L); /* lua_procstream.c: mbwrap process streams in C */
int luaopen_moonbox_core(lua_State *L);
#endif
