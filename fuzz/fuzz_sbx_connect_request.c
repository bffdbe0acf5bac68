/* fuzz_sbx_connect_request.c — libFuzzer target for sandboxd's one parser of Connect request
 * messages (sandboxd/connect_request.c), both codecs. Input: [mode][body...]; mode bit 0 =
 * streaming, bit 1 = binary (protobuf), bits 2..5 pick the request message type.
 * Properties checked:
 *  - NULL comes with a message, and the same body gives the same answer twice (no hidden state);
 *  - a streaming request is accepted only as exactly one uncompressed data envelope whose length
 *    is the rest of the body (checked here independently of the parser);
 *  - every string of an accepted binary message is UTF-8 (its JSON form can be built);
 *  - an accepted message survives the trip to the other codec and back: its JSON form, parsed
 *    as a JSON request, gives the same JSON form; its binary form, parsed as a binary request,
 *    packs to the same bytes. */
#include <stdlib.h>
#include <string.h>

#include "connect_request.h"
#include "envd/filesystem.pb-c.h"
#include "envd/process.pb-c.h"

static const ProtobufCMessageDescriptor *const TYPES[] = {
  &process__start_request__descriptor, &process__connect_request__descriptor,
  &process__send_input_request__descriptor, &process__send_signal_request__descriptor,
  &process__update_request__descriptor, &process__close_stdin_request__descriptor, &process__list_request__descriptor,
  &filesystem__stat_request__descriptor, &filesystem__make_dir_request__descriptor, &filesystem__move_request__descriptor,
  &filesystem__list_dir_request__descriptor, &filesystem__remove_request__descriptor,
  &filesystem__watch_dir_request__descriptor,
};

static ProtobufCMessage *parse(const uint8_t *b, size_t n, creq_type t, const ProtobufCMessageDescriptor *d,
                               struct mb_arena *ar, char *err) {
  if (mb_arena_init(ar, CREQ_ARENA(n)) != MB_OK) __builtin_trap();
  err[0] = 0;
  return creq_parse(b, n, t, d, ar, err, 512);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  creq_type t = {data[0] & 1, (data[0] >> 1) & 1};
  const ProtobufCMessageDescriptor *d = TYPES[(data[0] >> 2) % (sizeof TYPES / sizeof TYPES[0])];
  const uint8_t *b = data + 1;
  size_t n = size - 1;
  char err[512];
  struct mb_arena ar, ar2;
  ProtobufCMessage *m = parse(b, n, t, d, &ar, err);
  if (!m) {
    if (!err[0]) __builtin_trap();
    char err2[512];
    ProtobufCMessage *again = parse(b, n, t, d, &ar2, err2);
    if (again || strcmp(err, err2) != 0) __builtin_trap();
    mb_arena_free(&ar2);
    mb_arena_free(&ar);
    return 0;
  }
  if (m->descriptor != d) __builtin_trap();
  if (t.streaming) {
    if (n < 5 || b[0] != 0) __builtin_trap();
    uint32_t len = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (len != n - 5) __builtin_trap();
  }
  /* JSON form → a JSON request → the same JSON form */
  json_t *j = mb_rpc_to_json(m);
  if (!j) __builtin_trap();   /* e.g. a string that is not UTF-8 got through */
  char *text = json_dumps(j, JSON_COMPACT);
  if (!text) __builtin_trap();
  ProtobufCMessage *mj = parse((const uint8_t *)text, strlen(text), (creq_type){false, false}, d, &ar2, err);
  if (!mj) {
    if (!strstr(err, "too large")) __builtin_trap();   /* only the arena may refuse it */
  } else {
    json_t *j2 = mb_rpc_to_json(mj);
    if (!j2 || !json_equal(j, j2)) __builtin_trap();
    json_decref(j2);
  }
  mb_arena_free(&ar2);
  free(text);
  json_decref(j);
  /* binary form → a binary request → the same bytes */
  size_t pn = protobuf_c_message_get_packed_size(m);
  uint8_t *pb = malloc(pn ? pn : 1), *pb2 = NULL;
  if (!pb || protobuf_c_message_pack(m, pb) != pn) __builtin_trap();
  ProtobufCMessage *mp = parse(pb, pn, (creq_type){false, true}, d, &ar2, err);
  if (!mp) {
    if (!strstr(err, "too large") && !strstr(err, "needs more than")) __builtin_trap();
  } else {
    size_t pn2 = protobuf_c_message_get_packed_size(mp);
    pb2 = malloc(pn2 ? pn2 : 1);
    if (!pb2 || pn2 != pn || protobuf_c_message_pack(mp, pb2) != pn || memcmp(pb, pb2, pn) != 0) __builtin_trap();
  }
  free(pb);
  free(pb2);
  mb_arena_free(&ar2);
  mb_arena_free(&ar);
  return 0;
}
