/* pool.c — the warm pool (pool.h).
 * Spares: sandboxes booted ahead of need with the default shape (no envVars, default limits),
 * POOL_WARM_DEFAULT per internet flag. A spare has never run a command and has no process table;
 * sandbox.c renames a claimed one (layer directory, cgroups) to the requested id, sets its host
 * name and limits, and gives it the requested envVars, so nothing distinguishes it from a fresh
 * one but the start time of its init. One thread refills the pool; pool_stop (also at exit and in
 * sbx_cleanup_stale) ends it and discards every spare. */
#include "pool.h"
#include "clocks.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A refill boots a sandbox (several ms of CPU and file system work): not while the client that
 * just claimed a spare is starting its first commands, which it would slow down, nor in the
 * moments after a short-lived sandbox ends (a caller tearing down right after). */
#define POOL_REFILL_DELAY_MS 1000
/* A pair costs far less (a link, a waiting process, a directory): sooner, so that a burst of
 * creates finds the next one ready. */
#define POOL_PAIR_REFILL_DELAY_MS 100
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool running, stopping, claimed;
  pool_ops ops;
  int want;                    /* spares per internet flag (SANDBOXD_WARM_POOL) */
  int want_pairs;              /* stocked network pairs (SANDBOXD_NET_POOL) */
  char state_dir[3001];
  void *spare[2][POOL_MAX];    /* [internet] */
  int n[2];
  /* Network pairs, linked (opaque here: sandbox.c's, with a layer directory), for sandboxes
   * that find no spare: a link (a veth, or pasta's ~30 ms) is much of what they would wait for. */
  void *pair[POOL_MAX];
  int npairs;
  bool pair_taken;
  pthread_t th;
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static bool trace_on(void) { return getenv("SANDBOXD_TRACE_CREATE") != NULL; }

/* Wait on the pool's condition until ms have passed or the pool stops; g_pool.mu held. */
static void pool_sleep(unsigned ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
  while (!g_pool.stopping && pthread_cond_timedwait(&g_pool.cv, &g_pool.mu, &until) == 0) {}
}

static void *pool_main(void *arg) {
  (void)arg;
  unsigned backoff_ms = 0;
  /* Without pasta (the start-up report says why) nothing with internet access is kept. */
  bool net_ok = net_available(NULL, 0);
  int want_net = net_ok ? g_pool.want : 0, want_pairs = net_ok ? g_pool.want_pairs : 0;
  /* Where every sandbox is linked (net_wants_link), a spare without a link is never claimed. */
  int want_plain = net_wants_link(false) ? 0 : g_pool.want;
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (!g_pool.stopping && g_pool.n[0] >= want_plain && g_pool.n[1] >= want_net && g_pool.npairs >= want_pairs)
      pthread_cond_wait(&g_pool.cv, &g_pool.mu);
    if (g_pool.claimed) {
      g_pool.claimed = false;
      g_pool.pair_taken = false;
      pool_sleep(POOL_REFILL_DELAY_MS);
    } else if (g_pool.pair_taken) {
      g_pool.pair_taken = false;
      pool_sleep(POOL_PAIR_REFILL_DELAY_MS);
    }
    if (g_pool.stopping) break;
    if (g_pool.npairs < want_pairs) {
      pthread_mutex_unlock(&g_pool.mu);
      char err[512];
      struct timespec t0;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      void *np = g_pool.ops.new_pair(g_pool.state_dir, err, sizeof err);
      if (!np) fprintf(stderr, "sandboxd: warm pool: network: %s\n", err);
      else if (trace_on()) fprintf(stderr, "sandboxd: network pair ready in %.2f ms\n", ms_since(t0));
      pthread_mutex_lock(&g_pool.mu);
      if (np && !g_pool.stopping && g_pool.npairs < POOL_MAX) {
        g_pool.pair[g_pool.npairs++] = np;
        np = NULL;
        backoff_ms = 0;
      }
      if (np) { pthread_mutex_unlock(&g_pool.mu); g_pool.ops.discard_pair(np); pthread_mutex_lock(&g_pool.mu); }
      else if (!g_pool.stopping && g_pool.npairs < want_pairs) {   /* it failed: do not spin */
        backoff_ms = backoff_ms ? (backoff_ms * 2 > 30000 ? 30000 : backoff_ms * 2) : 100;
        pool_sleep(backoff_ms);
      }
      continue;
    }
    /* internet access is the E2B default: fill it first */
    bool net = g_pool.n[1] < want_net && (g_pool.n[1] <= g_pool.n[0] || g_pool.n[0] >= want_plain);
    pthread_mutex_unlock(&g_pool.mu);
    char err[512];
    void *s = g_pool.ops.boot(g_pool.state_dir, net, err, sizeof err);
    if (!s) fprintf(stderr, "sandboxd: warm pool: %s\n", err);
    bool failed = !s;
    pthread_mutex_lock(&g_pool.mu);
    if (s && !g_pool.stopping && g_pool.n[net] < POOL_MAX) {
      g_pool.spare[net][g_pool.n[net]++] = s;
      s = NULL;
      backoff_ms = 0;
    }
    if (s) { pthread_mutex_unlock(&g_pool.mu); g_pool.ops.discard(s); pthread_mutex_lock(&g_pool.mu); }
    if (failed && !g_pool.stopping) {   /* do not spin on a host that cannot create sandboxes */
      backoff_ms = backoff_ms ? (backoff_ms * 2 > 30000 ? 30000 : backoff_ms * 2) : 100;
      pool_sleep(backoff_ms);
    }
  }
  pthread_mutex_unlock(&g_pool.mu);
  return NULL;
}

