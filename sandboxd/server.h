/* server.h — the HTTP face of sandboxd (libmicrohttpd, one thread per connection).
 * Handlers run on a worker thread per request and may block; a streamed response is a bounded byte
 * queue that the handler (or any other thread) fills and the connection thread drains. */
#ifndef SANDBOXD_SERVER_H
#define SANDBOXD_SERVER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

typedef struct sd_request sd_request;   /* one HTTP request, alive until the handler returns */
typedef struct sd_stream sd_stream;     /* a streamed (chunked) 200 response */

const char *sd_method(const sd_request *r);
const char *sd_path(const sd_request *r);                         /* without the query */
const char *sd_header(const sd_request *r, const char *name);     /* case-insensitive, NULL if absent */
const char *sd_query(const sd_request *r, const char *name);      /* decoded once, NULL if absent */
const uint8_t *sd_body(const sd_request *r, size_t *len);         /* whole body (bounded by the server limit);
                                                                    empty for POST /files: use sd_body_read */
/* POST /files bodies are not buffered: the handler starts once the headers are authenticated and
 * reads the body as it arrives (at most 1 MiB is pending). Returns bytes (> 0), 0 at the end of
 * the body, or -1 when the client went away or the body passed sd_upload_limit() (the server
 * answers 413 itself then). Other requests: their buffered body, once. */
ssize_t sd_body_read(sd_request *r, void *buf, size_t max);
size_t sd_upload_limit(void);   /* per-request upload cap: 512 MiB, or SANDBOXD_MAX_UPLOAD (bytes) */

/* Unary replies; every function takes ownership of `body`. */
int sd_reply_json(sd_request *r, int status, json_t *body);
int sd_reply_error(sd_request *r, int status, const char *fmt, ...);   /* {"code":status,"message":...} */
int sd_reply_connect_error(sd_request *r, const char *code, const char *fmt, ...); /* Connect error: unary non-200
                                                              JSON; on a streaming request 200 + end-stream error */
int sd_reply_bytes(sd_request *r, int status, const char *content_type, const void *data, size_t len);

/* Streamed reply: 200 + content_type, chunked. sd_stream_send blocks while more than the queue
 * limit is pending (backpressure) and returns -1 once the client is gone, the stream was aborted,
 * or the client read nothing for SD_WRITE_TIMEOUT_S (then its connection is shut down). sd_stream_end flushes
 * and finishes the response; after it the stream pointer is invalid. */
sd_stream *sd_stream_open(sd_request *r, const char *content_type);
int  sd_stream_send(sd_stream *s, const void *data, size_t len);
int  sd_stream_closed(const sd_stream *s);
void sd_stream_end(sd_stream *s);
/* Streams opened by requests tagged with `group` (sd_set_group, e.g. the sandbox's registry entry)
 * stop waiting for slow clients: one whose queue is full (the client stopped reading) ends at once
 * (senders get -1, the connection is shut down), the others when they fill up. For kill/expiry. */
void sd_set_group(sd_request *r, const void *group);
void sd_streams_abort(const void *group);
/* After sd_streams_abort the group's streams deliver nothing more until this (the sandbox is gone):
 * clients see the end of their streams only when the sandbox is no longer reported. */
void sd_streams_release(const void *group);

/* Added for the router and the envd handlers. */
bool sd_const_eq(const char *a, const char *b);     /* secret comparison in time independent of where they differ */
const char *sd_user(const sd_request *r);           /* envd: authenticated user ("user" by default), else NULL */
void sd_reply_header(sd_request *r, const char *name, const char *value); /* extra header on the reply or stream */
int  sd_header_each(const sd_request *r, int (*cb)(void *cls, const char *name, const char *value), void *cls);
int  sd_query_each(const sd_request *r, int (*cb)(void *cls, const char *name, const char *value), void *cls);
int  sd_is_streaming(const sd_request *r);          /* Content-Type application/connect+json */
/* The Connect request message: the JSON body (unary) or the single envelope (streaming). NULL with
 * err set when malformed; then reply with invalid_argument. New reference. */
json_t *sd_connect_request(sd_request *r, char *err, size_t errlen);
/* multipart/form-data over `body` (the request's Content-Type gives the boundary). `cb` sees every
 * part's bytes in order; off == 0 starts a part. Returns 0, or -1 (malformed) / the cb's non-zero. */
typedef int (*sd_part_cb)(void *cls, const char *name, const char *filename,
                          const char *data, uint64_t off, size_t size);
int sd_multipart(sd_request *r, const uint8_t *body, size_t len, sd_part_cb cb, void *cls);
/* The same, incrementally: begin (NULL if it cannot start, or the client is gone), feed pieces
 * (0, -1 malformed, or the cb's non-zero; stays failed), end (the final result; frees). */
typedef struct sd_mp sd_mp;
sd_mp *sd_multipart_begin(sd_request *r, sd_part_cb cb, void *cls);
int sd_multipart_feed(sd_mp *mp, const void *data, size_t len);
int sd_multipart_end(sd_mp *mp);

/* Connect helpers over a stream: one envelope per call. */
int sd_stream_send_message(sd_stream *s, json_t *msg);                 /* flags 0x00, takes ownership */
void sd_stream_end_connect(sd_stream *s, const char *code, const char *message); /* 0x02 {} or {"error":..}; ends */

/* The server: binds host:port, serves until sd_server_stop. */
int  sd_server_start(const char *host, int port, const char *api_key, char *err, size_t errlen);
int  sd_server_port(void);                           /* the bound port (useful with port 0) */
void sd_server_stop(void);
#endif
