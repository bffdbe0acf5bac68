/* lua_moonbox.h — how the Lua binding files register into the `moonbox.core` table.
 * Each lua_<concept>.c defines one mb_lua_open_<concept>(L): it sets its functions as fields of
 * the table at the top of the stack and leaves the stack as it found it. lua_moonbox.c creates
 * the table and calls them all (luaopen_moonbox_core). */
#ifndef MB_LUA_MOONBOX_H
#define MB_LUA_MOONBOX_H
#include <lua.h>
#include <lauxlib.h>
#include "errors.h"

void mb_lua_open_codec(lua_State *L);   /* lua_codec.c: envelopes, frames, base64, sha256 */
void mb_lua_open_loop(lua_State *L);    /* lua_loop.c: now, timers, run */
void mb_lua_open_http(lua_State *L);    /* lua_http.c: requests and streams */
void mb_lua_open_proc(lua_State *L);    /* lua_proc.c: host child processes (uv_spawn) */
void mb_lua_open_procstream(lua_State *L); /* lua_procstream.c: mbwrap process streams in C */
int luaopen_moonbox_core(lua_State *L);

/* lua_util.c: helpers for the binding files. Operational failures are reported either as
 * nil, err (err = {code=, message=} with the shared "moonbox.error" metatable, whose __tostring
 * gives "code: message") or as nil, message, code; each returns how many values it pushed. */
int mb_lua_push_error(lua_State *L, const char *code, const char *message); /* nil, err */
int mb_lua_push_mberror(lua_State *L, const struct mb_error *e); /* nil, err (mb_errcode, message) */
int mb_lua_push_fail(lua_State *L, int code, const char *message); /* nil, message, mb_errcode(code) */
/* Registers metatable `name` once: a table of `methods` as its __index, `meta` (__gc, __close...)
 * set on it directly. Leaves the stack as it found it. */
void mb_lua_new_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta);
#endif
