/* lua_args.c — the one set of argument readers the binding files share (declared in
 * lua_moonbox.h): lists of strings (argv), environments, descriptor lists, integers in a range,
 * strict booleans and optional strings, read from an options table or from a positional
 * argument. A bad argument raises an error that names the function and the field ("spawn:
 * argv[2] must be a string"). Counts are checked before anything is allocated, and every array
 * lives in a userdata on the Lua stack: a raise leaks nothing and the collector frees it. */
#include "lua_moonbox.h"
#include <limits.h>
#include <stdint.h>

/* "<fn>: <what> must be <an integer in min..max, said plainly>" */
static int range_error(lua_State *L, const char *fn, const char *what, lua_Integer min, lua_Integer max) {
  if (max == LUA_MAXINTEGER) {
    if (min == 0) return luaL_error(L, "%s: %s must be a non-negative integer", fn, what);
    if (min == 1) return luaL_error(L, "%s: %s must be a positive integer", fn, what);
    return luaL_error(L, "%s: %s must be an integer >= %I", fn, what, min);
  }
  return luaL_error(L, "%s: %s must be an integer from %I to %I", fn, what, min, max);
}

/* The integer at idx in min..max, else the error. */
static lua_Integer int_at(lua_State *L, int idx, const char *fn, const char *what, lua_Integer min, lua_Integer max) {
  int ok;
  lua_Integer v = lua_tointegerx(L, idx, &ok);
  if (!ok || v < min || v > max) range_error(L, fn, what, min, max);
  return v;
}

lua_Integer mb_lua_opt_int(lua_State *L, int t, const char *fn, const char *field, lua_Integer def,
                           lua_Integer min, lua_Integer max) {
  lua_getfield(L, t, field);
  lua_Integer v = lua_isnil(L, -1) ? def : int_at(L, -1, fn, field, min, max);
  lua_pop(L, 1);
  return v;
}

lua_Integer mb_lua_check_int(lua_State *L, int idx, const char *fn, const char *what, lua_Integer min, lua_Integer max) {
  return int_at(L, idx, fn, what, min, max);
}

lua_Integer mb_lua_opt_arg_int(lua_State *L, int idx, const char *fn, const char *what, lua_Integer def,
                               lua_Integer min, lua_Integer max) {
  return lua_isnoneornil(L, idx) ? def : int_at(L, idx, fn, what, min, max);
}

int mb_lua_opt_bool(lua_State *L, int t, const char *fn, const char *field, int def) {
  lua_getfield(L, t, field);
  int v = def;
  if (lua_isboolean(L, -1)) v = lua_toboolean(L, -1);
  else if (!lua_isnil(L, -1)) luaL_error(L, "%s: %s must be a boolean", fn, field);
  lua_pop(L, 1);
  return v;
}

const char *mb_lua_opt_str(lua_State *L, int t, const char *fn, const char *field, size_t *len) {
  lua_getfield(L, t, field);
  if (lua_isnil(L, -1)) {
    if (len) *len = 0;
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "%s: %s must be a string", fn, field);
  return lua_tolstring(L, -1, len);
}

/* The length of the list at idx, checked to be min..max (a table first). */
static size_t list_len(lua_State *L, int idx, const char *fn, const char *what, const char *of, size_t min, size_t max) {
  if (!lua_istable(L, idx)) luaL_error(L, "%s: %s must be a list of %s", fn, what, of);
  lua_Integer n = luaL_len(L, idx);
  if (n < (lua_Integer)min || (lua_Unsigned)n > (lua_Unsigned)max) {
    if (min == 0) luaL_error(L, "%s: %s may have at most %d entries", fn, what, (int)max);
    luaL_error(L, "%s: %s needs %d..%d entries", fn, what, (int)min, (int)max);
  }
  return (size_t)n;
}

size_t mb_lua_check_strings(lua_State *L, int idx, const char *fn, const char *what, size_t min, size_t max,
                            char **out, size_t *lens) {
  idx = lua_absindex(L, idx);
  size_t n = list_len(L, idx, fn, what, "strings", min, max);
  for (size_t i = 0; i < n; i++) {
    if (lua_rawgeti(L, idx, (lua_Integer)i + 1) != LUA_TSTRING)
      luaL_error(L, "%s: %s[%d] must be a string", fn, what, (int)i + 1);
    out[i] = (char *)lua_tolstring(L, -1, lens ? &lens[i] : NULL); /* the list keeps it alive */
    lua_pop(L, 1);
  }
  out[n] = NULL;
  return n;
}

char **mb_lua_argv(lua_State *L, int t, const char *fn) {
  t = lua_absindex(L, t);
  lua_getfield(L, t, "argv");
  size_t n = list_len(L, -1, fn, "argv", "strings", 1, MB_LUA_MAX_ARGS);
  char **a = lua_newuserdatauv(L, sizeof(char *) * (n + 1), 1);
  lua_insert(L, -2);
  lua_pushvalue(L, -1);
  lua_setiuservalue(L, -3, 1); /* the array keeps its strings (the list) alive */
  mb_lua_check_strings(L, -1, fn, "argv", 1, MB_LUA_MAX_ARGS, a, NULL);
  lua_pop(L, 1);
  return a;
}

char **mb_lua_env(lua_State *L, int t, const char *fn) {
  t = lua_absindex(L, t);
  lua_getfield(L, t, "env");
  if (lua_isnil(L, -1)) return NULL;
  if (!lua_istable(L, -1)) luaL_error(L, "%s: env must be a table name → value", fn);
  int et = lua_gettop(L);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, et)) {
    lua_pop(L, 1);
    if (++n > MB_LUA_MAX_ENV) luaL_error(L, "%s: env has more than %d entries", fn, MB_LUA_MAX_ENV);
  }
  char **env = lua_newuserdatauv(L, sizeof(char *) * (n + 1), 1);
  lua_createtable(L, (int)n, 0); /* anchors the "NAME=VALUE" strings */
  lua_pushvalue(L, -1);
  lua_setiuservalue(L, -3, 1);
  int anchor = lua_gettop(L);
  size_t i = 0;
  lua_pushnil(L);
  while (lua_next(L, et)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: env entries must be strings", fn);
    if (i == n) luaL_error(L, "%s: env changed while read", fn); /* only a metamethod could */
    env[i++] = (char *)lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
    lua_rawseti(L, anchor, (lua_Integer)i);
    lua_pop(L, 1);
  }
  env[i] = NULL;
  lua_pop(L, 1);      /* the anchor: the userdata holds it */
  lua_replace(L, et); /* the userdata where the table was */
  return env;
}

size_t mb_lua_opt_fds(lua_State *L, int t, const char *fn, const char *field, int *out) {
  lua_getfield(L, t, field);
  size_t n = 0;
  if (!lua_isnil(L, -1)) {
    n = list_len(L, -1, fn, field, "descriptors", 0, MB_LUA_MAX_FDS);
    for (size_t i = 0; i < n; i++) {
      lua_rawgeti(L, -1, (lua_Integer)i + 1);
      int ok;
      lua_Integer fd = lua_tointegerx(L, -1, &ok);
      if (!ok || fd < 0 || fd > INT_MAX) luaL_error(L, "%s: %s[%d] must be a descriptor", fn, field, (int)i + 1);
      out[i] = (int)fd;
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return n;
}
