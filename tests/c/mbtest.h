/* mbtest.h — a tiny assertion framework for the C unit tests. Each test_*.c calls MBT_RUN for its
 * test functions and returns mbt_report(), which is non-zero when any check failed. */
#ifndef MB_TEST_H
#define MB_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mbt_checks, mbt_failures;
static const char *mbt_current = "?";

static inline int mbt_check(int ok, const char *file, int line, const char *what) {
  mbt_checks++;
  if (!ok) {
    mbt_failures++;
    fprintf(stderr, "FAIL %s:%d [%s]: %s\n", file, line, mbt_current, what);
  }
  return ok;
}

#define CHECK(c) mbt_check(!!(c), __FILE__, __LINE__, #c)
#define CHECK_INT(a, b)                                                                  \
  do {                                                                                   \
    long long mbt_a = (long long)(a), mbt_b = (long long)(b);                            \
    if (!mbt_check(mbt_a == mbt_b, __FILE__, __LINE__, #a " == " #b))                    \
      fprintf(stderr, "     got %lld, want %lld\n", mbt_a, mbt_b);                       \
  } while (0)
#define CHECK_STR(a, b)                                                                  \
  do {                                                                                   \
    const char *mbt_a = (a), *mbt_b = (b);                                               \
    if (!mbt_check(mbt_a && mbt_b && strcmp(mbt_a, mbt_b) == 0, __FILE__, __LINE__,      \
                   #a " == " #b))                                                        \
      fprintf(stderr, "     got \"%s\", want \"%s\"\n", mbt_a ? mbt_a : "(null)",        \
              mbt_b ? mbt_b : "(null)");                                                 \
  } while (0)
/* Substring check, for error messages. */
#define CHECK_HAS(hay, needle)                                                           \
  do {                                                                                   \
    const char *mbt_h = (hay), *mbt_n = (needle);                                        \
    if (!mbt_check(mbt_h && strstr(mbt_h, mbt_n) != NULL, __FILE__, __LINE__,            \
                   #hay " contains " #needle))                                           \
      fprintf(stderr, "     \"%s\" lacks \"%s\"\n", mbt_h ? mbt_h : "(null)", mbt_n);    \
  } while (0)
#define CHECK_MEM(a, alen, b, blen)                                                      \
  mbt_check((size_t)(alen) == (size_t)(blen) && memcmp((a), (b), (size_t)(blen)) == 0,   \
            __FILE__, __LINE__, #a " == " #b " (bytes)")

#define MBT_RUN(fn)                                                                      \
  do {                                                                                   \
    mbt_current = #fn;                                                                   \
    int mbt_before = mbt_failures;                                                       \
    fn();                                                                                \
    printf("%s %s\n", mbt_failures == mbt_before ? "ok  " : "FAIL", #fn);                \
  } while (0)

static inline int mbt_report(void) {
  printf("%d checks, %d failed\n", mbt_checks, mbt_failures);
  /* A run that checked nothing is a broken test, not a pass. */
  return mbt_failures || mbt_checks == 0 ? 1 : 0;
}

/* Deterministic PRNG (xorshift64*) for reproducible random inputs. */
static unsigned long long mbt_rng_state = 0x9E3779B97F4A7C15ULL;
static inline unsigned long long mbt_rand(void) {
  unsigned long long x = mbt_rng_state;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  mbt_rng_state = x;
  return x * 0x2545F4914F6CDD1DULL;
}
static inline void mbt_fill(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(mbt_rand() >> 56);
}
static inline void *mbt_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
  return p;
}
#endif
