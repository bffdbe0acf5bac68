/* test_sbx_router.c — sandboxd's one route table and one auth table (sandboxd/router.c) and the
 * credentials parser behind them (sandboxd/auth.c), over the registry with a fake backend: which
 * route a request gets, and every refusal with its status and exact body. Links no HTTP code. */
#include "mbtest.h"
#include "sbx_fakes.h"

#include "b64.h"
#include "errors.h"
#include "router.h"
#include "volumes.h"

#include <unistd.h>

#define KEY "e2b_0123456789abcdef"

/* A request: method, path, headers and query as "name", "value" pairs. */
typedef struct {
  const char *method, *path;
  const char *h[16], *q[16];
} fake_req;

static const char *lookup(const char *const *kv, const char *name, bool nocase) {
  for (size_t i = 0; kv[i]; i += 2)
    if (nocase ? !strcasecmp(kv[i], name) : !strcmp(kv[i], name)) return kv[i + 1];
  return NULL;
}
static const char *fh(const void *r, const char *n) { return lookup(((const fake_req *)r)->h, n, true); }
static const char *fq(const void *r, const char *n) { return lookup(((const fake_req *)r)->q, n, false); }

static int admit(const fake_req *r, rt_decision *d, char *body) {
  rt_view v = {r->method, r->path, fh, fq, r};
  return router_admit(&v, (int64_t)time(NULL), d, body, 1024);
}

/* Admits, checks the route, releases. */
static void want_route(const fake_req *r, rt_route route) {
  rt_decision d;
  char body[1024] = "";
  int st = admit(r, &d, body);
  if (!mbt_check(st == 0 && d.route == route, __FILE__, __LINE__, "route"))
    fprintf(stderr, "     %s %s: status %d route %d (want %d) %s\n", r->method, r->path, st, (int)d.route, (int)route, body);
  router_release(&d);
}

static void want_refusal(const fake_req *r, int status, const char *body_want) {
  rt_decision d;
  char body[1024] = "";
  int st = admit(r, &d, body);
  if (!mbt_check(st == status, __FILE__, __LINE__, "status"))
    fprintf(stderr, "     %s %s: status %d, want %d (%s)\n", r->method, r->path, st, status, body);
  if (!mbt_check(strstr(body, body_want) != NULL, __FILE__, __LINE__, "body"))
    fprintf(stderr, "     %s %s: body %s lacks %s\n", r->method, r->path, body, body_want);
  CHECK(d.entry == NULL);     /* a refusal holds nothing */
}

