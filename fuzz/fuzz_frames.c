/* fuzz_frames.c — libFuzzer target for the mbwrap frame decoder.
 * Input: [line-limit selector][split seed][stream...]. Properties checked:
 *  - decoding in one push and in random chunks gives the same frames and the same result;
 *  - a stream that decodes successfully is canonical: re-encoding its frames reproduces it;
 *  - decoding data frames straight into the consumer's memory (mb_frame_decoder_set_reserve,
 *    given room or refused by turns) gives the same frames and result as the decoder's buffer. */
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

static int on_frame_hash(void *ud, const struct mb_frame *f) {
  struct acc *a = ud;
  a->count++;
  int h[2] = {f->kind, f->value};
  mix(a, h, sizeof h);
  mix(a, f->data, f->len);
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

/* Room handed out from a buffer of the consumer's, every other frame (the rest: NULL). */
struct room { unsigned char buf[MB_FRAME_DATA_MAX]; unsigned calls; struct acc a; };
static unsigned char *reserve(void *ud, int kind, size_t n) {
  struct room *r = ud;
  if ((kind != MB_FRAME_STDOUT && kind != MB_FRAME_STDERR) || n > sizeof r->buf) __builtin_trap();
  return r->calls++ % 2 ? NULL : r->buf;
}
static int on_frame_room(void *ud, const struct mb_frame *f) {
  struct room *r = ud;
  r->a.count++;
  int h[2] = {f->kind, f->value};
  mix(&r->a, h, sizeof h);
  mix(&r->a, f->data, f->len);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_split_run(&split, data, size);
  if (size < 2) return 0;
  size_t max = limits[data[0] % (sizeof limits / sizeof *limits)];
  struct acc plain = {NULL, 0, 0, 0, 0};
  struct room *r = calloc(1, sizeof *r);
  struct mb_frame_decoder *d1 = mb_frame_decoder_new(max), *d2 = mb_frame_decoder_new(max);
  if (!r || !d1 || !d2) abort();
  mb_frame_decoder_set_reserve(d2, reserve, r);
  struct mb_error e1, e2;
  int r1 = mb_frame_decoder_push(d1, data + 2, size - 2, on_frame_hash, &plain, &e1);
  int r2 = mb_frame_decoder_push(d2, data + 2, size - 2, on_frame_room, r, &e2);
  if (r1 != r2 || plain.count != r->a.count || plain.hash != r->a.hash) __builtin_trap();
  if (r1 && strcmp(e1.message, e2.message) != 0) __builtin_trap();
  mb_frame_decoder_free(d1);
  mb_frame_decoder_free(d2);
  free(r);
  return 0;
}
