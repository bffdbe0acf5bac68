/* http.c — requests on top of loop.c. libcurl callbacks (write, header, read) only record
 * bytes and state; owners hear about changes through mb_loop_defer. */
#include "http.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define MB_HTTP_DEFAULT_HIGH_WATER (256 * 1024)

struct mb_http_req {
  mb_xfer x;              /* first: loop.c hands it back to us */
  mb_pending pend;
  mb_loop *loop;
  mb_http_cb cb;
  void *ud;
  struct curl_slist *hdrs;
  struct curl_slist *connect_to;
  int stream;
  size_t max_bytes, high_water;
  /* response headers of the final (non-1xx) response, raw lines */
  char *hbuf;
  size_t hlen, hcap;
  int headers_done;
  long status;
  /* body: [boff, blen) unread */
  char *body;
  size_t blen, bcap, boff;
  uint64_t received, pauses;
  size_t max_buffered;
  int paused;
  int done;
  struct mb_error err;    /* set by our callbacks before aborting, or at completion */
  int upload_fd, own_fd;
  struct mb_http_sink sink;  /* sink.data == NULL: the body goes to `body` */
  struct mb_http_source source; /* source.read == NULL: no produced body */
  const struct mb_http_part *parts; /* upload from memory pieces: current part and offset */
  size_t nparts, part, part_off;
  uv_timer_t *hdr_timer;  /* streams: deadline for the response headers */
  char errbuf[CURL_ERROR_SIZE];
};

int mb_http_map_curl(CURLcode rc) {
  switch (rc) {
  case CURLE_OK: return MB_OK;
  case CURLE_COULDNT_CONNECT: return MB_E_CONNECT_FAILED;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY: return MB_E_DNS;
  case CURLE_OPERATION_TIMEDOUT: return MB_E_TIMEOUT;
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_SHUTDOWN_FAILED:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_SSL_CLIENTCERT:
  case CURLE_USE_SSL_FAILED: return MB_E_TLS;
  case CURLE_FILESIZE_EXCEEDED: return MB_E_TOO_LARGE;
  case CURLE_ABORTED_BY_CALLBACK: return MB_E_CANCELED;
  case CURLE_OUT_OF_MEMORY: return MB_E_NOMEM;
  case CURLE_URL_MALFORMAT:
  case CURLE_UNSUPPORTED_PROTOCOL:
  case CURLE_BAD_FUNCTION_ARGUMENT: return MB_E_INVALID;
  case CURLE_WEIRD_SERVER_REPLY:
  case CURLE_BAD_CONTENT_ENCODING:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_TOO_MANY_REDIRECTS: return MB_E_PROTOCOL;
  default: return MB_E_IO; /* GOT_NOTHING, PARTIAL_FILE, RECV/SEND_ERROR, READ_ERROR, ... */
  }
}

static void notify(mb_http_req *r) { mb_loop_defer(r->loop, &r->pend); }

static void fire(mb_pending *p) {
  mb_http_req *r = (mb_http_req *)((char *)p - offsetof(mb_http_req, pend));
  if (r->cb) r->cb(r, r->ud);
}

static size_t unread(const mb_http_req *r) { return r->blen - r->boff; }

/* What is held and not yet delivered: the own buffer's unread bytes, or the sink's backlog. */
static size_t held(const mb_http_req *r) {
  return r->sink.data ? r->sink.backlog(r->sink.ud) : unread(r);
}

static void free_handle(uv_handle_t *h) { free(h); }

static void close_hdr_timer(mb_http_req *r) {
  if (!r->hdr_timer) return;
  uv_timer_stop(r->hdr_timer);
  uv_close((uv_handle_t *)r->hdr_timer, free_handle);
  r->hdr_timer = NULL;
}

