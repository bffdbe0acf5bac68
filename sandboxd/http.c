/* http.c — the HTTP layer over libmicrohttpd: listeners (plain or TLS), request collection,
 * replies, streamed responses, protocol upgrades, multipart parsing. It knows no route,
 * credential or sandbox: main.c's hooks (http.h) admit a request from its headers and handle it.
 *
 * MHD runs one thread per connection. Once a request body is complete the connection thread
 * starts a worker thread for the handler and waits until the handler has either produced a unary
 * reply or opened a stream; it then queues the MHD response. A stream's bytes go through a
 * bounded queue that the worker fills and MHD's content reader (on the connection thread)
 * drains. The request is reference-counted (MHD + worker) because a client may disconnect while
 * the handler still runs.
 *
 * Each listener is its own MHD daemon (TLS: MHD_USE_TLS with the PEM texts given). A request is
 * allocated by the URI log callback, which sees the request target before MHD decodes it (the
 * port proxy forwards it as sent). An upgrade (sd_upgrade) queues a 101 response for upgrade;
 * MHD hands the socket (TLS: its end of a socketpair that MHD's connection thread pumps through
 * GnuTLS, bounded by the connection's memory pool) to upgraded(), which gives it to the waiting
 * handler as an sd_tunnel. Every live tunnel is listed, so that a sandbox's kill and
 * sd_server_stop can shut them down. */
#include "http.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <gnutls/abstract.h>


#define SD_MAX_BODY       (8u << 20)      /* JSON and RPC bodies */
#define SD_MAX_UPLOAD     (512u << 20)    /* POST /files, default (SANDBOXD_MAX_UPLOAD overrides) */
#define SD_UPLOAD_QUEUE   (1u << 20)      /* upload bytes handed to the handler, pending at most */
#define SD_STREAM_QUEUE   (1u << 20)      /* pending bytes before sd_stream_send blocks */
#define SD_STREAM_BLOCK   (256u << 10)    /* what MHD takes of a stream per read (its send size) */
#define SD_MAX_KV         256             /* headers or query arguments kept per request */
#define SD_MAX_INFLIGHT   (1u << 30)      /* request body bytes buffered over all requests */
#define SD_WRITE_TIMEOUT_S 60             /* a client that reads nothing for this long is dropped */
#define SD_STOP_WAIT_S    10              /* sd_server_stop waits this long for tunnels to close */

typedef struct { char *name, *value; } kv;

struct sd_stream {
  sd_stream *lnext, *lprev;      /* every live stream (all_streams), for sd_streams_abort */
  const void *group;             /* the sandbox the request was routed to, or NULL */
  bool mhd_done;                 /* MHD let go of the response: fd may be closed or reused */
  bool doomed;                   /* its sandbox is being killed: a full queue aborts instead of waiting */
  bool held;                     /* doomed and not yet released: the reader delivers nothing */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint8_t *buf;
  size_t off, len, cap;          /* pending bytes are buf[off .. off+len) */
  size_t reserved;               /* sd_stream_reserve: buf[off+len ..) is being written (off stays put) */
  bool ended, closed;
  int refs;                      /* worker + MHD response */
  int fd;                        /* the client socket, to notice a hang-up while idle */
};

struct sd_request {
  struct MHD_Connection *conn;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  char *method, *path;
  char *target;                  /* as sent (the URI log callback) */
  int listener;                  /* index into listeners[] */
  bool begun;                    /* on_access saw it */
  kv headers[SD_MAX_KV]; size_t nheaders;
  kv query[SD_MAX_KV]; size_t nquery;
  char *nul_name;                /* a query parameter or header whose name or value holds a NUL byte */
  uint8_t *body; size_t len, cap, limit;
  bool too_large, busy, started;
  /* Streamed upload (POST /files): the handler runs while the body arrives; body[off .. off+len)
   * is pending, at most SD_UPLOAD_QUEUE; `total` counts every byte received. */
  bool streaming, eof, aborted, nothread;
  size_t off;
  uint64_t total;
  pthread_mutex_t conn_mu;       /* held while the handler uses conn (post processor); conn_gone once MHD let go */
  bool conn_gone;
  /* reply */
  enum { R_PENDING, R_UNARY, R_STREAM, R_UPGRADE } state;
  int status;
  char *ctype;
  uint8_t *rbody; size_t rlen;
  kv extra[SD_MAX_EXTRA]; size_t nextra, extra_bytes;
  sd_stream *stream;
  int64_t stream_len;            /* R_STREAM: the body's size, -1 unknown */
  sd_tunnel *tunnel;             /* R_UPGRADE: set by upgraded(), taken by sd_upgrade */
  bool tunnel_failed;            /* R_UPGRADE: the connection ended without one */
  /* The admit hook's decision: */
  void *ctx;                     /* main.c's per-request context (released with the request) */
  bool admitted;
  bool upload;                   /* the body goes to the handler as it arrives (sd_body_read) */
  bool unary;                    /* the handler runs on the connection thread (sd_admission.unary) */
  const void *group;             /* streams of this request end on sd_streams_abort(group) */
  struct inbound *inbound;       /* a handed-in connection's (a reference), or NULL */
};

struct sd_tunnel {
  sd_tunnel *next, *prev;        /* every live tunnel (tunnels) */
  const void *group;
  int fd;                        /* what the handler reads and writes (TLS: a socketpair's end) */
  int tcp_fd;                    /* the client's own socket (TLS: MHD's; only polled here) */
  bool tls;
  struct MHD_UpgradeResponseHandle *urh;
  size_t nearly;
  uint8_t early[];
};

typedef struct {
  struct MHD_Daemon *d;
  bool tls;
  bool inbound;                  /* connections handed in (sd_inbound_add), not accepted */
  const sd_hooks *hooks;
  atomic_uint_fast64_t connections, requests;
} listener;
/* The listeners sd_server_start binds, then the two inbound daemons (plain, TLS). */
#define INBOUND_PLAIN SD_MAX_LISTEN
#define INBOUND_TLS (SD_MAX_LISTEN + 1)
static listener listeners[SD_MAX_LISTEN + 2];
static size_t nlisteners;
static atomic_size_t inflight;        /* sum of every request's body buffer capacity */
static size_t g_upload_limit = SD_MAX_UPLOAD;
static sd_hooks g_hooks;
static sd_hooks g_inbound_hooks;

