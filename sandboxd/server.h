/* server.h — the HTTP face of sandboxd (libmicrohttpd, one thread per connection).
 * Handlers run on the connection's thread and may block; a streamed response is a bounded byte
 * queue that the handler (or any other thread) fills and the connection thread drains. */
#ifndef SANDBOXD_SERVER_H
#define SANDBOXD_SERVER_H
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

typedef struct sd_request sd_request;   /* one HTTP request, alive until the handler returns */
typedef struct sd_stream sd_stream;     /* a streamed (chunked) 200 response */

const char *sd_method(const sd_request *r);
const char *sd_path(const sd_request *r);                         /* without the query */
const char *sd_header(const sd_request *r, const char *name);     /* case-insensitive, NULL if absent */
const char *sd_query(const sd_request *r, const char *name);      /* decoded once, NULL if absent */
const uint8_t *sd_body(const sd_request *r, size_t *len);         /* whole body (bounded by the server limit) */

/* Unary replies; every function takes ownership of `body`. */
int sd_reply_json(sd_request *r, int status, json_t *body);
int sd_reply_error(sd_request *r, int status, const char *fmt, ...);   /* {"code":status,"message":...} */
int sd_reply_connect_error(sd_request *r, const char *code, const char *fmt, ...); /* Connect unary error */
int sd_reply_bytes(sd_request *r, int status, const char *content_type, const void *data, size_t len);

/* Streamed reply: 200 + content_type, chunked. sd_stream_send blocks while more than the queue
 * limit is pending (backpressure) and returns -1 once the client is gone. sd_stream_end flushes
 * and finishes the response; after it the stream pointer is invalid. */
sd_stream *sd_stream_open(sd_request *r, const char *content_type);
int  sd_stream_send(sd_stream *s, const void *data, size_t len);
int  sd_stream_closed(const sd_stream *s);
void sd_stream_end(sd_stream *s);

/* Connect helpers over a stream: one envelope per call. */
int sd_stream_send_message(sd_stream *s, json_t *msg);                 /* flags 0x00, takes ownership */
void sd_stream_end_connect(sd_stream *s, const char *code, const char *message); /* 0x02 {} or {"error":..}; ends */
#endif
