/* bench_decode.c — decoding throughput of the process-output path vs memcpy, in one run.
 * Input as envd delivers it: Connect envelopes whose JSON payload carries base64 `stdout` bytes
 * (`{"event":{"data":{"stdout":"..."}}}`), those bytes being mbwrap's frame stream of large `o`
 * frames. Decoding = envelope decoder + mb_connect_json_bytes (the field's base64) + frame
 * decoder (incl. its base64) delivering the program's bytes to a sink. The same pipeline with
 * every message parsed by jansson is reported as a stage. Fed in 16 KiB chunks
 * (libcurl's write size). Throughput counts input bytes; best of several runs each.
 * Then the client's real decoder, mb_procstream (a 1 MiB tail sink, as collect mode), on the same
 * frame stream in both of envd's codecs as sandboxd sends them (256 KiB of frames per event):
 * binary Connect (one base64 layer, the frames') and JSON (two), each against a memcpy of its own
 * input. Goal: ≤ 5× memcpy in the binary codec.
 * Usage: bench_decode [MiB=64] [runs=5] */
#pragma GCC diagnostic ignored "-Wmissing-braces" /* protoc-c's *__INIT macros of oneof unions */
#include "b64.h"
#include "connect.h"
#include "frames.h"
#include "procstream.h"
#include "envd/process.pb-c.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FEED 16384          /* bytes per push, like a libcurl write callback */
#define ENV_STDOUT 32768    /* frame-stream bytes per envelope (envd's read size order) */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) { fprintf(stderr, "bench_decode: out of memory (%zu bytes)\n", n); exit(1); }
  return p;
}

struct sink { unsigned char *buf; size_t n, cap; };
struct ctx {
  struct mb_frame_decoder *fd;
  struct sink *sink;
  unsigned char *tmp; /* decoded JSON bytes field */
  size_t tmp_cap;
  unsigned opts;      /* MB_CONNECT_JSON_SLOW: parse every message with jansson */
};

static int on_frame(void *ud, const struct mb_frame *f) {
  struct sink *s = ud;
  if (f->kind == MB_FRAME_STDOUT) {
    if (f->len > s->cap - s->n) return MB_E_TOO_LARGE;
    memcpy(s->buf + s->n, f->data, f->len);
    s->n += f->len;
  }
  return 0;
}

static const char *const PATH[] = {"event", "data"};
static const char *const LEAVES[] = {"stdout", "stderr", "pty"};

static int on_env(void *ud, const struct mb_envelope *e) {
  struct ctx *c = ud;
  if (e->end_stream) return e->has_error ? MB_E_PROTOCOL : 0;
  size_t n;
  int leaf;
  json_t *root;
  struct mb_error err;
  int rc = mb_connect_json_bytes(e->data, e->len, PATH, 2, LEAVES, 3, c->opts, c->tmp, c->tmp_cap,
                                 &n, &leaf, &root, &err);
  if (rc) return rc;
  if (leaf != 0) { json_decref(root); return MB_E_PROTOCOL; }
  return mb_frame_decoder_push(c->fd, c->tmp, n, on_frame, c->sink, &err);
}

/* Runs the full decode; returns seconds, or a negative value on failure. */
static double run_decode(const unsigned char *in, size_t len, struct sink *sink, unsigned opts) {
  struct ctx c = {mb_frame_decoder_new(MB_FRAME_LINE_MIN_LIMIT), sink, NULL, ENV_STDOUT, opts};
  struct mb_envelope_decoder *ed = mb_envelope_decoder_new(1 << 20);
  c.tmp = xmalloc(c.tmp_cap);
  sink->n = 0;
  struct mb_error err;
  double t0 = now();
  int rc = 0;
  for (size_t off = 0; off < len && !rc; off += FEED)
    rc = mb_envelope_decoder_push(ed, in + off, len - off < FEED ? len - off : FEED, on_env, &c, &err);
  if (!rc) rc = mb_envelope_decoder_finish(ed, &err);
  if (!rc) rc = mb_frame_decoder_finish(c.fd, &err);
  double t = now() - t0;
  if (rc) fprintf(stderr, "decode failed: %s: %s\n", mb_errcode(rc), err.message);
  mb_envelope_decoder_free(ed);
  mb_frame_decoder_free(c.fd);
  free(c.tmp);
  return rc ? -1 : t;
}

/* Stage timings on the same input, for finding the hot spot. */
static double run_frames_only(const char *frames, size_t len, struct sink *sink) {
  struct mb_frame_decoder *fd = mb_frame_decoder_new(MB_FRAME_LINE_MIN_LIMIT);
  struct mb_error err;
  sink->n = 0;
  double t0 = now();
  int rc = 0;
  for (size_t off = 0; off < len && !rc; off += FEED)
    rc = mb_frame_decoder_push(fd, frames + off, len - off < FEED ? len - off : FEED, on_frame, sink, &err);
  double t = now() - t0;
  mb_frame_decoder_free(fd);
  return rc ? -1 : t;
}

