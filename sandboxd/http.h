/* http.h — sandboxd's HTTP layer over libmicrohttpd (one thread per connection), on up to
 * SD_MAX_LISTEN listeners, each plain HTTP or TLS (libmicrohttpd's GnuTLS support). A leaf: it
 * knows no route, credential or sandbox. main.c's hooks decide, from a request's headers, whether
 * and how it is served (admit), then serve it (handle, on a worker thread of its own) and let go
 * of what admit took (release).
 *
 * Handlers may block; a streamed response is a bounded byte queue that the handler (or any other
 * thread) fills and the connection thread drains. The request is reference-counted (MHD + worker)
 * because a client may disconnect while the handler still runs. */
#ifndef SANDBOXD_HTTP_H
#define SANDBOXD_HTTP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

typedef struct sd_request sd_request;   /* one HTTP request, alive until the handler returns */
typedef struct sd_stream sd_stream;     /* a streamed (chunked) 200 response */

const char *sd_method(const sd_request *r);
const char *sd_path(const sd_request *r);                         /* without the query, decoded */
const char *sd_target(const sd_request *r);                       /* the request target exactly as sent:
                                                                    path and query, nothing decoded */
bool sd_tls(const sd_request *r);                                 /* it came in on a TLS listener */
/* The client hung up (its socket says so; nothing is read). For handlers that wait long before
 * they reply, e.g. on an upstream server. */
bool sd_client_gone(sd_request *r);
const char *sd_header(const sd_request *r, const char *name);     /* case-insensitive, NULL if absent */
const char *sd_query(const sd_request *r, const char *name);      /* decoded once, NULL if absent */
int  sd_header_each(const sd_request *r, int (*cb)(void *cls, const char *name, const char *value), void *cls);
int  sd_query_each(const sd_request *r, int (*cb)(void *cls, const char *name, const char *value), void *cls);
void *sd_context(const sd_request *r);                            /* what admit put in sd_admission.ctx */
const uint8_t *sd_body(const sd_request *r, size_t *len);         /* whole body (bounded by the server limit);
                                                                    empty for a streamed upload: use sd_body_read */
/* Streamed uploads (admit set stream_body) are not buffered: the handler starts once the
 * headers are admitted and reads the body as it arrives (at most 1 MiB is pending). Returns
 * bytes (> 0), 0 at the end of the body, or -1 when the client went away or the body passed
 * sd_upload_limit() (the server answers 413 itself then). Other requests: their buffered body, once. */
ssize_t sd_body_read(sd_request *r, void *buf, size_t max);
size_t sd_upload_limit(void);   /* per-request upload cap: 512 MiB, or SANDBOXD_MAX_UPLOAD (bytes) */

/* Unary replies; every function takes ownership of `body`. */
int sd_reply_json(sd_request *r, int status, json_t *body);
int sd_reply_error(sd_request *r, int status, const char *fmt, ...)   /* {"code":status,"message":...} */
    __attribute__((format(printf, 3, 4)));
int sd_reply_bytes(sd_request *r, int status, const char *content_type, const void *data, size_t len);
/* An extra header on the reply, stream or 101; -1 (dropped) beyond SD_MAX_EXTRA headers or
 * SD_MAX_EXTRA_BYTES of them (each counted as name + value + 4). */
#define SD_MAX_EXTRA 64
#define SD_MAX_EXTRA_BYTES (16u << 10)
int  sd_reply_header(sd_request *r, const char *name, const char *value);

/* Streamed reply: 200 + content_type, chunked. sd_stream_send blocks while more than the queue
 * limit is pending (backpressure) and returns -1 once the client is gone, the stream was aborted,
 * or the client read nothing for 60 s (then its connection is shut down). sd_stream_end flushes
 * and finishes the response; after it the stream pointer is invalid. */
sd_stream *sd_stream_open(sd_request *r, const char *content_type);
/* The same with any status: content_type NULL sends none; length >= 0 is the body's size (sent as
 * Content-Length: the stream must carry exactly that many bytes, fewer ends the connection),
 * -1 unknown (chunked). Headers from sd_reply_header go with it. */
sd_stream *sd_stream_open_status(sd_request *r, int status, const char *content_type, int64_t length);
int  sd_stream_send(sd_stream *s, const void *data, size_t len);
/* Writing in place: room for n bytes at the end of the queue (waiting as sd_stream_send does),
 * filled by the caller without any lock, then committed (k <= n bytes become pending). NULL
 * (nothing reserved) once the client is gone; commit returns -1 then. One reservation at a time,
 * and no sd_stream_send while it is open. */
void *sd_stream_reserve(sd_stream *s, size_t n);
int  sd_stream_commit(sd_stream *s, size_t k);
int  sd_stream_closed(const sd_stream *s);
void sd_stream_end(sd_stream *s);
/* A streamed reply (200 + content_type) of fd's bytes from its offset to its end, read straight
 * into the stream's queue; ends the stream (as broken on a read error). fd stays the caller's. */
void sd_stream_fd(sd_request *r, const char *content_type, int fd);
/* Ends the stream as broken: what is queued goes out, then the connection is cut without the end
 * of the body (a client sees a truncated response, never a complete one). s is invalid after. */
void sd_stream_fail(sd_stream *s);
/* Streams of requests admitted with `group` (e.g. a sandbox's registry entry) stop waiting for
 * slow clients: one whose queue is full (the client stopped reading) ends at once (senders get
 * -1, the connection is shut down), the others when they fill up. For kill/expiry. The group's
 * tunnels (sd_upgrade) are shut down at once, both directions. */
