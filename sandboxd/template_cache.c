/* template_cache.c — the template build cache (see template_cache.h). */
#include "template_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clocks.h"
#include "errbuf.h"
#include "ids.h"
#include "statefile.h"

typedef struct {
  char key[TK_KEY_LEN + 1];
  layer *layer;                        /* NULL: base */
  unsigned long long bytes;            /* ly_size when recorded */
  int64_t used_ms;
  uint64_t used_seq;                   /* ties of used_ms: larger is newer */
  char owners[TC_MAX_OWNERS][TC_OWNER_LEN + 1];
  int nowners;                         /* newest last */
} entry;

static struct {
  pthread_mutex_t mu;
  char path[4200];
  entry *v;
  size_t n, cap, max_entries;
  unsigned long long max_bytes;
  uint64_t seq;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool valid_key(const char *k) {
  if (!k || strlen(k) != TK_KEY_LEN) return false;
  for (const char *p = k; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

static bool valid_owner(const char *o) { return o && o[0] && strlen(o) <= TC_OWNER_LEN && ids_alnum(o, TC_OWNER_LEN); }

static entry *find_locked(const char *key) {
  for (size_t i = 0; i < g.n; i++)
    if (!strcmp(g.v[i].key, key)) return &g.v[i];
  return NULL;
}

static void add_owner(entry *e, const char *owner) {
  if (!valid_owner(owner)) return;
  int at = -1;
  for (int i = 0; i < e->nowners; i++)
    if (!strcmp(e->owners[i], owner)) at = i;
  if (at < 0 && e->nowners == TC_MAX_OWNERS) at = 0;   /* the oldest goes */
  if (at >= 0) {
    memmove(e->owners[at], e->owners[at + 1], (size_t)(e->nowners - at - 1) * sizeof e->owners[0]);
    e->nowners--;
  }
  snprintf(e->owners[e->nowners++], sizeof e->owners[0], "%s", owner);
}

static void touch(entry *e) {
  e->used_ms = wall_ms();
  e->used_seq = ++g.seq;
}

/* Bytes of the distinct layers the cache holds; g.mu held. */
static unsigned long long bytes_locked(void) {
  unsigned long long sum = 0;
  for (size_t i = 0; i < g.n; i++) {
    bool dup = false;
    for (size_t j = 0; j < i && !dup; j++) dup = g.v[j].layer == g.v[i].layer;
    if (!dup && g.v[i].layer) sum += g.v[i].bytes;
  }
  return sum;
}

static int save_locked(char *err, size_t errlen) {
  json_t *arr = json_array(), *root = json_pack("{s:i,s:o}", "version", 1, "entries", arr);
  if (!root) return seterr(err, errlen, "out of memory");
  for (size_t i = 0; i < g.n; i++) {
    const entry *e = &g.v[i];
    json_t *owners = json_array();
    for (int k = 0; owners && k < e->nowners; k++) json_array_append_new(owners, json_string(e->owners[k]));
    json_t *o = json_pack("{s:s,s:o,s:I,s:I,s:o}", "key", e->key, "layer", e->layer ? json_string(ly_id(e->layer)) : json_null(),
                          "bytes", (json_int_t)e->bytes, "usedMs", (json_int_t)e->used_ms, "owners", owners ? owners : json_array());
    if (!o || json_array_append_new(arr, o) != 0) { json_decref(root); return seterr(err, errlen, "out of memory"); }
  }
  int rc = statefile_save(g.path, root, JSON_COMPACT, err, errlen);
  json_decref(root);
  return rc;
}

static void remove_at(size_t i) {
  memmove(&g.v[i], &g.v[i + 1], (g.n - i - 1) * sizeof *g.v);
  g.n--;
}

/* Whether only cache entries hold e's layer (dropping them all frees it); g.mu held. */
static bool evictable(const entry *e) {
  if (!e->layer) return true;
  int mine = 0;
  for (size_t i = 0; i < g.n; i++) mine += g.v[i].layer == e->layer;
  return ly_refs(e->layer) <= mine;
}

/* Drops least recently used evictable entries while a bound is passed, their layers released at
 * once (under g.mu: a layer over another must be gone before the one below it is evictable).
 * Returns how many. */
static size_t evict_locked(void) {
  size_t k = 0;
  while (g.n > g.max_entries || bytes_locked() > g.max_bytes) {
    size_t best = g.n;
    for (size_t i = 0; i < g.n; i++) {
      if (!evictable(&g.v[i])) continue;
      if (best == g.n || g.v[i].used_ms < g.v[best].used_ms ||
          (g.v[i].used_ms == g.v[best].used_ms && g.v[i].used_seq < g.v[best].used_seq)) best = i;
    }
    if (best == g.n) break;   /* everything left is in use */
    layer *l = g.v[best].layer;
    remove_at(best);
    ly_release(l);
    k++;
  }
  return k;
}

static int grow_locked(void) {
  if (g.n < g.cap) return 0;
  size_t nc = g.cap ? g.cap * 2 : 64;
  entry *p = realloc(g.v, nc * sizeof *p);
  if (!p) return -1;
  g.v = p;
  g.cap = nc;
  return 0;
}

int tc_init(const char *state_dir, size_t max_entries, unsigned long long max_bytes, char *err, size_t errlen) {
  pthread_mutex_lock(&g.mu);
  int rc = -1;
  json_t *root = NULL;
  g.max_entries = max_entries ? max_entries : TC_DEFAULT_MAX_ENTRIES;
  g.max_bytes = max_bytes ? max_bytes : TC_DEFAULT_MAX_BYTES;
  if (snprintf(g.path, sizeof g.path, "%s/template-cache.json", state_dir) >= (int)sizeof g.path - 8) {
    seterr(err, errlen, "template cache: state dir path too long");
    goto out;
  }
  if (statefile_load(g.path, &root, err, errlen) != 0) goto out;
  if (!root) { rc = 0; goto out; }
  json_t *arr = statefile_v1_array(root, "entries");
  if (!arr) { seterr(err, errlen, "%s: not a sandboxd template cache (version 1)", g.path); goto out; }
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    const char *key = json_string_value(json_object_get(o, "key"));
    json_t *lj = json_object_get(o, "layer"), *bj = json_object_get(o, "bytes"), *uj = json_object_get(o, "usedMs");
    json_t *oj = json_object_get(o, "owners");
    if (!valid_key(key) || find_locked(key) || !(json_is_null(lj) || json_is_string(lj)) || !json_is_integer(bj) ||
        json_integer_value(bj) < 0 || !json_is_integer(uj) || !json_is_array(oj) || g.n >= g.max_entries) {
      fprintf(stderr, "sandboxd: template cache: entry %zu of %s is malformed or repeated: dropped\n", i, g.path);
      continue;
    }
    layer *l = NULL;
    if (json_is_string(lj)) {
      char why[512];
      if (!(l = ly_open(json_string_value(lj), why, sizeof why))) {
        fprintf(stderr, "sandboxd: template cache: entry %zu: %s: dropped\n", i, why);
        continue;
      }
    }
    if (grow_locked() != 0) { ly_release(l); seterr(err, errlen, "out of memory"); goto out; }
    entry *e = &g.v[g.n++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    e->layer = l;
    e->bytes = (unsigned long long)json_integer_value(bj);
    e->used_ms = json_integer_value(uj);
    size_t k;
    json_t *ow;
    json_array_foreach(oj, k, ow) add_owner(e, json_string_value(ow));
  }
  rc = 0;
out:
  json_decref(root);
  pthread_mutex_unlock(&g.mu);
  return rc;
}

void tc_shutdown(void) {
  pthread_mutex_lock(&g.mu);
  free(g.v);   /* their layers are not released: a release to zero would remove them */
  g.v = NULL;
  g.n = g.cap = 0;
  pthread_mutex_unlock(&g.mu);
}

int tc_get(const char *key, const char *owner, layer **out) {
  *out = NULL;
  pthread_mutex_lock(&g.mu);
  entry *e = find_locked(key);
  if (e) {
    touch(e);
    add_owner(e, owner);
    if (e->layer) ly_hold(e->layer);
    *out = e->layer;
    char why[256];
    if (save_locked(why, sizeof why) != 0) fprintf(stderr, "sandboxd: template cache: %s\n", why);
  }
  pthread_mutex_unlock(&g.mu);
  return e != NULL;
}

int tc_put(const char *key, layer *l, const char *owner, char *err, size_t errlen) {
  if (!valid_key(key)) return seterr(err, errlen, "template cache: malformed key");
  unsigned long long bytes = l ? ly_size(l) : 0;
  layer *old = NULL;
  int rc = -1;
  pthread_mutex_lock(&g.mu);
  entry *e = find_locked(key);
  if (!e) {
    if (grow_locked() != 0) { seterr(err, errlen, "out of memory"); goto out; }
    e = &g.v[g.n++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
  } else {
    old = e->layer;
  }
  if (l) ly_hold(l);
  e->layer = l;
  e->bytes = bytes;
  touch(e);
  add_owner(e, owner);
  ly_release(old);   /* before eviction: the old layer may be what keeps a bound passed */
  old = NULL;
  (void)evict_locked();
  rc = save_locked(err, errlen);
out:
  pthread_mutex_unlock(&g.mu);
  return rc;
}

void tc_trim(void) {
  pthread_mutex_lock(&g.mu);
  char why[256];
  if (evict_locked() > 0 && save_locked(why, sizeof why) != 0) fprintf(stderr, "sandboxd: template cache: %s\n", why);
  pthread_mutex_unlock(&g.mu);
}

void tc_forget_owner(const char *owner) {
  layer *drop[256];
  size_t ndrop = 0;
  bool changed = false;
  pthread_mutex_lock(&g.mu);
  for (size_t i = 0; i < g.n;) {
    entry *e = &g.v[i];
    int at = -1;
    for (int k = 0; k < e->nowners; k++)
      if (!strcmp(e->owners[k], owner)) at = k;
    if (at >= 0) {
      memmove(e->owners[at], e->owners[at + 1], (size_t)(e->nowners - at - 1) * sizeof e->owners[0]);
      e->nowners--;
      changed = true;
    }
    if (e->nowners == 0 && at >= 0 && ndrop < sizeof drop / sizeof *drop) {
      drop[ndrop++] = e->layer;
      remove_at(i);
    } else i++;
  }
  char why[256];
  if (changed && save_locked(why, sizeof why) != 0) fprintf(stderr, "sandboxd: template cache: %s\n", why);
  pthread_mutex_unlock(&g.mu);
  for (size_t i = 0; i < ndrop; i++) ly_release(drop[i]);
}

void tc_stats_get(tc_stats *out) {
  pthread_mutex_lock(&g.mu);
  out->entries = g.n;
  out->max_entries = g.max_entries;
  out->bytes = bytes_locked();
  out->max_bytes = g.max_bytes;
  pthread_mutex_unlock(&g.mu);
}
