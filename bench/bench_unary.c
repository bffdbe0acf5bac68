/* bench_unary — unary HTTP request latency through moonbox's Lua API, as a ratio to a bare
 * libcurl easy loop, against the same local server in the same run (goal: ratio <= 1.3).
 *
 * Starts spec/support/server.py, then alternates rounds: N requests with one reused curl easy
 * handle (keep-alive), and `moonbox bench/bench_unary.lua URL N` (which times its own loop of
 * mb.http.request calls). Adjacent rounds see the same machine load, so the reported ratio is
 * the median of the per-round ratios; the median latencies are printed too.
 * Environment: MB_SOURCE_DIR (default: two levels above this binary), BENCH_N (default 1000). */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
#define ROUNDS 9

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static size_t sink(char *p, size_t s, size_t n, void *ud) { (void)p; (void)ud; return s * n; }

static double bare_curl(const char *url, int n) {
  CURL *e = curl_easy_init();
  if (!e) return -1;
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  for (int i = 0; i < 50; i++) curl_easy_perform(e);
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    CURLcode rc = curl_easy_perform(e);
    long st = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
    if (rc != CURLE_OK || st != 200) { fprintf(stderr, "bare curl: %s (%ld)\n", curl_easy_strerror(rc), st); curl_easy_cleanup(e); return -1; }
  }
  double us = (now_us() - t0) / n;
  curl_easy_cleanup(e);
  return us;
}

/* Runs argv with stdout to a pipe; returns the pid, *fd the read end. */
static pid_t spawn_piped(char *const argv[], int *fd) {
  int p[2];
  if (pipe(p) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) { close(p[0]); errno = rc; return -1; }
  *fd = p[0];
  return pid;
}

static int read_line(int fd, char *buf, size_t cap) {
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = read(fd, buf + n, 1);
    if (r <= 0) break;
    if (buf[n] == '\n') break;
    n++;
  }
  buf[n] = '\0';
  return n > 0 ? 0 : -1;
}

static double lua_round(const char *moonbox, const char *script, const char *url, int n) {
  char ns[32];
  snprintf(ns, sizeof ns, "%d", n);
  char *argv[] = {(char *)moonbox, (char *)script, (char *)url, ns, NULL};
  int fd;
  pid_t pid = spawn_piped(argv, &fd);
  if (pid < 0) { perror("moonbox"); return -1; }
  char line[256];
  double us = -1;
  if (read_line(fd, line, sizeof line) == 0) sscanf(line, "lua_us_per_req %lf", &us);
  close(fd);
  int st;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
  return us;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(void) {
  char self[PATH_MAX], src[PATH_MAX + 16], bin[PATH_MAX + 16];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len < 0) { perror("/proc/self/exe"); return 1; }
  self[len] = '\0';
  *strrchr(self, '/') = '\0';                           /* build/bench */
  snprintf(bin, sizeof bin, "%s/../bin/moonbox", self);
  const char *env_src = getenv("MB_SOURCE_DIR");
  if (env_src) snprintf(src, sizeof src, "%s", env_src);
  else snprintf(src, sizeof src, "%s/../..", self);
  int n = getenv("BENCH_N") ? atoi(getenv("BENCH_N")) : 1000;
  if (n < 1) n = 1000;

  char server[PATH_MAX + 64], script[PATH_MAX + 64];
  snprintf(server, sizeof server, "%s/spec/support/server.py", src);
  snprintf(script, sizeof script, "%s/bench/bench_unary.lua", src);
  char *sargv[] = {"python3", server, NULL};
  int sfd;
  pid_t spid = spawn_piped(sargv, &sfd);
  char line[256];
  int port = 0;
  if (spid < 0 || read_line(sfd, line, sizeof line) != 0 || sscanf(line, "listening %d", &port) != 1) {
    fprintf(stderr, "bench_unary: cannot start %s\n", server);
    if (spid > 0) kill(spid, SIGKILL);
    return 1;
  }
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/ping", port);
  curl_global_init(CURL_GLOBAL_DEFAULT);

  double c[ROUNDS], l[ROUNDS];
  int ok = 1;
  for (int r = 0; r < ROUNDS && ok; r++) {
    c[r] = bare_curl(url, n);
    l[r] = lua_round(bin, script, url, n);
    if (c[r] <= 0 || l[r] <= 0) ok = 0;
  }
  kill(spid, SIGKILL);
  waitpid(spid, NULL, 0);
  curl_global_cleanup();
  if (!ok) { fprintf(stderr, "bench_unary: a round failed (is %s built?)\n", bin); return 1; }
  double ratio[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) ratio[r] = l[r] / c[r];
  qsort(c, ROUNDS, sizeof *c, cmp);
  qsort(l, ROUNDS, sizeof *l, cmp);
  qsort(ratio, ROUNDS, sizeof *ratio, cmp);
  printf("bench_unary: %d sequential GETs x %d alternating rounds, local python server\n", n, ROUNDS);
  printf("  bare libcurl easy loop   %8.1f us/request (median)\n", c[ROUNDS / 2]);
  printf("  moonbox mb.http.request  %8.1f us/request (median)\n", l[ROUNDS / 2]);
  printf("  ratio %.2fx (median of per-round ratios, range %.2f-%.2f; goal <= 1.30x)\n",
         ratio[ROUNDS / 2], ratio[0], ratio[ROUNDS - 1]);
  return 0;
}
