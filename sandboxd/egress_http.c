/* egress_http.c — see egress_http.h. Each request runs on the HTTP layer's worker thread; the rules
 * and the secrets are read once per request, so a rule change or a secret's new value applies to
 * the next request of an open connection. */
#include "egress_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "egress_ca.h"
#include "forward.h"
#include "http.h"
#include "secrets.h"
#include "sniff.h"

#define LINE_MAX_BYTES (TRANSFORM_VALUE_MAX + 256)   /* "Name: value" as filled in */

static const char *g_ca_file;
static bool g_trace;

/* ---- the inbound daemons' hooks ---- */

static bool has_body(const sd_request *r) {
  const char *cl = sd_header(r, "Content-Length"), *te = sd_header(r, "Transfer-Encoding");
  return (te && *te) || (cl && strtoull(cl, NULL, 10) > 0);
}

static int admit(sd_request *r, sd_admission *a, char **body) {
  (void)body;
  a->ctx = NULL;
  a->group = NULL;
  a->stream_body = has_body(r);          /* bodies go upstream as they come */
  return 0;
}

/* A connection of the sandbox's: what it is for, and its upstream connection between requests. */
typedef struct {
  egress_intercepted *x;
  fwd_keep keep;
  pthread_mutex_t mu;                  /* requests of a connection may overlap (see fwd_keep) */
  egress_answer known;
} client;

static int cert(void *ctx, gnutls_pcert_st **certs, unsigned *n, gnutls_privkey_t *key) {
  egress_intercepted *x = ((client *)ctx)->x;
  return egress_ca_issue(x->ca, x->name, certs, n, key);
}

static void free_ctx(void *ctx) {
  client *cl = ctx;
  fwd_keep_drop(&cl->keep);
  egress_intercepted_free(cl->x);
  pthread_mutex_destroy(&cl->mu);
  free(cl);
}

/* ---- a request ---- */

static char *lookup(void *cls, const char *name, size_t *len) { return secrets_value(name, cls, len); }
static void release(void *cls, char *value, size_t len) { (void)cls; secrets_free_value(value, len); }

static int open_upstream(void *cls, int family, int socktype) {
  (void)cls;
  return egress_upstream_socket(family, socktype);
}
static bool sandbox_gone(void *cls) { return !egress_attached(cls); }

static void wipe_free(char *p) {
  if (!p) return;
  volatile char *v = p;
  while (*v) *v++ = 0;
  free(p);
}

/* The host a request is for, into host: 0, or an HTTP status after replying. */
static int request_host(sd_request *r, const egress_intercepted *x, char host[SNIFF_NAME_MAX + 1]) {
  const char *h = sd_header(r, "Host");
  if (!h) {
    if (x->tls) { snprintf(host, SNIFF_NAME_MAX + 1, "%s", x->name); return 0; }   /* HTTP/1.0: the handshake's */
    return sd_reply_error(r, 400, "sandboxd egress: a request to a host with rules needs a Host header"), 400;
  }
  /* "name" or "name:port" (the port must be the one dialled). */
  const char *colon = strrchr(h, ':');
  size_t len = colon && !strchr(h, ']') ? (size_t)(colon - h) : strlen(h);
  if (colon && !strchr(h, ']') && strtoul(colon + 1, NULL, 10) != x->port)
    return sd_reply_error(r, 421, "sandboxd egress: Host '%.300s' names another port than the connection's (%u)", h, x->port), 421;
  if (sniff_hostname(h, len, host) != 0)
    return sd_reply_error(r, 400, "sandboxd egress: Host '%.300s' is not a host name", h), 400;
  if (x->tls && strcmp(host, x->name) != 0)
    return sd_reply_error(r, 421, "sandboxd egress: Host '%s' on a TLS connection for '%s' (Misdirected Request)", host, x->name), 421;
  return 0;
}

