/* rpc_json.h — envd's messages in both Connect codecs. The binary codec is protobuf-c's (the
 * generated descriptors of proto/envd/process.proto and filesystem.proto); this file maps those
 * messages to and from the JSON codec's objects (jansson), driven by the same descriptors:
 * lowerCamelCase names, int64 as
 * strings, bytes as base64, enums by name, maps as objects, Timestamp as RFC 3339. So a client or
 * a server handles one representation (a protobuf-c message) whatever the codec on the wire.
 * Every allocation comes from an arena whose size the caller chose. No I/O. */
#ifndef MB_RPC_JSON_H
#define MB_RPC_JSON_H
#include "errors.h"
#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* A bump allocator with a fixed budget: protobuf-c allocates through it (unpack, and the
 * messages built from JSON); free is a no-op, mb_arena_free releases everything at once. */
struct mb_arena {
  ProtobufCAllocator a;   /* first: protobuf-c gets &arena->a */
  unsigned char *buf;
  size_t used, cap;
  int exhausted;          /* an allocation was refused */
};
int mb_arena_init(struct mb_arena *ar, size_t cap); /* MB_OK | MB_E_NOMEM */
/* What a message of n encoded bytes (either codec) may need decoded: its strings and the structs
 * around them, each 16-byte aligned (a message of many tiny fields is the worst case). */
#define MB_RPC_ARENA_FOR(n) ((size_t)(n) * 8 + 65536)
void mb_arena_free(struct mb_arena *ar);
void *mb_arena_alloc(struct mb_arena *ar, size_t n); /* NULL once the budget is spent */

/* The envd message called `name` ("process.StartRequest", "filesystem.EntryInfo" …); NULL if
 * moonbox does not know it. */
const ProtobufCMessageDescriptor *mb_rpc_message(const char *name);
/* The request and response messages of an RPC path ("process.Process/Start"); 0 if unknown. */
int mb_rpc_method(const char *path, const ProtobufCMessageDescriptor **in,
                  const ProtobufCMessageDescriptor **out);

/* JSON object → a message allocated in ar (unknown fields are ignored, as protobuf-JSON
 * parsers do by default in envd; a wrong type is an error naming the field). */
int mb_rpc_from_json(const ProtobufCMessageDescriptor *d, const json_t *j, struct mb_arena *ar,
                     ProtobufCMessage **out, struct mb_error *err);
/* The same with options. MB_RPC_OPEN_ENUMS: an unknown enum name leaves the field unset and an
 * integer outside the enum's values is kept as it is — what Go's protojson does with
 * DiscardUnknown, which is how connect-go (envd) parses requests; a server uses it. */
#define MB_RPC_OPEN_ENUMS 1u
int mb_rpc_from_json_opts(const ProtobufCMessageDescriptor *d, const json_t *j, unsigned opts,
                          struct mb_arena *ar, ProtobufCMessage **out, struct mb_error *err);
/* A message → a new JSON object (the caller decrefs). NULL only when out of memory. */
json_t *mb_rpc_to_json(const ProtobufCMessage *m);

/* Binary: protobuf-c's pack and unpack, the latter bounded by the arena. */
int mb_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *data, size_t len,
                  struct mb_arena *ar, ProtobufCMessage **out, struct mb_error *err);
#endif
