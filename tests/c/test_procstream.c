/* test_procstream.c — a process stream decoded in C: envelopes → event JSON → base64 → frames
 * → sinks, under every split of the body; tails with whole-stream offsets; queues and their
 * limit; facts kept until taken; rejections. */
#include "b64.h"
#include "connect.h"
#include "frames.h"
#include "mbtest.h"
#include "mbtest_support.h"
#include "mbtest_envd.h"
#include "procstream.h"
/* White box: the fact table's overflow guard cannot be reached through the public API (each fact
 * kind occurs at most once per stream: at most 9 of 16), so one
 * case calls the static callbacks directly. This executable therefore compiles its own copy of
 * procstream.c (the library's object is then not linked in). */
#include "procstream.c"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>





static struct mb_ps_config cfg_tail(size_t out_max, size_t err_max) {
  struct mb_ps_config c;
  memset(&c, 0, sizeof c);
  c.max_message = 1 << 20;
  c.max_line = MB_FRAME_LINE_MIN_LIMIT;
  c.sink[0] = (struct mb_ps_sink){MB_PS_TAIL, out_max};
  c.sink[1] = (struct mb_ps_sink){MB_PS_TAIL, err_max};
  return c;
}

/* Summary of all facts seen, as text: "start:41 pgid:77 ..." */
struct seen { char s[2048]; size_t n; struct body out, err; };

static void seen_take(struct seen *w, struct mb_procstream *ps) {
  struct mb_ps_fact f[MB_PS_FACTS_MAX];
  size_t n = mb_procstream_take_facts(ps, f, MB_PS_FACTS_MAX);
  static const char *const names[] = {"?", "start", "pgid", "spawn_error", "exit", "signal", "empty",
                                      "done", "end", "stream_end", "stream_error", "sink_error"};
  for (size_t i = 0; i < n; i++) {
    int k = snprintf(w->s + w->n, sizeof w->s - w->n, "%s:%lld%s%s%s%s ", names[f[i].kind],
                     f[i].value, f[i].code[0] ? "/" : "", f[i].code, f[i].text[0] ? "/" : "",
                     f[i].text);
    if (k > 0 && (size_t)k < sizeof w->s - w->n) w->n += (size_t)k;
  }
  size_t len;
  const unsigned char *p = mb_procstream_peek(ps, MB_PS_STDOUT, &len);
  if (len) body_add(&w->out, p, len);
  mb_procstream_consume(ps, MB_PS_STDOUT, len);
  p = mb_procstream_peek(ps, MB_PS_STDERR, &len);
  if (len) body_add(&w->err, p, len);
  mb_procstream_consume(ps, MB_PS_STDERR, len);
}

static void seen_free(struct seen *w) {
  free(w->out.s);
  free(w->err.s);
}

/* Pushes the body cut at `cut` (0 = whole), then finishes. */
static int feed(struct mb_procstream *ps, const struct body *b, size_t cut, struct seen *w,
                struct mb_error *err) {
  memset(w, 0, sizeof *w);
  size_t parts[2] = {cut ? cut : b->n, b->n};
  size_t prev = 0;
  for (int i = 0; i < 2; i++) {
    if (parts[i] <= prev && i) break;
    int rc = mb_procstream_push(ps, b->s + prev, parts[i] - prev, err);
    if (rc) return rc;
    seen_take(w, ps);
    prev = parts[i];
  }
  return mb_procstream_finish(ps, err);
}

