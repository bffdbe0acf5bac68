/* test_sbx_sbxlog.c — a sandbox's log (sandboxd/sbxlog.c): entries in order with their fields,
 * the newest SBXLOG_MAX kept, messages and values cut to their limits, fields past
 * SBXLOG_FIELDS dropped, forward and backward reads from a cursor with a limit, and concurrent
 * writers losing nothing that fits. */
#include "mbtest.h"

#include <pthread.h>
#include <stdio.h>

#include "sbxlog.h"

typedef struct { size_t n; char msg[8][SBXLOG_MSG_MAX + 1]; sbxlog_entry e[8]; int64_t ts[SBXLOG_MAX]; uint64_t seq[SBXLOG_MAX]; size_t all; } seen;
static void take(void *cls, const sbxlog_entry *e) {
  seen *s = cls;
  if (s->n < 8) { snprintf(s->msg[s->n], sizeof s->msg[0], "%s", e->msg); s->e[s->n++] = *e; }
  if (s->all < SBXLOG_MAX) { s->ts[s->all] = e->ts_ms; s->seq[s->all] = e->seq; }
  s->all++;
}

static void test_order_fields_and_cursor(void) {
  sbxlog *l = sbxlog_new();
  CHECK(l != NULL);
  sbxlog_add(l, SBXLOG_INFO, "sandbox created", "template", "base", NULL);
  sbxlog_add(l, SBXLOG_WARN, "process ended", "pid", "7", "cmd", "sh -c exit 3", "status", "exit status 3", NULL);
  sbxlog_add(l, SBXLOG_ERROR, "no fields", NULL);
  seen s = {0};
  CHECK_INT(sbxlog_each(l, 0, false, 100, take, &s), 3);
  CHECK_STR(s.msg[0], "sandbox created");
  CHECK_STR(s.msg[1], "process ended");
  CHECK_INT(s.e[1].nfields, 3);
  CHECK_STR(s.e[1].key[2], "status");
  CHECK_INT(s.e[0].level, SBXLOG_INFO);
  CHECK_STR(sbxlog_level_name(s.e[1].level), "warn");
  CHECK_INT(s.e[2].nfields, 0);
  CHECK(s.seq[0] < s.seq[1] && s.seq[1] < s.seq[2]);
  memset(&s, 0, sizeof s);
  CHECK_INT(sbxlog_each(l, INT64_MAX, true, 2, take, &s), 2);   /* backward: newest first, limited */
  CHECK_STR(s.msg[0], "no fields");
  CHECK_STR(s.msg[1], "process ended");
  memset(&s, 0, sizeof s);
  CHECK_INT(sbxlog_each(l, INT64_MAX, false, 100, take, &s), 0);  /* forward from the future: nothing */
  memset(&s, 0, sizeof s);
  CHECK_INT(sbxlog_each(l, 0, true, 100, take, &s), 0);          /* backward from 1970: nothing */
  CHECK_STR(sbxlog_level_name((sbxlog_level)42), "info");
  sbxlog_free(l);
  sbxlog_free(NULL);
  sbxlog_add(NULL, SBXLOG_INFO, "ignored", NULL);
}

static void test_bounds(void) {
  sbxlog *l = sbxlog_new();
  char big[SBXLOG_MSG_MAX * 2];
  memset(big, 'm', sizeof big - 1);
  big[sizeof big - 1] = 0;
  sbxlog_add(l, SBXLOG_INFO, big, "a", big, "b", "2", "c", "3", "d", "4", "e", "5", NULL);
  seen s = {0};
  CHECK_INT(sbxlog_each(l, 0, false, 1, take, &s), 1);
  CHECK_INT(strlen(s.msg[0]), SBXLOG_MSG_MAX);
  CHECK_INT(s.e[0].nfields, SBXLOG_FIELDS);                      /* the fifth field is dropped */
  CHECK_STR(s.e[0].key[3], "d");
  /* the ring: SBXLOG_MAX + 10 entries keep the newest SBXLOG_MAX */
  for (int i = 0; i < SBXLOG_MAX + 10; i++) {
    char m[32];
    snprintf(m, sizeof m, "entry %d", i);
    sbxlog_add(l, SBXLOG_DEBUG, m, NULL);
  }
  memset(&s, 0, sizeof s);
  CHECK_INT(sbxlog_each(l, 0, false, SBXLOG_MAX * 2, take, &s), SBXLOG_MAX);
  CHECK_STR(s.msg[0], "entry 10");
  memset(&s, 0, sizeof s);
  sbxlog_each(l, INT64_MAX, true, 1, take, &s);
  CHECK_STR(s.msg[0], "entry 2009");
  sbxlog_free(l);
}

/* What the log keeps is always valid UTF-8 (the endpoints serve JSON): a cut never splits a
 * character, a malformed byte becomes '?'. */
static void test_utf8(void) {
  sbxlog *l = sbxlog_new();
  char big[SBXLOG_MSG_MAX + 8];
  memset(big, 'a', SBXLOG_MSG_MAX - 1);
  memcpy(big + SBXLOG_MSG_MAX - 1, "\xC3\xA9tail", 7);   /* é straddles the limit (and the NUL) */
  sbxlog_add(l, SBXLOG_INFO, big, "file", "bad\xFF\xC3name\xE2\x82\xAC", NULL);
  seen s = {0};
  CHECK_INT(sbxlog_each(l, 0, false, 1, take, &s), 1);
  CHECK_INT(strlen(s.msg[0]), SBXLOG_MSG_MAX - 1);        /* the é left out whole, not cut */
  CHECK_STR(s.e[0].value[0], "bad??name\xE2\x82\xAC");
  sbxlog_free(l);
}

static void *writer(void *arg) {
  for (int i = 0; i < 200; i++) sbxlog_add(arg, SBXLOG_INFO, "w", "i", "x", NULL);
  return NULL;
}
static void test_concurrent(void) {
  sbxlog *l = sbxlog_new();
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, writer, l) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  seen s = {0};
  CHECK_INT(sbxlog_each(l, 0, false, SBXLOG_MAX, take, &s), 800);
  int ordered = 1;
  for (size_t i = 1; i < 800; i++) ordered &= s.seq[i] == s.seq[i - 1] + 1;
  CHECK(ordered);
  sbxlog_free(l);
}

int main(void) {
  MBT_RUN(test_order_fields_and_cursor);
  MBT_RUN(test_bounds);
  MBT_RUN(test_utf8);
  MBT_RUN(test_concurrent);
  return mbt_report();
}
