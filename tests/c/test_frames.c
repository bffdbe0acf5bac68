/* test_frames.c — mbwrap frame decoder: every kind, every rejection of PROTOCOL.md, any split. */
#include "b64.h"
#include "frames.h"
#include "mbtest.h"

#define MAXLINE MB_FRAME_LINE_MIN_LIMIT

struct log { char *s; size_t n, cap; int count, stop_after; };

static void log_add(struct log *l, const char *p, size_t n) {
  if (l->n + n + 1 > l->cap) {
    l->cap = (l->n + n + 1) * 2;
    char *ns = realloc(l->s, l->cap);
    if (!ns) abort();
    l->s = ns;
  }
  memcpy(l->s + l->n, p, n);
  l->n += n;
  l->s[l->n] = '\0';
}

static int log_cb(void *ud, const struct mb_frame *f) {
  struct log *l = ud;
  char head[64];
  int k = snprintf(head, sizeof head, "[%s %d ", mb_frame_kind_name(f->kind), f->value);
  log_add(l, head, (size_t)k);
  if (f->len) log_add(l, (const char *)f->data, f->len);
  log_add(l, "]", 1);
  l->count++;
  return l->stop_after && l->count >= l->stop_after ? MB_E_CANCELED : 0;
}

static void log_reset(struct log *l) {
  l->n = 0;
  l->count = 0;
  if (l->s) l->s[0] = '\0';
}

/* Decodes s cut at the given points, then finishes. */
static int run(const char *s, size_t len, const size_t *cuts, size_t ncuts, size_t max_line,
               struct log *l, struct mb_error *err) {
  struct mb_frame_decoder *d = mb_frame_decoder_new(max_line);
  log_reset(l);
  size_t prev = 0;
  int rc = 0;
  for (size_t i = 0; i <= ncuts && !rc; i++) {
    size_t end = i < ncuts ? cuts[i] : len;
    rc = mb_frame_decoder_push(d, s + prev, end - prev, log_cb, l, err);
    prev = end;
  }
  if (!rc) rc = mb_frame_decoder_finish(d, err);
  mb_frame_decoder_free(d);
  return rc;
}

static int run1(const char *s, struct log *l, struct mb_error *err) {
  return run(s, strlen(s), NULL, 0, MAXLINE, l, err);
}

/* pgid, stdout "hi\n", stderr "oops", exit 3, empty, done */
static const char *GOOD = "!pgid 4242\noaGkK\neb29wcw==\n!exit 3\n!empty\n!done\n";
static const char *GOOD_LOG = "[pgid 4242 ][stdout 0 hi\n][stderr 0 oops][exit 3 ][empty 0 ][done 0 ]";

static void test_all_kinds(void) {
  struct log l = {0};
  struct mb_error err;
  CHECK_INT(run1(GOOD, &l, &err), MB_OK);
  CHECK_STR(l.s, GOOD_LOG);
  CHECK_INT(run1("!pgid 7\n!signal 9\n!empty\n!done\n", &l, &err), MB_OK);
  CHECK_STR(l.s, "[pgid 7 ][signal 9 ][empty 0 ][done 0 ]");
  /* spawn error: "No such file" in base64, errno 2 */
  CHECK_INT(run1("!pgid 7\n!spawn-error 2 Tm8gc3VjaCBmaWxl\n!empty\n!done\n", &l, &err), MB_OK);
  CHECK_STR(l.s, "[pgid 7 ][spawn_error 2 No such file][empty 0 ][done 0 ]");
  CHECK_INT(run1("!spawn-error 13 \n!done\n", &l, &err), MB_OK);
  CHECK_STR(l.s, "[spawn_error 13 ][done 0 ]");
  /* tool mode: no pgid, no empty */
  CHECK_INT(run1("oeA==\n!exit 0\n!done\n", &l, &err), MB_OK);
  CHECK_STR(l.s, "[stdout 0 x][exit 0 ][done 0 ]");
  /* data may follow the exit status (descendants still writing) */
  CHECK_INT(run1("!exit 255\neeA==\n!empty\noeA==\n!done\n", &l, &err), MB_OK);
  CHECK_INT(run1("!signal 64\n!done\n", &l, &err), MB_OK);
  free(l.s);
}

