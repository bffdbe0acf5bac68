/* fuzz_frames.c — libFuzzer target for the mbwrap frame decoder.
 * Input: [line-limit selector][split seed][stream...]. Properties checked:
 *  - decoding in one push and in random chunks gives the same frames and the same result;
 *  - a stream that decodes successfully is canonical: re-encoding its frames reproduces it. */
#include "frames.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct acc {
  char *out;
  size_t n, cap;
  uint64_t hash;
  unsigned count;
};

static void mix(struct acc *a, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) a->hash = (a->hash ^ b[i]) * 0x100000001b3ULL;
}

static int on_frame(void *ud, const struct mb_frame *f) {
  struct acc *a = ud;
  a->count++;
  int h[2] = {f->kind, f->value};
  mix(a, h, sizeof h);
  mix(a, f->data, f->len);
  size_t k;
  if (mb_frame_encode(f, a->out + a->n, a->cap - a->n, &k) != MB_OK) __builtin_trap();
  a->n += k;
  return 0;
}

static int decode(const uint8_t *d, size_t n, size_t max, unsigned seed, struct acc *a) {
  struct mb_frame_decoder *dec = mb_frame_decoder_new(max);
  if (!dec) return -1;
  struct mb_error err;
  int rc = 0;
  size_t off = 0;
  while (off < n && !rc) {
    size_t k = n - off;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      size_t c = 1 + (seed >> 16) % 37;
      if (c < k) k = c;
    }
    rc = mb_frame_decoder_push(dec, d + off, k, on_frame, a, &err);
    off += k;
  }
  if (!rc) rc = mb_frame_decoder_finish(dec, &err);
  if (rc && (err.code != rc || err.message[0] == '\0')) __builtin_trap();
  mb_frame_decoder_free(dec);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const size_t limits[] = {1, 8, 64, 4096, MB_FRAME_LINE_MIN_LIMIT};
  size_t max = limits[data[0] % 5];
  unsigned seed = data[1] | 1u;
  data += 2;
  size -= 2;
  /* a frame never re-encodes longer than its line, so size + 1 bounds the output */
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
