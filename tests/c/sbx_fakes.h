/* sbx_fakes.h — a registry backend and death hooks for sandboxd's unit tests: "sandboxes" that are
 * plain structs, and a log of what the registry asked of them, in order. No namespaces, no HTTP. */
#ifndef SBX_FAKES_H
#define SBX_FAKES_H
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "registry.h"

struct sbx {
  char id[32];
  bool stopped, paused;
};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char log[8192];                  /* "create:<id> dying:<id> stop:<id> ..." */
  int creates, stops, destroys, dyings, gones, pauses, resumes;
  bool fail_create, fail_pause;
  char spare_id[32];               /* the next create hands out a sandbox named this ("": the registry's id) */
  reg_create_opts last;
} fk = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Counts and logs under the lock (tests wait on the counters from other threads). */
static void fk_note(const char *what, const char *id, int *counter) {
  pthread_mutex_lock(&fk.mu);
  (*counter)++;
  size_t n = strlen(fk.log);
  snprintf(fk.log + n, sizeof fk.log - n, "%s%s:%s", n ? " " : "", what, id);
  pthread_cond_broadcast(&fk.cv);
  pthread_mutex_unlock(&fk.mu);
}

static int fk_create(char *id, size_t idcap, const reg_create_opts *o, sbx_t **out, char *err, size_t errlen) {
  if (fk.fail_create) { snprintf(err, errlen, "the fake backend refuses"); return -1; }
  sbx_t *s = calloc(1, sizeof *s);
  if (!s) return -1;
  if (fk.spare_id[0]) { snprintf(id, idcap, "%s", fk.spare_id); fk.spare_id[0] = 0; }   /* a spare named ahead */
  snprintf(s->id, sizeof s->id, "%s", id);
  fk.last = *o;
  fk_note("create", id, &fk.creates);
  *out = s;
  return 0;
}
static void fk_stop(sbx_t *s) { s->stopped = true; fk_note("stop", s->id, &fk.stops); }
static void fk_destroy(sbx_t *s) { fk_note("destroy", s->id, &fk.destroys); free(s); }
static int fk_pause(sbx_t *s) {
  if (fk.fail_pause) return -1;
  s->paused = true;
  fk_note("pause", s->id, &fk.pauses);
  return 0;
}
static int fk_resume(sbx_t *s) { s->paused = false; fk_note("resume", s->id, &fk.resumes); return 0; }
static void fk_dying(const reg_entry *e) { fk_note("dying", reg_id(e), &fk.dyings); }
static void fk_gone(const reg_entry *e) { fk_note("gone", reg_id(e), &fk.gones); }

/* A counter's value, read under the lock. */
static int fk_count(const int *counter) {
  pthread_mutex_lock(&fk.mu);
  int v = *counter;
  pthread_mutex_unlock(&fk.mu);
  return v;
}

static const reg_backend FK_BACKEND = {fk_create, fk_stop, fk_destroy, fk_pause, fk_resume};
static const reg_hooks FK_HOOKS = {fk_dying, fk_gone};

/* Waits until *counter reaches at least want; false after 30 s (a hang, reported as a failure). */
static bool fk_wait(const int *counter, int want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&fk.mu);
  int rc = 0;
  while (*counter < want && rc == 0) rc = pthread_cond_timedwait(&fk.cv, &fk.mu, &until);
  bool ok = *counter >= want;
  pthread_mutex_unlock(&fk.mu);
  return ok;
}

static reg_create_opts fk_opts(bool secure, int64_t timeout_s) {
  reg_create_opts o;
  memset(&o, 0, sizeof o);
  o.timeout_s = timeout_s;
  o.secure = secure;
  o.internet = true;
  return o;
}
#endif
