/* test_sbx_connect_request.c — the one parser of Connect request messages (sandboxd/connect_request.c):
 * unary JSON and single-envelope streaming requests, strictly. Links no HTTP code. */
#include "mbtest.h"

#include "connect_request.h"

static size_t envelope(unsigned char *out, unsigned flags, const char *json, size_t declared) {
  size_t n = strlen(json);
  out[0] = (unsigned char)flags;
  out[1] = (unsigned char)(declared >> 24);
  out[2] = (unsigned char)(declared >> 16);
  out[3] = (unsigned char)(declared >> 8);
  out[4] = (unsigned char)declared;
  memcpy(out + 5, json, n);
  return 5 + n;
}

static json_t *parse(const char *s, bool streaming, char *err) {
  return creq_parse((const uint8_t *)s, strlen(s), streaming, err, 256);
}

static void test_unary(void) {
  char err[256];
  json_t *j = parse("", false, err);
  CHECK(json_is_object(j) && json_object_size(j) == 0);   /* an empty body is the empty message */
  json_decref(j);
  j = parse("{\"path\":\"/tmp\",\"depth\":2}", false, err);
  CHECK_STR(json_string_value(json_object_get(j, "path")), "/tmp");
  CHECK_INT(json_integer_value(json_object_get(j, "depth")), 2);
  json_decref(j);
  CHECK(parse("{\"path\":\"a\",\"path\":\"b\"}", false, err) == NULL);   /* duplicate keys: refused */
  CHECK_HAS(err, "malformed JSON");
  CHECK_HAS(err, "duplicate");
  CHECK(parse("[1,2]", false, err) == NULL);
  CHECK_HAS(err, "must be a JSON object");
  CHECK(parse("\"x\"", false, err) == NULL);
  CHECK(parse("{\"a\":", false, err) == NULL);
  CHECK_HAS(err, "line 1");
  CHECK(parse("{} trailing", false, err) == NULL);
}

static void test_streaming(void) {
  char err[256];
  unsigned char buf[256];
  const char *msg = "{\"process\":{\"cmd\":\"/bin/true\"}}";
  size_t n = envelope(buf, 0, msg, strlen(msg));
  json_t *j = creq_parse(buf, n, true, err, sizeof err);
  CHECK(json_is_object(json_object_get(j, "process")));
  json_decref(j);
  n = envelope(buf, 0, "", 0);
  j = creq_parse(buf, n, true, err, sizeof err);
  CHECK(json_is_object(j));
  json_decref(j);
  CHECK(creq_parse(buf, 3, true, err, sizeof err) == NULL);
  CHECK_HAS(err, "truncated");
  n = envelope(buf, 1, msg, strlen(msg));
  CHECK(creq_parse(buf, n, true, err, sizeof err) == NULL);
  CHECK_HAS(err, "compressed");
  n = envelope(buf, 2, msg, strlen(msg));                        /* an end-stream frame is no request */
  CHECK(creq_parse(buf, n, true, err, sizeof err) == NULL);
  CHECK_HAS(err, "one data envelope");
  n = envelope(buf, 0, msg, strlen(msg) + 1);                    /* length says more than follows */
  CHECK(creq_parse(buf, n, true, err, sizeof err) == NULL);
  CHECK_HAS(err, "exactly one data envelope");
  n = envelope(buf, 0, msg, strlen(msg));
  memcpy(buf + n, buf, n);                                       /* two envelopes */
  CHECK(creq_parse(buf, 2 * n, true, err, sizeof err) == NULL);
  n = envelope(buf, 0, "{\"a\":1,\"a\":2}", 13);
  CHECK(creq_parse(buf, n, true, err, sizeof err) == NULL);
  CHECK_HAS(err, "duplicate");
  /* a unary body with an envelope's bytes is not JSON */
  n = envelope(buf, 0, msg, strlen(msg));
  CHECK(creq_parse(buf, n, false, err, sizeof err) == NULL);
}

static void test_limit(void) {
  char err[256];
  size_t n = CREQ_MAX + 1;
  uint8_t *big = mbt_xmalloc(n);
  memset(big, ' ', n);
  big[0] = '{';
  big[n - 1] = '}';
  CHECK(creq_parse(big, n, false, err, sizeof err) == NULL);
  CHECK_HAS(err, "larger than");
  CHECK(creq_parse(big, n - 1, false, err, sizeof err) == NULL);   /* within the limit but not closed: JSON error */
  CHECK_HAS(err, "malformed JSON");
  free(big);
}

static void test_content_type(void) {
  CHECK(creq_is_streaming("application/connect+json"));
  CHECK(creq_is_streaming("Application/Connect+JSON; charset=utf-8"));
  CHECK(!creq_is_streaming("application/json"));
  CHECK(!creq_is_streaming("application/connect+jsonx"));
  CHECK(!creq_is_streaming(NULL));
}

int main(void) {
  MBT_RUN(test_unary);
  MBT_RUN(test_streaming);
  MBT_RUN(test_limit);
  MBT_RUN(test_content_type);
  return mbt_report();
}
