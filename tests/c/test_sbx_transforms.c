/* test_sbx_transforms.c — sandboxd/transforms.c: E2B's per-host rules (exact over the longest
 * wildcard, later headers replace earlier ones), refusals naming the host and header, and the
 * placeholders filled in without a value ever left behind or let into a header it would break. */
#include "mbtest.h"
#include "transforms.h"

static char err[512];

static char *lookup(void *cls, const char *name, size_t *len) {
  (void)cls;
  const char *v = !strcmp(name, "tok") ? "s3cr3t" : !strcmp(name, "crlf") ? "a\r\nX-Evil: 1" : NULL;
  if (!strcmp(name, "long")) {
    char *b = malloc(9000);
    memset(b, 'x', 9000);
    *len = 9000;
    return b;
  }
  if (!v) return NULL;
  *len = strlen(v);
  return strdup(v);
}
static int released;
static void release(void *cls, char *v, size_t len) {
  (void)cls;
  memset(v, 0, len);
  free(v);
  released++;
}

static int add1(transforms *t, const char *host, const char *name, const char *value) {
  const char *n[] = {name}, *v[] = {value};
  err[0] = 0;
  return transforms_add(t, host, n, v, 1, err, sizeof err);
}

static void test_parse(void) {
  transforms t = {0};
  CHECK_INT(add1(&t, "API.Example.com.", "Authorization", "Bearer ${e2b.secrets.tok}"), 0);
  CHECK_STR(t.hosts[0].host, "api.example.com");
  CHECK_INT(add1(&t, "*.example.com", "X-A", "1"), 0);
  CHECK_INT(add1(&t, "*.b.example.com", "X-B", "2"), 0);
  CHECK_INT(t.nhosts, 3);
  const char *bad[][3] = {
      {"*", "X", "1"}, {"", "X", "1"}, {"a b", "X", "1"}, {"ok.com", "Bad Name", "1"}, {"ok.com", "Host", "x"},
      {"ok.com", "Content-Length", "1"}, {"ok.com", "X", "a\nb"}, {"ok.com", "X", "${e2b.identity.tokens.aws}"},
      {"ok.com", "X", "${e2b.other.thing}"}, {"ok.com", "X", "${e2b.secrets.}"}, {"ok.com", "X", "${e2b.secrets.noend"},
      {"ok.com", "X", "${e2b.secrets.a{b}"},
  };
  const char *why[] = {"bare", "not a host name", "not a host name", "not a header name", "cannot be set by a rule",
                       "cannot be set by a rule", "control character", "workload identity", "unknown placeholder",
                       "needs a name", "needs a name", "needs a name"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_INT(add1(&t, bad[i][0], bad[i][1], bad[i][2]), -1);
    CHECK_HAS(err, why[i]);
  }
  CHECK_INT(t.nhosts, 3);                           /* nothing of a refused rule stays */
  /* literal ${ that is not e2b's stays as it is */
  CHECK_INT(add1(&t, "lit.com", "X", "${HOME} $x ${"), 0);
  /* a later rule's header replaces an earlier one, case-insensitively */
  CHECK_INT(add1(&t, "api.example.com", "authorization", "Basic ${e2b.secrets.tok}"), 0);
  const transform_host *h = transforms_for(&t, "api.example.com");
  CHECK(h && h->nheaders == 1);
  CHECK_STR(h->headers[0].value, "Basic ${e2b.secrets.tok}");
  transforms_free(&t);
}

static void test_match(void) {
  transforms t = {0};
  add1(&t, "*.example.com", "X", "wild");
  add1(&t, "*.b.example.com", "X", "longer");
  add1(&t, "c.b.example.com", "X", "exact");
  CHECK(transforms_for(&t, "example.com") == NULL);           /* never the apex */
  CHECK_STR(transforms_for(&t, "a.example.com")->headers[0].value, "wild");
  CHECK_STR(transforms_for(&t, "x.b.example.com")->headers[0].value, "longer");
  CHECK_STR(transforms_for(&t, "y.x.b.example.com")->headers[0].value, "longer");
  CHECK_STR(transforms_for(&t, "c.b.example.com")->headers[0].value, "exact");
  CHECK(transforms_for(&t, "notexample.com") == NULL);
  CHECK(transforms_for(&t, "b.example.comx") == NULL);
  transforms_free(&t);
}

static void test_fill(void) {
  char out[TRANSFORM_VALUE_MAX + 1];
  released = 0;
  CHECK_INT(transforms_fill("Bearer ${e2b.secrets.tok}!", lookup, release, NULL, out, sizeof out, err, sizeof err), 14);
  CHECK_STR(out, "Bearer s3cr3t!");
  CHECK_INT(transforms_fill("${e2b.secrets.TOK}${e2b.secrets.tok}", lookup, release, NULL, out, sizeof out, err, sizeof err), 12);
  CHECK_STR(out, "s3cr3ts3cr3t");                             /* names are looked up lower-cased */
  CHECK_INT(released, 3);
  CHECK_INT(transforms_fill("no placeholder", lookup, release, NULL, out, sizeof out, err, sizeof err), 14);
  /* an unknown secret: an error naming it, and nothing of an earlier value left in out */
  memset(out, 'z', sizeof out);
  CHECK_INT(transforms_fill("${e2b.secrets.tok} ${e2b.secrets.missing}", lookup, release, NULL, out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "secret \"missing\" is not known");
  CHECK(strstr(out, "s3cr3t") == NULL);
  CHECK(strstr(err, "s3cr3t") == NULL);
  /* a value that would break the header never goes in */
  CHECK_INT(transforms_fill("${e2b.secrets.crlf}", lookup, release, NULL, out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "line break or NUL");
  CHECK(strstr(err, "Evil") == NULL);
  CHECK_INT(transforms_fill("x${e2b.secrets.long}", lookup, release, NULL, out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "longer than the limit");
}

static int seen;
static void each(void *cls, const char *name) {
  (void)cls;
  if (!strcmp(name, "x") || !strcmp(name, "y")) seen++;
}
static void test_each(void) {
  seen = 0;
  transforms_each_secret("a ${e2b.secrets.x} b ${e2b.secrets.y} ${e2b.secrets.z", each, NULL);
  CHECK_INT(seen, 2);
}

int main(void) {
  MBT_RUN(test_parse);
  MBT_RUN(test_match);
  MBT_RUN(test_fill);
  MBT_RUN(test_each);
  return mbt_report();
}
