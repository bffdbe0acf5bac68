/* test_sbx_secrets.c — the secret store (sandboxd/secrets.c) against a real state directory:
 * create, update (versions), get by id and name, pages, delete; names, values and metadata
 * refused with the field named and the value never in a message; persistence across a reopen;
 * the files never holding a value in clear; a missing, damaged, foreign or exposed key file and
 * an altered catalogue refused clearly; scoped secrets (usable by one sandbox, deleted with it
 * and at start); the 1000-secret limit; readers while a writer updates. Links no HTTP code. */
#include "mbtest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "secrets.h"

static char state[64] = "/tmp/mb-secrets-XXXXXX", msg[600], err[900];

static char *slurp(const char *name, size_t *len) {
  char p[200];
  snprintf(p, sizeof p, "%s/%s", state, name);
  FILE *f = fopen(p, "rb");
  if (!f) { *len = 0; return NULL; }
  char *buf = mbt_xmalloc(4 << 20);
  *len = fread(buf, 1, 4 << 20, f);
  fclose(f);
  return buf;
}

static void spit(const char *name, const void *data, size_t len, mode_t mode) {
  char p[200];
  snprintf(p, sizeof p, "%s/%s", state, name);
  unlink(p);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
  CHECK(fd >= 0 && write(fd, data, len) == (ssize_t)len);
  fchmod(fd, mode);
  close(fd);
}

static mode_t mode_of(const char *name) {
  char p[200];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", state, name);
  return stat(p, &st) == 0 ? st.st_mode & 07777 : (mode_t)-1;
}

static bool file_has(const char *name, const char *needle, size_t nlen) {
  size_t len;
  char *t = slurp(name, &len);
  bool hit = t && memmem(t, len, needle, nlen) != NULL;
  free(t);
  return hit;
}

static int create(const char *name, const char *value, json_t *md, secret_info *out) {
  secret_info tmp;
  int rc = secrets_create(name, value, strlen(value), md, out ? out : &tmp, msg, sizeof msg);
  if (rc == 0 && !out) secret_info_free(&tmp);
  return rc;
}

static int update(const char *ref, const char *value) {
  secret_info in;
  int rc = secrets_update(ref, value, strlen(value), NULL, &in, msg, sizeof msg);
  if (rc == 0) secret_info_free(&in);
  return rc;
}

/* The value as sandbox sid gets it, compared with want (NULL: none). */
static bool value_is(const char *ref, const char *sid, const char *want) {
  size_t len = 99;
  char *v = secrets_value(ref, sid, &len);
  bool ok = want ? v && len == strlen(want) && !memcmp(v, want, len) && v[len] == '\0' : v == NULL && len == 0;
  secrets_free_value(v, len);
  return ok;
}

static void reopen(void) {
  secrets_shutdown();
  CHECK_INT(secrets_init(state, err, sizeof err), 0);
}

static void test_fresh_store(void) {
  CHECK_INT(secrets_init(state, err, sizeof err), 0);
  size_t n;
  uint64_t next;
  secret_info *all = secrets_list(0, 0, &n, &next);
  CHECK(all && n == 0 && next == 0);
  secrets_list_free(all, n);
  CHECK(value_is("anything", NULL, NULL));
  CHECK_INT(mode_of("secrets.key"), (mode_t)-1);        /* made with the first secret, not before */
}