static void test_control_plane(void) {
  fake_req r = {"POST", "/sandboxes", {"X-API-KEY", KEY}, {0}};
  want_route(&r, RT_CREATE);
  r.path = "/sandboxes/";
  want_route(&r, RT_CREATE);                            /* one trailing slash is the same path */
  r.path = "/v2/sandboxes";
  want_route(&r, RT_CREATE_V2);
  r.method = "GET";
  want_route(&r, RT_LIST);
  r.path = "/sandboxes";
  want_route(&r, RT_LIST);
  r.path = "/sandboxes/abc123";
  rt_decision d;
  char body[1024];
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_GET);
  CHECK_STR(d.id, "abc123");
  CHECK(d.entry == NULL);                               /* the control plane holds no sandbox */
  router_release(&d);
  r.method = "DELETE";
  want_route(&r, RT_KILL);
  r.method = "POST";
  r.path = "/v2/sandboxes/abc/connect";
  want_route(&r, RT_CONNECT);
  r.path = "/sandboxes/abc/resume";
  want_route(&r, RT_CONNECT);
  r.path = "/sandboxes/abc/fork";
  want_route(&r, RT_FORK);
  r.path = "/sandboxes/abc/pause";
  want_route(&r, RT_PAUSE);
  r.path = "/sandboxes/abc/timeout";
  want_route(&r, RT_TIMEOUT);
  r.method = "GET";
  r.path = "/sandboxes/abc/metrics";
  want_route(&r, RT_METRICS);
  r.path = "/sandboxes/abc/network";
  r.method = "PUT";
  want_route(&r, RT_NETWORK);
  /* secrets: the collection and one secret by id or name */
  r.method = "POST";
  r.path = "/secrets";
  want_route(&r, RT_SECRET_CREATE);
  r.method = "GET";
  want_route(&r, RT_SECRET_LIST);
  r.path = "/secrets/sec_abc";
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_SECRET_GET);
  CHECK_STR(d.ref, "sec_abc");
  router_release(&d);
  r.method = "POST";
  r.path = "/secrets/My-Token";
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_SECRET_UPDATE);
  CHECK_STR(d.ref, "My-Token");                         /* as sent: the store lower-cases names */
  router_release(&d);
  r.method = "DELETE";
  want_route(&r, RT_SECRET_DELETE);
  r.method = "PUT";
  want_refusal(&r, 405, "method PUT is not allowed on /secrets/My-Token");
  r.method = "GET";
  r.path = "/secrets/s1/whatever";
  want_refusal(&r, 404, "no endpoint GET /secrets/s1/whatever");
  fake_req nokey = {"GET", "/secrets", {0}, {0}};
  want_refusal(&nokey, 401, "missing X-API-KEY header");
  r.path = "/sandboxes/abc/snapshots";
  r.method = "POST";
  want_route(&r, RT_SNAPSHOT_CREATE);
  r.method = "GET";
  want_refusal(&r, 405, "method GET is not allowed on /sandboxes/abc/snapshots");
  r.path = "/snapshots";
  want_route(&r, RT_SNAPSHOT_LIST);
  r.path = "/snapshots/abc";
  want_route(&r, RT_UNIMPLEMENTED);
  r.path = "/templates";
  want_route(&r, RT_TEMPLATE_LIST);
  r.path = "/templates/aliases/my-env";
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_TEMPLATE_ALIAS);
  CHECK_STR(d.ref, "my-env");
  router_release(&d);
  r.method = "POST";
  r.path = "/templates";                                  /* a build: not sandboxd's (yet) */
  want_route(&r, RT_UNIMPLEMENTED);
  r.method = "GET";
  /* a template reference: any one segment, as sent (the handler checks it), up to RT_REF_MAX */
  r.method = "DELETE";
  r.path = "/templates/My-Snap:default";
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_TEMPLATE_DELETE);
  CHECK_STR(d.ref, "My-Snap:default");
  CHECK_STR(d.id, "");
  router_release(&d);
  char longref[300] = "/templates/";
  memset(longref + 11, 'a', RT_REF_MAX);
  r.path = longref;
  want_route(&r, RT_TEMPLATE_DELETE);
  longref[11 + RT_REF_MAX] = 'a';
  want_refusal(&r, 400, "a name or id in the path of more than 200 bytes");
  r.path = "/templates/abc/builds";
  want_route(&r, RT_UNIMPLEMENTED);
  r.path = "/templates/";
  want_route(&r, RT_UNIMPLEMENTED);
  /* template builds: the request, the upload handshake, the start, the status */
  r.method = "POST";
  r.path = "/v3/templates";
  want_route(&r, RT_TEMPLATE_REQUEST);
  r.path = "/v2/templates/tpl1/builds/b1";
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_TEMPLATE_BUILD);
  CHECK_STR(d.ref, "tpl1");
  router_release(&d);
  r.path = "/templates/tpl1/builds/b1";                  /* builds start under /v2 only */
  want_route(&r, RT_UNIMPLEMENTED);
  r.method = "GET";
  want_route(&r, RT_TEMPLATE_BUILD_STATUS);
  r.path = "/templates/tpl1/builds/b1/status";
  want_route(&r, RT_TEMPLATE_BUILD_STATUS);
  r.path = "/templates/tpl1/files/abc";
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_TEMPLATE_FILE);
  CHECK(!d.upload);
  router_release(&d);
  r.method = "POST";
  want_route(&r, RT_UNIMPLEMENTED);
  r.method = "GET";
  /* the upload: its own token (the handler's), no API key; the body streamed */
  fake_req up = {"PUT", "/templates/tpl1/files/abc", {0}, {"token", "t"}};
  CHECK_INT(admit(&up, &d, body), 0);
  CHECK_INT(d.route, RT_TEMPLATE_UPLOAD);
  CHECK(d.upload);
  CHECK_STR(d.ref, "tpl1");
  router_release(&d);
  fake_req nokey_build = {"POST", "/v3/templates", {0}, {0}};
  want_refusal(&nokey_build, 401, "missing X-API-KEY header");
  fake_req nokey_status = {"GET", "/templates/tpl1/builds/b1/status", {0}, {0}};
  want_refusal(&nokey_status, 401, "missing X-API-KEY header");
  /* refusals */
  r.method = "PUT";
  r.path = "/sandboxes";
  want_refusal(&r, 405, "{\"code\":405,\"message\":\"method PUT is not allowed on /sandboxes\"}");
  r.method = "GET";
  r.path = "/nowhere";
  want_refusal(&r, 404, "{\"code\":404,\"message\":\"no endpoint GET /nowhere\"}");
  r.path = "/sandboxes/Not-An-Id";
  want_refusal(&r, 404, "sandbox 'Not-An-Id' not found");
  r.path = "/v2/sandboxes/abc/pause";
  want_refusal(&r, 404, "no endpoint");
}

static void test_api_key(void) {
  fake_req r = {"POST", "/sandboxes", {0}, {0}};
  want_refusal(&r, 401, "{\"code\":401,\"message\":\"missing X-API-KEY header\"}");
  fake_req w = {"POST", "/sandboxes", {"x-api-key", "e2b_0123456789abcdee"}, {0}};
  want_refusal(&w, 401, "{\"code\":401,\"message\":\"invalid API key\"}");
  fake_req longer = {"POST", "/sandboxes", {"X-API-KEY", KEY "0"}, {0}};
  want_refusal(&longer, 401, "invalid API key");
  fake_req prefix = {"POST", "/sandboxes", {"X-API-KEY", "e2b_0123"}, {0}};
  want_refusal(&prefix, 401, "invalid API key");
  /* the key is checked before the route: an unknown path without a key is 401, not 404 */
  fake_req nowhere = {"GET", "/nowhere", {0}, {0}};
  want_refusal(&nowhere, 401, "missing X-API-KEY header");
  /* readiness needs none */
  fake_req health = {"GET", "/health", {0}, {0}};
  want_route(&health, RT_HEALTH);
  fake_req post_health = {"POST", "/health", {0}, {0}};
  want_refusal(&post_health, 401, "missing X-API-KEY header");
}

static reg_info made(bool secure) {
  reg_create_opts o = fk_opts(secure, 300);
  reg_info in;
  char err[256];
  if (reg_create(&o, &in, err, sizeof err) != 0) { fprintf(stderr, "create: %s\n", err); exit(1); }
  json_decref(in.metadata);
  return in;
}