static void test_every_split(void) {
  char data[3000];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (char)(i * 7 + 3);
  struct body fr = {0}, b = {0};
  body_envelope(&b, 0, "{\"event\":{\"start\":{\"pid\":41}}}");
  body_add(&fr, "!pgid 77\n", 9);
  frames_data(&fr, MB_FRAME_STDOUT, data, sizeof data);
  frames_data(&fr, MB_FRAME_STDERR, "warn\n", 5);
  body_add(&fr, "!exit 3\n!empty\n!done\n", 21);
  size_t half = fr.n / 2;
  body_data(&b, "stdout", fr.s, half);
  body_data(&b, "stderr", "mbwrap: note\n", 13);
  body_envelope(&b, 0, "{\"event\":{\"keepalive\":{}}}");
  body_data(&b, "stdout", fr.s + half, fr.n - half);
  body_envelope(&b, 0, "{\"event\":{\"end\":{\"exitCode\":0,\"exited\":true,\"status\":\"exit status 0\"}}}");
  body_envelope(&b, MB_ENVELOPE_END_STREAM, "{}");
  const char *want = "start:41 pgid:77 exit:3 empty:0 done:0 end:0/exit status 0 stream_end:0 ";
  for (size_t cut = 0; cut < b.n; cut += cut < 64 ? 1 : 37) {
    struct mb_ps_config c = cfg_tail(1000, 1000);
    c.sink[0] = (struct mb_ps_sink){MB_PS_QUEUE, 1 << 20};
    struct mb_procstream *ps = mb_procstream_new(&c);
    struct seen w;
    struct mb_error err = {0};
    int rc = feed(ps, &b, cut, &w, &err);
    if (!CHECK(rc == 0)) fprintf(stderr, "     cut %zu: %s\n", cut, err.message);
    CHECK_STR(w.s, want);
    CHECK_MEM(w.out.s, w.out.n, data, sizeof data);
    CHECK_INT(mb_procstream_total(ps, MB_PS_STDOUT), sizeof data);
    CHECK_INT(mb_procstream_total(ps, MB_PS_STDERR), 5);
    const unsigned char *a, *bb;
    size_t al, bl;
    uint64_t next;
    int lossy;
    mb_procstream_read_from(ps, MB_PS_STDERR, 0, &a, &al, &bb, &bl, &next, &lossy);
    CHECK_MEM(a, al, "warn\n", 5);
    CHECK_INT(bl, 0);
    CHECK_INT(next, 5);
    CHECK_INT(lossy, 0);
    size_t dl;
    const char *d = mb_procstream_diag(ps, &dl);
    CHECK_MEM(d, dl, "mbwrap: note\n", 13);
    seen_free(&w);
    mb_procstream_free(ps);
    if (mbt_failures) break;
  }
  free(fr.s);
  free(b.s);
}

/* The tail ring: bounded, whole-stream offsets, lossy when the offset slid out. */
static void test_tail(void) {
  struct mb_ps_config c = cfg_tail(5, 0);
  struct mb_procstream *ps = mb_procstream_new(&c);
  struct body fr = {0}, b = {0};
  body_add(&fr, "!pgid 2\n", 8);
  frames_data(&fr, MB_FRAME_STDOUT, "abc", 3);
  frames_data(&fr, MB_FRAME_STDOUT, "defg", 4);
  frames_data(&fr, MB_FRAME_STDERR, "zz", 2);
  body_data(&b, "stdout", fr.s, fr.n);
  struct mb_error err;
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  const unsigned char *a, *bb;
  size_t al, bl;
  uint64_t next;
  int lossy;
  char got[16];
#define READ(from)                                                                        \
  do {                                                                                    \
    mb_procstream_read_from(ps, MB_PS_STDOUT, (from), &a, &al, &bb, &bl, &next, &lossy);  \
    if (al) memcpy(got, a, al);                                                           \
    if (bl) memcpy(got + al, bb, bl);                                                     \
    got[al + bl] = 0;                                                                     \
  } while (0)
  READ(0);
  CHECK_STR(got, "cdefg");
  CHECK_INT(next, 7);
  CHECK_INT(lossy, 1);
  READ(5);
  CHECK_STR(got, "fg");
  CHECK_INT(lossy, 0);
  READ(7);
  CHECK_STR(got, "");
  CHECK_INT(lossy, 0);
  READ(99);
  CHECK_STR(got, "");
  CHECK_INT(next, 7);
  /* wrap-around: 3 more bytes, the ring now holds "fghij" across its end */
  fr.n = 0;
  b.n = 0;
  frames_data(&fr, MB_FRAME_STDOUT, "hij", 3);
  body_data(&b, "stdout", fr.s, fr.n);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  READ(0);
  CHECK_STR(got, "fghij");
  CHECK_INT(lossy, 1);
  READ(6);
  CHECK_STR(got, "ghij");
  CHECK_INT(lossy, 0);
  /* a zero-byte tail counts but keeps nothing */
  mb_procstream_read_from(ps, MB_PS_STDERR, 0, &a, &al, &bb, &bl, &next, &lossy);
  CHECK_INT(al + bl, 0);
  CHECK_INT(next, 2);
  CHECK_INT(lossy, 1);
  /* a chunk longer than the tail keeps its last bytes */
  fr.n = 0;
  b.n = 0;
  frames_data(&fr, MB_FRAME_STDOUT, "0123456789", 10);
  body_data(&b, "stdout", fr.s, fr.n);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  READ(15);
  CHECK_STR(got, "56789");
  CHECK_INT(next, 20);
  CHECK_INT(lossy, 0);
#undef READ
  free(fr.s);
  free(b.s);
  mb_procstream_free(ps);
}

