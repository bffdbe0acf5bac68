/* test_sbx_template_spec.c — a template build's request as E2B's SDK sends it
 * (sandboxd/template_spec.c): each step kind with its args, E2B's base image as sandboxd's base,
 * the SDK's client-side step fields taken, and every refusal naming its field. */
#include "mbtest.h"

#include <stdio.h>
#include <string.h>

#include "template_spec.h"

#define HASH "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* Parses text; 0 or -1 with err. */
static int parse(const char *text, ts_spec *s, char *err, size_t errlen) {
  json_error_t je;
  json_t *j = json_loads(text, JSON_ALLOW_NUL, &je);
  if (!j) { snprintf(err, errlen, "test JSON: %s", je.text); return -2; }
  int rc = ts_parse(j, s, err, errlen);
  json_decref(j);   /* the spec keeps its own reference */
  return rc;
}

static void test_steps(void) {
  ts_spec s;
  char err[512] = "";
  int rc = parse("{\"fromTemplate\":\"base\",\"force\":false,\"steps\":["
                 "{\"type\":\"RUN\",\"args\":[\"echo hi\"],\"force\":false},"
                 "{\"type\":\"RUN\",\"args\":[\"apt-get update\",\"root\"],\"force\":true},"
                 "{\"type\":\"COPY\",\"args\":[\"src/\",\"/app\",\"user\",\"0755\"],\"force\":false,\"filesHash\":\"" HASH "\","
                 "\"forceUpload\":true,\"resolveSymlinks\":false,\"gzip\":true},"
                 "{\"type\":\"COPY\",\"args\":[\"a.txt\",\"/a\",\"\",\"\"],\"filesHash\":\"" HASH "\"},"
                 "{\"type\":\"ENV\",\"args\":[\"A\",\"1\",\"B_2\",\"x=y\"]},"
                 "{\"type\":\"WORKDIR\",\"args\":[\"/app\"]},"
                 "{\"type\":\"USER\",\"args\":[\"root\"]}],"
                 "\"startCmd\":\"npm start\",\"readyCmd\":\"curl localhost\"}", &s, err, sizeof err);
  CHECK_INT(rc, 0);
  if (rc) { printf("  %s\n", err); return; }
  CHECK_STR(s.from_template, "base");
  CHECK_INT((int)s.nsteps, 7);
  CHECK_STR(s.start_cmd, "npm start");
  CHECK_STR(s.ready_cmd, "curl localhost");
  CHECK_INT(s.steps[0].kind, TS_RUN);
  CHECK_STR(s.steps[0].cmd, "echo hi");
  CHECK(s.steps[0].user == NULL);
  CHECK_STR(s.steps[1].user, "root");
  CHECK(s.steps[1].force);
  CHECK_INT(s.steps[2].kind, TS_COPY);
  CHECK_STR(s.steps[2].src, "src/");
  CHECK_STR(s.steps[2].dest, "/app");
  CHECK_STR(s.steps[2].user, "user");
  CHECK(s.steps[2].has_mode);
  CHECK_INT((int)s.steps[2].mode, 0755);
  CHECK_STR(s.steps[2].hash, HASH);
  CHECK(s.steps[3].user == NULL && !s.steps[3].has_mode);
  CHECK_INT((int)s.steps[4].nargs, 4);
  CHECK_STR(s.steps[4].args[3], "x=y");
  CHECK_INT(s.steps[5].kind, TS_WORKDIR);
  CHECK_STR(s.steps[6].user, "root");
  char d[64];
  ts_describe(&s.steps[2], d, sizeof d);
  CHECK_STR(d, "COPY src/ /app user 0755");
  ts_describe(&s.steps[3], d, sizeof d);
  CHECK_STR(d, "COPY a.txt /a");
  char small[12];
  ts_describe(&s.steps[1], small, sizeof small);
  CHECK_STR(small, "RUN apt-...");
  ts_free(&s);
  /* a cut never ends inside a character */
  CHECK_INT(parse("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"echo \u00e9\u00e9\u00e9\"]}]}", &s, err, sizeof err), 0);
  char u[12];                                   /* "RUN echo " is 9 bytes, then 2-byte characters */
  ts_describe(&s.steps[0], u, sizeof u);
  CHECK_STR(u, "RUN echo...");
  char u1[14];                                  /* the first character would straddle the cut */
  ts_describe(&s.steps[0], u1, sizeof u1);
  CHECK_STR(u1, "RUN echo ...");
  char u2[15];
  ts_describe(&s.steps[0], u2, sizeof u2);
  CHECK_STR(u2, "RUN echo \xc3\xa9...");
  ts_free(&s);
  /* E2B's base image is sandboxd's base; no steps at all is a build too */
  CHECK_INT(parse("{\"fromImage\":\"e2bdev/base:latest\"}", &s, err, sizeof err), 0);
  CHECK_STR(s.from_template, "base");
  CHECK_INT((int)s.nsteps, 0);
  ts_free(&s);
  CHECK_INT(parse("{\"fromTemplate\":\"my-env\",\"fromImage\":\"\",\"steps\":null,\"startCmd\":null}", &s, err, sizeof err), 0);
  CHECK_STR(s.from_template, "my-env");
  CHECK(s.start_cmd == NULL);
  ts_free(&s);
}

static void want_refusal(const char *text, const char *needle) {
  ts_spec s;
  char err[512] = "";
  int rc = parse(text, &s, err, sizeof err);
  CHECK_INT(rc, -1);
  CHECK_HAS(err, needle);
  if (rc == 0) ts_free(&s);
}

