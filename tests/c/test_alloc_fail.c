/* test_alloc_fail.c — every allocation of the codec (and of mb_loop_new / mb_http_start) fails
 * in turn. Linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc (tests/c/CMakeLists.txt),
 * so the calls made by this executable and the static mbcodec/mbcore libraries go through the
 * __wrap_* functions below; jansson, OpenSSL and libcurl are shared libraries and get the same
 * counting allocator through json_set_alloc_funcs, CRYPTO_set_mem_functions and
 * curl_global_init_mem. For N = 0, 1, 2, ... the Nth allocation of an operation fails until the
 * operation succeeds without an injected failure; each failing run must report MB_E_NOMEM (or
 * NULL from a constructor, as documented) and free everything — the ASan build proves no leak. */
#include "b64.h"
#include "connect.h"
#include "frames.h"
#include "http.h"
#include "mbtest.h"
#include "mbtest_support.h"
#include "mbtest_envd.h"
#include "procstream.h"
#include <fcntl.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>


/* ---- the failing allocator ---- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);

/* volatile: the compiler assumes malloc touches no program state and would otherwise move
 * arm()/disarm() across a malloc call in this file */
static volatile int armed;         /* count (and maybe fail) only inside an operation */
static volatile long alloc_no;     /* allocations seen since arming */
static volatile long fail_at = -1; /* index of the allocation that fails */
static volatile int injected;      /* where the failure was injected: 0 none, else an enum lib */
static int own_only;               /* count and fail only moonbox's own allocations */
enum lib { OWN = 1, JANSSON, OPENSSL, LIBCURL };

static int should_fail(int lib) {
  if (!armed || (own_only && lib != OWN)) return 0;
  if (alloc_no++ == fail_at) {
    injected = lib;
    return 1;
  }
  return 0;
}

static void *xmalloc(int lib, size_t n) { return should_fail(lib) ? NULL : __real_malloc(n); }
static void *xcalloc(int lib, size_t k, size_t n) {
  return should_fail(lib) ? NULL : __real_calloc(k, n);
}
static void *xrealloc(int lib, void *p, size_t n) {
  /* realloc(p, 0) may free; never "fail" it, that would leak p */
  if (n == 0) return __real_realloc(p, n);
  return should_fail(lib) ? NULL : __real_realloc(p, n);
}
void *__wrap_malloc(size_t n) { return xmalloc(OWN, n); }
void *__wrap_calloc(size_t k, size_t n) { return xcalloc(OWN, k, n); }
void *__wrap_realloc(void *p, size_t n) { return xrealloc(OWN, p, n); }

/* jansson */
static void *j_malloc(size_t n) { return xmalloc(JANSSON, n); }
static void j_free(void *p) { free(p); }
/* OpenSSL */
static void *o_malloc(size_t n, const char *f, int l) { (void)f; (void)l; return xmalloc(OPENSSL, n); }
static void *o_realloc(void *p, size_t n, const char *f, int l) {
  (void)f; (void)l;
  return xrealloc(OPENSSL, p, n);
}
static void o_free(void *p, const char *f, int l) { (void)f; (void)l; free(p); }
/* libcurl */
static void *c_malloc(size_t n) { return xmalloc(LIBCURL, n); }
static void *c_calloc(size_t k, size_t n) { return xcalloc(LIBCURL, k, n); }
static void *c_realloc(void *p, size_t n) { return xrealloc(LIBCURL, p, n); }
static void c_free(void *p) { free(p); }
static char *c_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = xmalloc(LIBCURL, n);
  if (d) memcpy(d, s, n);
  return d;
}

static void arm(long n) { armed = 1; alloc_no = 0; fail_at = n; injected = 0; }
static void disarm(void) { armed = 0; fail_at = -1; }

/* Runs op(n) for n = 0, 1, ... until a run injects no failure. op returns its status (MB_OK or
 * an mb_err). A failure of the codec's own allocations must give MB_E_NOMEM. A failure inside a
 * library may be absorbed by it (OpenSSL, libcurl: MB_OK with a correct result, which op
 * checks) and jansson reports some of its allocation failures as syntax errors, so a parse
 * may then fail with MB_E_PROTOCOL: there the test asks for no crash and no leak. */