/* Large tail filled in many small steps matches the last bytes of the stream. */
static void test_tail_growth(void) {
  struct mb_ps_config c = cfg_tail(100000, 10);
  struct mb_procstream *ps = mb_procstream_new(&c);
  struct body fr = {0}, b = {0}, all = {0};
  body_add(&fr, "!pgid 2\n", 8);
  body_data(&b, "stdout", fr.s, fr.n);
  struct mb_error err;
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  unsigned seed = 1;
  for (int round = 0; round < 200; round++) {
    char chunk[2000];
    size_t n = 1 + (seed = seed * 1103515245u + 12345u) % sizeof chunk;
    for (size_t i = 0; i < n; i++) chunk[i] = (char)(seed >> (i % 24));
    body_add(&all, chunk, n);
    fr.n = b.n = 0;
    frames_data(&fr, MB_FRAME_STDOUT, chunk, n);
    body_data(&b, "stdout", fr.s, fr.n);
    CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
    const unsigned char *a, *bb;
    size_t al, bl;
    uint64_t next;
    int lossy;
    uint64_t from = all.n > 100000 ? all.n - 100000 : 0;
    mb_procstream_read_from(ps, MB_PS_STDOUT, from, &a, &al, &bb, &bl, &next, &lossy);
    CHECK_INT(lossy, 0);
    CHECK_INT(next, all.n);
    if (!CHECK(al + bl == all.n - from)) break;
    CHECK(memcmp(a, all.s + from, al) == 0);
    if (bl) CHECK(memcmp(bb, all.s + from + al, bl) == 0);
  }
  free(fr.s);
  free(b.s);
  free(all.s);
  mb_procstream_free(ps);
}

/* A queue keeps what is not consumed across pushes, up to its limit (then the stream fails:
 * its owner must have paused the transfer long before); facts wait until taken. */
static void test_queue(void) {
  struct mb_ps_config c = cfg_tail(10, 10);
  c.sink[0] = (struct mb_ps_sink){MB_PS_QUEUE, 20};
  struct mb_procstream *ps = mb_procstream_new(&c);
  struct body fr = {0}, b = {0};
  body_add(&fr, "!pgid 2\n", 8);
  frames_data(&fr, MB_FRAME_STDOUT, "hello ", 6);
  frames_data(&fr, MB_FRAME_STDOUT, "world\n", 6);
  body_data(&b, "stdout", fr.s, fr.n);
  struct mb_error err;
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  CHECK_INT(mb_procstream_pending_facts(ps), 1);
  size_t n;
  const unsigned char *p = mb_procstream_peek(ps, MB_PS_STDOUT, &n);
  CHECK_MEM(p, n, "hello world\n", 12);
  mb_procstream_consume(ps, MB_PS_STDOUT, 6);
  fr.n = b.n = 0;
  frames_data(&fr, MB_FRAME_STDOUT, "again", 5);
  body_data(&b, "stdout", fr.s, fr.n);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  p = mb_procstream_peek(ps, MB_PS_STDOUT, &n);
  CHECK_MEM(p, n, "world\nagain", 11);
  struct mb_ps_fact f[4];
  CHECK_INT(mb_procstream_take_facts(ps, f, 4), 1);
  CHECK_INT(f[0].kind, MB_PS_PGID);
  CHECK_INT(mb_procstream_take_facts(ps, f, 4), 0);
  /* over the limit: 11 held + 10 more > 20 */
  fr.n = b.n = 0;
  frames_data(&fr, MB_FRAME_STDOUT, "0123456789", 10);
  body_data(&b, "stdout", fr.s, fr.n);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), MB_E_TOO_LARGE);
  CHECK_HAS(err.message, "limit of 20 bytes");
  mb_procstream_free(ps);
  /* discard: what is held goes, later output is only counted */
  ps = mb_procstream_new(&c);
  fr.n = b.n = 0;
  frames_data(&fr, MB_FRAME_STDOUT, "abc", 3);
  body_data(&b, "stdout", fr.s, fr.n);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  mb_procstream_discard(ps, MB_PS_STDOUT);
  mb_procstream_peek(ps, MB_PS_STDOUT, &n);
  CHECK_INT(n, 0);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  mb_procstream_peek(ps, MB_PS_STDOUT, &n);
  CHECK_INT(n, 0);
  CHECK_INT(mb_procstream_total(ps, MB_PS_STDOUT), 6);
  free(fr.s);
  free(b.s);
  mb_procstream_free(ps);
}

