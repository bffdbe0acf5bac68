/* router.c — see router.h. */
#include "router.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <jansson.h>

#include "users.h"
#include "volumes.h"

static char *g_api_key;
static char g_domain[RT_DOMAIN_MAX + 1];   /* "" without edge routing */

bool rt_valid_domain(const char *d) {
  size_t n = d ? strlen(d) : 0;
  if (n == 0 || n > RT_DOMAIN_MAX || d[0] == '.' || d[0] == '-' || d[n - 1] == '.' || strstr(d, "..")) return false;
  for (const char *p = d; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.')) return false;
  return true;
}

void router_init(const char *api_key, const char *domain) {
  free(g_api_key);
  g_api_key = api_key ? strdup(api_key) : NULL;
  snprintf(g_domain, sizeof g_domain, "%s", domain && rt_valid_domain(domain) ? domain : "");
}

void router_shutdown(void) {
  free(g_api_key);
  g_api_key = NULL;
  g_domain[0] = '\0';
}

/* ---- the tables ---- */

/* Who must prove what, per route: the auth table. Everything else (the control plane, including
 * its paths that lead nowhere) needs the API key. */
typedef enum { AUTH_NONE, AUTH_API_KEY, AUTH_ENVD_TOKEN, AUTH_FILES, AUTH_VOLUME_TOKEN, AUTH_TRAFFIC_TOKEN } auth_kind;
static auth_kind auth_of(int r) {
  switch (r) {
    case RT_HEALTH: case RT_ENVD_HEALTH: return AUTH_NONE;
    case RT_TEMPLATE_UPLOAD: return AUTH_NONE;         /* its one-time token: the handler's, before any body byte */
    case RT_PORT: return AUTH_TRAFFIC_TOKEN;          /* none when the sandbox's ports are public */
    case RT_FILES: return AUTH_FILES;
    case RT_VOLUME_CONTENT: return AUTH_VOLUME_TOKEN;
    case RT_PROCESS: case RT_FILESYSTEM: case RT_RPC_UNKNOWN: return AUTH_ENVD_TOKEN;
    default: return AUTH_API_KEY;
  }
}

/* The control plane's routes. A pattern's "{id}" is one path segment (a sandbox id), "{ref}" one
 * segment naming a template; a trailing "*" matches any rest. Method "*" is any method. */
static const struct {
  const char *method, *pattern;
  rt_route route;
  const char *message;       /* RT_UNIMPLEMENTED */
} CONTROL[] = {
  {"POST", "/sandboxes", RT_CREATE, NULL},
  {"GET", "/sandboxes", RT_LIST, NULL},
  {"POST", "/v2/sandboxes", RT_CREATE_V2, NULL},
  {"GET", "/v2/sandboxes", RT_LIST, NULL},
  {"GET", "/sandboxes/{id}", RT_GET, NULL},
  {"DELETE", "/sandboxes/{id}", RT_KILL, NULL},
  {"POST", "/sandboxes/{id}/timeout", RT_TIMEOUT, NULL},
  {"POST", "/sandboxes/{id}/connect", RT_CONNECT, NULL},
  {"POST", "/v2/sandboxes/{id}/connect", RT_CONNECT, NULL},
  {"POST", "/sandboxes/{id}/resume", RT_CONNECT, NULL},   /* deprecated alias */
  {"POST", "/sandboxes/{id}/pause", RT_PAUSE, NULL},
  {"POST", "/sandboxes/{id}/fork", RT_FORK, NULL},
  {"POST", "/sandboxes/{id}/snapshots", RT_SNAPSHOT_CREATE, NULL},
  {"GET", "/snapshots", RT_SNAPSHOT_LIST, NULL},
  {"POST", "/templates/tags", RT_TEMPLATE_TAGS_ASSIGN, NULL},        /* before /templates/{ref}: "tags" is no template */
  {"DELETE", "/templates/tags", RT_TEMPLATE_TAGS_REMOVE, NULL},
  {"GET", "/templates/{ref}/tags", RT_TEMPLATE_TAGS, NULL},
  {"DELETE", "/templates/{ref}", RT_TEMPLATE_DELETE, NULL},
  {"GET", "/templates", RT_TEMPLATE_LIST, NULL},
  {"GET", "/templates/aliases/{ref}", RT_TEMPLATE_ALIAS, NULL},
  {"GET", "/sandboxes/{id}/metrics", RT_METRICS, NULL},
  {"GET", "/sandboxes/{id}/logs", RT_LOGS, NULL},
  {"GET", "/v2/sandboxes/{id}/logs", RT_LOGS_V2, NULL},
  {"PUT", "/sandboxes/{id}/network", RT_NETWORK, NULL},
  {"POST", "/v3/templates", RT_TEMPLATE_REQUEST, NULL},
  {"GET", "/templates/{ref}/files/*", RT_TEMPLATE_FILE, NULL},
  {"PUT", "/templates/{ref}/files/*", RT_TEMPLATE_UPLOAD, NULL},
  {"POST", "/v2/templates/{ref}/builds/*", RT_TEMPLATE_BUILD, NULL},
  {"GET", "/templates/{ref}/builds/*", RT_TEMPLATE_BUILD_STATUS, NULL},
  {"*", "/snapshots/*", RT_UNIMPLEMENTED, "snapshot routes other than GET /snapshots are not implemented by sandboxd"},
  {"*", "/templates*", RT_UNIMPLEMENTED, "not implemented by sandboxd (template builds are POST /v3/templates, GET/PUT /templates/{id}/files/{hash}, POST /v2/templates/{id}/builds/{id}, GET /templates/{id}/builds/{id}/status; tags POST/DELETE /templates/tags, GET /templates/{id}/tags)"},
  {"*", "/v2/templates*", RT_UNIMPLEMENTED, "not implemented by sandboxd (template builds are POST /v3/templates, then POST /v2/templates/{id}/builds/{id})"},
  {"*", "/v3/templates*", RT_UNIMPLEMENTED, "not implemented by sandboxd (template builds are POST /v3/templates, then POST /v2/templates/{id}/builds/{id})"},
  {"POST", "/volumes", RT_VOLUME_CREATE, NULL},
  {"GET", "/volumes", RT_VOLUME_LIST, NULL},
  {"GET", "/volumes/{ref}", RT_VOLUME_GET, NULL},
  {"DELETE", "/volumes/{ref}", RT_VOLUME_DELETE, NULL},
  {"GET", "/volumecontent/{ref}/dir", RT_VOLUME_CONTENT, NULL},
  {"POST", "/volumecontent/{ref}/dir", RT_VOLUME_CONTENT, NULL},
  {"GET", "/volumecontent/{ref}/file", RT_VOLUME_CONTENT, NULL},
  {"PUT", "/volumecontent/{ref}/file", RT_VOLUME_CONTENT, NULL},
  {"GET", "/volumecontent/{ref}/path", RT_VOLUME_CONTENT, NULL},
  {"PATCH", "/volumecontent/{ref}/path", RT_VOLUME_CONTENT, NULL},
  {"DELETE", "/volumecontent/{ref}/path", RT_VOLUME_CONTENT, NULL},
  {"POST", "/secrets", RT_SECRET_CREATE, NULL},
  {"GET", "/secrets", RT_SECRET_LIST, NULL},
  {"GET", "/secrets/{ref}", RT_SECRET_GET, NULL},
  {"POST", "/secrets/{ref}", RT_SECRET_UPDATE, NULL},
  {"DELETE", "/secrets/{ref}", RT_SECRET_DELETE, NULL},
};

/* Does path match pattern? The {id} or {ref} segment goes to seg (NUL-terminated; *seglen is its
 * length, which may exceed what fits). */
static bool match(const char *pattern, const char *path, char *seg, size_t cap, size_t *seglen) {
  const char *p = pattern, *s = path;
  while (*p) {
    if (*p == '*') return true;
    size_t ph = !strncmp(p, "{id}", 4) ? 4 : !strncmp(p, "{ref}", 5) ? 5 : 0;
    if (ph) {
      size_t n = strcspn(s, "/");
      if (n == 0) return false;
      snprintf(seg, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
      *seglen = n;
      s += n;
      p += ph;
      continue;
    }
    if (*p != *s) return false;
    p++;
    s++;
  }
  return *s == 0 || (s[0] == '/' && s[1] == 0);   /* one trailing slash is the same path */
}

/* ---- refusals ---- */

static int refuse(char *body, size_t bodylen, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* {"code": code, "message": msg} into body (a message that is not UTF-8 says so). → status */
static int error_body(char *body, size_t bodylen, int status, json_t *code, const char *msg, const char *oom) {
  json_t *m = json_string(msg);
  json_t *j = json_pack("{s:o,s:o}", "code", code, "message", m ? m : json_string("(not UTF-8)"));
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  snprintf(body, bodylen, "%s", s ? s : oom);
  free(s);
  return status;
}

static int refuse(char *body, size_t bodylen, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return error_body(body, bodylen, status, json_integer(status), msg, "{\"code\":500,\"message\":\"out of memory\"}");
}

/* The volume content API's error shape: {"code": "<what>", "message"} (its Error has a string code). */
static int refuse_volume(char *body, size_t bodylen, int status, const char *msg) {
  const char *code = status == 401 ? "unauthorized" : status == 404 ? "not_found" : "invalid_request";
  return error_body(body, bodylen, status, json_string(code), msg, "{\"code\":\"internal\",\"message\":\"out of memory\"}");
}

/* E2B's edge's shape for a sandbox's refusals: {"sandboxId", "message", "code"}. */
static int refuse_sandbox(char *body, size_t bodylen, int status, const char *id, const char *msg) {
  json_t *sid = json_string(id);
  json_t *j = json_pack("{s:o,s:s,s:i}", "sandboxId", sid ? sid : json_string("?"), "message", msg, "code", status);
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  snprintf(body, bodylen, "%s", s ? s : "{\"code\":500,\"message\":\"out of memory\"}");
  free(s);
  return status;
}

/* envd's answer for a sandbox it does not (or no longer) serve. */
static int refuse_502(char *body, size_t bodylen, const char *id) {
  return refuse_sandbox(body, bodylen, 502, id, "The sandbox was not found");
}

/* ---- /files signatures (reference §6.4) ---- */

typedef struct { const char *path, *op, *user, *sig; int64_t exp; } sig_req;

/* From the query; 0, or 401 with the reason in body. */
static int sig_from_query(const rt_view *v, sig_req *s, char *body, size_t bodylen) {
  s->op = !strcmp(v->method, "POST") ? "write" : "read";
  s->path = v->query(v->req, "path") ? v->query(v->req, "path") : "";
  s->user = v->query(v->req, "username") ? v->query(v->req, "username") : "";
  s->sig = v->query(v->req, "signature");
  s->exp = 0;
  const char *es = v->query(v->req, "signature_expiration");
  if (es && *es) {
    char *end;
    long long x = strtoll(es, &end, 10);
    if (*end || end == es) return refuse(body, bodylen, 401, "invalid signature expiration '%.100s'", es);
    s->exp = x;
  }
  if (!s->sig || !*s->sig) return refuse(body, bodylen, 401, "missing signature query parameter");
  return 0;
}

static bool sig_matches(const char *token, void *cls) {
  const sig_req *s = cls;
  return auth_signature(s->path, s->op, s->user, token, s->exp, s->sig, 0) == AUTH_SIG_OK;
}

/* envd's rule: a valid X-Access-Token, else a valid and unexpired signature. */
static int files_auth(const rt_view *v, const char *token, int64_t now_s, char *body, size_t bodylen) {
  if (!token) return 0;
  if (auth_secret_eq(v->header(v->req, "X-Access-Token"), token)) return 0;
  sig_req s;
  int st = sig_from_query(v, &s, body, bodylen);
  if (st) return st;
  auth_sig a = auth_signature(s.path, s.op, s.user, token, s.exp, s.sig, now_s);
  if (a == AUTH_SIG_BAD) return refuse(body, bodylen, 401, "invalid signature");
  if (a == AUTH_SIG_EXPIRED) return refuse(body, bodylen, 401, "signature is already expired");
  return 0;
}

static int files_user(const rt_view *v, rt_decision *d, char *body, size_t bodylen) {
  const char *u = v->query(v->req, "username");
  if (!u || !*u) u = USERS_DEFAULT;
  uid_t uid;
  gid_t gid;
  const char *home;
  if (strlen(u) > AUTH_USER_MAX || users_lookup(u, &uid, &gid, &home) != 0)
    return refuse(body, bodylen, 401, "error looking up user '%.100s': unknown user", u);
  snprintf(d->user, sizeof d->user, "%s", u);
  return 0;
}

/* ---- admission: 1. the route (and, for envd, its sandbox), 2. the auth table's check, 3. what
 * only the route can refuse ---- */

enum { RT_NO_ENDPOINT = 1000, RT_BAD_METHOD, RT_BAD_ID, RT_BAD_REF };   /* refusals found while routing */

static rt_route control_route(const rt_view *v, rt_decision *d) {
  bool path_known = false;
  for (size_t i = 0; i < sizeof CONTROL / sizeof CONTROL[0]; i++) {
    char seg[RT_REF_MAX + 2] = "";
    size_t seglen = 0;
    if (!match(CONTROL[i].pattern, v->path, seg, sizeof seg, &seglen)) continue;
    path_known = true;
    if (strcmp(CONTROL[i].method, "*") != 0 && strcmp(CONTROL[i].method, v->method) != 0) continue;
    if (strstr(CONTROL[i].pattern, "{ref}")) {
      snprintf(d->ref, sizeof d->ref, "%.*s", RT_REF_MAX, seg);
      d->message = CONTROL[i].message;
      const char *last = strrchr(CONTROL[i].pattern, '/');
      if (CONTROL[i].route == RT_VOLUME_CONTENT) snprintf(d->rpc, sizeof d->rpc, "%s", last + 1);   /* dir, file, path */
      return seglen > RT_REF_MAX ? (rt_route)RT_BAD_REF : CONTROL[i].route;
    }
    snprintf(d->id, sizeof d->id, "%.64s", seg);
    if (seg[0] && !reg_valid_id(seg)) return (rt_route)RT_BAD_ID;
    d->message = CONTROL[i].message;
    return CONTROL[i].route;
  }
  return (rt_route)(path_known ? RT_BAD_METHOD : RT_NO_ENDPOINT);
}

static rt_route envd_route(const char *p, rt_decision *d) {
  if (!strcmp(p, "/files")) return RT_FILES;
  if (p[0] != '/' || !strchr(p + 1, '/') || !strchr(p, '.')) return (rt_route)RT_NO_ENDPOINT;
  /* /<package>.<Service>/<Method> */
  const char *m = strchr(p + 1, '/') + 1;
  snprintf(d->rpc, sizeof d->rpc, "%.63s", m);
  if (!strncmp(p, "/process.Process/", 17)) return RT_PROCESS;
  if (!strncmp(p, "/filesystem.Filesystem/", 23)) return RT_FILESYSTEM;
  return RT_RPC_UNKNOWN;
}

/* envd's user: Basic authorization for RPCs (a refusal is the handler's to report, in Connect's
 * shape), ?username for /files. */
static int rpc_user(const rt_view *v, rt_decision *d) {
  snprintf(d->user, sizeof d->user, "%s", USERS_DEFAULT);
  const char *authz = v->header(v->req, "Authorization");
  uid_t uid;
  gid_t gid;
  const char *home;
  if (authz && auth_basic_user(authz, d->user, &d->user_error) != 0) snprintf(d->user, sizeof d->user, "%s", USERS_DEFAULT);
  else if (users_lookup(d->user, &uid, &gid, &home) != 0) d->user_unknown = true;
  return 0;
}

static int check(const rt_view *v, int64_t now_s, rt_decision *d, char *body, size_t bodylen) {
  switch (auth_of(d->route)) {
    case AUTH_NONE:
      return 0;
    case AUTH_API_KEY: {
      const char *key = v->header(v->req, "X-API-KEY");
      if (!g_api_key || !auth_secret_eq(key, g_api_key))
        return refuse(body, bodylen, 401, "%s", key ? "invalid API key" : "missing X-API-KEY header");
      return 0;
    }
    case AUTH_ENVD_TOKEN: {
      const char *tok = reg_token(d->entry);
      if (tok && !auth_secret_eq(v->header(v->req, "X-Access-Token"), tok))
        return refuse(body, bodylen, 401, "unauthorized access, please provide a valid access token or method signing if supported");
      return rpc_user(v, d);
    }
    case AUTH_FILES: {
      int st = files_auth(v, reg_token(d->entry), now_s, body, bodylen);
      return st ? st : files_user(v, d, body, bodylen);
    }
    case AUTH_TRAFFIC_TOKEN: {
      /* allowPublicTraffic: false — E2B's edge's words and status */
      const char *tok = reg_traffic_token(d->entry), *given = v->header(v->req, RT_TRAFFIC_TOKEN_HEADER);
      if (!tok) return 0;
      if (!given || !*given)
        return refuse_sandbox(body, bodylen, 403, reg_id(d->entry),
                              "Sandbox is secured with traffic access token. Token header '" RT_TRAFFIC_TOKEN_HEADER "' is missing");
      if (!auth_secret_eq(given, tok))
        return refuse_sandbox(body, bodylen, 403, reg_id(d->entry), "Sandbox is secured with traffic access token. Provided token is invalid.");
      return 0;
    }
    case AUTH_VOLUME_TOKEN: {
      const char *authz = v->header(v->req, "Authorization");
      const char *token = authz && !strncasecmp(authz, "Bearer ", 7) ? authz + 7 : NULL;
      int st = 0;
      char msg[300];
      d->volume = vol_access(d->ref, token, &st, msg, sizeof msg);
      return d->volume ? 0 : refuse_volume(body, bodylen, st, msg);
    }
  }
  return refuse(body, bodylen, 500, "no credentials rule for this route");
}

/* ---- which sandbox and port (E2B's edge, the path proxy, the routing headers) ---- */

/* A port: 1..65535 in decimal digits only. */
static bool parse_port(const char *s, size_t n, unsigned *port) {
  if (n == 0 || n > 5) return false;
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (unsigned)(s[i] - '0');
  }
  if (v == 0 || v > 65535) return false;
  *port = v;
  return true;
}

typedef enum { TGT_NONE, TGT_CONTROL, TGT_SANDBOX } target_kind;
typedef struct {
  target_kind kind;
  char id[65];
  unsigned port;             /* 0: envd (no port named) */
  const char *path;          /* what the sandbox's side sees */
  size_t strip;
} target;

/* The Host header's name, lower-cased, without its port and a final dot; false if it has none
 * that fits. */
static bool host_name(const rt_view *v, char *out, size_t cap) {
  const char *h = v->header(v->req, "Host");
  if (!h || !*h || h[0] == '[') return false;                 /* an IPv6 literal names no domain */
  size_t n = strcspn(h, ":");
  if (n >= cap) return false;
  for (size_t i = 0; i < n; i++) out[i] = (char)(h[i] >= 'A' && h[i] <= 'Z' ? h[i] - 'A' + 'a' : h[i]);
  out[n] = '\0';
  if (n && out[n - 1] == '.') out[n - 1] = '\0';
  return true;
}

/* Host routing under the domain: TGT_NONE when the host is not under it; else TGT_CONTROL or
 * TGT_SANDBOX, or a refusal (status, body). */
static int edge_target(const rt_view *v, target *t, char *body, size_t bodylen) {
  char host[RT_DOMAIN_MAX + 160];
  size_t dl = strlen(g_domain);
  if (!dl || !host_name(v, host, sizeof host)) return 0;
  size_t hl = strlen(host);
  if (hl < dl || strcmp(host + hl - dl, g_domain) != 0) return 0;
  if (hl == dl) return refuse(body, bodylen, 400, "Invalid host");
  if (host[hl - dl - 1] != '.') return 0;                     /* e.g. xD for domain D: not under it */
  host[hl - dl - 1] = '\0';                                   /* the label(s) before the domain */
  if (!strcmp(host, "api")) { t->kind = TGT_CONTROL; return 0; }
  t->kind = TGT_SANDBOX;
  t->path = v->path;
  if (!strcmp(host, "sandbox")) {                             /* the shared host: routing headers */
    const char *sid = v->header(v->req, "E2b-Sandbox-Id"), *sp = v->header(v->req, "E2b-Sandbox-Port");
    if ((!sid || !*sid) && (!sp || !*sp)) return refuse(body, bodylen, 400, "Invalid host");   /* no headers: the name itself */
    if (!sid || !*sid) return refuse(body, bodylen, 400, "Missing header: E2b-Sandbox-Id");
    if (!sp || !*sp) return refuse(body, bodylen, 400, "Missing header: E2b-Sandbox-Port");
    if (!parse_port(sp, strlen(sp), &t->port)) return refuse(body, bodylen, 400, "Invalid sandbox port");
    if (!reg_valid_id(sid)) return refuse(body, bodylen, 400, "Invalid sandbox ID");
    snprintf(t->id, sizeof t->id, "%s", sid);
    return 0;
  }
  /* <port>-<id>[-<anything>] in one label */
  const char *dash = strchr(host, '-');
  if (!dash || strchr(host, '.')) return refuse(body, bodylen, 400, "Invalid host");
  if (!parse_port(host, (size_t)(dash - host), &t->port)) return refuse(body, bodylen, 400, "Invalid sandbox port");
  size_t il = strcspn(dash + 1, "-");
  if (il == 0 || il >= sizeof t->id) return refuse(body, bodylen, 400, "Invalid sandbox ID");
  snprintf(t->id, sizeof t->id, "%.*s", (int)il, dash + 1);
  if (!reg_valid_id(t->id)) return refuse(body, bodylen, 400, "Invalid sandbox ID");
  return 0;
}

#define PATH_PROXY "/_sandbox/"

/* Plain mode: /_sandbox/<id>/<port>[/<path>], or the routing headers. */
static int plain_target(const rt_view *v, target *t, char *body, size_t bodylen) {
  if (!strncmp(v->path, PATH_PROXY, sizeof PATH_PROXY - 1)) {
    const char *id = v->path + sizeof PATH_PROXY - 1, *slash = strchr(id, '/');
    const char *port = slash ? slash + 1 : NULL;
    size_t il = slash ? (size_t)(slash - id) : 0, pl = port ? strcspn(port, "/") : 0;
    if (!slash || il == 0 || il >= sizeof t->id)
      return refuse(body, bodylen, 404, "the port proxy's paths are " PATH_PROXY "<sandbox id>/<port>/<path>");
    snprintf(t->id, sizeof t->id, "%.*s", (int)il, id);
    if (!reg_valid_id(t->id)) return refuse(body, bodylen, 400, "Invalid sandbox ID");
    if (!parse_port(port, pl, &t->port)) return refuse(body, bodylen, 400, "Invalid sandbox port");
    t->kind = TGT_SANDBOX;
    t->strip = (size_t)(port + pl - v->path);
    t->path = port[pl] ? port + pl : "/";
    return 0;
  }
  const char *sid = v->header(v->req, "E2b-Sandbox-Id");
  if (!sid) return 0;
  t->kind = TGT_SANDBOX;
  t->path = v->path;
  snprintf(t->id, sizeof t->id, "%.64s", sid);
  const char *sp = v->header(v->req, "E2b-Sandbox-Port");
  if (sp && *sp && !parse_port(sp, strlen(sp), &t->port)) return refuse(body, bodylen, 400, "Invalid sandbox port");
  return 0;
}

/* A body follows the headers (the proxy streams it to the port). */
static bool has_body(const rt_view *v) {
  const char *cl = v->header(v->req, "Content-Length"), *te = v->header(v->req, "Transfer-Encoding");
  return (te && *te) || (cl && strtoull(cl, NULL, 10) > 0);
}

/* envd of sandbox `sid` (its own port or by header), or its port through the proxy. */
static int sandbox_admit(const rt_view *v, const target *t, rt_decision *d, char *body, size_t bodylen) {
  const char *sid = t->id;
  if (t->port && t->port != RT_ENVD_PORT) {
    reg_entry *e = reg_get(sid);         /* woken once its credentials are checked (router_admit) */
    if (!e) return refuse_502(body, bodylen, sid);
    d->entry = e;
    d->route = RT_PORT;
    d->port = t->port;
    d->strip = t->strip;
    d->upload = has_body(v);
    return 0;
  }
  if (!strcmp(t->path, "/health")) {
    reg_entry *w = reg_get(sid);   /* traffic wakes an auto-resume sandbox */
    if (w) { (void)reg_wake(w); reg_put(w); }
    /* A sandbox being destroyed is still reported until it is completely gone (like GET). */
    if (!reg_exists(sid)) return refuse_502(body, bodylen, sid);
    d->route = RT_ENVD_HEALTH;
    return 0;
  }
  reg_entry *e = reg_get(sid);
  if (!e || reg_wake(e) != 0) { reg_put(e); return refuse_502(body, bodylen, sid); }
  d->entry = e;
  d->route = envd_route(t->path, d);
  if ((int)d->route == RT_NO_ENDPOINT) return refuse(body, bodylen, 404, "envd has no endpoint %.60s %.300s", v->method, t->path);
  return 0;
}

int router_admit(const rt_view *v, int64_t now_s, rt_decision *d, char *body, size_t bodylen) {
  memset(d, 0, sizeof *d);
  target t = {0};
  int st = edge_target(v, &t, body, bodylen);
  if (!st && t.kind == TGT_NONE) st = plain_target(v, &t, body, bodylen);
  if (st) return st;
  if (t.kind == TGT_SANDBOX) {
    st = sandbox_admit(v, &t, d, body, bodylen);
    if (!st && d->route == RT_PORT) {
      /* The auth table first: a request without the traffic token wakes no paused sandbox. */
      st = check(v, now_s, d, body, bodylen);
      if (!st && reg_wake(d->entry) != 0) st = refuse_502(body, bodylen, reg_id(d->entry));
    }
    if (st) { router_release(d); return st; }
    if (d->route == RT_ENVD_HEALTH || d->route == RT_PORT) return 0;
  } else if (t.kind == TGT_NONE && !strcmp(v->path, "/files")) {
    /* Signed URLs carry no routing header: the signature names the sandbox (the one whose token
     * verifies it). */
    const char *sig = v->query(v->req, "signature");
    if (!sig || !*sig)
      return refuse(body, bodylen, 401, "missing signature query parameter: signed URLs need a sandbox created with "
                    "secure: true (this request has no E2b-Sandbox-Id header and no signature, so it names no sandbox)");
    sig_req s;
    if ((st = sig_from_query(v, &s, body, bodylen))) return st;
    reg_entry *e = reg_find_by_token(sig_matches, &s);
    if (!e) return refuse(body, bodylen, 401, "invalid signature");
    d->entry = e;
    if (reg_wake(e) != 0) st = refuse_502(body, bodylen, reg_id(e));
    d->route = RT_FILES;
  } else if (!strcmp(v->path, "/health") && !strcmp(v->method, "GET")) {
    d->route = RT_HEALTH;                  /* readiness probe, no key */
  } else {
    d->route = control_route(v, d);
  }
  /* A control-plane request the table does not know still needs the key: 401 before 404/405. */
  if (!st) st = check(v, now_s, d, body, bodylen);
  if (!st && (int)d->route == RT_NO_ENDPOINT) st = refuse(body, bodylen, 404, "no endpoint %.60s %.300s", v->method, v->path);
  if (!st && (int)d->route == RT_BAD_METHOD) st = refuse(body, bodylen, 405, "method %.60s is not allowed on %.300s", v->method, v->path);
  if (!st && (int)d->route == RT_BAD_ID) st = refuse(body, bodylen, 404, "sandbox '%s' not found", d->id);
  if (!st && (int)d->route == RT_BAD_REF) st = refuse(body, bodylen, 400, "a name or id in the path of more than %d bytes", RT_REF_MAX);
  if (!st && d->route == RT_FILES) d->upload = !strcmp(v->method, "POST");
  if (!st && d->route == RT_VOLUME_CONTENT) d->upload = !strcmp(v->method, "PUT");
  if (!st && d->route == RT_TEMPLATE_UPLOAD) d->upload = true;
  if (st) router_release(d);
  return st;
}

void router_release(rt_decision *d) {
  if (d->entry) reg_put(d->entry);
  d->entry = NULL;
  if (d->volume) vol_put(d->volume);
  d->volume = NULL;
}
