/* test_pstream.c — a process stream on the loop against spec/support/server.py's /replay (the
 * request body comes back as the response, chunked and paced as asked): collect mode wakes its
 * owner a handful of times whatever the output size; a pipe nobody reads pauses the transfer
 * at the high water and resumes when drained; FD sinks to a pipe, a socket and /dev/null,
 * with the loop never blocked by a full pipe; a reader that went away (EPIPE) is a sink_error
 * fact, not a dead host; non-200 answers, cut connections, cancellation; raw mode. */
#include "mbtest.h"
#include "mbtest_envd.h"
#include "pstream.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

static pid_t server_pid = -1;
static char base[96];
static mb_loop *l; /* the loop of every test */
static long idle_ms; /* the next start's idle timeout */

struct owner {
  int calls;
  struct body facts;            /* "kind:value " of every fact taken */
  struct body out;              /* PIPE stdout read by the owner */
  int read_pipe, want_more;     /* read stdout as it comes (re-arming want) */
  size_t read_cap;              /* consume at most this much per call (a slow reader) */
  struct mb_pstream *s;
  uv_loop_t *uv;
};

static void take(struct owner *o) {
  struct mb_ps_fact f[32];
  size_t n = mb_pstream_take_facts(o->s, f, 32);
  static const char *const names[] = {"?", "start", "pgid", "spawn_error", "exit", "signal",
                                      "empty", "done", "end", "stream_end", "stream_error",
                                      "sink_error"};
  for (size_t i = 0; i < n; i++) {
    char t[128];
    int k = snprintf(t, sizeof t, "%s:%lld ", names[f[i].kind], f[i].value);
    body_add(&o->facts, t, (size_t)k);
  }
}

static void drain(struct owner *o) {
  for (;;) {
    size_t n;
    const unsigned char *p = mb_pstream_peek(o->s, MB_PS_STDOUT, &n);
    if (n == 0) break;
    if (o->read_cap && n > o->read_cap) n = o->read_cap;
    body_add(&o->out, p, n);
    mb_pstream_consume(o->s, MB_PS_STDOUT, n);
    if (o->read_cap) break;
  }
}

static void on_change(struct mb_pstream *s, void *ud) {
  struct owner *o = ud;
  (void)s;
  o->calls++;
  take(o);
  if (o->read_pipe) {
    drain(o);
    if (!mb_pstream_eof(o->s, MB_PS_STDOUT)) mb_pstream_want(o->s, MB_PS_STDOUT);
  }
  if (mb_pstream_closed(o->s, NULL)) uv_stop(o->uv);
}

/* A full wrapper stream: start, pgid, `n` bytes of stdout in data events of `per_event` bytes,
 * exit 0, empty, done, the end event, end of stream. */
static void wrapper_stream(struct body *b, const char *data, size_t n, size_t per_event) {
  body_envelope(b, 0, "{\"event\":{\"start\":{\"pid\":41}}}");
  struct body fr = {0};
  body_add(&fr, "!pgid 77\n", 9);
  body_data(b, "stdout", fr.s, fr.n);
  for (size_t off = 0; off < n; off += per_event) {
    size_t k = n - off < per_event ? n - off : per_event;
    fr.n = 0;
    frames_data(&fr, MB_FRAME_STDOUT, data + off, k);
    body_data(b, "stdout", fr.s, fr.n);
  }
  fr.n = 0;
  body_add(&fr, "!exit 0\n!empty\n!done\n", 21);
  body_data(b, "stdout", fr.s, fr.n);
  body_envelope(b, 0, "{\"event\":{\"end\":{\"exitCode\":0,\"exited\":true,\"status\":\"exit status 0\"}}}");
  body_envelope(b, MB_ENVELOPE_END_STREAM, "{}");
  free(fr.s);
}

static char *pattern(size_t n) {
  char *d = malloc(n);
  if (!d) abort();
  for (size_t i = 0; i < n; i++) d[i] = (char)(i * 31 + (i >> 8));
  return d;
}