static void test_slow_json_and_errors(void) {
  struct mb_ps_config c = cfg_tail(100, 100);
  struct mb_error err;
  /* escaped JSON (\/ in the base64) goes through jansson and still decodes */
  struct mb_procstream *ps = mb_procstream_new(&c);
  struct body b = {0};
  char enc[64];
  mb_b64_encode("!pgid 7\no/w==\n", 14, enc); /* o/w== is the frame of byte 0xff */
  struct body j = {0};
  body_add(&j, "{\"event\": {\"data\": {\"stdout\": \"", 31);
  for (const char *p = enc; *p; p++) {
    if (*p == '/') body_add(&j, "\\/", 2);
    else body_add(&j, p, 1);
  }
  body_add(&j, "\"}}, \"x\": 1}", 12);
  body_envelope(&b, 0, j.s);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  CHECK_INT(mb_procstream_total(ps, MB_PS_STDOUT), 1);
  mb_procstream_free(ps);

  /* an end-stream error is a fact; finish then still wants !done */
  ps = mb_procstream_new(&c);
  b.n = 0;
  body_envelope(&b, MB_ENVELOPE_END_STREAM, "{\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}");
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  struct mb_ps_fact f[MB_PS_FACTS_MAX];
  CHECK_INT(mb_procstream_take_facts(ps, f, MB_PS_FACTS_MAX), 1);
  CHECK_INT(f[0].kind, MB_PS_STREAM_ERROR);
  CHECK_STR(f[0].code, "not_found");
  CHECK_STR(f[0].text, "gone");
  CHECK_INT(mb_procstream_finish(ps, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "!done");
  mb_procstream_free(ps);

  struct { const char *what; const char *json; int flags; int code; const char *msg; } bad[] = {
    {"invalid JSON", "{nope", 0, MB_E_PROTOCOL, "invalid JSON"},
    {"not an object", "[1]", 0, MB_E_PROTOCOL, "not a JSON object"},
    {"compressed", "{}", 1, MB_E_PROTOCOL, "compressed"},
    {"bad frame", NULL, 0, MB_E_PROTOCOL, "unknown frame kind"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ps = mb_procstream_new(&c);
    b.n = 0;
    if (bad[i].json) body_envelope(&b, bad[i].flags, bad[i].json);
    else body_data(&b, "stdout", "x\n", 2);
    CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), bad[i].code);
    CHECK_HAS(err.message, bad[i].msg);
    /* sticky */
    CHECK_INT(mb_procstream_push(ps, "", 0, &err), bad[i].code);
    CHECK_INT(mb_procstream_finish(ps, &err), bad[i].code);
    mb_procstream_free(ps);
  }
  /* duplicate start */
  ps = mb_procstream_new(&c);
  b.n = 0;
  body_envelope(&b, 0, "{\"event\":{\"start\":{\"pid\":1}}}");
  body_envelope(&b, 0, "{\"event\":{\"start\":{\"pid\":1}}}");
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "second start");
  mb_procstream_free(ps);
  /* max_message */
  c.max_message = 10;
  ps = mb_procstream_new(&c);
  b.n = 0;
  body_envelope(&b, 0, "{\"event\":{\"start\":{\"pid\":1}}}");
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), MB_E_TOO_LARGE);
  mb_procstream_free(ps);
  /* truncated body / no end-stream */
  c.max_message = 1000;
  ps = mb_procstream_new(&c);
  b.n = 0;
  body_envelope(&b, 0, "{\"event\":{\"start\":{\"pid\":1}}}");
  CHECK_INT(mb_procstream_push(ps, b.s, b.n - 3, &err), 0);
  CHECK_INT(mb_procstream_finish(ps, &err), MB_E_TRUNCATED);
  mb_procstream_free(ps);
  ps = mb_procstream_new(&c);
  CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
  CHECK_INT(mb_procstream_finish(ps, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "EndStream");
  mb_procstream_free(ps);
  /* invalid configurations */
  c.max_line = 0;
  CHECK(mb_procstream_new(&c) == NULL);
  c = cfg_tail(1, 1);
  c.sink[1] = (struct mb_ps_sink){MB_PS_QUEUE, 0};
  CHECK(mb_procstream_new(&c) == NULL);
  c.sink[1] = (struct mb_ps_sink){7, 0};
  CHECK(mb_procstream_new(&c) == NULL);
  free(b.s);
  free(j.s);
}