static const char *basic(const char *userpass, char *buf) {
  strcpy(buf, "Basic ");
  mb_b64_encode(userpass, strlen(userpass), buf + 6);
  return buf;
}

static void test_envd(void) {
  reg_info s = made(true), p = made(false);
  fake_req r = {"POST", "/process.Process/Start", {"E2b-Sandbox-Id", s.id, "X-Access-Token", s.token}, {0}};
  rt_decision d;
  char body[1024], b64[128];
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_PROCESS);
  CHECK_STR(d.rpc, "Start");
  CHECK_STR(d.user, "user");                      /* envd's default user */
  CHECK(d.user_error == NULL && !d.user_unknown);
  CHECK(d.entry != NULL && !strcmp(reg_id(d.entry), s.id));
  CHECK(!d.upload);
  router_release(&d);
  CHECK(d.entry == NULL);
  /* the token */
  fake_req nt = {"POST", "/process.Process/Start", {"E2b-Sandbox-Id", s.id}, {0}};
  want_refusal(&nt, 401, "unauthorized access, please provide a valid access token");
  fake_req bt = {"POST", "/filesystem.Filesystem/Stat", {"E2b-Sandbox-Id", s.id, "X-Access-Token", "wrong"}, {0}};
  want_refusal(&bt, 401, "unauthorized access");
  fake_req ns = {"POST", "/filesystem.Filesystem/Stat", {"E2b-Sandbox-Id", p.id}, {0}};
  want_route(&ns, RT_FILESYSTEM);                  /* not secure: no token needed */
  /* the user */
  fake_req root = {"POST", "/filesystem.Filesystem/Stat", {"E2b-Sandbox-Id", p.id, "Authorization", basic("root:", b64)}, {0}};
  CHECK_INT(admit(&root, &d, body), 0);
  CHECK_STR(d.user, "root");
  router_release(&d);
  fake_req mal = {"POST", "/filesystem.Filesystem/Stat", {"E2b-Sandbox-Id", p.id, "Authorization", basic("mallory:x", b64)}, {0}};
  CHECK_INT(admit(&mal, &d, body), 0);             /* the handler reports it, in Connect's shape */
  CHECK(d.user_unknown);
  CHECK_STR(d.user, "mallory");
  router_release(&d);
  fake_req bad = {"POST", "/filesystem.Filesystem/Stat", {"E2b-Sandbox-Id", p.id, "Authorization", "Basic dXNlcjo"}, {0}};
  CHECK_INT(admit(&bad, &d, body), 0);
  CHECK(d.user_error != NULL);                     /* unpadded base64: not canonical */
  router_release(&d);
  /* other services and paths */
  fake_req other = {"POST", "/other.Service/Do", {"E2b-Sandbox-Id", p.id}, {0}};
  want_route(&other, RT_RPC_UNKNOWN);
  fake_req nowhere = {"GET", "/nowhere", {"E2b-Sandbox-Id", p.id}, {0}};
  want_refusal(&nowhere, 404, "envd has no endpoint GET /nowhere");
  fake_req health = {"GET", "/health", {"E2b-Sandbox-Id", s.id}, {0}};
  want_route(&health, RT_ENVD_HEALTH);              /* no token needed */
  /* unknown and paused sandboxes: envd's 502 */
  fake_req unknown = {"POST", "/process.Process/List", {"E2b-Sandbox-Id", "nosuchsandbox"}, {0}};
  want_refusal(&unknown, 502, "{\"sandboxId\":\"nosuchsandbox\",\"message\":\"The sandbox was not found\",\"code\":502}");
  fake_req uh = {"GET", "/health", {"E2b-Sandbox-Id", "nosuchsandbox"}, {0}};
  want_refusal(&uh, 502, "The sandbox was not found");
  CHECK_INT(reg_pause(p.id), 0);
  want_refusal(&ns, 502, "The sandbox was not found");
  CHECK_INT(reg_kill(s.id), 0);
  CHECK_INT(reg_kill(p.id), 0);
  want_refusal(&r, 502, "The sandbox was not found");
}

static void sign(const char *path, const char *op, const char *user, const char *token, int64_t exp, char *out) {
  CHECK_INT(mb_sign_v1(path, op, user, token, exp, out), MB_OK);
}

