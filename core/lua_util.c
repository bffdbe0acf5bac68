/* lua_util.c — helpers shared by the binding files (declared in lua_moonbox.h): the one error
 * type, class metatables and table fields. */
#include "lua_moonbox.h"
#include <string.h>

#define MB_ERROR_MT "moonbox.error"

static int mb_err_tostring(lua_State *L) {
  lua_getfield(L, 1, "code");
  lua_getfield(L, 1, "message");
  lua_pushfstring(L, "%s: %s", luaL_optstring(L, -2, "?"), luaL_optstring(L, -1, ""));
  return 1;
}

/* The one error metatable. Whoever comes first makes it (lua/moonbox/errors.lua makes the same
 * one under the same registry name when it is loaded before the core). */
void mb_lua_error_mt(lua_State *L) {
  if (luaL_newmetatable(L, MB_ERROR_MT)) {
    lua_pushcfunction(L, mb_err_tostring);
    lua_setfield(L, -2, "__tostring");
  }
}

int mb_lua_push_error(lua_State *L, const char *code, const char *message) {
  lua_pushnil(L);
  lua_createtable(L, 0, 2);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  mb_lua_error_mt(L);
  lua_setmetatable(L, -2);
  return 2;
}

int mb_lua_push_mberror(lua_State *L, const struct mb_error *e) {
  return mb_lua_push_error(L, mb_error_code(e), e->message[0] ? e->message : mb_strerror(e->code));
}

void mb_lua_new_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta) {
  if (luaL_newmetatable(L, name)) { /* also sets __name */
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    luaL_setfuncs(L, meta, 0);
  }
  lua_pop(L, 1);
}

void mb_lua_set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

void mb_lua_set_str(lua_State *L, const char *k, const char *v) {
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

void *mb_lua_new_object(lua_State *L, size_t size, int nuv, const char *mt) {
  void *u = lua_newuserdatauv(L, size, nuv);
  memset(u, 0, size);
  luaL_setmetatable(L, mt);
  return u;
}

int mb_lua_push_result(lua_State *L, int failed, const struct mb_error *e) {
  if (failed) return mb_lua_push_mberror(L, e);
  lua_pushboolean(L, 1);
  return 1;
}

void **mb_lua_new_handle(lua_State *L, int nuv, const char *mt) {
  void **slot = mb_lua_new_object(L, sizeof *slot, nuv, mt);
  *slot = NULL;
  return slot;
}

void *mb_lua_check_handle(lua_State *L, int idx, const char *mt, const char *what) {
  void **slot = luaL_checkudata(L, idx, mt);
  if (!*slot) luaL_error(L, "%s is closed", what);
  return *slot;
}

void *mb_lua_take_handle(lua_State *L, int idx, const char *mt) {
  void **slot = luaL_checkudata(L, idx, mt);
  void *p = *slot;
  *slot = NULL;
  return p;
}