static void test_second_end(void) {
  struct mb_ps_config c = cfg_tail(100, 100);
  struct mb_error err;
  struct body b = {0};
  const char *end = "{\"event\":{\"end\":{\"exitCode\":0,\"exited\":true,\"status\":\"exit status 0\"}}}";
  body_envelope(&b, 0, end);
  /* in one push, and in two: the second end event is rejected and the error is sticky */
  for (int split = 0; split < 2; split++) {
    struct mb_procstream *ps = mb_procstream_new(&c);
    if (split) {
      CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), 0);
      struct mb_ps_fact f[MB_PS_FACTS_MAX];
      CHECK_INT(mb_procstream_take_facts(ps, f, MB_PS_FACTS_MAX), 1);
      CHECK_INT(f[0].kind, MB_PS_END);
      CHECK_INT(mb_procstream_push(ps, b.s, b.n, &err), MB_E_PROTOCOL);
    } else {
      struct body two = {0};
      body_add(&two, b.s, b.n);
      body_add(&two, b.s, b.n);
      CHECK_INT(mb_procstream_push(ps, two.s, two.n, &err), MB_E_PROTOCOL);
      free(two.s);
    }
    CHECK_HAS(err.message, "second end event");
    CHECK_INT(mb_procstream_push(ps, "", 0, &err), MB_E_PROTOCOL);
    CHECK_INT(mb_procstream_finish(ps, &err), MB_E_PROTOCOL);
    CHECK_HAS(err.message, "second end event");
    mb_procstream_free(ps);
  }
  free(b.s);
}

/* The guard of mb_ps_fact (white box, see the include above): with the table full, every
 * producer of a fact (frame, start/end event, end-of-stream) fails with MB_E_PROTOCOL "too
 * many control facts" instead of writing past it. */
static void test_too_many_facts(void) {
  struct mb_ps_config c = cfg_tail(100, 100);
  for (int producer = 0; producer < 4; producer++) {
    struct mb_procstream *ps = mb_procstream_new(&c);
    ps->nfacts = MB_PS_FACTS_MAX;
    int rc = -1;
    if (producer == 0) {
      struct mb_frame fr = {MB_FRAME_PGID, NULL, 0, 7};
      rc = mb_ps_on_frame(ps, &fr);
    } else if (producer == 1 || producer == 2) {
      json_t *ev = json_loads(producer == 1 ? "{\"event\":{\"start\":{\"pid\":1}}}"
                                            : "{\"event\":{\"end\":{\"exitCode\":0}}}", 0, NULL);
      rc = mb_ps_event(ps, ev);
      json_decref(ev);
    } else {
      struct mb_envelope env;
      memset(&env, 0, sizeof env);
      env.end_stream = 1;
      rc = mb_ps_on_envelope(ps, &env);
    }
    CHECK_INT(rc, MB_E_PROTOCOL);
    CHECK_INT(ps->nfacts, MB_PS_FACTS_MAX);
    struct mb_error err;
    CHECK_INT(mb_procstream_push(ps, "", 0, &err), MB_E_PROTOCOL); /* sticky */
    CHECK_HAS(err.message, "too many control facts");
    mb_procstream_free(ps);
  }
}