static void test_files(void) {
  reg_info a = made(true), b = made(true), p = made(false);
  char body[1024], sig[MB_SIGN_V1_LEN + 1], sigb[MB_SIGN_V1_LEN + 1], exps[32];
  rt_decision d;
  /* with the routing header: the token, or a signature */
  fake_req tok = {"GET", "/files", {"E2b-Sandbox-Id", a.id, "X-Access-Token", a.token}, {"path", "x.txt"}};
  want_route(&tok, RT_FILES);
  fake_req none = {"GET", "/files", {"E2b-Sandbox-Id", a.id}, {"path", "x.txt"}};
  want_refusal(&none, 401, "{\"code\":401,\"message\":\"missing signature query parameter\"}");
  sign("x.txt", "read", "", a.token, 0, sig);
  fake_req signed_ = {"GET", "/files", {"E2b-Sandbox-Id", a.id}, {"path", "x.txt", "signature", sig}};
  want_route(&signed_, RT_FILES);
  fake_req wrong_op = {"POST", "/files", {"E2b-Sandbox-Id", a.id}, {"path", "x.txt", "signature", sig}};
  want_refusal(&wrong_op, 401, "{\"code\":401,\"message\":\"invalid signature\"}");   /* a read signature does not write */
  int64_t past = (int64_t)time(NULL) - 10;
  snprintf(exps, sizeof exps, "%lld", (long long)past);
  sign("x.txt", "read", "", a.token, past, sig);
  fake_req expired = {"GET", "/files", {"E2b-Sandbox-Id", a.id}, {"path", "x.txt", "signature", sig, "signature_expiration", exps}};
  want_refusal(&expired, 401, "signature is already expired");
  fake_req badexp = {"GET", "/files", {"E2b-Sandbox-Id", a.id}, {"path", "x.txt", "signature", sig, "signature_expiration", "soon"}};
  want_refusal(&badexp, 401, "invalid signature expiration 'soon'");
  fake_req plain = {"POST", "/files", {"E2b-Sandbox-Id", p.id}, {"path", "x.txt"}};
  CHECK_INT(admit(&plain, &d, body), 0);           /* not secure: nothing to prove */
  CHECK(d.upload);                                  /* POST streams its body */
  CHECK_STR(d.user, "user");
  router_release(&d);
  fake_req as_root = {"GET", "/files", {"E2b-Sandbox-Id", p.id}, {"path", "x", "username", "root"}};
  CHECK_INT(admit(&as_root, &d, body), 0);
  CHECK_STR(d.user, "root");
  router_release(&d);
  fake_req mallory = {"GET", "/files", {"E2b-Sandbox-Id", p.id}, {"path", "x", "username", "mallory"}};
  want_refusal(&mallory, 401, "error looking up user 'mallory': unknown user");
  /* without it: the signature names the sandbox */
  fake_req bare = {"GET", "/files", {0}, {"path", "x.txt"}};
  want_refusal(&bare, 401, "signed URLs need a sandbox created with secure: true");
  sign("x.txt", "write", "root", b.token, 0, sigb);
  fake_req forb = {"POST", "/files", {0}, {"path", "x.txt", "username", "root", "signature", sigb}};
  CHECK_INT(admit(&forb, &d, body), 0);
  CHECK_INT(d.route, RT_FILES);
  CHECK(d.entry && !strcmp(reg_id(d.entry), b.id));   /* b's token verifies it, not a's */
  CHECK_STR(d.user, "root");
  CHECK(d.upload);
  router_release(&d);
  fake_req forged = {"GET", "/files", {0}, {"path", "x.txt", "signature", "v1_forged"}};
  want_refusal(&forged, 401, "invalid signature");
  sign("x.txt", "read", "", b.token, past, sigb);
  fake_req bexp = {"GET", "/files", {0}, {"path", "x.txt", "signature", sigb, "signature_expiration", exps}};
  want_refusal(&bexp, 401, "signature is already expired");
  CHECK_INT(reg_pause(b.id), 0);
  sign("x.txt", "read", "", b.token, 0, sigb);
  fake_req paused = {"GET", "/files", {0}, {"path", "x.txt", "signature", sigb}};
  want_refusal(&paused, 502, "The sandbox was not found");
  const char *ids[] = {a.id, b.id, p.id};
  for (int i = 0; i < 3; i++) CHECK_INT(reg_kill(ids[i]), 0);
}

typedef struct { char id[32]; int rc; } kill_job;
static void *killer(void *arg) {
  kill_job *j = arg;
  j->rc = reg_kill(j->id);
  return NULL;
}

/* An admitted envd request holds its sandbox: a kill waits for router_release. */
static void test_release(void) {
  reg_info s = made(false);
  fake_req r = {"POST", "/process.Process/List", {"E2b-Sandbox-Id", s.id}, {0}};
  rt_decision d;
  char body[1024];
  CHECK_INT(admit(&r, &d, body), 0);
  int destroys = fk_count(&fk.destroys), stops = fk_count(&fk.stops);
  kill_job j;
  snprintf(j.id, sizeof j.id, "%s", s.id);
  pthread_t t;
  pthread_create(&t, NULL, killer, &j);
  CHECK(fk_wait(&fk.stops, stops + 1));
  CHECK_INT(fk_count(&fk.destroys), destroys);     /* held */
  router_release(&d);
  pthread_join(t, NULL);
  CHECK_INT(j.rc, 0);
  CHECK_INT(fk_count(&fk.destroys), destroys + 1);
  router_release(&d);                               /* idempotent */
}

