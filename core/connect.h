/* connect.h — Connect protocol (JSON mode): envelopes, end-of-stream, error codes.
 * See ../shared/reference/e2b-wire-protocol.md §4. No I/O: callers push bytes in. */
#ifndef MB_CONNECT_H
#define MB_CONNECT_H
#include "errors.h"
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define MB_ENVELOPE_HDR 5
#define MB_ENVELOPE_COMPRESSED 0x01
#define MB_ENVELOPE_END_STREAM 0x02

/* Writes [flags][BE32 len]. Returns MB_OK or MB_E_TOO_LARGE (len > UINT32_MAX). */
int mb_envelope_header(unsigned char hdr[MB_ENVELOPE_HDR], uint8_t flags, size_t len);
/* Writes a whole envelope into out (cap bytes). MB_E_TOO_LARGE if it does not fit. */
int mb_envelope_encode(uint8_t flags, const void *payload, size_t len, unsigned char *out,
                       size_t cap, size_t *out_len);

/* Connect error codes (numbers as in the Connect spec). */
enum mb_connect_code {
  MB_CONNECT_OK = 0,
  MB_CONNECT_CANCELED = 1, MB_CONNECT_UNKNOWN, MB_CONNECT_INVALID_ARGUMENT,
  MB_CONNECT_DEADLINE_EXCEEDED, MB_CONNECT_NOT_FOUND, MB_CONNECT_ALREADY_EXISTS,
  MB_CONNECT_PERMISSION_DENIED, MB_CONNECT_RESOURCE_EXHAUSTED, MB_CONNECT_FAILED_PRECONDITION,
  MB_CONNECT_ABORTED, MB_CONNECT_OUT_OF_RANGE, MB_CONNECT_UNIMPLEMENTED, MB_CONNECT_INTERNAL,
  MB_CONNECT_UNAVAILABLE, MB_CONNECT_DATA_LOSS, MB_CONNECT_UNAUTHENTICATED = 16
};
/* "not_found" → 5; 0 for anything that is not a code string (including "ok"). */
int mb_connect_code_from_string(const char *s);
/* 5 → "not_found"; NULL outside 1..16. */
const char *mb_connect_code_string(int code);
/* HTTP status a server uses for a unary error with this code (§4.3); 500 if unknown. */
int mb_connect_http_status(int code);
/* Code a client derives from a non-200 HTTP status (connect-es rules). */
int mb_connect_code_for_http(int status);

#define MB_CONNECT_MSG_MAX 512
/* A Connect error: code (1..16) and message (bounded, cut at a UTF-8 boundary). */
struct mb_connect_error {
  int code;
  char message[MB_CONNECT_MSG_MAX];
};

/* Error of a unary call that answered non-200: the JSON body's string `code` if it is a known
 * code, else derived from the status; message from the body, or "HTTP <status>" when the body is
 * not JSON (is_json = 0 or unparsable). */
void mb_connect_unary_error(int status, int is_json, const char *body, size_t len,
                            struct mb_connect_error *out);

/* One decoded envelope. data/len are valid only during the callback. For an end-of-stream
 * envelope, end_stream = 1 and has_error says whether `error` is filled; metadata is the
 * end-stream's metadata object (borrowed, may be NULL). */
struct mb_envelope {
  uint8_t flags;
  const unsigned char *data;
  size_t len;
  int end_stream;
  int has_error;
  struct mb_connect_error error;
  json_t *metadata;
};

/* Return 0 to continue; non-zero stops the push, which returns that value (and the decoder
 * becomes unusable). */
typedef int (*mb_envelope_cb)(void *ud, const struct mb_envelope *env);

struct mb_envelope_decoder;
/* max_message: the largest payload accepted (MB_E_TOO_LARGE beyond it). NULL on allocation
 * failure. */
struct mb_envelope_decoder *mb_envelope_decoder_new(size_t max_message);
void mb_envelope_decoder_free(struct mb_envelope_decoder *d);
/* Feed any number of bytes; each complete envelope is delivered to cb in order. Errors are
 * sticky: once a push failed every later call fails with the same error. */
int mb_envelope_decoder_push(struct mb_envelope_decoder *d, const void *data, size_t len,
                             mb_envelope_cb cb, void *ud, struct mb_error *err);
/* End of input: MB_E_TRUNCATED inside an envelope, MB_E_PROTOCOL without an end-of-stream. */
int mb_envelope_decoder_finish(struct mb_envelope_decoder *d, struct mb_error *err);
/* Parses an end-of-stream payload into env (end_stream, has_error, error, metadata; metadata is
 * a new reference the caller must json_decref). MB_E_PROTOCOL with a message if malformed. */
int mb_connect_parse_end_stream(const void *json, size_t len, struct mb_envelope *env,
                                struct mb_error *err);
/* Extracts a protobuf-JSON `bytes` field from a message, e.g. the output of a process event:
 * path {"event","data"}, leaves {"stdout","stderr","pty"}. If the value at path.leaf is a
 * string, it is base64-decoded (std or URL-safe, padded or not) into dst and *leaf is the index
 * of the leaf found; *root is NULL. Otherwise *leaf = -1 and *root is the parsed message (the
 * caller owns it and must json_decref it). Invalid JSON, invalid base64 → MB_E_PROTOCOL; a value
 * larger than cap → MB_E_TOO_LARGE.
 * The common shape ({"event":{"data":{"stdout":"<base64>"}}}, any whitespace between tokens) is
 * recognised without building a JSON tree: jansson parses ~120 MB/s, which made it the whole cost
 * of the output path (see bench/bench_decode.c). The shortcut is exact: it is only taken when the
 * raw string decodes as base64, i.e. contains no escapes; anything else goes through jansson.
 * MB_CONNECT_JSON_SLOW skips the shortcut (tests and fuzzers compare both paths). */
#define MB_CONNECT_JSON_SLOW 1u
int mb_connect_json_bytes(const void *json, size_t len, const char *const *path, size_t depth,
                          const char *const *leaves, size_t nleaves, unsigned opts, void *dst,
                          size_t cap, size_t *out_len, int *leaf, json_t **root,
                          struct mb_error *err);
#endif
