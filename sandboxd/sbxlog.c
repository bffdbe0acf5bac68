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

/* Bytes of the well-formed UTF-8 sequence at p (n bytes left), 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
  unsigned char b = p[0];
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) len = 2;
  else if (b >= 0xE0 && b <= 0xEF) { len = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
  else if (b >= 0xF0 && b <= 0xF4) { len = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
  else return 0;
  if (n < len) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

/* s as text the logs endpoints can serve (JSON strings are UTF-8): at most max bytes, never a
 * character cut in two, each byte that is not well-formed UTF-8 (a file name, a program's
 * words) a '?'. */
static char *text_dup(const char *s, size_t max) {
  if (!s) s = "";
  size_t n = strlen(s), o = 0;
  char *out = malloc((n < max ? n : max) + 1);
  if (!out) return NULL;
  for (size_t i = 0; i < n;) {
    size_t k = utf8_seq((const unsigned char *)s + i, n - i);
    if (o + (k ? k : 1) > max) break;
    if (k) { memcpy(out + o, s + i, k); o += k; i += k; }
    else { out[o++] = '?'; i++; }
  }
  out[o] = 0;
  return out;
}

void sbxlog_add(sbxlog *l, sbxlog_level level, const char *msg, ...) {
  if (!l) return;
  sbxlog_entry e = {.level = level, .msg = text_dup(msg, SBXLOG_MSG_MAX)};
  bool ok = e.msg != NULL;
  va_list ap;
  va_start(ap, msg);
  for (const char *k; ok && (k = va_arg(ap, const char *)) != NULL;) {
    const char *v = va_arg(ap, const char *);
    if (e.nfields == SBXLOG_FIELDS) continue;
    e.key[e.nfields] = k;
    ok = (e.value[e.nfields++] = text_dup(v, SBXLOG_VALUE_MAX)) != NULL;
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