/* A connection handed in by sd_inbound_add: its caller's context, alive while the connection or
 * a request of it is (a handler may outlive its connection). Until MHD reports the connection
 * started (on its daemon's thread) it waits in `pending`, found by its socket. */
typedef struct inbound {
  struct inbound *next;
  int fd;
  atomic_int refs;
  void *ctx;
} inbound;
static pthread_mutex_t inbound_mu = PTHREAD_MUTEX_INITIALIZER;
static inbound *pending;
static sd_inbound_hooks g_inbound;


static pthread_mutex_t tunnels_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tunnels_cv = PTHREAD_COND_INITIALIZER;
static sd_tunnel *tunnels;
static size_t ntunnels;

/* ---------- request accessors ---------- */

const char *sd_method(const sd_request *r) { return r->method; }
const char *sd_path(const sd_request *r) { return r->path; }
const char *sd_target(const sd_request *r) { return r->target; }
bool sd_tls(const sd_request *r) { return listeners[r->listener].tls; }
void *sd_context(const sd_request *r) { return r->ctx; }

const char *sd_header(const sd_request *r, const char *name) {
  for (size_t i = 0; i < r->nheaders; i++)
    if (strcasecmp(r->headers[i].name, name) == 0) return r->headers[i].value;
  return NULL;
}

int sd_header_each(const sd_request *r, int (*cb)(void *, const char *, const char *), void *cls) {
  for (size_t i = 0; i < r->nheaders; i++) {
    int rc = cb(cls, r->headers[i].name, r->headers[i].value);
    if (rc) return rc;
  }
  return 0;
}

int sd_query_each(const sd_request *r, int (*cb)(void *, const char *, const char *), void *cls) {
  for (size_t i = 0; i < r->nquery; i++) {
    int rc = cb(cls, r->query[i].name, r->query[i].value);
    if (rc) return rc;
  }
  return 0;
}

const char *sd_query(const sd_request *r, const char *name) {
  for (size_t i = 0; i < r->nquery; i++)
    if (strcmp(r->query[i].name, name) == 0) return r->query[i].value;
  return NULL;
}

const uint8_t *sd_body(const sd_request *r, size_t *len) {
  *len = r->streaming ? 0 : r->len;
  return r->body && !r->streaming ? r->body : (const uint8_t *)"";
}

size_t sd_upload_limit(void) { return g_upload_limit; }

ssize_t sd_body_read(sd_request *r, void *buf, size_t max) {
  if (!r->streaming) {                       /* a buffered body: hand it out once */
    size_t k = r->len - r->off < max ? r->len - r->off : max;
    if (k) memcpy(buf, r->body + r->off, k);
    r->off += k;
    return (ssize_t)k;
  }
  pthread_mutex_lock(&r->mu);
  while (!r->aborted && r->len == 0 && !r->eof) pthread_cond_wait(&r->cv, &r->mu);
  ssize_t n;
  if (r->aborted) n = -1;
  else if (r->len == 0) n = 0;
  else {
    size_t k = r->len < max ? r->len : max;
    memcpy(buf, r->body + r->off, k);
    r->off += k; r->len -= k;
    if (r->len == 0) r->off = 0;
    pthread_cond_broadcast(&r->cv);
    n = (ssize_t)k;
  }
  pthread_mutex_unlock(&r->mu);
  return n;
}

/* ---------- replies ---------- */

static void notify_locked(sd_request *r) { pthread_cond_broadcast(&r->cv); }

int sd_reply_header(sd_request *r, const char *name, const char *value) {
  int rc = -1;
  pthread_mutex_lock(&r->mu);
  size_t bytes = strlen(name) + strlen(value) + 4;
  if (r->state == R_PENDING && r->nextra < SD_MAX_EXTRA && r->extra_bytes + bytes <= SD_MAX_EXTRA_BYTES) {
    r->extra[r->nextra].name = strdup(name);
    r->extra[r->nextra].value = strdup(value);
    if (r->extra[r->nextra].name && r->extra[r->nextra].value) { r->nextra++; r->extra_bytes += bytes; rc = 0; }
    else { free(r->extra[r->nextra].name); free(r->extra[r->nextra].value); }
  }
  pthread_mutex_unlock(&r->mu);
  return rc;
}

/* Takes ownership of data (malloc'ed or NULL). */
static int reply_owned(sd_request *r, int status, const char *ctype, uint8_t *data, size_t len) {
  pthread_mutex_lock(&r->mu);
  if (r->state != R_PENDING) { pthread_mutex_unlock(&r->mu); free(data); return -1; }
  r->status = status;
  r->ctype = ctype ? strdup(ctype) : NULL;
  r->rbody = data; r->rlen = len;
  r->state = R_UNARY;
  notify_locked(r);
  pthread_mutex_unlock(&r->mu);
  return 0;
}

int sd_reply_bytes(sd_request *r, int status, const char *content_type, const void *data, size_t len) {
  uint8_t *copy = NULL;
  if (len) {
    copy = malloc(len);
    if (!copy) return reply_owned(r, 500, "application/json", (uint8_t *)strdup("{\"code\":500,\"message\":\"out of memory\"}"), 39);
    memcpy(copy, data, len);
  }
  return reply_owned(r, status, content_type, copy, len);
}

int sd_reply_json(sd_request *r, int status, json_t *body) {
  char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!s) return sd_reply_error(r, 500, "cannot encode the response");
  return reply_owned(r, status, "application/json", (uint8_t *)s, strlen(s));
}

static json_t *vmessage(const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  json_t *j = json_string(msg);
  return j ? j : json_string("(message is not valid UTF-8)");
}

int sd_reply_error(sd_request *r, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *m = vmessage(fmt, ap);
  va_end(ap);
  return sd_reply_json(r, status, json_pack("{s:i,s:o}", "code", status, "message", m));
}

/* ---------- streams ---------- */

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static sd_stream *all_streams;