static struct mb_pstream *start(mb_loop *lp, const char *query, const struct body *b,
                                struct mb_pst_config *cfg, struct owner *o) {
  static char url[256];
  snprintf(url, sizeof url, "%s/replay%s", base, query);
  mb_http_opts h;
  memset(&h, 0, sizeof h);
  h.url = url;
  h.method = "POST";
  h.body = b->s;
  h.body_len = b->n;
  h.body_fd = -1;
  h.timeout_ms = 10000;
  h.idle_timeout_ms = idle_ms;
  struct mb_error err;
  if (!cfg->max_message) cfg->max_message = 1 << 20;
  if (!cfg->max_line) cfg->max_line = MB_FRAME_LINE_MIN_LIMIT;
  o->uv = mb_loop_uv(lp);
  int rc = mb_pstream_start(lp, &h, cfg, on_change, o, &o->s, &err);
  if (!CHECK(rc == MB_OK)) fprintf(stderr, "     start: %s\n", err.message);
  return o->s;
}

static void run_until_closed(mb_loop *lp, struct owner *o) {
  for (int i = 0; i < 100000 && !mb_pstream_closed(o->s, NULL); i++) uv_run(mb_loop_uv(lp), UV_RUN_ONCE);
}

static void on_stop(uv_timer_t *t) { uv_stop(t->loop); }

/* Runs the loop for `ms` milliseconds, whatever happens meanwhile. */
static void run_for(uint64_t ms) {
  uv_timer_t t;
  uv_timer_init(mb_loop_uv(l), &t);
  uv_timer_start(&t, on_stop, ms, 0);
  uv_run(mb_loop_uv(l), UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(mb_loop_uv(l), UV_RUN_NOWAIT);
}

static void owner_free(struct owner *o) {
  mb_pstream_free(o->s);
  free(o->facts.s);
  free(o->out.s);
}

static const char *WANT_FACTS = "start:41 pgid:77 exit:0 empty:0 done:0 end:0 stream_end:0 ";

/* Collect mode: the tail holds the end, the owner hears of facts only. */
static void test_collect_wakes_few(void) {
  size_t sizes[] = {1024, 8 << 20};
  int calls[2];
  for (int k = 0; k < 2; k++) {
    size_t n = sizes[k];
    char *data = pattern(n);
    struct body b = {0};
    wrapper_stream(&b, data, n, 16384);
    struct mb_pst_config c = {0};
    c.sink[0] = (struct mb_pst_sink){MB_PST_TAIL, 4096, -1};
    c.sink[1] = (struct mb_pst_sink){MB_PST_DISCARD, 0, -1};
    struct owner o = {0};
    if (!start(l, "?chunk=7000", &b, &c, &o)) { free(data); free(b.s); continue; }
    run_until_closed(l, &o);
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_OK);
    CHECK_STR(o.facts.s, WANT_FACTS);
    CHECK_INT(mb_procstream_total(mb_pstream_decoder(o.s), MB_PS_STDOUT), n);
    const unsigned char *a, *bb;
    size_t al, bl;
    uint64_t next;
    int lossy;
    mb_procstream_read_from(mb_pstream_decoder(o.s), MB_PS_STDOUT, n - 100, &a, &al, &bb, &bl, &next, &lossy);
    struct body got = {0};
    if (CHECK(al + bl == 100 && al <= 100 && !lossy)) {
      body_add(&got, a, al);
      if (bl) body_add(&got, bb, bl);
      CHECK_MEM(got.s, got.n, data + n - 100, 100);
    }
    calls[k] = o.calls;
    free(got.s);
    owner_free(&o);
    free(data);
    free(b.s);
  }
  /* 7 facts reach the owner in a few notifications, for 1 KiB as for 8 MiB */
  CHECK(calls[0] <= 8 && calls[1] <= 8);
  printf("     owner notified %d times for 1 KiB, %d times for 8 MiB\n", calls[0], calls[1]);
}

/* Pipe mode: while nobody reads, the transfer pauses with a bounded queue; a slow reader then
 * gets every byte in order. */