static void test_create_get(void) {
  json_t *md = json_pack("{s:s}", "team", "core");
  secret_info a, b;
  CHECK_INT(create("GitHub_Token", "ghp_first-VALUE-1", md, &a), 0);
  json_decref(md);
  CHECK_INT(strlen(a.id), SECRETS_ID_LEN);
  CHECK(!strncmp(a.id, "sec_", 4));
  CHECK_STR(a.name, "github_token");                  /* lower-cased, as E2B stores names */
  CHECK_INT(a.version, 1);
  CHECK(a.created_ms > 0 && a.updated_ms == a.created_ms);
  CHECK_STR(json_string_value(json_object_get(a.metadata, "team")), "core");
  CHECK_STR(a.scope, "");
  CHECK_INT(mode_of("secrets.key"), 0600);
  CHECK_INT(mode_of("secrets.json"), 0600);
  struct stat st;
  char kp[200];
  snprintf(kp, sizeof kp, "%s/secrets.key", state);
  CHECK(stat(kp, &st) == 0 && st.st_size == 32);
  /* by id, by name, by a name in another case */
  CHECK_INT(secrets_get(a.id, &b, msg, sizeof msg), 0);
  CHECK_STR(b.name, "github_token");
  secret_info_free(&b);
  CHECK_INT(secrets_get("GITHUB_TOKEN", &b, msg, sizeof msg), 0);
  CHECK_STR(b.id, a.id);
  secret_info_free(&b);
  CHECK_INT(secrets_get("nope", &b, msg, sizeof msg), 404);
  CHECK_HAS(msg, "secret 'nope' not found");
  CHECK_INT(secrets_get("sec_00000000000000000000", &b, msg, sizeof msg), 404);
  CHECK(value_is("github_token", NULL, "ghp_first-VALUE-1"));
  CHECK(value_is(a.id, "isomesandbox", "ghp_first-VALUE-1"));
  CHECK(value_is("GitHub_Token", NULL, "ghp_first-VALUE-1"));
  /* a name is taken once, whatever its case */
  CHECK_INT(create("GITHUB_TOKEN", "other", NULL, NULL), 409);
  CHECK_HAS(msg, "secret 'github_token' already exists");
  CHECK(value_is("github_token", NULL, "ghp_first-VALUE-1"));
  secret_info_free(&a);
}

static void test_refusals(void) {
  static const char *const names[] = {"", "sec_mine", "SEC_X", "a/b", "has space", "-lead", ".hidden", "x{y}", "tab\tname", "é"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    msg[0] = 0;
    CHECK_INT(create(names[i], "v", NULL, NULL), 400);
    CHECK_HAS(msg, "field 'name'");
  }
  CHECK_INT(create("sec_mine", "v", NULL, NULL), 400);
  CHECK_HAS(msg, "reserved for secret ids");
  char longname[SECRETS_NAME_MAX + 2];
  memset(longname, 'n', sizeof longname - 1);
  longname[SECRETS_NAME_MAX + 1] = 0;
  CHECK_INT(create(longname, "v", NULL, NULL), 400);
  longname[SECRETS_NAME_MAX] = 0;
  CHECK_INT(create(longname, "v", NULL, NULL), 0);     /* exactly the longest */
  /* values: never echoed */
  static const char *const values[] = {"", "MARKER\nline", "MARKER\r", "MARK\x7f", "MARKER\x01"};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    msg[0] = 0;
    CHECK_INT(create("valued", values[i], NULL, NULL), 400);
    CHECK_HAS(msg, "field 'value'");
    CHECK(!strstr(msg, "MARK"));
  }
  /* a NUL inside the value (length given) */
  CHECK_INT(secrets_create("valued", "MARK\0ER", 7, NULL, &(secret_info){0}, msg, sizeof msg), 400);
  char *big = mbt_xmalloc(SECRETS_VALUE_MAX + 2);
  memset(big, 'v', SECRETS_VALUE_MAX + 1);
  big[SECRETS_VALUE_MAX + 1] = 0;
  CHECK_INT(create("big", big, NULL, NULL), 400);
  CHECK_HAS(msg, "at most 65536");
  big[SECRETS_VALUE_MAX] = 0;
  CHECK_INT(create("big", big, NULL, NULL), 0);        /* exactly the largest */
  CHECK(value_is("big", NULL, big));
  free(big);
  CHECK_INT(create("tabbed", "Bearer\tx y~\xc3\xa9", NULL, NULL), 0);   /* tab, space, visible, UTF-8 */
  /* metadata: E2B's limits, each naming the field */
  struct { json_t *md; const char *want; } cases[] = {
    {json_string("x"), "field 'metadata' must be an object"},
    {json_pack("{s:i}", "n", 1), "field 'metadata.n' must be a string"},
    {json_pack("{s:s}", "", "v"), "a key cannot be empty"},
    {json_pack("{s:s}", SECRETS_SCOPE_KEY, "Not-An-Id"), "field 'metadata.sandboxd.sandbox' must be a sandbox id"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECK_INT(create("meta", "v", cases[i].md, NULL), 400);
    CHECK_HAS(msg, cases[i].want);
    json_decref(cases[i].md);
  }
  json_t *md = json_object();
  for (int i = 0; i < SECRETS_META_ENTRIES + 1; i++) {
    char k[16];
    snprintf(k, sizeof k, "k%d", i);
    json_object_set_new(md, k, json_string("v"));
  }
  CHECK_INT(create("meta", "v", md, NULL), 400);
  CHECK_HAS(msg, "at most 32 entries");
  json_decref(md);
  char key[SECRETS_META_KEY_MAX + 2], val[SECRETS_META_VALUE_MAX + 2];
  memset(key, 'k', sizeof key - 1);
  key[sizeof key - 1] = 0;
  memset(val, 'v', sizeof val - 1);
  val[sizeof val - 1] = 0;
  md = json_pack("{s:s}", key, "v");
  CHECK_INT(create("meta", "v", md, NULL), 400);
  CHECK_HAS(msg, "longer than 128 bytes");
  json_decref(md);
  md = json_pack("{s:s}", "k", val);
  CHECK_INT(create("meta", "v", md, NULL), 400);
  CHECK_HAS(msg, "field 'metadata.k' is longer than 1024 bytes");
  json_decref(md);
  md = json_object();
  val[1000] = 0;
  for (int i = 0; i < 9; i++) {
    char k[16];
    snprintf(k, sizeof k, "k%d", i);
    json_object_set_new(md, k, json_string(val));
  }
  CHECK_INT(create("meta", "v", md, NULL), 400);
  CHECK_HAS(msg, "at most 8192");
  json_decref(md);
  CHECK(value_is("meta", NULL, NULL));                 /* nothing refused was stored */
  CHECK_INT(secrets_delete(longname, msg, sizeof msg), 0);
  CHECK_INT(secrets_delete("big", msg, sizeof msg), 0);
  CHECK_INT(secrets_delete("tabbed", msg, sizeof msg), 0);
}