/* Appends within cap: grows geometrically but never past cap. */
static int append(mb_http_req *r, const char *p, size_t n, size_t cap) {
  if (r->boff && r->boff == r->blen) r->boff = r->blen = 0;
  if (r->blen + n > r->bcap) {
    if (r->boff) { /* slide unread bytes down before growing */
      memmove(r->body, r->body + r->boff, r->blen - r->boff);
      r->blen -= r->boff;
      r->boff = 0;
    }
  }
  if (r->blen + n > r->bcap) {
    size_t want = r->bcap ? r->bcap * 2 : 4096;
    if (want < r->blen + n) want = r->blen + n;
    if (cap && want > cap && cap >= r->blen + n) want = cap;
    char *nb = realloc(r->body, want);
    if (!nb) return MB_E_NOMEM;
    r->body = nb;
    r->bcap = want;
  }
  memcpy(r->body + r->blen, p, n);
  r->blen += n;
  if (unread(r) > r->max_buffered) r->max_buffered = unread(r);
  return MB_OK;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud) {
  mb_http_req *r = ud;
  size_t n = size * nmemb;
  if (r->stream && held(r) >= r->high_water) {
    r->paused = 1;
    r->pauses++;
    return CURL_WRITEFUNC_PAUSE; /* libcurl keeps this chunk and delivers it again on resume */
  }
  /* max_bytes is optional only for streams (mb_http_start), which also buffer without a cap. */
  if (r->max_bytes && r->received + n > r->max_bytes) {
    mb_error_set(&r->err, MB_E_TOO_LARGE, "response body exceeds max_bytes (%zu)", r->max_bytes);
    return 0;
  }
  if (r->sink.data) {
    r->received += n;
    if (r->sink.data(r->sink.ud, r, p, n, &r->err) != MB_OK) {
      if (r->err.code == MB_OK) mb_error_set(&r->err, MB_E_PROTOCOL, "the body consumer failed");
      return 0;
    }
    size_t h = held(r);
    if (h > r->max_buffered) r->max_buffered = h;
    return n;
  }
  if (append(r, p, n, r->stream ? 0 : r->max_bytes) != MB_OK) {
    mb_error_set(&r->err, MB_E_NOMEM, "out of memory buffering the response");
    return 0;
  }
  r->received += n;
  if (r->stream) notify(r);
  return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  mb_http_req *r = ud;
  size_t n = size * nmemb;
  if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) { r->hlen = 0; r->headers_done = 0; }
  if (n <= 2 && (n == 0 || p[0] == '\r' || p[0] == '\n')) { /* end of one header block */
    long st = 0;
    curl_easy_getinfo(r->x.easy, CURLINFO_RESPONSE_CODE, &st);
    if (st >= 200) {
      r->status = st;
      r->headers_done = 1;
      close_hdr_timer(r);
      if (r->stream) notify(r);
    }
    return n;
  }
  if (r->hlen + n > MB_HTTP_MAX_HEADER_BYTES) {
    mb_error_set(&r->err, MB_E_PROTOCOL, "response headers exceed %d bytes", MB_HTTP_MAX_HEADER_BYTES);
    return 0;
  }
  if (r->hlen + n > r->hcap) {
    size_t want = r->hcap ? r->hcap * 2 : 1024;
    while (want < r->hlen + n) want *= 2;
    if (want > MB_HTTP_MAX_HEADER_BYTES) want = MB_HTTP_MAX_HEADER_BYTES;
    char *nb = realloc(r->hbuf, want);
    if (!nb) { mb_error_set(&r->err, MB_E_NOMEM, "out of memory reading headers"); return 0; }
    r->hbuf = nb;
    r->hcap = want;
  }
  memcpy(r->hbuf + r->hlen, p, n);
  r->hlen += n;
  return n;
}

