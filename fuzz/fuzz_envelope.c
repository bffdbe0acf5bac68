/* fuzz_envelope.c — libFuzzer target for the Connect envelope decoder.
 * Input: [limit selector][split seed][stream...]. Properties checked:
 *  - decoding in one push and in random chunks gives the same envelopes and the same result;
 *  - when decoding succeeds, re-encoding the envelopes reproduces the input byte for byte;
 *  - mb_connect_json_bytes gives the same answer with and without its shortcut. */
#include "connect.h"
#include "fuzz_split.h"

static const char *const PATH[] = {"event", "data"};
static const char *const LEAVES[] = {"stdout", "stderr", "pty"};

static void check_json_bytes(const struct mb_envelope *e) {
  unsigned char *buf[2];
  size_t n[2];
  int leaf[2], rc[2];
  json_t *root[2];
  struct mb_error err[2];
  for (int slow = 0; slow < 2; slow++) {
    buf[slow] = malloc(e->len + 1);
    if (!buf[slow]) abort();
    rc[slow] = mb_connect_json_bytes(e->data, e->len, PATH, 2, LEAVES, 3,
                                     slow ? MB_CONNECT_JSON_SLOW : 0, buf[slow], e->len / 2 + 1,
                                     &n[slow], &leaf[slow], &root[slow], &err[slow]);
    json_decref(root[slow]);
  }
  if (rc[0] != rc[1] || leaf[0] != leaf[1] || n[0] != n[1] || memcmp(buf[0], buf[1], n[0]) != 0)
    __builtin_trap();
  free(buf[0]);
  free(buf[1]);
}

static int on_env(void *ud, const struct mb_envelope *e) {
  struct acc *a = ud;
  if (!e->end_stream) check_json_bytes(e);
  a->count++;
  mix(a, &e->flags, 1);
  mix(a, e->data, e->len);
  int f[3] = {e->end_stream, e->has_error, e->error.code};
  mix(a, f, sizeof f);
  mix(a, e->error.message, strlen(e->error.message));
  if (e->metadata) mix(a, "m", 1);
  size_t k;
  if (mb_envelope_encode(e->flags, e->data, e->len, a->out + a->n, a->cap - a->n, &k) != MB_OK)
    __builtin_trap(); /* more output than input: impossible */
  a->n += k;
  return 0;
}

static void *dec_open(size_t max) { return mb_envelope_decoder_new(max); }
static int dec_push(void *dec, const uint8_t *d, size_t n, struct acc *a, struct mb_error *err) {
  return mb_envelope_decoder_push(dec, d, n, on_env, a, err);
}
static int dec_finish(void *dec, struct mb_error *err) { return mb_envelope_decoder_finish(dec, err); }
static void dec_close(void *dec) { mb_envelope_decoder_free(dec); }

static const size_t limits[] = {0, 1, 7, 64, 1024, 1 << 20};
static const struct fuzz_split split = {limits, sizeof limits / sizeof *limits, 23, dec_open, dec_push, dec_finish, dec_close};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_split_run(&split, data, size); }