static void test_update_versions(void) {
  secret_info a, u;
  json_t *md = json_pack("{s:s}", "owner", "me");
  CHECK_INT(create("api-key", "value-one", md, &a), 0);
  json_decref(md);
  CHECK_INT(secrets_update("API-KEY", "value-two", 9, NULL, &u, msg, sizeof msg), 0);
  CHECK_STR(u.id, a.id);
  CHECK_INT(u.version, 2);
  CHECK(u.updated_ms >= u.created_ms && u.created_ms == a.created_ms);
  CHECK_STR(json_string_value(json_object_get(u.metadata, "owner")), "me");   /* kept */
  secret_info_free(&u);
  CHECK(value_is("api-key", NULL, "value-two"));
  md = json_pack("{s:s}", "owner", "you");
  CHECK_INT(secrets_update(a.id, "value-three", 11, md, &u, msg, sizeof msg), 0);   /* replaced */
  json_decref(md);
  CHECK_INT(u.version, 3);
  CHECK(json_object_size(u.metadata) == 1 && !strcmp(json_string_value(json_object_get(u.metadata, "owner")), "you"));
  secret_info_free(&u);
  CHECK(value_is(a.id, NULL, "value-three"));
  CHECK_INT(secrets_update("nope", "x", 1, NULL, &u, msg, sizeof msg), 404);
  CHECK_INT(secrets_update("api-key", "bad\nvalue", 9, NULL, &u, msg, sizeof msg), 400);
  CHECK(value_is(a.id, NULL, "value-three"));
  /* a scope is given at creation only */
  md = json_pack("{s:s}", SECRETS_SCOPE_KEY, "isandbox1");
  CHECK_INT(secrets_update("api-key", "x", 1, md, &u, msg, sizeof msg), 400);
  CHECK_HAS(msg, "field 'metadata.sandboxd.sandbox'");
  json_decref(md);
  CHECK_INT(secrets_delete("api-key", msg, sizeof msg), 0);
  secret_info_free(&a);
}

