/* connect_request.h — the one parser of Connect RPC request messages, in both of envd's codecs.
 * The Content-Type names the codec and the kind: application/json or application/proto for a
 * unary call (the body is the message), application/connect+json or application/connect+proto
 * for a server stream (the body is exactly one uncompressed data envelope around the message).
 * The message becomes a protobuf-c struct of the method's request type, allocated in the caller's
 * arena: JSON through core/rpc_json.c (one object, no duplicate keys, unknown fields ignored and
 * unknown enum names left unset, as connect-go does), binary through protobuf-c's unpack. Strict,
 * bounded (CREQ_MAX bytes, the arena), pure (no I/O). */
#ifndef SANDBOXD_CONNECT_REQUEST_H
#define SANDBOXD_CONNECT_REQUEST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <protobuf-c/protobuf-c.h>

#include "rpc_json.h"

#define CREQ_MAX (8u << 20)   /* what sandboxd buffers of a request body anyway */
/* The arena a request of len body bytes may need: decoded strings and the structs around them
 * (an arena exhausted by a pathological message fails the parse, naming the limit). */
#define CREQ_ARENA(len) MB_RPC_ARENA_FOR(len)

typedef struct {
  bool streaming;   /* application/connect+... */
  bool proto;       /* ...+proto / application/proto: the binary codec */
} creq_type;

/* Content-Type (any parameters after ';') → 0 and *t, or -1 when it is none of Connect's four
 * (a server answers 415 Unsupported Media Type). Case-insensitive. */
int creq_content_type(const char *content_type, creq_type *t);
/* The message (in ar), or NULL with a sentence in err saying what is wrong. An empty unary body
 * is the empty message. */
ProtobufCMessage *creq_parse(const uint8_t *body, size_t len, creq_type t, const ProtobufCMessageDescriptor *d,
                             struct mb_arena *ar, char *err, size_t errlen);
#endif
