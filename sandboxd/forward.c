/* forward.c — one request passed on upstream by libcurl, the answer streamed back (forward.h). */
#include "forward.h"

#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clocks.h"

int forward_init(char *err, size_t errlen) {
  CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) { snprintf(err, errlen, "libcurl: %s", curl_easy_strerror(rc)); return -1; }
  return 0;
}

/* ---- headers ---- */

/* Is `name` one of the comma-separated tokens of `list` (a Connection header)? */
static bool has_token(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    size_t k = strcspn(p, ",");
    size_t t = k;
    while (t && (p[t - 1] == ' ' || p[t - 1] == '\t')) t--;
    if (t == n && !strncasecmp(p, name, n)) return true;
    p += k;
  }
  return false;
}

/* Hop-by-hop headers (RFC 9110 §7.6.1), the ones each side of the proxy sets for itself, and
 * those the message's own Connection header names. */
static bool hop_by_hop(const char *name, const char *connection) {
  static const char *const H[] = {"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
                                  "Proxy-Authorization", "TE", "Trailer", "Transfer-Encoding", "Upgrade"};
  for (size_t i = 0; i < sizeof H / sizeof H[0]; i++)
    if (!strcasecmp(name, H[i])) return true;
  return connection && has_token(connection, name);
}

/* ---- one proxied request ---- */

typedef struct {
  sd_request *r;
  const fwd_opts *o;
  CURL *c;
  bool head, upgrade, body;         /* a HEAD; the client asks for an upgrade; a body follows */
  int up_fd;                        /* the socket curl connected, -1 */
  bool up_close_deferred;           /* curl let go of up_fd while the tunnel pump may use it */
  bool gone;                        /* opts.gone said so */
  bool replied;                     /* a reply (stream, tunnel or unary) has begun */
  const char *why;                  /* what the port did wrong, for the 502 */
  sd_stream *stream;
  sd_tunnel *tun;
  /* the tunnel */
  pthread_mutex_t mu;
  pthread_t pump;
  bool pump_started;
  bool stop;                        /* both directions end now */
  int64_t deadline_ms;              /* a half-closed tunnel ends then (0: none) */
} px;

static bool tunnel_stopping(px *p) {
  pthread_mutex_lock(&p->mu);
  bool st = p->stop || (p->deadline_ms && mono_ms() >= p->deadline_ms);
  pthread_mutex_unlock(&p->mu);
  return st;
}

static void tunnel_half_closed(px *p) {
  pthread_mutex_lock(&p->mu);
  if (!p->deadline_ms) p->deadline_ms = mono_ms() + FWD_HALF_CLOSE_S * 1000;
  pthread_mutex_unlock(&p->mu);
}

static void tunnel_stop(px *p) {
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_mutex_unlock(&p->mu);
}

/* All of buf to a non-blocking socket: waits for room a second at a time while the tunnel goes on. */
static int send_all(px *p, int fd, const void *buf, size_t len) {
  const char *b = buf;
  while (len) {
    ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
    if (n > 0) { b += n; len -= (size_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (tunnel_stopping(p) || (p->o->gone && p->o->gone(p->o->cls))) return -1;
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, 1000);
      continue;
    }
    return -1;
  }
  return 0;
}

/* The client → port direction of a tunnel. */
static void *pump(void *arg) {
  px *p = arg;
  int cfd = sd_tunnel_fd(p->tun);
  size_t nearly;
  const uint8_t *early = sd_tunnel_early(p->tun, &nearly);
  char *buf = malloc(FWD_BUF);
  bool ok = buf && (nearly == 0 || send_all(p, p->up_fd, early, nearly) == 0);
  while (ok && !tunnel_stopping(p)) {
    struct pollfd pf = {cfd, POLLIN, 0};
    int pr = poll(&pf, 1, 1000);
    if (pr < 0 && errno != EINTR) break;
    ssize_t n;
    if (pr > 0) n = recv(cfd, buf, FWD_BUF, 0);
    else if (!sd_tunnel_half_close(p->tun) && sd_tunnel_client_closed(p->tun)) n = 0;   /* TLS: MHD does not pass it on */
    else continue;
    if (n > 0) { ok = send_all(p, p->up_fd, buf, (size_t)n) == 0; continue; }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n == 0) {                                   /* the client is done sending */
      shutdown(p->up_fd, SHUT_WR);
      tunnel_half_closed(p);
      free(buf);
      return NULL;
    }
    break;                                          /* the client's connection failed */
  }
  free(buf);
  /* Whatever ended it ends the other direction too: curl's read of the port returns. */
  tunnel_stop(p);
  shutdown(p->up_fd, SHUT_RDWR);
  return NULL;
}

