/* lua_http.c — core.http_request(opts, on_change) → request object; core.http_stats().
 * on_change() is called (no arguments, protected) whenever the request's state changes; the
 * Lua side then asks the object: status, headers, read, done, error. */
#include "lua_moonbox.h"
#include "moonbox.h"
#include "http.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MB_HTTP_MT "moonbox.http_request"
#define MB_HTTP_MAX_REQ_HEADERS 256

typedef struct {
  mb_http_req *r;
  mb_lua_host *h;
  int cb_ref;
} lreq;

static void on_change(mb_http_req *r, void *ud) {
  (void)r;
  lreq *q = ud;
  mb_lua_host_call(q->h, q->cb_ref); /* last: the callback may close q */
}

static lreq *check_req(lua_State *L) {
  lreq *q = luaL_checkudata(L, 1, MB_HTTP_MT);
  if (!q->r) luaL_error(L, "http request is closed");
  return q;
}

static lua_Integer opt_int(lua_State *L, int t, const char *k, lua_Integer def) {
  lua_getfield(L, t, k);
  lua_Integer v = def;
  if (!lua_isnil(L, -1)) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok || v < 0) luaL_error(L, "http: %s must be a non-negative integer", k);
  }
  lua_pop(L, 1);
  return v;
}

/* Leaves the string on the stack (its pointer stays valid) or returns NULL (nothing pushed). */
static const char *opt_str(lua_State *L, int t, const char *k, size_t *len) {
  lua_getfield(L, t, k);
  if (lua_isnil(L, -1)) { lua_pop(L, 1); return NULL; }
  if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "http: %s must be a string", k);
  return lua_tolstring(L, -1, len);
}

/* core.http_request({url=, method=, headers=, body= | body_file= | body_fd=, stream=,
 *                   max_bytes=, buffer_bytes=, timeout_ms=, connect_timeout_ms=, ca_file=}, fn [, stream])
 * → request | nil, message, code. Bad arguments raise. */
static int l_request(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  mb_lua_host *h = mb_lua_host_of(L);
  mb_http_opts o;
  memset(&o, 0, sizeof o);
  o.body_fd = -1;
  o.url = opt_str(L, 1, "url", NULL);
  if (!o.url) return luaL_error(L, "http: url is required");
  o.method = opt_str(L, 1, "method", NULL);
  o.body = opt_str(L, 1, "body", &o.body_len);
  /* The stream flag is the third argument, else opts.stream. */
  if (lua_isnoneornil(L, 3)) lua_getfield(L, 1, "stream"); else lua_pushvalue(L, 3);
  o.stream = lua_toboolean(L, -1);
  lua_pop(L, 1);
  o.max_bytes = (size_t)opt_int(L, 1, "max_bytes", 0);
  if (!o.stream && o.max_bytes == 0) return luaL_error(L, "http: max_bytes is required (> 0)");
  o.high_water = (size_t)opt_int(L, 1, "buffer_bytes", 0);
  o.timeout_ms = (long)opt_int(L, 1, "timeout_ms", 0);
  o.connect_timeout_ms = (long)opt_int(L, 1, "connect_timeout_ms", 0);
  o.ca_file = opt_str(L, 1, "ca_file", NULL);

  const char *lines[MB_HTTP_MAX_REQ_HEADERS];
  lua_getfield(L, 1, "headers");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1)) return luaL_error(L, "http: headers must be a table");
    int ht = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, ht)) {
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "http: headers must map names to string values");
      const char *k = lua_tostring(L, -2), *v = lua_tostring(L, -1);
      if (strpbrk(k, "\r\n:") || strpbrk(v, "\r\n"))
        return luaL_error(L, "http: header %s contains CR, LF or ':'", k);
      if (o.n_headers == MB_HTTP_MAX_REQ_HEADERS) return luaL_error(L, "http: too many headers");
      lua_pop(L, 1);
      /* Keep each line on the stack below the iteration key so it stays alive. */
      const char *line = lua_pushfstring(L, "%s: %s", k, v);
      lua_insert(L, -2);
      lines[o.n_headers++] = line;
      if (!lua_checkstack(L, 4)) return luaL_error(L, "http: too many headers");
    }
  }
  o.headers = lines;

  const char *file = opt_str(L, 1, "body_file", NULL);
  lua_Integer fd = opt_int(L, 1, "body_fd", -1);
  if ((o.body != NULL) + (file != NULL) + (fd >= 0) > 1)
    return luaL_error(L, "http: body, body_file and body_fd are exclusive");
  if (file) {
    int f = open(file, O_RDONLY | O_CLOEXEC);
    if (f < 0) {
      char msg[512];
      snprintf(msg, sizeof msg, "cannot open body_file %s: %s", file, strerror(errno));
      return mb_lua_push_fail(L, MB_E_IO, msg);
    }
    o.body_fd = f;
    o.own_body_fd = 1;
  } else if (fd >= 0) {
    if (fd > 0x7fffffff) return luaL_error(L, "http: body_fd out of range");
    o.body_fd = (int)fd;
  }

  lreq *q = lua_newuserdatauv(L, sizeof *q, 0);
  q->r = NULL;
  q->h = h;
  q->cb_ref = LUA_NOREF;
  luaL_setmetatable(L, MB_HTTP_MT);
  struct mb_error err;
  mb_error_clear(&err);
  int rc = mb_http_start(mb_lua_host_loop(h), &o, on_change, q, &q->r, &err);
  if (rc != MB_OK) {
    if (o.own_body_fd) close(o.body_fd);
    return mb_lua_push_fail(L, rc, err.message);
  }
  lua_pushvalue(L, 2);
  q->cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

