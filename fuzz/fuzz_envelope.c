/* fuzz_envelope.c — libFuzzer target for the Connect envelope decoder.
 * Input: [limit selector][split seed][stream...]. Properties checked:
 *  - decoding in one push and in random chunks gives the same envelopes and the same result;
 *  - when decoding succeeds, re-encoding the envelopes reproduces the input byte for byte;
 *  - mb_connect_json_bytes gives the same answer with and without its shortcut. */
#include "connect.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct acc {
  unsigned char *out; /* re-encoded stream */
  size_t n, cap;
  uint64_t hash;
  unsigned count;
};

static void mix(struct acc *a, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) a->hash = (a->hash ^ b[i]) * 0x100000001b3ULL;
}

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

static int decode(const uint8_t *d, size_t n, size_t max, unsigned seed, struct acc *a) {
  struct mb_envelope_decoder *dec = mb_envelope_decoder_new(max);
  if (!dec) return -1;
  struct mb_error err;
  int rc = 0;
  size_t off = 0;
  while (off < n && !rc) {
    size_t k = n - off;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      size_t c = 1 + (seed >> 16) % 23;
      if (c < k) k = c;
    }
    rc = mb_envelope_decoder_push(dec, d + off, k, on_env, a, &err);
    off += k;
  }
  if (!rc) rc = mb_envelope_decoder_finish(dec, &err);
  if (rc && (err.code != rc || err.message[0] == '\0')) __builtin_trap();
  mb_envelope_decoder_free(dec);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const size_t limits[] = {0, 1, 7, 64, 1024, 1 << 20};
  size_t max = limits[data[0] % 6];
  unsigned seed = data[1] | 1u;
  data += 2;
  size -= 2;
  struct acc a = {malloc(size + 1), 0, size + 1, 0, 0}, b = {malloc(size + 1), 0, size + 1, 0, 0};
  if (!a.out || !b.out) abort();
  int ra = decode(data, size, max, 0, &a);
  int rb = decode(data, size, max, seed, &b);
  if (ra != rb || a.count != b.count || a.hash != b.hash) __builtin_trap();
  if (ra == MB_OK && (a.n != size || memcmp(a.out, data, size) != 0)) __builtin_trap();
  free(a.out);
  free(b.out);
  return 0;
}