static void test_pipe_backpressure(void) {
  size_t n = 4 << 20;
  char *data = pattern(n);
  struct body b = {0};
  wrapper_stream(&b, data, n, 16384);
  struct mb_pst_config c = {0};
  c.high_water = 64 * 1024;
  c.sink[0] = (struct mb_pst_sink){MB_PST_PIPE, 0, -1};
  c.sink[1] = (struct mb_pst_sink){MB_PST_DISCARD, 0, -1};
  struct owner o = {0};
  idle_ms = 1000;
  if (!start(l, "?chunk=16384", &b, &c, &o)) return;
  /* nobody reads for a while: the transfer must stop at the high water (and time spent
   * paused is not silence: the 1 s idle timeout does not fire) */
  idle_ms = 0;
  run_for(2500);
  mb_http_info info;
  mb_pstream_info(o.s, &info);
  size_t held;
  mb_pstream_peek(o.s, MB_PS_STDOUT, &held);
  if (!CHECK(info.paused)) fprintf(stderr, "     held %zu, received %llu\n", held, (unsigned long long)info.received);
  CHECK(held >= c.high_water && held <= c.high_water + (1 << 20));
  CHECK(!mb_pstream_closed(o.s, NULL));
  /* now read, slowly */
  o.read_pipe = 1;
  o.read_cap = 10000;
  drain(&o);
  mb_pstream_want(o.s, MB_PS_STDOUT);
  run_until_closed(l, &o);
  while (!mb_pstream_eof(o.s, MB_PS_STDOUT)) drain(&o);
  const struct mb_error *e;
  CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_OK);
  CHECK_MEM(o.out.s, o.out.n, data, n);
  CHECK_STR(o.facts.s, WANT_FACTS);
  mb_pstream_info(o.s, &info);
  CHECK(info.pauses > 0);
  owner_free(&o);
  free(data);
  free(b.s);
}

static void on_tick(uv_timer_t *t) { (*(int *)t->data)++; }

/* FD sink into a pipe that another process drains slowly: the loop keeps running (a timer
 * ticks) while the pipe is full, and every byte arrives in order before the stream closes. */
static void test_fd_pipe(void) {
  size_t n = 2 << 20;
  char *data = pattern(n);
  struct body b = {0};
  wrapper_stream(&b, data, n, 16384);
  int p[2];
  CHECK_INT(pipe(p), 0);
  pid_t reader = fork();
  if (reader == 0) { /* slow reader: 64 KiB per 20 ms, everything into a file */
    close(p[1]);
    FILE *f = fopen("/tmp/mb_test_pstream.out", "wb");
    char buf[65536];
    ssize_t r;
    while ((r = read(p[0], buf, sizeof buf)) > 0) {
      fwrite(buf, 1, (size_t)r, f);
      usleep(20000);
    }
    fclose(f);
    _exit(0);
  }
  close(p[0]);
  struct mb_pst_config c = {0};
  c.high_water = 64 * 1024;
  c.sink[0] = (struct mb_pst_sink){MB_PST_FD, 0, p[1]};
  c.sink[1] = (struct mb_pst_sink){MB_PST_DISCARD, 0, -1};
  struct owner o = {0};
  int ticks = 0;
  uv_timer_t tick;
  uv_timer_init(mb_loop_uv(l), &tick);
  tick.data = &ticks;
  uv_timer_start(&tick, on_tick, 5, 5);
  if (start(l, "", &b, &c, &o)) {
    run_until_closed(l, &o);
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_OK);
    CHECK_STR(o.facts.s, WANT_FACTS);
    owner_free(&o);
  }
  uv_timer_stop(&tick);
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(mb_loop_uv(l), UV_RUN_NOWAIT);
  close(p[1]);
  int st;
  waitpid(reader, &st, 0);
  CHECK(ticks > 5); /* the loop kept turning while the pipe was full (~640 ms of reading) */
  FILE *f = fopen("/tmp/mb_test_pstream.out", "rb");
  struct body got = {0};
  char buf[65536];
  size_t r;
  while (f && (r = fread(buf, 1, sizeof buf, f)) > 0) body_add(&got, buf, r);
  if (f) fclose(f);
  unlink("/tmp/mb_test_pstream.out");
  CHECK_MEM(got.s, got.n, data, n);
  /* our private description is non-blocking; the caller's descriptor was left alone */
  free(got.s);
  free(data);
  free(b.s);
}

