/* forward.h — one HTTP request passed on to an upstream server, its answer streamed back: what the
 * port proxy (proxy.c: a port inside a sandbox) and the egress proxy's intercepted requests
 * (egress_http.c: a host on the internet, with its rules' headers) share.
 *
 * libmicrohttpd parsed the client's request; libcurl writes it upstream (method, target, headers
 * but the hop-by-hop ones, the body streamed as it arrives) and parses the answer; its head goes
 * out as the reply's status and headers, its body is streamed (bounded queues both ways: a slow
 * client slows the upstream, a slow upstream the client). A WebSocket (any Upgrade) is sent the
 * same way; when the upstream answers 101 the client gets the 101 with the upstream's headers
 * (http.h sd_upgrade) and from then on bytes are copied both ways as they are: the upstream's by
 * curl (which reads a 101's sequel as a body that lasts until the upstream closes), the client's
 * by a second thread writing to the socket curl connected. Half-closes pass through; the other
 * direction then has FWD_HALF_CLOSE_S to end before the tunnel is shut. */
#ifndef SANDBOXD_FORWARD_H
#define SANDBOXD_FORWARD_H
#include <stdbool.h>

#include "http.h"

#define FWD_HALF_CLOSE_S 30            /* one direction of a tunnel ended: the other has this long */
#define FWD_CONNECT_TIMEOUT_MS 10000
#define FWD_BUF (16u << 10)            /* bytes in flight per direction of a tunnel, in sandboxd */
#define FWD_RECV_BUF (128u << 10)      /* curl's receive buffer for a forwarded request: fewer, larger
                                        * writes to the client (its TLS records) on big downloads */

struct curl_slist;

/* Where the upstream connection of one client connection waits between its requests (kept-alive
 * clients then pay no new connect and TLS handshake per request): zeroed at first; a request
 * takes it and puts it back, so one that overlaps the next simply gets a connection of its own.
 * fwd_keep_drop when the client's connection is gone. */
typedef struct { void *_Atomic c; } fwd_keep;
void fwd_keep_drop(fwd_keep *k);

typedef struct {
  const char *const *urls;           /* scheme://host:port/ to try in order (the next one when nothing
                                      * answered a connect); the target goes separately */
  const char *target;                /* the request target upstream */
  bool upload;                       /* the request has a body (the router admitted it as one) */
  const char *host;                  /* the Host to send instead of the client's, or NULL */
  const char *const *set;            /* "Name: value" lines that replace the client's headers of
                                      * those names (NULL-terminated, or NULL) */
  struct curl_slist *resolve;        /* CURLOPT_RESOLVE: where curl connects for a name, or NULL */
  int (*open)(void *cls, int family, int socktype);   /* the socket curl connects; NULL: its own */
  bool (*gone)(void *cls);           /* asked about once a second: true ends the request */
  void *cls;
  const char *ca_file;               /* https: the CA bundle instead of the system's, or NULL */
  fwd_keep *keep;                    /* NULL: a connection for this request only */
} fwd_opts;

typedef struct {
  int code;                          /* curl's result (CURLcode) */
  bool replied;                      /* an answer began (the caller must not reply) */
  bool gone;                         /* ended because opts.gone said so */
  const char *why;                   /* what the upstream did wrong, when it was that */
} fwd_result;

int  forward_init(char *err, size_t errlen);   /* once, before any thread: libcurl's global state */
void forward(sd_request *r, const fwd_opts *o, fwd_result *res);
bool forward_connect_failed(const fwd_result *res);   /* nothing listened, or the connect timed out */
const char *forward_strerror(const fwd_result *res);
#endif
