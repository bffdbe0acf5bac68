/* fuzz_frames.c — libFuzzer target for the mbwrap frame decoder.
 * Input: [line-limit selector][split seed][stream...]. Properties checked:
 *  - decoding in one push and in random chunks gives the same frames and the same result;
 *  - a stream that decodes successfully is canonical: re-encoding its frames reproduces it. */
#include "frames.h"
#include "fuzz_split.h"

static int on_frame(void *ud, const struct mb_frame *f) {
  struct acc *a = ud;
  a->count++;
  int h[2] = {f->kind, f->value};
  mix(a, h, sizeof h);
  mix(a, f->data, f->len);
  size_t k;
  if (mb_frame_encode(f, (char *)a->out + a->n, a->cap - a->n, &k) != MB_OK) __builtin_trap();
  a->n += k;
  return 0;
}

static void *dec_open(size_t max) { return mb_frame_decoder_new(max); }
static int dec_push(void *dec, const uint8_t *d, size_t n, struct acc *a, struct mb_error *err) {
  return mb_frame_decoder_push(dec, d, n, on_frame, a, err);
}
static int dec_finish(void *dec, struct mb_error *err) { return mb_frame_decoder_finish(dec, err); }
static void dec_close(void *dec) { mb_frame_decoder_free(dec); }

static const size_t limits[] = {1, 8, 64, 4096, MB_FRAME_LINE_MIN_LIMIT};
static const struct fuzz_split split = {limits, sizeof limits / sizeof *limits, 37, dec_open, dec_push, dec_finish, dec_close};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_split_run(&split, data, size); }
