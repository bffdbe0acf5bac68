/* b64.c — base64 (OpenSSL EVP_EncodeBlock/EVP_DecodeBlock), SHA-256 (EVP), v1 signatures.
 * EVP_DecodeBlock is lenient: it skips leading whitespace, trims trailing whitespace, decodes
 * '=' anywhere as zero bits and counts padding in its result. The strict decoder therefore checks
 * the '=' placement and the ends itself, decodes the last quantum separately (so dst needs no
 * room for padding) and verifies canonical form by re-encoding that quantum. */
#include "b64.h"
#include "errors.h"
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

/* EVP takes int lengths: work in chunks that are multiples of 4 (and of 3 when encoding). */
#define MB_B64_CHUNK ((size_t)1 << 28)

size_t mb_b64_encoded_len(size_t n) {
  size_t q = n / 3 + (n % 3 != 0);
  if (q > SIZE_MAX / 4) return 0;
  return q * 4;
}

size_t mb_b64_decoded_max(size_t n) { return n / 4 * 3 + 3; }

size_t mb_b64_encode(const void *src, size_t n, char *dst) {
  const unsigned char *s = src;
  size_t out = 0;
  const size_t step = MB_B64_CHUNK / 4 * 3; /* multiple of 3: no padding mid-stream */
  do {
    size_t k = n < step ? n : step;
    out += (size_t)EVP_EncodeBlock((unsigned char *)dst + out, s, (int)k);
    s += k;
    n -= k;
  } while (n > 0);
  dst[out] = '\0';
  return out;
}

static int mb_b64_is_alpha(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/';
}

static int mb_b64_fail(const char **why, const char *msg) {
  if (why) *why = msg;
  return MB_E_INVALID;
}

/* Decodes a padding-free run of complete quanta (len % 4 == 0) straight into dst. */
static int mb_b64_decode_body(const char *s, size_t len, unsigned char *dst, const char **why) {
  while (len > 0) {
    size_t k = len < MB_B64_CHUNK ? len : MB_B64_CHUNK;
    /* EVP would skip whitespace at either end of the chunk: those ends must be alphabet. */
    if (!mb_b64_is_alpha((unsigned char)s[0]) || !mb_b64_is_alpha((unsigned char)s[k - 1]))
      return mb_b64_fail(why, "invalid base64 character");
    int r = EVP_DecodeBlock(dst, (const unsigned char *)s, (int)k);
    if (r < 0 || (size_t)r != k / 4 * 3) return mb_b64_fail(why, "invalid base64 character");
    s += k;
    dst += (size_t)r;
    len -= k;
  }
  return MB_OK;
}

int mb_b64_decode(const char *src, size_t n, void *dst, size_t dst_cap, size_t *out_len,
                  const char **why) {
  *out_len = 0;
  if (n == 0) return MB_OK;
  if (n % 4 != 0) return mb_b64_fail(why, "base64 length is not a multiple of 4");
  size_t pad = 0;
  if (src[n - 1] == '=') pad = src[n - 2] == '=' ? 2 : 1;
  if (memchr(src, '=', n - pad)) return mb_b64_fail(why, "misplaced '=' in base64");
  size_t want = n / 4 * 3 - pad;
  if (want > dst_cap) {
    if (why) *why = "decoded base64 exceeds the buffer";
    return MB_E_TOO_LARGE;
  }
  int rc = mb_b64_decode_body(src, n - 4, dst, why);
  if (rc) return rc;
  /* Last quantum: decode into a scratch block, then require the canonical encoding. */
  const char *last = src + n - 4;
  unsigned char tmp[3];
  char again[5];
  if (!mb_b64_is_alpha((unsigned char)last[0]) || !mb_b64_is_alpha((unsigned char)last[1]) ||
      (pad < 2 && !mb_b64_is_alpha((unsigned char)last[2])) ||
      (pad < 1 && !mb_b64_is_alpha((unsigned char)last[3])))
    return mb_b64_fail(why, "invalid base64 character");
  if (EVP_DecodeBlock(tmp, (const unsigned char *)last, 4) != 3)
    return mb_b64_fail(why, "invalid base64 character");
  EVP_EncodeBlock((unsigned char *)again, tmp, (int)(3 - pad));
  if (memcmp(again, last, 4) != 0) return mb_b64_fail(why, "non-canonical base64 padding bits");
  memcpy((unsigned char *)dst + (n / 4 * 3 - 3), tmp, 3 - pad);
  *out_len = want;
  return MB_OK;
}