/* curl's socket: the caller's (e.g. made in a sandbox's network namespace), or an ordinary one. */
static curl_socket_t px_open(void *cls, curlsocktype purpose, struct curl_sockaddr *a) {
  px *p = cls;
  if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKET_BAD;
  int fd = p->o->open ? p->o->open(p->o->cls, a->family, a->socktype) : socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd < 0) return CURL_SOCKET_BAD;
  p->up_fd = fd;
  return fd;
}

static int px_close(void *cls, curl_socket_t fd) {
  px *p = cls;
  if (fd == p->up_fd && p->tun) { p->up_close_deferred = true; return 0; }   /* the pump may still write */
  if (fd == p->up_fd) p->up_fd = -1;
  return close(fd);
}

/* Does the upstream's header h go to the client? */
static bool forwarded(const struct curl_header *h, const char *connection, bool upgrade) {
  if (!strcasecmp(h->name, "Content-Length")) return false;          /* MHD sends the length it is given */
  if (!strcasecmp(h->name, "Content-Type") && !upgrade) return false;  /* given to the stream itself */
  if (upgrade && !strcasecmp(h->name, "Upgrade")) return true;
  if (upgrade && !strcasecmp(h->name, "Connection")) return false;    /* MHD's 101 has its own "Upgrade" */
  return !hop_by_hop(h->name, connection);
}

/* The reply's headers from the upstream's (origin: CURLH_HEADER, or CURLH_1XX for a 101), and its
 * content type; false (none added) when they do not fit the HTTP layer's bounds. */
static bool copy_headers(px *p, unsigned origin, bool upgrade, const char **ctype) {
  struct curl_header *h = NULL, *conn = NULL, *ct = NULL;
  if (curl_easy_header(p->c, "Connection", 0, origin, -1, &conn) != CURLHE_OK) conn = NULL;
  const char *connection = conn ? conn->value : NULL;
  *ctype = !upgrade && curl_easy_header(p->c, "Content-Type", 0, origin, -1, &ct) == CURLHE_OK ? ct->value : NULL;
  size_t count = 0, bytes = 0;
  while ((h = curl_easy_nextheader(p->c, origin, -1, h)))
    if (forwarded(h, connection, upgrade)) { count++; bytes += strlen(h->name) + strlen(h->value) + 4; }
  if (count > SD_MAX_EXTRA || bytes > SD_MAX_EXTRA_BYTES) return false;
  while ((h = curl_easy_nextheader(p->c, origin, -1, h)))
    if (forwarded(h, connection, upgrade) && sd_reply_header(p->r, h->name, h->value) != 0) return false;
  return true;
}

static size_t px_header(char *line, size_t size, size_t n, void *cls) {
  px *p = cls;
  size_t len = size * n;
  if (!(len == 2 && line[0] == '\r') && !(len == 1 && line[0] == '\n')) return len;   /* not the end of a head */
  long code = 0;
  curl_easy_getinfo(p->c, CURLINFO_RESPONSE_CODE, &code);
  if (code >= 100 && code < 200 && code != 101) return len;         /* an interim answer */
  if (p->replied) return 0;
  const char *ctype;
  if (code == 101) {
    if (!p->upgrade) { p->why = "answered 101 Switching Protocols to a request for no upgrade"; return 0; }
    if (!copy_headers(p, CURLH_1XX, true, &ctype)) { p->why = "answered with headers over 16 KiB"; return 0; }
    p->replied = true;
    if (!(p->tun = sd_upgrade(p->r))) return 0;                     /* the client went away */
    if (pthread_create(&p->pump, NULL, pump, p) != 0) return 0;
    p->pump_started = true;
    return len;
  }
  if (!copy_headers(p, CURLH_HEADER, false, &ctype)) { p->why = "answered with headers over 16 KiB"; return 0; }
  curl_off_t cl = -1;
  if (curl_easy_getinfo(p->c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) != CURLE_OK) cl = -1;
  p->replied = true;
  p->stream = sd_stream_open_status(p->r, (int)code, ctype, cl >= 0 ? (int64_t)cl : -1);
  return p->stream ? len : 0;
}