/* FD sinks that are a socket and /dev/null; and a pipe whose reader is gone (EPIPE: a fact,
 * the output is dropped, the facts keep coming; SIGPIPE never reaches the process). */
static void test_fd_kinds(void) {
  size_t n = 300000;
  char *data = pattern(n);
  struct body b = {0};
  wrapper_stream(&b, data, n, 16384);
  int sv[2];
  CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int devnull = open("/dev/null", O_WRONLY);
  int p[2];
  CHECK_INT(pipe(p), 0);
  close(p[0]);
  int flags_before = fcntl(sv[0], F_GETFL);
  for (int k = 0; k < 3; k++) {
    struct mb_pst_config c = {0};
    c.high_water = 64 * 1024;
    int fd = k == 0 ? sv[0] : k == 1 ? devnull : p[1];
    c.sink[0] = (struct mb_pst_sink){MB_PST_FD, 0, fd};
    c.sink[1] = (struct mb_pst_sink){MB_PST_DISCARD, 0, -1};
    struct owner o = {0};
    if (!start(l, "", &b, &c, &o)) continue;
    struct body got = {0};
    for (int i = 0; i < 100000 && !mb_pstream_closed(o.s, NULL); i++) {
      uv_run(mb_loop_uv(l), UV_RUN_NOWAIT);
      if (k == 0) {
        char buf[65536];
        ssize_t r = recv(sv[1], buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) body_add(&got, buf, (size_t)r);
      }
    }
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_OK);
    if (k == 0) {
      char buf[65536];
      ssize_t r;
      while ((r = recv(sv[1], buf, sizeof buf, MSG_DONTWAIT)) > 0) body_add(&got, buf, (size_t)r);
      CHECK_MEM(got.s, got.n, data, n);
      CHECK_INT(fcntl(sv[0], F_GETFL), flags_before); /* MSG_DONTWAIT: flags untouched */
      CHECK_STR(o.facts.s, WANT_FACTS);
    } else if (k == 1) {
      CHECK_STR(o.facts.s, WANT_FACTS);
    } else {
      CHECK_HAS(o.facts.s, "sink_error:32 "); /* EPIPE */
      CHECK_HAS(o.facts.s, "exit:0 empty:0 done:0 end:0 stream_end:0");
    }
    CHECK_INT(mb_procstream_total(mb_pstream_decoder(o.s), MB_PS_STDOUT), n);
    free(got.s);
    owner_free(&o);
  }
  close(sv[0]);
  close(sv[1]);
  close(devnull);
  close(p[1]);
  free(data);
  free(b.s);
}

/* Failures: an error answer keeps its status and body; a connection cut mid-stream and a
 * cancel close the stream with their errors; a body the decoder rejects fails the transfer. */