int mb_b64_decode_tolerant(const char *src, size_t n, void *dst, size_t dst_cap, size_t *out_len,
                           const char **why) {
  *out_len = 0;
  /* Canonical standard base64 (what Go's protojson emits) decodes without translation. */
  if (n % 4 == 0 && mb_b64_decode(src, n, dst, dst_cap, out_len, NULL) == MB_OK) return MB_OK;
  *out_len = 0;
  size_t pad = 0;
  if (n > 0 && src[n - 1] == '=') {
    if (n % 4 != 0) return mb_b64_fail(why, "padded base64 length is not a multiple of 4");
    pad = n >= 2 && src[n - 2] == '=' ? 2 : 1;
  }
  size_t body = n - pad; /* characters carrying data */
  if (body % 4 == 1) return mb_b64_fail(why, "base64 length is invalid");
  size_t want = body / 4 * 3 + (body % 4 ? body % 4 - 1 : 0);
  if (want > dst_cap) {
    if (why) *why = "decoded base64 exceeds the buffer";
    return MB_E_TOO_LARGE;
  }
  /* Translate the URL-safe alphabet in bounded blocks; pad the final block for EVP. */
  char blk[4096];
  unsigned char tmp[3];
  unsigned char *d = dst;
  size_t i = 0;
  while (i < body) {
    size_t k = body - i < sizeof blk - 4 ? body - i : sizeof blk - 4;
    for (size_t j = 0; j < k; j++) {
      char c = src[i + j];
      if (c == '-') c = '+';
      else if (c == '_') c = '/';
      else if (!mb_b64_is_alpha((unsigned char)c)) return mb_b64_fail(why, "invalid base64 character");
      blk[j] = c;
    }
    i += k;
    size_t full = k / 4 * 4, rest = k - full;
    if (full) {
      int r = EVP_DecodeBlock(d, (const unsigned char *)blk, (int)full);
      if (r < 0) return mb_b64_fail(why, "invalid base64 character");
      d += r;
    }
    if (rest) { /* only in the final block: 2 or 3 characters */
      memcpy(blk + full + rest, "==", 4 - rest);
      if (EVP_DecodeBlock(tmp, (const unsigned char *)blk + full, 4) != 3)
        return mb_b64_fail(why, "invalid base64 character");
      memcpy(d, tmp, rest - 1);
      d += rest - 1;
    }
  }
  *out_len = (size_t)(d - (unsigned char *)dst);
  return MB_OK;
}

void mb_sha256(const void *data, size_t n, unsigned char out[MB_SHA256_LEN]) {
  unsigned int len = 0;
  EVP_Digest(data, n, out, &len, EVP_sha256(), NULL);
}

static void mb_hex(const unsigned char *b, size_t n, char *out) {
  static const char hx[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hx[b[i] >> 4];
    out[2 * i + 1] = hx[b[i] & 15];
  }
  out[2 * n] = '\0';
}

void mb_sha256_hex(const void *data, size_t n, char out[2 * MB_SHA256_LEN + 1]) {
  unsigned char md[MB_SHA256_LEN];
  mb_sha256(data, n, md);
  mb_hex(md, sizeof md, out);
}

int mb_sign_v1(const char *path, const char *op, const char *user, const char *token,
               int64_t exp, char out[MB_SIGN_V1_LEN + 1]) {
  out[0] = '\0';
  if (!path || !op || !user || !token) return MB_E_INVALID;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx) return MB_E_NOMEM;
  const char *parts[4] = {path, op, user, token};
  int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  for (int i = 0; i < 4 && ok; i++) {
    if (i > 0) ok = EVP_DigestUpdate(ctx, ":", 1);
    if (ok) ok = EVP_DigestUpdate(ctx, parts[i], strlen(parts[i]));
  }
  if (ok && exp != 0) {
    char num[24];
    int k = snprintf(num, sizeof num, ":%lld", (long long)exp);
    ok = EVP_DigestUpdate(ctx, num, (size_t)k);
  }
  unsigned char md[MB_SHA256_LEN];
  unsigned int mdlen = 0;
  if (ok) ok = EVP_DigestFinal_ex(ctx, md, &mdlen);
  EVP_MD_CTX_free(ctx);
  if (!ok) return MB_E_NOMEM;
  char b[48];
  size_t k = mb_b64_encode(md, sizeof md, b); /* 44 chars, one '=' */
  while (k > 0 && b[k - 1] == '=') k--;
  memcpy(out, "v1_", 3);
  memcpy(out + 3, b, k);
  out[3 + k] = '\0';
  return MB_OK;
}
