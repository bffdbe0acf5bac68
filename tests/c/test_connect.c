/* test_connect.c — Connect envelopes (every split point, limits, end-of-stream) and code tables. */
#include "connect.h"
#include "mbtest.h"

/* Appends one line per envelope to a log so a whole decode can be compared as a string. */
struct log { char s[8192]; size_t n; int stop_after; int count; };

static int log_cb(void *ud, const struct mb_envelope *e) {
  struct log *l = ud;
  l->count++;
  int k = snprintf(l->s + l->n, sizeof l->s - l->n, "[%u:%.*s", e->flags, (int)e->len,
                   (const char *)e->data);
  l->n += (size_t)k;
  if (e->end_stream) {
    k = snprintf(l->s + l->n, sizeof l->s - l->n, " end");
    l->n += (size_t)k;
    if (e->has_error) {
      k = snprintf(l->s + l->n, sizeof l->s - l->n, " %s/%s", mb_connect_code_string(e->error.code),
                   e->error.message);
      l->n += (size_t)k;
    }
    if (e->metadata) {
      char *md = json_dumps(e->metadata, JSON_SORT_KEYS | JSON_COMPACT);
      k = snprintf(l->s + l->n, sizeof l->s - l->n, " md=%s", md);
      l->n += (size_t)k;
      free(md);
    }
  }
  l->s[l->n++] = ']';
  l->s[l->n] = '\0';
  return l->stop_after && l->count >= l->stop_after ? MB_E_CANCELED : 0;
}

/* Builds a stream from (flags, payload) pairs. */
static size_t build(unsigned char *out, size_t cap, const int *flags, const char **payloads,
                    size_t count) {
  size_t off = 0;
  for (size_t i = 0; i < count; i++) {
    size_t k;
    if (mb_envelope_encode((uint8_t)flags[i], payloads[i], strlen(payloads[i]), out + off,
                           cap - off, &k) != MB_OK)
      abort();
    off += k;
  }
  return off;
}

/* Decodes buf split at the given cut points; returns push/finish result. */
static int decode_split(const unsigned char *buf, size_t len, const size_t *cuts, size_t ncuts,
                        size_t max, struct log *l, struct mb_error *err) {
  struct mb_envelope_decoder *d = mb_envelope_decoder_new(max);
  memset(l, 0, sizeof *l);
  size_t prev = 0;
  int rc = 0;
  for (size_t i = 0; i <= ncuts && !rc; i++) {
    size_t end = i < ncuts ? cuts[i] : len;
    rc = mb_envelope_decoder_push(d, buf + prev, end - prev, log_cb, l, err);
    prev = end;
  }
  if (!rc) rc = mb_envelope_decoder_finish(d, err);
  mb_envelope_decoder_free(d);
  return rc;
}

static const int F[] = {0, 0, 0, 2};
static const char *P[] = {"{\"a\":1}", "", "{\"event\":{\"data\":\"x\"}}",
                          "{\"error\":{\"code\":\"not_found\",\"message\":\"no such\"},"
                          "\"metadata\":{\"k\":[\"v1\",\"v2\"]}}"};
static const char *WANT = "[0:{\"a\":1}][0:][0:{\"event\":{\"data\":\"x\"}}][2:{\"error\":{\"code\":"
                          "\"not_found\",\"message\":\"no such\"},\"metadata\":{\"k\":[\"v1\",\"v2\"]}}"
                          " end not_found/no such md={\"k\":[\"v1\",\"v2\"]}]";

static void test_encode_header(void) {
  unsigned char out[16];
  size_t n;
  CHECK_INT(mb_envelope_encode(2, "{}", 2, out, sizeof out, &n), MB_OK);
  CHECK_INT(n, 7);
  CHECK_MEM(out, 7, "\x02\x00\x00\x00\x02{}", 7);
  unsigned char hdr[5];
  CHECK_INT(mb_envelope_header(hdr, 0, 0x01020304), MB_OK);
  CHECK_MEM(hdr, 5, "\x00\x01\x02\x03\x04", 5);
  CHECK_INT(mb_envelope_encode(0, "abc", 3, out, 7, &n), MB_E_TOO_LARGE);
  CHECK_INT(mb_envelope_encode(0, "abc", 3, out, 4, &n), MB_E_TOO_LARGE);
#if SIZE_MAX > UINT32_MAX
  CHECK_INT(mb_envelope_header(hdr, 0, (size_t)UINT32_MAX + 1), MB_E_TOO_LARGE);
#endif
}

