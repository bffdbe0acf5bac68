/* dispatch.c — see dispatch.h. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control.h"
#include "files.h"
#include "fs_rpc.h"
#include "process_rpc.h"
#include "proxy.h"
#include "router.h"
#include "rpc.h"
#include "secret_api.h"
#include "snapshot_api.h"
#include "template_api.h"
#include "volume_api.h"

static const char *view_header(const void *req, const char *name) { return sd_header(req, name); }
static const char *view_query(const void *req, const char *name) { return sd_query(req, name); }

static int admit(sd_request *r, sd_admission *a, char **body) {
  rt_decision *d = malloc(sizeof *d);
  if (!d) { *body = NULL; return 503; }
  rt_view v = {sd_method(r), sd_path(r), view_header, view_query, r};
  char text[1024];
  int st = router_admit(&v, (int64_t)time(NULL), d, text, sizeof text);
  if (st) {
    free(d);
    *body = strdup(text);
    return st;
  }
  a->ctx = d;
  a->group = d->entry;            /* a kill or expiry of this sandbox ends the request's streams */
  a->stream_body = d->upload;
  /* The control plane (and envd's health) replies unary: no thread of its own. */
  switch (d->route) {
    case RT_FILES: case RT_PROCESS: case RT_FILESYSTEM: case RT_PORT: case RT_RPC_UNKNOWN: case RT_VOLUME_CONTENT:
    case RT_TEMPLATE_UPLOAD: break;
    default: a->unary = true;
  }
  return 0;
}

static void handle(sd_request *r, void *ctx) {
  rt_decision *d = ctx;
  switch (d->route) {
    case RT_ENVD_HEALTH:
      sd_reply_header(r, "Cache-Control", "no-store");
      sd_reply_bytes(r, 204, NULL, NULL, 0);
      break;
    case RT_FILES: files_handle(r, d); break;
    case RT_PROCESS: process_rpc(r, d); break;
    case RT_FILESYSTEM: fs_rpc(r, d); break;
    case RT_PORT: proxy_handle(r, d); break;
    case RT_RPC_UNKNOWN: rpc_reply_error(r, "unimplemented", "unknown procedure %s", sd_path(r)); break;
    case RT_SNAPSHOT_CREATE: case RT_SNAPSHOT_LIST: case RT_TEMPLATE_DELETE: case RT_TEMPLATE_LIST: case RT_TEMPLATE_ALIAS:
    case RT_FORK: snapshot_api_handle(r, d); break;
    case RT_TEMPLATE_REQUEST: case RT_TEMPLATE_FILE: case RT_TEMPLATE_UPLOAD: case RT_TEMPLATE_BUILD: case RT_TEMPLATE_BUILD_STATUS:
    case RT_TEMPLATE_TAGS_ASSIGN: case RT_TEMPLATE_TAGS_REMOVE: case RT_TEMPLATE_TAGS:
      template_api_handle(r, d);
      break;
    case RT_VOLUME_CREATE: case RT_VOLUME_LIST: case RT_VOLUME_GET: case RT_VOLUME_DELETE: case RT_VOLUME_CONTENT:
      volume_api_handle(r, d);
      break;
    case RT_SECRET_CREATE: case RT_SECRET_LIST: case RT_SECRET_GET: case RT_SECRET_UPDATE: case RT_SECRET_DELETE:
      secret_api_handle(r, d);
      break;
    default: control_handle(r, d); break;
  }
  /* The sandbox is let go as soon as its handler is done, not when the response has gone out: a
   * killed sandbox's streams deliver their last bytes only once it is destroyed, which waits for
   * every holder (registry.h). */
  router_release(d);
}

static void release(void *ctx) {
  router_release(ctx);   /* a request never handled (too large, no thread) still holds its sandbox */
  free(ctx);
}

static const sd_hooks HOOKS = {admit, handle, release};
const sd_hooks *dispatch_hooks(void) { return &HOOKS; }