void sd_streams_abort(const void *group);
/* After sd_streams_abort the group's streams deliver nothing more until this (the sandbox is gone):
 * clients see the end of their streams only when the sandbox is no longer reported. */
void sd_streams_release(const void *group);

/* Protocol upgrade (WebSocket and the like): answers 101 Switching Protocols with the headers
 * given by sd_reply_header (they must name the protocol: Upgrade, and Connection: upgrade), then
 * hands the connection's byte stream over. Blocks until then; NULL when the client went away
 * first or libmicrohttpd refused the answer (the connection is closed then). */
typedef struct sd_tunnel sd_tunnel;
sd_tunnel *sd_upgrade(sd_request *r);
int sd_tunnel_fd(const sd_tunnel *t);   /* non-blocking socket: recv, send, shutdown; never close it */
/* Bytes the client sent after its request, before the 101 went out: they come first. */
const uint8_t *sd_tunnel_early(const sd_tunnel *t, size_t *len);
/* Does shutdown(fd, SHUT_WR) reach the client as the end of what it reads? Plain HTTP: yes. TLS:
 * no (libmicrohttpd 0.9.75 forwards TLS tunnels without half-closes either way; the client's end
 * is seen only through sd_tunnel_client_closed). */
bool sd_tunnel_half_close(const sd_tunnel *t);
bool sd_tunnel_client_closed(const sd_tunnel *t);   /* the client's socket saw its end (FIN or error) */
void sd_tunnel_close(sd_tunnel *t);     /* libmicrohttpd closes the connection; t is gone */

/* multipart/form-data, incrementally (libmicrohttpd's post processor; the request's Content-Type
 * gives the boundary): `cb` sees every part's bytes in order; off == 0 starts a part. begin (NULL
 * if it cannot start, or the client is gone), feed pieces (0, -1 malformed, or the cb's non-zero;
 * stays failed), end (the final result; frees). */
typedef int (*sd_part_cb)(void *cls, const char *name, const char *filename,
                          const char *data, uint64_t off, size_t size);
typedef struct sd_mp sd_mp;
sd_mp *sd_multipart_begin(sd_request *r, sd_part_cb cb, void *cls);
int sd_multipart_feed(sd_mp *mp, const void *data, size_t len);
int sd_multipart_end(sd_mp *mp);

/* The hooks. admit runs on the connection thread as soon as the headers are in: 0 admits the
 * request (a filled in), anything else is the HTTP status of the answer sent at once, with *body
 * (a malloc'ed JSON text) — the body is never read then. */
typedef struct {
  void *ctx;                 /* for handle and release */
  const void *group;         /* see sd_streams_abort */
  bool stream_body;          /* an upload: handled while its body arrives, up to sd_upload_limit() */
  bool unary;                /* the handler only ever replies with sd_reply_*: it runs on the
                                connection's own thread (which waits for the reply anyway) instead
                                of a thread of its own */
} sd_admission;
typedef struct {
  int  (*admit)(sd_request *r, sd_admission *a, char **body);
  void (*handle)(sd_request *r, void *ctx);
  void (*release)(void *ctx);
} sd_hooks;

/* The server: binds each listener, serves until sd_server_stop. */
#define SD_MAX_LISTEN 2
#define SD_MAX_PEM (1u << 20)        /* a certificate chain or key, PEM */
typedef struct {
  const char *host;                  /* IPv4 address */
  int port;                          /* 0: a free one (sd_server_port tells) */
  const char *tls_cert, *tls_key;    /* PEM text (chain first: the server's certificate); both
                                        NULL: plain HTTP */
} sd_listen;
int  sd_server_start(const sd_listen *ls, size_t n, const sd_hooks *hooks, char *err, size_t errlen);
int  sd_server_port(size_t i);                       /* listener i's bound port */
/* What listener i served: connections accepted (on TLS each is one full handshake: sandboxd keeps
 * no session cache), requests begun. */
typedef struct { uint64_t connections, requests; } sd_listen_stats;
void sd_server_stats(size_t i, sd_listen_stats *st);
/* Shuts every tunnel down and waits (at most 10 s) until their handlers let go, then stops. */
void sd_server_stop(void);

/* Inbound connections: sockets accepted elsewhere (the egress proxy's intercepted connections,
 * egress.h) served by two more daemons without a listening socket, plain HTTP and TLS, with hooks
 * of their own. A connection carries its caller's context (handed over; freed by hooks.free once
 * the connection and every request of it are gone); the TLS daemon asks hooks.cert for each
 * handshake's certificate chain and key (new objects, freed by GnuTLS: GNUTLS_CERT_RETR_DEINIT_ALL). */
#include <sys/socket.h>
#include <gnutls/abstract.h>
typedef struct {
  sd_hooks http;
  int  (*cert)(void *ctx, gnutls_pcert_st **certs, unsigned *n, gnutls_privkey_t *key);
  void (*free)(void *ctx);
} sd_inbound_hooks;
int  sd_inbound_start(const sd_inbound_hooks *hooks, char *err, size_t errlen);
/* Serves fd (non-blocking, connected; taken: closed on failure, ctx freed) from peer. 0 or -1. */
int  sd_inbound_add(bool tls, int fd, const struct sockaddr *peer, socklen_t peerlen, void *ctx);
void *sd_inbound_context(const sd_request *r);   /* the connection's context (NULL: a listener's request) */
void sd_inbound_stop(void);
#endif