static void stream_unref_locked(sd_stream *s) {
  if (--s->refs > 0) { pthread_mutex_unlock(&s->mu); return; }
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_lock(&streams_mu);
  if (s->lprev) s->lprev->lnext = s->lnext; else all_streams = s->lnext;
  if (s->lnext) s->lnext->lprev = s->lprev;
  pthread_mutex_unlock(&streams_mu);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s->buf);
  free(s);
}

/* Ends s at once: senders get -1, the reader ends the response with an error, and the client's
 * socket is shut down so a peer that stopped reading cannot hold the connection thread. */
static void stream_abort_locked(sd_stream *s) {
  s->closed = true;
  if (!s->mhd_done && s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
  pthread_cond_broadcast(&s->cv);
}

void sd_streams_abort(const void *group) {
  if (!group) return;
  pthread_mutex_lock(&tunnels_mu);
  for (sd_tunnel *t = tunnels; t; t = t->next)
    if (t->group == group) shutdown(t->fd, SHUT_RDWR);
  pthread_mutex_unlock(&tunnels_mu);
  pthread_mutex_lock(&streams_mu);
  for (sd_stream *s = all_streams; s; s = s->lnext) {
    if (s->group != group) continue;
    pthread_mutex_lock(&s->mu);
    /* Readers get what is queued (a command's end event, say); only a stream whose client stopped
     * reading (full queue) ends now, and any that fills up later. */
    if (!s->doomed) s->held = true;      /* once: a release is final */
    s->doomed = true;
    if (s->len > SD_STREAM_QUEUE) stream_abort_locked(s);
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&streams_mu);
}

void sd_streams_release(const void *group) {
  if (!group) return;
  pthread_mutex_lock(&streams_mu);
  for (sd_stream *s = all_streams; s; s = s->lnext) {
    if (s->group != group) continue;
    pthread_mutex_lock(&s->mu);
    s->held = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&streams_mu);
}

sd_stream *sd_stream_open(sd_request *r, const char *content_type) {
  return sd_stream_open_status(r, 200, content_type, -1);
}

sd_stream *sd_stream_open_status(sd_request *r, int status, const char *content_type, int64_t length) {
  pthread_mutex_lock(&r->mu);
  if (r->state != R_PENDING) { pthread_mutex_unlock(&r->mu); return NULL; }   /* before touching the connection */
  sd_stream *s = calloc(1, sizeof *s);
  if (!s) { pthread_mutex_unlock(&r->mu); return NULL; }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->refs = 2;
  s->group = r->group;
  /* The connection is alive: MHD's thread waits in on_access for this very state change. */
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  s->fd = ci ? ci->connect_fd : -1;
  r->ctype = content_type ? strdup(content_type) : NULL;
  r->status = status;
  r->stream_len = length;
  r->stream = s;
  r->state = R_STREAM;
  pthread_mutex_lock(&streams_mu);
  s->lnext = all_streams;
  if (all_streams) all_streams->lprev = s;
  all_streams = s;
  pthread_mutex_unlock(&streams_mu);
  notify_locked(r);
  pthread_mutex_unlock(&r->mu);
  return s;
}

/* Waits (s->mu held) while more than the queue limit is pending; false once the client is gone. */
static bool stream_room_locked(sd_stream *s) {
  struct timespec stall;                 /* when the queue was last seen full without progress */
  size_t seen = SIZE_MAX;
  while (!s->closed && s->len > SD_STREAM_QUEUE) {
    if (s->doomed) { stream_abort_locked(s); break; }
    if (s->len != seen) { seen = s->len; clock_gettime(CLOCK_MONOTONIC, &stall); }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (s->len == seen && now.tv_sec - stall.tv_sec >= SD_WRITE_TIMEOUT_S) stream_abort_locked(s);   /* write timeout */
  }
  return !s->closed;
}

/* Room for len more bytes after the pending ones (s->mu held): compacts, then grows. */
static uint8_t *stream_tail_locked(sd_stream *s, size_t len) {
  if (s->off && s->off + s->len + len > s->cap) {          /* compact before growing */
    memmove(s->buf, s->buf + s->off, s->len);
    s->off = 0;
  }
  if (s->off + s->len + len > s->cap) {
    size_t want = s->cap ? s->cap : 4096;
    while (want < s->len + len) want *= 2;
    uint8_t *nb = realloc(s->buf, want);
    if (!nb) return NULL;
    s->buf = nb; s->cap = want;
  }
  return s->buf + s->off + s->len;
}

int sd_stream_send(sd_stream *s, const void *data, size_t len) {
  pthread_mutex_lock(&s->mu);
  uint8_t *p = stream_room_locked(s) ? stream_tail_locked(s, len) : NULL;
  if (!p) { pthread_mutex_unlock(&s->mu); return -1; }
  memcpy(p, data, len);
  s->len += len;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

void *sd_stream_reserve(sd_stream *s, size_t n) {
  pthread_mutex_lock(&s->mu);
  uint8_t *p = stream_room_locked(s) ? stream_tail_locked(s, n) : NULL;
  if (p) s->reserved = n;
  pthread_mutex_unlock(&s->mu);
  return p;
}

int sd_stream_commit(sd_stream *s, size_t k) {
  pthread_mutex_lock(&s->mu);
  int rc = -1;
  if (s->reserved && k <= s->reserved && !s->closed) {
    s->len += k;
    rc = 0;
    pthread_cond_broadcast(&s->cv);
  }
  s->reserved = 0;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int sd_stream_closed(const sd_stream *s) {
  sd_stream *m = (sd_stream *)s;
  pthread_mutex_lock(&m->mu);
  int c = m->closed;
  pthread_mutex_unlock(&m->mu);
  return c;
}

#define SD_FD_CHUNK (64u << 10)
void sd_stream_fd(sd_request *r, const char *content_type, int fd) {
  sd_stream *s = sd_stream_open(r, content_type);
  if (!s) return;
  for (;;) {
    void *p = sd_stream_reserve(s, SD_FD_CHUNK);
    if (!p) break;                                   /* the client is gone */
    ssize_t n;
    do n = read(fd, p, SD_FD_CHUNK); while (n < 0 && errno == EINTR);
    if (sd_stream_commit(s, n > 0 ? (size_t)n : 0) != 0 || n == 0) break;
    if (n < 0) { sd_stream_fail(s); return; }       /* a read error: never a body that looks whole */
  }
  sd_stream_end(s);
}

void sd_stream_end(sd_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->ended = true;
  pthread_cond_broadcast(&s->cv);
  stream_unref_locked(s);
}

void sd_stream_fail(sd_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->closed = true;              /* senders stop; the reader delivers what is queued, then an error */
  pthread_cond_broadcast(&s->cv);
  stream_unref_locked(s);
}

static bool peer_gone(int fd) {
  if (fd < 0) return false;
  struct pollfd p = { .fd = fd, .events = POLLRDHUP };
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* MHD content reader (connection thread): blocks until bytes are pending or the stream ends. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  sd_stream *s = cls;
  pthread_mutex_lock(&s->mu);
  /* A held stream (its sandbox is being destroyed) delivers nothing until sd_streams_release:
   * a client learns the end of a command only once the sandbox is completely gone. */
  while (!s->closed && (s->held || (s->len == 0 && !s->ended))) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    /* Idle streams wake once a second to notice a client that went away. */
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT && peer_gone(s->fd)) {
      s->closed = true;
      pthread_cond_broadcast(&s->cv);
    }
  }
  ssize_t n;
  if (s->held) {
    n = MHD_CONTENT_READER_END_WITH_ERROR;     /* aborted while held */
  } else if (s->len > 0) {
    size_t k = s->len < max ? s->len : max;
    memcpy(buf, s->buf + s->off, k);
    s->off += k; s->len -= k;
    if (s->len == 0 && !s->reserved) s->off = 0;   /* a writer filling buf[off..] keeps its place */
    pthread_cond_broadcast(&s->cv);
    n = (ssize_t)k;
  } else if (s->ended) {
    n = MHD_CONTENT_READER_END_OF_STREAM;
  } else {
    n = MHD_CONTENT_READER_END_WITH_ERROR;
  }
  pthread_mutex_unlock(&s->mu);
  return n;
}

static void stream_free(void *cls) {
  sd_stream *s = cls;
  pthread_mutex_lock(&s->mu);
  s->closed = true;
  s->mhd_done = true;
  pthread_cond_broadcast(&s->cv);
  stream_unref_locked(s);
}

/* ---------- upgrades ---------- */

/* MHD's upgrade handler (connection thread): the 101 went out; the socket goes to sd_upgrade. */
static void upgraded(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra_in, size_t extra_in_size,
                     MHD_socket sock, struct MHD_UpgradeResponseHandle *urh) {
  (void)con_cls;
  sd_request *r = cls;
  sd_tunnel *t = calloc(1, sizeof *t + extra_in_size);
  if (t) {
    t->fd = sock;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    t->tcp_fd = ci ? ci->connect_fd : -1;
    t->tls = listeners[r->listener].tls;
    t->urh = urh;
    t->group = r->group;
    t->nearly = extra_in_size;
    if (extra_in_size) memcpy(t->early, extra_in, extra_in_size);
    pthread_mutex_lock(&tunnels_mu);
    t->next = tunnels;
    if (tunnels) tunnels->prev = t;
    tunnels = t;
    ntunnels++;
    pthread_mutex_unlock(&tunnels_mu);
  } else {
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
  }
  pthread_mutex_lock(&r->mu);
  r->tunnel = t;
  r->tunnel_failed = !t;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

sd_tunnel *sd_upgrade(sd_request *r) {
  pthread_mutex_lock(&r->mu);
  if (r->state != R_PENDING) { pthread_mutex_unlock(&r->mu); return NULL; }
  r->state = R_UPGRADE;
  notify_locked(r);                           /* on_access queues the 101 */
  while (!r->tunnel && !r->tunnel_failed) pthread_cond_wait(&r->cv, &r->mu);
  sd_tunnel *t = r->tunnel;
  r->tunnel = NULL;
  pthread_mutex_unlock(&r->mu);
  return t;
}

int sd_tunnel_fd(const sd_tunnel *t) { return t->fd; }
bool sd_tunnel_half_close(const sd_tunnel *t) { return !t->tls; }
bool sd_tunnel_client_closed(const sd_tunnel *t) { return peer_gone(t->tcp_fd); }

const uint8_t *sd_tunnel_early(const sd_tunnel *t, size_t *len) {
  *len = t->nearly;
  return t->early;
}

void sd_tunnel_close(sd_tunnel *t) {
  pthread_mutex_lock(&tunnels_mu);
  if (t->prev) t->prev->next = t->next; else tunnels = t->next;
  if (t->next) t->next->prev = t->prev;
  ntunnels--;
  pthread_cond_broadcast(&tunnels_cv);
  pthread_mutex_unlock(&tunnels_mu);
  MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE);
  free(t);
}

/* ---------- multipart ---------- */

typedef struct { sd_part_cb cb; void *cls; int rc; } mp_ctx;

static enum MHD_Result mp_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding,
                               const char *data, uint64_t off, size_t size) {
  (void)kind; (void)content_type; (void)transfer_encoding;
  mp_ctx *m = cls;
  m->rc = m->cb(m->cls, key ? key : "", filename, data, off, size);
  return m->rc ? MHD_NO : MHD_YES;
}

