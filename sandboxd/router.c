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

void router_init(const char *api_key) {
  free(g_api_key);
  g_api_key = api_key ? strdup(api_key) : NULL;
}

void router_shutdown(void) {
  free(g_api_key);
  g_api_key = NULL;
}

/* ---- the tables ---- */

/* Who must prove what, per route: the auth table. Everything else (the control plane, including
 * its paths that lead nowhere) needs the API key. */
typedef enum { AUTH_NONE, AUTH_API_KEY, AUTH_ENVD_TOKEN, AUTH_FILES, AUTH_VOLUME_TOKEN } auth_kind;
static auth_kind auth_of(int r) {
  switch (r) {
    case RT_HEALTH: case RT_ENVD_HEALTH: return AUTH_NONE;
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
  {"DELETE", "/templates/{ref}", RT_TEMPLATE_DELETE, NULL},
  {"GET", "/sandboxes/{id}/metrics", RT_METRICS, NULL},
  {"PUT", "/sandboxes/{id}/network", RT_UNIMPLEMENTED, "network updates are not implemented by sandboxd"},
  {"*", "/snapshots/*", RT_UNIMPLEMENTED, "snapshot routes other than GET /snapshots are not implemented by sandboxd"},
  {"*", "/templates*", RT_UNIMPLEMENTED, "template builds are not implemented by sandboxd (templates are 'base' and snapshots; DELETE /templates/{id} deletes a snapshot)"},
  {"*", "/v2/templates*", RT_UNIMPLEMENTED, "template builds are not implemented by sandboxd (templates are 'base' and snapshots)"},
  {"*", "/v3/templates*", RT_UNIMPLEMENTED, "template builds are not implemented by sandboxd (templates are 'base' and snapshots)"},
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
  {"*", "/secrets*", RT_UNIMPLEMENTED, "secrets are not implemented by sandboxd"},
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
static int refuse(char *body, size_t bodylen, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *m = json_string(msg);
  json_t *j = json_pack("{s:i,s:o}", "code", status, "message", m ? m : json_string("(not UTF-8)"));
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  snprintf(body, bodylen, "%s", s ? s : "{\"code\":500,\"message\":\"out of memory\"}");
  free(s);
  return status;
}

/* The volume content API's error shape: {"code": "<what>", "message"} (its Error has a string code). */
static int refuse_volume(char *body, size_t bodylen, int status, const char *msg) {
  const char *code = status == 401 ? "unauthorized" : status == 404 ? "not_found" : "invalid_request";
  json_t *m = json_string(msg);
  json_t *j = json_pack("{s:s,s:o}", "code", code, "message", m ? m : json_string("(not UTF-8)"));
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  snprintf(body, bodylen, "%s", s ? s : "{\"code\":\"internal\",\"message\":\"out of memory\"}");
  free(s);
  return status;
}

/* envd's answer for a sandbox it does not (or no longer) serve. */
static int refuse_502(char *body, size_t bodylen, const char *id) {
  json_t *sid = json_string(id);
  json_t *j = json_pack("{s:o,s:s,s:i}", "sandboxId", sid ? sid : json_string("?"), "message",
                        "The sandbox was not found", "code", 502);
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  snprintf(body, bodylen, "%s", s ? s : "{\"code\":502,\"message\":\"The sandbox was not found\"}");
  free(s);
  return 502;
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

int router_admit(const rt_view *v, int64_t now_s, rt_decision *d, char *body, size_t bodylen) {
  memset(d, 0, sizeof *d);
  const char *sid = v->header(v->req, "E2b-Sandbox-Id");
  int st = 0;
  if (sid) {
    if (!strcmp(v->path, "/health")) {
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
    d->route = envd_route(v->path, d);
    if ((int)d->route == RT_NO_ENDPOINT) st = refuse(body, bodylen, 404, "envd has no endpoint %.60s %.300s", v->method, v->path);
  } else if (!strcmp(v->path, "/files")) {
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
  if (!st && (int)d->route == RT_BAD_REF) st = refuse(body, bodylen, 400, "template reference of more than %d bytes", RT_REF_MAX);
  if (!st && d->route == RT_FILES) d->upload = !strcmp(v->method, "POST");
  if (!st && d->route == RT_VOLUME_CONTENT) d->upload = !strcmp(v->method, "PUT");
  if (st) router_release(d);
  return st;
}

void router_release(rt_decision *d) {
  if (d->entry) reg_put(d->entry);
  d->entry = NULL;
  if (d->volume) vol_put(d->volume);
  d->volume = NULL;
}
