/* lua_sync.c — the host side of workspace sync (sync.h) for lua/moonbox/workspace: class
 * `moonbox.sync_root` and what the objects a root makes share (lua_sync.h). Those objects are
 * classes of their own: lua_sync_hash.c, lua_sync_scan.c, lua_sync_pack.c, lua_sync_unpack.c.
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
#include "lua_sync.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mb_lua_sync_error(lua_State *L, const struct mb_error *e) {
  mb_lua_push_error(L, e->name ? mb_error_code(e) : mb_code_name(MB_CODE_SYNC_IO_ERROR), e->message);
  lua_pushstring(L, e->path);
  lua_setfield(L, -2, "path");
  return 2;
}

mb_lua_sync_root *mb_lua_sync_check_root(lua_State *L, int i) {
  mb_lua_sync_root *r = luaL_checkudata(L, i, MB_SYNC_ROOT_MT);
  if (r->closed) luaL_error(L, "sync root is closed");
  return r;
}

mb_sync_root *mb_lua_sync_root_of(lua_State *L, int i) {
  lua_getiuservalue(L, i, 1);
  mb_lua_sync_root *r = luaL_checkudata(L, -1, MB_SYNC_ROOT_MT);
  lua_pop(L, 1);
  if (r->closed) luaL_error(L, "sync root is closed");
  return r->r;
}

void **mb_lua_sync_child(lua_State *L, int nuv, const char *mt) {
  void **slot = mb_lua_new_handle(L, nuv, mt);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  return slot;
}

void *mb_lua_sync_check(lua_State *L, int i, const char *mt, const char *what) {
  void *p = mb_lua_check_handle(L, i, mt, what);
  mb_lua_sync_root_of(L, i);
  return p;
}

uint64_t mb_lua_sync_count(lua_State *L, int i, const char *what) {
  return (uint64_t)mb_lua_check_int(L, i, "sync", what, 0, LUA_MAXINTEGER);
}

const char *mb_lua_sync_type_name(int t) {
  return t == MB_SYNC_FILE ? "file" : t == MB_SYNC_DIR ? "directory" : t == MB_SYNC_LINK ? "symlink" : "other";
}

void mb_lua_sync_hex32(const unsigned char *d, char out[65]) {
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
  mb_lua_sync_root *r = mb_lua_new_object(L, sizeof *r, 0, MB_SYNC_ROOT_MT);
  r->closed = 1;
  struct mb_error e = {0};
  r->r = mb_sync_root_open(path, &e);
  if (!r->r) return mb_lua_sync_error(L, &e);
  r->closed = 0;
  return 1;
}

static int root_gc(lua_State *L) {
  mb_lua_sync_root *r = luaL_checkudata(L, 1, MB_SYNC_ROOT_MT);
  mb_sync_root_close(r->r);
  r->r = NULL;
  r->closed = 1;
  return 0;
}

/* Marks the root closed; its descriptor goes with the last object that uses it (__gc). */
static int root_close(lua_State *L) {
  mb_lua_sync_root *r = luaL_checkudata(L, 1, MB_SYNC_ROOT_MT);
  r->closed = 1;
  return 0;
}

static int root_path(lua_State *L) {
  lua_pushstring(L, mb_sync_root_path(mb_lua_sync_check_root(L, 1)->r));
  return 1;
}

void mb_lua_sync_push_entry(lua_State *L, const struct mb_sync_entry *en) {
  lua_createtable(L, 0, 9);
  lua_pushlstring(L, en->path ? en->path : "", en->path ? strlen(en->path) : 0);
  lua_setfield(L, -2, "path");
  mb_lua_set_str(L, "type", mb_lua_sync_type_name(en->type));
  mb_lua_set_int(L, "mode", en->mode);
  mb_lua_set_int(L, "size", (lua_Integer)en->size);
  mb_lua_set_int(L, "mtime_s", en->mtime_s);
  mb_lua_set_int(L, "mtime_ns", en->mtime_ns);
  mb_lua_set_str(L, "version", en->version);
  if (en->link) mb_lua_set_str(L, "link", en->link);
  if (en->hashed) {
    char hx[65];
    mb_lua_sync_hex32(en->sha256, hx);
    mb_lua_set_str(L, "sha256", hx);
  }
}