struct sd_mp { sd_request *r; struct MHD_PostProcessor *pp; mp_ctx m; bool failed; };

sd_mp *sd_multipart_begin(sd_request *r, sd_part_cb cb, void *cls) {
  sd_mp *mp = calloc(1, sizeof *mp);
  if (!mp) return NULL;
  mp->r = r;
  mp->m = (mp_ctx){ cb, cls, 0 };
  pthread_mutex_lock(&r->conn_mu);           /* the connection is alive while conn_mu is held */
  if (!r->conn_gone) mp->pp = MHD_create_post_processor(r->conn, 64 * 1024, mp_iter, &mp->m);
  pthread_mutex_unlock(&r->conn_mu);
  if (!mp->pp) { free(mp); return NULL; }
  return mp;
}

int sd_multipart_feed(sd_mp *mp, const void *data, size_t len) {
  if (mp->failed) return mp->m.rc ? mp->m.rc : -1;
  pthread_mutex_lock(&mp->r->conn_mu);
  enum MHD_Result ok = mp->r->conn_gone ? MHD_NO : MHD_post_process(mp->pp, data, len);
  pthread_mutex_unlock(&mp->r->conn_mu);
  if (ok != MHD_YES) mp->failed = true;
  if (mp->m.rc) return mp->m.rc;
  return ok == MHD_YES ? 0 : -1;
}

