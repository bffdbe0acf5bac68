/* fuzz_sbx_sniff.c — libFuzzer target for sandboxd's sniffers (sandboxd/sniff.c), both of them on
 * every input. Input: [mode][seed][data...]; mode & 3 says what data is:
 *   0  the stream itself;
 *   1  a handshake message, framed into records of sizes drawn from seed;
 *   2  a ClientHello's extension list, put into an otherwise valid ClientHello, then framed;
 *   3  the stream, repeated up to past SNIFF_LIMIT (the limit's paths).
 * (sniff_http always gets the stream of modes 0 and 3, and data for 1 and 2.)
 * Properties checked, independently of the parser:
 *  - the answer for any prefix (random cut points from seed) is MORE or the answer for the whole,
 *    with the same name; the same bytes give the same answer twice;
 *  - the answer depends on the first SNIFF_LIMIT bytes only;
 *  - a returned name satisfies every rule of sniff.h (checked here by a separate implementation)
 *    and sniff_hostname gives it back unchanged;
 *  - a name from sniff_http appears in its input (case aside), and so does one from sniff_tls in
 *    the handshake bytes of modes 1 and 2. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sniff.h"

#define STREAM_MAX (SNIFF_LIMIT + 4096)
typedef sniff_result (*sniffer_fn)(const unsigned char *, size_t, char *);

static unsigned rnd(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 16;
}

/* The rules of sniff.h for a returned (normalised) name, written again. */
static bool valid_name(const char *n) {
  size_t len = strnlen(n, SNIFF_NAME_MAX + 1);
  if (len == 0 || len > SNIFF_NAME_MAX) return false;
  size_t label = 0, last = 0;
  for (size_t i = 0; i < len; i++) {
    char c = n[i];
    if (c == '.') {
      if (label == 0 || i == len - 1) return false;
      label = 0;
      last = i + 1;
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') {
      if (++label > 63) return false;
    } else {
      return false;   /* upper case too: names come back lower-cased */
    }
  }
  const char *l = n + last;
  if (strspn(l, "0123456789") == strlen(l)) return false;   /* an IPv4 literal's last part */
  if (l[0] == '0' && l[1] == 'x' && strspn(l + 2, "0123456789abcdef") == strlen(l + 2)) return false;
  return true;
}

/* Does name occur in b[0..n), ignoring ASCII case? */
static bool occurs(const unsigned char *b, size_t n, const char *name) {
  size_t k = strlen(name);
  for (size_t i = 0; i + k <= n; i++) {
    size_t j = 0;
    while (j < k && (b[i + j] | (b[i + j] >= 'A' && b[i + j] <= 'Z' ? 0x20 : 0)) == (unsigned char)name[j]) j++;
    if (j == k) return true;
  }
  return false;
}

static size_t frame(unsigned char *out, const uint8_t *hs, size_t n, unsigned *seed) {
  size_t o = 0;
  static const unsigned versions[] = {0x0301, 0x0303, 0x0304};
  unsigned ver = versions[rnd(seed) % 3];
  for (size_t i = 0; i < n && o + 5 < STREAM_MAX;) {
    size_t k = rnd(seed) % 4 ? n - i : 1 + rnd(seed) % 300;   /* mostly one record */
    if (k > n - i) k = n - i;
    if (k > 16384) k = 16384;
    if (k > STREAM_MAX - o - 5) k = STREAM_MAX - o - 5;
    out[o++] = 22;
    out[o++] = (unsigned char)(ver >> 8);
    out[o++] = (unsigned char)ver;
    out[o++] = (unsigned char)(k >> 8);
    out[o++] = (unsigned char)k;
    memcpy(out + o, hs + i, k);
    o += k;
    i += k;
  }
  return o;
}

