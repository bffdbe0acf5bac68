/* registry.c — sandbox table, ids, tokens, lease expiry, pause state (see registry.h). */
#include "registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>
#include <time.h>

struct reg_entry {
  reg_entry *next;
  char id[32], token[40];
  bool secure, internet, auto_pause, paused, dying;
  int64_t started_ms, end_ms;
  uint64_t seq;
  json_t *metadata;
  sbx_t *sbx;
  int refs;                       /* the table holds one while linked */
  int kill_fd;                    /* eventfd: readable once dying, wakes long handlers at once */
  pthread_mutex_t life;           /* serialises pause/resume/kill of this sandbox */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;   /* table or lease changed */
static pthread_cond_t released = PTHREAD_COND_INITIALIZER;  /* a ref of a dying entry dropped */
static reg_entry *head;
static uint64_t next_seq = 1;
static char *g_state_dir;
static pthread_t expiry_thread;
static bool expiry_running, stopping;

int64_t reg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* n random characters from [a-z0-9]; rejection sampling keeps them uniform. */
static int random_alnum(char *out, size_t n) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  size_t i = 0;
  while (i < n) {
    unsigned char buf[64];
    ssize_t got = getrandom(buf, sizeof buf, 0);
    if (got < 0) { if (errno == EINTR) continue; return -1; }
    for (ssize_t k = 0; k < got && i < n; k++)
      if (buf[k] < 252) out[i++] = alphabet[buf[k] % 36];
  }
  out[n] = '\0';
  return 0;
}

static reg_entry *find_locked(const char *id) {
  for (reg_entry *e = head; e; e = e->next)
    if (strcmp(e->id, id) == 0) return e;
  return NULL;
}

static void info_locked(reg_entry *e, reg_info *in) {
  memset(in, 0, sizeof *in);
  snprintf(in->id, sizeof in->id, "%s", e->id);
  snprintf(in->token, sizeof in->token, "%s", e->secure ? e->token : "");
  in->secure = e->secure; in->internet = e->internet; in->auto_pause = e->auto_pause;
  in->paused = e->paused; in->started_ms = e->started_ms; in->end_ms = e->end_ms; in->seq = e->seq;
  in->metadata = json_incref(e->metadata);
}

void reg_info_of(reg_entry *e, reg_info *info) {
  pthread_mutex_lock(&mu);
  info_locked(e, info);
  pthread_mutex_unlock(&mu);
}

int reg_create(const reg_create_opts *o, reg_info *info, char *err, size_t errlen) {
  reg_entry *e = calloc(1, sizeof *e);
  if (!e) { snprintf(err, errlen, "out of memory"); return -1; }
  e->id[0] = 'i';
  if (random_alnum(e->id + 1, 20) || random_alnum(e->token, 32)) {
    snprintf(err, errlen, "getrandom: %s", strerror(errno));
    free(e);
    return -1;
  }
  e->kill_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (e->kill_fd < 0) { snprintf(err, errlen, "eventfd: %s", strerror(errno)); free(e); return -1; }
  e->secure = o->secure; e->internet = o->internet; e->auto_pause = o->auto_pause;
  e->metadata = o->metadata ? json_deep_copy(o->metadata) : json_object();
  pthread_mutex_init(&e->life, NULL);
  sbx_config cfg = { .id = e->id, .state_dir = g_state_dir, .internet = o->internet, .envs = o->envs };
  if (sbx_create(&cfg, &e->sbx, err, errlen) != 0) {
    close(e->kill_fd);
    json_decref(e->metadata);
    pthread_mutex_destroy(&e->life);
    free(e);
    return -1;
  }
  e->refs = 1;
  pthread_mutex_lock(&mu);
  e->started_ms = reg_now_ms();
  e->end_ms = e->started_ms + o->timeout_s * 1000;
  e->seq = next_seq++;
  e->next = head;
  head = e;
  info_locked(e, info);
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&mu);
  return 0;
}

reg_entry *reg_get(const char *id) {
  pthread_mutex_lock(&mu);
  reg_entry *e = find_locked(id);
  if (e) e->refs++;
  pthread_mutex_unlock(&mu);
  return e;
}

void reg_put(reg_entry *e) {
  if (!e) return;
  pthread_mutex_lock(&mu);
  e->refs--;
  if (e->dying) pthread_cond_broadcast(&released);
  pthread_mutex_unlock(&mu);
}

reg_entry *reg_find_by_token(bool (*match)(const char *token, void *cls), void *cls) {
  pthread_mutex_lock(&mu);
  reg_entry *e = head;
  for (; e; e = e->next)
    if (e->secure && match(e->token, cls)) { e->refs++; break; }
  pthread_mutex_unlock(&mu);
  return e;
}

/* Called with the entry unlinked and one ref owned by the caller. */
static void destroy_entry(reg_entry *e) {
  pthread_mutex_lock(&e->life);
  if (e->paused) sbx_resume(e->sbx);   /* frozen processes cannot die */
  process_kill_all(e->sbx);
  pthread_mutex_unlock(&e->life);
  pthread_mutex_lock(&mu);
  while (e->refs > 1) pthread_cond_wait(&released, &mu);
  pthread_mutex_unlock(&mu);
  sbx_destroy(e->sbx);
  close(e->kill_fd);
  json_decref(e->metadata);
  pthread_mutex_destroy(&e->life);
  free(e);
}

