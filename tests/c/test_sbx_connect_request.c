/* test_sbx_connect_request.c — the one parser of Connect request messages (sandboxd/connect_request.c):
 * unary and single-envelope streaming requests in the JSON and the binary codec, into protobuf-c
 * structs, strictly and within the arena. Links no HTTP code. */
#pragma GCC diagnostic ignored "-Wmissing-braces" /* protoc-c's *__INIT macros of oneof unions */
#include "mbtest.h"

#include "connect_request.h"
#include "envd/filesystem.pb-c.h"
#include "envd/process.pb-c.h"

static const creq_type UNARY_JSON = {false, false}, STREAM_JSON = {true, false}, UNARY_PROTO = {false, true},
                       STREAM_PROTO = {true, true};

static size_t envelope(unsigned char *out, unsigned flags, const void *payload, size_t n, size_t declared) {
  out[0] = (unsigned char)flags;
  out[1] = (unsigned char)(declared >> 24);
  out[2] = (unsigned char)(declared >> 16);
  out[3] = (unsigned char)(declared >> 8);
  out[4] = (unsigned char)declared;
  memcpy(out + 5, payload, n);
  return 5 + n;
}

static struct mb_arena ar;
static ProtobufCMessage *parse_t(const void *b, size_t n, creq_type t, const ProtobufCMessageDescriptor *d, char *err) {
  mb_arena_free(&ar);
  if (mb_arena_init(&ar, CREQ_ARENA(n)) != MB_OK) return NULL;
  return creq_parse(b, n, t, d, &ar, err, 256);
}
static ProtobufCMessage *parse(const char *s, const ProtobufCMessageDescriptor *d, char *err) {
  return parse_t(s, strlen(s), UNARY_JSON, d, err);
}

static void test_unary_json(void) {
  char err[256];
  Filesystem__ListDirRequest *l = (Filesystem__ListDirRequest *)parse("", &filesystem__list_dir_request__descriptor, err);
  CHECK(l && !l->path && !l->has_depth);   /* an empty body is the empty message */
  l = (Filesystem__ListDirRequest *)parse("{\"path\":\"/tmp\",\"depth\":2,\"other\":[1]}", &filesystem__list_dir_request__descriptor, err);
  CHECK(l && l->has_depth && l->depth == 2);   /* unknown fields are ignored */
  CHECK_STR(l ? l->path : NULL, "/tmp");
  CHECK(parse("{\"path\":\"a\",\"path\":\"b\"}", &filesystem__stat_request__descriptor, err) == NULL);   /* duplicate keys: refused */
  CHECK_HAS(err, "malformed JSON");
  CHECK_HAS(err, "duplicate");
  CHECK(parse("[1,2]", &filesystem__stat_request__descriptor, err) == NULL);
  CHECK_HAS(err, "must be a JSON object");
  CHECK(parse("\"x\"", &filesystem__stat_request__descriptor, err) == NULL);
  CHECK(parse("{\"a\":", &filesystem__stat_request__descriptor, err) == NULL);
  CHECK_HAS(err, "line 1");
  CHECK(parse("{} trailing", &filesystem__stat_request__descriptor, err) == NULL);
  CHECK(parse("{\"path\":7}", &filesystem__stat_request__descriptor, err) == NULL);   /* wrong type: names the field */
  CHECK_HAS(err, "'path'");
  CHECK(parse("{\"depth\":-1}", &filesystem__list_dir_request__descriptor, err) == NULL);
  CHECK_HAS(err, "'depth'");
  /* proto names and camelCase alike; a oneof; an unknown enum name is left unset (protojson) */
  Filesystem__WatchDirRequest *w = (Filesystem__WatchDirRequest *)parse("{\"path\":\"d\",\"include_entry\":true}",
                                                                         &filesystem__watch_dir_request__descriptor, err);
  CHECK(w && w->has_include_entry && w->include_entry && !w->has_recursive);
  Process__SendSignalRequest *sg = (Process__SendSignalRequest *)parse(
      "{\"process\":{\"pid\":\"12\"},\"signal\":\"SIGNAL_SIGINT\"}", &process__send_signal_request__descriptor, err);
  CHECK(sg && sg->process && sg->process->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR_PID && sg->process->pid == 12);
  CHECK(sg && !sg->has_signal);
  sg = (Process__SendSignalRequest *)parse("{\"process\":{\"tag\":\"t\"},\"signal\":2}", &process__send_signal_request__descriptor, err);
  CHECK(sg && sg->has_signal && sg->signal == 2);   /* open enums keep an integer */
  CHECK_STR(sg && sg->process ? sg->process->tag : NULL, "t");
  Process__SendInputRequest *in = (Process__SendInputRequest *)parse(
      "{\"process\":{\"pid\":3},\"input\":{\"stdin\":\"aGk_\"}}", &process__send_input_request__descriptor, err);   /* URL-safe base64 */
  CHECK(in && in->input && in->input->input_case == PROCESS__PROCESS_INPUT__INPUT_STDIN && in->input->stdin.len == 3);
  CHECK(parse("{\"input\":{\"stdin\":\"*\"}}", &process__send_input_request__descriptor, err) == NULL);
  CHECK_HAS(err, "base64");
  Process__StartRequest *st = (Process__StartRequest *)parse(
      "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"true\"],\"envs\":{\"A\":\"1\"}},\"stdin\":false}",
      &process__start_request__descriptor, err);
  CHECK(st && st->process && st->process->n_args == 2 && st->process->n_envs == 1 && st->has_stdin && !st->stdin);
  CHECK(parse("{\"process\":{\"envs\":{\"A\":1}}}", &process__start_request__descriptor, err) == NULL);
  CHECK_HAS(err, "envs");
}

