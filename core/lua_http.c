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

typedef struct {
  mb_http_req *r;
  mb_lua_host *h;
  int cb_ref;
  struct mb_lua_http_bufs bufs; /* header lines (during start) and body pieces (request's life) */
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

/* See lua_moonbox.h. Strings pushed here stay on the stack until the caller pops them. */
int mb_lua_http_opts(lua_State *L, int t, mb_http_opts *o, struct mb_lua_http_bufs *b) {
  memset(o, 0, sizeof *o);
  o->body_fd = -1;
  o->url = mb_lua_opt_str(L, t, "http", "url", NULL);
  if (!o->url) return luaL_error(L, "http: url is required");
  o->method = mb_lua_opt_str(L, t, "http", "method", NULL);
  lua_getfield(L, t, "body");
  int bt = lua_type(L, -1);
  if (bt == LUA_TSTRING) {
    o->body = lua_tolstring(L, -1, &o->body_len);  /* stays on the stack */
  } else if (bt == LUA_TTABLE) {
    /* pieces sent as they are, not joined or copied: the caller anchors the table */
    char *p[MB_LUA_HTTP_MAX_PARTS + 1];
    size_t lens[MB_LUA_HTTP_MAX_PARTS + 1];
    size_t n = mb_lua_check_strings(L, -1, "http", "body", 0, MB_LUA_HTTP_MAX_PARTS, p, lens);
    for (size_t i = 0; i < n; i++) {
      b->parts[i].p = p[i];
      b->parts[i].len = lens[i];
    }
    o->body_parts = b->parts;
    o->n_body_parts = n;
    b->body_table = 1;
  } else if (bt != LUA_TNIL) {
    return luaL_error(L, "http: body must be a string or a list of strings");
  } else {
    lua_pop(L, 1);
  }
  o->stream = mb_lua_opt_bool(L, t, "http", "stream", 0);
  o->max_bytes = (size_t)mb_lua_opt_int(L, t, "http", "max_bytes", 0, 0, LUA_MAXINTEGER);
  o->high_water = (size_t)mb_lua_opt_int(L, t, "http", "buffer_bytes", 0, 0, LUA_MAXINTEGER);
  o->timeout_ms = (long)mb_lua_opt_int(L, t, "http", "timeout_ms", 0, 0, LUA_MAXINTEGER);
  o->connect_timeout_ms = (long)mb_lua_opt_int(L, t, "http", "connect_timeout_ms", 0, 0, LUA_MAXINTEGER);
  o->idle_timeout_ms = (long)mb_lua_opt_int(L, t, "http", "idle_timeout_ms", 0, 0, LUA_MAXINTEGER);
  o->ca_file = mb_lua_opt_str(L, t, "http", "ca_file", NULL);
  lua_getfield(L, t, "connect_to");   /* the list (kept on the stack) anchors its strings */
  if (!lua_isnil(L, -1)) {
    size_t n = mb_lua_check_strings(L, -1, "http", "connect_to", 0, MB_HTTP_MAX_CONNECT_TO, b->connect_to, NULL);
    for (size_t i = 0; i < n; i++) {
      const char *v = b->connect_to[i];
      int colons = 0;
      for (const char *c = v; *c; c++) colons += *c == ':';
      if (colons < 3 || strpbrk(v, "\r\n"))
        return luaL_error(L, "http: connect_to[%d] must be HOST:PORT:TO-HOST:TO-PORT", (int)i + 1);
    }
    o->connect_to = (const char *const *)b->connect_to;
    o->n_connect_to = n;
  }

  lua_getfield(L, t, "headers");
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
      if (o->n_headers == MB_HTTP_MAX_REQ_HEADERS) return luaL_error(L, "http: too many headers");
      lua_pop(L, 1);
      /* Keep each line on the stack below the iteration key so it stays alive. */
      const char *line = lua_pushfstring(L, "%s: %s", k, v);
      lua_insert(L, -2);
      b->lines[o->n_headers++] = line;
      if (!lua_checkstack(L, 4)) return luaL_error(L, "http: too many headers");
    }
  }
  o->headers = b->lines;

  const char *file = mb_lua_opt_str(L, t, "http", "body_file", NULL);
  lua_Integer fd = mb_lua_opt_int(L, t, "http", "body_fd", -1, 0, 0x7fffffff);
  lua_getfield(L, t, "body_source");
  int has_source = !lua_isnil(L, -1);
  if (has_source) {
    if (!b->source_ok) return luaL_error(L, "http: body_source is only for requests (core.http_request)");
    if (mb_lua_pack_source(L, lua_gettop(L), &b->source) < 0)
      return luaL_error(L, "http: body_source must be an open pack (core.sync_root():pack)");
    o->body_source = &b->source;
  }
  lua_pop(L, 1);
  if ((o->body != NULL) + (o->body_parts != NULL) + (file != NULL) + (fd >= 0) + has_source > 1)
    return luaL_error(L, "http: body, body_file, body_fd and body_source are exclusive");
  if (file) {
    int f = open(file, O_RDONLY | O_CLOEXEC);
    if (f < 0) {
      char msg[512];
      snprintf(msg, sizeof msg, "cannot open body_file %s: %s", file, strerror(errno));
      mb_lua_push_error(L, mb_errcode(MB_E_IO), msg);
      return -1;
    }
    o->body_fd = f;
    o->own_body_fd = 1;
  } else if (fd >= 0) {
    o->body_fd = (int)fd;
  }
  return 0;
}