/* Raw mode: data.pty bytes are raw terminal output (frame-like text included) into the stdout
 * sink, exact under every split and through jansson too (an escaped "\/" in the base64);
 * start/end/stream_end facts as usual; finish needs no !done. In a wrapper stream the same
 * body is a protocol error (terminal bytes never come from mbwrap) and delivers no bytes. */
static void test_raw(void) {
  const char raw1[] = "$ echo h\xc3\xa9llo\r\n!exit 3\r\n";
  const char raw2[] = "h\xc3\xa9llo \xe2\x9c\x93\r\n\x1b[0m$ ";
  unsigned char bin[300];
  for (size_t i = 0; i < sizeof bin; i++) bin[i] = (unsigned char)(255 - i);
  struct body b = {0}, want = {0};
  body_envelope(&b, 0, "{\"event\":{\"start\":{\"pid\":300}}}");
  body_data(&b, "pty", raw1, sizeof raw1 - 1);
  body_envelope(&b, 0, "{\"event\":{\"keepalive\":{}}}");
  body_data(&b, "pty", raw2, sizeof raw2 - 1);
  body_data(&b, "pty", (const char *)bin, sizeof bin);
  /* "/w==" is the base64 of 0xff; "\/" makes jansson decode it */
  body_envelope(&b, 0, "{\"event\":{\"data\":{\"pty\":\"\\/w==\"}}}");
  body_envelope(&b, 0, "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":\"signal: hangup\"}}}");
  body_envelope(&b, MB_ENVELOPE_END_STREAM, "{}");
  body_add(&want, raw1, sizeof raw1 - 1);
  body_add(&want, raw2, sizeof raw2 - 1);
  body_add(&want, bin, sizeof bin);
  body_add(&want, "\xff", 1);
  for (size_t cut = 0; cut < b.n; cut += cut < 64 ? 1 : 23) {
    struct mb_ps_config c = cfg_tail(0, 0);
    c.raw = 1;
    c.max_line = 1; /* no frame decoding: a line limit cannot matter */
    c.sink[0] = (struct mb_ps_sink){MB_PS_QUEUE, 1 << 20};
    struct mb_procstream *ps = mb_procstream_new(&c);
    struct seen w;
    struct mb_error err = {0};
    int rc = feed(ps, &b, cut, &w, &err);
    if (!CHECK(rc == 0)) fprintf(stderr, "     cut %zu: %s\n", cut, err.message);
    CHECK_STR(w.s, "start:300 end:-1/signal: hangup stream_end:0 ");
    CHECK_MEM(w.out.s, w.out.n, want.s, want.n);
    CHECK_INT(w.err.n, 0);
    CHECK_INT(mb_procstream_total(ps, MB_PS_STDOUT), want.n);
    seen_free(&w);
    mb_procstream_free(ps);
    if (mbt_failures) break;
  }
  /* the same body in frames mode: rejected, no output bytes */
  {
    struct mb_ps_config c = cfg_tail(0, 0);
    c.sink[0] = (struct mb_ps_sink){MB_PS_QUEUE, 1 << 20};
    struct mb_procstream *ps = mb_procstream_new(&c);
    struct seen w;
    struct mb_error err = {0};
    CHECK(feed(ps, &b, 0, &w, &err) != 0);
    CHECK_INT(w.out.n, 0);
    CHECK_INT(mb_procstream_total(ps, MB_PS_STDOUT), 0);
    seen_free(&w);
    mb_procstream_free(ps);
  }
  /* raw mode: a tail sink, a stream error, and a truncated body */
  {
    struct mb_ps_config c = cfg_tail(4, 0);
    c.raw = 1;
    struct body e = {0};
    body_data(&e, "pty", raw2, sizeof raw2 - 1);
    body_envelope(&e, MB_ENVELOPE_END_STREAM,
                  "{\"error\":{\"code\":\"unavailable\",\"message\":\"gone\"}}");
    struct mb_procstream *ps = mb_procstream_new(&c);
    struct seen w;
    struct mb_error err = {0};
    CHECK_INT(feed(ps, &e, 0, &w, &err), 0);
    CHECK_STR(w.s, "stream_error:0/unavailable/gone ");
    const unsigned char *a, *bb;
    size_t al, bl;
    uint64_t next;
    int lossy;
    mb_procstream_read_from(ps, MB_PS_STDOUT, 0, &a, &al, &bb, &bl, &next, &lossy);
    CHECK_INT(al + bl, 4);
    CHECK_INT(next, sizeof raw2 - 1);
    CHECK_INT(lossy, 1);
    seen_free(&w);
    mb_procstream_free(ps);
    ps = mb_procstream_new(&c);
    CHECK_INT(mb_procstream_push(ps, e.s, 7, &err), 0);
    CHECK_INT(mb_procstream_finish(ps, &err), MB_E_TRUNCATED);
    mb_procstream_free(ps);
    free(e.s);
  }
  free(b.s);
  free(want.s);
}