static void test_failures(void) {
  struct body b = {0};
  const char *gone = "{\"sandboxId\":\"x\",\"message\":\"The sandbox was not found\",\"code\":502}";
  body_add(&b, gone, strlen(gone));
  struct mb_pst_config c = {0};
  c.sink[0] = (struct mb_pst_sink){MB_PST_TAIL, 100, -1};
  struct owner o = {0};
  if (start(l, "?status=502", &b, &c, &o)) {
    run_until_closed(l, &o);
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_E_HTTP);
    CHECK_INT(mb_pstream_status(o.s), 502);
    size_t n;
    const char *eb = mb_pstream_error_body(o.s, &n);
    CHECK_MEM(eb, n, gone, strlen(gone));
    owner_free(&o);
  }
  free(b.s);

  char *data = pattern(100000);
  b = (struct body){0};
  wrapper_stream(&b, data, 100000, 16384);
  o = (struct owner){0};
  if (start(l, "?cut=50000", &b, &c, &o)) {
    run_until_closed(l, &o);
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code != MB_OK);
    CHECK_HAS(o.facts.s, "start:41 pgid:77 ");
    owner_free(&o);
  }
  o = (struct owner){0};
  if (start(l, "?chunk=1000&delay_ms=50", &b, &c, &o)) {
    for (int i = 0; i < 20; i++) uv_run(mb_loop_uv(l), UV_RUN_NOWAIT);
    mb_pstream_cancel(o.s);
    run_until_closed(l, &o);
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_E_CANCELED);
    owner_free(&o);
  }
  free(b.s);
  /* silence: the server sends the first chunk, then nothing for 10 s (libcurl judges speed over
   * a window of ~5 s, so silence is noticed within idle + 5 s) */
  b = (struct body){0};
  wrapper_stream(&b, data, 1000, 1000);
  o = (struct owner){0};
  idle_ms = 1000;
  if (start(l, "?chunk=300&delay_ms=10000", &b, &c, &o)) {
    run_until_closed(l, &o);
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_E_TIMEOUT);
    owner_free(&o);
  }
  idle_ms = 0;
  free(b.s);
  b = (struct body){0};
  body_envelope(&b, 0, "{nope");
  o = (struct owner){0};
  if (start(l, "", &b, &c, &o)) {
    run_until_closed(l, &o);
    const struct mb_error *e;
    CHECK(mb_pstream_closed(o.s, &e) && e->code == MB_E_PROTOCOL);
    CHECK_HAS(e->message, "invalid JSON");
    owner_free(&o);
  }
  free(b.s);
  free(data);
  /* bad configurations */
  struct mb_pst_config bad = {0};
  bad.sink[0].kind = 9;
  mb_http_opts h = {0};
  h.url = base;
  h.body_fd = -1;
  struct mb_pstream *s;
  struct mb_error err;
  CHECK_INT(mb_pstream_start(l, &h, &bad, on_change, &o, &s, &err), MB_E_INVALID);
  CHECK(s == NULL);
  bad.sink[0] = (struct mb_pst_sink){MB_PST_FD, 0, -1};
  bad.max_message = bad.max_line = 100;
  CHECK_INT(mb_pstream_start(l, &h, &bad, on_change, &o, &s, &err), MB_E_INVALID);
  CHECK_HAS(err.message, "descriptor -1");
}

/* Raw mode: a terminal's bytes in a pipe, no frames. */
static void test_raw(void) {
  struct body b = {0};
  body_envelope(&b, 0, "{\"event\":{\"start\":{\"pid\":300}}}");
  body_data(&b, "pty", "$ ls\r\n", 6);
  body_data(&b, "pty", "a b\r\n", 5);
  body_envelope(&b, 0, "{\"event\":{\"end\":{\"exitCode\":0,\"exited\":true,\"status\":\"exit status 0\"}}}");
  body_envelope(&b, MB_ENVELOPE_END_STREAM, "{}");
  struct mb_pst_config c = {0};
  c.raw = 1;
  c.sink[0] = (struct mb_pst_sink){MB_PST_PIPE, 0, -1};
  struct owner o = {0};
  o.read_pipe = 1;
  if (start(l, "?chunk=5", &b, &c, &o)) {
    mb_pstream_want(o.s, MB_PS_STDOUT);
    run_until_closed(l, &o);
    drain(&o);
    CHECK_MEM(o.out.s, o.out.n, "$ ls\r\na b\r\n", 11);
    CHECK_STR(o.facts.s, "start:300 end:0 stream_end:0 ");
    CHECK(mb_pstream_eof(o.s, MB_PS_STDOUT));
    owner_free(&o);
  }
  free(b.s);
}

int main(void) {
  signal(SIGPIPE, SIG_DFL); /* an EPIPE must never turn into a signal */
  int port = mbt_start_server(&server_pid);
  if (!port) {
    fprintf(stderr, "cannot start spec/support/server.py\n");
    return 1;
  }
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
  if (mb_loop_new(NULL, &l) != MB_OK) return 1;
  MBT_RUN(test_collect_wakes_few);
  MBT_RUN(test_pipe_backpressure);
  MBT_RUN(test_fd_pipe);
  MBT_RUN(test_fd_kinds);
  MBT_RUN(test_failures);
  MBT_RUN(test_raw);
  mb_loop_free(l);
  kill(server_pid, SIGTERM);
  waitpid(server_pid, NULL, 0);
  return mbt_report();
}
