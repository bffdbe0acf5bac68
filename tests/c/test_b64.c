/* test_b64.c — base64 (strict and tolerant), SHA-256 and v1 signature vectors. */
#include "b64.h"
#include "errors.h"
#include "mbtest.h"

static int dec(const char *s, char *out, size_t cap, size_t *n, const char **why) {
  return mb_b64_decode(s, strlen(s), out, cap, n, why);
}

static void test_rfc4648_vectors(void) {
  static const char *v[][2] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                               {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                               {"foobar", "Zm9vYmFy"}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char enc[16], out[16];
    size_t n = mb_b64_encode(v[i][0], strlen(v[i][0]), enc);
    CHECK_STR(enc, v[i][1]);
    CHECK_INT(n, strlen(v[i][1]));
    CHECK_INT(mb_b64_encoded_len(strlen(v[i][0])), strlen(v[i][1]));
    size_t m = 99;
    CHECK_INT(dec(v[i][1], out, sizeof out, &m, NULL), MB_OK);
    CHECK_MEM(out, m, v[i][0], strlen(v[i][0]));
    CHECK_INT(mb_b64_decode_tolerant(v[i][1], strlen(v[i][1]), out, sizeof out, &m, NULL), MB_OK);
    CHECK_MEM(out, m, v[i][0], strlen(v[i][0]));
  }
}

static void test_strict_rejects(void) {
  static const char *bad[] = {
    "Zg",        /* unpadded */
    "Zg=",       /* length not a multiple of 4 */
    "Zm8=Zm8=",  /* padding in the middle */
    "Zg=A",      /* '=' not at the end */
    "Z===",      /* three '=' */
    "====",
    "Zh==",      /* non-canonical: unused bits set */
    "Zm9=",      /* non-canonical */
    " Zm9v",     /* leading whitespace (EVP would skip it) */
    "Zm9v\n",    /* trailing newline */
    "Zm9vYmFy\n\n\n\n",
    "Zm9v Zm9v",
    "Zm-_",      /* URL-safe alphabet */
    "Zm9\x80",
    "Zm9v\0AAA",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char out[32];
    size_t n = 7;
    const char *why = NULL;
    size_t len = i == sizeof bad / sizeof bad[0] - 1 ? 8 : strlen(bad[i]);
    int rc = mb_b64_decode(bad[i], len, out, sizeof out, &n, &why);
    if (!CHECK(rc == MB_E_INVALID)) fprintf(stderr, "     input #%zu\n", i);
    CHECK(why != NULL && why[0] != '\0');
    CHECK_INT(n, 0);
  }
}

