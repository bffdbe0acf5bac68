/* lua_sync.h — what the sync binding files share: lua_sync.c (class `moonbox.sync_root` and
 * these helpers) and the classes of the objects a root makes: lua_sync_hash.c, lua_sync_scan.c,
 * lua_sync_pack.c, lua_sync_unpack.c. Each of those keeps its root in user value 1. */
#ifndef MB_LUA_SYNC_H
#define MB_LUA_SYNC_H
#include "lua_moonbox.h"
#include "sync.h"

#define MB_SYNC_ROOT_MT "moonbox.sync_root"
typedef struct { mb_sync_root *r; int closed; } mb_lua_sync_root;

/* nil, err: a moonbox error with its SYNC_* code and `path`. → 2 */
int mb_lua_sync_error(lua_State *L, const struct mb_error *e);
/* The root at argument i, checked open. */
mb_lua_sync_root *mb_lua_sync_check_root(lua_State *L, int i);
/* The root the object at i keeps (user value 1), checked open. */
mb_sync_root *mb_lua_sync_root_of(lua_State *L, int i);
/* A new handle of class mt (mb_lua_new_handle) made by the root at argument 1, which it keeps;
 * check: the open handle at i (its pointer), its root checked open too. */
void **mb_lua_sync_child(lua_State *L, int nuv, const char *mt);
void *mb_lua_sync_check(lua_State *L, int i, const char *mt, const char *what);
/* A count (budget, mode, limit): argument i, a non-negative integer. */
uint64_t mb_lua_sync_count(lua_State *L, int i, const char *what);
const char *mb_lua_sync_type_name(int t);                      /* "file", "directory", ... */
void mb_lua_sync_hex32(const unsigned char *d, char out[65]);  /* a sha256 in hex */
void mb_lua_sync_push_entry(lua_State *L, const struct mb_sync_entry *en);

/* The root's methods that make the other objects, and those classes' registrations. */
int mb_lua_sync_hash(lua_State *L);   /* root:hash(rel) */
int mb_lua_sync_scan(lua_State *L);   /* root:scan(opts) */
int mb_lua_sync_pack(lua_State *L);   /* root:pack(scan) */
int mb_lua_sync_unpack(lua_State *L); /* root:unpack(archive, stage, maxFiles, maxBytes [, prefix]) */
mb_sync_scan *mb_lua_sync_check_scan(lua_State *L, int i); /* the open scan at argument i */
void mb_lua_open_sync_hash(lua_State *L);
void mb_lua_open_sync_scan(lua_State *L);
void mb_lua_open_sync_pack(lua_State *L);
void mb_lua_open_sync_unpack(lua_State *L);
#endif