static void test_basic_auth(void) {
  char user[AUTH_USER_MAX + 1], b64[256];
  const char *why;
  CHECK_INT(auth_basic_user(basic("user:", b64), user, &why), 0);
  CHECK_STR(user, "user");
  CHECK_INT(auth_basic_user(basic("root", b64), user, &why), 0);      /* no colon: all of it is the user */
  CHECK_STR(user, "root");
  CHECK_INT(auth_basic_user(basic("root:pass:word", b64), user, &why), 0);
  CHECK_STR(user, "root");
  CHECK_INT(auth_basic_user("basic dXNlcjo=", user, &why), 0);         /* the scheme in any case */
  CHECK_INT(auth_basic_user("Bearer dXNlcjo=", user, &why), -1);
  CHECK_HAS(why, "Basic");
  CHECK_INT(auth_basic_user("Basic ", user, &why), -1);
  CHECK_INT(auth_basic_user("Basic dXNlcjo", user, &why), -1);        /* padding is required */
  CHECK_INT(auth_basic_user("Basic dXN lcjo=", user, &why), -1);      /* no whitespace inside */
  CHECK_INT(auth_basic_user("Basic  dXNlcjo=", user, &why), -1);      /* one space */
  CHECK_INT(auth_basic_user("Basic dXNlcjo-", user, &why), -1);       /* not URL-safe */
  CHECK_INT(auth_basic_user(basic(":secret", b64), user, &why), -1);
  CHECK_HAS(why, "empty");
  char nul[] = "a\0b:";
  strcpy(b64, "Basic ");
  mb_b64_encode(nul, 4, b64 + 6);
  CHECK_INT(auth_basic_user(b64, user, &why), -1);
  CHECK_HAS(why, "NUL");
  char lng[AUTH_USER_MAX + 3];
  memset(lng, 'a', AUTH_USER_MAX + 1);
  lng[AUTH_USER_MAX + 1] = ':';
  lng[AUTH_USER_MAX + 2] = 0;
  CHECK_INT(auth_basic_user(basic(lng, b64), user, &why), -1);
  CHECK_HAS(why, "too long");
  lng[AUTH_USER_MAX] = ':';
  lng[AUTH_USER_MAX + 1] = 0;
  CHECK_INT(auth_basic_user(basic(lng, b64), user, &why), 0);          /* exactly the limit */
  CHECK_INT(strlen(user), AUTH_USER_MAX);
  CHECK_INT(auth_basic_user(NULL, user, &why), -1);
  CHECK(auth_secret_eq("abc", "abc"));
  CHECK(!auth_secret_eq("abc", "abd") && !auth_secret_eq("ab", "abc") && !auth_secret_eq("abcd", "abc"));
  CHECK(!auth_secret_eq(NULL, "abc") && !auth_secret_eq("abc", NULL));
}

/* Volumes: the control plane's /volumes need the API key; the content API the volume's token
 * (Bearer), checked against the catalogue, its refusals in the content API's error shape. */
static void test_volumes(void) {
  char state[64] = "/tmp/mb-router-vol-XXXXXX", msg[300];
  CHECK(mkdtemp(state) != NULL);
  vol_idmap map = {geteuid(), getegid(), 1};
  CHECK_INT(vol_init(state, &map, msg, sizeof msg), 0);
  vol_info in;
  CHECK_INT(vol_create("vol1", &in, msg, sizeof msg), 0);
  fake_req create = {"POST", "/volumes", {"X-API-KEY", KEY}, {0}};
  want_route(&create, RT_VOLUME_CREATE);
  create.method = "GET";
  want_route(&create, RT_VOLUME_LIST);
  char p[200];
  snprintf(p, sizeof p, "/volumes/%s", in.id);
  fake_req get = {"GET", p, {"X-API-KEY", KEY}, {0}};
  rt_decision d;
  char body[1024];
  CHECK_INT(admit(&get, &d, body), 0);
  CHECK_INT(d.route, RT_VOLUME_GET);
  CHECK_STR(d.ref, in.id);
  router_release(&d);
  get.method = "DELETE";
  want_route(&get, RT_VOLUME_DELETE);
  fake_req nokey = {"GET", "/volumes", {0}, {0}};
  want_refusal(&nokey, 401, "missing X-API-KEY header");
  /* content: the token, not the API key */
  char cp[200], bearer[100];
  snprintf(cp, sizeof cp, "/volumecontent/%s/file", in.id);
  snprintf(bearer, sizeof bearer, "Bearer %s", in.token);
  fake_req c = {"PUT", cp, {"Authorization", bearer}, {"path", "/x"}};
  CHECK_INT(admit(&c, &d, body), 0);
  CHECK_INT(d.route, RT_VOLUME_CONTENT);
  CHECK_STR(d.rpc, "file");
  CHECK(d.volume != NULL && d.upload);        /* PUT file: streamed, the volume held */
  router_release(&d);
  CHECK(d.volume == NULL);
  c.method = "GET";
  CHECK_INT(admit(&c, &d, body), 0);
  CHECK(!d.upload);
  router_release(&d);
  fake_req key_only = {"GET", cp, {"X-API-KEY", KEY}, {0}};
  want_refusal(&key_only, 401, "{\"code\":\"unauthorized\",\"message\":\"missing volume token (Authorization: Bearer <token>)\"}");
  fake_req wrong = {"GET", cp, {"Authorization", "Bearer nottheone"}, {0}};
  want_refusal(&wrong, 401, "invalid volume token");
  fake_req unknown = {"GET", "/volumecontent/00000000-0000-4000-8000-000000000000/path", {"Authorization", bearer}, {0}};
  want_refusal(&unknown, 404, "{\"code\":\"not_found\",\"message\":\"volume '00000000-0000-4000-8000-000000000000' not found\"}");
  snprintf(cp, sizeof cp, "/volumecontent/%s/other", in.id);
  fake_req other = {"GET", cp, {"Authorization", bearer}, {0}};
  want_refusal(&other, 401, "missing X-API-KEY header");   /* no such route: the control plane's rule, key first */
  fake_req other_key = {"GET", cp, {"Authorization", bearer, "X-API-KEY", KEY}, {0}};
  want_refusal(&other_key, 404, "no endpoint GET /volumecontent/");
  snprintf(cp, sizeof cp, "/volumecontent/%s/dir", in.id);
  fake_req badmethod = {"DELETE", cp, {"Authorization", bearer, "X-API-KEY", KEY}, {0}};
  want_refusal(&badmethod, 405, "method DELETE is not allowed");
  CHECK_INT(vol_delete(in.id, msg, sizeof msg), 0);
  vol_shutdown();
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", state);
  CHECK_INT(system(cmd), 0);
}