static size_t px_write(char *data, size_t size, size_t n, void *cls) {
  px *p = cls;
  size_t len = size * n;
  if (p->tun) return send_all(p, sd_tunnel_fd(p->tun), data, len) == 0 ? len : 0;
  if (p->stream) return sd_stream_send(p->stream, data, len) == 0 ? len : 0;
  return 0;
}

static size_t px_read(char *buf, size_t size, size_t n, void *cls) {
  px *p = cls;
  ssize_t k = sd_body_read(p->r, buf, size * n);
  return k < 0 ? CURL_READFUNC_ABORT : (size_t)k;
}

/* Called by curl at least once a second: opts.gone ends the request, so does a client that hung
 * up before any answer, or a half-closed tunnel past its time. */
static int px_progress(void *cls, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt; (void)dn; (void)ut; (void)un;
  px *p = cls;
  if (p->o->gone && p->o->gone(p->o->cls)) { p->gone = true; return 1; }
  if (!p->replied && sd_client_gone(p->r)) return 1;
  if (p->tun && tunnel_stopping(p)) return 1;
  return 0;
}

/* The request's headers upstream: all but the hop-by-hop ones (an upgrade keeps its own); Host
 * replaced by opts.host, and those opts.set names replaced by its lines. */
typedef struct {
  struct curl_slist *list;
  const char *connection, *mask;
  const char *const *set;
  bool upgrade, body, accept, host, failed;
} hdr_acc;

/* Is name one of the header names of the "Name: value" lines of set? */
static bool set_names(const char *const *set, const char *name) {
  size_t n = strlen(name);
  for (; set && *set; set++)
    if (!strncasecmp(*set, name, n) && (*set)[n] == ':') return true;
  return false;
}
static void append(hdr_acc *a, const char *line) {
  struct curl_slist *l = a->failed ? NULL : curl_slist_append(a->list, line);
  if (l) a->list = l;
  else a->failed = true;
}

static int add_header(void *cls, const char *name, const char *value) {
  hdr_acc *a = cls;
  if (!strcasecmp(name, "Expect")) return 0;                        /* MHD answered it */
  if (!strcasecmp(name, "Content-Length") && a->body) return 0;     /* curl sends the body's framing */
  if (a->upgrade && !strcasecmp(name, "Upgrade")) {
  } else if (hop_by_hop(name, a->connection)) {
    return 0;
  }
  if (set_names(a->set, name)) return 0;                            /* the caller's own line instead */
  if (!strcasecmp(name, "Accept")) a->accept = true;
  if (!strcasecmp(name, "Host")) {
    a->host = true;
    if (a->mask) value = a->mask;
  }
  size_t nl = strlen(name), vl = strlen(value);
  char *line = malloc(nl + vl + 3);
  if (!line) { a->failed = true; return 1; }
  if (vl) snprintf(line, nl + vl + 3, "%s: %s", name, value);
  else snprintf(line, nl + vl + 3, "%s;", name);                    /* curl's form of an empty value */
  append(a, line);
  free(line);
  return a->failed;
}


void fwd_keep_drop(fwd_keep *k) {
  CURL *c = atomic_exchange(&k->c, NULL);
  if (c) curl_easy_cleanup(c);
}

bool forward_connect_failed(const fwd_result *res) {
  return res->code == CURLE_COULDNT_CONNECT || res->code == CURLE_OPERATION_TIMEDOUT;
}
const char *forward_strerror(const fwd_result *res) { return res->why ? res->why : curl_easy_strerror((CURLcode)res->code); }