/* The shortcut for the common binary output event, against what it must and must not take. */
static void test_proto_data_shortcut(void) {
  const unsigned char *d;
  size_t n;
  /* StartResponse{event{data{stdout: "hi"}}}, then stderr and pty */
  CHECK_INT(mb_procstream_proto_data("\x0a\x06\x12\x04\x0a\x02hi", sizeof "\x0a\x06\x12\x04\x0a\x02hi" - 1, &d, &n), 0);
  CHECK(n == 2 && memcmp(d, "hi", 2) == 0);
  CHECK_INT(mb_procstream_proto_data("\x0a\x06\x12\x04\x12\x02hi", sizeof "\x0a\x06\x12\x04\x12\x02hi" - 1, &d, &n), 1);
  CHECK_INT(mb_procstream_proto_data("\x0a\x05\x12\x03\x1a\x01!", sizeof "\x0a\x05\x12\x03\x1a\x01!" - 1, &d, &n), 2);
  CHECK_INT(mb_procstream_proto_data("\x0a\x04\x12\x02\x0a\x00", sizeof "\x0a\x04\x12\x02\x0a\x00" - 1, &d, &n), 0);   /* empty bytes */
  CHECK_INT((int)n, 0);
  /* a non-minimal varint length is still that length */
  CHECK_INT(mb_procstream_proto_data("\x0a\x86\x00\x12\x04\x0a\x02hi", sizeof "\x0a\x86\x00\x12\x04\x0a\x02hi" - 1, &d, &n), 0);
  /* anything else goes through protobuf-c */
  CHECK_INT(mb_procstream_proto_data("\x0a\x04\x0a\x02\x08\x05", sizeof "\x0a\x04\x0a\x02\x08\x05" - 1, &d, &n), -1);          /* start event */
  CHECK_INT(mb_procstream_proto_data("\x0a\x06\x12\x04\x0a\x02hi\x10\x01", sizeof "\x0a\x06\x12\x04\x0a\x02hi\x10\x01" - 1, &d, &n), -1); /* another field after */
  CHECK_INT(mb_procstream_proto_data("\x0a\x06\x12\x04\x0a\x03hi", sizeof "\x0a\x06\x12\x04\x0a\x03hi" - 1, &d, &n), -1);       /* inner length too long */
  CHECK_INT(mb_procstream_proto_data("\x0a\x06\x12\x04\x22\x02hi", sizeof "\x0a\x06\x12\x04\x22\x02hi" - 1, &d, &n), -1);       /* field 4 */
  CHECK_INT(mb_procstream_proto_data("\x0a\x06\x12\x04\x0a\x02h", sizeof "\x0a\x06\x12\x04\x0a\x02h" - 1, &d, &n), -1);         /* truncated */
  CHECK_INT(mb_procstream_proto_data("", 0, &d, &n), -1);
}

int main(void) {
  MBT_RUN(test_proto_data_shortcut);
  MBT_RUN(test_every_split);
  MBT_RUN(test_tail);
  MBT_RUN(test_tail_growth);
  MBT_RUN(test_queue);
  MBT_RUN(test_slow_json_and_errors);
  MBT_RUN(test_second_end);
  MBT_RUN(test_too_many_facts);
  MBT_RUN(test_raw);
  return mbt_report();
}