int sd_multipart_end(sd_mp *mp) {
  pthread_mutex_lock(&mp->r->conn_mu);
  enum MHD_Result fin = MHD_destroy_post_processor(mp->pp);
  pthread_mutex_unlock(&mp->r->conn_mu);
  int rc = mp->m.rc ? mp->m.rc : (!mp->failed && fin == MHD_YES ? 0 : -1);
  free(mp);
  return rc;
}

/* ---------- request lifetime ---------- */

static void kv_free(kv *v, size_t n) {
  for (size_t i = 0; i < n; i++) { free(v[i].name); free(v[i].value); }
}

/* Request bodies are wiped before they are let go: they carry tokens and secret values. */
static void body_free(uint8_t *body, size_t cap) {
  if (!body) return;
  explicit_bzero(body, cap);
  free(body);
}

static void inbound_unref(inbound *in) {
  if (atomic_fetch_sub(&in->refs, 1) != 1) return;
  g_inbound.free(in->ctx);
  free(in);
}

static void req_unref(sd_request *r) {
  pthread_mutex_lock(&r->mu);
  int left = --r->refs;
  pthread_mutex_unlock(&r->mu);
  if (left > 0) return;
  const sd_hooks *h = listeners[r->listener].hooks;
  if (r->admitted && h->release) h->release(r->ctx);
  if (r->inbound) inbound_unref(r->inbound);
  kv_free(r->headers, r->nheaders);
  kv_free(r->query, r->nquery);
  kv_free(r->extra, r->nextra);
  atomic_fetch_sub(&inflight, r->cap);
  free(r->method); free(r->path); free(r->target); body_free(r->body, r->cap); free(r->ctype); free(r->rbody); free(r->nul_name);
  pthread_mutex_destroy(&r->mu);
  pthread_mutex_destroy(&r->conn_mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size, const char *value,
                               size_t value_size) {
  sd_request *r = cls;
  /* "%00" decodes to a NUL byte, which a C string would silently cut at: such a request is refused. */
  if (key && (memchr(key, 0, key_size) || (value && memchr(value, 0, value_size)))) {
    if (!r->nul_name) r->nul_name = strndup(key, strnlen(key, 200));
    return MHD_YES;
  }
  kv *arr = kind == MHD_HEADER_KIND ? r->headers : r->query;
  size_t *n = kind == MHD_HEADER_KIND ? &r->nheaders : &r->nquery;
  if (*n >= SD_MAX_KV || !key) return MHD_YES;
  arr[*n].name = strdup(key);
  arr[*n].value = strdup(value ? value : "");
  if (arr[*n].name && arr[*n].value) (*n)++;
  else { free(arr[*n].name); free(arr[*n].value); }
  return MHD_YES;
}

/* ---------- handling ---------- */

/* The handler, and a 500 if it produced no reply. */
static void run_handler(sd_request *r) {
  listeners[r->listener].hooks->handle(r, r->ctx);
  pthread_mutex_lock(&r->mu);
  if (r->state == R_PENDING) {
    pthread_mutex_unlock(&r->mu);
    sd_reply_error(r, 500, "internal error: %s %s produced no reply", r->method, r->path);
    pthread_mutex_lock(&r->mu);
  }
  pthread_mutex_unlock(&r->mu);
}

static void *worker(void *arg) {
  sd_request *r = arg;
  run_handler(r);
  req_unref(r);
  return NULL;
}

static void add_extra(struct MHD_Response *resp, sd_request *r) {
  for (size_t i = 0; i < r->nextra; i++) MHD_add_response_header(resp, r->extra[i].name, r->extra[i].value);
}

static enum MHD_Result queue_simple(struct MHD_Connection *c, int status, const char *json) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", "application/json");
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* Runs the handle hook on a detached worker thread holding its own reference; 0 or -1. */
static int start_worker(sd_request *r) {
  pthread_mutex_lock(&r->mu);
  r->refs++;                                            /* the worker's reference */
  pthread_mutex_unlock(&r->mu);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, worker, r);
  pthread_attr_destroy(&attr);
  if (rc != 0) { req_unref(r); return -1; }
  return 0;
}

/* MHD's URI log callback: the request begins here, with its target as sent (before MHD decodes
 * it). What it returns is the request's con_cls; MHD reports its end to on_completed whatever
 * happens next. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
  listener *l = cls;
  atomic_fetch_add(&l->requests, 1);
  sd_request *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->mu, NULL);
  pthread_mutex_init(&r->conn_mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->refs = 1;
  r->conn = c;
  r->listener = (int)(l - listeners);
  r->target = strdup(uri ? uri : "");
  if (l->inbound) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->inbound = ci ? ci->socket_context : NULL;
    if (r->inbound) atomic_fetch_add(&r->inbound->refs, 1);
  }
  return r;
}

/* A TLS 1.3 client's Finished is answered by nothing (the server's flight went before it), so its
 * ACK would wait out the delayed-ACK timer, and a client with Nagle on holds its request until
 * then: ~40 ms on every new connection. Sent now instead. */
static int on_client_finished(gnutls_session_t session, unsigned htype, unsigned when, unsigned incoming,
                              const gnutls_datum_t *msg) {
  (void)htype; (void)when; (void)msg;
  struct MHD_Connection *c = incoming ? gnutls_session_get_ptr(session) : NULL;
  const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
  int one = 1;
  if (ci) (void)setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
  return 0;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code) {
  listener *l = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) atomic_fetch_add(&l->connections, 1);
  if (!l->inbound) return;
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    if (*socket_context) inbound_unref(*socket_context);
    *socket_context = NULL;
    return;
  }
  /* Started (before its thread, so before any handshake): the context waiting for its socket. */
  if (l->tls) {
    const union MHD_ConnectionInfo *ti = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (ti && ti->tls_session)
      gnutls_handshake_set_hook_function(ti->tls_session, GNUTLS_HANDSHAKE_FINISHED, GNUTLS_HOOK_POST, on_client_finished);
  }
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  pthread_mutex_lock(&inbound_mu);
  for (inbound **p = &pending; ci && *p; p = &(*p)->next)
    if ((*p)->fd == ci->connect_fd) {
      *socket_context = *p;
      *p = (*p)->next;
      break;
    }
  pthread_mutex_unlock(&inbound_mu);
}