static size_t on_read(char *buf, size_t size, size_t nmemb, void *ud) {
  mb_http_req *r = ud;
  if (r->source.read) {
    ssize_t n = r->source.read(r->source.ud, buf, size * nmemb);
    if (n >= 0) return (size_t)n;
    mb_error_set(&r->err, MB_E_IO, "the request body's source failed");
    return CURL_READFUNC_ABORT;
  }
  if (r->parts) {
    size_t cap = size * nmemb, out = 0;
    while (out < cap && r->part < r->nparts) {
      const struct mb_http_part *pt = &r->parts[r->part];
      size_t k = pt->len - r->part_off;
      if (k > cap - out) k = cap - out;
      memcpy(buf + out, (const char *)pt->p + r->part_off, k);
      out += k;
      r->part_off += k;
      if (r->part_off == pt->len) { r->part++; r->part_off = 0; }
    }
    return out;
  }
  for (;;) {
    ssize_t got = read(r->upload_fd, buf, size * nmemb);
    if (got >= 0) return (size_t)got;
    if (errno == EINTR) continue;
    mb_error_set(&r->err, MB_E_IO, "reading the upload body: %s", strerror(errno));
    return CURL_READFUNC_ABORT;
  }
}

/* The host (and port) of the transfer's URL into host[cap], for messages ("?" when unknown). */
static const char *host_of(CURL *e, char *host, size_t cap) {
  char *url = NULL;
  snprintf(host, cap, "?");
  if (curl_easy_getinfo(e, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url) {
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/?#");
    if (n > 0) snprintf(host, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
  }
  return host;
}

static void finish(mb_http_req *r, int code, const char *msg) {
  r->done = 1;
  close_hdr_timer(r);
  if (r->err.code == MB_OK && code != MB_OK) mb_error_set(&r->err, code, "%s", msg);
  notify(r);
}

static void on_done(mb_xfer *x, CURLcode rc) {
  mb_http_req *r = (mb_http_req *)x;
  if (rc == CURLE_OK) {
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &r->status);
    r->headers_done = 1;
    finish(r, MB_OK, "");
    return;
  }
  /* Our own callbacks set err before returning an error to libcurl; keep theirs. */
  const char *msg = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
  int code = mb_http_map_curl(rc);
  if (code == MB_E_TLS) { /* which peer was not trusted: libcurl's text does not say */
    char host[256], text[CURL_ERROR_SIZE + 300];
    snprintf(text, sizeof text, "TLS with %s: %s", host_of(x->easy, host, sizeof host), msg);
    finish(r, code, text);
    return;
  }
  finish(r, code, msg);
}

static void on_hdr_timeout(uv_timer_t *t) {
  mb_http_req *r = t->data;
  if (r->headers_done || r->done) return;
  mb_loop_remove(r->loop, &r->x);
  finish(r, MB_E_TIMEOUT, "no response headers within the timeout");
}

static int add_header(mb_http_req *r, const char *line, struct mb_error *err) {
  struct curl_slist *n = curl_slist_append(r->hdrs, line);
  if (!n) return mb_error_set(err, MB_E_NOMEM, "out of memory adding a header");
  r->hdrs = n;
  return MB_OK;
}

int mb_http_start(mb_loop *l, const mb_http_opts *o, mb_http_cb cb, void *ud,
                  mb_http_req **out, struct mb_error *err) {
  *out = NULL;
  if (!o->url || !*o->url) return mb_error_set(err, MB_E_INVALID, "url is required");
  if (!o->stream && o->max_bytes == 0) return mb_error_set(err, MB_E_INVALID, "max_bytes is required");
  if ((o->body != NULL) + (o->body_fd >= 0) + (o->body_parts != NULL) + (o->body_source != NULL) > 1)
    return mb_error_set(err, MB_E_INVALID, "body, body_parts, body_fd and body_source are exclusive");
  if (o->body_source && !o->body_source->read) return mb_error_set(err, MB_E_INVALID, "a body source needs read()");
  if (o->sink && (!o->stream || !o->sink->data || !o->sink->backlog))
    return mb_error_set(err, MB_E_INVALID, "a body sink needs a stream and both functions");
  mb_http_req *r = calloc(1, sizeof *r);
  if (!r) return mb_error_set(err, MB_E_NOMEM, "out of memory");
  r->loop = l;
  r->cb = cb;
  r->ud = ud;
  r->pend.fire = fire;
  r->stream = o->stream;
  r->max_bytes = o->max_bytes;
  r->high_water = o->high_water ? o->high_water : MB_HTTP_DEFAULT_HIGH_WATER;
  r->upload_fd = -1;
  r->x.done = on_done;
  if (o->sink) r->sink = *o->sink;
  int rc = MB_OK;
  CURL *e = r->x.easy = mb_loop_get_easy(l);
  if (!e) { rc = mb_error_set(err, MB_E_NOMEM, "out of memory"); goto fail; }
  curl_easy_setopt(e, CURLOPT_URL, o->url);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  if (o->max_bytes) curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)o->max_bytes);
  if (o->timeout_ms > 0 && !o->stream) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, o->timeout_ms);
  if (o->connect_timeout_ms > 0) curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms);
  if (o->idle_timeout_ms > 0) { /* under 1 byte/s for that long: the peer is gone */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (o->idle_timeout_ms + 999) / 1000);
  }
  if (o->ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_file);
  if (o->n_connect_to > MB_HTTP_MAX_CONNECT_TO) {
    rc = mb_error_set(err, MB_E_INVALID, "connect_to: at most %d entries", MB_HTTP_MAX_CONNECT_TO);
    goto fail;
  }
  for (size_t i = 0; i < o->n_connect_to; i++) {
    struct curl_slist *n = curl_slist_append(r->connect_to, o->connect_to[i]);
    if (!n) { rc = mb_error_set(err, MB_E_NOMEM, "out of memory"); goto fail; }
    r->connect_to = n;
  }
  if (r->connect_to) curl_easy_setopt(e, CURLOPT_CONNECT_TO, r->connect_to);

  const char *method = o->method;
  int has_body = o->body != NULL || o->body_fd >= 0 || o->body_parts != NULL || o->body_source != NULL;
  if (!method) method = has_body ? "POST" : "GET";
  if (o->body) {
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
    if (curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, o->body) != CURLE_OK) {
      rc = mb_error_set(err, MB_E_NOMEM, "out of memory copying the body");
      goto fail;
    }
  } else if (o->body_parts) {
    curl_off_t size = 0;
    for (size_t i = 0; i < o->n_body_parts; i++) size += (curl_off_t)o->body_parts[i].len;
    r->parts = o->body_parts;
    r->nparts = o->n_body_parts;
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, r);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, size);
  } else if (o->body_source) {
    r->source = *o->body_source;
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, r);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)-1);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024); /* fewer, larger chunks */
    if ((rc = add_header(r, "Transfer-Encoding: chunked", err)) != MB_OK) goto fail;
  } else if (o->body_fd >= 0) {
    r->upload_fd = o->body_fd;
    r->own_fd = o->own_body_fd;
    struct stat st;
    if (fstat(o->body_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      rc = mb_error_set(err, MB_E_INVALID, "body_fd must be a regular file");
      goto fail;
    }
    off_t pos = lseek(o->body_fd, 0, SEEK_CUR);
    curl_off_t size = st.st_size - (pos > 0 ? pos : 0);
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(e, CURLOPT_READDATA, r);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, size);
  }
  if (strcmp(method, "GET") == 0 && !has_body) curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  else if (strcmp(method, "HEAD") == 0) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  else curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);

  for (size_t i = 0; i < o->n_headers; i++)
    if ((rc = add_header(r, o->headers[i], err)) != MB_OK) goto fail;
  /* No "Expect: 100-continue" round trip before uploads. */
  if (has_body && (rc = add_header(r, "Expect:", err)) != MB_OK) goto fail;
  if (r->hdrs) curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);

  if (o->stream && o->timeout_ms > 0) {
    r->hdr_timer = malloc(sizeof *r->hdr_timer);
    if (!r->hdr_timer) { rc = mb_error_set(err, MB_E_NOMEM, "out of memory"); goto fail; }
    uv_timer_init(mb_loop_uv(l), r->hdr_timer);
    r->hdr_timer->data = r;
    uv_timer_start(r->hdr_timer, on_hdr_timeout, (uint64_t)o->timeout_ms, 0);
  }
  if ((rc = mb_loop_add(l, &r->x)) != MB_OK) {
    mb_error_set(err, rc, "could not start the transfer");
    goto fail;
  }
  *out = r;
  return MB_OK;