static int count_env(void *ud, const struct mb_envelope *e) {
  (*(size_t *)ud) += e->len;
  return 0;
}

static double run_envelopes_only(const unsigned char *in, size_t len) {
  struct mb_envelope_decoder *ed = mb_envelope_decoder_new(1 << 20);
  struct mb_error err;
  size_t total = 0;
  double t0 = now();
  int rc = 0;
  for (size_t off = 0; off < len && !rc; off += FEED)
    rc = mb_envelope_decoder_push(ed, in + off, len - off < FEED ? len - off : FEED, count_env, &total, &err);
  double t = now() - t0;
  mb_envelope_decoder_free(ed);
  return rc || total == 0 ? -1 : t;
}

static double run_memcpy(const unsigned char *in, size_t len, unsigned char *dst) {
  double t0 = now();
  memcpy(dst, in, len);
  double t = now() - t0;
  /* keep the copy observable so it cannot be elided */
  if (memcmp(dst + len / 2, in + len / 2, 16) != 0) return -1;
  return t;
}

#define PS_EVENT (256u << 10) /* frame-stream bytes per event: sandboxd's read size */

/* The frame stream as sandboxd's envd stream carries it: start, data events, end, end-stream. */
static unsigned char *ps_input(const char *frames, size_t fr_len, int proto, size_t *out_len) {
  size_t cap = fr_len / 3 * 4 + fr_len + (fr_len / PS_EVENT + 8) * 128 + 4096, len = 0, k;
  unsigned char *in = xmalloc(cap), *msg = xmalloc(PS_EVENT / 3 * 4 + 256);
  for (size_t off = 0; off < fr_len; off += PS_EVENT) {
    size_t n = fr_len - off < PS_EVENT ? fr_len - off : PS_EVENT, m;
    if (proto) {
      Process__ProcessEvent__DataEvent de = PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
      de.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
      de.stdout = (ProtobufCBinaryData){n, (uint8_t *)(frames + off)};
      Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
      ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
      ev.data = &de;
      Process__StartResponse sr = PROCESS__START_RESPONSE__INIT;
      sr.event = &ev;
      m = protobuf_c_message_pack(&sr.base, msg);
    } else {
      m = (size_t)sprintf((char *)msg, "{\"event\":{\"data\":{\"stdout\":\"");
      m += mb_b64_encode(frames + off, n, (char *)msg + m);
      m += (size_t)sprintf((char *)msg + m, "\"}}}");
    }
    mb_envelope_encode(0, msg, m, in + len, cap - len, &k);
    len += k;
  }
  mb_envelope_encode(2, "{}", 2, in + len, cap - len, &k);
  len += k;
  free(msg);
  *out_len = len;
  return in;
}

