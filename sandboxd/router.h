/* router.h — the one route table and the one auth table of sandboxd. From a request's method,
 * path, headers and query alone it decides which handler serves it and checks its credentials
 * (each parsed once, by auth.c), before any body byte is read.
 *
 * First the sandbox and port a request is for, if any (E2B's edge; with a domain D set):
 *   Host api.D             → the control plane (below), whatever the headers
 *   Host <port>-<id>.D     → port <port> of sandbox <id> (more "-" parts after the id are ignored,
 *                            as E2B's edge does)
 *   Host sandbox.D         → E2b-Sandbox-Id and E2b-Sandbox-Port name them (both required)
 *   other hosts under D    → 400 Invalid host
 * and for any other Host (plain mode: an address):
 *   /_sandbox/<id>/<port>[/<path>] → port <port> of sandbox <id>, path /<path> (the path proxy)
 *   E2b-Sandbox-Id header  → that sandbox; port E2b-Sandbox-Port if it is given, else envd's.
 * Port 49983 is envd (sandboxd itself serves it); any other port goes to the port proxy
 * (RT_PORT, proxy.c), which needs no credentials (the URL is the capability, as with E2B's
 * default allowPublicTraffic) unless the sandbox was created with allowPublicTraffic: false:
 * then the header RT_TRAFFIC_TOKEN_HEADER must carry its traffic access token (403 with E2B's
 * edge's words without it or with another; a paused auto-resume sandbox is woken only after the
 * check). Then:
 *
 *   envd of a sandbox      → GET /health (none), /files (its token, or a
 *                            v1 signature), /process.Process/<rpc>, /filesystem.Filesystem/<rpc> (its
 *                            token when secure; the user from Basic authorization)
 *   /files without it      → the sandbox whose token verifies the URL's signature
 *   GET /health            → the control plane's readiness (none)
 *   /volumecontent/{id}/…  → that volume's content (its token: Authorization: Bearer)
 *   anything else          → the control plane (X-API-KEY), by the table in router.c
 *
 * An unknown, paused or dying sandbox on envd ⇒ 502. The router holds a registry reference to an
 * envd request's sandbox until router_release. It sees requests through rt_view, so that it
 * links no HTTP code. */
#ifndef SANDBOXD_ROUTER_H
#define SANDBOXD_ROUTER_H
#include <stdbool.h>
#include <stddef.h>
#include "auth.h"
#include "registry.h"