static void test_strict_messages(void) {
  char out[16];
  size_t n;
  const char *why = NULL;
  CHECK_INT(dec("Zh==", out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_HAS(why, "non-canonical");
  CHECK_INT(dec("Zg=A", out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_HAS(why, "'='");
  CHECK_INT(dec("Zg=", out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_HAS(why, "multiple of 4");
  CHECK_INT(dec("Zm-_", out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_HAS(why, "character");
}

static void test_exact_capacity(void) {
  /* dst needs no room for padding: ASan catches any write past the exact size. */
  for (size_t len = 1; len <= 9; len++) {
    unsigned char src[16]; /* 16, not 9: gcc -O3 misreads the loop bound (false -Wstringop-overflow) */
    mbt_fill(src, len);
    char enc[16];
    size_t el = mb_b64_encode(src, len, enc);
    unsigned char *out = mbt_xmalloc(len);
    size_t n = 0;
    CHECK_INT(mb_b64_decode(enc, el, out, len, &n, NULL), MB_OK);
    CHECK_MEM(out, n, src, len);
    CHECK_INT(mb_b64_decode_tolerant(enc, el, out, len, &n, NULL), MB_OK);
    CHECK_MEM(out, n, src, len);
    CHECK_INT(mb_b64_decode(enc, el, out, len - 1, &n, NULL), MB_E_TOO_LARGE);
    CHECK_INT(mb_b64_decode_tolerant(enc, el, out, len - 1, &n, NULL), MB_E_TOO_LARGE);
    free(out);
  }
}

static void test_random_roundtrip(void) {
  for (size_t len = 0; len < 3000; len += (len < 70 ? 1 : 97)) {
    unsigned char *src = mbt_xmalloc(len), *out = mbt_xmalloc(len + 3);
    mbt_fill(src, len);
    size_t el = mb_b64_encoded_len(len);
    char *enc = mbt_xmalloc(el + 1);
    CHECK_INT(mb_b64_encode(src, len, enc), el);
    size_t n = 1;
    CHECK_INT(mb_b64_decode(enc, el, out, len + 3, &n, NULL), MB_OK);
    CHECK_MEM(out, n, src, len);
    free(src);
    free(out);
    free(enc);
  }
}

static void test_tolerant_forms(void) {
  /* 0xfb 0xff 0xbf: "+/+/" in std, "-_-_" in URL-safe. */
  static const unsigned char want[] = {0xfb, 0xff, 0xbf, 0xfb, 0xff};
  static const char *forms[] = {"+/+/+/8=", "-_-_-_8=", "-_-_-_8", "+/+/+/8", "-/+_-_8"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    unsigned char out[8];
    size_t n = 0;
    CHECK_INT(mb_b64_decode_tolerant(forms[i], strlen(forms[i]), out, sizeof out, &n, NULL), MB_OK);
    CHECK_MEM(out, n, want, sizeof want);
  }
  unsigned char out[8];
  size_t n;
  const char *why;
  CHECK_INT(mb_b64_decode_tolerant("Zm9vY", 5, out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_INT(mb_b64_decode_tolerant("Zm9v=", 5, out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_INT(mb_b64_decode_tolerant("Zm 9", 4, out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_INT(mb_b64_decode_tolerant("Zg=A", 4, out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_INT(mb_b64_decode_tolerant("====", 4, out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_INT(mb_b64_decode_tolerant("=", 1, out, sizeof out, &n, &why), MB_E_INVALID);
  CHECK_INT(mb_b64_decode_tolerant("", 0, out, sizeof out, &n, &why), MB_OK);
  CHECK_INT(n, 0);
}

static void test_tolerant_long_urlsafe(void) {
  /* Longer than the internal 4 KiB translation block, unpadded, URL-safe. */
  for (size_t len = 5000; len < 5003; len++) {
    unsigned char *src = mbt_xmalloc(len), *out = mbt_xmalloc(len);
    mbt_fill(src, len);
    char *enc = mbt_xmalloc(mb_b64_encoded_len(len) + 1);
    size_t el = mb_b64_encode(src, len, enc);
    while (el && enc[el - 1] == '=') el--;
    for (size_t i = 0; i < el; i++) enc[i] = enc[i] == '+' ? '-' : enc[i] == '/' ? '_' : enc[i];
    size_t n = 0;
    CHECK_INT(mb_b64_decode_tolerant(enc, el, out, len, &n, NULL), MB_OK);
    CHECK_MEM(out, n, src, len);
    free(src);
    free(out);
    free(enc);
  }
}

static void test_sha256_vectors(void) {
  char hex[65];
  mb_sha256_hex("", 0, hex);
  CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  mb_sha256_hex("abc", 3, hex);
  CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  unsigned char raw[32];
  mb_sha256("abc", 3, raw);
  CHECK_INT(raw[0], 0xba);
  CHECK_INT(raw[31], 0xad);
}

static void test_sign_v1(void) {
  char sig[MB_SIGN_V1_LEN + 1];
  /* E2B SDK's secure.test.ts vector */
  CHECK_INT(mb_sign_v1("hello.txt", "read", "user", "0tQG31xiMp0IOQfaz9dcwi72L1CPo8e0", 0, sig), MB_OK);
  CHECK_STR(sig, "v1_gUtH/s9YCJWgCizjfUxuWfhFE4QSydOWEIIvfLwDr6E");
  /* with expiration and an empty user (vectors computed with Python hashlib) */
  CHECK_INT(mb_sign_v1("dir/a b.txt", "write", "", "tok", 1796025062, sig), MB_OK);
  CHECK_STR(sig, "v1_+/wdBsweCn6SSNXaGCM56ZCYeTZRl9Iyz3nrEBCWoXw");
  CHECK_INT(mb_sign_v1("x", "read", "user", "tok", -5, sig), MB_OK);
  CHECK_STR(sig, "v1_VtskQCUl25wflkNNsD0/3qm+gQIMm1eDj5Ajcgm+6Fo");
  CHECK_INT(mb_sign_v1(NULL, "read", "user", "tok", 0, sig), MB_E_INVALID);
}

int main(void) {
  MBT_RUN(test_rfc4648_vectors);
  MBT_RUN(test_strict_rejects);
  MBT_RUN(test_strict_messages);
  MBT_RUN(test_exact_capacity);
  MBT_RUN(test_random_roundtrip);
  MBT_RUN(test_tolerant_forms);
  MBT_RUN(test_tolerant_long_urlsafe);
  MBT_RUN(test_sha256_vectors);
  MBT_RUN(test_sign_v1);
  return mbt_report();
}
