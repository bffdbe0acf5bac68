/* layers.h — the layer store, <state_dir>/layers: each layer is a frozen copy of one sandbox's
 * upper directories (or those directories themselves, moved in from a sandbox that is gone) (`<id>/root` for "/", `<id>/<d>` for each system directory d such as usr)
 * over a parent layer (`<id>/parent` names it; none: the template). A sandbox created from a
 * snapshot stacks its layer chain under a new empty upper layer: nothing is copied, every
 * sandbox and snapshot of the chain shares it.
 *
 * Reference-counted: a snapshot or a sandbox holds its top layer, every layer holds its parent;
 * the last release removes the layer's directory. Thread-safe. */
#ifndef SANDBOXD_LAYERS_H
#define SANDBOXD_LAYERS_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct layer layer;

#define LY_ID_LEN 20          /* [a-z0-9] */
#define LY_MAX_DEPTH 32       /* layers in one chain: each is one overlay lower layer */

/* Creates <state_dir>/layers (and removes unfinished captures of a crashed run). Call once,
 * before any other function. 0, or -1 with err. */
int ly_init(const char *state_dir, char *err, size_t errlen);

/* One tree of a capture: the directory `src` (relative to the capture's source directory) becomes
 * `name` in the layer ("root", or a system directory's name). */
typedef struct { const char *src, *name; } ly_tree;

/* A new layer over `parent` (NULL: the template) holding exact copies of the trees (layer_copy.h),
 * its directory owned by owner:group; written to disk (synced) before it is returned. The new
 * reference is the caller's. 0, or -1 with err (nothing left behind). */
int ly_capture(int src_dirfd, const ly_tree *trees, size_t ntrees, layer *parent, uid_t owner, gid_t group,
               layer **out, char *err, size_t errlen);

/* A base image's root file system (image.h) adopted as a new layer on nothing: `root_dir` (a
 * directory on the store's file system) is moved, not copied, to become its "root" tree; `image`
 * (its digest) is recorded in `<id>/image`. Such a layer and every layer over it are image-based
 * (ly_image_based): they have a "root" tree only, no host system directories. The new reference is
 * the caller's. 0, or -1 with err (root_dir left where it was). */
int ly_adopt_image(const char *root_dir, const char *image, uid_t owner, gid_t group, layer **out, char *err, size_t errlen);
bool ly_image_based(const layer *l);

/* As ly_capture, but the trees are *moved* into the layer (rename, same file system) and the
 * copy's changes made to them in place (lc_strip_tree: overlay's own xattrs dropped): the layer
 * is what ly_capture would have made, without a byte of file data copied. For a source nothing
 * uses any more (a build sandbox's upper layers once it is dead: no overlay may still have them
 * mounted); the trees are gone from src_dirfd afterwards, on failure too (a tree moved is removed
 * with the unfinished layer). A tree on another file system (EXDEV) is copied instead, with a
 * line on stderr. 0, or -1 with err. */
int ly_adopt(int src_dirfd, const ly_tree *trees, size_t ntrees, layer *parent, uid_t owner, gid_t group,
             layer **out, char *err, size_t errlen);

/* The layer `id` (and its chain) as left on disk by an earlier run: a new reference, or NULL with
 * err (unknown id, broken chain, deeper than LY_MAX_DEPTH). */
layer *ly_open(const char *id, char *err, size_t errlen);

void ly_hold(layer *l);
void ly_release(layer *l);             /* NULL is fine */

const char *ly_id(const layer *l);
layer *ly_parent(const layer *l);      /* NULL for a layer on the template */
int ly_depth(const layer *l);          /* 1 for a layer on the template */
/* The store's directory (<state_dir>/layers), for O_PATH opens. */
const char *ly_dir(void);

/* A new layer over `keep` (NULL: the template) holding what the chain from `top` down to `keep`
 * (exclusive; `keep` must be below `top`) shows, merged into one layer (layer_merge.h: hard links,
 * no file's bytes copied), its directory owned as top's; synced before it is returned.
 * For chains that would stack deeper than a bound: the merge replaces ly_depth(top) -
 * ly_depth(keep) lower layers by one. The new reference is the caller's. 0, or -1 with err
 * (nothing left behind). */
int ly_flatten(layer *top, layer *keep, layer **out, char *err, size_t errlen);

/* Removes every layer directory that no reference reaches (left by snapshots deleted while
 * sandboxd was down, or by a crash): call once the snapshot catalogue is loaded. Returns how
 * many were removed. */
int ly_sweep(void);
/* At exit, after every sandbox and the catalogue let go of their references in memory: frees the
 * layers still in memory, leaving every directory in place. */
void ly_shutdown(void);
/* The references held on l (by snapshots, sandboxes, the layers over it, caches): a holder that
 * knows how many of them are its own tells whether anything else uses l. */
int ly_refs(const layer *l);
/* Bytes l's own directory takes on disk (allocated blocks; at most 10^6 entries counted; a file
 * hard-linked from another layer counts in both). */
unsigned long long ly_size(const layer *l);
/* Layers in memory (held by something): for tests and leak checks. */
int ly_count(void);
#endif
