/* test_http.c — the transport without Lua (so the sanitizer build covers it): error mapping,
 * argument checks, cancellation, freeing from the callback, a borrowed uv loop, and against
 * spec/support/server.py: unary, size limit, streaming with backpressure, uploads from a file,
 * oversized headers, a server closing mid-body, the header timeout of streams, the C-level
 * body size checks (also when resuming a paused stream), upload read errors. */
#include "http.h"
#include "mbtest_support.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>


static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static void test_map(void) {
  CHECK(mb_http_map_curl(CURLE_OK) == MB_OK);
  CHECK(mb_http_map_curl(CURLE_COULDNT_CONNECT) == MB_E_CONNECT_FAILED);
  CHECK(mb_http_map_curl(CURLE_OPERATION_TIMEDOUT) == MB_E_TIMEOUT);
  CHECK(mb_http_map_curl(CURLE_SSL_CONNECT_ERROR) == MB_E_TLS);
  CHECK(mb_http_map_curl(CURLE_PEER_FAILED_VERIFICATION) == MB_E_TLS);
  CHECK(mb_http_map_curl(CURLE_FILESIZE_EXCEEDED) == MB_E_TOO_LARGE);
  CHECK(mb_http_map_curl(CURLE_COULDNT_RESOLVE_HOST) == MB_E_DNS);
  CHECK(mb_http_map_curl(CURLE_PARTIAL_FILE) == MB_E_IO);
  CHECK(mb_http_map_curl(CURLE_RECV_ERROR) == MB_E_IO);
  CHECK(mb_http_map_curl(CURLE_WEIRD_SERVER_REPLY) == MB_E_PROTOCOL);
  CHECK(mb_http_map_curl(CURLE_URL_MALFORMAT) == MB_E_INVALID);
  CHECK(strcmp(mb_errcode(mb_http_map_curl(CURLE_COULDNT_CONNECT)), "E2B_CONNECT_FAILED") == 0);
  CHECK(strcmp(mb_errcode(mb_http_map_curl(CURLE_OPERATION_TIMEDOUT)), "E2B_TIMEOUT") == 0);
}

static mb_http_opts opts(const char *url) {
  mb_http_opts o;
  memset(&o, 0, sizeof o);
  o.url = url;
  o.body_fd = -1;
  o.max_bytes = 1024;
  o.timeout_ms = 5000;
  return o;
}

static void test_bad_args(mb_loop *l) {
  struct mb_error err;
  mb_http_req *r = (mb_http_req *)1;
  mb_http_opts o = opts(NULL);
  CHECK(mb_http_start(l, &o, NULL, NULL, &r, &err) == MB_E_INVALID && r == NULL);
  CHECK(strstr(err.message, "url") != NULL);
  o = opts("http://127.0.0.1:1/");
  o.max_bytes = 0;
  CHECK(mb_http_start(l, &o, NULL, NULL, &r, &err) == MB_E_INVALID);
  CHECK(strstr(err.message, "max_bytes") != NULL);
  int p[2];
  CHECK(pipe(p) == 0);
  o = opts("http://127.0.0.1:1/");
  o.body = "x";
  o.body_len = 1;
  o.body_fd = p[0];
  CHECK(mb_http_start(l, &o, NULL, NULL, &r, &err) == MB_E_INVALID);
  o.body = NULL;
  o.own_body_fd = 1;
  CHECK(mb_http_start(l, &o, NULL, NULL, &r, &err) == MB_E_INVALID); /* a pipe is not a file */
  CHECK(strstr(err.message, "regular file") != NULL);
  CHECK(close(p[0]) == 0); /* a failed start leaves the caller's fd open */
  close(p[1]);
  CHECK(mb_loop_stats_of(l)->active == 0);
}

struct seen { int calls; int done; int code; int free_in_cb; char msg[MB_ERROR_MSG_MAX]; };

static void on_change(mb_http_req *r, void *ud) {
  struct seen *s = ud;
  s->calls++;
  const struct mb_error *e;
  if (mb_http_done(r, &e) && !s->done) {
    s->done = 1;
    s->code = e->code;
    snprintf(s->msg, sizeof s->msg, "%s", e->message);
    if (s->free_in_cb) mb_http_free(r);
  }
}

static void run_until(mb_loop *l, struct seen *s) {
  for (int i = 0; i < 100000 && !s->done; i++) uv_run(mb_loop_uv(l), UV_RUN_ONCE);
}

static void test_refused(mb_loop *l) {
  struct seen s = {0};
  s.free_in_cb = 1;
  struct mb_error err;
  mb_http_req *r;
  mb_http_opts o = opts("http://127.0.0.1:1/");
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_OK);
  CHECK(mb_loop_stats_of(l)->active == 1);
  run_until(l, &s);
  CHECK(s.done && s.code == MB_E_CONNECT_FAILED);
  CHECK(s.msg[0] != '\0');
  CHECK(mb_loop_stats_of(l)->active == 0);
}

