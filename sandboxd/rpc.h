/* rpc.h — Connect RPC (envd's process and filesystem services) over sandboxd's HTTP layer:
 * the request message (parsed by connect_request.c, the one parser), errors in Connect's shape
 * (unary: an HTTP status and {"code","message"}; streaming: 200 and an end-stream envelope),
 * server-streaming replies one envelope per message. */
#ifndef SANDBOXD_RPC_H
#define SANDBOXD_RPC_H
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "http.h"

bool rpc_is_streaming(const sd_request *r);      /* Content-Type application/connect+json */
/* The request message (new reference), or NULL after replying invalid_argument. */
json_t *rpc_request(sd_request *r);
int  rpc_reply_error(sd_request *r, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
sd_stream *rpc_stream_open(sd_request *r);       /* 200 application/connect+json */
int  rpc_send(sd_stream *s, json_t *msg);        /* one data envelope; takes ownership; 0 or -1 (client gone) */
void rpc_end(sd_stream *s, const char *code, const char *message);   /* end-stream {} or {"error":...}; ends s */
/* A millisecond header (Connect-Timeout-Ms) or seconds (Keepalive-Ping-Interval): absent or
 * malformed → dflt; capped at max. */
int64_t rpc_header_int(sd_request *r, const char *name, int64_t dflt, int64_t max);
#endif
