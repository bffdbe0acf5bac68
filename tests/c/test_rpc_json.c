/* test_rpc_json.c — envd messages: JSON ⇄ protobuf-c message ⇄ binary, with the JSON codec's
 * rules (camelCase, int64 strings, base64 bytes, enum names, maps, timestamps), bounded arenas,
 * and errors naming the field. */
#pragma GCC diagnostic ignored "-Wmissing-braces" /* protoc-c's *__INIT macros of oneof unions */
#include "rpc_json.h"
#include "envd/filesystem.pb-c.h"
#include "envd/process.pb-c.h"
#include "mbtest.h"

/* JSON text → message → binary → message → JSON text (compact, sorted keys). */
static char *round_trip(const char *msg, const char *json) {
  const ProtobufCMessageDescriptor *d = mb_rpc_message(msg);
  if (!CHECK(d != NULL)) return NULL;
  json_error_t je;
  json_t *j = json_loads(json, 0, &je);
  if (!CHECK(j != NULL)) return NULL;
  struct mb_arena ar, ar2;
  CHECK_INT(mb_arena_init(&ar, 1 << 16), MB_OK);
  CHECK_INT(mb_arena_init(&ar2, 1 << 16), MB_OK);
  ProtobufCMessage *m, *m2;
  struct mb_error err;
  char *out = NULL;
  int rc = mb_rpc_from_json(d, j, &ar, &m, &err);
  CHECK_INT(rc, MB_OK);
  if (rc == MB_OK) {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    protobuf_c_message_pack(m, buf);
    if (mb_rpc_unpack(d, buf, n, &ar2, &m2, &err) == MB_OK) {
      json_t *back = mb_rpc_to_json(m2);
      out = json_dumps(back, JSON_COMPACT | JSON_SORT_KEYS);
      json_decref(back);
    }
    free(buf);
  }
  json_decref(j);
  mb_arena_free(&ar);
  mb_arena_free(&ar2);
  return out;
}

static void test_start_request(void) {
  char *s = round_trip("process.StartRequest",
    "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"echo é\"],\"envs\":{\"A\":\"1\",\"B\":\"x=y\"},\"cwd\":\"/w\"},"
    "\"pty\":{\"size\":{\"cols\":80,\"rows\":24}},\"stdin\":true,\"tag\":\"t\",\"unknownField\":7}");
  CHECK_STR(s, "{\"process\":{\"args\":[\"-c\",\"echo é\"],\"cmd\":\"/bin/sh\",\"cwd\":\"/w\",\"envs\":{\"A\":\"1\","
               "\"B\":\"x=y\"}},\"pty\":{\"size\":{\"cols\":80,\"rows\":24}},\"stdin\":true,\"tag\":\"t\"}");
  free(s);
  /* the proto names are accepted too, and null is absence */
  s = round_trip("process.SendSignalRequest", "{\"process\":{\"pid\":42},\"signal\":\"SIGNAL_SIGKILL\",\"tag\":null}");
  CHECK_STR(s, "{\"process\":{\"pid\":42},\"signal\":\"SIGNAL_SIGKILL\"}");
  free(s);
}

static void test_events(void) {
  char *s = round_trip("process.StartResponse", "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,\"status\":\"signal: killed\"}}}");
  CHECK_STR(s, "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,\"status\":\"signal: killed\"}}}");
  free(s);
  s = round_trip("process.StartResponse", "{\"event\":{\"data\":{\"stdout\":\"aGVsbG8=\"}}}");
  CHECK_STR(s, "{\"event\":{\"data\":{\"stdout\":\"aGVsbG8=\"}}}");
  free(s);
  /* unpadded and URL-safe base64 are read, canonical base64 is written */
  s = round_trip("process.SendInputRequest", "{\"process\":{\"pid\":1},\"input\":{\"pty\":\"_-8\"}}");
  CHECK_STR(s, "{\"input\":{\"pty\":\"/+8=\"},\"process\":{\"pid\":1}}");
  free(s);
  s = round_trip("process.StartResponse", "{\"event\":{\"keepalive\":{}}}");
  CHECK_STR(s, "{\"event\":{\"keepalive\":{}}}");
  free(s);
}

static void test_entry_info(void) {
  char *s = round_trip("filesystem.StatResponse",
    "{\"entry\":{\"name\":\"a\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/a\",\"size\":\"9007199254740993\",\"mode\":420,"
    "\"modifiedTime\":\"2026-12-01T18:30:05.120Z\",\"symlinkTarget\":\"/b\",\"metadata\":{\"k\":\"v\"}}}");
  CHECK_STR(s, "{\"entry\":{\"metadata\":{\"k\":\"v\"},\"mode\":420,\"modifiedTime\":\"2026-12-01T18:30:05.120Z\","
               "\"name\":\"a\",\"path\":\"/a\",\"size\":\"9007199254740993\",\"symlinkTarget\":\"/b\",\"type\":\"FILE_TYPE_FILE\"}}");
  free(s);
  /* an offset and 9 digits; a number for an int64 */
  s = round_trip("filesystem.EntryInfo", "{\"modifiedTime\":\"2026-12-01T20:30:05.000000001+02:00\",\"size\":5}");
  CHECK_STR(s, "{\"modifiedTime\":\"2026-12-01T18:30:05.000000001Z\",\"size\":\"5\"}");
  free(s);
}