typedef enum {
  /* the control plane (X-API-KEY) */
  RT_CREATE = 1, RT_CREATE_V2, RT_LIST, RT_GET, RT_KILL, RT_TIMEOUT, RT_CONNECT, RT_PAUSE, RT_FORK,
  RT_METRICS,                /* GET /sandboxes/{id}/metrics */
  RT_LOGS, RT_LOGS_V2,       /* GET /sandboxes/{id}/logs, GET /v2/sandboxes/{id}/logs */
  RT_NETWORK,                /* PUT /sandboxes/{id}/network */
  RT_SNAPSHOT_CREATE,        /* POST /sandboxes/{id}/snapshots */
  RT_SNAPSHOT_LIST,          /* GET /snapshots */
  RT_TEMPLATE_DELETE,        /* DELETE /templates/{ref}: a snapshot (in E2B a snapshot is a template) */
  RT_TEMPLATE_LIST,          /* GET /templates: base and the snapshots */
  RT_TEMPLATE_ALIAS,         /* GET /templates/aliases/{ref}: base or a snapshot's name */
  RT_TEMPLATE_REQUEST,       /* POST /v3/templates: a template build requested */
  RT_TEMPLATE_FILE,          /* GET /templates/{ref}/files/{hash}: a COPY's files present, or where to upload them */
  RT_TEMPLATE_UPLOAD,        /* PUT /templates/{ref}/files/{hash}?token=: the upload (its one-time token, checked by the
                                handler before it reads a byte of the body; no API key) */
  RT_TEMPLATE_BUILD,         /* POST /v2/templates/{ref}/builds/{buildID}: the build's steps, started */
  RT_TEMPLATE_BUILD_STATUS,  /* GET /templates/{ref}/builds/{buildID}/status */
  RT_TEMPLATE_TAGS_ASSIGN,   /* POST /templates/tags: a build takes tags */
  RT_TEMPLATE_TAGS_REMOVE,   /* DELETE /templates/tags: a template loses tags */
  RT_TEMPLATE_TAGS,          /* GET /templates/{ref}/tags */
  RT_VOLUME_CREATE, RT_VOLUME_LIST, RT_VOLUME_GET, RT_VOLUME_DELETE,   /* /volumes[/{ref}] */
  RT_SECRET_CREATE, RT_SECRET_LIST,                                   /* POST, GET /secrets */
  RT_SECRET_GET, RT_SECRET_UPDATE, RT_SECRET_DELETE,                  /* GET, POST, DELETE /secrets/{ref} */
  /* the volume content API (the volume's token, Authorization: Bearer) */
  RT_VOLUME_CONTENT,         /* /volumecontent/{ref}/{dir,file,path}: d->volume held, d->rpc the last segment */
  RT_UNIMPLEMENTED,          /* known to E2B, not to sandboxd: 501 with decision.message */
  RT_HEALTH,                 /* GET /health (no credentials) */
  /* envd of one sandbox */
  RT_ENVD_HEALTH,            /* GET /health: the sandbox exists (no credentials) */
  RT_FILES,                  /* GET/POST /files */
  RT_PROCESS,                /* process.Process/<rpc> */
  RT_FILESYSTEM,             /* filesystem.Filesystem/<rpc> */
  RT_RPC_UNKNOWN,            /* another service: Connect unimplemented */
  RT_PORT,                   /* the port proxy: d->port of d->entry (held); its traffic token when it has one */
} rt_route;

/* A request as the router sees it (the Host header comes through `header`). */
typedef struct {
  const char *method, *path;   /* path decoded, without the query */
  const char *(*header)(const void *req, const char *name);   /* case-insensitive; NULL if absent */
  const char *(*query)(const void *req, const char *name);
  const void *req;
} rt_view;

#define RT_REF_MAX 200

typedef struct {
  rt_route route;
  char id[65];               /* control routes with {id}: a well-formed sandbox id */
  char ref[RT_REF_MAX + 1];  /* control routes with {ref}: a template reference, as sent (the handler checks it) */
  char rpc[64];              /* RPC routes: the method name */
  reg_entry *entry;          /* envd routes but ENVD_HEALTH: the sandbox (held until router_release) */
  struct volume *volume;     /* RT_VOLUME_CONTENT: the volume (held until router_release) */
  char user[AUTH_USER_MAX + 1];   /* envd routes: the user (default "user") */
  const char *user_error;    /* RPC routes: why the Authorization header is refused, NULL if it is not */
  bool user_unknown;         /* RPC routes: the header names a user the sandbox does not have (in user) */
  const char *message;       /* RT_UNIMPLEMENTED */
  bool upload;               /* POST /files, and RT_PORT with a body: the body is streamed to the handler */
  unsigned port;             /* RT_PORT: the port inside the sandbox (1..65535) */
  size_t strip;              /* RT_PORT by path: bytes of the path's /_sandbox/<id>/<port> prefix */
} rt_decision;

#define RT_ENVD_PORT 49983u
#define RT_TRAFFIC_TOKEN_HEADER "e2b-traffic-access-token"   /* E2B's; never forwarded to the port */
#define RT_DOMAIN_MAX 200
/* Keeps copies. domain: E2B's domain D for routing by Host (NULL or "": none); lower-case
 * letters, digits, '-' and '.', as rt_valid_domain checks. */
void router_init(const char *api_key, const char *domain);
bool rt_valid_domain(const char *domain);
void router_shutdown(void);
/* 0 and d filled, or the HTTP status of a refusal with its JSON body in body. now_s: the time
 * signatures' expiry is checked against. */
int  router_admit(const rt_view *v, int64_t now_s, rt_decision *d, char *body, size_t bodylen);
void router_release(rt_decision *d);
#endif