typedef int (*op_fn)(void *ud);
static void exhaust(const char *what, op_fn op, void *ud, long min_allocs) {
  long n = 0, own = 0;
  for (;; n++) {
    arm(n);
    int rc = op(ud);
    int inj = injected;
    disarm();
    if (!inj) {
      if (!mbt_check(rc == MB_OK, __FILE__, __LINE__, "clean run succeeds"))
        fprintf(stderr, "     %s: rc %d without an injected failure\n", what, rc);
      break;
    }
    int ok = inj == OWN ? rc == MB_E_NOMEM
                        : rc == MB_E_NOMEM || rc == MB_OK || (inj == JANSSON && rc == MB_E_PROTOCOL);
    own += inj == OWN;
    if (!mbt_check(ok, __FILE__, __LINE__, "injected failure → MB_E_NOMEM"))
      fprintf(stderr, "     %s: allocation %ld (lib %d) failed, got %s\n", what, n, inj,
              mb_errcode(rc));
    if (n > 100000) { CHECK(!"runaway"); break; }
  }
  /* the operation really allocated (else this test proves nothing) */
  if (!mbt_check(own >= min_allocs, __FILE__, __LINE__, "enough allocations exercised"))
    fprintf(stderr, "     %s: only %ld own allocations\n", what, own);
  printf("     %s: %ld allocation points (%ld in moonbox's code)\n", what, n, own);
}

/* ---- bodies (built unarmed) ---- */




#define END_STREAM_JSON                                                                      \
  "{\"metadata\":{\"a\":[\"1\",\"2\"],\"b\":[]},\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}"

static struct body frame_stream; /* wrapper frames: pgid, big o and e frames, exit, done */
static struct body proc_body;    /* envd stream carrying frame_stream and events */
static size_t proc_out_total;

static void build_bodies(void) {
  static char big[3 * MB_FRAME_DATA_MAX + 17];
  mbt_fill((unsigned char *)big, sizeof big);
  body_add(&frame_stream, "!pgid 42\n", 9);
  frames_data(&frame_stream, MB_FRAME_STDOUT, big, sizeof big);
  frames_data(&frame_stream, MB_FRAME_STDERR, big, 5000);
  body_add(&frame_stream, "!exit 3\n!done\n", 14);
  proc_out_total = sizeof big;

  const char *start = "{\"event\":{\"start\":{\"pid\":41}}}";
  body_envelope_n(&proc_body, 0, start, strlen(start));
  /* the frames in pieces of 10000 bytes: frame lines span events */
  for (size_t off = 0; off < frame_stream.n; off += 10000) {
    size_t k = frame_stream.n - off < 10000 ? frame_stream.n - off : 10000;
    body_data(&proc_body, "stdout", frame_stream.s + off, k);
  }
  body_data(&proc_body, "stderr", "wrapper diag\n", 13);
  const char *keep = "{\"event\":{\"keepalive\":{}}}";
  body_envelope_n(&proc_body, 0, keep, strlen(keep));
  const char *end = "{\"event\":{\"end\":{\"exitCode\":3,\"exited\":true,\"status\":\"exit status 3\"}}}";
  body_envelope_n(&proc_body, 0, end, strlen(end));
  body_envelope_n(&proc_body, MB_ENVELOPE_END_STREAM, END_STREAM_JSON, strlen(END_STREAM_JSON));
}

/* ---- codec operations ---- */

struct env_count { int messages, ends, md; };
static int count_env(void *ud, const struct mb_envelope *e) {
  struct env_count *c = ud;
  c->messages++;
  if (e->end_stream) {
    c->ends++;
    c->md = json_object_size(e->metadata) == 2 && e->has_error;
  }
  return 0;
}

/* envelope decoder: new, then the multi-message stream in 7000-byte pushes (payloads are
 * buffered across pushes, the end-stream JSON is parsed), then finish */
static int op_envelopes(void *ud) {
  (void)ud;
  struct mb_envelope_decoder *d = mb_envelope_decoder_new(1 << 20);
  if (!d) return MB_E_NOMEM;
  struct env_count c = {0, 0, 0};
  struct mb_error err;
  mb_error_clear(&err);
  int rc = MB_OK;
  for (size_t off = 0; off < proc_body.n && !rc; off += 7000) {
    size_t k = proc_body.n - off < 7000 ? proc_body.n - off : 7000;
    rc = mb_envelope_decoder_push(d, proc_body.s + off, k, count_env, &c, &err);
    if (rc) {
      CHECK_INT(err.code, rc);
      /* sticky */
      CHECK_INT(mb_envelope_decoder_push(d, "", 0, count_env, &c, NULL), rc);
    }
  }
  if (!rc) rc = mb_envelope_decoder_finish(d, &err);
  if (!rc && !injected) {
    CHECK(c.ends == 1 && c.md);
    CHECK(c.messages > 8);
  }
  mb_envelope_decoder_free(d);
  return rc;
}

