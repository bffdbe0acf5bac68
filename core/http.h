/* http.h — HTTP/1.1 transport on the loop (libcurl multi; TLS through libcurl).
 *
 * One request = one mb_http_req. Unary requests collect the body up to max_bytes (exceeding it
 * aborts the transfer at once with MB_E_TOO_LARGE; nothing over the limit is buffered).
 * Streaming requests hand out the body as it comes; when more than high_water bytes are unread
 * the transfer is paused (curl_easy_pause) until the consumer drains below half of it.
 * Every state change (headers complete, data, done) is reported through cb, always outside
 * libcurl callbacks, so cb may call any mb_http_* function, including mb_http_free. */
#ifndef MB_HTTP_H
#define MB_HTTP_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "errors.h"
#include "loop.h"

#define MB_HTTP_MAX_HEADER_BYTES (64 * 1024) /* response header block; more → MB_E_PROTOCOL */

typedef struct mb_http_req mb_http_req;
typedef void (*mb_http_cb)(mb_http_req *r, void *ud);

/* A body consumer for streams: the bytes go to it as they arrive instead of into the request's
 * own buffer (mb_http_peek then has nothing). data() runs inside libcurl's write callback: it
 * may decode and queue notifications (mb_loop_defer) but must not call back into the transport
 * or Lua. It takes all n bytes (MB_OK) or fails the transfer with its error. backlog() is what
 * the consumer holds undelivered downstream: at or above high_water the transfer pauses, and
 * mb_http_resume() continues it once the backlog is at or below half of it. */
struct mb_http_sink {
  int (*data)(void *ud, mb_http_req *r, const char *p, size_t n, struct mb_error *err);
  size_t (*backlog)(void *ud);
  void *ud;
};

/* A request body from pieces of memory that stay valid until the request is freed (not copied). */
struct mb_http_part {
  const void *p;
  size_t len;
};

/* A request body produced on demand (size unknown: sent chunked). read() runs inside libcurl's
 * read callback: it fills up to cap bytes and returns how many (0 = the end of the body), or -1
 * to fail the transfer (MB_E_IO; the source's owner knows why). It must not call back into the
 * transport or Lua. */
struct mb_http_source {
  ssize_t (*read)(void *ud, char *buf, size_t cap);
  void *ud;
};

typedef struct {
  const char *method;          /* NULL → GET, or POST when a body is given */
  const char *url;
  const char *const *headers;  /* "Name: value" lines */
  size_t n_headers;
  const void *body;            /* request body from memory (copied) */
  size_t body_len;
  const struct mb_http_part *body_parts; /* or from these pieces, in order (not copied) */
  size_t n_body_parts;
  int body_fd;                 /* or streamed from this fd (regular file; read at its offset), -1 none */
  int own_body_fd;             /* close body_fd when the request is freed */
  const struct mb_http_source *body_source; /* or produced by this source (copied), sent chunked */
  int stream;                  /* 1: streaming response */
  size_t max_bytes;            /* unary: body cap (required, > 0); stream: total cap, 0 = none */
  size_t high_water;           /* stream: unread bytes that pause the transfer (0 → 256 KiB) */
  long timeout_ms;             /* unary: whole request; stream: until headers; 0 = none */
  long connect_timeout_ms;     /* 0 → libcurl's default */
  long idle_timeout_ms;        /* a transfer that receives nothing for this long fails with
                                  MB_E_TIMEOUT (libcurl's low-speed check: whole seconds,
                                  noticed up to ~5 s late; 0 = none); time paused by
                                  backpressure does not count */
  const char *ca_file;         /* optional CA bundle for TLS */
  const char *const *connect_to; /* "HOST:PORT:CONNECT-TO-HOST:CONNECT-TO-PORT" (libcurl's
                                  CONNECT_TO: an empty field matches any; the URL's host still
                                  names the TLS peer and the Host header) — split DNS, tests */
  size_t n_connect_to;         /* at most MB_HTTP_MAX_CONNECT_TO */
  const struct mb_http_sink *sink; /* stream: body consumer (copied; see mb_http_sink) */
} mb_http_opts;
#define MB_HTTP_MAX_CONNECT_TO 16

/* Starts a request. On failure returns an mb_err with err filled and *out = NULL. */
int mb_http_start(mb_loop *l, const mb_http_opts *o, mb_http_cb cb, void *ud,
                  mb_http_req **out, struct mb_error *err);
/* Cancels (if still running) and frees; no callback fires afterwards. */
void mb_http_free(mb_http_req *r);
/* Cancels: done becomes true with MB_E_CANCELED unless already done. Notifies cb. */
void mb_http_cancel(mb_http_req *r);

int mb_http_headers_done(const mb_http_req *r);
long mb_http_status(const mb_http_req *r);
/* Iterates header lines of the final response: *pos starts at 0; returns 0 at the end. */
int mb_http_header_next(const mb_http_req *r, size_t *pos, const char **name, size_t *nlen,
                        const char **value, size_t *vlen);
/* Finished? Then *err (may be NULL) tells how: code MB_OK for a complete response. */
int mb_http_done(const mb_http_req *r, const struct mb_error **err);

/* Response body bytes received and not consumed yet (unary: the whole body once done). */
const char *mb_http_peek(const mb_http_req *r, size_t *len);
/* Marks n bytes consumed; resumes a paused stream once below half the high-water mark. */
void mb_http_consume(mb_http_req *r, size_t n);
/* A sink's backlog went down: resumes a paused stream once it is at most half the high water. */
void mb_http_resume(mb_http_req *r);

typedef struct {
  uint64_t received;     /* body bytes accepted so far */
  uint64_t pauses;       /* how many times backpressure paused the transfer */
  size_t max_buffered;   /* peak of unread bytes held */
  int paused;            /* paused right now */
} mb_http_info;
void mb_http_get_info(const mb_http_req *r, mb_http_info *info);

/* CURLcode → mb_err (stable mapping). */
int mb_http_map_curl(CURLcode rc);
#endif
