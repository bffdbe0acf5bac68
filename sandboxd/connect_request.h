/* connect_request.h — the one parser of Connect RPC request messages (envd's process and
 * filesystem services speak Connect's JSON codec): a unary request is its JSON body, a
 * server-streaming request exactly one uncompressed data envelope around the JSON. Strict: the
 * message must be a JSON object, with no duplicate keys, within `max` bytes. Pure (no I/O). */
#ifndef SANDBOXD_CONNECT_REQUEST_H
#define SANDBOXD_CONNECT_REQUEST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define CREQ_MAX (8u << 20)   /* what sandboxd buffers of a request body anyway */

/* The message as a new JSON object reference (an empty body is {}), or NULL with a sentence in
 * err saying what is wrong. */
json_t *creq_parse(const uint8_t *body, size_t len, bool streaming, char *err, size_t errlen);
/* Content-Type application/connect+json (any parameters): the request is server-streaming. */
bool creq_is_streaming(const char *content_type);
#endif