/* core.http_request({url=, method=, headers=, body= (string or list of strings) | body_file= |
 *                   body_fd= | body_source= (a pack, sent chunked), stream=, max_bytes=, buffer_bytes=,
 *                   timeout_ms=, connect_timeout_ms=, ca_file=, connect_to=}, fn [, stream])
 * → request | nil, err. Bad arguments raise. */
static int l_request(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int stream_arg = lua_isnoneornil(L, 3) ? -1 : lua_toboolean(L, 3);   /* before anything is pushed */
  mb_lua_host *h = mb_lua_host_of(L);
  lreq *q = mb_lua_new_object(L, sizeof *q, 1, MB_HTTP_MT);
  q->h = h;
  q->cb_ref = LUA_NOREF;
  int qi = lua_gettop(L);
  mb_http_opts o;
  q->bufs.source_ok = 1;
  if (mb_lua_http_opts(L, 1, &o, &q->bufs) < 0) return 2;
  if (q->bufs.body_table) { /* the pieces live as long as the request */
    lua_getfield(L, 1, "body");
    lua_setiuservalue(L, qi, 1);
  } else if (o.body_source) { /* so does the source: C alone holds it while the task waits */
    lua_getfield(L, 1, "body_source");
    lua_setiuservalue(L, qi, 1);
  }
  /* The stream flag is the third argument, else opts.stream. */
  if (stream_arg >= 0) o.stream = stream_arg;
  if (!o.stream && o.max_bytes == 0) {
    if (o.own_body_fd) close(o.body_fd);            /* opened for body_file: raising must not leak it */
    return luaL_error(L, "http: max_bytes is required (> 0)");
  }
  struct mb_error err;
  mb_error_clear(&err);
  int rc = mb_http_start(mb_lua_host_loop(h), &o, on_change, q, &q->r, &err);
  if (rc != MB_OK) {
    if (o.own_body_fd) close(o.body_fd);
    return mb_lua_push_error(L, mb_errcode(rc), err.message);
  }
  lua_pushvalue(L, 2);
  q->cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, qi);
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

/* → nil (running or succeeded) | err */
static int r_error(lua_State *L) {
  lreq *q = check_req(L);
  const struct mb_error *e;
  if (!mb_http_done(q->r, &e) || e->code == MB_OK) return 0;
  mb_lua_push_mberror(L, e);
  return 1;
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

/* Unary result in one call: → status, headers, body | nil, err. Raises if running. */
static int r_result(lua_State *L) {
  lreq *q = check_req(L);
  const struct mb_error *e;
  if (!mb_http_done(q->r, &e)) return luaL_error(L, "http request is still running");
  if (e->code != MB_OK) return mb_lua_push_mberror(L, e);
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
  static const luaL_Reg m[] = {
    {"status", r_status}, {"headers", r_headers}, {"done", r_done}, {"error", r_error},
    {"read", r_read}, {"result", r_result}, {"info", r_info}, {"cancel", r_cancel}, {"close", r_close},
    {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", r_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_HTTP_MT, m, meta);
  static const luaL_Reg f[] = {{"http_request", l_request}, {"http_stats", l_stats}, {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