static int op_end_stream(void *ud) {
  (void)ud;
  struct mb_envelope env;
  struct mb_error err;
  int rc = mb_connect_parse_end_stream(END_STREAM_JSON, strlen(END_STREAM_JSON), &env, &err);
  if (rc) {
    CHECK(env.metadata == NULL);
    CHECK_INT(err.code, rc);
    return rc;
  }
  CHECK(env.has_error && env.error.code == MB_CONNECT_NOT_FOUND);
  CHECK_INT(json_object_size(env.metadata), 2);
  json_decref(env.metadata);
  return MB_OK;
}

/* the jansson path of mb_connect_json_bytes: an escaped value, and a message of another shape */
static int op_json_bytes(void *ud) {
  (void)ud;
  static const char *const path[] = {"event", "data"};
  static const char *const leaves[] = {"stdout", "stderr"};
  const char *esc = "{\"event\":{\"data\":{\"stdout\":\"o\\/w=\"}}}";
  unsigned char out[16];
  size_t n;
  int leaf;
  json_t *root;
  struct mb_error err;
  int rc = mb_connect_json_bytes(esc, strlen(esc), path, 2, leaves, 2, 0, out, sizeof out, &n,
                                 &leaf, &root, &err);
  if (rc) return rc;
  CHECK(leaf == 0 && n == 2 && root == NULL);
  const char *other = "{\"event\":{\"start\":{\"pid\":7}}}";
  rc = mb_connect_json_bytes(other, strlen(other), path, 2, leaves, 2, 0, out, sizeof out, &n,
                             &leaf, &root, &err);
  if (rc) return rc;
  CHECK(leaf == -1 && json_is_object(root));
  json_decref(root);
  return MB_OK;
}

static int count_frame(void *ud, const struct mb_frame *f) {
  size_t *bytes = ud;
  if (f->kind == MB_FRAME_STDOUT) *bytes += f->len;
  return 0;
}

/* frame decoder: big o/e frames pushed in 1000-byte pieces (the line buffer grows) */
static int op_frames(void *ud) {
  (void)ud;
  struct mb_frame_decoder *d = mb_frame_decoder_new(MB_FRAME_LINE_MIN_LIMIT);
  if (!d) return MB_E_NOMEM;
  size_t bytes = 0;
  struct mb_error err;
  int rc = MB_OK;
  for (size_t off = 0; off < frame_stream.n && !rc; off += 1000) {
    size_t k = frame_stream.n - off < 1000 ? frame_stream.n - off : 1000;
    rc = mb_frame_decoder_push(d, frame_stream.s + off, k, count_frame, &bytes, &err);
    if (rc) {
      CHECK_INT(err.code, rc);
      CHECK_INT(mb_frame_decoder_finish(d, NULL), rc); /* sticky */
    }
  }
  if (!rc) rc = mb_frame_decoder_finish(d, &err);
  if (!rc && !injected) CHECK_INT(bytes, proc_out_total);
  mb_frame_decoder_free(d);
  /* whole lines in one push: no line buffer, only the decoded-bytes buffer */
  d = mb_frame_decoder_new(MB_FRAME_LINE_MIN_LIMIT);
  if (!d) return MB_E_NOMEM;
  if (!rc) rc = mb_frame_decoder_push(d, frame_stream.s, frame_stream.n, NULL, NULL, &err);
  mb_frame_decoder_free(d);
  return rc;
}

static int op_sign(void *ud) {
  (void)ud;
  char sig[MB_SIGN_V1_LEN + 1];
  int rc = mb_sign_v1("/a.txt", "read", "user", "token", 1700000000, sig);
  if (rc) CHECK_STR(sig, "");
  else CHECK_INT(strlen(sig), MB_SIGN_V1_LEN);
  return rc;
}

