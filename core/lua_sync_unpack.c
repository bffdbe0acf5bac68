/* lua_sync_unpack.c — class `moonbox.sync_unpack`: an archive unpacked into a staging directory
 * in steps (sync.h).
 *   root:unpack(archive, stage, maxFiles, maxBytes [, prefix]) → unpack;  unpack:step(budget) → true | false | nil, err
 *   unpack:items(first) → { { path, type, mode, size, mtime_s, mtime_ns, sha256, staged, link } };  unpack:close() */
#include "lua_sync.h"

#define UNPACK_MT "moonbox.sync_unpack"

int mb_lua_sync_unpack(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  const char *archive = luaL_checkstring(L, 2), *stage = luaL_checkstring(L, 3);
  uint64_t max_entries = mb_lua_sync_count(L, 4, "maxFiles"), max_bytes = mb_lua_sync_count(L, 5, "maxBytes");
  const char *prefix = luaL_optstring(L, 6, "");
  void **u = mb_lua_sync_child(L, 1, UNPACK_MT);
  struct mb_error e = {0};
  *u = mb_unpack_new(r->r, archive, stage, prefix, max_entries, max_bytes, &e);
  if (!*u) return mb_lua_sync_error(L, &e);
  return 1;
}

static mb_unpack *check_unpack(lua_State *L) { return mb_lua_sync_check(L, 1, UNPACK_MT, "sync unpack"); }

static int unpack_step(lua_State *L) {
  mb_unpack *u = check_unpack(L);
  struct mb_error e = {0};
  int rc = mb_unpack_step(u, (size_t)mb_lua_sync_count(L, 2, "budget"), &e);
  if (rc < 0) return mb_lua_sync_error(L, &e);
  lua_pushboolean(L, rc == 1);
  return 1;
}

static int unpack_items(lua_State *L) {
  mb_unpack *u = check_unpack(L);
  lua_Integer n = (lua_Integer)mb_unpack_count(u), first = luaL_optinteger(L, 2, 1);
  if (first < 1) first = 1;
  lua_createtable(L, n >= first ? (int)(n - first + 1) : 0, 0);
  for (lua_Integer i = first; i <= n; i++) {
    const struct mb_unpack_item *it = mb_unpack_item(u, (size_t)(i - 1));
    lua_createtable(L, 0, 9);
    mb_lua_set_str(L, "path", it->path);
    mb_lua_set_str(L, "type", mb_lua_sync_type_name(it->type));
    mb_lua_set_int(L, "mode", it->mode);
    mb_lua_set_int(L, "size", (lua_Integer)it->size);
    mb_lua_set_int(L, "mtime_s", it->mtime_s);
    mb_lua_set_int(L, "mtime_ns", it->mtime_ns);
    if (it->type == MB_SYNC_FILE) {
      char hx[65];
      mb_lua_sync_hex32(it->sha256, hx);
      mb_lua_set_str(L, "sha256", hx);
    }
    if (it->type != MB_SYNC_DIR) mb_lua_set_str(L, "staged", it->staged);
    if (it->link) mb_lua_set_str(L, "link", it->link);
    lua_rawseti(L, -2, i - first + 1);
  }
  return 1;
}

static int unpack_close(lua_State *L) {
  mb_unpack_free(mb_lua_take_handle(L, 1, UNPACK_MT));
  return 0;
}

void mb_lua_open_sync_unpack(lua_State *L) {
  static const luaL_Reg unpack_m[] = {{"step", unpack_step}, {"items", unpack_items}, {"close", unpack_close}, {NULL, NULL}};
  static const luaL_Reg unpack_meta[] = {{"__gc", unpack_close}, {NULL, NULL}};
  mb_lua_new_class(L, UNPACK_MT, unpack_m, unpack_meta);
}