/* A ClientHello around the extension list e[0..n). */
static size_t wrap(unsigned char *hs, const uint8_t *e, size_t n) {
  size_t body = 2 + 32 + 1 + 2 + 2 + 1 + 1 + 2 + n, o = 0;
  hs[o++] = 1;
  hs[o++] = (unsigned char)(body >> 16);
  hs[o++] = (unsigned char)(body >> 8);
  hs[o++] = (unsigned char)body;
  hs[o++] = 3, hs[o++] = 3;
  memset(hs + o, 0x5a, 32), o += 32;
  hs[o++] = 0;                                           /* session id */
  hs[o++] = 0, hs[o++] = 2, hs[o++] = 0x13, hs[o++] = 1;   /* TLS_AES_128_GCM_SHA256 */
  hs[o++] = 1, hs[o++] = 0;                              /* null compression */
  hs[o++] = (unsigned char)(n >> 8), hs[o++] = (unsigned char)n;
  memcpy(hs + o, e, n);
  return o + n;
}

/* f on b[0..n): every property above. */
static void check(sniffer_fn f, const unsigned char *b, size_t n, unsigned seed, const unsigned char *src, size_t srcn) {
  char whole[SNIFF_NAME_MAX + 1], name[SNIFF_NAME_MAX + 1];
  sniff_result w = f(b, n, whole);
  if (w != SNIFF_MORE && w != SNIFF_NAME && w != SNIFF_NONE) __builtin_trap();
  if (w == SNIFF_NAME) {
    if (!valid_name(whole)) __builtin_trap();
    if (sniff_hostname(whole, strlen(whole), name) != 0 || strcmp(name, whole) != 0) __builtin_trap();
    if (src && !occurs(src, srcn, whole)) __builtin_trap();
  }
  if (f(b, n, name) != w || (w == SNIFF_NAME && strcmp(name, whole) != 0)) __builtin_trap();
  /* Only the first SNIFF_LIMIT bytes count. */
  if (n > SNIFF_LIMIT) {
    sniff_result r = f(b, SNIFF_LIMIT, name);
    if (r != w || (w == SNIFF_NAME && strcmp(name, whole) != 0)) __builtin_trap();
  }
  /* Random prefixes, in order, as a connection's reads would arrive: at most 48 of them. */
  size_t p = 0;
  for (int reads = 0; p < n && reads < 48; reads++) {
    sniff_result r = f(b, p, name);
    if (r != SNIFF_MORE && (r != w || (r == SNIFF_NAME && strcmp(name, whole) != 0))) __builtin_trap();
    size_t step = rnd(&seed) % 2 ? 1 + rnd(&seed) % 16 : 1 + rnd(&seed) % (n / 8 + 1);
    p = step < n - p ? p + step : n;
  }
  if (n > 0) {   /* the longest proper prefix */
    sniff_result r = f(b, n - 1, name);
    if (r != SNIFF_MORE && (r != w || (r == SNIFF_NAME && strcmp(name, whole) != 0))) __builtin_trap();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned char stream[STREAM_MAX], hs[STREAM_MAX];
  if (size < 2) return 0;
  unsigned mode = data[0] & 3, seed = data[1] | (unsigned)data[0] << 8;
  data += 2;
  size -= 2;
  if (size > STREAM_MAX - 64) size = STREAM_MAX - 64;
  size_t n = 0;
  const unsigned char *src = NULL;
  size_t srcn = 0;
  switch (mode) {
  case 0:
    memcpy(stream, data, size);
    n = size;
    break;
  case 1:
    n = frame(stream, data, size, &seed);
    src = data, srcn = size;
    break;
  case 2: {
    if (size > 65535) size = 65535;
    size_t h = wrap(hs, data, size);
    n = frame(stream, hs, h, &seed);
    src = hs, srcn = h;
    break;
  }
  default:
    if (size == 0) return 0;
    while (n < SNIFF_LIMIT + 100) {
      size_t k = size < STREAM_MAX - n ? size : STREAM_MAX - n;
      memcpy(stream + n, data, k);
      n += k;
    }
  }
  check(sniff_tls, stream, n, seed, src, srcn);
  /* HTTP: the stream (a name must occur in it), or the data as it came. */
  if (mode == 0 || mode == 3) check(sniff_http, stream, n, seed, stream, n);
  else check(sniff_http, data, size, seed, data, size);
  return 0;
}