static void test_every_split(void) {
  struct log l = {0};
  struct mb_error err;
  size_t len = strlen(GOOD);
  int bad = 0;
  for (size_t a = 0; a <= len; a++)
    for (size_t b = a; b <= len; b++) {
      size_t cuts[2] = {a, b};
      if (run(GOOD, len, cuts, 2, MAXLINE, &l, &err) != MB_OK || strcmp(l.s, GOOD_LOG) != 0) bad++;
    }
  CHECK_INT(bad, 0);
  size_t cuts[128];
  for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
  CHECK_INT(run(GOOD, len, cuts, len - 1, MAXLINE, &l, &err), MB_OK);
  CHECK_STR(l.s, GOOD_LOG);
  free(l.s);
}

/* Expects rejection with the given code and message fragment, both whole and in 1-byte chunks. */
static void expect_reject(const char *s, int code, const char *fragment, int line) {
  struct log l = {0};
  struct mb_error err;
  size_t len = strlen(s);
  int rc = run(s, len, NULL, 0, MAXLINE, &l, &err);
  if (!CHECK(rc == code) || !CHECK(strstr(err.message, fragment) != NULL))
    fprintf(stderr, "     line %d: input \"%s\": got %d \"%s\"\n", line, s, rc, err.message);
  size_t *cuts = mbt_xmalloc(len * sizeof *cuts);
  for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
  rc = run(s, len, cuts, len ? len - 1 : 0, MAXLINE, &l, &err);
  if (!CHECK(rc == code) || !CHECK(strstr(err.message, fragment) != NULL))
    fprintf(stderr, "     line %d (1-byte chunks): got %d \"%s\"\n", line, rc, err.message);
  free(cuts);
  free(l.s);
}
#define REJECT(s, code, frag) expect_reject(s, code, frag, __LINE__)

static void test_bad_base64(void) {
  REJECT("oaGkK=\n", MB_E_PROTOCOL, "'o' frame: base64 length");
  REJECT("oaG\n", MB_E_PROTOCOL, "frame 1: 'o' frame");
  REJECT("eaG*K\n", MB_E_PROTOCOL, "'e' frame");
  REJECT("oaGk-\n", MB_E_PROTOCOL, "base64");
  REJECT("oaR==\n", MB_E_PROTOCOL, "non-canonical");  /* unused bits set */
  REJECT("oaGl=\n", MB_E_PROTOCOL, "non-canonical");
  REJECT("oaG==\n", MB_E_PROTOCOL, "base64");
  REJECT("oaGk\r\n", MB_E_PROTOCOL, "base64");
  REJECT("o aGk\n", MB_E_PROTOCOL, "base64");
  REJECT("o\n", MB_E_PROTOCOL, "without data");
  REJECT("!spawn-error 2 Tm8*\n", MB_E_PROTOCOL, "!spawn-error message");
}