static void test_pages_delete(void) {
  char ids[5][SECRETS_ID_LEN + 1];
  for (int i = 0; i < 5; i++) {
    char name[16];
    secret_info in;
    snprintf(name, sizeof name, "page%d", i);
    CHECK_INT(create(name, "v", NULL, &in), 0);
    snprintf(ids[i], sizeof ids[i], "%s", in.id);
    secret_info_free(&in);
  }
  /* github_token is there from before: 6 in all, newest first */
  size_t n;
  uint64_t next = 0;
  const char *want[] = {"page4", "page3", "page2", "page1", "page0", "github_token"};
  size_t seen = 0;
  int pages = 0;
  do {
    secret_info *p = secrets_list(next, 2, &n, &next);
    CHECK(p != NULL);
    pages++;
    for (size_t i = 0; i < n && seen < 6; i++, seen++) CHECK_STR(p[i].name, want[seen]);
    secrets_list_free(p, n);
  } while (next && pages < 10);
  CHECK_INT(seen, 6);
  CHECK_INT(pages, 3);
  secret_info *all = secrets_list(0, 0, &n, &next);
  CHECK(n == 6 && next == 0);
  secrets_list_free(all, n);
  CHECK_INT(secrets_delete("page2", msg, sizeof msg), 0);
  CHECK_INT(secrets_delete(ids[3], msg, sizeof msg), 0);
  CHECK_INT(secrets_delete("page2", msg, sizeof msg), 404);
  CHECK(value_is("page2", NULL, NULL));
  all = secrets_list(0, 0, &n, &next);
  CHECK_INT(n, 4);
  secrets_list_free(all, n);
  for (int i = 0; i < 5; i++) secrets_delete(ids[i], msg, sizeof msg);
}

static void test_persistence_and_files(void) {
  secret_info a;
  CHECK_INT(create("persist", "kept-across-restarts-VALUE", NULL, &a), 0);
  CHECK_INT(update("persist", "kept-across-restarts-VALUE2"), 0);
  reopen();
  secret_info b;
  CHECK_INT(secrets_get("persist", &b, msg, sizeof msg), 0);
  CHECK_STR(b.id, a.id);
  CHECK_INT(b.version, 2);
  CHECK_INT(b.created_ms, a.created_ms);
  secret_info_free(&b);
  CHECK(value_is("persist", NULL, "kept-across-restarts-VALUE2"));
  CHECK(value_is("github_token", NULL, "ghp_first-VALUE-1"));
  /* the files hold names, never a value */
  CHECK(file_has("secrets.json", "persist", 7));
  static const char *const values[] = {"kept-across-restarts-VALUE", "ghp_first-VALUE-1", "VALUE"};
  for (size_t i = 0; i < 3; i++) {
    CHECK(!file_has("secrets.json", values[i], strlen(values[i])));
    CHECK(!file_has("secrets.key", values[i], strlen(values[i])));
  }
  CHECK(!file_has("secrets.json", "ghp_", 4));
  /* a new secret after a reopen gets a newer place in the list */
  secret_info c;
  CHECK_INT(create("after", "x", NULL, &c), 0);
  CHECK(c.seq > a.seq);
  secret_info_free(&c);
  secrets_delete("after", msg, sizeof msg);
  secret_info_free(&a);
}

/* The store refuses to open, naming what is wrong, and stays closed. */
static void refused(const char *want) {
  secrets_shutdown();
  err[0] = 0;
  CHECK_INT(secrets_init(state, err, sizeof err), -1);
  CHECK_HAS(err, want);
  CHECK(value_is("persist", NULL, NULL));
  CHECK_INT(create("while-closed", "v", NULL, NULL), 503);
  secret_info in;
  CHECK_INT(secrets_get("persist", &in, msg, sizeof msg), 503);
}