static void test_every_split_point(void) {
  unsigned char buf[512];
  size_t len = build(buf, sizeof buf, F, P, 4);
  struct log l;
  struct mb_error err;
  CHECK_INT(decode_split(buf, len, NULL, 0, 1024, &l, &err), MB_OK);
  CHECK_STR(l.s, WANT);
  for (size_t a = 0; a <= len; a++) {
    size_t cuts[1] = {a};
    int rc = decode_split(buf, len, cuts, 1, 1024, &l, &err);
    if (!CHECK(rc == MB_OK && strcmp(l.s, WANT) == 0)) fprintf(stderr, "     split at %zu\n", a);
  }
  /* every pair of split points */
  int bad = 0;
  for (size_t a = 0; a <= len; a++)
    for (size_t b = a; b <= len; b++) {
      size_t cuts[2] = {a, b};
      if (decode_split(buf, len, cuts, 2, 1024, &l, &err) != MB_OK || strcmp(l.s, WANT) != 0) bad++;
    }
  CHECK_INT(bad, 0);
}

static void test_one_byte_chunks(void) {
  unsigned char buf[512];
  size_t len = build(buf, sizeof buf, F, P, 4);
  size_t cuts[512];
  for (size_t i = 0; i < len - 1; i++) cuts[i] = i + 1;
  struct log l;
  struct mb_error err;
  CHECK_INT(decode_split(buf, len, cuts, len - 1, 1024, &l, &err), MB_OK);
  CHECK_STR(l.s, WANT);
}

static void test_large_payload_in_small_chunks(void) {
  size_t plen = 200000;
  unsigned char *buf = mbt_xmalloc(plen + 5 + 7), *payload = mbt_xmalloc(plen);
  mbt_fill(payload, plen);
  size_t n, m;
  mb_envelope_encode(0, payload, plen, buf, plen + 5, &n);
  mb_envelope_encode(2, "{}", 2, buf + n, 7, &m);
  struct mb_envelope_decoder *d = mb_envelope_decoder_new(plen);
  struct mb_error err;
  size_t off = 0, step = 1;
  struct log l = {0};
  while (off < n + m) {
    size_t k = n + m - off < step ? n + m - off : step;
    CHECK_INT(mb_envelope_decoder_push(d, buf + off, k, log_cb, &l, &err), MB_OK);
    off += k;
    step = step * 3 % 4099 + 1;
  }
  CHECK_INT(mb_envelope_decoder_finish(d, &err), MB_OK);
  CHECK_INT(l.count, 2);
  mb_envelope_decoder_free(d);
  free(buf);
  free(payload);
}

static void test_max_message(void) {
  unsigned char buf[64];
  const char *p10[] = {"0123456789", "{}"};
  const int f[] = {0, 2};
  size_t len = build(buf, sizeof buf, f, p10, 2);
  struct log l;
  struct mb_error err;
  CHECK_INT(decode_split(buf, len, NULL, 0, 10, &l, &err), MB_OK);
  CHECK_INT(decode_split(buf, len, NULL, 0, 9, &l, &err), MB_E_TOO_LARGE);
  CHECK_HAS(err.message, "exceeds the limit of 9 bytes");
  CHECK_INT(l.count, 0);
  /* detected from the header alone, before any payload byte arrives */
  struct mb_envelope_decoder *d = mb_envelope_decoder_new(9);
  CHECK_INT(mb_envelope_decoder_push(d, buf, 5, log_cb, &l, &err), MB_E_TOO_LARGE);
  /* sticky */
  CHECK_INT(mb_envelope_decoder_push(d, buf + 5, 1, log_cb, &l, &err), MB_E_TOO_LARGE);
  CHECK_INT(mb_envelope_decoder_finish(d, &err), MB_E_TOO_LARGE);
  mb_envelope_decoder_free(d);
  /* a header claiming 4 GiB with a small limit */
  d = mb_envelope_decoder_new(1 << 20);
  CHECK_INT(mb_envelope_decoder_push(d, "\x00\xff\xff\xff\xff", 5, log_cb, &l, &err), MB_E_TOO_LARGE);
  mb_envelope_decoder_free(d);
}