static void test_cancel(mb_loop *l) {
  struct seen s = {0};
  struct mb_error err;
  mb_http_req *r;
  mb_http_opts o = opts("http://127.0.0.1:1/");
  o.stream = 1;
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_OK);
  mb_http_cancel(r);
  const struct mb_error *e;
  CHECK(mb_http_done(r, &e) && e->code == MB_E_CANCELED);
  mb_http_cancel(r); /* idempotent */
  run_until(l, &s);
  CHECK(s.calls == 1); /* one notification, delivered from the loop */
  CHECK(s.code == MB_E_CANCELED);
  size_t n;
  mb_http_peek(r, &n);
  CHECK(n == 0);
  mb_http_free(r);
  CHECK(mb_loop_stats_of(l)->active == 0);
}

static void test_free_pending(mb_loop *l) {
  /* Freed before its queued notification runs: nothing may fire afterwards. */
  struct seen s = {0};
  struct mb_error err;
  mb_http_req *r;
  mb_http_opts o = opts("http://127.0.0.1:1/");
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_OK);
  mb_http_cancel(r);
  mb_http_free(r);
  for (int i = 0; i < 10; i++) uv_run(mb_loop_uv(l), UV_RUN_NOWAIT);
  CHECK(s.calls == 0);
}

static void test_borrowed_loop(void) {
  uv_loop_t uv;
  CHECK(uv_loop_init(&uv) == 0);
  mb_loop *l;
  CHECK(mb_loop_new(&uv, &l) == MB_OK);
  CHECK(mb_loop_uv(l) == &uv);
  test_refused(l);
  mb_loop_free(l);
  uv_run(&uv, UV_RUN_DEFAULT); /* the owner's run lets our handles close */
  CHECK(uv_loop_close(&uv) == 0);
}

/* ---- against the test server ---- */
static pid_t server_pid = -1;

static int start_server(void) { return mbt_start_server(&server_pid); }

static char base[64];

static mb_http_opts sopts(const char *path, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s", base, path);
  return opts(buf);
}

static int run_req(mb_loop *l, mb_http_opts *o, struct seen *s, mb_http_req **out) {
  struct mb_error err;
  memset(s, 0, sizeof *s);
  int rc = mb_http_start(l, o, on_change, s, out, &err);
  if (rc != MB_OK) return rc;
  run_until(l, s);
  return MB_OK;
}

static void test_unary(mb_loop *l) {
  char u[128];
  struct seen s;
  mb_http_req *r;
  mb_http_opts o = sopts("/big?n=1000", u, sizeof u);
  o.max_bytes = 1000;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_OK && mb_http_status(r) == 200);
  size_t n;
  const char *b = mb_http_peek(r, &n);
  CHECK(n == 1000 && b[0] == 'x' && b[999] == 'x');
  size_t pos = 0, nl, vl;
  const char *name, *val;
  int found = 0;
  while (mb_http_header_next(r, &pos, &name, &nl, &val, &vl))
    if (nl == 14 && strncasecmp(name, "Content-Length", 14) == 0 && vl == 4 && memcmp(val, "1000", 4) == 0) found = 1;
  CHECK(found);
  mb_http_free(r);

  o = sopts("/stream?chunks=10&size=1000", u, sizeof u); /* chunked: cut off in the write path */
  o.max_bytes = 2500;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_E_TOO_LARGE);
  mb_http_peek(r, &n);
  CHECK(n <= 2500);
  mb_http_free(r);

  o = sopts("/headers?n=1000", u, sizeof u);
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_E_PROTOCOL);
  mb_http_free(r);

  o = sopts("/close?after=10&promise=1000", u, sizeof u);
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_E_IO);
  mb_http_free(r);

  o = sopts("/delay?ms=3000", u, sizeof u);
  o.timeout_ms = 50;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_E_TIMEOUT);
  mb_http_free(r);

  o = sopts("/delay?ms=3000", u, sizeof u); /* streams: the timeout covers the headers only */
  o.stream = 1;
  o.timeout_ms = 50;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_E_TIMEOUT);
  mb_http_free(r);
}

static void test_upload(mb_loop *l) {
  char path[] = "/tmp/mb_test_http_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  unlink(path);
  static char data[300000];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (char)('a' + i % 23);
  CHECK(write(fd, data, sizeof data) == (ssize_t)sizeof data);
  lseek(fd, 0, SEEK_SET);
  char u[128];
  struct seen s;
  mb_http_req *r;
  mb_http_opts o = sopts("/echo?raw=1", u, sizeof u);
  o.method = "PUT";
  o.body_fd = fd;
  o.own_body_fd = 1;
  o.max_bytes = sizeof data;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_OK);
  size_t n;
  const char *b = mb_http_peek(r, &n);
  CHECK(n == sizeof data && memcmp(b, data, n) == 0);
  mb_http_free(r); /* closes fd */
}

