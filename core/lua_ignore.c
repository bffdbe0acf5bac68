/* lua_ignore.c — class `moonbox.ignore`: a rule set (ignore.h), the same matcher mbwrap runs in
 * the sandbox, for workspace sync's excludes and .gitignore files.
 *   core.ignore_new(max_bytes) → rules;  rules:push(base, text, "caller" | "file") → true | nil, err;
 *     rules:match(path, is_dir) → bool;  rules:depth(); rules:pop_to(n) */
#include "lua_moonbox.h"
#include "ignore.h"

#define IGNORE_MT "moonbox.ignore"

static int l_ignore_new(lua_State *L) {
  lua_Integer max = mb_lua_opt_arg_int(L, 1, "ignore_new", "max_bytes", 1 << 20, 1, LUA_MAXINTEGER);
  void **g = mb_lua_new_handle(L, 0, IGNORE_MT);
  *g = mb_ignore_new((size_t)max);
  if (!*g) return mb_lua_push_error(L, mb_code_name(MB_CODE_SYNC_TOO_LARGE), "the rule set's limit is too small (or out of memory)");
  return 1;
}

static mb_ignore *check_ignore(lua_State *L) { return mb_lua_check_handle(L, 1, IGNORE_MT, "rule set"); }

static int ignore_push(lua_State *L) {
  mb_ignore *g = check_ignore(L);
  size_t bl, tl;
  const char *base = luaL_checklstring(L, 2, &bl), *text = luaL_checklstring(L, 3, &tl);
  static const char *const kinds[] = {"caller", "file", NULL};
  int kind = luaL_checkoption(L, 4, "file", kinds) == 0 ? MB_IGNORE_CALLER : MB_IGNORE_FILE;
  int why = 0;
  if (mb_ignore_push(g, base, bl, text, tl, kind, &why) < 0)
    return mb_lua_push_error(L, mb_code_name(why == 1 ? MB_CODE_SYNC_TOO_LARGE : MB_CODE_SYNC_NOMEM), why == 1 ? "rules over the limit" : "out of memory");
  lua_pushboolean(L, 1);
  return 1;
}

static int ignore_match(lua_State *L) {
  mb_ignore *g = check_ignore(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  lua_pushboolean(L, mb_ignore_match(g, p, n, lua_toboolean(L, 3)));
  return 1;
}

static int ignore_depth(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_ignore_depth(check_ignore(L)));
  return 1;
}

static int ignore_pop_to(lua_State *L) {
  mb_ignore *g = check_ignore(L);
  mb_ignore_pop_to(g, (size_t)mb_lua_check_int(L, 2, "ignore", "depth", 0, LUA_MAXINTEGER));
  return 0;
}

static int ignore_gc(lua_State *L) {
  mb_ignore_free(mb_lua_take_handle(L, 1, IGNORE_MT));
  return 0;
}

void mb_lua_open_ignore(lua_State *L) {
  static const luaL_Reg m[] = {{"push", ignore_push}, {"match", ignore_match}, {"depth", ignore_depth},
                               {"pop_to", ignore_pop_to}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", ignore_gc}, {NULL, NULL}};
  mb_lua_new_class(L, IGNORE_MT, m, meta);
  lua_pushcfunction(L, l_ignore_new);
  lua_setfield(L, -2, "ignore_new");
}