static void test_truncated(void) {
  unsigned char buf[512];
  size_t len = build(buf, sizeof buf, F, P, 4);
  struct mb_error err;
  struct log l;
  for (size_t cut = 1; cut < len; cut++) {
    struct mb_envelope_decoder *d = mb_envelope_decoder_new(1024);
    memset(&l, 0, sizeof l);
    CHECK_INT(mb_envelope_decoder_push(d, buf, cut, log_cb, &l, &err), MB_OK);
    int rc = mb_envelope_decoder_finish(d, &err);
    /* cut between envelopes: missing end-stream; inside one: truncated */
    size_t b1 = 5 + strlen(P[0]), b2 = b1 + 5 + strlen(P[1]), b3 = b2 + 5 + strlen(P[2]);
    if (cut == b1 || cut == b2 || cut == b3) {
      CHECK_INT(rc, MB_E_PROTOCOL);
      CHECK_HAS(err.message, "missing EndStreamResponse");
    } else {
      CHECK_INT(rc, MB_E_TRUNCATED);
      CHECK_HAS(err.message, "truncated envelope");
    }
    mb_envelope_decoder_free(d);
  }
  struct mb_envelope_decoder *d = mb_envelope_decoder_new(1024);
  CHECK_INT(mb_envelope_decoder_finish(d, &err), MB_E_PROTOCOL);
  CHECK_INT(mb_envelope_decoder_push(d, buf, 3, log_cb, &l, &err), MB_OK);
  CHECK_INT(mb_envelope_decoder_finish(d, &err), MB_E_TRUNCATED);
  CHECK_HAS(err.message, "header: 3 of 5");
  mb_envelope_decoder_free(d);
}

static int decode_one(const char *stream, size_t len, struct log *l, struct mb_error *err) {
  return decode_split((const unsigned char *)stream, len, NULL, 0, 1024, l, err);
}
#define DECODE(lit, l, err) decode_one(lit, sizeof(lit) - 1, l, err)

/* One envelope with the given flags and payload, encoded by the encoder. */
static int decode_env(int flags, const char *json, struct log *l, struct mb_error *err) {
  unsigned char buf[256];
  size_t n;
  if (mb_envelope_encode((uint8_t)flags, json, strlen(json), buf, sizeof buf, &n)) abort();
  return decode_split(buf, n, NULL, 0, 1024, l, err);
}

static void test_end_stream_forms(void) {
  struct log l;
  struct mb_error err;
  CHECK_INT(decode_env(2, "{}", &l, &err), MB_OK);
  CHECK_STR(l.s, "[2:{} end]");
  /* unknown or missing code: still an error, reported as unknown */
  CHECK_INT(decode_env(2, "{\"error\":{\"code\":\"weird\"}}", &l, &err), MB_OK);
  CHECK_HAS(l.s, " end unknown/]");
  CHECK_INT(decode_env(2, "{\"error\":{\"message\":\"boom\"}}", &l, &err), MB_OK);
  CHECK_HAS(l.s, " end unknown/boom]");
  CHECK_INT(decode_env(2, "{\"error\":null,\"x\":[1]}", &l, &err), MB_OK);
  CHECK_HAS(l.s, "end]");
  /* metadata alone */
  CHECK_INT(decode_env(2, "{\"metadata\":{\"a\":[\"b\"]}}", &l, &err), MB_OK);
  CHECK_HAS(l.s, " end md={\"a\":[\"b\"]}]");
}