/* E2B's edge: routing by Host under the domain, the shared host with its headers, and the port
 * proxy (RT_PORT) by host, by header and by path, with E2B's refusals. */
#define DOM "sbx.test"
static void test_edge(void) {
  reg_info s = made(true), p = made(false);
  char host[200], body[1024];
  rt_decision d;
  /* api.D: the control plane, whatever routing headers come along; Host is case-blind, its port
   * and a final dot do not matter */
  fake_req api = {"GET", "/v2/sandboxes", {"Host", "api." DOM, "X-API-KEY", KEY, "E2b-Sandbox-Id", s.id}, {0}};
  want_route(&api, RT_LIST);
  api.h[1] = "API.Sbx.Test:443";
  want_route(&api, RT_LIST);
  api.h[1] = "api." DOM ".";
  want_route(&api, RT_LIST);
  fake_req apikey = {"GET", "/v2/sandboxes", {"Host", "api." DOM}, {0}};
  want_refusal(&apikey, 401, "missing X-API-KEY header");
  /* 49983-<id>.D: envd of <id>, its token as ever */
  snprintf(host, sizeof host, "49983-%s." DOM, s.id);
  fake_req envd = {"POST", "/process.Process/Start", {"Host", host, "X-Access-Token", s.token}, {0}};
  CHECK_INT(admit(&envd, &d, body), 0);
  CHECK_INT(d.route, RT_PROCESS);
  CHECK(d.entry != NULL && !strcmp(reg_id(d.entry), s.id));
  router_release(&d);
  fake_req envd_nt = {"POST", "/process.Process/Start", {"Host", host}, {0}};
  want_refusal(&envd_nt, 401, "unauthorized access");
  fake_req eh = {"GET", "/health", {"Host", host}, {0}};
  want_route(&eh, RT_ENVD_HEALTH);
  fake_req ef = {"GET", "/files", {"Host", host, "X-Access-Token", s.token}, {"path", "/x"}};
  want_route(&ef, RT_FILES);
  /* <port>-<id>.D: the port proxy, no credentials; more "-" parts are E2B's and ignored */
  snprintf(host, sizeof host, "8000-%s-abc." DOM, s.id);
  fake_req port = {"GET", "/index.html", {"Host", host}, {0}};
  CHECK_INT(admit(&port, &d, body), 0);
  CHECK_INT(d.route, RT_PORT);
  CHECK_INT(d.port, 8000);
  CHECK_INT(d.strip, 0);
  CHECK(!d.upload);
  CHECK(d.entry != NULL && !strcmp(reg_id(d.entry), s.id));
  router_release(&d);
  fake_req upl = {"POST", "/up", {"Host", host, "Content-Length", "5"}, {0}};
  CHECK_INT(admit(&upl, &d, body), 0);
  CHECK(d.upload);                                  /* the body is streamed to the port */
  router_release(&d);
  fake_req chunked = {"PUT", "/up", {"Host", host, "Transfer-Encoding", "chunked"}, {0}};
  CHECK_INT(admit(&chunked, &d, body), 0);
  CHECK(d.upload);
  router_release(&d);
  fake_req empty = {"POST", "/up", {"Host", host, "Content-Length", "0"}, {0}};
  CHECK_INT(admit(&empty, &d, body), 0);
  CHECK(!d.upload);
  router_release(&d);
  /* sandbox.D: E2b-Sandbox-Id and E2b-Sandbox-Port, both required */
  fake_req shared = {"POST", "/filesystem.Filesystem/Stat", {"Host", "sandbox." DOM, "E2b-Sandbox-Id", p.id, "E2b-Sandbox-Port", "49983"}, {0}};
  want_route(&shared, RT_FILESYSTEM);
  fake_req sp = {"GET", "/", {"Host", "sandbox." DOM, "E2b-Sandbox-Id", p.id, "E2b-Sandbox-Port", "3000"}, {0}};
  CHECK_INT(admit(&sp, &d, body), 0);
  CHECK_INT(d.route, RT_PORT);
  CHECK_INT(d.port, 3000);
  router_release(&d);
  fake_req noport = {"GET", "/", {"Host", "sandbox." DOM, "E2b-Sandbox-Id", p.id}, {0}};
  want_refusal(&noport, 400, "Missing header: E2b-Sandbox-Port");
  fake_req noid = {"GET", "/", {"Host", "sandbox." DOM, "E2b-Sandbox-Port", "3000"}, {0}};
  want_refusal(&noid, 400, "Missing header: E2b-Sandbox-Id");
  fake_req badsp = {"GET", "/", {"Host", "sandbox." DOM, "E2b-Sandbox-Id", p.id, "E2b-Sandbox-Port", "99999"}, {0}};
  want_refusal(&badsp, 400, "Invalid sandbox port");
  fake_req badsid = {"GET", "/", {"Host", "sandbox." DOM, "E2b-Sandbox-Id", "No-Such", "E2b-Sandbox-Port", "1"}, {0}};
  want_refusal(&badsid, 400, "Invalid sandbox ID");
  /* E2B's refusals for hosts under the domain that name nothing */
  const char *bad_hosts[][2] = {
    {DOM, "Invalid host"}, {"www." DOM, "Invalid host"}, {"sandbox." DOM, "Invalid host"},
    {"8000-x.y." DOM, "Invalid host"}, {"abc-i1." DOM, "Invalid sandbox port"}, {"0-i1." DOM, "Invalid sandbox port"},
    {"65536-i1." DOM, "Invalid sandbox port"}, {"80-." DOM, "Invalid sandbox ID"}, {"80-I_1." DOM, "Invalid sandbox ID"},
  };
  for (size_t i = 0; i < sizeof bad_hosts / sizeof bad_hosts[0]; i++) {
    fake_req b = {"GET", "/", {"Host", bad_hosts[i][0]}, {0}};
    want_refusal(&b, 400, bad_hosts[i][1]);
  }
  /* a host that only ends like the domain is not under it: the plain rules (here, the control plane) */
  fake_req notunder = {"GET", "/v2/sandboxes", {"Host", "xsbx.test", "X-API-KEY", KEY}, {0}};
  want_route(&notunder, RT_LIST);
  /* unknown and paused sandboxes: E2B's 502 on every port */
  fake_req unk = {"GET", "/", {"Host", "8000-nosuchsandbox." DOM}, {0}};
  want_refusal(&unk, 502, "{\"sandboxId\":\"nosuchsandbox\",\"message\":\"The sandbox was not found\",\"code\":502}");
  snprintf(host, sizeof host, "8000-%s." DOM, p.id);
  fake_req pp = {"GET", "/", {"Host", host}, {0}};
  want_route(&pp, RT_PORT);
  CHECK_INT(reg_pause(p.id), 0);
  want_refusal(&pp, 502, "The sandbox was not found");
  CHECK_INT(reg_kill(s.id), 0);
  CHECK_INT(reg_kill(p.id), 0);
}