static void test_streaming(void) {
  char err[256];
  unsigned char buf[256];
  const char *msg = "{\"process\":{\"cmd\":\"/bin/true\"}}";
  const ProtobufCMessageDescriptor *d = &process__start_request__descriptor;
  size_t n = envelope(buf, 0, msg, strlen(msg), strlen(msg));
  Process__StartRequest *st = (Process__StartRequest *)parse_t(buf, n, STREAM_JSON, d, err);
  CHECK_STR(st && st->process ? st->process->cmd : NULL, "/bin/true");
  n = envelope(buf, 0, "", 0, 0);
  CHECK(parse_t(buf, n, STREAM_JSON, d, err) != NULL);
  CHECK(parse_t(buf, 3, STREAM_JSON, d, err) == NULL);
  CHECK_HAS(err, "truncated");
  n = envelope(buf, 1, msg, strlen(msg), strlen(msg));
  CHECK(parse_t(buf, n, STREAM_JSON, d, err) == NULL);
  CHECK_HAS(err, "compressed");
  n = envelope(buf, 2, msg, strlen(msg), strlen(msg));   /* an end-stream frame is no request */
  CHECK(parse_t(buf, n, STREAM_JSON, d, err) == NULL);
  CHECK_HAS(err, "one data envelope");
  n = envelope(buf, 0, msg, strlen(msg), strlen(msg) + 1);   /* length says more than follows */
  CHECK(parse_t(buf, n, STREAM_JSON, d, err) == NULL);
  CHECK_HAS(err, "exactly one data envelope");
  n = envelope(buf, 0, msg, strlen(msg), strlen(msg));
  memcpy(buf + n, buf, n);   /* two envelopes */
  CHECK(parse_t(buf, 2 * n, STREAM_JSON, d, err) == NULL);
  n = envelope(buf, 0, "{\"a\":1,\"a\":2}", 13, 13);
  CHECK(parse_t(buf, n, STREAM_JSON, d, err) == NULL);
  CHECK_HAS(err, "duplicate");
  n = envelope(buf, 0, msg, strlen(msg), strlen(msg));   /* a unary body with an envelope's bytes is not JSON */
  CHECK(parse_t(buf, n, UNARY_JSON, d, err) == NULL);
}

static size_t packed(const ProtobufCMessage *m, uint8_t *out) { return protobuf_c_message_pack(m, out); }