static void test_control_rejects(void) {
  REJECT("!pgid 5\n!pgid 5\n", MB_E_PROTOCOL, "frame 2: duplicate !pgid");
  REJECT("oeA==\n!pgid 5\n", MB_E_PROTOCOL, "!pgid must be the first frame");
  REJECT("!pgid 1\n", MB_E_PROTOCOL, "decimal id > 1");
  REJECT("!pgid 05\n", MB_E_PROTOCOL, "decimal id");
  REJECT("!pgid +5\n", MB_E_PROTOCOL, "decimal id");
  REJECT("!pgid\n", MB_E_PROTOCOL, "decimal id");
  REJECT("!pgid 99999999999\n", MB_E_PROTOCOL, "decimal id");
  REJECT("!exit 1\n!exit 1\n", MB_E_PROTOCOL, "duplicate !exit");
  REJECT("!signal 9\n!signal 9\n", MB_E_PROTOCOL, "duplicate !signal");
  REJECT("!exit 1\n!signal 9\n", MB_E_PROTOCOL, "!exit together with !signal");
  REJECT("!signal 9\n!exit 1\n", MB_E_PROTOCOL, "!exit together with !signal");
  REJECT("!exit 256\n", MB_E_PROTOCOL, "code 0..255");
  REJECT("!exit -1\n", MB_E_PROTOCOL, "code 0..255");
  REJECT("!exit 1 \n", MB_E_PROTOCOL, "code 0..255");
  REJECT("!signal 0\n", MB_E_PROTOCOL, "signal 1..64");
  REJECT("!signal 65\n", MB_E_PROTOCOL, "signal 1..64");
  REJECT("!exit 0\n!empty\n!empty\n", MB_E_PROTOCOL, "duplicate !empty");
  REJECT("!empty\n", MB_E_PROTOCOL, "!empty before !exit");
  REJECT("!exit 0\n!empty\n!exit 0\n", MB_E_PROTOCOL, "duplicate !exit");
  REJECT("!signal 2\n!empty\n!exit 0\n", MB_E_PROTOCOL, "together with");
  REJECT("!exit 0\n!empty x\n", MB_E_PROTOCOL, "takes no argument");
  REJECT("!exit 0\n!done \n", MB_E_PROTOCOL, "takes no argument");
  REJECT("!done\n", MB_E_PROTOCOL, "!done before !exit");
  REJECT("!spawn-error 2 \n!spawn-error 2 \n", MB_E_PROTOCOL, "duplicate !spawn-error");
  REJECT("!spawn-error 2 \n!exit 1\n", MB_E_PROTOCOL, "!exit after !spawn-error");
  REJECT("!spawn-error 2 \n!signal 9\n", MB_E_PROTOCOL, "!signal after !spawn-error");
  REJECT("oeA==\n!spawn-error 2 \n", MB_E_PROTOCOL, "right after !pgid");
  REJECT("!spawn-error 0 \n", MB_E_PROTOCOL, "errno 1..4095");
  REJECT("!spawn-error 2\n", MB_E_PROTOCOL, "errno 1..4095");
  REJECT("!bogus 1\n", MB_E_PROTOCOL, "unknown control frame '!bogus'");
  REJECT("!\n", MB_E_PROTOCOL, "unknown control frame");
  REJECT("x123\n", MB_E_PROTOCOL, "unknown frame kind 0x78");
  REJECT("\n", MB_E_PROTOCOL, "frame 1: empty line");
}

static void test_stream_end_rejects(void) {
  REJECT("!exit 0\n!done\n!exit 0\n", MB_E_PROTOCOL, "frame 3: data after !done");
  REJECT("!exit 0\n!done\noeA==\n", MB_E_PROTOCOL, "data after !done");
  REJECT("!exit 0\n!done\nx", MB_E_PROTOCOL, "data after !done");
  REJECT("!pgid 5\noeA==\n!exit 0\n", MB_E_PROTOCOL, "incomplete");
  REJECT("", MB_E_PROTOCOL, "incomplete");
  REJECT("!pgid 5\noeA==", MB_E_TRUNCATED, "no newline");
  REJECT("!exit 0\n!done", MB_E_TRUNCATED, "truncated");
}

static void test_line_limit(void) {
  struct log l = {0};
  struct mb_error err;
  /* max_line 8: "oYWJjZA==" is 9 bytes, "oYWJj" 5 */
  const char *s = "oYWJj\n!exit 0\n!done\n";
  CHECK_INT(run(s, strlen(s), NULL, 0, 8, &l, &err), MB_OK);
  const char *exact = "oYWJjZGVm\n!exit 0\n!done\n"; /* 9-byte line */
  CHECK_INT(run(exact, strlen(exact), NULL, 0, 9, &l, &err), MB_OK);
  CHECK_INT(run(exact, strlen(exact), NULL, 0, 8, &l, &err), MB_E_TOO_LARGE);
  CHECK_HAS(err.message, "line exceeds 8 bytes");
  for (size_t a = 1; a < 12; a++) { /* any split, including inside the long line */
    size_t cuts[1] = {a};
    CHECK_INT(run(exact, strlen(exact), cuts, 1, 8, &l, &err), MB_E_TOO_LARGE);
    CHECK_INT(run(exact, strlen(exact), cuts, 1, 9, &l, &err), MB_OK);
  }
  /* a long line without any newline is rejected as soon as it passes the limit */
  struct mb_frame_decoder *d = mb_frame_decoder_new(8);
  CHECK_INT(mb_frame_decoder_push(d, "oAAAAAAA", 8, log_cb, &l, &err), MB_OK);
  CHECK_INT(mb_frame_decoder_push(d, "A", 1, log_cb, &l, &err), MB_E_TOO_LARGE);
  CHECK_INT(mb_frame_decoder_finish(d, &err), MB_E_TOO_LARGE); /* sticky */
  mb_frame_decoder_free(d);
  free(l.s);
}

