/* lua_sync.c — the host side of workspace sync (sync.h, ignore.h) for lua/moonbox/workspace.
 *
 *   core.sync_root(path) → root | nil, err
 *   root:lstat(rel) → { type, mode, size, version, link, mtime_s, mtime_ns } | false | nil, err
 *   root:hash(rel) → hasher;  hasher:step(budget) → false (more) | hex, size, version | nil, err
 *   root:scan{ exclude = "lines", gitignore = bool, maxFiles, maxBytes, maxMetaBytes } → scan
 *   scan:step(budget) → true (done) | false | nil, err;  scan:count(), scan:bytes(), scan:excluded()
 *   scan:entries(first, last) → { { path, type, mode, size, mtime_s, mtime_ns, version, link, sha256 } }
 *   root:pack(scan) → pack;  pack:read(max) → bytes | nil (end) | nil, err;  pack:error();
 *                    pack:progress() → { bytes_in, bytes_out, files, entries };  pack:close()
 *   root:unpack(archive, stage, maxFiles, maxBytes [, prefix]) → unpack;  unpack:step(budget) → true | false | nil, err
 *   unpack:items(first) → { { path, type, mode, size, mtime_s, mtime_ns, sha256, staged, link } }
 *   root:place(staged, rel, expect) / mkdir(rel, mode) / chmod(rel, mode, expect) / unlink(rel, expect)
 *     / rmdir(rel) / rmtree(rel) / mkstage(name) → true | nil, err;  root:sweep() → n;  root:close()
 *   (core.ignore_new, the rule sets scans use, is lua_ignore.c's)
 *
 * Errors are moonbox errors with a SYNC_* code and `path`. A pack can be an HTTP body source
 * (core.http_request{ body_source = pack }); every object keeps what it uses (its root, its scan)
 * alive through its user values, so nothing C still points to is collected while a task waits. */
#include "lua_moonbox.h"
#include "sync.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROOT_MT "moonbox.sync_root"
#define SCAN_MT "moonbox.sync_scan"
#define PACK_MT "moonbox.sync_pack"
#define HASH_MT "moonbox.sync_hash"
#define UNPACK_MT "moonbox.sync_unpack"

typedef struct { mb_sync_root *r; int closed; } lroot;
typedef struct { mb_sync_scan *s; } lscan;
typedef struct { mb_pack *k; } lpack;
typedef struct { mb_sync_hash *h; } lhash;
typedef struct { mb_unpack *u; } lunpack;

static int push_sync_error(lua_State *L, const struct mb_error *e) {
  mb_lua_push_error(L, e->name ? mb_error_code(e) : mb_code_name(MB_CODE_SYNC_IO_ERROR), e->message);
  lua_pushstring(L, e->path);
  lua_setfield(L, -2, "path");
  return 2;
}

static lroot *check_root(lua_State *L, int i) {
  lroot *r = luaL_checkudata(L, i, ROOT_MT);
  if (r->closed) luaL_error(L, "sync root is closed");
  return r;
}

/* The root an object keeps in user value 1, checked open. */
static mb_sync_root *root_of(lua_State *L, int i) {
  lua_getiuservalue(L, i, 1);
  lroot *r = luaL_checkudata(L, -1, ROOT_MT);
  lua_pop(L, 1);
  if (r->closed) luaL_error(L, "sync root is closed");
  return r->r;
}

/* A count (budget, mode, limit): a non-negative integer argument. */
static uint64_t arg_count(lua_State *L, int i, const char *what) {
  return (uint64_t)mb_lua_check_int(L, i, "sync", what, 0, LUA_MAXINTEGER);
}

static const char *type_name(int t) {
  return t == MB_SYNC_FILE ? "file" : t == MB_SYNC_DIR ? "directory" : t == MB_SYNC_LINK ? "symlink" : "other";
}

static void hex32(const unsigned char *d, char out[65]) {
  static const char X[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = X[d[i] >> 4];
    out[2 * i + 1] = X[d[i] & 15];
  }
  out[64] = 0;
}

/* ---- roots ---- */

