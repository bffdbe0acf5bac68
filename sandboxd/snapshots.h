/* snapshots.h — the snapshot catalogue. As in E2B a snapshot is a template: an id (20 of
 * [a-z0-9]), an optional name (a named snapshot serves as a local template:
 * Sandbox.create('name')), the sandbox it was taken from and when. A template has builds (each a
 * top layer, layers.h) and tags (E2B's: each names one build; a build no tag names leaves the
 * catalogue and releases its layer). A snapshot is one build tagged "default"; taking a snapshot
 * under a name that exists gives that template a new build tagged "default" (same id), as E2B
 * assigns a new build to the existing template. A template build (template_build.h) adds a build
 * with the tags it was requested with ("default" when none). Kept in <state_dir>/snapshots.json
 * (written whole, atomically, on every change) across sandboxd restarts. Thread-safe. */
#ifndef SANDBOXD_SNAPSHOTS_H
#define SANDBOXD_SNAPSHOTS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layers.h"

#define SNAP_NAME_MAX 128
#define SNAP_MAX 4096                 /* snapshots in the catalogue */
#define SNAP_DEFAULT_TAG "default"    /* a build requested without tags gets it; Sandbox.create('name') means it */
#define SNAP_TAG_MAX 128              /* characters of a tag */
#define SNAP_MAX_TAGS 64              /* tags a template holds (so at most as many builds) */
#define SNAP_TAGS_PER_REQUEST 16      /* tags one request may name */

typedef struct {
  char id[LY_ID_LEN + 1];
  char name[SNAP_NAME_MAX + 1];       /* "" when unnamed */
  char build_id[LY_ID_LEN + 1];       /* the build resolved (snap_resolve), else the newest */
  char tag[SNAP_TAG_MAX + 1];         /* the tag resolved (snap_resolve), else "" */
  char sandbox_id[65];                /* the sandbox that build was taken from */
  char layer_id[LY_ID_LEN + 1];       /* that build's top layer */
  int64_t created_ms;                 /* when that build was recorded */
  uint64_t seq;                       /* larger is newer; a template given a new build gets a new one */
  size_t nbuilds;                     /* builds the template keeps */
} snap_info;

typedef struct {
  char tag[SNAP_TAG_MAX + 1];
  char build_id[LY_ID_LEN + 1];
  int64_t created_ms;                 /* when the tag was assigned to that build */
} snap_tag;

/* Called (outside the catalogue's lock) for every build that leaves the catalogue — its last tag
 * moved or removed, or its template deleted — once the catalogue released its layer. One hook;
 * NULL: none. */
typedef void (*snap_drop_fn)(const char *template_id, const char *build_id);
void snap_on_drop(snap_drop_fn fn);

/* Loads the catalogue (ly_init first). A snapshot whose layers are missing or broken is dropped
 * with a message on stderr. 0, or -1 with err when the file exists but cannot be read. */
int snap_init(const char *state_dir, char *err, size_t errlen);
/* Forgets the catalogue in memory (at exit; the file and the layers stay: ly_shutdown next). */
void snap_shutdown(void);

/* A reference as E2B spells one, "[namespace/]name[:tag]" (a name or an id), to sandboxd's
 * canonical name and tag: trimmed and lower-cased like E2B, then 1..SNAP_NAME_MAX of [a-z0-9_-];
 * no namespace (sandboxd has no teams); not "base". The tag (snap_parse_tag) into `tag` ("" when
 * the reference has none). 0, or -1 with err naming what is wrong. */
int snap_parse_ref(const char *in, char *out, size_t outlen, char *tag, size_t taglen, char *err, size_t errlen);
/* The same for a snapshot's name: the tag may only be "default" (a snapshot is one build). */
int snap_parse_name(const char *in, char *out, size_t outlen, char *err, size_t errlen);
/* A tag as E2B checks one: trimmed and lower-cased, 1..SNAP_TAG_MAX of [a-z0-9._-], not a UUID.
 * 0, or -1 with err. */
int snap_parse_tag(const char *in, char *out, size_t outlen, char *err, size_t errlen);

/* Adds a snapshot of layer l under the canonical `name` (NULL: unnamed); the catalogue takes its
 * own reference. 0 and *out; -2 with err when the name is another snapshot's id; -1 with err
 * (the catalogue full, the file not written). */
int snap_add(const char *name, layer *l, const char *sandbox_id, int64_t now_ms, snap_info *out, char *err, size_t errlen);

/* A build of layer l, build id `build_id` (NULL: a random one), of the template named `name`
 * (NULL: a new unnamed one): an existing template of that name gets the build (keeping its id),
 * else a new one takes the id `id` (NULL or taken: a random one; out->id tells) — a template build
 * names its template before it has one. The build takes `tags` (canonical, ntags <=
 * SNAP_TAGS_PER_REQUEST; 0: "default"), moving them from the template's other builds; a build left
 * without a tag leaves. The catalogue takes its own reference on l. 0 and *out (the new build);
 * -2 with err when the name is another snapshot's id; -1 with err (full, not written). */
int snap_add_build(const char *id, const char *name, const char *build_id, layer *l, const char *sandbox_id, int64_t now_ms,
                   const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, snap_info *out, char *err, size_t errlen);

/* The build a reference "<id or name>[:tag]" names (no tag: "default"): its layer (a new
 * reference) and *out, or NULL with *status 404 (no such template, or it has no such tag: err
 * names which) or 400 (malformed, err says why). */
layer *snap_resolve(const char *ref, snap_info *out, int *status, char *err, size_t errlen);
/* The template `key` (a canonical name or id, no tag) is: 0 and *out (its newest build), or -1. */
int snap_find(const char *key, snap_info *out);
/* Whether a build of that id is in the catalogue. */
bool snap_has_build(const char *build_id);

/* POST /templates/tags: `target` ("<name or id>[:tag]", no tag: "default") names a build; it takes
 * `tags` (canonical, 1..SNAP_TAGS_PER_REQUEST), moving them from other builds of the template.
 * 0 and build_id, or the HTTP status with err: 400 malformed, 404 no such template or tag, 500. */
int snap_assign_tags(const char *target, const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, int64_t now_ms, char *build_id,
                     char *err, size_t errlen);
/* DELETE /templates/tags: template `name` (no tag) loses `tags` (canonical, 1..SNAP_TAGS_PER_REQUEST)
 * — not "default", as E2B, nor its last tag (delete the template instead). 0, or the HTTP status
 * with err: 400, 404 (no such template, or it has no such tag: err names it), 500. */
int snap_remove_tags(const char *name, const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, char *err, size_t errlen);
/* GET /templates/{id}/tags: the tags of template `ref` (id or name, no tag), oldest first; free()
 * *out. 0, or the HTTP status with err (400, 404, 500). */
int snap_tags(const char *ref, snap_tag **out, size_t *n, char *err, size_t errlen);

/* Deletes the template `ref` refers to ("<id or name>", or ":default"), every build of it.
 * Sandboxes created from it keep their layers until they end. 0, or the HTTP status: 404
 * unknown, 400 malformed (or a tag other than default: tags are removed with snap_remove_tags),
 * 500 not written (err says why). */
int snap_delete(const char *ref, char *err, size_t errlen);

/* Every snapshot, newest first, each with its newest build; free() the array. */
snap_info *snap_list(size_t *n);
#endif