static void test_key_and_catalogue_refused(void) {
  size_t klen, clen;
  char *key = slurp("secrets.key", &klen), *cat = slurp("secrets.json", &clen);
  CHECK(key && klen == 32 && cat && clen > 0);
  char kp[200], other[32];
  snprintf(kp, sizeof kp, "%s/secrets.key", state);
  unlink(kp);
  refused("secrets.key is missing");
  spit("secrets.key", key, 16, 0600);
  refused("is 16 bytes, not a key");
  spit("secrets.key", key, 32, 0644);
  refused("chmod 600");
  for (int i = 0; i < 32; i++) other[i] = (char)(key[i] ^ 0x5a);
  spit("secrets.key", other, 32, 0600);
  refused("is not the key of");
  unlink(kp);
  CHECK(symlink("/dev/null", kp) == 0);
  refused("symbolic link");
  unlink(kp);
  mkdir(kp, 0700);
  refused("is not a regular file");
  rmdir(kp);
  spit("secrets.key", key, 32, 0600);
  reopen();                                           /* the right key again */
  CHECK(value_is("persist", NULL, "kept-across-restarts-VALUE2"));
  /* an altered catalogue: two sealed values swapped between entries */
  json_t *root = json_loadb(cat, clen, 0, NULL), *arr = json_object_get(root, "secrets");
  CHECK(json_array_size(arr) >= 2);
  json_t *v0 = json_incref(json_object_get(json_array_get(arr, 0), "value"));
  json_object_set(json_array_get(arr, 0), "value", json_object_get(json_array_get(arr, 1), "value"));
  json_object_set_new(json_array_get(arr, 1), "value", v0);
  char *swapped = json_dumps(root, 0);
  spit("secrets.json", swapped, strlen(swapped), 0600);
  refused("does not open with");
  free(swapped);
  /* a sealed value moved to another version of its own secret does not open either */
  json_object_set_new(json_array_get(arr, 1), "value", json_incref(json_object_get(json_array_get(arr, 0), "value")));
  json_t *e0 = json_array_get(arr, 0);
  json_object_set_new(e0, "version", json_integer(json_integer_value(json_object_get(e0, "version")) + 1));
  swapped = json_dumps(root, 0);
  spit("secrets.json", swapped, strlen(swapped), 0600);
  refused("does not open with");
  free(swapped);
  json_decref(root);
  spit("secrets.json", "{not json", 9, 0600);
  refused("not JSON");
  spit("secrets.json", cat, clen, 0600);
  reopen();
  CHECK(value_is("persist", NULL, "kept-across-restarts-VALUE2"));
  free(key);
  free(cat);
}

static bool only_isbx3(const char *id) { return !strcmp(id, "isbx3"); }

static void test_scoped(void) {
  json_t *md = json_pack("{s:s,s:s}", SECRETS_SCOPE_KEY, "isbx1", "why", "a host token");
  secret_info a;
  CHECK_INT(create("host-token-isbx1", "scoped-VALUE", md, &a), 0);
  json_decref(md);
  CHECK_STR(a.scope, "isbx1");
  CHECK(value_is("host-token-isbx1", "isbx1", "scoped-VALUE"));
  CHECK(value_is(a.id, "isbx1", "scoped-VALUE"));
  CHECK(value_is("host-token-isbx1", "isbx2", NULL));
  CHECK(value_is("host-token-isbx1", NULL, NULL));
  CHECK(value_is("persist", "isbx1", "kept-across-restarts-VALUE2"));   /* every sandbox: the unscoped ones */
  size_t n;
  uint64_t next;
  secret_info *all = secrets_list(0, 0, &n, &next);
  bool listed = false;
  for (size_t i = 0; i < n; i++) listed |= !strcmp(all[i].id, a.id) && !strcmp(all[i].scope, "isbx1");
  CHECK(listed);
  secrets_list_free(all, n);
  /* the scope stays what it was: the same key again is fine, another or none is not */
  md = json_pack("{s:s}", SECRETS_SCOPE_KEY, "isbx1");
  secret_info u;
  CHECK_INT(secrets_update(a.id, "scoped-VALUE2", 13, md, &u, msg, sizeof msg), 0);
  secret_info_free(&u);
  json_decref(md);
  md = json_pack("{s:s}", "why", "no scope");
  CHECK_INT(secrets_update(a.id, "x", 1, md, &u, msg, sizeof msg), 400);
  CHECK_HAS(msg, "scoped to sandbox 'isbx1'");
  json_decref(md);
  secrets_sandbox_gone("isbx2");                      /* not its sandbox */
  CHECK(value_is("host-token-isbx1", "isbx1", "scoped-VALUE2"));
  secrets_sandbox_gone("isbx1");
  CHECK_INT(secrets_get(a.id, &u, msg, sizeof msg), 404);
  CHECK(value_is("persist", NULL, "kept-across-restarts-VALUE2"));
  secret_info_free(&a);
  /* at start: sandboxes that are gone lose theirs */
  md = json_pack("{s:s}", SECRETS_SCOPE_KEY, "isbx2");
  CHECK_INT(create("for-isbx2", "v2", md, NULL), 0);
  json_decref(md);
  md = json_pack("{s:s}", SECRETS_SCOPE_KEY, "isbx3");
  CHECK_INT(create("for-isbx3", "v3", md, NULL), 0);
  json_decref(md);
  reopen();
  CHECK_INT(secrets_sweep_scoped(only_isbx3), 1);
  CHECK(value_is("for-isbx2", "isbx2", NULL));
  CHECK(value_is("for-isbx3", "isbx3", "v3"));
  CHECK_INT(secrets_sweep_scoped(only_isbx3), 0);
  reopen();
  CHECK(value_is("for-isbx2", "isbx2", NULL));
  secrets_delete("for-isbx3", msg, sizeof msg);
}