static int l_root(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lroot *r = mb_lua_new_object(L, sizeof *r, 0, ROOT_MT);
  r->closed = 1;
  struct mb_error e = {0};
  r->r = mb_sync_root_open(path, &e);
  if (!r->r) return push_sync_error(L, &e);
  r->closed = 0;
  return 1;
}

static int root_gc(lua_State *L) {
  lroot *r = luaL_checkudata(L, 1, ROOT_MT);
  mb_sync_root_close(r->r);
  r->r = NULL;
  r->closed = 1;
  return 0;
}

/* Marks the root closed; its descriptor goes with the last object that uses it (__gc). */
static int root_close(lua_State *L) {
  lroot *r = luaL_checkudata(L, 1, ROOT_MT);
  r->closed = 1;
  return 0;
}

static int root_path(lua_State *L) {
  lua_pushstring(L, mb_sync_root_path(check_root(L, 1)->r));
  return 1;
}

static void push_entry(lua_State *L, const struct mb_sync_entry *en) {
  lua_createtable(L, 0, 9);
  lua_pushlstring(L, en->path ? en->path : "", en->path ? strlen(en->path) : 0);
  lua_setfield(L, -2, "path");
  mb_lua_set_str(L, "type", type_name(en->type));
  mb_lua_set_int(L, "mode", en->mode);
  mb_lua_set_int(L, "size", (lua_Integer)en->size);
  mb_lua_set_int(L, "mtime_s", en->mtime_s);
  mb_lua_set_int(L, "mtime_ns", en->mtime_ns);
  mb_lua_set_str(L, "version", en->version);
  if (en->link) mb_lua_set_str(L, "link", en->link);
  if (en->hashed) {
    char hx[65];
    hex32(en->sha256, hx);
    mb_lua_set_str(L, "sha256", hx);
  }
}

static int root_lstat(lua_State *L) {
  lroot *r = check_root(L, 1);
  const char *rel = luaL_checkstring(L, 2);
  struct mb_sync_entry en;
  char link[MB_SYNC_PATH_MAX + 2];
  struct mb_error e = {0};
  int rc = mb_sync_lstat(r->r, rel, &en, link, sizeof link, &e);
  if (rc < 0) return push_sync_error(L, &e);
  if (rc == 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  en.path = (char *)rel;
  push_entry(L, &en);
  return 1;
}

static int ok_or(lua_State *L, int rc, const struct mb_error *e) {
  if (rc < 0) return push_sync_error(L, e);
  lua_pushboolean(L, 1);
  return 1;
}

static int root_place(lua_State *L) {
  lroot *r = check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_place(r->r, luaL_checkstring(L, 2), luaL_checkstring(L, 3), luaL_optstring(L, 4, NULL), &e), &e);
}

static int root_mkdir(lua_State *L) {
  lroot *r = check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_mkdir(r->r, luaL_checkstring(L, 2), (unsigned)arg_count(L, 3, "mode"), &e), &e);
}

static int root_chmod(lua_State *L) {
  lroot *r = check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_chmod(r->r, luaL_checkstring(L, 2), (unsigned)arg_count(L, 3, "mode"), luaL_optstring(L, 4, NULL), &e), &e);
}

static int root_unlink(lua_State *L) {
  lroot *r = check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_unlink(r->r, luaL_checkstring(L, 2), luaL_optstring(L, 3, NULL), &e), &e);
}

static int root_rmdir(lua_State *L) {
  lroot *r = check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_rmdir(r->r, luaL_checkstring(L, 2), &e), &e);
}

static int root_rmtree(lua_State *L) {
  lroot *r = check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_rmtree(r->r, luaL_checkstring(L, 2), &e), &e);
}

