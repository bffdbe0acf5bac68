/* template_cache.h — the template build cache: a step's key (template_key.h) → the layer that
 * step left (layers.h; none for a step on base that changed no file), so a build reuses the
 * longest prefix of its steps that an earlier build made. Each entry holds a reference on its
 * layer, and names the templates whose builds made or reused it (at most TC_MAX_OWNERS, the
 * newest).
 *
 * Kept in <state_dir>/template-cache.json (written whole, atomically, on every change), loaded
 * after the snapshot catalogue and before the layer sweep, so cached layers survive a restart.
 * Bounded: at most max_entries entries and max_bytes bytes of layers (ly_size, each layer counted
 * once); past either — checked on every change and by tc_trim — the least recently used entries
 * whose layer nothing else uses (no template, sandbox or layer over it: only cache entries hold
 * it) are dropped, freeing their layers. A
 * layer still in use is never freed by the cache, so the bytes may stay over the bound while
 * templates or sandboxes hold them. Thread-safe. */
#ifndef SANDBOXD_TEMPLATE_CACHE_H
#define SANDBOXD_TEMPLATE_CACHE_H
#include <stdbool.h>
#include <stddef.h>

#include "layers.h"
#include "template_key.h"

#define TC_MAX_OWNERS 8
#define TC_DEFAULT_MAX_ENTRIES 1024
#define TC_DEFAULT_MAX_BYTES (16ULL << 30)
#define TC_OWNER_LEN 64

/* Loads the cache (ly_init and snap_init first; ly_sweep after). max_entries, max_bytes: the
 * bounds (0: the defaults). An entry whose layer is missing or broken is dropped with a message.
 * 0, or -1 with err (the file exists and cannot be read). */
int tc_init(const char *state_dir, size_t max_entries, unsigned long long max_bytes, char *err, size_t errlen);
/* Forgets the cache in memory, leaving its file and its layers (at exit; ly_shutdown next). */
void tc_shutdown(void);

/* The entry of `key`: 1 and *out (a new reference; NULL: base) — it becomes the most recently
 * used, and `owner` one of its owners — or 0 when the key is not cached. */
int tc_get(const char *key, const char *owner, layer **out);
/* Records key → l (NULL: base), made by a build of template `owner`; an entry of the key is
 * replaced (its owners kept). Then the bounds are enforced. 0, or -1 with err (not written). */
int tc_put(const char *key, layer *l, const char *owner, char *err, size_t errlen);
/* Enforces the bounds now (what was in use may not be any more: a template moved to a new layer,
 * a sandbox ended). */
void tc_trim(void);
/* Template `owner` is deleted: it owns no entry any more; entries left without an owner are
 * dropped (their layers freed unless something else holds them). */
void tc_forget_owner(const char *owner);

typedef struct { size_t entries, max_entries; unsigned long long bytes, max_bytes; } tc_stats;
void tc_stats_get(tc_stats *out);
#endif
