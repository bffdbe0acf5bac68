/* lua_sync_hash.c — class `moonbox.sync_hash`: a file's sha256 taken in steps (sync.h).
 *   root:hash(rel) → hasher;  hasher:step(budget) → false (more) | hex, size, version | nil, err;
 *   hasher:close() */
#include "lua_sync.h"

#define HASH_MT "moonbox.sync_hash"

int mb_lua_sync_hash(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  const char *rel = luaL_checkstring(L, 2);
  void **h = mb_lua_sync_child(L, 1, HASH_MT);
  struct mb_error e = {0};
  *h = mb_sync_hash_open(r->r, rel, &e);
  if (!*h) return mb_lua_sync_error(L, &e);
  return 1;
}

static int hash_step(lua_State *L) {
  mb_sync_hash *h = mb_lua_sync_check(L, 1, HASH_MT, "sync hash");
  size_t budget = (size_t)mb_lua_sync_count(L, 2, "budget");
  char hex[65], ver[MB_SYNC_VERSION_MAX];
  uint64_t size = 0;
  struct mb_error e = {0};
  int rc = mb_sync_hash_step(h, budget, hex, &size, ver, &e);
  if (rc < 0) return mb_lua_sync_error(L, &e);
  if (rc == 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  mb_sync_hash_free(mb_lua_take_handle(L, 1, HASH_MT));
  lua_pushstring(L, hex);
  lua_pushinteger(L, (lua_Integer)size);
  lua_pushstring(L, ver);
  return 3;
}

static int hash_close(lua_State *L) {
  mb_sync_hash_free(mb_lua_take_handle(L, 1, HASH_MT));
  return 0;
}

void mb_lua_open_sync_hash(lua_State *L) {
  static const luaL_Reg hash_m[] = {{"step", hash_step}, {"close", hash_close}, {NULL, NULL}};
  static const luaL_Reg hash_meta[] = {{"__gc", hash_close}, {NULL, NULL}};
  mb_lua_new_class(L, HASH_MT, hash_m, hash_meta);
}