int reg_kill(const char *id) {
  pthread_mutex_lock(&mu);
  reg_entry **pp = &head;
  while (*pp && strcmp((*pp)->id, id) != 0) pp = &(*pp)->next;
  reg_entry *e = *pp;
  if (!e) { pthread_mutex_unlock(&mu); return -1; }
  *pp = e->next;
  e->dying = true;                     /* the table's ref now belongs to us */
  uint64_t one = 1;
  if (write(e->kill_fd, &one, sizeof one) != (ssize_t)sizeof one) { /* cannot fail on a fresh eventfd */ }
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&mu);
  destroy_entry(e);
  return 0;
}

int reg_set_timeout(const char *id, int64_t timeout_s) {
  pthread_mutex_lock(&mu);
  reg_entry *e = find_locked(id);
  if (e) { e->end_ms = reg_now_ms() + timeout_s * 1000; pthread_cond_broadcast(&changed); }
  pthread_mutex_unlock(&mu);
  return e ? 0 : -1;
}

int reg_connect(const char *id, int64_t timeout_s, bool *resumed, reg_info *info) {
  *resumed = false;
  reg_entry *e = reg_get(id);
  if (!e) return -1;
  int rc = 0;
  pthread_mutex_lock(&e->life);
  bool was_paused;
  pthread_mutex_lock(&mu);
  was_paused = e->paused;
  pthread_mutex_unlock(&mu);
  if (was_paused && sbx_resume(e->sbx) != 0) rc = -2;
  pthread_mutex_lock(&mu);
  if (rc == 0) {
    int64_t want = reg_now_ms() + timeout_s * 1000;
    if (was_paused) { e->paused = false; *resumed = true; e->end_ms = want; }
    else if (want > e->end_ms) e->end_ms = want;    /* connect never shortens a lease */
    pthread_cond_broadcast(&changed);
  }
  info_locked(e, info);
  pthread_mutex_unlock(&mu);
  pthread_mutex_unlock(&e->life);
  reg_put(e);
  return rc;
}

int reg_pause(const char *id) {
  reg_entry *e = reg_get(id);
  if (!e) return -1;
  int rc = 0;
  pthread_mutex_lock(&e->life);
  pthread_mutex_lock(&mu);
  bool already = e->paused;
  pthread_mutex_unlock(&mu);
  if (already) rc = -2;
  else if (sbx_pause(e->sbx) != 0) rc = -3;
  else {
    pthread_mutex_lock(&mu);
    e->paused = true;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&mu);
  }
  pthread_mutex_unlock(&e->life);
  reg_put(e);
  return rc;
}

reg_info *reg_list(size_t *n) {
  pthread_mutex_lock(&mu);
  size_t count = 0;
  for (reg_entry *e = head; e; e = e->next) count++;
  reg_info *v = calloc(count ? count : 1, sizeof *v);
  size_t i = 0;
  if (v)
    for (reg_entry *e = head; e; e = e->next) info_locked(e, &v[i++]);   /* head is newest */
  pthread_mutex_unlock(&mu);
  *n = v ? count : 0;
  return v;
}

void reg_list_free(reg_info *v, size_t n) {
  for (size_t i = 0; i < n; i++) json_decref(v[i].metadata);
  free(v);
}

sbx_t *reg_sbx(reg_entry *e) { return e->sbx; }
const char *reg_id(const reg_entry *e) { return e->id; }
const char *reg_token(const reg_entry *e) { return e->secure ? e->token : NULL; }
bool reg_paused(reg_entry *e) {
  pthread_mutex_lock(&mu);
  bool p = e->paused;
  pthread_mutex_unlock(&mu);
  return p;
}
int reg_kill_fd(reg_entry *e) { return e->kill_fd; }
bool reg_dying(reg_entry *e) {
  pthread_mutex_lock(&mu);
  bool d = e->dying;
  pthread_mutex_unlock(&mu);
  return d;
}

/* Expiry: wake at the earliest lease end; kill (or pause, with autoPause) what has expired. */
static void *expiry_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!stopping) {
    int64_t now = reg_now_ms(), next = INT64_MAX;
    char id[32] = "";
    bool pause = false;
    for (reg_entry *e = head; e; e = e->next) {
      if (e->paused) continue;
      if (e->end_ms <= now) { snprintf(id, sizeof id, "%s", e->id); pause = e->auto_pause; break; }
      if (e->end_ms < next) next = e->end_ms;
    }
    if (id[0]) {
      pthread_mutex_unlock(&mu);
      if (!pause || reg_pause(id) == -3) reg_kill(id);   /* a sandbox that cannot freeze is killed */
      pthread_mutex_lock(&mu);
      continue;
    }
    if (next == INT64_MAX) { pthread_cond_wait(&changed, &mu); continue; }
    struct timespec ts = { .tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000 };
    pthread_cond_timedwait(&changed, &mu, &ts);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

int reg_init(const char *state_dir) {
  g_state_dir = strdup(state_dir);
  if (!g_state_dir) return -1;
  if (pthread_create(&expiry_thread, NULL, expiry_main, NULL) != 0) return -1;
  expiry_running = true;
  return 0;
}

void reg_shutdown(void) {
  pthread_mutex_lock(&mu);
  stopping = true;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&mu);
  if (expiry_running) { pthread_join(expiry_thread, NULL); expiry_running = false; }
  for (;;) {
    char id[32];
    pthread_mutex_lock(&mu);
    if (!head) { pthread_mutex_unlock(&mu); break; }
    snprintf(id, sizeof id, "%s", head->id);
    pthread_mutex_unlock(&mu);
    reg_kill(id);
  }
  free(g_state_dir);
  g_state_dir = NULL;
}