void pool_stop(void) {
  pthread_mutex_lock(&g_pool.mu);
  bool was = g_pool.running;
  g_pool.stopping = true;
  pthread_cond_broadcast(&g_pool.cv);
  pthread_mutex_unlock(&g_pool.mu);
  if (was) pthread_join(g_pool.th, NULL);
  pthread_mutex_lock(&g_pool.mu);
  g_pool.running = false;
  void *all[2 * POOL_MAX];
  void *pairs[POOL_MAX];
  int k = 0, np = g_pool.npairs;
  for (int f = 0; f < 2; f++) {
    for (int i = 0; i < g_pool.n[f]; i++) all[k++] = g_pool.spare[f][i];
    g_pool.n[f] = 0;
  }
  memcpy(pairs, g_pool.pair, sizeof pairs);
  g_pool.npairs = 0;
  void (*discard)(void *) = g_pool.ops.discard, (*discard_pair)(void *) = g_pool.ops.discard_pair;
  pthread_mutex_unlock(&g_pool.mu);
  for (int i = 0; i < k; i++) discard(all[i]);
  for (int i = 0; i < np; i++) discard_pair(pairs[i]);
}

static pid_t g_pool_owner;   /* a forked child that calls exit() must not touch our spares */
static void pool_atexit(void) { if (getpid() == g_pool_owner) pool_stop(); }

static int pool_size(const char *var, int dflt) {
  const char *e = getenv(var);
  if (!e || !*e) return dflt;
  char *end;
  long v = strtol(e, &end, 10);
  if (*end || v < 0) return dflt;
  return v > POOL_MAX ? POOL_MAX : (int)v;
}

void pool_start(const char *state_dir, const pool_ops *ops) {
  int want = ops->boot ? pool_size("SANDBOXD_WARM_POOL", POOL_WARM_DEFAULT) : 0;
  int want_pairs = pool_size("SANDBOXD_NET_POOL", POOL_NET_DEFAULT);
  if ((want == 0 && want_pairs == 0) || !state_dir || state_dir[0] != '/' || strlen(state_dir) > 3000) return;
  pthread_mutex_lock(&g_pool.mu);
  if (g_pool.running) { pthread_mutex_unlock(&g_pool.mu); return; }
  snprintf(g_pool.state_dir, sizeof g_pool.state_dir, "%s", state_dir);
  g_pool.ops = *ops;
  g_pool.want = want;
  g_pool.want_pairs = want_pairs;
  g_pool.stopping = false;
  /* The pool thread must not take the signals main waits for (the init sets its own mask). */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  g_pool.running = pthread_create(&g_pool.th, NULL, pool_main, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  static bool registered;
  if (!registered) { registered = true; g_pool_owner = getpid(); atexit(pool_atexit); }
  pthread_mutex_unlock(&g_pool.mu);
}

void *pool_claim(const char *state_dir, bool internet) {
  pthread_mutex_lock(&g_pool.mu);
  void *s = NULL;
  int f = internet ? 1 : 0;
  if (g_pool.running && !g_pool.stopping && g_pool.n[f] > 0 && !strcmp(state_dir, g_pool.state_dir)) {
    s = g_pool.spare[f][--g_pool.n[f]];
    g_pool.claimed = true;
    pthread_cond_signal(&g_pool.cv);   /* refill (after POOL_REFILL_DELAY_MS) */
  }
  pthread_mutex_unlock(&g_pool.mu);
  return s;
}

void *pool_take_pair(const char *state_dir) {
  pthread_mutex_lock(&g_pool.mu);
  void *p = NULL;
  if (g_pool.running && !g_pool.stopping && g_pool.npairs > 0 && !strcmp(state_dir, g_pool.state_dir)) {
    p = g_pool.pair[--g_pool.npairs];
    g_pool.pair_taken = true;
    pthread_cond_signal(&g_pool.cv);
  }
  pthread_mutex_unlock(&g_pool.mu);
  return p;
}