static int root_lstat(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  const char *rel = luaL_checkstring(L, 2);
  struct mb_sync_entry en;
  char link[MB_SYNC_PATH_MAX + 2];
  struct mb_error e = {0};
  int rc = mb_sync_lstat(r->r, rel, &en, link, sizeof link, &e);
  if (rc < 0) return mb_lua_sync_error(L, &e);
  if (rc == 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  en.path = (char *)rel;
  mb_lua_sync_push_entry(L, &en);
  return 1;
}

static int ok_or(lua_State *L, int rc, const struct mb_error *e) {
  if (rc < 0) return mb_lua_sync_error(L, e);
  lua_pushboolean(L, 1);
  return 1;
}

static int root_place(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_place(r->r, luaL_checkstring(L, 2), luaL_checkstring(L, 3), luaL_optstring(L, 4, NULL), &e), &e);
}

static int root_mkdir(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_mkdir(r->r, luaL_checkstring(L, 2), (unsigned)mb_lua_sync_count(L, 3, "mode"), &e), &e);
}

static int root_chmod(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_chmod(r->r, luaL_checkstring(L, 2), (unsigned)mb_lua_sync_count(L, 3, "mode"), luaL_optstring(L, 4, NULL), &e), &e);
}

static int root_unlink(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_unlink(r->r, luaL_checkstring(L, 2), luaL_optstring(L, 3, NULL), &e), &e);
}

static int root_rmdir(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_rmdir(r->r, luaL_checkstring(L, 2), &e), &e);
}

static int root_rmtree(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  struct mb_error e = {0};
  return ok_or(L, mb_sync_rmtree(r->r, luaL_checkstring(L, 2), &e), &e);
}

/* A private (0700) directory `name` directly under the root. */
static int root_mkstage(lua_State *L) {
  mb_lua_sync_root *r = mb_lua_sync_check_root(L, 1);
  const char *name = luaL_checkstring(L, 2);
  if (strchr(name, '/') || !*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    return luaL_error(L, "sync: a staging name is one path component");
  struct mb_error e = {0};
  if (mkdirat(mb_sync_root_fd(r->r), name, 0700) < 0) {
    mb_error_fail(&e, errno == ENOSPC ? MB_CODE_SYNC_NO_SPACE : errno == EACCES || errno == EPERM ? MB_CODE_SYNC_PERMISSION_DENIED
                 : MB_CODE_SYNC_IO_ERROR, name, "cannot make the staging directory '%s' in '%s': %s", name,
                 mb_sync_root_path(r->r), strerror(errno));
    return mb_lua_sync_error(L, &e);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int root_sweep(lua_State *L) {
  lua_pushinteger(L, mb_sync_sweep(mb_lua_sync_check_root(L, 1)->r));
  return 1;
}

void mb_lua_open_sync(lua_State *L) {
  static const luaL_Reg root_m[] = {
    {"path", root_path}, {"lstat", root_lstat}, {"hash", mb_lua_sync_hash}, {"scan", mb_lua_sync_scan},
    {"pack", mb_lua_sync_pack}, {"unpack", mb_lua_sync_unpack}, {"place", root_place}, {"mkdir", root_mkdir},
    {"chmod", root_chmod}, {"unlink", root_unlink}, {"rmdir", root_rmdir}, {"rmtree", root_rmtree},
    {"mkstage", root_mkstage}, {"sweep", root_sweep}, {"close", root_close}, {NULL, NULL}};
  static const luaL_Reg root_meta[] = {{"__gc", root_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_SYNC_ROOT_MT, root_m, root_meta);
  mb_lua_open_sync_scan(L);
  mb_lua_open_sync_pack(L);
  mb_lua_open_sync_hash(L);
  mb_lua_open_sync_unpack(L);
  lua_pushcfunction(L, l_root);
  lua_setfield(L, -2, "sync_root");
}