static void test_proto(void) {
  char err[256];
  uint8_t pb[512], buf[600];
  Process__ProcessConfig pc = PROCESS__PROCESS_CONFIG__INIT;
  char *args[] = {"-c", "echo hi"};
  pc.cmd = "/bin/sh";
  pc.n_args = 2;
  pc.args = args;
  Process__StartRequest sr = PROCESS__START_REQUEST__INIT;
  sr.process = &pc;
  sr.has_stdin = 1;
  size_t n = packed(&sr.base, pb);
  size_t e = envelope(buf, 0, pb, n, n);
  Process__StartRequest *st = (Process__StartRequest *)parse_t(buf, e, STREAM_PROTO, &process__start_request__descriptor, err);
  CHECK(st && st->process && st->process->n_args == 2 && st->has_stdin && !st->stdin);
  CHECK_STR(st && st->process ? st->process->args[1] : NULL, "echo hi");
  /* unary: the body is the message; empty is the empty message */
  Process__ProcessSelector sel = PROCESS__PROCESS_SELECTOR__INIT;
  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = 77;
  Process__ProcessInput pin = PROCESS__PROCESS_INPUT__INIT;
  pin.input_case = PROCESS__PROCESS_INPUT__INPUT_PTY;
  pin.pty = (ProtobufCBinaryData){3, (uint8_t *)"\0\1\2"};
  Process__SendInputRequest si = PROCESS__SEND_INPUT_REQUEST__INIT;
  si.process = &sel;
  si.input = &pin;
  n = packed(&si.base, pb);
  Process__SendInputRequest *q = (Process__SendInputRequest *)parse_t(pb, n, UNARY_PROTO, &process__send_input_request__descriptor, err);
  CHECK(q && q->process && q->process->pid == 77 && q->input && q->input->input_case == PROCESS__PROCESS_INPUT__INPUT_PTY);
  CHECK(q && q->input && q->input->pty.len == 3 && memcmp(q->input->pty.data, "\0\1\2", 3) == 0);   /* raw bytes, no base64 */
  CHECK(parse_t("", 0, UNARY_PROTO, &process__list_request__descriptor, err) != NULL);
  /* malformed: a truncated field, a length past the end */
  CHECK(parse_t("\x0a\x05/a", 4, UNARY_PROTO, &filesystem__stat_request__descriptor, err) == NULL);
  CHECK_HAS(err, "malformed protobuf");
  /* strings must be UTF-8, nested ones too */
  Filesystem__StatRequest fs = FILESYSTEM__STAT_REQUEST__INIT;
  fs.path = "caf\xc3\xa9";
  n = packed(&fs.base, pb);
  CHECK(parse_t(pb, n, UNARY_PROTO, &filesystem__stat_request__descriptor, err) != NULL);
  fs.path = "bad\xff";
  n = packed(&fs.base, pb);
  CHECK(parse_t(pb, n, UNARY_PROTO, &filesystem__stat_request__descriptor, err) == NULL);
  CHECK_HAS(err, "not UTF-8");
  fs.path = "\xed\xa0\x80";   /* an encoded surrogate */
  n = packed(&fs.base, pb);
  CHECK(parse_t(pb, n, UNARY_PROTO, &filesystem__stat_request__descriptor, err) == NULL);
  args[1] = "x\xc0\xaf";      /* overlong '/' in a repeated string of a nested message */
  n = packed(&sr.base, pb);
  e = envelope(buf, 0, pb, n, n);
  CHECK(parse_t(buf, e, STREAM_PROTO, &process__start_request__descriptor, err) == NULL);
  CHECK_HAS(err, "'args'");
  /* field number 0 (here in a non-minimal tag, which protobuf-c would keep as unknown) */
  CHECK(parse_t("\x82\x00\x01x", 4, UNARY_PROTO, &filesystem__remove_request__descriptor, err) == NULL);
  CHECK_HAS(err, "field number out of range");
  CHECK(parse_t("\x0a\x01x\x2a\x00", 5, UNARY_PROTO, &filesystem__remove_request__descriptor, err) != NULL);   /* unknown field 5: kept */
  /* a JSON body in a binary request is no protobuf message */
  CHECK(parse_t("{\"path\":\"/\"}", 12, UNARY_PROTO, &filesystem__stat_request__descriptor, err) == NULL);
}

static void test_limit(void) {
  char err[256];
  size_t n = CREQ_MAX + 1;
  uint8_t *big = mbt_xmalloc(n);
  memset(big, ' ', n);
  big[0] = '{';
  big[n - 1] = '}';
  CHECK(parse_t(big, n, UNARY_JSON, &filesystem__stat_request__descriptor, err) == NULL);
  CHECK_HAS(err, "larger than");
  CHECK(parse_t(big, n - 1, UNARY_JSON, &filesystem__stat_request__descriptor, err) == NULL);   /* within the limit but not closed */
  CHECK_HAS(err, "malformed JSON");
  free(big);
  /* the arena bounds what a message may decode to: a too small one fails the parse */
  struct mb_arena small;
  CHECK(mb_arena_init(&small, 64) == MB_OK);
  const char *m = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"a\",\"b\",\"c\",\"d\"]}}";
  CHECK(creq_parse((const uint8_t *)m, strlen(m), UNARY_JSON, &process__start_request__descriptor, &small, err, sizeof err) == NULL);
  CHECK_HAS(err, "too large");
  mb_arena_free(&small);
}

static void test_content_type(void) {
  creq_type t;
  CHECK(creq_content_type("application/connect+json", &t) == 0 && t.streaming && !t.proto);
  CHECK(creq_content_type("Application/Connect+JSON; charset=utf-8", &t) == 0 && t.streaming && !t.proto);
  CHECK(creq_content_type("application/json", &t) == 0 && !t.streaming && !t.proto);
  CHECK(creq_content_type("application/json;charset=utf-8", &t) == 0 && !t.streaming);
  CHECK(creq_content_type("application/proto", &t) == 0 && !t.streaming && t.proto);
  CHECK(creq_content_type("application/connect+proto", &t) == 0 && t.streaming && t.proto);
  CHECK(creq_content_type("application/connect+jsonx", &t) == -1);
  CHECK(creq_content_type("application/grpc", &t) == -1);
  CHECK(creq_content_type("text/plain", &t) == -1);
  CHECK(creq_content_type("", &t) == -1);
  CHECK(creq_content_type(NULL, &t) == -1);
}

int main(void) {
  MBT_RUN(test_unary_json);
  MBT_RUN(test_streaming);
  MBT_RUN(test_proto);
  MBT_RUN(test_limit);
  MBT_RUN(test_content_type);
  mb_arena_free(&ar);
  return mbt_report();
}