fail:
  r->own_fd = 0; /* the caller keeps its fd when starting failed */
  mb_http_free(r);
  return rc;
}

void mb_http_cancel(mb_http_req *r) {
  if (r->done) return;
  mb_loop_remove(r->loop, &r->x);
  finish(r, MB_E_CANCELED, "canceled by the caller");
}

void mb_http_free(mb_http_req *r) {
  if (!r) return;
  mb_loop_remove(r->loop, &r->x);
  mb_loop_undefer(r->loop, &r->pend);
  close_hdr_timer(r);
  if (r->x.easy) mb_loop_put_easy(r->loop, r->x.easy);
  curl_slist_free_all(r->hdrs);
  curl_slist_free_all(r->connect_to);
  if (r->own_fd && r->upload_fd >= 0) close(r->upload_fd);
  free(r->hbuf);
  free(r->body);
  free(r);
}

int mb_http_headers_done(const mb_http_req *r) { return r->headers_done; }
long mb_http_status(const mb_http_req *r) { return r->status; }

int mb_http_done(const mb_http_req *r, const struct mb_error **err) {
  if (err) *err = &r->err;
  return r->done;
}

int mb_http_header_next(const mb_http_req *r, size_t *pos, const char **name, size_t *nlen,
                        const char **value, size_t *vlen) {
  while (*pos < r->hlen) {
    const char *line = r->hbuf + *pos;
    const char *end = memchr(line, '\n', r->hlen - *pos);
    size_t len = end ? (size_t)(end - line) : r->hlen - *pos;
    *pos += end ? len + 1 : len;
    if (len && line[len - 1] == '\r') len--;
    const char *colon = memchr(line, ':', len);
    if (!colon || (len >= 5 && memcmp(line, "HTTP/", 5) == 0)) continue; /* status line */
    *name = line;
    *nlen = (size_t)(colon - line);
    const char *v = colon + 1, *ve = line + len;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    *value = v;
    *vlen = (size_t)(ve - v);
    return 1;
  }
  return 0;
}

const char *mb_http_peek(const mb_http_req *r, size_t *len) {
  *len = unread(r);
  return r->body ? r->body + r->boff : "";
}

void mb_http_consume(mb_http_req *r, size_t n) {
  if (n > unread(r)) n = unread(r);
  r->boff += n;
  if (r->boff == r->blen) r->boff = r->blen = 0;
  mb_http_resume(r);
}

void mb_http_resume(mb_http_req *r) {
  if (r->paused && !r->done && held(r) <= r->high_water / 2) {
    r->paused = 0;
    /* May deliver the held chunk right here through on_write. */
    CURLcode rc = curl_easy_pause(r->x.easy, CURLPAUSE_CONT);
    if (rc != CURLE_OK && !r->done) {
      mb_loop_remove(r->loop, &r->x);
      finish(r, mb_http_map_curl(rc), curl_easy_strerror(rc));
    }
  }
}

void mb_http_get_info(const mb_http_req *r, mb_http_info *info) {
  info->received = r->received;
  info->pauses = r->pauses;
  info->max_buffered = r->max_buffered;
  info->paused = r->paused;
}
