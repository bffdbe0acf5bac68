/* test_http.c — the transport without Lua: error mapping, argument checks, completion and
 * cancellation on the loop, freeing from the callback, a borrowed uv loop. */
#include "http.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(void) {
  test_map();
  mb_loop *l;
  CHECK(mb_loop_new(NULL, &l) == MB_OK);
  test_bad_args(l);
  test_refused(l);
  test_cancel(l);
  test_free_pending(l);
  mb_loop_free(l);
  test_borrowed_loop();
  if (failures) { fprintf(stderr, "test_http: %d failures\n", failures); return 1; }
  printf("test_http: ok\n");
  return 0;
}