/* GnuTLS asks a TLS inbound connection for its certificate: the context's (MHD made the
 * connection the session's pointer). */
static int inbound_cert(gnutls_session_t session, const struct gnutls_cert_retr_st *info, gnutls_pcert_st **certs,
                        unsigned int *ncerts, gnutls_ocsp_data_st **ocsp, unsigned int *nocsp, gnutls_privkey_t *key,
                        unsigned int *flags) {
  (void)info;
  *ocsp = NULL;
  *nocsp = 0;
  struct MHD_Connection *c = gnutls_session_get_ptr(session);
  const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
  inbound *in = ci ? ci->socket_context : NULL;
  if (!in || g_inbound.cert(in->ctx, certs, ncerts, key) != 0) return -1;
  *flags = GNUTLS_CERT_RETR_DEINIT_ALL;
  return 0;
}

void *sd_inbound_context(const sd_request *r) { return r->inbound ? r->inbound->ctx : NULL; }


bool sd_client_gone(sd_request *r) {
  bool gone = true;
  pthread_mutex_lock(&r->conn_mu);
  if (!r->conn_gone) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    gone = ci ? peer_gone(ci->connect_fd) : false;
  }
  pthread_mutex_unlock(&r->conn_mu);
  return gone;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_size,
                                 void **con_cls) {
  (void)cls; (void)version;
  sd_request *r = *con_cls;
  if (!r) return MHD_NO;                                 /* on_uri found no memory */
  if (!r->begun) {
    r->begun = true;
    r->method = strdup(method);
    r->path = strdup(url);
    if (!r->method || !r->path || !r->target) return MHD_NO;
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, collect, r);
    MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, collect, r);
    if (r->nul_name) {
      r->started = true;
      json_t *j = json_pack("{s:i,s:s+++}", "code", 400, "message", "'", r->nul_name, "' holds a NUL byte (%00), which no path or value may hold", "");
      char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
      json_decref(j);
      enum MHD_Result ret = queue_simple(c, 400, text ? text : "{\"code\":400,\"message\":\"a query parameter holds a NUL byte\"}");
      free(text);
      return ret;
    }
    /* Authentication and routing from the headers alone, before any body byte is read: an
     * unauthenticated client cannot make sandboxd buffer anything. */
    sd_admission a = {0};
    char *early = NULL;
    int st = listeners[r->listener].hooks->admit(r, &a, &early);
    if (st) {                                            /* answered before the body is read */
      r->started = true;
      enum MHD_Result ret = queue_simple(c, st, early ? early : "{\"code\":500,\"message\":\"out of memory\"}");
      free(early);
      return ret;
    }
    r->ctx = a.ctx;
    r->admitted = true;
    r->upload = a.stream_body;
    r->unary = a.unary && !a.stream_body;
    r->group = a.group;
    r->limit = r->upload ? g_upload_limit : SD_MAX_BODY;
    /* Authenticated but oversize: drained unbuffered and answered 413 at the end, which every
     * HTTP client reads (an early answer would reach most of them as a reset connection). */
    const char *cl = sd_header(r, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > r->limit) r->too_large = true;
    if (!r->too_large && r->upload) {
      /* Uploads are not buffered: the handler starts now and reads the body as it arrives. Its
       * queue counts against the in-flight total like a buffered body (503 beyond it). */
      if (atomic_fetch_add(&inflight, SD_UPLOAD_QUEUE) + SD_UPLOAD_QUEUE > SD_MAX_INFLIGHT) {
        atomic_fetch_sub(&inflight, SD_UPLOAD_QUEUE);
        r->busy = true;
        return MHD_YES;
      }
      r->cap = SD_UPLOAD_QUEUE;                          /* released in req_unref */
      r->body = malloc(SD_UPLOAD_QUEUE);
      if (!r->body) return MHD_NO;
      r->streaming = true;
      if (start_worker(r) != 0) { r->streaming = false; r->nothread = true; }   /* 503 at the end */
    }
    return MHD_YES;
  }
  if (*upload_size && r->streaming) {
    size_t n = *upload_size;
    pthread_mutex_lock(&r->mu);
    if (!r->too_large && n > r->limit - r->total) {
      r->too_large = true;                               /* the handler stops; nothing becomes visible */
      r->aborted = true;
      pthread_cond_broadcast(&r->cv);
    }
    /* Backpressure: wait for room while the handler still reads (it has not replied). */
    size_t need = n < SD_UPLOAD_QUEUE ? n : SD_UPLOAD_QUEUE;   /* MHD's pieces are far smaller: taken whole */
    while (!r->aborted && r->state == R_PENDING && r->len + need > SD_UPLOAD_QUEUE) pthread_cond_wait(&r->cv, &r->mu);
    if (r->aborted || r->state != R_PENDING) {
      *upload_size = 0;                                  /* drain: the reply is queued at the end */
    } else {
      if (r->off && r->off + r->len + n > SD_UPLOAD_QUEUE) {
        memmove(r->body, r->body + r->off, r->len);
        r->off = 0;
      }
      size_t room = SD_UPLOAD_QUEUE - r->off - r->len, k = n < room ? n : room;
      memcpy(r->body + r->off + r->len, upload_data, k);
      r->len += k;
      r->total += k;
      *upload_size = n - k;                              /* MHD hands the rest in again */
      pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return MHD_YES;
  }
  if (*upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    if (r->too_large || r->busy || r->nothread) return MHD_YES;   /* drain and answer 413/503 at the end */
    if (n > r->limit - r->len) {
      r->too_large = true;
      atomic_fetch_sub(&inflight, r->cap);
      body_free(r->body, r->cap); r->body = NULL; r->len = r->cap = 0;
      return MHD_YES;
    }
    if (r->len + n > r->cap) {
      size_t want = r->cap ? r->cap : 16384;
      while (want < r->len + n) want *= 2;
      if (want > r->limit) want = r->limit;
      if (atomic_fetch_add(&inflight, want - r->cap) + (want - r->cap) > SD_MAX_INFLIGHT) {
        atomic_fetch_sub(&inflight, want - r->cap);
        r->busy = true;                                  /* answer 503 at the end; drop what we hold */
        atomic_fetch_sub(&inflight, r->cap);
        body_free(r->body, r->cap); r->body = NULL; r->len = r->cap = 0;
        return MHD_YES;
      }
      uint8_t *nb = malloc(want);                        /* not realloc: the old buffer is wiped */
      if (!nb) { atomic_fetch_sub(&inflight, want - r->cap); return MHD_NO; }
      if (r->len) memcpy(nb, r->body, r->len);
      body_free(r->body, r->cap);
      r->body = nb; r->cap = want;
    }
    memcpy(r->body + r->len, upload_data, n);
    r->len += n;
    return MHD_YES;
  }
  if (r->started) return MHD_YES;                       /* cannot happen: a reply is queued below */
  r->started = true;
  if (r->busy)
    return queue_simple(c, 503, "{\"code\":503,\"message\":\"sandboxd holds too many request bytes at once; retry later\"}");
  if (r->too_large) {
    char msg[160];
    snprintf(msg, sizeof msg, "{\"code\":413,\"message\":\"request body exceeds the limit of %zu bytes\"}", r->limit);
    return queue_simple(c, 413, msg);
  }
  if (r->streaming) {
    pthread_mutex_lock(&r->mu);
    r->eof = true;                                      /* the whole body arrived */
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
  } else if (r->unary) {
    run_handler(r);   /* no thread to start, nor to wake for the reply */
  } else if (r->nothread || start_worker(r) != 0) {
    return queue_simple(c, 503, "{\"code\":503,\"message\":\"cannot start a handler thread\"}");
  }
  pthread_mutex_lock(&r->mu);
  while (r->state == R_PENDING) pthread_cond_wait(&r->cv, &r->mu);
  struct MHD_Response *resp;
  int status;
  if (r->state == R_UPGRADE) {
    /* The upgraded connection has no idle timeout either: the tunnel's handler decides. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    status = 101;
    resp = MHD_create_response_for_upgrade(upgraded, r);
  } else if (r->state == R_STREAM) {
    /* A stream may be silent for long (a quiet command): no idle timeout; sd_stream_send has
     * its own write timeout for a client that stops reading. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    status = r->status;
    resp = MHD_create_response_from_callback(r->stream_len >= 0 ? (uint64_t)r->stream_len : MHD_SIZE_UNKNOWN,
                                             SD_STREAM_BLOCK, stream_reader, r->stream, stream_free);
    if (!resp) {   /* the stream still needs its MHD reference dropped */
      pthread_mutex_unlock(&r->mu);
      stream_free(r->stream);
      return MHD_NO;
    }
  } else {
    /* 0 then the limit: restarts the idle timer, so a slow handler does not count against the
     * client, while a client that reads nothing of the reply is dropped after the limit. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)SD_WRITE_TIMEOUT_S);
    status = r->status;
    resp = MHD_create_response_from_buffer(r->rlen, r->rbody ? (void *)r->rbody : (void *)"", MHD_RESPMEM_MUST_COPY);
  }
  if (resp) {
    if (r->ctype) MHD_add_response_header(resp, "Content-Type", r->ctype);
    add_extra(resp, r);
  }
  pthread_mutex_unlock(&r->mu);
  if (!resp) return MHD_NO;
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls; (void)c; (void)toe;
  sd_request *r = *con_cls;
  *con_cls = NULL;
  if (!r) return;
  pthread_mutex_lock(&r->conn_mu);
  r->conn_gone = true;                    /* the handler may not touch the connection any more */
  pthread_mutex_unlock(&r->conn_mu);
  pthread_mutex_lock(&r->mu);
  if (!r->eof || r->too_large) r->aborted = true;   /* the client went away mid-body: the handler stops */
  if (r->state == R_UPGRADE && !r->tunnel) r->tunnel_failed = true;   /* (after upgraded() on success) */
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  req_unref(r);
}

