/* snapshots.h — the snapshot catalogue. As in E2B a snapshot is a template: an id (20 of
 * [a-z0-9]), an optional name (a named snapshot serves as a local template:
 * Sandbox.create('name')), its top layer (layers.h), the sandbox it was taken from and when.
 * Taking a snapshot under a name that exists gives that template the new state (same id), as
 * E2B assigns a new build to the existing template. Kept in <state_dir>/snapshots.json (written
 * whole, atomically, on every change) across sandboxd restarts. Thread-safe. */
#ifndef SANDBOXD_SNAPSHOTS_H
#define SANDBOXD_SNAPSHOTS_H
#include <stddef.h>
#include <stdint.h>

#include "layers.h"

#define SNAP_NAME_MAX 128
#define SNAP_MAX 4096                 /* snapshots in the catalogue */
#define SNAP_DEFAULT_TAG "default"    /* the only tag sandboxd has */

typedef struct {
  char id[LY_ID_LEN + 1];
  char name[SNAP_NAME_MAX + 1];       /* "" when unnamed */
  char sandbox_id[65];                /* the sandbox its current state was taken from */
  char layer_id[LY_ID_LEN + 1];
  int64_t created_ms;
  uint64_t seq;                       /* larger is newer; a re-taken name gets a new one */
} snap_info;

/* Loads the catalogue (ly_init first). A snapshot whose layers are missing or broken is dropped
 * with a message on stderr. 0, or -1 with err when the file exists but cannot be read. */
int snap_init(const char *state_dir, char *err, size_t errlen);
/* Forgets the catalogue in memory (at exit; the file and the layers stay: ly_shutdown next). */
void snap_shutdown(void);

/* A name as E2B spells one, "[namespace/]name[:tag]", to sandboxd's canonical name: trimmed and
 * lower-cased like E2B, then 1..SNAP_NAME_MAX of [a-z0-9_-]; the tag may only be "default"; no
 * namespace (sandboxd has no teams); not "base". 0, or -1 with err naming what is wrong. */
int snap_parse_name(const char *in, char *out, size_t outlen, char *err, size_t errlen);

/* Adds a snapshot of layer l under the canonical `name` (NULL: unnamed); the catalogue takes its
 * own reference. 0 and *out; -2 with err when the name is another snapshot's id; -1 with err
 * (the catalogue full, the file not written). */
int snap_add(const char *name, layer *l, const char *sandbox_id, int64_t now_ms, snap_info *out, char *err, size_t errlen);

/* The same, a new snapshot taking the id `id` (LY_ID_LEN of [a-z0-9]) unless it is taken (then a
 * random one, as snap_add; out->id tells). A template build names its template before it has one. */
int snap_add_as(const char *id, const char *name, layer *l, const char *sandbox_id, int64_t now_ms, snap_info *out, char *err,
                size_t errlen);

/* The snapshot an id or name (each optionally ":default") refers to: its layer (a new reference)
 * and *out, or NULL with *status 404 (unknown) or 400 (malformed, err says why). */
layer *snap_resolve(const char *ref, snap_info *out, int *status, char *err, size_t errlen);

/* Deletes the snapshot `ref` refers to. Sandboxes created from it keep its layers until they
 * end. 0, or the HTTP status: 404 unknown, 400 malformed, 500 not written (err says why). */
int snap_delete(const char *ref, char *err, size_t errlen);

/* Every snapshot, newest first; free() the array. */
snap_info *snap_list(size_t *n);
#endif