static void test_backpressure(mb_loop *l) {
  char u[128];
  struct seen s = {0};
  struct mb_error err;
  mb_http_req *r;
  mb_http_opts o = sopts("/stream?chunks=100&size=16384", u, sizeof u);
  o.stream = 1;
  o.max_bytes = 0; /* no total cap */
  o.high_water = 32768;
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_OK);
  size_t total = 0;
  int saw_pause = 0;
  for (int i = 0; i < 200000 && !s.done; i++) {
    uv_run(mb_loop_uv(l), UV_RUN_ONCE);
    mb_http_info inf;
    mb_http_get_info(r, &inf);
    /* Consume only once paused: a consumer that falls behind. */
    if (inf.paused) {
      saw_pause = 1;
      size_t n;
      const char *b = mb_http_peek(r, &n);
      if (n) CHECK(b[0] == (char)('A' + (total / 16384) % 26));
      total += n;
      mb_http_consume(r, n);
    }
  }
  size_t n;
  mb_http_peek(r, &n);
  total += n;
  mb_http_info inf;
  mb_http_get_info(r, &inf);
  if (s.code != MB_OK) fprintf(stderr, "backpressure: done=%d code=%d %s\n", s.done, s.code, s.msg);
  CHECK(s.code == MB_OK);
  CHECK(saw_pause && inf.pauses > 0);
  CHECK(total == 100 * 16384);
  CHECK(inf.max_buffered < total / 4);
  mb_http_free(r);
}

/* The C-level size checks of on_write (chunked bodies: libcurl's own MAXFILESIZE check only sees
 * a Content-Length): our message, not libcurl's. */
static void test_too_large_in_write(mb_loop *l) {
  char u[128];
  struct seen s;
  mb_http_req *r;
  mb_http_opts o = sopts("/stream?chunks=10&size=1000", u, sizeof u);
  o.stream = 1;
  o.max_bytes = 2500;
  struct mb_error err;
  memset(&s, 0, sizeof s);
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_OK);
  size_t total = 0;
  for (int i = 0; i < 100000 && !s.done; i++) { /* a consumer that keeps up */
    uv_run(mb_loop_uv(l), UV_RUN_ONCE);
    size_t n;
    mb_http_peek(r, &n);
    total += n;
    mb_http_consume(r, n);
  }
  CHECK(s.code == MB_E_TOO_LARGE);
  CHECK(strstr(s.msg, "exceeds max_bytes (2500)") != NULL);
  CHECK(total <= 2500);
  mb_http_free(r);

  o = sopts("/stream?chunks=10&size=1000", u, sizeof u); /* unary: the same check */
  o.max_bytes = 2500;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_E_TOO_LARGE);
  CHECK(strstr(s.msg, "exceeds max_bytes (2500)") != NULL);
  mb_http_free(r);
}

/* Resuming a paused stream re-delivers the held chunk; when that chunk breaks max_bytes,
 * curl_easy_pause fails inside mb_http_consume, which finishes the request right there. */
static void test_resume_fails(mb_loop *l) {
  char u[128];
  struct seen s = {0};
  struct mb_error err;
  mb_http_req *r;
  mb_http_opts o = sopts("/stream?chunks=10&size=1000", u, sizeof u);
  o.stream = 1;
  o.max_bytes = 2500;
  o.high_water = 1000;
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_OK);
  int done_in_consume = 0;
  for (int i = 0; i < 100000 && !s.done && !done_in_consume; i++) {
    uv_run(mb_loop_uv(l), UV_RUN_ONCE);
    mb_http_info inf;
    mb_http_get_info(r, &inf);
    if (inf.paused) { /* consume only once paused: every chunk after the first is held */
      size_t n;
      mb_http_peek(r, &n);
      mb_http_consume(r, n);
      if (mb_http_done(r, NULL)) done_in_consume = 1;
    }
  }
  const struct mb_error *e;
  CHECK(done_in_consume);
  CHECK(mb_http_done(r, &e) && e->code == MB_E_TOO_LARGE);
  CHECK(strstr(e->message, "exceeds max_bytes") != NULL);
  run_until(l, &s); /* the notification still arrives, once */
  CHECK(s.done && s.code == MB_E_TOO_LARGE);
  mb_http_free(r);
  CHECK(mb_loop_stats_of(l)->active == 0);
}