/* MHD's own log, minus the line it writes whenever a client hangs up on a stream (normal here).
 * The first line since sd_server_start began a listener is kept for its error (a certificate
 * GnuTLS refused says why there). */
static char last_log[256];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  if (strstr(buf, "application error generating response")) return;
  buf[strcspn(buf, "\n")] = '\0';
  pthread_mutex_lock(&log_mu);
  if (!last_log[0]) snprintf(last_log, sizeof last_log, "%.255s", buf);
  pthread_mutex_unlock(&log_mu);
  fprintf(stderr, "sandboxd: http: %s\n", buf);
}

static void stop_all(void) {
  for (size_t i = 0; i < nlisteners; i++)
    if (listeners[i].d) { MHD_stop_daemon(listeners[i].d); listeners[i].d = NULL; }
  nlisteners = 0;
}

int sd_server_start(const sd_listen *ls, size_t n, const sd_hooks *hooks, char *err, size_t errlen) {
  g_hooks = *hooks;
  const char *ul = getenv("SANDBOXD_MAX_UPLOAD");
  if (ul && *ul) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(ul, &end, 10);
    if (*end || errno || v == 0 || v > SIZE_MAX / 2) {
      snprintf(err, errlen, "SANDBOXD_MAX_UPLOAD: '%s' is not a byte count", ul);
      return -1;
    }
    g_upload_limit = (size_t)v;
  }
  if (n == 0 || n > SD_MAX_LISTEN) {
    snprintf(err, errlen, "between 1 and %d listeners, not %zu", SD_MAX_LISTEN, n);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    bool tls = ls[i].tls_cert || ls[i].tls_key;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)ls[i].port) };
    if (inet_pton(AF_INET, ls[i].host, &sa.sin_addr) != 1) {
      snprintf(err, errlen, "'%s' is not an IPv4 address", ls[i].host);
      stop_all();
      return -1;
    }
    if (tls && (!ls[i].tls_cert || !ls[i].tls_key)) {
      snprintf(err, errlen, "TLS on %s:%d needs both a certificate and a key", ls[i].host, ls[i].port);
      stop_all();
      return -1;
    }
    listener *l = &listeners[i];
    l->tls = tls;
    l->hooks = &g_hooks;
    atomic_store(&l->connections, 0);
    atomic_store(&l->requests, 0);
    last_log[0] = '\0';
    /* Upgrades (the port proxy's WebSockets) need suspend/resume: MHD_upgrade_action resumes. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | (tls ? MHD_USE_TLS : 0);
    errno = 0;
    /* TLS listeners add their certificate and key; the rest is the same for both */
    struct MHD_OptionItem tls_opts[] = {{MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)ls[i].tls_cert},
                                        {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)ls[i].tls_key},
                                        {MHD_OPTION_END, 0, NULL}};
    l->d = MHD_start_daemon(flags, (uint16_t)ls[i].port, NULL, NULL, on_access, l,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,   /* must come first */
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, l,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, l,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)4000,
                            /* idle limit while a request is read; replies set their own (on_access) */
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SD_WRITE_TIMEOUT_S,
                            MHD_OPTION_ARRAY, tls ? tls_opts : tls_opts + 2,
                            MHD_OPTION_END);
    if (!l->d) {
      int e = errno;
      pthread_mutex_lock(&log_mu);
      if (tls && last_log[0]) snprintf(err, errlen, "cannot serve TLS on %s:%d: %s", ls[i].host, ls[i].port, last_log);
      else snprintf(err, errlen, "cannot listen on %s:%d: %s", ls[i].host, ls[i].port, e ? strerror(e) : last_log);
      pthread_mutex_unlock(&log_mu);
      stop_all();
      return -1;
    }
    nlisteners = i + 1;
  }
  return 0;
}