static void test_parse_catalogue(void) {
  size_t n = 99;
  size_t clen;
  char *cat = slurp("secrets.json", &clen);
  CHECK_INT(secrets_parse_catalogue(cat, clen, &n, err, sizeof err), 0);
  CHECK(n >= 2);
  free(cat);
  struct { const char *text, *want; } bad[] = {
    {"[]", "an object"},
    {"{\"version\":2,\"cipher\":\"aes-256-gcm\",\"nextSeq\":1,\"secrets\":[]}", "version 1"},
    {"{\"version\":1,\"cipher\":\"rot13\",\"nextSeq\":1,\"secrets\":[]}", "field 'cipher'"},
    {"{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":1,\"secrets\":[],\"extra\":1}", "unknown field 'extra'"},
    {"{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":0,\"secrets\":[]}", "field 'nextSeq'"},
    {"{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":5,\"keyCheck\":\"AAAA\",\"secrets\":[]}", "field 'keyCheck'"},
    {"{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":5,\"secrets\":[{\"id\":\"sec_aaaaaaaaaaaaaaaaaaaa\"}]}", "no key check"},
    {"{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":1,\"secrets\":{}}", "field 'secrets'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    CHECK_INT(secrets_parse_catalogue(bad[i].text, strlen(bad[i].text), &n, err, sizeof err), -1);
    CHECK_HAS(err, bad[i].want);
  }
  /* entries: every field checked */
  const char *kc = "\"keyCheck\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==\"";
  const char *good = "{\"id\":\"sec_aaaaaaaaaaaaaaaaaaaa\",\"name\":\"one\",\"seq\":1,\"version\":1,\"createdMs\":5,\"updatedMs\":6,"
                     "\"metadata\":{},\"value\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"}";
  char text[2048];
  snprintf(text, sizeof text, "{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":2,%s,\"secrets\":[%s]}", kc, good);
  CHECK_INT(secrets_parse_catalogue(text, strlen(text), &n, err, sizeof err), 0);
  CHECK_INT(n, 1);
  struct { const char *from, *to, *want; } edits[] = {
    {"\"one\"", "\"One\"", "field 'name'"},
    {"\"one\"", "\"sec_x\"", "field 'name'"},
    {"sec_aaaaaaaaaaaaaaaaaaaa", "sec_A", "field 'id'"},
    {"\"seq\":1", "\"seq\":2", "field 'seq'"},
    {"\"version\":1", "\"version\":0", "field 'version'"},
    {"\"updatedMs\":6", "\"updatedMs\":4", "'updatedMs'"},
    {"\"metadata\":{}", "\"metadata\":[]", "field 'metadata'"},
    {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"", "AAAA\"", "field 'value'"},
    {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"", "!!!!\"", "field 'value'"},
    {"\"metadata\":{}", "\"metadata\":{},\"more\":1", "exactly the fields"},
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    char e[1024], *at;
    snprintf(e, sizeof e, "%s", good);
    at = strstr(e, edits[i].from);
    CHECK(at != NULL);
    if (!at) continue;
    char tail[1024];
    snprintf(tail, sizeof tail, "%s", at + strlen(edits[i].from));
    snprintf(at, sizeof e - (size_t)(at - e), "%s%s", edits[i].to, tail);
    snprintf(text, sizeof text, "{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":2,%s,\"secrets\":[%s]}", kc, e);
    err[0] = 0;
    CHECK_INT(secrets_parse_catalogue(text, strlen(text), &n, err, sizeof err), -1);
    CHECK_HAS(err, edits[i].want);
  }
  snprintf(text, sizeof text, "{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":3,%s,\"secrets\":[%s,%s]}", kc, good, good);
  CHECK_INT(secrets_parse_catalogue(text, strlen(text), &n, err, sizeof err), -1);   /* the seq does not grow (and repeats) */
}

