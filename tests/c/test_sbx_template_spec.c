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
  /* any other image is pulled, with the registry's credentials when given */
  CHECK_INT(parse("{\"fromImage\":\"127.0.0.1:5000/team/app:1.2\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\",\"password\":\"p w\"}}",
                  &s, err, sizeof err), 0);
  CHECK(s.from_template == NULL);
  CHECK_STR(s.from_image, "127.0.0.1:5000/team/app:1.2");
  CHECK_STR(s.reg_user, "u");
  CHECK_STR(s.reg_pass, "p w");
  ts_free(&s);
  CHECK_INT(parse("{\"fromImage\":\"ubuntu:22.04\",\"fromImageRegistry\":null}", &s, err, sizeof err), 0);
  CHECK_STR(s.from_image, "ubuntu:22.04");
  CHECK(s.reg_user == NULL && s.reg_pass == NULL);
  ts_free(&s);
  CHECK_INT(parse("{\"fromImage\":\"e2bdev/baseline\"}", &s, err, sizeof err), 0);   /* another image than E2B's base */
  CHECK_STR(s.from_image, "e2bdev/baseline");
  ts_free(&s);
  CHECK_INT(parse("{\"fromTemplate\":\"my-env\",\"fromImage\":\"\",\"steps\":null,\"startCmd\":null}", &s, err, sizeof err), 0);
  CHECK_STR(s.from_template, "my-env");
  CHECK(s.start_cmd == NULL);
  ts_free(&s);
}

static void test_image_refs(void) {
  static const char *const good[] = {
      "ubuntu", "ubuntu:22.04", "library/ubuntu", "ghcr.io/org/app:v1.0-rc_2", "localhost/app", "localhost:5000/a/b/c",
      "127.0.0.1:5000/test/img:1", "registry.example.com/a.b/c__d/e-f--g:T", "r.io/a@sha256:" HASH, "r.io/a:tag@sha256:" HASH, NULL};
  char err[200];
  for (size_t i = 0; good[i]; i++) {
    err[0] = '\0';
    if (!ts_valid_image_ref(good[i], err, sizeof err)) { fprintf(stderr, "refused %s: %s\n", good[i], err); CHECK(0); }
  }
  static const struct { const char *ref, *why; } bad[] = {
      {"", "empty"}, {"Ubuntu", "lower-case"}, {"a//b", "lower-case"}, {"a/", "ends in '/'"}, {"-a", "lower-case"},
      {"a..b", "lower-case"}, {"a___b", "lower-case"}, {"a:", "a tag is 1 to 128"}, {"a:-x", "the tag may hold"},
      {"a:t t", "the tag may hold"}, {"r.io/a@sha256:abc", "a digest is"}, {"r.io/a@md5:" HASH, "a digest is"},
      {"r.io:0/a", "not a registry host"}, {"r.io:70000/a", "not a registry host"}, {"-r.io/a", "not a registry host"},
      {"r_x.io/a", "not a registry host"}, {"r.io/", "name is missing"}, {"r.io:5000/", "name is missing"},
      {"a b", "lower-case"}, {"a\nb", "lower-case"}, {"docker://a", "not a registry host"}, {NULL, NULL}};
  for (size_t i = 0; bad[i].ref; i++) {
    err[0] = '\0';
    bool ok = ts_valid_image_ref(bad[i].ref, err, sizeof err);
    if (ok) fprintf(stderr, "accepted '%s'\n", bad[i].ref);
    CHECK(!ok);
    CHECK_HAS(err, bad[i].why);
  }
  char longref[300];
  memset(longref, 'a', 256);
  longref[256] = '\0';
  CHECK(!ts_valid_image_ref(longref, err, sizeof err));
  CHECK_HAS(err, "longer than 255");
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
  want_refusal("{\"fromImage\":\"Ubuntu:22.04\"}", "field 'fromImage': 'Ubuntu:22.04' is not an image reference: name components");
  want_refusal("{\"fromImage\":\"e2bdev/base\",\"fromImageRegistry\":{\"type\":\"registry\"}}", "is sandboxd's base template, pulled from no registry");
  want_refusal("{\"fromTemplate\":\"base\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\",\"password\":\"p\"}}",
               "credentials go with 'fromImage'");
  /* fromImageRegistry: the SDK's three kinds; only `registry` is pulled with */
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"aws\",\"awsAccessKeyId\":\"k\",\"awsSecretAccessKey\":\"s\",\"awsRegion\":\"x\"}}",
               "fromImageRegistry.type 'aws' (AWS ECR) is not supported");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"gcp\",\"serviceAccountJson\":\"{}\"}}",
               "fromImageRegistry.type 'gcp' (GCP Artifact Registry) is not supported");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"azure\"}}", "fromImageRegistry.type 'azure' is not one");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"username\":\"u\",\"password\":\"p\"}}", "fromImageRegistry.type is required");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\",\"password\":\"p\",\"token\":1}}",
               "fromImageRegistry.field 'token' is not supported");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\"}}", "both 'username' and 'password'");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\",\"password\":\"\"}}", "both 'username'");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"a:b\",\"password\":\"p\"}}", "may not hold ':'");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\",\"password\":7}}", "'password' must be a string");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":\"registry\"}", "'fromImageRegistry' must be an object");
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
  /* no string field is read short at a NUL byte (found by fuzz/fuzz_sbx_template_request.c: a
   * start command, an image reference, a step's type or hash was taken up to the NUL) */
  want_refusal("{\"fromTemplate\":\"base\",\"startCmd\":\"npm start\\u0000; rm -rf /\"}", "'startCmd' holds a NUL byte");
  want_refusal("{\"fromTemplate\":\"base\",\"readyCmd\":\"\\u0000x\"}", "'readyCmd' holds a NUL byte");
  want_refusal("{\"fromTemplate\":\"my\\u0000env\"}", "'fromTemplate' holds a NUL byte");
  want_refusal("{\"fromImage\":\"ubuntu\\u0000:evil\"}", "'fromImage' holds a NUL byte");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\\u0000x\",\"args\":[\"x\"]}]}", "steps[0].'type' holds a NUL byte");
  want_refusal("{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\",\"/a\"],\"filesHash\":\"" HASH "\\u0000x\"}]}",
               "steps[0].'filesHash' holds a NUL byte");
  want_refusal("{\"fromImage\":\"r.io/a\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\",\"password\":\"p\\u0000q\"}}",
               "fromImageRegistry.'password' holds a NUL byte");
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