int sd_server_port(size_t i) {
  if (i >= nlisteners || !listeners[i].d) return 0;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(listeners[i].d, MHD_DAEMON_INFO_BIND_PORT);
  return di ? di->port : 0;
}

void sd_server_stats(size_t i, sd_listen_stats *st) {
  memset(st, 0, sizeof *st);
  if (i >= nlisteners) return;
  st->connections = atomic_load(&listeners[i].connections);
  st->requests = atomic_load(&listeners[i].requests);
}

void sd_server_stop(void) {
  /* Tunnels first: MHD may not stop with an upgraded connection its handler still uses. */
  pthread_mutex_lock(&tunnels_mu);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += SD_STOP_WAIT_S;
  while (ntunnels > 0) {
    for (sd_tunnel *t = tunnels; t; t = t->next) shutdown(t->fd, SHUT_RDWR);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    if (ts.tv_sec > until.tv_sec) ts = until;
    if (pthread_cond_timedwait(&tunnels_cv, &tunnels_mu, &ts) == ETIMEDOUT && ts.tv_sec >= until.tv_sec) break;
  }
  size_t left = ntunnels;
  pthread_mutex_unlock(&tunnels_mu);
  if (left) fprintf(stderr, "sandboxd: http: %zu tunnel%s still open at shutdown\n", left, left == 1 ? "" : "s");
  stop_all();
}

/* ---------- inbound connections ---------- */

int sd_inbound_start(const sd_inbound_hooks *hooks, char *err, size_t errlen) {
  g_inbound = *hooks;
  g_inbound_hooks = hooks->http;
  for (int k = 0; k < 2; k++) {
    listener *l = &listeners[k ? INBOUND_TLS : INBOUND_PLAIN];
    l->tls = k;
    l->inbound = true;
    l->hooks = &g_inbound_hooks;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE |
                     (k ? MHD_USE_TLS : 0);
    l->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, l,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,   /* must come first */
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, l,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, l,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)4000,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SD_WRITE_TIMEOUT_S,
                            k ? MHD_OPTION_HTTPS_CERT_CALLBACK2 : MHD_OPTION_END, inbound_cert,
                            MHD_OPTION_END);
    if (!l->d) {
      snprintf(err, errlen, "cannot start the %s server of intercepted connections: %s", k ? "TLS" : "HTTP",
               last_log[0] ? last_log : "libmicrohttpd refused");
      sd_inbound_stop();
      return -1;
    }
  }
  return 0;
}

int sd_inbound_add(bool tls, int fd, const struct sockaddr *peer, socklen_t peerlen, void *ctx) {
  listener *l = &listeners[tls ? INBOUND_TLS : INBOUND_PLAIN];
  inbound *in = malloc(sizeof *in);
  if (!l->d || !in) {
    free(in);
    close(fd);
    g_inbound.free(ctx);
    return -1;
  }
  in->fd = fd;
  in->ctx = ctx;
  atomic_init(&in->refs, 1);                            /* the connection's */
  pthread_mutex_lock(&inbound_mu);
  /* An entry for the same socket is stale: one whose connection MHD closed before it started. */
  inbound *stale = NULL;
  for (inbound **p = &pending; *p; p = &(*p)->next)
    if ((*p)->fd == fd) { stale = *p; *p = stale->next; break; }
  in->next = pending;
  pending = in;
  pthread_mutex_unlock(&inbound_mu);
  if (stale) inbound_unref(stale);
  if (MHD_add_connection(l->d, fd, peer, peerlen) == MHD_YES) return 0;   /* (MHD closed fd otherwise) */
  pthread_mutex_lock(&inbound_mu);
  for (inbound **p = &pending; *p; p = &(*p)->next)
    if (*p == in) { *p = in->next; break; }
  pthread_mutex_unlock(&inbound_mu);
  inbound_unref(in);
  return -1;
}

void sd_inbound_stop(void) {
  for (int i = INBOUND_PLAIN; i <= INBOUND_TLS; i++)
    if (listeners[i].d) { MHD_stop_daemon(listeners[i].d); listeners[i].d = NULL; }
  pthread_mutex_lock(&inbound_mu);
  inbound *p = pending;
  pending = NULL;
  pthread_mutex_unlock(&inbound_mu);
  while (p) { inbound *n = p->next; inbound_unref(p); p = n; }
}