/* procstream: the whole envd stream in 7000-byte pushes into the configured sinks */
static int op_procstream(void *ud) {
  const struct mb_ps_config *c = ud;
  struct mb_procstream *ps = mb_procstream_new(c);
  if (!ps) return MB_E_NOMEM;
  struct mb_error err;
  int rc = MB_OK;
  size_t facts = 0;
  for (size_t off = 0; off < proc_body.n && !rc; off += 7000) {
    size_t k = proc_body.n - off < 7000 ? proc_body.n - off : 7000;
    rc = mb_procstream_push(ps, proc_body.s + off, k, &err);
    if (rc) {
      CHECK_INT(err.code, rc);
      CHECK_INT(mb_procstream_finish(ps, NULL), rc); /* sticky */
    } else {
      struct mb_ps_fact f[MB_PS_FACTS_MAX];
      facts += mb_procstream_take_facts(ps, f, MB_PS_FACTS_MAX);
      for (int s = 0; s < 2; s++) { /* a queue is drained as a reader would */
        size_t n;
        mb_procstream_peek(ps, s, &n);
        mb_procstream_consume(ps, s, n);
      }
    }
  }
  if (!rc) rc = mb_procstream_finish(ps, &err);
  if (!rc && !injected) {
    /* start pgid exit done end stream_error */
    CHECK_INT(facts, 6);
    CHECK_INT(mb_procstream_total(ps, MB_PS_STDOUT), proc_out_total);
    CHECK_INT(mb_procstream_total(ps, MB_PS_STDERR), 5000);
    size_t dl;
    mb_procstream_diag(ps, &dl);
    CHECK_INT(dl, 13);
  }
  mb_procstream_free(ps);
  return rc;
}

/* ---- loop and transport (no server: a refused port; only the start allocates) ---- */
static int op_http_start(void *ud) {
  int stream = *(int *)ud;
  mb_loop *l;
  int rc = mb_loop_new(NULL, &l);
  if (rc) return rc;
  const char *hdrs[] = {"Content-Type: application/json", "X-A: b"};
  mb_http_opts o;
  memset(&o, 0, sizeof o);
  o.url = "http://127.0.0.1:1/x";
  o.headers = hdrs;
  o.n_headers = 2;
  o.body = "{\"a\":1}";
  o.body_len = 7;
  o.body_fd = -1;
  o.stream = stream;
  o.max_bytes = 1024;
  o.timeout_ms = 5000;
  mb_http_req *r = NULL;
  struct mb_error err;
  rc = mb_http_start(l, &o, NULL, NULL, &r, &err);
  if (rc) {
    CHECK(r == NULL);
    CHECK_INT(err.code, rc);
  }
  mb_http_free(r);
  mb_loop_free(l);
  return rc;
}

/* ---- the wrapper itself ---- */
static void *volatile sink_p; /* keeps the compiler from folding malloc away */
static void test_wrapper(void) {
  arm(0);
  sink_p = malloc(8);
  disarm();
  CHECK(sink_p == NULL && injected == OWN);
  arm(1);
  void *a = malloc(8);
  sink_p = calloc(1, 8);
  void *c = realloc(a, 64);
  disarm();
  CHECK(a != NULL && sink_p == NULL && c != NULL);
  free(c);
}

static void test_codec(void) {
  exhaust("envelope decoder", op_envelopes, NULL, 3);
  exhaust("end-stream JSON", op_end_stream, NULL, 0);
  exhaust("json bytes (jansson path)", op_json_bytes, NULL, 0);
  exhaust("frame decoder", op_frames, NULL, 4);
  exhaust("v1 signature", op_sign, NULL, 0);
}

static void test_procstream(void) {
  struct mb_ps_config c;
  memset(&c, 0, sizeof c);
  c.max_message = 1 << 20;
  c.max_line = MB_FRAME_LINE_MIN_LIMIT;
  struct { int k0; size_t m0; int k1; size_t m1; } kinds[] = {
    {MB_PS_QUEUE, 1 << 20, MB_PS_TAIL, 100},
    {MB_PS_TAIL, 1 << 20, MB_PS_QUEUE, 1 << 20},
    {MB_PS_TAIL, 1000, MB_PS_TAIL, 0},
    {MB_PS_DISCARD, 0, MB_PS_QUEUE, 1 << 20},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    c.sink[0] = (struct mb_ps_sink){kinds[i].k0, kinds[i].m0};
    c.sink[1] = (struct mb_ps_sink){kinds[i].k1, kinds[i].m1};
    char what[64];
    snprintf(what, sizeof what, "procstream sinks %d/%d", kinds[i].k0, kinds[i].k1);
    exhaust(what, op_procstream, &c, 6);
  }
}

