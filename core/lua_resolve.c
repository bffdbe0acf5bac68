/* lua_resolve.c — class `moonbox.resolve`: one lookup by the host's resolver.
 *   core.getaddrinfo(name, fn) → req: the host's resolver (uv_getaddrinfo, off the loop's
 *       thread); fn() runs (protected, on the loop) when it is done; req:result() → list of
 *       address strings (each once, in the resolver's order) | nil, err (E2B_DNS); req:cancel().
 *       A request collected before it is done is abandoned safely. */
#include "lua_moonbox.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#define MB_RESOLVE_MT "moonbox.resolve"

/* The libuv request outlives its userdata when the userdata is collected first: `ud` is then
 * NULL and the completion frees it. */
typedef struct lresolve_req {
  uv_getaddrinfo_t req;
  struct lresolve *ud;
  mb_lua_host *h;
  int ref;                         /* the Lua callback (unreferenced by the userdata) */
  int done, status;
  struct addrinfo *res;
} lresolve_req;

typedef struct lresolve {
  lresolve_req *r;
} lresolve;

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  lresolve_req *r = req->data;
  r->done = 1;
  r->status = status;
  r->res = res;
  if (!r->ud) { /* abandoned */
    if (res) uv_freeaddrinfo(res);
    free(r);
    return;
  }
  mb_lua_host_call(r->h, r->ref); /* last: the callback may collect the userdata */
}

static int l_getaddrinfo(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  mb_lua_host *h = mb_lua_host_of(L);
  lresolve *u = mb_lua_new_object(L, sizeof *u, 0, MB_RESOLVE_MT);
  lresolve_req *r = calloc(1, sizeof *r);
  if (!r) return luaL_error(L, "out of memory");
  r->h = h;
  r->ud = u;
  r->ref = LUA_NOREF;
  r->req.data = r;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = uv_getaddrinfo(mb_loop_uv(mb_lua_host_loop(h)), &r->req, on_resolved, name, NULL, &hints);
  if (rc != 0) {
    free(r);
    return mb_lua_push_error(L, "E2B_DNS", lua_pushfstring(L, "resolve %s: %s", name, uv_strerror(rc)));
  }
  u->r = r;
  lua_pushvalue(L, 2);
  r->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

static int rs_result(lua_State *L) {
  lresolve *u = luaL_checkudata(L, 1, MB_RESOLVE_MT);
  if (!u->r || !u->r->done) return luaL_error(L, "resolve: not done (wait for its callback)");
  lresolve_req *r = u->r;
  if (r->status != 0) return mb_lua_push_error(L, "E2B_DNS", uv_strerror(r->status));
  lua_newtable(L);
  lua_Integer n = 0;
  for (struct addrinfo *a = r->res; a; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN];
    const void *src = a->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                    : a->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr : NULL;
    if (!src || !inet_ntop(a->ai_family, src, buf, sizeof buf)) continue;
    int seen = 0;
    for (lua_Integer i = 1; i <= n && !seen; i++) {
      lua_rawgeti(L, -1, i);
      seen = !strcmp(lua_tostring(L, -1), buf);
      lua_pop(L, 1);
    }
    if (seen) continue;
    lua_pushstring(L, buf);
    lua_rawseti(L, -2, ++n);
  }
  return 1;
}

/* Abandons the request (or frees a finished one); the callback is not called after it. */
static int rs_cancel(lua_State *L) {
  lresolve *u = luaL_checkudata(L, 1, MB_RESOLVE_MT);
  lresolve_req *r = u->r;
  if (!r) return 0;
  u->r = NULL;
  luaL_unref(L, LUA_REGISTRYINDEX, r->ref);
  r->ref = LUA_NOREF;
  if (r->done) {
    if (r->res) uv_freeaddrinfo(r->res);
    free(r);
  } else {
    r->ud = NULL;                        /* on_resolved frees it */
    uv_cancel((uv_req_t *)&r->req);
  }
  return 0;
}

void mb_lua_open_resolve(lua_State *L) {
  static const luaL_Reg m[] = {{"result", rs_result}, {"cancel", rs_cancel}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", rs_cancel}, {NULL, NULL}};
  mb_lua_new_class(L, MB_RESOLVE_MT, m, meta);
  lua_pushcfunction(L, l_getaddrinfo);
  lua_setfield(L, -2, "getaddrinfo");
}