/* Readers see one whole version or the other while a writer updates. */
static volatile bool stop_readers;
static void *reader(void *arg) {
  (void)arg;
  long bad = 0;
  while (!stop_readers) {
    size_t len;
    char *v = secrets_value("raced", NULL, &len);
    if (!v || (strcmp(v, "version-a-aaaaaaaa") && strcmp(v, "version-b-bbbbbbbbbbbb"))) bad++;
    secrets_free_value(v, len);
  }
  return (void *)bad;
}

static void test_readers_during_writes(void) {
  CHECK_INT(create("raced", "version-a-aaaaaaaa", NULL, NULL), 0);
  pthread_t t[2];
  stop_readers = false;
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, reader, NULL);
  for (int i = 0; i < 40; i++) {
    const char *v = i % 2 ? "version-a-aaaaaaaa" : "version-b-bbbbbbbbbbbb";
    CHECK_INT(update("raced", v), 0);
  }
  stop_readers = true;
  for (int i = 0; i < 2; i++) {
    void *bad;
    pthread_join(t[i], &bad);
    CHECK_INT((long)bad, 0);
  }
  secrets_delete("raced", msg, sizeof msg);
}

/* At most SECRETS_MAX: on a memory file system when there is one (a thousand synced rewrites). */
static void test_limit(void) {
  char dir[64];
  snprintf(dir, sizeof dir, "%s", access("/dev/shm", W_OK) == 0 ? "/dev/shm/mb-secrets-XXXXXX" : "/tmp/mb-secrets-max-XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  secrets_shutdown();
  CHECK_INT(secrets_init(dir, err, sizeof err), 0);
  int made = 0;
  for (int i = 0; i < SECRETS_MAX; i++) {
    char name[16];
    snprintf(name, sizeof name, "s%d", i);
    made += create(name, "v", NULL, NULL) == 0;
  }
  CHECK_INT(made, SECRETS_MAX);
  CHECK_INT(create("one-too-many", "v", NULL, NULL), 400);
  CHECK_HAS(msg, "at most 1000 secrets");
  CHECK_INT(secrets_delete("s0", msg, sizeof msg), 0);
  CHECK_INT(create("one-too-many", "v", NULL, NULL), 0);
  secrets_shutdown();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  CHECK(mkdtemp(state) != NULL);
  MBT_RUN(test_fresh_store);
  MBT_RUN(test_create_get);
  MBT_RUN(test_refusals);
  MBT_RUN(test_update_versions);
  MBT_RUN(test_pages_delete);
  MBT_RUN(test_persistence_and_files);
  MBT_RUN(test_key_and_catalogue_refused);
  MBT_RUN(test_scoped);
  MBT_RUN(test_parse_catalogue);
  MBT_RUN(test_readers_during_writes);
  MBT_RUN(test_limit);
  secrets_shutdown();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", state);
  CHECK(system(cmd) == 0);
  return mbt_report();
}
