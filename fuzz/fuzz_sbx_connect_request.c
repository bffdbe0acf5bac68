/* fuzz_sbx_connect_request.c — libFuzzer target for sandboxd's one parser of Connect request
 * messages (sandboxd/connect_request.c). Input: [mode][body...]; mode bit 0 = streaming.
 * Properties checked:
 *  - NULL comes with a message; otherwise the message is a JSON object;
 *  - a streaming request is accepted only as exactly one uncompressed data envelope whose length
 *    is the rest of the body (checked here independently of the parser);
 *  - an accepted message survives a round trip through JSON text unchanged;
 *  - an unaccepted body gives the same answer twice (no hidden state). */
#include <stdlib.h>
#include <string.h>

#include "connect_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  bool streaming = data[0] & 1;
  const uint8_t *b = data + 1;
  size_t n = size - 1;
  char err[512] = "";
  json_t *j = creq_parse(b, n, streaming, err, sizeof err);
  if (!j) {
    if (!err[0]) __builtin_trap();
    char err2[512] = "";
    json_t *again = creq_parse(b, n, streaming, err2, sizeof err2);
    if (again || strcmp(err, err2) != 0) __builtin_trap();
    return 0;
  }
  if (!json_is_object(j)) __builtin_trap();
  if (streaming) {
    if (n < 5 || b[0] != 0) __builtin_trap();
    uint32_t len = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (len != n - 5) __builtin_trap();
  }
  char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  if (!text) __builtin_trap();
  char err3[512];
  json_t *k = creq_parse((const uint8_t *)text, strlen(text), false, err3, sizeof err3);
  if (!k || !json_equal(j, k)) __builtin_trap();
  json_decref(k);
  free(text);
  json_decref(j);
  return 0;
}