static void test_http_start(void) {
  int stream = 0;
  exhaust("mb_loop_new + mb_http_start (unary)", op_http_start, &stream, 2);
  stream = 1;
  exhaust("mb_loop_new + mb_http_start (stream + header timer)", op_http_start, &stream, 2);
}

/* ---- transfers against spec/support/server.py: the response buffers (headers, body) ---- */
static pid_t server_pid = -1;
static char base[64];

static int start_server(void) { return mbt_start_server(&server_pid); }

struct xfer { const char *path; int stream; size_t max_bytes, expect; };

static void xfer_cb(mb_http_req *r, void *ud) { (void)r; (void)ud; }

static int op_http_transfer(void *ud) {
  const struct xfer *x = ud;
  mb_loop *l;
  int rc = mb_loop_new(NULL, &l);
  if (rc) return rc;
  char url[128];
  snprintf(url, sizeof url, "%s%s", base, x->path);
  mb_http_opts o;
  memset(&o, 0, sizeof o);
  o.url = url;
  o.body_fd = -1;
  o.stream = x->stream;
  o.max_bytes = x->max_bytes;
  o.timeout_ms = 10000;
  mb_http_req *r = NULL;
  struct mb_error err;
  rc = mb_http_start(l, &o, xfer_cb, NULL, &r, &err);
  if (rc) {
    mb_loop_free(l);
    return rc;
  }
  size_t total = 0;
  const struct mb_error *e = NULL;
  for (int i = 0; i < 100000 && !mb_http_done(r, &e); i++) {
    uv_run(mb_loop_uv(l), UV_RUN_ONCE);
    if (x->stream) { /* a consumer that keeps up */
      size_t n;
      mb_http_peek(r, &n);
      total += n;
      mb_http_consume(r, n);
    }
  }
  size_t n;
  mb_http_peek(r, &n);
  total += n;
  rc = e ? e->code : MB_E_TIMEOUT;
  if (rc == MB_E_NOMEM) CHECK(strcasestr(e->message, "out of memory") != NULL);
  if (rc == MB_OK && !injected) {
    CHECK_INT(mb_http_status(r), 200);
    CHECK_INT(total, x->expect);
  }
  mb_http_free(r);
  mb_loop_free(l);
  return rc;
}

static void test_http_transfer(void) {
  int port = start_server();
  CHECK(port > 0);
  if (port <= 0) return;
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
  /* headers over 1 KiB (the header buffer grows), a body of 20000 bytes (4 KiB doubling) */
  struct xfer unary = {"/headers?n=20", 0, 100, 2};
  struct xfer big = {"/big?n=20000", 0, 20000, 20000};
  struct xfer stream = {"/stream?chunks=4&size=5000", 1, 0, 20000};
  own_only = 1; /* libcurl's own failures give it a choice of codes; ours must be NOMEM */
  exhaust("unary transfer, big headers", op_http_transfer, &unary, 3);
  exhaust("unary transfer, 20000 bytes", op_http_transfer, &big, 4);
  exhaust("streaming transfer", op_http_transfer, &stream, 3);
  own_only = 0;
  kill(server_pid, SIGKILL);
  waitpid(server_pid, NULL, 0);
}

int main(void) {
  /* Before anything allocates through these libraries. */
  int ossl = CRYPTO_set_mem_functions(o_malloc, o_realloc, o_free);
  json_set_alloc_funcs(j_malloc, j_free);
  CHECK(curl_global_init_mem(CURL_GLOBAL_DEFAULT, c_malloc, c_free, c_realloc, c_strdup,
                             c_calloc) == CURLE_OK);
  /* OpenSSL's one-time initialisation is not what is tested: warm it up unarmed. */
  char sig[MB_SIGN_V1_LEN + 1];
  CHECK_INT(mb_sign_v1("/", "read", "u", "t", 0, sig), MB_OK);
  build_bodies();
  MBT_RUN(test_wrapper);
  MBT_RUN(test_codec);
  MBT_RUN(test_procstream);
  MBT_RUN(test_http_start);
  MBT_RUN(test_http_transfer);
  if (!ossl) printf("note: OpenSSL allocated before CRYPTO_set_mem_functions\n");
  free(frame_stream.s);
  free(proc_body.s);
  curl_global_cleanup();
  return mbt_report();
}
