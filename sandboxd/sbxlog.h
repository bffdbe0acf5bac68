/* sbxlog.h — a sandbox's log: what happened to it and in it (created, paused, resumed, its
 * timeout, its network; each process started and how it ended; an out-of-memory kill), as E2B's
 * logs endpoints serve it (GET /sandboxes/{id}/logs, /v2/sandboxes/{id}/logs). Bounded: the
 * newest SBXLOG_MAX entries are kept, each message and field value cut to its limit (never inside a
 * character) and made valid UTF-8 (a malformed byte is a '?'). Thread-safe.
 * A leaf: libc and pthreads only. */
#ifndef SBX_SBXLOG_H
#define SBX_SBXLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBXLOG_MAX 2000          /* entries kept; the oldest go first */
#define SBXLOG_MSG_MAX 512       /* bytes of a message */
#define SBXLOG_VALUE_MAX 512     /* bytes of a field's value */
#define SBXLOG_FIELDS 4          /* fields of one entry */

typedef enum { SBXLOG_DEBUG, SBXLOG_INFO, SBXLOG_WARN, SBXLOG_ERROR } sbxlog_level;
const char *sbxlog_level_name(sbxlog_level l);   /* "debug", "info", "warn", "error" (E2B's) */

typedef struct {
  int64_t ts_ms;                        /* Unix time, milliseconds */
  uint64_t seq;                         /* order among entries of the same millisecond */
  sbxlog_level level;
  const char *msg;
  size_t nfields;
  const char *key[SBXLOG_FIELDS];       /* static strings */
  const char *value[SBXLOG_FIELDS];
} sbxlog_entry;

typedef struct sbxlog sbxlog;
sbxlog *sbxlog_new(void);               /* NULL when out of memory */
void sbxlog_free(sbxlog *l);

/* Adds an entry stamped now: msg, then up to SBXLOG_FIELDS (key, value) pairs, keys being string
 * literals, ended by a NULL key. Out of memory drops the entry (a log must not fail its caller). */
void sbxlog_add(sbxlog *l, sbxlog_level level, const char *msg, ...);

/* Calls fn for at most `limit` entries, under the log's lock (fn copies what it keeps): forward,
 * the oldest first from the first entry at or after from_ms; backward, the newest first from the
 * last entry at or before from_ms. The number of entries passed. */
size_t sbxlog_each(sbxlog *l, int64_t from_ms, bool backward, size_t limit,
                   void (*fn)(void *cls, const sbxlog_entry *e), void *cls);

#endif
