/* lua_sync_hash.c — class `moonbox.sync_hash`: a file's sha256 taken in steps (sync.h).
 *   root:hash(rel) → hasher;  hasher:step(budget) → false (more) | hex, size, version | nil, err;
 *   hasher:close() */
#include "lua_sync.h"

#define HASH_MT "moonbox.sync_hash"

typedef struct { mb_sync_hash *h; } lhash;

int mb_lua_sync_hash(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  const char *rel = luaL_checkstring(L, 2);
  lhash *h = mb_lua_sync_child(L, sizeof *h, 1, HASH_MT);
  struct mb_error e = {0};
  h->h = mb_sync_hash_open(r->r, rel, &e);
  if (!h->h) return mb_lua_sync_error(L, &e);
  return 1;
}

static int hash_step(lua_State *L) {
  lhash *h = luaL_checkudata(L, 1, HASH_MT);
  size_t budget = (size_t)mb_lua_sync_count(L, 2, "budget");
  if (!h->h) return luaL_error(L, "sync hash is closed");
  mb_lua_sync_root_of(L, 1);
  char hex[65], ver[MB_SYNC_VERSION_MAX];
  uint64_t size = 0;
  struct mb_error e = {0};
  int rc = mb_sync_hash_step(h->h, budget, hex, &size, ver, &e);
  if (rc < 0) return mb_lua_sync_error(L, &e);
  if (rc == 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  mb_sync_hash_free(h->h);
  h->h = NULL;
  lua_pushstring(L, hex);
  lua_pushinteger(L, (lua_Integer)size);
  lua_pushstring(L, ver);
  return 3;
}

static int hash_close(lua_State *L) {
  lhash *h = luaL_checkudata(L, 1, HASH_MT);
  mb_sync_hash_free(h->h);
  h->h = NULL;
  return 0;
}

void mb_lua_open_sync_hash(lua_State *L) {
  static const luaL_Reg hash_m[] = {{"step", hash_step}, {"close", hash_close}, {NULL, NULL}};
  static const luaL_Reg hash_meta[] = {{"__gc", hash_close}, {NULL, NULL}};
  mb_lua_new_class(L, HASH_MT, hash_m, hash_meta);
}
