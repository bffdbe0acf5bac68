/* rpc.h — Connect RPC (envd's process and filesystem services) over sandboxd's HTTP layer, in
 * both of Connect's codecs: JSON and binary protobuf, the reply in the request's. The request
 * message is parsed by connect_request.c (the one parser) into a protobuf-c struct; errors take
 * Connect's shape (unary: an HTTP status and the JSON body {"code","message"} whatever the codec,
 * as connect-go answers; streaming: 200 and a JSON end-stream envelope); a server stream is one
 * envelope per message. A Content-Type that is none of Connect's, or of the wrong kind for the
 * method (unary vs streaming), or of a codec this server does not take (rpc_set_codecs) ⇒ 415. */
#ifndef SANDBOXD_RPC_H
#define SANDBOXD_RPC_H
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "connect_request.h"
#include "http.h"

/* Which codecs the server takes (both by default; main.c's --envd-codecs). */
void rpc_set_codecs(bool json, bool proto);

/* The request's codec and kind from its Content-Type; a missing or unknown one reads as unary
 * JSON (for answering errors in some shape). */
creq_type rpc_type(const sd_request *r);
/* The request's Content-Type is Connect's, of this kind (streaming or unary) and a codec served:
 * true; otherwise false after answering 415 with Accept-Post naming what is taken. */
bool rpc_accept(sd_request *r, bool streaming);
/* The request message of type d, allocated in ar (initialised here with CREQ_ARENA of the body,
 * the caller frees it), or NULL after replying invalid_argument (ar then needs no freeing). */
ProtobufCMessage *rpc_request(sd_request *r, const ProtobufCMessageDescriptor *d, struct mb_arena *ar);
int  rpc_reply_error(sd_request *r, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A unary reply of type d, given in the JSON codec's shape (ownership taken): sent as it is, or
 * converted to protobuf for a binary request. */
int  rpc_reply(sd_request *r, const ProtobufCMessageDescriptor *d, json_t *msg);

/* A server stream of messages of type out, in the request's codec. */
typedef struct {
  sd_stream *s;
  bool proto;
  const ProtobufCMessageDescriptor *out;
} rpc_stream;
/* 200 application/connect+json or +proto; false when the request is gone. */
bool rpc_stream_open(sd_request *r, const ProtobufCMessageDescriptor *out, rpc_stream *rs);
int  rpc_send(rpc_stream *rs, json_t *msg);                /* one message in the JSON shape; takes ownership; 0 or -1 (client gone) */
int  rpc_send_msg(rpc_stream *rs, const ProtobufCMessage *m);   /* one protobuf-c message (of type out) */
/* One envelope written in place (no copy): room for payload_max bytes straight in the stream's
 * queue (waits while the client is slow: backpressure); commit says how many were written.
 * NULL or -1 when the client is gone. Nothing else may be sent in between. */
uint8_t *rpc_envelope_begin(rpc_stream *rs, size_t payload_max);
int  rpc_envelope_commit(rpc_stream *rs, size_t payload_len);
void rpc_end(rpc_stream *rs, const char *code, const char *message);   /* end-stream {} or {"error":...}; ends the stream */
/* A millisecond header (Connect-Timeout-Ms) or seconds (Keepalive-Ping-Interval): absent or
 * malformed → dflt; capped at max. */
int64_t rpc_header_int(sd_request *r, const char *name, int64_t dflt, int64_t max);
#endif