/* Plain mode: the path proxy /_sandbox/<id>/<port>/<path>, and E2b-Sandbox-Port naming a port. */
static void test_path_proxy(void) {
  reg_info s = made(true);
  char path[200], body[1024];
  rt_decision d;
  snprintf(path, sizeof path, "/_sandbox/%s/8000/a/b", s.id);
  fake_req r = {"GET", path, {"Host", "127.0.0.1:4000"}, {0}};
  CHECK_INT(admit(&r, &d, body), 0);
  CHECK_INT(d.route, RT_PORT);
  CHECK_INT(d.port, 8000);
  CHECK_INT(d.strip, strlen(path) - strlen("/a/b"));
  router_release(&d);
  snprintf(path, sizeof path, "/_sandbox/%s/8000", s.id);
  CHECK_INT(admit(&r, &d, body), 0);                /* no path: "/" */
  CHECK_INT(d.route, RT_PORT);
  CHECK_INT(d.strip, strlen(path));
  router_release(&d);
  /* port 49983 is envd, by path too (the rest of the path is envd's) */
  snprintf(path, sizeof path, "/_sandbox/%s/49983/process.Process/List", s.id);
  fake_req envd = {"POST", path, {"X-Access-Token", s.token}, {0}};
  want_route(&envd, RT_PROCESS);
  fake_req envd_nt = {"POST", path, {0}, {0}};
  want_refusal(&envd_nt, 401, "unauthorized access");
  snprintf(path, sizeof path, "/_sandbox/%s/49983/health", s.id);
  fake_req eh = {"GET", path, {0}, {0}};
  want_route(&eh, RT_ENVD_HEALTH);
  /* refusals */
  fake_req bad = {"GET", "/_sandbox/", {0}, {0}};
  want_refusal(&bad, 404, "the port proxy's paths are /_sandbox/<sandbox id>/<port>/<path>");
  bad.path = "/_sandbox/abc";
  want_refusal(&bad, 404, "the port proxy's paths are");
  bad.path = "/_sandbox/ABC/80/";
  want_refusal(&bad, 400, "Invalid sandbox ID");
  snprintf(path, sizeof path, "/_sandbox/%s/80x/", s.id);
  bad.path = path;
  want_refusal(&bad, 400, "Invalid sandbox port");
  snprintf(path, sizeof path, "/_sandbox/%s//", s.id);
  want_refusal(&bad, 400, "Invalid sandbox port");
  bad.path = "/_sandbox/nosuchsandbox/80/";
  want_refusal(&bad, 502, "The sandbox was not found");
  /* the routing headers with another port than envd's */
  fake_req hp = {"GET", "/", {"E2b-Sandbox-Id", s.id, "E2b-Sandbox-Port", "5173"}, {0}};
  CHECK_INT(admit(&hp, &d, body), 0);
  CHECK_INT(d.route, RT_PORT);
  CHECK_INT(d.port, 5173);
  router_release(&d);
  fake_req he = {"POST", "/process.Process/List", {"E2b-Sandbox-Id", s.id, "E2b-Sandbox-Port", "49983", "X-Access-Token", s.token}, {0}};
  want_route(&he, RT_PROCESS);
  fake_req hb = {"GET", "/", {"E2b-Sandbox-Id", s.id, "E2b-Sandbox-Port", "x"}, {0}};
  want_refusal(&hb, 400, "Invalid sandbox port");
  /* under the domain the host decides, not the path */
  snprintf(path, sizeof path, "/_sandbox/%s/8000/", s.id);
  fake_req viaapi = {"GET", path, {"Host", "api." DOM, "X-API-KEY", KEY}, {0}};
  want_refusal(&viaapi, 404, "no endpoint GET /_sandbox/");
  CHECK(rt_valid_domain("e2b.app") && rt_valid_domain("a-b.c9") && !rt_valid_domain("") && !rt_valid_domain(".x") &&
        !rt_valid_domain("x.") && !rt_valid_domain("a..b") && !rt_valid_domain("A.b") && !rt_valid_domain("a_b"));
  CHECK_INT(reg_kill(s.id), 0);
}