static void test_refusals(void) {
  want_refusal("[]", "must be a JSON object");
  want_refusal("{\"fromTemplate\":\"base\",\"bogus\":1}", "field 'bogus' is not supported");
  want_refusal("{}", "exactly one of 'fromTemplate' and 'fromImage'");
  want_refusal("{\"fromTemplate\":\"base\",\"fromImage\":\"e2bdev/base\"}", "exactly one");
  want_refusal("{\"fromImage\":\"ubuntu:22.04\"}", "field 'fromImage': 'ubuntu:22.04' cannot be pulled");
  want_refusal("{\"fromImage\":\"e2bdev/baseline\"}", "cannot be pulled");
  want_refusal("{\"fromImage\":\"e2bdev/base\",\"fromImageRegistry\":{\"type\":\"registry\"}}", "fromImageRegistry");
  want_refusal("{\"fromTemplate\":1}", "'fromTemplate' must be a string");
  want_refusal("{\"fromTemplate\":\"base\",\"force\":\"yes\"}", "'force' must be a boolean");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":{}}", "'steps' must be an array");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[1]}", "steps[0] must be an object");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"x\"],\"color\":1}]}", "steps[0].field 'color'");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"args\":[\"x\"]}]}", "steps[0].type is required");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ADD\",\"args\":[\"x\"]}]}", "steps[0].type 'ADD'");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[]}]}", "RUN takes");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"\"]}]}", "RUN takes");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"x\",2]}]}", "steps[0].args[1] must be a string");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":\"x\"}]}", "args must be an array");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"x\",\"nobody\"]}]}", "user 'nobody'");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"x\\u0000y\"]}]}", "NUL");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"x\"],\"filesHash\":\"" HASH "\"}]}", "only COPY");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\",\"/a\"]}]}", "filesHash: COPY needs");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\",\"/a\"],\"filesHash\":\"ABC\"}]}", "filesHash");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\"],\"filesHash\":\"" HASH "\"}]}", "COPY takes");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\",\"/a\",\"\",\"0999\"],\"filesHash\":\"" HASH "\"}]}",
               "mode '0999'");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\",\"/a\",\"\",\"12345\"],\"filesHash\":\"" HASH "\"}]}",
               "not an octal mode");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\",\"/a\",\"user:nogroup\"],\"filesHash\":\"" HASH "\"}]}",
               "user 'user:nogroup'");
  /* a COPY source stays in the build context, as the SDK checks it */
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"../a\",\"/a\"],\"filesHash\":\"" HASH "\"}]}",
               "steps[0].args[0]: COPY source '../a' is not inside the build context");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a/./../../b\",\"/a\"],\"filesHash\":\"" HASH "\"}]}",
               "COPY source 'a/./../../b'");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"/etc/passwd\",\"/a\"],\"filesHash\":\"" HASH "\"}]}",
               "COPY source '/etc/passwd'");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"..\",\"/a\"],\"filesHash\":\"" HASH "\"}]}", "COPY source '..'");
  ts_spec ok;
  char oerr[512] = "";
  CHECK_INT(parse("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a/../b\",\"/a\"],\"filesHash\":\"" HASH "\"},"
                  "{\"type\":\"COPY\",\"args\":[\"./x/..\",\"/a\"],\"filesHash\":\"" HASH "\"},"
                  "{\"type\":\"COPY\",\"args\":[\"..a/b..\",\"/a\"],\"filesHash\":\"" HASH "\"}]}", &ok, oerr, sizeof oerr), 0);
  CHECK_STR(oerr, "");
  ts_free(&ok);
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\"]}]}", "pairs");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"1A\",\"x\"]}]}", "'1A' is not an environment variable name");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"WORKDIR\",\"args\":[\"a\",\"b\"]}]}", "WORKDIR takes");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"USER\",\"args\":[\"nobody\"]}]}", "user 'nobody'");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"x\"],\"gzip\":1}]}", "'gzip' must be a boolean");
  /* bounds: steps, args */
  json_t *steps = json_array();
  for (int i = 0; i <= TS_MAX_STEPS; i++) json_array_append_new(steps, json_pack("{s:s,s:[s]}", "type", "RUN", "args", "true"));
  json_t *body = json_pack("{s:s,s:o}", "fromTemplate", "base", "steps", steps);
  ts_spec s;
  char err[512];
  CHECK_INT(ts_parse(body, &s, err, sizeof err), -1);
  CHECK_HAS(err, "at most 256");
  json_array_remove(steps, 0);
  CHECK_INT(ts_parse(body, &s, err, sizeof err), 0);
  CHECK_INT((int)s.nsteps, TS_MAX_STEPS);
  ts_free(&s);
  json_t *args = json_array();
  for (int i = 0; i <= TS_MAX_ARGS; i++) json_array_append_new(args, json_string(i % 2 ? "v" : "K"));
  json_array_clear(steps);
  json_array_append_new(steps, json_pack("{s:s,s:o}", "type", "ENV", "args", args));
  CHECK_INT(ts_parse(body, &s, err, sizeof err), -1);
  CHECK_HAS(err, "steps[0].args: more than 1024");
  json_decref(body);
}

static void test_hash(void) {
  CHECK(ts_valid_hash(HASH));
  CHECK(!ts_valid_hash(NULL));
  CHECK(!ts_valid_hash(""));
  CHECK(!ts_valid_hash(HASH "0"));
  CHECK(!ts_valid_hash("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
  CHECK(!ts_valid_hash("../456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
}

int main(void) {
  MBT_RUN(test_steps);
  MBT_RUN(test_refusals);
  MBT_RUN(test_hash);
  return mbt_report();
}
