/* registry.c — sandbox table, ids, tokens, lease expiry, pause state (see registry.h). */
#include "registry.h"

#include "clocks.h"
#include "ids.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <time.h>

struct reg_entry {
  reg_entry *next;
  char id[32], token[40];
  char traffic[REG_TRAFFIC_TOKEN_LEN + 1];   /* "" when its ports are public; never changes */
  char template_id[REG_TEMPLATE_MAX], template_alias[REG_TEMPLATE_MAX];
  bool secure, internet, auto_pause, auto_resume, paused, dying;
  int64_t resume_timeout_s;       /* the lease an auto-resume gives */
  bool expiring;                  /* the expiry thread handed it to a reaper thread */
  int watch_streams;              /* open WatchDir streams */
  int64_t started_ms, end_ms;
  uint64_t seq;
  json_t *metadata;
  json_t *volume_mounts;          /* [{name, path}] */
  json_t *network;                /* `network` as reported, or NULL */
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
static reg_backend g_be;
static reg_hooks g_hooks;
static pthread_t expiry_thread;
static bool expiry_running, stopping;
static int reapers;                                          /* expiry kill/pause threads running */
static pthread_cond_t reaped = PTHREAD_COND_INITIALIZER;    /* a reaper finished or an entry unlinked */

/* Dying entries stay linked until sbx_destroy returned (so GET, list and /health report them
 * until nothing is left), but nothing new may use them. */
static reg_entry *find_any_locked(const char *id) {
  for (reg_entry *e = head; e; e = e->next)
    if (strcmp(e->id, id) == 0) return e;
  return NULL;
}

static reg_entry *find_locked(const char *id) {
  reg_entry *e = find_any_locked(id);
  return e && !e->dying ? e : NULL;
}

static void info_locked(reg_entry *e, reg_info *in);

bool reg_exists(const char *id) {
  pthread_mutex_lock(&mu);
  reg_entry *e = find_any_locked(id);
  bool live = e && !e->paused;
  pthread_mutex_unlock(&mu);
  return live;
}

int reg_lookup_info(const char *id, reg_info *info) {
  pthread_mutex_lock(&mu);
  reg_entry *e = find_any_locked(id);
  if (e) info_locked(e, info);
  pthread_mutex_unlock(&mu);
  return e ? 0 : -1;
}

static void info_locked(reg_entry *e, reg_info *in) {
  memset(in, 0, sizeof *in);
  snprintf(in->id, sizeof in->id, "%s", e->id);
  snprintf(in->token, sizeof in->token, "%s", e->secure ? e->token : "");
  snprintf(in->traffic_token, sizeof in->traffic_token, "%s", e->traffic);
  memcpy(in->template_id, e->template_id, sizeof in->template_id);
  memcpy(in->template_alias, e->template_alias, sizeof in->template_alias);
  in->secure = e->secure; in->internet = e->internet; in->auto_pause = e->auto_pause; in->auto_resume = e->auto_resume;
  in->paused = e->paused; in->dying = e->dying; in->started_ms = e->started_ms; in->end_ms = e->end_ms; in->seq = e->seq;
  in->metadata = json_incref(e->metadata);
  in->network = json_incref(e->network);
}

void reg_info_free(reg_info *in) {
  json_decref(in->metadata);
  json_decref(in->network);
  in->metadata = in->network = NULL;
}

int reg_set_network(const char *id, bool internet, json_t *network) {
  json_t *copy = network ? json_deep_copy(network) : NULL, *old = NULL;
  pthread_mutex_lock(&mu);
  reg_entry *e = find_any_locked(id);
  if (e) {
    old = e->network;
    e->network = copy;
    e->internet = internet;
  }
  pthread_mutex_unlock(&mu);
  json_decref(e ? old : copy);
  return e ? 0 : -1;
}

json_t *reg_network(reg_entry *e) {
  pthread_mutex_lock(&mu);
  json_t *n = json_incref(e->network);
  pthread_mutex_unlock(&mu);
  return n;
}

json_t *reg_volume_mounts(const char *id) {
  pthread_mutex_lock(&mu);
  reg_entry *e = find_any_locked(id);
  json_t *v = e ? json_incref(e->volume_mounts) : json_array();   /* never changed after create */
  pthread_mutex_unlock(&mu);
  return v;
}

int reg_new_id(char *out, size_t cap) {
  if (cap < 22) { errno = ENAMETOOLONG; return -1; }
  out[0] = 'i';
  return ids_random(out + 1, 20);
}

/* What an entry holds of its own, and the entry: after a failed create, and once it is gone. */
static void entry_free(reg_entry *e) {
  close(e->kill_fd);
  json_decref(e->metadata);
  json_decref(e->volume_mounts);
  json_decref(e->network);
  pthread_mutex_destroy(&e->life);
  free(e);
}

int reg_create(const reg_create_opts *o, reg_info *info, char *err, size_t errlen) {
  reg_entry *e = calloc(1, sizeof *e);
  if (!e) { snprintf(err, errlen, "out of memory"); return -1; }
  if (reg_new_id(e->id, sizeof e->id) || ids_random(e->token, 32) || (o->traffic_token && ids_random(e->traffic, REG_TRAFFIC_TOKEN_LEN))) {
    snprintf(err, errlen, "getrandom: %s", strerror(errno));
    free(e);
    return -1;
  }
  e->kill_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (e->kill_fd < 0) { snprintf(err, errlen, "eventfd: %s", strerror(errno)); free(e); return -1; }
  e->secure = o->secure; e->internet = o->internet; e->auto_pause = o->auto_pause;
  e->auto_resume = o->auto_resume;
  e->resume_timeout_s = o->timeout_s;
  snprintf(e->template_id, sizeof e->template_id, "%s", o->template_id ? o->template_id : "base");
  snprintf(e->template_alias, sizeof e->template_alias, "%s", o->template_alias ? o->template_alias : e->template_id);
  e->metadata = o->metadata ? json_deep_copy(o->metadata) : json_object();
  e->volume_mounts = o->volume_mounts ? json_deep_copy(o->volume_mounts) : json_array();
  e->network = o->network ? json_deep_copy(o->network) : NULL;
  pthread_mutex_init(&e->life, NULL);
  if (g_be.create(e->id, sizeof e->id, o, &e->sbx, err, errlen) != 0) {
    entry_free(e);
    return -1;
  }
  e->refs = 1;
  pthread_mutex_lock(&mu);
  e->started_ms = wall_ms();
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
    if (e->secure && !e->dying && match(e->token, cls)) { e->refs++; break; }
  pthread_mutex_unlock(&mu);
  return e;
}

/* Called with the entry marked dying (still linked) and the table's ref owned by the caller. */
static void destroy_entry(reg_entry *e, void (*last)(sbx_t *s, void *cls), void *cls) {
  if (g_hooks.dying) g_hooks.dying(e); /* streams to clients that stopped reading end now */
  pthread_mutex_lock(&e->life);
  if (e->paused) g_be.resume(e->sbx);  /* frozen processes cannot die */
  g_be.stop(e->sbx);
  pthread_mutex_unlock(&e->life);
  pthread_mutex_lock(&mu);
  while (e->refs > 1) {
    pthread_mutex_unlock(&mu);
    if (g_hooks.dying) g_hooks.dying(e);   /* a stream a handler opened after the first abort */
    pthread_mutex_lock(&mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    if (e->refs > 1) pthread_cond_timedwait(&released, &mu, &ts);
  }
  pthread_mutex_unlock(&mu);
  if (last) last(e->sbx, cls);
  g_be.destroy(e->sbx);
  pthread_mutex_lock(&mu);             /* gone from the table only now that nothing is left */
  reg_entry **pp = &head;
  while (*pp && *pp != e) pp = &(*pp)->next;
  if (*pp) *pp = e->next;
  pthread_cond_broadcast(&changed);
  pthread_cond_broadcast(&reaped);
  pthread_mutex_unlock(&mu);
  if (g_hooks.gone) g_hooks.gone(e);   /* clients now see their streams end */
  entry_free(e);
}

/* Marks e dying and wakes its long handlers; mu held. */
static void start_dying_locked(reg_entry *e) {
  e->dying = true;                     /* the table's ref now belongs to the killer */
  uint64_t one = 1;
  if (write(e->kill_fd, &one, sizeof one) != (ssize_t)sizeof one) { /* cannot fail on a fresh eventfd */ }
  pthread_cond_broadcast(&changed);
}

int reg_kill_with(const char *id, void (*fn)(sbx_t *s, void *cls), void *cls) {
  pthread_mutex_lock(&mu);
  reg_entry *e = find_any_locked(id);
  if (!e) { pthread_mutex_unlock(&mu); return -1; }
  if (e->dying) {                      /* another kill is under way: answer once it is done */
    while (find_any_locked(id) == e) pthread_cond_wait(&reaped, &mu);
    pthread_mutex_unlock(&mu);
    return fn ? -1 : 0;
  }
  start_dying_locked(e);
  pthread_mutex_unlock(&mu);
  destroy_entry(e, fn, cls);
  return 0;
}

int reg_kill(const char *id) { return reg_kill_with(id, NULL, NULL); }

int reg_set_timeout(const char *id, int64_t timeout_s) {
  pthread_mutex_lock(&mu);
  reg_entry *e = find_locked(id);
  if (e) { e->end_ms = wall_ms() + timeout_s * 1000; pthread_cond_broadcast(&changed); }
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
  if (was_paused && g_be.resume(e->sbx) != 0) rc = -2;
  pthread_mutex_lock(&mu);
  if (rc == 0) {
    int64_t want = wall_ms() + timeout_s * 1000;
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
  else if (g_be.pause(e->sbx) != 0) rc = -3;
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

int reg_wake(reg_entry *e) {
  pthread_mutex_lock(&mu);
  bool paused = e->paused, can = e->auto_resume && !e->dying;
  pthread_mutex_unlock(&mu);
  if (!paused) return 0;
  if (!can) return -1;
  int rc = 0;
  pthread_mutex_lock(&e->life);
  pthread_mutex_lock(&mu);
  paused = e->paused;   /* another request may have woken it meanwhile */
  pthread_mutex_unlock(&mu);
  if (paused) {
    if (g_be.resume(e->sbx) != 0) rc = -1;
    else {
      pthread_mutex_lock(&mu);
      e->paused = false;
      e->end_ms = wall_ms() + e->resume_timeout_s * 1000;
      pthread_cond_broadcast(&changed);
      pthread_mutex_unlock(&mu);
    }
  }
  pthread_mutex_unlock(&e->life);
  return rc;
}

int reg_with_running(const char *id, int (*fn)(sbx_t *s, const reg_info *info, void *cls), void *cls) {
  reg_entry *e = reg_get(id);
  if (!e) return -1;
  pthread_mutex_lock(&e->life);
  reg_info in;
  pthread_mutex_lock(&mu);
  bool paused = e->paused, dying = e->dying;
  info_locked(e, &in);
  pthread_mutex_unlock(&mu);
  int rc = dying ? -1 : paused ? -2 : fn(e->sbx, &in, cls);
  reg_info_free(&in);
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
  for (size_t i = 0; i < n; i++) reg_info_free(&v[i]);
  free(v);
}

sbx_t *reg_sbx(reg_entry *e) { return e->sbx; }
const char *reg_id(const reg_entry *e) { return e->id; }
const char *reg_token(const reg_entry *e) { return e->secure ? e->token : NULL; }
const char *reg_traffic_token(const reg_entry *e) { return e->traffic[0] ? e->traffic : NULL; }
bool reg_paused(reg_entry *e) {
  pthread_mutex_lock(&mu);
  bool p = e->paused;
  pthread_mutex_unlock(&mu);
  return p;
}
int reg_kill_fd(reg_entry *e) { return e->kill_fd; }
int reg_watch_slot(reg_entry *e, int delta, int max) {
  pthread_mutex_lock(&mu);
  int rc = 0;
  if (delta > 0 && e->watch_streams >= max) rc = -1;
  else e->watch_streams += delta;
  pthread_mutex_unlock(&mu);
  return rc;
}
bool reg_dying(reg_entry *e) {
  pthread_mutex_lock(&mu);
  bool d = e->dying;
  pthread_mutex_unlock(&mu);
  return d;
}

/* A reaper thread: pause (autoPause) or kill one expired sandbox, off the expiry thread, so a
 * slow destroy never delays the other leases. */
typedef struct { char id[32]; bool pause; } reap_job;

static void *reaper_main(void *arg) {
  reap_job *j = arg;
  if (!j->pause || reg_pause(j->id) == -3) reg_kill(j->id);   /* a sandbox that cannot freeze is killed */
  pthread_mutex_lock(&mu);
  reg_entry *e = find_any_locked(j->id);
  if (e) e->expiring = false;
  reapers--;
  pthread_cond_broadcast(&reaped);
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&mu);
  free(j);
  return NULL;
}

/* Expiry: wake at the earliest lease end; hand what has expired to a reaper thread. */
static void *expiry_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!stopping) {
    int64_t now = wall_ms(), next = INT64_MAX;
    reg_entry *due = NULL;
    for (reg_entry *e = head; e; e = e->next) {
      if (e->paused || e->dying || e->expiring) continue;
      if (e->end_ms <= now) { due = e; break; }
      if (e->end_ms < next) next = e->end_ms;
    }
    if (due) {
      reap_job *j = calloc(1, sizeof *j);
      pthread_t t;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (j) {
        snprintf(j->id, sizeof j->id, "%s", due->id);
        j->pause = due->auto_pause;
        due->expiring = true;
        reapers++;
        if (pthread_create(&t, &attr, reaper_main, j) != 0) { reapers--; due->expiring = false; free(j); j = NULL; }
      }
      pthread_attr_destroy(&attr);
      if (!j) {                        /* no memory or thread: retry in a second */
        struct timespec ts = { .tv_sec = now / 1000 + 1, .tv_nsec = 0 };
        pthread_cond_timedwait(&changed, &mu, &ts);
      }
      continue;
    }
    if (next == INT64_MAX) { pthread_cond_wait(&changed, &mu); continue; }
    struct timespec ts = { .tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000 };
    pthread_cond_timedwait(&changed, &mu, &ts);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

bool reg_valid_id(const char *id) { return ids_alnum(id, 64); }

int reg_init(const reg_backend *backend, const reg_hooks *hooks) {
  g_be = *backend;
  if (hooks) g_hooks = *hooks;
  stopping = false;
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
    char id[32] = "";
    pthread_mutex_lock(&mu);
    for (reg_entry *e = head; e; e = e->next)
      if (!e->dying) { snprintf(id, sizeof id, "%s", e->id); break; }
    if (!id[0]) {
      bool done = !head && reapers == 0;
      if (!done) pthread_cond_wait(&reaped, &mu);   /* kills under way elsewhere, or a reaper's pause */
      pthread_mutex_unlock(&mu);
      if (done) break;
      continue;
    }
    pthread_mutex_unlock(&mu);
    reg_kill(id);
  }
}