/* A private (0700) directory `name` directly under the root. */
static int root_mkstage(lua_State *L) {
  lroot *r = check_root(L, 1);
  const char *name = luaL_checkstring(L, 2);
  if (strchr(name, '/') || !*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    return luaL_error(L, "sync: a staging name is one path component");
  struct mb_error e = {0};
  if (mkdirat(mb_sync_root_fd(r->r), name, 0700) < 0) {
    mb_error_fail(&e, errno == ENOSPC ? MB_CODE_SYNC_NO_SPACE : errno == EACCES || errno == EPERM ? MB_CODE_SYNC_PERMISSION_DENIED
                 : MB_CODE_SYNC_IO_ERROR, name, "cannot make the staging directory '%s' in '%s': %s", name,
                 mb_sync_root_path(r->r), strerror(errno));
    return push_sync_error(L, &e);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int root_sweep(lua_State *L) {
  lua_pushinteger(L, mb_sync_sweep(check_root(L, 1)->r));
  return 1;
}

/* ---- hashes ---- */

static int root_hash(lua_State *L) {
  lroot *r = check_root(L, 1);
  const char *rel = luaL_checkstring(L, 2);
  lhash *h = mb_lua_new_object(L, sizeof *h, 1, HASH_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  struct mb_error e = {0};
  h->h = mb_sync_hash_open(r->r, rel, &e);
  if (!h->h) return push_sync_error(L, &e);
  return 1;
}

static int hash_step(lua_State *L) {
  lhash *h = luaL_checkudata(L, 1, HASH_MT);
  size_t budget = (size_t)arg_count(L, 2, "budget");
  if (!h->h) return luaL_error(L, "sync hash is closed");
  root_of(L, 1);
  char hex[65], ver[MB_SYNC_VERSION_MAX];
  uint64_t size = 0;
  struct mb_error e = {0};
  int rc = mb_sync_hash_step(h->h, budget, hex, &size, ver, &e);
  if (rc < 0) return push_sync_error(L, &e);
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

/* ---- scans ---- */

static int root_scan(lua_State *L) {
  lroot *r = check_root(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  struct mb_sync_scan_opts o = {0};
  o.max_entries = (uint64_t)mb_lua_opt_int(L, 2, "sync", "maxFiles", 100000, 0, LUA_MAXINTEGER);
  o.max_bytes = (uint64_t)mb_lua_opt_int(L, 2, "sync", "maxBytes", (lua_Integer)4 << 30, 0, LUA_MAXINTEGER);
  o.max_meta = (uint64_t)mb_lua_opt_int(L, 2, "sync", "maxMetaBytes", 64 << 20, 0, LUA_MAXINTEGER);
  o.gitignore = mb_lua_opt_bool(L, 2, "sync", "gitignore", 0);
  o.exclude = mb_lua_opt_str(L, 2, "sync", "exclude", &o.exclude_len); /* stays on the stack */
  lscan *s = mb_lua_new_object(L, sizeof *s, 1, SCAN_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  struct mb_error e = {0};
  s->s = mb_sync_scan_new(r->r, &o, &e);
  if (!s->s) return push_sync_error(L, &e);
  return 1;
}

static lscan *check_scan(lua_State *L, int i) {
  lscan *s = luaL_checkudata(L, i, SCAN_MT);
  if (!s->s) luaL_error(L, "sync scan is closed");
  root_of(L, i);
  return s;
}

static int scan_step(lua_State *L) {
  lscan *s = check_scan(L, 1);
  struct mb_error e = {0};
  int rc = mb_sync_scan_step(s->s, (size_t)arg_count(L, 2, "budget"), &e);
  if (rc < 0) return push_sync_error(L, &e);
  lua_pushboolean(L, rc == 1);
  return 1;
}

static int scan_count(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_sync_scan_count(check_scan(L, 1)->s));
  return 1;
}

static int scan_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_sync_scan_bytes(check_scan(L, 1)->s));
  return 1;
}

static int scan_excluded(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mb_sync_scan_excluded(check_scan(L, 1)->s));
  return 1;
}

static int scan_entries(lua_State *L) {
  lscan *s = check_scan(L, 1);
  lua_Integer n = (lua_Integer)mb_sync_scan_count(s->s);
  lua_Integer first = luaL_optinteger(L, 2, 1), last = luaL_optinteger(L, 3, n);
  if (first < 1) first = 1;
  if (last > n) last = n;
  lua_createtable(L, last >= first ? (int)(last - first + 1) : 0, 0);
  for (lua_Integer i = first; i <= last; i++) {
    push_entry(L, mb_sync_scan_entry(s->s, (size_t)(i - 1)));
    lua_rawseti(L, -2, i - first + 1);
  }
  return 1;
}

static int scan_gc(lua_State *L) {
  lscan *s = luaL_checkudata(L, 1, SCAN_MT);
  mb_sync_scan_free(s->s);
  s->s = NULL;
  return 0;
}

/* ---- packs ---- */

static int root_pack(lua_State *L) {
  lroot *r = check_root(L, 1);
  lscan *s = check_scan(L, 2);
  lpack *k = mb_lua_new_object(L, sizeof *k, 2, PACK_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 2);
  struct mb_error e = {0};
  k->k = mb_pack_new(r->r, s->s, &e);
  if (!k->k) return push_sync_error(L, &e);
  return 1;
}

static int pack_read(lua_State *L) {
  lpack *k = luaL_checkudata(L, 1, PACK_MT);
  size_t max = (size_t)mb_lua_check_int(L, 2, "sync: pack:read", "max", 1, 16 << 20);
  if (!k->k) return luaL_error(L, "sync pack is closed");
  root_of(L, 1);
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, max);
  size_t got = 0;
  while (got < max) {
    ssize_t n = mb_pack_read(k->k, p + got, max - got);
    if (n < 0) return push_sync_error(L, mb_pack_error(k->k));
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
  lpack *k = luaL_checkudata(L, 1, PACK_MT);
  const struct mb_error *e = k->k ? mb_pack_error(k->k) : NULL;
  if (!e) return 0;
  push_sync_error(L, e);
  lua_remove(L, -2);
  return 1;
}

static int pack_progress(lua_State *L) {
  lpack *k = luaL_checkudata(L, 1, PACK_MT);
  struct mb_pack_progress p = {0};
  if (k->k) mb_pack_progress(k->k, &p);
  lua_createtable(L, 0, 4);
  mb_lua_set_int(L, "bytes_in", (lua_Integer)p.bytes_in);
  mb_lua_set_int(L, "bytes_out", (lua_Integer)p.bytes_out);
  mb_lua_set_int(L, "files", (lua_Integer)p.files_done);
  mb_lua_set_int(L, "entries", (lua_Integer)p.entries_done);
  return 1;
}

static int pack_close(lua_State *L) {
  lpack *k = luaL_checkudata(L, 1, PACK_MT);
  mb_pack_free(k->k);
  k->k = NULL;
  return 0;
}

/* The HTTP body source over a pack: closed packs end the body with an error. */
static ssize_t pack_source_read(void *ud, char *buf, size_t cap) {
  lpack *k = ud;
  if (!k->k) return -1;
  return mb_pack_read(k->k, buf, cap);
}

int mb_lua_pack_source(lua_State *L, int idx, struct mb_http_source *out) {
  lpack *k = luaL_testudata(L, idx, PACK_MT);
  if (!k || !k->k) return -1;
  out->read = pack_source_read;
  out->ud = k;
  return 0;
}

/* ---- unpacks ---- */

static int root_unpack(lua_State *L) {
  lroot *r = check_root(L, 1);
  const char *archive = luaL_checkstring(L, 2), *stage = luaL_checkstring(L, 3);
  uint64_t max_entries = arg_count(L, 4, "maxFiles"), max_bytes = arg_count(L, 5, "maxBytes");
  const char *prefix = luaL_optstring(L, 6, "");
  lunpack *u = mb_lua_new_object(L, sizeof *u, 1, UNPACK_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  struct mb_error e = {0};
  u->u = mb_unpack_new(r->r, archive, stage, prefix, max_entries, max_bytes, &e);
  if (!u->u) return push_sync_error(L, &e);
  return 1;
}

static lunpack *check_unpack(lua_State *L) {
  lunpack *u = luaL_checkudata(L, 1, UNPACK_MT);
  if (!u->u) luaL_error(L, "sync unpack is closed");
  root_of(L, 1);
  return u;
}

static int unpack_step(lua_State *L) {
  lunpack *u = check_unpack(L);
  struct mb_error e = {0};
  int rc = mb_unpack_step(u->u, (size_t)arg_count(L, 2, "budget"), &e);
  if (rc < 0) return push_sync_error(L, &e);
  lua_pushboolean(L, rc == 1);
  return 1;
}

static int unpack_items(lua_State *L) {
  lunpack *u = check_unpack(L);
  lua_Integer n = (lua_Integer)mb_unpack_count(u->u), first = luaL_optinteger(L, 2, 1);
  if (first < 1) first = 1;
  lua_createtable(L, n >= first ? (int)(n - first + 1) : 0, 0);
  for (lua_Integer i = first; i <= n; i++) {
    const struct mb_unpack_item *it = mb_unpack_item(u->u, (size_t)(i - 1));
    lua_createtable(L, 0, 9);
    mb_lua_set_str(L, "path", it->path);
    mb_lua_set_str(L, "type", type_name(it->type));
    mb_lua_set_int(L, "mode", it->mode);
    mb_lua_set_int(L, "size", (lua_Integer)it->size);
    mb_lua_set_int(L, "mtime_s", it->mtime_s);
    mb_lua_set_int(L, "mtime_ns", it->mtime_ns);
    if (it->type == MB_SYNC_FILE) {
      char hx[65];
      hex32(it->sha256, hx);
      mb_lua_set_str(L, "sha256", hx);
    }
    if (it->type != MB_SYNC_DIR) mb_lua_set_str(L, "staged", it->staged);
    if (it->link) mb_lua_set_str(L, "link", it->link);
    lua_rawseti(L, -2, i - first + 1);
  }
  return 1;
}

static int unpack_close(lua_State *L) {
  lunpack *u = luaL_checkudata(L, 1, UNPACK_MT);
  mb_unpack_free(u->u);
  u->u = NULL;
  return 0;
}

void mb_lua_open_sync(lua_State *L) {
  static const luaL_Reg root_m[] = {
    {"path", root_path}, {"lstat", root_lstat}, {"hash", root_hash}, {"scan", root_scan}, {"pack", root_pack},
    {"unpack", root_unpack}, {"place", root_place}, {"mkdir", root_mkdir}, {"chmod", root_chmod},
    {"unlink", root_unlink}, {"rmdir", root_rmdir}, {"rmtree", root_rmtree}, {"mkstage", root_mkstage},
    {"sweep", root_sweep}, {"close", root_close}, {NULL, NULL}};
  static const luaL_Reg root_meta[] = {{"__gc", root_gc}, {NULL, NULL}};
  mb_lua_new_class(L, ROOT_MT, root_m, root_meta);
  static const luaL_Reg scan_m[] = {{"step", scan_step}, {"count", scan_count}, {"bytes", scan_bytes},
                                    {"excluded", scan_excluded}, {"entries", scan_entries}, {NULL, NULL}};
  static const luaL_Reg scan_meta[] = {{"__gc", scan_gc}, {NULL, NULL}};
  mb_lua_new_class(L, SCAN_MT, scan_m, scan_meta);
  static const luaL_Reg pack_m[] = {{"read", pack_read}, {"error", pack_error}, {"progress", pack_progress},
                                    {"close", pack_close}, {NULL, NULL}};
  static const luaL_Reg pack_meta[] = {{"__gc", pack_close}, {NULL, NULL}};
  mb_lua_new_class(L, PACK_MT, pack_m, pack_meta);
  static const luaL_Reg hash_m[] = {{"step", hash_step}, {"close", hash_close}, {NULL, NULL}};
  static const luaL_Reg hash_meta[] = {{"__gc", hash_close}, {NULL, NULL}};
  mb_lua_new_class(L, HASH_MT, hash_m, hash_meta);
  static const luaL_Reg unpack_m[] = {{"step", unpack_step}, {"items", unpack_items}, {"close", unpack_close}, {NULL, NULL}};
  static const luaL_Reg unpack_meta[] = {{"__gc", unpack_close}, {NULL, NULL}};
  mb_lua_new_class(L, UNPACK_MT, unpack_m, unpack_meta);
  lua_pushcfunction(L, l_root);
  lua_setfield(L, -2, "sync_root");
}