/* Upload read errors: a directory is refused at the start; an fd that turns into a directory
 * after the start (read → EISDIR) aborts the transfer with MB_E_IO and errno's text. */
static void test_upload_read_error(mb_loop *l) {
  char u[128];
  struct seen s;
  mb_http_req *r;
  struct mb_error err;
  int dir = open("/tmp", O_RDONLY | O_DIRECTORY);
  CHECK(dir >= 0);
  if (dir < 0) return;
  mb_http_opts o = sopts("/echo?raw=1", u, sizeof u);
  o.method = "PUT";
  o.body_fd = dir;
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_E_INVALID && r == NULL);
  CHECK(strstr(err.message, "regular file") != NULL);

  char path[] = "/tmp/mb_test_http_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) { close(dir); return; }
  unlink(path);
  CHECK(write(fd, "0123456789", 10) == 10);
  lseek(fd, 0, SEEK_SET);
  o = sopts("/echo?raw=1", u, sizeof u);
  o.method = "PUT";
  o.body_fd = fd;
  o.own_body_fd = 1;
  memset(&s, 0, sizeof s);
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_OK);
  CHECK(dup2(dir, fd) == fd); /* the same descriptor number is now the directory */
  run_until(l, &s);
  CHECK(s.code == MB_E_IO);
  CHECK(strstr(s.msg, "reading the upload body") != NULL);
  CHECK(strstr(s.msg, strerror(EISDIR)) != NULL);
  mb_http_free(r); /* closes fd (the dup) */
  close(dir);
  CHECK(mb_loop_stats_of(l)->active == 0);
}

/* A produced body (mb_http_source): sent chunked, pieces of any size, all of it; a source that
 * fails ends the transfer with MB_E_IO. */
struct gen { size_t left, sent; int fail_at; };
static ssize_t gen_read(void *ud, char *buf, size_t cap) {
  struct gen *g = ud;
  if (g->fail_at >= 0 && g->sent >= (size_t)g->fail_at) return -1;
  size_t n = g->left < cap ? g->left : cap;
  if (n > 7777) n = 7777; /* odd pieces */
  for (size_t i = 0; i < n; i++) buf[i] = (char)('A' + (g->sent + i) % 26);
  g->left -= n;
  g->sent += n;
  return (ssize_t)n;
}

static void test_upload_source(mb_loop *l) {
  char u[128];
  struct seen s;
  mb_http_req *r;
  struct mb_error err;
  struct gen g = {.left = 200000, .fail_at = -1};
  struct mb_http_source src = {gen_read, &g};
  mb_http_opts o = sopts("/echo?raw=1", u, sizeof u);
  o.method = "POST";
  o.body_source = &src;
  o.max_bytes = 300000;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_OK);
  size_t n;
  const char *b = mb_http_peek(r, &n);
  CHECK(n == 200000);
  int same = n == 200000;
  for (size_t i = 0; same && i < n; i++) same = b[i] == (char)('A' + i % 26);
  CHECK(same);
  mb_http_free(r);

  struct gen bad = {.left = 200000, .fail_at = 50000};
  struct mb_http_source bsrc = {gen_read, &bad};
  o = sopts("/echo?raw=1", u, sizeof u);
  o.body_source = &bsrc;
  CHECK(run_req(l, &o, &s, &r) == MB_OK);
  CHECK(s.code == MB_E_IO);
  CHECK(strstr(s.msg, "source failed") != NULL);
  mb_http_free(r);

  /* exclusive with the other bodies; a source needs read() */
  o = sopts("/echo", u, sizeof u);
  o.body_source = &src;
  o.body = "x";
  o.body_len = 1;
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_E_INVALID && r == NULL);
  struct mb_http_source none = {NULL, NULL};
  o = sopts("/echo", u, sizeof u);
  o.body_source = &none;
  CHECK(mb_http_start(l, &o, on_change, &s, &r, &err) == MB_E_INVALID && r == NULL);
}

int main(void) {
  test_map();
  mb_loop *l;
  CHECK(mb_loop_new(NULL, &l) == MB_OK);
  test_bad_args(l);
  test_refused(l);
  test_cancel(l);
  test_free_pending(l);
  int port = start_server();
  CHECK(port > 0);
  if (port > 0) {
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    test_unary(l);
    test_upload(l);
    test_backpressure(l);
    test_too_large_in_write(l);
    test_resume_fails(l);
    test_upload_read_error(l);
    test_upload_source(l);
  }
  if (server_pid > 0) { kill(server_pid, SIGKILL); waitpid(server_pid, NULL, 0); }
  mb_loop_free(l);
  test_borrowed_loop();
  if (failures) { fprintf(stderr, "test_http: %d failures\n", failures); return 1; }
  printf("test_http: ok\n");
  return 0;
}