static void test_end_stream_rejects(void) {
  struct log l;
  struct mb_error err;
  CHECK_INT(decode_env(2, "{nope", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "invalid JSON");
  CHECK_INT(DECODE("\x02\x00\x00\x00\x00", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "invalid JSON");
  CHECK_INT(decode_env(2, "[]", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "not a JSON object");
  CHECK_INT(decode_env(2, "{\"error\":1}", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "error is not a JSON object");
  CHECK_INT(decode_env(2, "{\"metadata\":{\"a\":\"b\"}}", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "metadata");
  CHECK_INT(decode_env(2, "{\"metadata\":{\"a\":[1]}}", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "metadata");
  CHECK_INT(decode_env(2, "{\"metadata\":3}", &l, &err), MB_E_PROTOCOL);
  CHECK_INT(l.count, 0); /* nothing delivered for a malformed end-stream */
}

static void test_flags(void) {
  struct log l;
  struct mb_error err;
  CHECK_INT(decode_env(1, "{}", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "compressed");
  CHECK_INT(decode_env(3, "{}", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "compressed");
  CHECK_INT(DECODE("\x80\x00\x00\x00\x02{}", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "unknown envelope flags 0x80");
  CHECK_INT(decode_env(4, "{}", &l, &err), MB_E_PROTOCOL);
}

static void test_after_end_stream(void) {
  struct log l;
  struct mb_error err;
  CHECK_INT(DECODE("\x02\x00\x00\x00\x02{}\x00\x00\x00\x00\x00", &l, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "after the end-of-stream");
  CHECK_INT(l.count, 1);
}

static void test_callback_stops(void) {
  unsigned char buf[512];
  size_t len = build(buf, sizeof buf, F, P, 4);
  struct mb_envelope_decoder *d = mb_envelope_decoder_new(1024);
  struct log l = {0};
  l.stop_after = 2;
  struct mb_error err;
  CHECK_INT(mb_envelope_decoder_push(d, buf, len, log_cb, &l, &err), MB_E_CANCELED);
  CHECK_INT(l.count, 2);
  CHECK_HAS(err.message, "stopped");
  CHECK_INT(mb_envelope_decoder_push(d, buf, 1, log_cb, &l, &err), MB_E_CANCELED);
  CHECK_INT(l.count, 2);
  mb_envelope_decoder_free(d);
}

static void test_code_tables(void) {
  static const char *names[17] = {NULL, "canceled", "unknown", "invalid_argument",
    "deadline_exceeded", "not_found", "already_exists", "permission_denied", "resource_exhausted",
    "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable",
    "data_loss", "unauthenticated"};
  static const int http[17] = {0, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501,
                               500, 503, 500, 401};
  for (int i = 1; i <= 16; i++) {
    CHECK_STR(mb_connect_code_string(i), names[i]);
    CHECK_INT(mb_connect_code_from_string(names[i]), i);
    CHECK_INT(mb_connect_http_status(i), http[i]);
  }
  CHECK(mb_connect_code_string(0) == NULL);
  CHECK(mb_connect_code_string(17) == NULL);
  CHECK_INT(mb_connect_code_from_string("ok"), 0);
  CHECK_INT(mb_connect_code_from_string("NOT_FOUND"), 0);
  CHECK_INT(mb_connect_code_from_string(NULL), 0);
  CHECK_INT(mb_connect_http_status(99), 500);
  static const int st[][2] = {{400, 13}, {401, 16}, {403, 7}, {404, 12}, {429, 14}, {502, 14},
                              {503, 14}, {504, 14}, {500, 2}, {409, 2}, {418, 2}, {0, 2}};
  for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
    CHECK_INT(mb_connect_code_for_http(st[i][0]), st[i][1]);
}

static void test_unary_error(void) {
  struct mb_connect_error e;
  const char *b1 = "{\"code\":\"not_found\",\"message\":\"no file\"}";
  mb_connect_unary_error(404, 1, b1, strlen(b1), &e);
  CHECK_INT(e.code, MB_CONNECT_NOT_FOUND);
  CHECK_STR(e.message, "no file");
  /* envd's own numeric code: derive from status */
  const char *b2 = "{\"code\":401,\"message\":\"signature is already expired\"}";
  mb_connect_unary_error(401, 1, b2, strlen(b2), &e);
  CHECK_INT(e.code, MB_CONNECT_UNAUTHENTICATED);
  CHECK_STR(e.message, "signature is already expired");
  const char *b3 = "{\"code\":\"bogus\"}";
  mb_connect_unary_error(503, 1, b3, strlen(b3), &e);
  CHECK_INT(e.code, MB_CONNECT_UNAVAILABLE);
  CHECK_STR(e.message, "");
  mb_connect_unary_error(404, 0, "not found", 9, &e);
  CHECK_INT(e.code, MB_CONNECT_UNIMPLEMENTED);
  CHECK_STR(e.message, "HTTP 404");
  mb_connect_unary_error(500, 1, "{oops", 5, &e);
  CHECK_INT(e.code, MB_CONNECT_UNKNOWN);
  CHECK_STR(e.message, "HTTP 500");
  mb_connect_unary_error(400, 1, NULL, 0, &e);
  CHECK_INT(e.code, MB_CONNECT_INTERNAL);
  /* a huge message is cut to the bound */
  size_t big = 3000;
  char *b4 = mbt_xmalloc(big + 64);
  int k = snprintf(b4, 64, "{\"code\":\"internal\",\"message\":\"");
  memset(b4 + k, 'm', big);
  memcpy(b4 + k + big, "\"}", 3);
  mb_connect_unary_error(500, 1, b4, strlen(b4), &e);
  CHECK_INT(e.code, MB_CONNECT_INTERNAL);
  CHECK_INT(strlen(e.message), MB_CONNECT_MSG_MAX - 1);
  free(b4);
}

static const char *const JPATH[] = {"event", "data"};
static const char *const JLEAVES[] = {"stdout", "stderr", "pty"};

/* Runs both the shortcut and the jansson-only path; they must agree. Returns the leaf. */
static int json_bytes(const char *json, char *out, size_t cap, size_t *n, int *rc_out,
                      struct mb_error *err) {
  int leaf[2];
  size_t len[2];
  int rc[2];
  json_t *root[2];
  char tmp[2][64];
  for (int slow = 0; slow < 2; slow++) {
    rc[slow] = mb_connect_json_bytes(json, strlen(json), JPATH, 2, JLEAVES, 3,
                                     slow ? MB_CONNECT_JSON_SLOW : 0, tmp[slow],
                                     cap < 64 ? cap : 64, &len[slow], &leaf[slow], &root[slow], err);
    CHECK((root[slow] != NULL) == (rc[slow] == MB_OK && leaf[slow] < 0));
    json_decref(root[slow]);
  }
  CHECK_INT(rc[0], rc[1]);
  CHECK_INT(leaf[0], leaf[1]);
  CHECK_MEM(tmp[0], len[0], tmp[1], len[1]);
  memcpy(out, tmp[0], len[0]);
  *n = len[0];
  *rc_out = rc[0];
  return leaf[0];
}

static void test_json_bytes(void) {
  char out[64];
  size_t n;
  int rc;
  struct mb_error err;
  CHECK_INT(json_bytes("{\"event\":{\"data\":{\"stdout\":\"aGk=\"}}}", out, 64, &n, &rc, &err), 0);
  CHECK_INT(rc, MB_OK);
  CHECK_MEM(out, n, "hi", 2);
  /* Go protojson may add spaces; other leaves; URL-safe unpadded */
  CHECK_INT(json_bytes(" { \"event\" : {\"data\": {\"stderr\": \"-_8\"} } }\n", out, 64, &n, &rc, &err), 1);
  CHECK_MEM(out, n, "\xfb\xff", 2);
  CHECK_INT(json_bytes("{\"event\":{\"data\":{\"pty\":\"\"}}}", out, 64, &n, &rc, &err), 2);
  CHECK_INT(n, 0);
  /* escapes: only jansson gets them right */
  CHECK_INT(json_bytes("{\"event\":{\"data\":{\"stdout\":\"aG\\u0073=\"}}}", out, 64, &n, &rc, &err), 0);
  CHECK_MEM(out, n, "hk", 2);
  /* extra keys, other key order */
  CHECK_INT(json_bytes("{\"x\":1,\"event\":{\"data\":{\"stdout\":\"aGk=\",\"y\":2}}}", out, 64, &n, &rc, &err), 0);
  CHECK_MEM(out, n, "hi", 2);
  /* not a data event: the parsed message comes back */
  CHECK_INT(json_bytes("{\"event\":{\"start\":{\"pid\":5}}}", out, 64, &n, &rc, &err), -1);
  CHECK_INT(rc, MB_OK);
  CHECK_INT(json_bytes("{\"event\":{\"data\":{\"stdout\":5}}}", out, 64, &n, &rc, &err), -1);
  CHECK_INT(json_bytes("[]", out, 64, &n, &rc, &err), -1);
  /* errors */
  json_bytes("{\"event\":{\"data\":{\"stdout\":\"a*k=\"}}}", out, 64, &n, &rc, &err);
  CHECK_INT(rc, MB_E_PROTOCOL);
  CHECK_HAS(err.message, "stdout: invalid base64");
  json_bytes("{\"event\":{\"data\":{\"stdout\":\"aGk=\"}}", out, 64, &n, &rc, &err);
  CHECK_INT(rc, MB_E_PROTOCOL);
  CHECK_HAS(err.message, "invalid JSON");
  json_bytes("{\"event\":{\"data\":{\"stdout\":\"aGk\u00e9\"}}}", out, 64, &n, &rc, &err);
  CHECK_INT(rc, MB_E_PROTOCOL);
  json_bytes("{\"event\":{\"data\":{\"stdout\":\"aGVsbG8=\"}}}", out, 4, &n, &rc, &err);
  CHECK_INT(rc, MB_E_TOO_LARGE);
  CHECK_HAS(err.message, "stdout: more than 4 bytes");
}

int main(void) {
  MBT_RUN(test_encode_header);
  MBT_RUN(test_every_split_point);
  MBT_RUN(test_one_byte_chunks);
  MBT_RUN(test_large_payload_in_small_chunks);
  MBT_RUN(test_max_message);
  MBT_RUN(test_truncated);
  MBT_RUN(test_end_stream_forms);
  MBT_RUN(test_end_stream_rejects);
  MBT_RUN(test_flags);
  MBT_RUN(test_after_end_stream);
  MBT_RUN(test_callback_stops);
  MBT_RUN(test_code_tables);
  MBT_RUN(test_unary_error);
  MBT_RUN(test_json_bytes);
  return mbt_report();
}
