/* lua_sync_pack.c — class `moonbox.sync_pack`: a scan's files as one archive, read in pieces or
 * sent as an HTTP body (core.http_request{ body_source = pack }: mb_lua_pack_source).
 *   root:pack(scan) → pack;  pack:read(max) → bytes | nil (end) | nil, err;  pack:error();
 *   pack:progress() → { bytes_in, bytes_out, files, entries };  pack:close() */
#include "lua_sync.h"

#define PACK_MT "moonbox.sync_pack"

int mb_lua_sync_pack(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  mb_sync_scan *s = mb_lua_sync_check_scan(L, 2);
  void **k = mb_lua_sync_child(L, 2, PACK_MT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 2);
  struct mb_error e = {0};
  *k = mb_pack_new(r->r, s, &e);
  if (!*k) return mb_lua_sync_error(L, &e);
  return 1;
}

static int pack_read(lua_State *L) {
  mb_pack *k = mb_lua_sync_check(L, 1, PACK_MT, "sync pack");
  size_t max = (size_t)mb_lua_check_int(L, 2, "sync: pack:read", "max", 1, 16 << 20);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, max);
  size_t got = 0;
  while (got < max) {
    ssize_t n = mb_pack_read(k, p + got, max - got);
    if (n < 0) return mb_lua_sync_error(L, mb_pack_error(k));
    if (n == 0) break;
    got += (size_t)n;
  }
  if (got == 0) {
    lua_pushnil(L);
    return 1;
  }
  luaL_pushresultsize(&b, got);
  return 1;
}

static int pack_error(lua_State *L) {
  mb_pack *k = *(void **)luaL_checkudata(L, 1, PACK_MT);
  const struct mb_error *e = k ? mb_pack_error(k) : NULL;
  if (!e) return 0;
  mb_lua_sync_error(L, e);
  lua_remove(L, -2);
  return 1;
}

static int pack_progress(lua_State *L) {
  mb_pack *k = *(void **)luaL_checkudata(L, 1, PACK_MT);
  struct mb_pack_progress p = {0};
  if (k) mb_pack_progress(k, &p);
  lua_createtable(L, 0, 4);
  mb_lua_set_int(L, "bytes_in", (lua_Integer)p.bytes_in);
  mb_lua_set_int(L, "bytes_out", (lua_Integer)p.bytes_out);
  mb_lua_set_int(L, "files", (lua_Integer)p.files_done);
  mb_lua_set_int(L, "entries", (lua_Integer)p.entries_done);
  return 1;
}

static int pack_close(lua_State *L) {
  mb_pack_free(mb_lua_take_handle(L, 1, PACK_MT));
  return 0;
}

/* The HTTP body source over a pack: closed packs end the body with an error. */
static ssize_t pack_source_read(void *ud, char *buf, size_t cap) {
  void **k = ud;
  if (!*k) return -1;
  return mb_pack_read(*k, buf, cap);
}

int mb_lua_pack_source(lua_State *L, int idx, struct mb_http_source *out) {
  void **k = luaL_testudata(L, idx, PACK_MT);
  if (!k || !*k) return -1;
  out->read = pack_source_read;
  out->ud = k;
  return 0;
}

void mb_lua_open_sync_pack(lua_State *L) {
  static const luaL_Reg pack_m[] = {{"read", pack_read}, {"error", pack_error}, {"progress", pack_progress},
                                    {"close", pack_close}, {NULL, NULL}};
  static const luaL_Reg pack_meta[] = {{"__gc", pack_close}, {NULL, NULL}};
  mb_lua_new_class(L, PACK_MT, pack_m, pack_meta);
}