void forward(sd_request *r, const fwd_opts *o, fwd_result *res) {
  px p = {.r = r, .o = o, .up_fd = -1};
  memset(res, 0, sizeof *res);
  pthread_mutex_init(&p.mu, NULL);
  const char *m = sd_method(r);
  const char *connection = sd_header(r, "Connection");
  p.head = !strcmp(m, "HEAD");
  p.body = o->upload && !p.head;
  /* An upgrade has no body (one that comes with a body is sent as an ordinary request). */
  p.upgrade = connection && has_token(connection, "upgrade") && sd_header(r, "Upgrade") && !p.body;
  hdr_acc ha = {.connection = connection, .upgrade = p.upgrade, .body = p.body, .mask = o->host, .set = o->set};
  CURLcode rc = CURLE_FAILED_INIT;
  sd_header_each(r, add_header, &ha);
  if (ha.mask && !ha.host) {
    char line[310];
    snprintf(line, sizeof line, "Host: %.290s", ha.mask);
    append(&ha, line);
  }
  for (const char *const *s = o->set; s && *s; s++) append(&ha, *s);
  if (p.upgrade) append(&ha, "Connection: Upgrade");
  if (!ha.accept) append(&ha, "Accept:");              /* none of curl's own */
  append(&ha, "Expect:");
  /* A kept connection's handle is reset (options) but keeps its connection; a tunnel's never is. */
  if (!ha.failed && o->keep && !p.upgrade && (p.c = atomic_exchange(&o->keep->c, NULL))) curl_easy_reset(p.c);
  if (ha.failed || (!p.c && !(p.c = curl_easy_init()))) { p.why = "out of memory"; goto out; }
  CURL *c = p.c;
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");                    /* never the environment's proxies */
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(c, CURLOPT_REQUEST_TARGET, o->target);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, ha.list);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)FWD_CONNECT_TIMEOUT_MS);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, px_open);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &p);
  if (p.upgrade) {                     /* (a connection keeps these: only one that is never kept) */
    curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, px_close);
    curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, &p);
  }
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, px_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &p);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, px_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &p);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, px_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &p);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, (long)FWD_RECV_BUF);
  if (o->resolve) curl_easy_setopt(c, CURLOPT_RESOLVE, o->resolve);
  if (o->ca_file) curl_easy_setopt(c, CURLOPT_CAINFO, o->ca_file);
  if (p.head) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  else if (p.body || strcmp(m, "GET") != 0) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);   /* UPLOAD alone is a PUT */
  if (p.body) {
    const char *cl = sd_header(r, "Content-Length");
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, px_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &p);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, cl && !sd_header(r, "Transfer-Encoding") ? (curl_off_t)strtoll(cl, NULL, 10) : (curl_off_t)-1);
  }
  rc = CURLE_COULDNT_CONNECT;
  for (size_t i = 0; o->urls[i] && rc == CURLE_COULDNT_CONNECT && !p.replied && !p.gone; i++) {
    curl_easy_setopt(c, CURLOPT_URL, o->urls[i]);
    rc = curl_easy_perform(c);
  }
  if (p.tun) {
    /* The upstream's side ended (it closed, or the tunnel was stopped): the client's gets its
     * end, and has FWD_HALF_CLOSE_S to finish its own; over TLS the tunnel ends now (queued bytes
     * still go out: MHD drains the socketpair before it closes). */
    if (rc == CURLE_OK && sd_tunnel_half_close(p.tun)) {
      shutdown(sd_tunnel_fd(p.tun), SHUT_WR);
      tunnel_half_closed(&p);
    } else {
      tunnel_stop(&p);
      shutdown(sd_tunnel_fd(p.tun), SHUT_RD);      /* wakes the pump; what was sent still goes out */
    }
    if (p.pump_started) {
      /* The pump ends by the client's EOF or failure, the deadline, or a stop. */
      for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        if (pthread_timedjoin_np(p.pump, NULL, &ts) == 0) break;
        if (tunnel_stopping(&p) || (o->gone && o->gone(o->cls))) {
          tunnel_stop(&p);
          shutdown(sd_tunnel_fd(p.tun), SHUT_RDWR);
        }
      }
    }
  } else if (p.stream) {
    if (rc == CURLE_OK) sd_stream_end(p.stream);
    else sd_stream_fail(p.stream);                  /* the client sees a cut connection, not an end */
    p.stream = NULL;
  }
out:
  res->code = (int)rc;
  res->replied = p.replied;
  res->gone = p.gone;
  res->why = p.why;
  void *none = NULL;
  if (p.c && o->keep && !p.tun && rc == CURLE_OK && atomic_compare_exchange_strong(&o->keep->c, &none, p.c)) p.c = NULL;
  if (p.c) curl_easy_cleanup(p.c);              /* closes the socket, or defers it to here: */
  if (p.up_close_deferred && p.up_fd >= 0) close(p.up_fd);
  if (p.tun) sd_tunnel_close(p.tun);
  curl_slist_free_all(ha.list);
  pthread_mutex_destroy(&p.mu);
}