static void test_data_frame_size(void) {
  struct log l = {0};
  struct mb_error err;
  size_t big = MB_FRAME_DATA_MAX + 3;
  unsigned char *raw = mbt_xmalloc(big);
  mbt_fill(raw, big);
  char *line = mbt_xmalloc(mb_b64_encoded_len(big) + 32);
  line[0] = 'o';
  size_t n = 1 + mb_b64_encode(raw, MB_FRAME_DATA_MAX, line + 1);
  memcpy(line + n, "\n!exit 0\n!done\n", 16);
  CHECK_INT(run1(line, &l, &err), MB_OK);
  CHECK_INT(l.count, 3);
  n = 1 + mb_b64_encode(raw, big, line + 1);
  memcpy(line + n, "\n!exit 0\n!done\n", 16);
  CHECK_INT(run(line, strlen(line), NULL, 0, 1 << 20, &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "more than 24576 bytes");
  free(raw);
  free(line);
  free(l.s);
}

struct collect { unsigned char *data; size_t n, cap; struct log other; };

static int collect_cb(void *ud, const struct mb_frame *f) {
  struct collect *c = ud;
  if (f->kind != MB_FRAME_STDERR) return log_cb(&c->other, f);
  if (f->len > c->cap - c->n) return MB_E_TOO_LARGE;
  memcpy(c->data + c->n, f->data, f->len);
  c->n += f->len;
  return 0;
}

static void test_encoder_roundtrip(void) {
  size_t len = 60000; /* three frames: 24576 + 24576 + 10848 */
  unsigned char *raw = mbt_xmalloc(len);
  mbt_fill(raw, len);
  size_t cap = mb_frame_data_encoded_len(len) + 64;
  char *buf = mbt_xmalloc(cap);
  size_t off = 0, k;
  struct mb_frame pg = {MB_FRAME_PGID, NULL, 0, 123};
  CHECK_INT(mb_frame_encode(&pg, buf, cap, &k), MB_OK);
  CHECK_MEM(buf, k, "!pgid 123\n", 10);
  off += k;
  CHECK_INT(mb_frame_encode_data(MB_FRAME_STDERR, raw, len, buf + off, cap - off, &k), MB_OK);
  CHECK_INT(k, mb_frame_data_encoded_len(len));
  off += k;
  struct mb_frame tail[] = {{MB_FRAME_SIGNAL, NULL, 0, 15}, {MB_FRAME_EMPTY, NULL, 0, 0},
                            {MB_FRAME_DONE, NULL, 0, 0}};
  for (int i = 0; i < 3; i++) {
    CHECK_INT(mb_frame_encode(&tail[i], buf + off, cap - off, &k), MB_OK);
    CHECK_INT(k, mb_frame_encoded_len(&tail[i]));
    off += k;
  }
  /* decode, collecting the stderr bytes and logging the rest */
  struct mb_frame_decoder *d = mb_frame_decoder_new(MAXLINE);
  struct collect c = {mbt_xmalloc(len), 0, len, {0}};
  struct mb_error err;
  for (size_t i = 0; i < off; i += 1000) {
    size_t n = off - i < 1000 ? off - i : 1000;
    CHECK_INT(mb_frame_decoder_push(d, buf + i, n, collect_cb, &c, &err), MB_OK);
  }
  CHECK_INT(mb_frame_decoder_finish(d, &err), MB_OK);
  mb_frame_decoder_free(d);
  CHECK_MEM(c.data, c.n, raw, len);
  CHECK_STR(c.other.s, "[pgid 123 ][signal 15 ][empty 0 ][done 0 ]");
  free(c.data);
  free(c.other.s);
  free(raw);
  free(buf);
}

static void test_spawn_error_roundtrip(void) {
  struct mb_frame f = {MB_FRAME_SPAWN_ERROR, (const unsigned char *)"Permission denied", 17, 13};
  char buf[128];
  size_t k;
  CHECK_INT(mb_frame_encode(&f, buf, sizeof buf, &k), MB_OK);
  CHECK_INT(k, mb_frame_encoded_len(&f));
  CHECK_MEM(buf, k, "!spawn-error 13 UGVybWlzc2lvbiBkZW5pZWQ=\n", k);
  struct log l = {0};
  struct mb_error err;
  memcpy(buf + k, "!done\n", 7);
  CHECK_INT(run1(buf, &l, &err), MB_OK);
  CHECK_STR(l.s, "[spawn_error 13 Permission denied][done 0 ]");
  free(l.s);
}

static void test_encoder_rejects(void) {
  char buf[64];
  size_t k;
  struct mb_frame bad[] = {
    {MB_FRAME_STDOUT, (const unsigned char *)"", 0, 0},
    {MB_FRAME_STDOUT, (const unsigned char *)"x", MB_FRAME_DATA_MAX + 1, 0},
    {MB_FRAME_PGID, NULL, 0, 1},       {MB_FRAME_EXIT, NULL, 0, 256},
    {MB_FRAME_EXIT, NULL, 0, -1},      {MB_FRAME_SIGNAL, NULL, 0, 0},
    {MB_FRAME_SIGNAL, NULL, 0, 65},    {MB_FRAME_SPAWN_ERROR, NULL, 0, 0},
    {0, NULL, 0, 0},                   {99, NULL, 0, 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_INT(mb_frame_encode(&bad[i], buf, sizeof buf, &k), MB_E_INVALID);
    CHECK_INT(k, 0);
  }
  struct mb_frame ok = {MB_FRAME_EXIT, NULL, 0, 255};
  CHECK_INT(mb_frame_encode(&ok, buf, 9, &k), MB_E_TOO_LARGE); /* "!exit 255\n" is 10 */
  CHECK_INT(mb_frame_encode(&ok, buf, 10, &k), MB_OK);
  CHECK_MEM(buf, k, "!exit 255\n", 10);
  CHECK_INT(mb_frame_encode_data(MB_FRAME_STDOUT, "abc", 0, buf, sizeof buf, &k), MB_E_INVALID);
  CHECK_INT(mb_frame_encode_data(MB_FRAME_PGID, "abc", 3, buf, sizeof buf, &k), MB_E_INVALID);
  CHECK_INT(mb_frame_encode_data(MB_FRAME_STDOUT, "abc", 3, buf, 5, &k), MB_E_TOO_LARGE);
  CHECK(mb_frame_kind_name(0) == NULL);
  CHECK(mb_frame_kind_name(MB_FRAME_DONE + 1) == NULL);
  CHECK_STR(mb_frame_kind_name(MB_FRAME_SPAWN_ERROR), "spawn_error");
}

static void test_callback_stops(void) {
  struct mb_frame_decoder *d = mb_frame_decoder_new(MAXLINE);
  struct log l = {0};
  l.stop_after = 2;
  struct mb_error err;
  CHECK_INT(mb_frame_decoder_push(d, GOOD, strlen(GOOD), log_cb, &l, &err), MB_E_CANCELED);
  CHECK_INT(l.count, 2);
  CHECK_INT(mb_frame_decoder_push(d, "oeA==\n", 6, log_cb, &l, &err), MB_E_CANCELED);
  CHECK_INT(l.count, 2);
  CHECK_INT(mb_frame_decoder_finish(d, &err), MB_E_CANCELED);
  mb_frame_decoder_free(d);
  free(l.s);
}

int main(void) {
  MBT_RUN(test_all_kinds);
  MBT_RUN(test_every_split);
  MBT_RUN(test_bad_base64);
  MBT_RUN(test_control_rejects);
  MBT_RUN(test_stream_end_rejects);
  MBT_RUN(test_line_limit);
  MBT_RUN(test_data_frame_size);
  MBT_RUN(test_encoder_roundtrip);
  MBT_RUN(test_spawn_error_roundtrip);
  MBT_RUN(test_encoder_rejects);
  MBT_RUN(test_callback_stops);
  return mbt_report();
}
