/* fuzz_split.h — the random-split harness shared by the decoder fuzz targets.
 * Input: [limit selector][split seed][stream...]. The stream is decoded twice, in one push and in
 * random chunks of 1..chunk bytes; the target's push callback hashes what it decodes (fuzz_mix)
 * and re-encodes it into acc->out. Properties checked: both decodings give the same result, the
 * same number of items and the same hash; a stream that decodes successfully re-encodes to
 * itself byte for byte; a failure carries its code and a message. */
#ifndef MB_FUZZ_SPLIT_H
#define MB_FUZZ_SPLIT_H
#include "errors.h"
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

/* The decoder under test, behind void pointers. */
struct fuzz_split {
  const size_t *limits; /* the decoder's limit is limits[first byte % nlimits] */
  size_t nlimits;
  unsigned chunk;       /* random chunks are 1..chunk bytes */
  void *(*open)(size_t max);
  int (*push)(void *dec, const uint8_t *d, size_t n, struct acc *a, struct mb_error *err);
  int (*finish)(void *dec, struct mb_error *err);
  void (*close)(void *dec);
};

static int fuzz_split_decode(const struct fuzz_split *fs, const uint8_t *d, size_t n, size_t max,
                             unsigned seed, struct acc *a) {
  void *dec = fs->open(max);
  if (!dec) return -1;
  struct mb_error err;
  int rc = 0;
  size_t off = 0;
  while (off < n && !rc) {
    size_t k = n - off;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      size_t c = 1 + (seed >> 16) % fs->chunk;
      if (c < k) k = c;
    }
    rc = fs->push(dec, d + off, k, a, &err);
    off += k;
  }
  if (!rc) rc = fs->finish(dec, &err);
  if (rc && (err.code != rc || err.message[0] == '\0')) __builtin_trap();
  fs->close(dec);
  return rc;
}

/* The body of LLVMFuzzerTestOneInput. */
static int fuzz_split_run(const struct fuzz_split *fs, const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t max = fs->limits[data[0] % fs->nlimits];
  unsigned seed = data[1] | 1u;
  data += 2;
  size -= 2;
  /* an item never re-encodes longer than it decoded from, so size + 1 bounds the output */
  struct acc a = {malloc(size + 1), 0, size + 1, 0, 0}, b = {malloc(size + 1), 0, size + 1, 0, 0};
  if (!a.out || !b.out) abort();
  int ra = fuzz_split_decode(fs, data, size, max, 0, &a);
  int rb = fuzz_split_decode(fs, data, size, max, seed, &b);
  if (ra != rb || a.count != b.count || a.hash != b.hash) __builtin_trap();
  if (ra == MB_OK && (a.n != size || memcmp(a.out, data, size) != 0)) __builtin_trap();
  free(a.out);
  free(b.out);
  return 0;
}
#endif