static int from_json_err(const char *msg, const char *json, size_t arena, struct mb_error *err) {
  json_t *j = json_loads(json, 0, NULL);
  struct mb_arena ar;
  mb_arena_init(&ar, arena);
  ProtobufCMessage *m;
  int rc = mb_rpc_from_json(mb_rpc_message(msg), j, &ar, &m, err);
  mb_arena_free(&ar);
  json_decref(j);
  return rc;
}

static void test_bad_json(void) {
  struct mb_error err;
  CHECK_INT(from_json_err("process.StartRequest", "{\"process\":{\"args\":\"x\"}}", 4096, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "field 'process.args': expected an array");
  CHECK_INT(from_json_err("process.StartRequest", "{\"process\":{\"envs\":{\"A\":1}}}", 4096, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "field 'process.envs': expected an object of strings");
  CHECK_INT(from_json_err("process.SendSignalRequest", "{\"signal\":\"SIGNAL_SIGHUP\"}", 4096, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "field 'signal': expected one of the enum's names");
  CHECK_INT(from_json_err("process.ProcessSelector", "{\"pid\":-1}", 4096, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "field 'pid': expected an unsigned 32-bit integer");
  CHECK_INT(from_json_err("filesystem.EntryInfo", "{\"modifiedTime\":\"yesterday\"}", 4096, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "field 'modifiedTime': expected an RFC 3339 timestamp");
  CHECK_INT(from_json_err("process.SendInputRequest", "{\"input\":{\"stdin\":\"***\"}}", 4096, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "field 'input.stdin': expected base64 bytes");
  CHECK_INT(from_json_err("process.StartRequest", "[1]", 4096, &err), MB_E_PROTOCOL);
  /* the arena is the caller's bound */
  CHECK_INT(from_json_err("process.StartRequest", "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"a\",\"b\",\"c\"]}}", 64, &err),
            MB_E_TOO_LARGE);
  CHECK_HAS(err.message, "too large to decode");
}

static void test_unpack_bounds(void) {
  struct mb_arena ar;
  struct mb_error err;
  ProtobufCMessage *m;
  mb_arena_init(&ar, 1 << 12);
  /* field 1 (event), length 10, but only 2 bytes follow */
  const uint8_t broken[] = {0x0a, 0x0a, 0x12, 0x00};
  CHECK_INT(mb_rpc_unpack(&process__start_response__descriptor, broken, sizeof broken, &ar, &m, &err), MB_E_PROTOCOL);
  CHECK_HAS(err.message, "process.StartResponse: invalid protobuf message");
  mb_arena_free(&ar);
  /* a 100 KiB stdout chunk does not fit a 4 KiB arena */
  Process__ProcessEvent__DataEvent data = PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
  Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
  Process__StartResponse resp = PROCESS__START_RESPONSE__INIT;
  static uint8_t big[100 * 1024];
  data.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
  data.stdout.data = big;
  data.stdout.len = sizeof big;
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
  ev.data = &data;
  resp.event = &ev;
  size_t n = protobuf_c_message_get_packed_size(&resp.base);
  uint8_t *buf = malloc(n);
  protobuf_c_message_pack(&resp.base, buf);
  mb_arena_init(&ar, 1 << 12);
  CHECK_INT(mb_rpc_unpack(&process__start_response__descriptor, buf, n, &ar, &m, &err), MB_E_TOO_LARGE);
  CHECK_HAS(err.message, "needs more than 4096 bytes");
  mb_arena_free(&ar);
  mb_arena_init(&ar, 2 * n + 4096);
  CHECK_INT(mb_rpc_unpack(&process__start_response__descriptor, buf, n, &ar, &m, &err), MB_OK);
  const Process__StartResponse *r = (const Process__StartResponse *)m;
  CHECK_INT(r->event->data->stdout.len, sizeof big);
  mb_arena_free(&ar);
  free(buf);
}

static void test_lookup(void) {
  const ProtobufCMessageDescriptor *in, *out;
  CHECK(mb_rpc_method("process.Process/Start", &in, &out));
  CHECK_STR(in->name, "process.StartRequest");
  CHECK_STR(out->name, "process.StartResponse");
  CHECK(mb_rpc_method("filesystem.Filesystem/ListDir", &in, &out));
  CHECK_STR(out->name, "filesystem.ListDirResponse");
  CHECK(!mb_rpc_method("process.Process/Nope", &in, &out));
  CHECK(mb_rpc_message("nope.Nope") == NULL);
}

int main(void) {
  MBT_RUN(test_start_request);
  MBT_RUN(test_events);
  MBT_RUN(test_entry_info);
  MBT_RUN(test_bad_json);
  MBT_RUN(test_unpack_bounds);
  MBT_RUN(test_lookup);
  return mbt_report();
}