static int r_status(lua_State *L) {
  lreq *q = check_req(L);
  if (!mb_http_headers_done(q->r)) return 0;
  lua_pushinteger(L, mb_http_status(q->r));
  return 1;
}

/* Names lower-cased; repeated headers joined with ", ". */
static int r_headers(lua_State *L) {
  lreq *q = check_req(L);
  lua_newtable(L);
  size_t pos = 0, nlen, vlen;
  const char *name, *value;
  char key[256];
  while (mb_http_header_next(q->r, &pos, &name, &nlen, &value, &vlen)) {
    if (nlen >= sizeof key) continue;
    for (size_t i = 0; i < nlen; i++) key[i] = (char)tolower((unsigned char)name[i]);
    lua_pushlstring(L, key, nlen);
    lua_pushvalue(L, -1);
    lua_rawget(L, -3);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_pushlstring(L, value, vlen);
    } else {
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, value, vlen);
      lua_concat(L, 3);
    }
    lua_rawset(L, -3);
  }
  return 1;
}

static int r_done(lua_State *L) {
  lreq *q = check_req(L);
  lua_pushboolean(L, mb_http_done(q->r, NULL));
  return 1;
}

/* → nil (running or succeeded) | message, code */
static int r_error(lua_State *L) {
  lreq *q = check_req(L);
  const struct mb_error *e;
  if (!mb_http_done(q->r, &e) || e->code == MB_OK) return 0;
  lua_pushstring(L, e->message);
  lua_pushstring(L, mb_errcode(e->code));
  return 2;
}

/* → every unread byte as one string, or nil when none is buffered */
static int r_read(lua_State *L) {
  lreq *q = check_req(L);
  size_t n;
  const char *p = mb_http_peek(q->r, &n);
  if (n == 0) return 0;
  lua_pushlstring(L, p, n);
  mb_http_consume(q->r, n);
  return 1;
}

/* Unary result in one call: → status, headers, body | nil, message, code. Raises if running. */
static int r_result(lua_State *L) {
  lreq *q = check_req(L);
  const struct mb_error *e;
  if (!mb_http_done(q->r, &e)) return luaL_error(L, "http request is still running");
  if (e->code != MB_OK) return mb_lua_push_fail(L, e->code, e->message);
  lua_pushinteger(L, mb_http_status(q->r));
  r_headers(L);
  size_t n;
  const char *p = mb_http_peek(q->r, &n);
  lua_pushlstring(L, p, n);
  mb_http_consume(q->r, n);
  return 3;
}

static int r_info(lua_State *L) {
  lreq *q = check_req(L);
  mb_http_info i;
  mb_http_get_info(q->r, &i);
  size_t buffered;
  mb_http_peek(q->r, &buffered);
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, (lua_Integer)i.received); lua_setfield(L, -2, "received");
  lua_pushinteger(L, (lua_Integer)i.pauses); lua_setfield(L, -2, "pauses");
  lua_pushinteger(L, (lua_Integer)i.max_buffered); lua_setfield(L, -2, "max_buffered");
  lua_pushinteger(L, (lua_Integer)buffered); lua_setfield(L, -2, "buffered");
  lua_pushboolean(L, i.paused); lua_setfield(L, -2, "paused");
  return 1;
}

static int r_cancel(lua_State *L) {
  lreq *q = luaL_checkudata(L, 1, MB_HTTP_MT);
  if (q->r) mb_http_cancel(q->r);
  return 0;
}

static int r_close(lua_State *L) {
  lreq *q = luaL_checkudata(L, 1, MB_HTTP_MT);
  if (q->r) mb_http_free(q->r);
  q->r = NULL;
  if (q->cb_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, q->cb_ref);
  q->cb_ref = LUA_NOREF;
  return 0;
}

static int l_stats(lua_State *L) {
  mb_loop_stats *s = mb_loop_stats_of(mb_lua_host_loop(mb_lua_host_of(L)));
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)s->requests); lua_setfield(L, -2, "requests");
  lua_pushinteger(L, (lua_Integer)s->connects); lua_setfield(L, -2, "connects");
  lua_pushinteger(L, (lua_Integer)s->active); lua_setfield(L, -2, "active");
  return 1;
}

void mb_lua_open_http(lua_State *L) {
  if (luaL_newmetatable(L, MB_HTTP_MT)) {
    static const luaL_Reg m[] = {
      {"status", r_status}, {"headers", r_headers}, {"done", r_done}, {"error", r_error},
      {"read", r_read}, {"result", r_result}, {"info", r_info}, {"cancel", r_cancel}, {"close", r_close},
      {"__gc", r_close}, {NULL, NULL}};
    luaL_setfuncs(L, m, 0);
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  static const luaL_Reg f[] = {{"http_request", l_request}, {"http_stats", l_stats}, {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