static void handle(sd_request *r, void *ctx) {
  (void)ctx;
  client *cl = sd_inbound_context(r);
  if (!cl) { sd_reply_error(r, 500, "sandboxd egress: no connection context"); return; }
  egress_intercepted *x = cl->x;
  if (!strcmp(sd_method(r), "CONNECT")) {
    sd_reply_error(r, 405, "sandboxd egress: CONNECT is not served here (the connection is already to %s)", x->name);
    return;
  }
  const char *target = sd_target(r);
  if (target[0] != '/' && strcmp(target, "*") != 0) {
    sd_reply_error(r, 400, "sandboxd egress: the request target must be a path (origin form), not '%.200s'", target);
    return;
  }
  char host[SNIFF_NAME_MAX + 1];
  if (request_host(r, x, host) != 0) return;

  egress_plan plan;
  egress_answer known;
  pthread_mutex_lock(&cl->mu);
  known = cl->known;
  pthread_mutex_unlock(&cl->mu);
  egress_plan_request(x, host, &known, &plan);
  pthread_mutex_lock(&cl->mu);
  cl->known = known;
  pthread_mutex_unlock(&cl->mu);
  if (plan.verdict == EGRESS_DENY) {
    if (g_trace) fprintf(stderr, "sandboxd: egress %s: %s request to %s:%u -> deny: %s\n", x->id, x->tls ? "https" : "http", host, x->port, plan.why);
    sd_reply_error(r, 403, "sandboxd egress: %s:%u is not allowed for this sandbox: %s", host, x->port, plan.why);
    return;
  }

  /* The rules' headers, filled in: "Name: value" lines, wiped when the request is gone. */
  char **lines = calloc(plan.nheaders + 1, sizeof *lines);
  char err[1024] = "";
  int status = lines ? 0 : 500;
  for (size_t i = 0; !status && i < plan.nheaders; i++) {
    char *line = malloc(LINE_MAX_BYTES);
    if (!line) { status = 500; break; }
    lines[i] = line;
    size_t nl = strlen(plan.headers[i].name);
    memcpy(line, plan.headers[i].name, nl);
    memcpy(line + nl, ": ", 3);
    char e[400];
    if (transforms_fill(plan.headers[i].value, lookup, release, x->id, line + nl + 2, LINE_MAX_BYTES - nl - 2, e, sizeof e) < 0) {
      line[0] = 0;
      snprintf(err, sizeof err, "header '%s' for %s: %s", plan.headers[i].name, host, e);
      status = 502;
    }
  }
  char hosts[EGRESS_PLAN_ADDRS * 48 + 300];
  int off = snprintf(hosts, sizeof hosts, "%s:%u:", host, x->port);
  for (size_t i = 0; i < plan.naddrs; i++) {
    char a[64];
    egress_addr_str(&plan.addrs[i], a, sizeof a);
    off += snprintf(hosts + off, sizeof hosts - (size_t)off, plan.addrs[i].family == AF_INET6 ? "%s[%s]" : "%s%s", i ? "," : "", a);
  }
  struct curl_slist *resolve = status ? NULL : curl_slist_append(NULL, hosts);
  if (!status && !resolve) status = 500;
  if (g_trace) {
    fprintf(stderr, "sandboxd: egress %s: %s %s %s:%u -> %s (%zu header%s set)%s%s\n", x->id, x->tls ? "https" : "http", sd_method(r),
            host, x->port, status ? "refused" : "forwarded", plan.nheaders, plan.nheaders == 1 ? "" : "s", err[0] ? ": " : "", err);
  }
  if (status == 502) sd_reply_error(r, 502, "sandboxd egress: %s; the request was not sent", err);
  else if (status) sd_reply_error(r, 500, "sandboxd egress: out of memory");
  else {
    char url[SNIFF_NAME_MAX + 32];
    snprintf(url, sizeof url, "%s://%s:%u/", x->tls ? "https" : "http", host, x->port);
    const char *urls[] = {url, NULL};
    fwd_opts o = {.urls = urls, .target = target, .upload = has_body(r),
                  .set = (const char *const *)lines, .resolve = resolve, .open = open_upstream, .gone = sandbox_gone,
                  .cls = x, .ca_file = x->tls ? g_ca_file : NULL, .keep = &cl->keep};
    fwd_result res;
    forward(r, &o, &res);
    if (!res.replied)
      sd_reply_error(r, 502, "sandboxd egress: %s:%u: %s", host, x->port,
                     res.gone ? "the sandbox is gone" : forward_connect_failed(&res) ? "cannot connect" : forward_strerror(&res));
  }
  curl_slist_free_all(resolve);
  for (size_t i = 0; lines && i < plan.nheaders; i++) wipe_free(lines[i]);
  free(lines);
  egress_plan_free(&plan);
}

static void release_ctx(void *ctx) { (void)ctx; }

int egress_http_start(const char *ca_file, char *err, size_t errlen) {
  g_ca_file = ca_file;
  g_trace = getenv("SANDBOXD_TRACE_EGRESS") != NULL;
  static const sd_inbound_hooks hooks = {{admit, handle, release_ctx}, cert, free_ctx};
  return sd_inbound_start(&hooks, err, errlen);
}

void egress_http_take(egress_intercepted *x, int fd, const struct sockaddr *peer, socklen_t peerlen) {
  client *cl = calloc(1, sizeof *cl);
  if (!cl) {
    egress_intercepted_free(x);
    close(fd);                                           /* the sandbox sees a reset */
    return;
  }
  cl->x = x;
  pthread_mutex_init(&cl->mu, NULL);
  int one = 1;                                           /* answers go out whole, not after an ACK */
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)sd_inbound_add(x->tls, fd, peer, peerlen, cl);  /* on failure: closed, and cl freed */
}

void egress_http_stop(void) { sd_inbound_stop(); }
