/* sbxlog.c — a sandbox's log (sbxlog.h): a ring of entries under one mutex. */
#include "sbxlog.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sbxlog {
  pthread_mutex_t mu;
  sbxlog_entry ring[SBXLOG_MAX];
  size_t head, n;                       /* the oldest entry's slot; how many are kept */
  uint64_t seq;
};

const char *sbxlog_level_name(sbxlog_level l) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  return l <= SBXLOG_ERROR ? names[l] : "info";
}

sbxlog *sbxlog_new(void) {
  sbxlog *l = calloc(1, sizeof *l);
  if (l && pthread_mutex_init(&l->mu, NULL) != 0) { free(l); return NULL; }
  return l;
}

static void entry_clear(sbxlog_entry *e) {
  free((char *)e->msg);
  for (size_t i = 0; i < e->nfields; i++) free((char *)e->value[i]);
  memset(e, 0, sizeof *e);
}

void sbxlog_free(sbxlog *l) {
  if (!l) return;
  for (size_t i = 0; i < SBXLOG_MAX; i++) entry_clear(&l->ring[i]);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

static char *cut_dup(const char *s, size_t max) { return strndup(s ? s : "", max); }

void sbxlog_add(sbxlog *l, sbxlog_level level, const char *msg, ...) {
  if (!l) return;
  sbxlog_entry e = {.level = level, .msg = cut_dup(msg, SBXLOG_MSG_MAX)};
  bool ok = e.msg != NULL;
  va_list ap;
  va_start(ap, msg);
  for (const char *k; ok && (k = va_arg(ap, const char *)) != NULL;) {
    const char *v = va_arg(ap, const char *);
    if (e.nfields == SBXLOG_FIELDS) continue;
    e.key[e.nfields] = k;
    ok = (e.value[e.nfields++] = cut_dup(v, SBXLOG_VALUE_MAX)) != NULL;
  }
  va_end(ap);
  if (!ok) { entry_clear(&e); return; }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  e.ts_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  pthread_mutex_lock(&l->mu);
  e.seq = ++l->seq;
  size_t slot = (l->head + l->n) % SBXLOG_MAX;
  if (l->n == SBXLOG_MAX) { entry_clear(&l->ring[l->head]); l->head = (l->head + 1) % SBXLOG_MAX; }
  else l->n++;
  l->ring[slot] = e;
  pthread_mutex_unlock(&l->mu);
}

size_t sbxlog_each(sbxlog *l, int64_t from_ms, bool backward, size_t limit,
                   void (*fn)(void *cls, const sbxlog_entry *e), void *cls) {
  size_t passed = 0;
  pthread_mutex_lock(&l->mu);
  for (size_t i = 0; i < l->n && passed < limit; i++) {
    const sbxlog_entry *e = &l->ring[(l->head + (backward ? l->n - 1 - i : i)) % SBXLOG_MAX];
    if (backward ? e->ts_ms > from_ms : e->ts_ms < from_ms) continue;
    fn(cls, e);
    passed++;
  }
  pthread_mutex_unlock(&l->mu);
  return passed;
}