/* allowPublicTraffic: false — the port proxy wants e2b-traffic-access-token on every form of
 * address (host, shared host, path, routing headers); envd's port does not; a paused auto-resume
 * sandbox is woken only by a request that has it. */
static void test_traffic_token(void) {
  reg_create_opts o = fk_opts(true, 300);
  o.traffic_token = true;
  o.auto_resume = true;
  reg_info s, pub = made(true);
  char err[256], path[200], host[200], body[1024], want[300];
  rt_decision d;
  CHECK_INT(reg_create(&o, &s, err, sizeof err), 0);
  json_decref(s.metadata);
  CHECK_INT(strlen(s.traffic_token), REG_TRAFFIC_TOKEN_LEN);
  CHECK_STR(pub.traffic_token, "");
  reg_entry *e = reg_get(s.id);
  CHECK(e && reg_traffic_token(e) && !strcmp(reg_traffic_token(e), s.traffic_token));
  reg_put(e);
  snprintf(path, sizeof path, "/_sandbox/%s/8000/x", s.id);
  snprintf(host, sizeof host, "8000-%s." DOM, s.id);
  char wrong[REG_TRAFFIC_TOKEN_LEN + 1];
  snprintf(wrong, sizeof wrong, "%s", s.traffic_token);
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  fake_req forms[4] = {
    {"GET", path, {0}, {0}},
    {"GET", "/x", {"Host", host}, {0}},
    {"GET", "/x", {"Host", "sandbox." DOM, "E2b-Sandbox-Id", s.id, "E2b-Sandbox-Port", "8000"}, {0}},
    {"GET", "/x", {"E2b-Sandbox-Id", s.id, "E2b-Sandbox-Port", "8000"}, {0}},
  };
  for (int i = 0; i < 4; i++) {
    fake_req r = forms[i];
    size_t k = 0;
    while (r.h[k]) k += 2;
    snprintf(want, sizeof want, "{\"sandboxId\":\"%s\",\"message\":\"Sandbox is secured with traffic access token. Token header "
             "'e2b-traffic-access-token' is missing\",\"code\":403}", s.id);
    want_refusal(&r, 403, want);                       /* E2B's edge's body, exactly */
    r.h[k] = "e2b-traffic-access-token";
    r.h[k + 1] = "";
    want_refusal(&r, 403, "is missing");
    r.h[k + 1] = wrong;
    want_refusal(&r, 403, "Sandbox is secured with traffic access token. Provided token is invalid.");
    r.h[k + 1] = "short";
    want_refusal(&r, 403, "Provided token is invalid.");
    r.h[k] = "E2B-Traffic-Access-Token";               /* header names are case-blind */
    r.h[k + 1] = s.traffic_token;
    CHECK_INT(admit(&r, &d, body), 0);
    CHECK_INT(d.route, RT_PORT);
    CHECK_INT(d.port, 8000);
    router_release(&d);
  }
  /* envd (49983) keeps its own credentials; another sandbox's ports stay public */
  snprintf(path, sizeof path, "/_sandbox/%s/49983/process.Process/List", s.id);
  fake_req envd = {"POST", path, {"X-Access-Token", s.token}, {0}};
  want_route(&envd, RT_PROCESS);
  snprintf(path, sizeof path, "/_sandbox/%s/8000/", pub.id);
  fake_req open = {"GET", path, {0}, {0}};
  want_route(&open, RT_PORT);
  snprintf(path, sizeof path, "/_sandbox/%s/8000/", s.id);
  /* paused with auto-resume: a request without the token does not wake it */
  CHECK_INT(reg_pause(s.id), 0);
  int resumes = fk_count(&fk.resumes);
  fake_req noauth = {"GET", path, {0}, {0}};
  want_refusal(&noauth, 403, "is missing");
  CHECK_INT(fk_count(&fk.resumes), resumes);
  e = reg_get(s.id);
  CHECK(e && reg_paused(e));
  reg_put(e);
  fake_req authed = {"GET", path, {"e2b-traffic-access-token", s.traffic_token}, {0}};
  want_route(&authed, RT_PORT);
  CHECK_INT(fk_count(&fk.resumes), resumes + 1);
  CHECK_INT(reg_kill(s.id), 0);
  CHECK_INT(reg_kill(pub.id), 0);
}

int main(void) {
  if (reg_init(&FK_BACKEND, &FK_HOOKS) != 0) return 1;
  router_init(KEY, DOM);
  MBT_RUN(test_control_plane);
  MBT_RUN(test_api_key);
  MBT_RUN(test_envd);
  MBT_RUN(test_files);
  MBT_RUN(test_release);
  MBT_RUN(test_basic_auth);
  MBT_RUN(test_volumes);
  MBT_RUN(test_edge);
  MBT_RUN(test_path_proxy);
  MBT_RUN(test_traffic_token);
  router_shutdown();
  reg_shutdown();
  return mbt_report();
}
