/* lua_sync_scan.c — class `moonbox.sync_scan`: a tree walked in steps (sync.h).
 *   root:scan{ exclude = "lines", gitignore = bool, maxFiles, maxBytes, maxMetaBytes } → scan
 *   scan:step(budget) → true (done) | false | nil, err;  scan:count(), scan:bytes(), scan:excluded()
 *   scan:entries(first, last) → { { path, type, mode, size, mtime_s, mtime_ns, version, link, sha256 } } */
#include "lua_sync.h"

#define SCAN_MT "moonbox.sync_scan"

int mb_lua_sync_scan(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  struct mb_sync_scan_opts o = {0};
  o.max_entries = (uint64_t)mb_lua_opt_int(L, 2, "sync", "maxFiles", 100000, 0, LUA_MAXINTEGER);
  o.max_bytes = (uint64_t)mb_lua_opt_int(L, 2, "sync", "maxBytes", (lua_Integer)4 << 30, 0, LUA_MAXINTEGER);
  o.max_meta = (uint64_t)mb_lua_opt_int(L, 2, "sync", "maxMetaBytes", 64 << 20, 0, LUA_MAXINTEGER);
  o.gitignore = mb_lua_opt_bool(L, 2, "sync", "gitignore", 0);
  o.exclude = mb_lua_opt_str(L, 2, "sync", "exclude", &o.exclude_len); /* stays on the stack */
  void **s = mb_lua_sync_child(L, 1, SCAN_MT);
  struct mb_error e = {0};
  *s = mb_sync_scan_new(r->r, &o, &e);
  if (!*s) return mb_lua_sync_error(L, &e);
  return 1;
}

mb_sync_scan *mb_lua_sync_check_scan(lua_State *L, int i) { return mb_lua_sync_check(L, i, SCAN_MT, "sync scan"); }

static int scan_step(lua_State *L) {
  mb_sync_scan *s = mb_lua_sync_check_scan(L, 1);
  struct mb_error e = {0};
  int rc = mb_sync_scan_step(s, (size_t)mb_lua_sync_count(L, 2, "budget"), &e);
  if (rc < 0) return mb_lua_sync_error(L, &e);
  lua_pushboolean(L, rc == 1);
  return 1;
}

static int scan_count(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_sync_scan_count(mb_lua_sync_check_scan(L, 1)));
  return 1;
}

static int scan_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_sync_scan_bytes(mb_lua_sync_check_scan(L, 1)));
  return 1;
}

static int scan_excluded(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_sync_scan_excluded(mb_lua_sync_check_scan(L, 1)));
  return 1;
}

static int scan_entries(lua_State *L) {
  mb_sync_scan *s = mb_lua_sync_check_scan(L, 1);
  lua_Integer n = (lua_Integer)mb_sync_scan_count(s);
  lua_Integer first = luaL_optinteger(L, 2, 1), last = luaL_optinteger(L, 3, n);
  if (first < 1) first = 1;
  if (last > n) last = n;
  lua_createtable(L, last >= first ? (int)(last - first + 1) : 0, 0);
  for (lua_Integer i = first; i <= last; i++) {
    mb_lua_sync_push_entry(L, mb_sync_scan_entry(s, (size_t)(i - 1)));
    lua_rawseti(L, -2, i - first + 1);
  }
  return 1;
}

static int scan_gc(lua_State *L) {
  mb_sync_scan_free(mb_lua_take_handle(L, 1, SCAN_MT));
  return 0;
}

void mb_lua_open_sync_scan(lua_State *L) {
  static const luaL_Reg scan_m[] = {{"step", scan_step}, {"count", scan_count}, {"bytes", scan_bytes},
                                    {"excluded", scan_excluded}, {"entries", scan_entries}, {NULL, NULL}};
  static const luaL_Reg scan_meta[] = {{"__gc", scan_gc}, {NULL, NULL}};
  mb_lua_new_class(L, SCAN_MT, scan_m, scan_meta);
}