/* mb_procstream over in (FEED bytes per push); seconds, or < 0 when the output is not raw's. */
static double run_ps(const unsigned char *in, size_t len, int proto, const unsigned char *raw, size_t raw_len) {
  struct mb_ps_config cfg = {.max_message = 4 << 20, .max_line = MB_FRAME_LINE_DEFAULT, .proto = proto,
                             .sink = {{MB_PS_TAIL, 1 << 20}, {MB_PS_TAIL, 4096}}};
  struct mb_procstream *ps = mb_procstream_new(&cfg);
  struct mb_error err;
  double t0 = now();
  int rc = 0;
  for (size_t off = 0; off < len && !rc; off += FEED)
    rc = mb_procstream_push(ps, in + off, len - off < FEED ? len - off : FEED, &err);
  if (!rc) rc = mb_procstream_finish(ps, &err);
  double t = now() - t0;
  if (rc) fprintf(stderr, "procstream failed: %s: %s\n", mb_errcode(rc), err.message);
  const unsigned char *a, *b;
  size_t al, bl;
  uint64_t next;
  int lossy;
  mb_procstream_read_from(ps, MB_PS_STDOUT, raw_len - (1 << 20), &a, &al, &b, &bl, &next, &lossy);
  if (!rc && (next != raw_len || al + bl != (1 << 20) || memcmp(a, raw + raw_len - (1 << 20), al) != 0 ||
              (bl && memcmp(b, raw + raw_len - (1 << 20) + al, bl) != 0))) {
    fprintf(stderr, "procstream output differs from the program's\n");
    rc = 1;
  }
  mb_procstream_free(ps);
  return rc ? -1 : t;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  int runs = argc > 2 ? atoi(argv[2]) : 5;
  if (mib == 0 || mib > 4096 || runs < 1) { fprintf(stderr, "usage: bench_decode [MiB 1..4096] [runs]\n"); return 2; }
  size_t raw_len = mib << 20;

  /* program output (xorshift bytes) → frame stream */
  unsigned char *raw = xmalloc(raw_len);
  unsigned long long x = 88172645463325252ULL;
  for (size_t i = 0; i < raw_len; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; raw[i] = (unsigned char)x; }
  size_t fr_len = mb_frame_data_encoded_len(raw_len);
  char *frames = xmalloc(fr_len + 64);
  size_t k;
  if (mb_frame_encode_data(MB_FRAME_STDOUT, raw, raw_len, frames, fr_len, &k)) return 1;
  struct mb_frame tail[] = {{MB_FRAME_EXIT, NULL, 0, 0}, {MB_FRAME_EMPTY, NULL, 0, 0}, {MB_FRAME_DONE, NULL, 0, 0}};
  for (int i = 0; i < 3; i++) {
    size_t t;
    mb_frame_encode(&tail[i], frames + k, fr_len + 64 - k, &t);
    k += t;
  }
  fr_len = k;

  /* frame stream → envelopes with JSON + base64 */
  size_t nenv = fr_len / ENV_STDOUT + 2;
  size_t env_cap = nenv * (mb_b64_encoded_len(ENV_STDOUT) + 64) + 64;
  unsigned char *in = xmalloc(env_cap);
  char *json = xmalloc(mb_b64_encoded_len(ENV_STDOUT) + 64);
  size_t len = 0;
  for (size_t off = 0; off < fr_len; off += ENV_STDOUT) {
    size_t n = fr_len - off < ENV_STDOUT ? fr_len - off : ENV_STDOUT;
    size_t j = (size_t)sprintf(json, "{\"event\":{\"data\":{\"stdout\":\"");
    j += mb_b64_encode(frames + off, n, json + j);
    j += (size_t)sprintf(json + j, "\"}}}");
    mb_envelope_encode(0, json, j, in + len, env_cap - len, &k);
    len += k;
  }
  mb_envelope_encode(2, "{}", 2, in + len, env_cap - len, &k);
  len += k;

  struct sink sink = {xmalloc(raw_len), 0, raw_len};
  unsigned char *dst = xmalloc(len);
  memset(dst, 0, len); /* fault the pages in before timing */
  double best_dec = 1e9, best_slow = 1e9, best_mem = 1e9, best_fr = 1e9, best_env = 1e9;
  for (int r = 0; r < runs; r++) {
    for (int slow = 0; slow < 2; slow++) {
      double t = run_decode(in, len, &sink, slow ? MB_CONNECT_JSON_SLOW : 0);
      if (t < 0) return 1;
      if (sink.n != raw_len || memcmp(sink.buf, raw, raw_len) != 0) {
        fprintf(stderr, "decoded bytes differ from the input\n");
        return 1;
      }
      if (slow && t < best_slow) best_slow = t;
      if (!slow && t < best_dec) best_dec = t;
    }
    double tm = run_memcpy(in, len, dst);
    double tf = run_frames_only(frames, fr_len, &sink);
    double te = run_envelopes_only(in, len);
    if (tm < 0 || tf < 0 || te < 0) return 1;
    if (tm < best_mem) best_mem = tm;
    if (tf < best_fr) best_fr = tf;
    if (te < best_env) best_env = te;
  }
  double mb = (double)len / 1e6;
  printf("input %.1f MB of envelopes (%zu MiB program output), best of %d runs\n", mb, mib, runs);
  printf("stage envelopes only   MB/s %.0f\n", mb / best_env);
  printf("stage frames only      MB/s %.0f (of %.1f MB frame stream)\n", (double)fr_len / 1e6 / best_fr, (double)fr_len / 1e6);
  printf("stage all via jansson  MB/s %.0f (ratio %.1f)\n", mb / best_slow, best_slow / best_mem);
  printf("decode MB/s %.0f\n", mb / best_dec);
  printf("memcpy MB/s %.0f\n", mb / best_mem);
  printf("ratio_vs_memcpy=%.2f (pipeline above, JSON codec)\n", best_dec / best_mem);
  /* The client's decoder as it runs: procstream, both codecs, each against its own input's memcpy. */
  int fail = 0;
  for (int proto = 1; proto >= 0; proto--) {
    size_t plen;
    unsigned char *pin = ps_input(frames, fr_len, proto, &plen);
    unsigned char *pdst = xmalloc(plen);
    memset(pdst, 0, plen);
    double bp = 1e9, bm = 1e9;
    for (int r = 0; r < runs; r++) {
      double tp = run_ps(pin, plen, proto, raw, raw_len), tm = run_memcpy(pin, plen, pdst);
      if (tp < 0 || tm < 0) { fail = 1; break; }
      if (tp < bp) bp = tp;
      if (tm < bm) bm = tm;
    }
    if (!fail)
      printf("procstream %-5s input %.1f MB: decode MB/s %.0f, memcpy MB/s %.0f, ratio_vs_memcpy=%.2f%s\n",
             proto ? "proto" : "json", (double)plen / 1e6, (double)plen / 1e6 / bp, (double)plen / 1e6 / bm, bp / bm,
             proto ? (bp / bm <= 5.0 ? " (goal <= 5x: met)" : " (goal <= 5x: over goal)") : "");
    free(pin);
    free(pdst);
  }
  free(raw); free(frames); free(in); free(json); free(sink.buf); free(dst);
  return fail;
}
