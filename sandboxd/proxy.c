/* proxy.c — see proxy.h. One request per curl easy handle (forward.c): a new connection to the
 * port each time (a connect on the sandbox's loopback), closed when the request ends. */
#include "proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "forward.h"
#include "network_opts.h"
#include "registry.h"
#include "sandbox.h"

int proxy_init(char *err, size_t errlen) { return forward_init(err, errlen); }

typedef struct {
  sd_request *r;
  const rt_decision *d;
  reg_entry *e;
  sbx_t *s;
} px_ctx;

/* The port's socket: made in the sandbox's network namespace (never the host's loopback). */
static int open_in_sandbox(void *cls, int family, int socktype) {
  px_ctx *p = cls;
  return sbx_socket(p->s, family, socktype);
}
static bool sandbox_gone(void *cls) {
  px_ctx *p = cls;
  return reg_paused(p->e) || reg_dying(p->e);
}

static void reply_port_closed(px_ctx *p) {
  json_t *j = json_pack("{s:s,s:s,s:i,s:i}", "sandboxId", reg_id(p->e), "message", "The sandbox is running but port is not open",
                        "port", (int)p->d->port, "code", 502);
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (s) sd_reply_bytes(p->r, 502, "application/json; charset=utf-8", s, strlen(s));
  else sd_reply_error(p->r, 502, "The sandbox is running but port is not open");
  free(s);
}

static void reply_not_found(px_ctx *p) {
  json_t *j = json_pack("{s:s,s:s,s:i}", "sandboxId", reg_id(p->e), "message", "The sandbox was not found", "code", 502);
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (s) sd_reply_bytes(p->r, 502, "application/json; charset=utf-8", s, strlen(s));
  else sd_reply_error(p->r, 502, "The sandbox was not found");
  free(s);
}

/* The target for the port: as the client sent it, without the path proxy's prefix. NULL with a
 * reply made. */
static char *port_target(px_ctx *p) {
  const char *raw = sd_target(p->r);
  if (p->d->strip) {
    /* The prefix was matched on the decoded path; it must have been sent as it is. */
    if (strncmp(raw, sd_path(p->r), p->d->strip) != 0) {
      sd_reply_error(p->r, 400, "the path proxy's prefix %.*s must be sent as it is, not percent-encoded",
                     (int)p->d->strip, sd_path(p->r));
      return NULL;
    }
    raw += p->d->strip;
    if (!*raw || *raw == '?') {
      size_t n = strlen(raw);
      char *t = malloc(n + 2);
      if (t) { t[0] = '/'; memcpy(t + 1, raw, n + 1); }
      else sd_reply_error(p->r, 500, "out of memory");
      return t;
    }
  }
  if (raw[0] != '/' && strcmp(raw, "*") != 0) {
    sd_reply_error(p->r, 400, "the request target must be a path (origin form), not '%.200s'", raw);
    return NULL;
  }
  char *t = strdup(raw);
  if (!t) sd_reply_error(p->r, 500, "out of memory");
  return t;
}

void proxy_handle(sd_request *r, const rt_decision *d) {
  px_ctx p = {.r = r, .d = d, .e = d->entry, .s = reg_sbx(d->entry)};
  char *target = port_target(&p);
  if (!target) return;
  char mask[300];
  json_t *network = reg_network(d->entry);
  bool masked = net_opts_mask_host(network, d->port, mask, sizeof mask);
  json_decref(network);
  /* The port on the sandbox's IPv4 loopback, else its IPv6 one (a server bound to ::1 only). */
  char v4[64], v6[64];
  snprintf(v4, sizeof v4, "http://127.0.0.1:%u/", d->port);
  snprintf(v6, sizeof v6, "http://[::1]:%u/", d->port);
  const char *urls[] = {v4, v6, NULL};
  /* The edge's credential is not the port's: "Name:" with no value sends nothing (curl). */
  const char *drop[] = {RT_TRAFFIC_TOKEN_HEADER ":", NULL};
  fwd_opts o = {.urls = urls, .target = target, .upload = d->upload, .host = masked ? mask : NULL, .set = drop,
                .open = open_in_sandbox, .gone = sandbox_gone, .cls = &p};
  fwd_result res;
  forward(r, &o, &res);
  if (!res.replied) {
    if (res.gone) reply_not_found(&p);
    else if (res.why) sd_reply_error(r, 502, "port %u of sandbox %s %s", d->port, reg_id(p.e), res.why);
    else if (forward_connect_failed(&res)) reply_port_closed(&p);
    else sd_reply_error(r, 502, "port %u of sandbox %s: %s", d->port, reg_id(p.e), forward_strerror(&res));
  }
  free(target);
}