/* A refusal quotes what was sent, cut: never inside a character, since the message goes into a
 * JSON reply (a cut character made it "(message is not valid UTF-8)"; found by
 * fuzz/fuzz_sbx_template_request.c). */
static void test_refusal_utf8(void) {
  char euros[3 * 40 + 3] = "ab";   /* "ab" then 40 3-byte characters: a cut at 40, 60 or 100 bytes splits one */
  for (int i = 0; i < 40; i++) strcat(euros, "\xe2\x82\xac");
  char body[512], err[512];
  static const char *const shapes[] = {
      "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"%s\",\"v\"]}]}",    /* '%.60s' */
      "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"%s\",\"args\":[\"x\"]}]}",            /* '%.40s' */
      "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[\"x\",\"%s\"]}]}",  /* a user, '%.40s' */
      "{\"fromImage\":\"%s\"}",                                                          /* '%.100s' */
      "{\"fromTemplate\":\"base\",\"%s\":1}",                                            /* a field, '%.100s' */
      NULL};
  for (size_t i = 0; shapes[i]; i++) {
    snprintf(body, sizeof body, shapes[i], euros);
    ts_spec s;
    err[0] = '\0';
    CHECK_INT(parse(body, &s, err, sizeof err), -1);
    json_t *m = json_string(err);
    if (!m) fprintf(stderr, "not UTF-8: %s\n", err);
    CHECK(m != NULL);
    CHECK_HAS(err, "'ab\xe2\x82\xac");
    json_decref(m);
  }
  /* a buffer too small for the message: cut between characters too */
  snprintf(body, sizeof body, shapes[0], "\xc3\xa9\xc3\xa9");
  ts_spec s;
  char small[21];   /* "steps[0].args[0]: '" is 19 bytes: room for one byte of the 2-byte character */
  CHECK_INT(parse(body, &s, small, sizeof small), -1);
  CHECK_STR(small, "steps[0].args[0]: '");
  char small2[22];
  CHECK_INT(parse(body, &s, small2, sizeof small2), -1);
  CHECK_STR(small2, "steps[0].args[0]: '\xc3\xa9");
}

int main(void) {
  MBT_RUN(test_steps);
  MBT_RUN(test_refusals);
  MBT_RUN(test_refusal_utf8);
  MBT_RUN(test_hash);
  MBT_RUN(test_image_refs);
  return mbt_report();
}
