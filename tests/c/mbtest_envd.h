/* mbtest_envd.h — building envd process-stream bodies in C tests: Connect envelopes, envd data
 * events (base64 of the wrapper's bytes) and mbwrap frames. Test inputs only: aborts on OOM. */
#ifndef MBTEST_ENVD_H
#define MBTEST_ENVD_H
#include "b64.h"
#include "connect.h"
#include "frames.h"
#include "mbtest_support.h"

static inline void *mbt_envd_alloc(size_t n) {
  void *p = malloc(n);
  if (!p) abort();
  return p;
}

static inline void body_envelope_n(struct body *b, int flags, const char *json, size_t len) {
  unsigned char hdr[MB_ENVELOPE_HDR];
  mb_envelope_header(hdr, (uint8_t)flags, len);
  body_add(b, hdr, sizeof hdr);
  body_add(b, json, len);
}

static inline void body_envelope(struct body *b, int flags, const char *json) {
  body_envelope_n(b, flags, json, strlen(json));
}

/* One envd data event whose `leaf` (stdout, stderr, pty) carries `raw` (the wrapper's bytes). */
static inline void body_data(struct body *b, const char *leaf, const char *raw, size_t n) {
  char *enc = mbt_envd_alloc(mb_b64_encoded_len(n) + 1);
  mb_b64_encode(raw, n, enc);
  size_t cap = strlen(enc) + 64;
  char *json = mbt_envd_alloc(cap);
  int k = snprintf(json, cap, "{\"event\":{\"data\":{\"%s\":\"%s\"}}}", leaf, enc);
  body_envelope_n(b, 0, json, (size_t)k);
  free(json);
  free(enc);
}

/* Wrapper frames for `n` bytes of program output. */
static inline void frames_data(struct body *f, int kind, const char *p, size_t n) {
  size_t cap = mb_frame_data_encoded_len(n) + 1;
  char *out = mbt_envd_alloc(cap);
  size_t len;
  if (mb_frame_encode_data(kind, p, n, out, cap, &len)) abort();
  body_add(f, out, len);
  free(out);
}
#endif
