/* layer_merge.h — several overlay layers made into one, for layer chains that would stack too
 * deep (layers.h: ly_flatten). The result is what overlayfs shows with the layers as its lower
 * directories (top first) — the topmost entry of a name wins, directories merge down to an opaque
 * one or to a layer where the name is not a directory — while keeping what the layers say about
 * the layers *below* them: whiteouts stay whiteouts, and a directory that hides what is below it
 * in any of the layers is marked opaque (`user.overlay.opaque`), so the merged layer stacks over
 * the rest of the chain exactly as the layers did.
 *
 * Nothing is copied: every entry that is not a directory is a hard link to the layer's own inode
 * (layers never change once made), so a merge costs one link per file, not its bytes. Directories
 * are made with the topmost layer's owner, mode, extended attributes (but overlay's private ones,
 * see skip) and times. Entries are walked by path, with at most two directories open at a time
 * whatever the depth (paths up to LM_PATH_MAX bytes). */
#ifndef SANDBOXD_LAYER_MERGE_H
#define SANDBOXD_LAYER_MERGE_H
#include <stddef.h>

#define LM_MAX_LAYERS 64
#define LM_PATH_MAX 4096
#define LM_MAX_DIR_NAMES (16u << 20)   /* bytes of names in one directory */

/* Makes `tree` (a directory name) in dst_dirfd — it must not exist — the merge of `tree` in each
 * layer directory layer_fds[0..n-1], top first (a layer without it is skipped). skip_xattrs:
 * exact names never copied (NULL-terminated, or NULL). 0, or -1 with err naming the path and the
 * reason; then dst may hold a partial tree, which the caller removes. */
int lm_merge(const int *layer_fds, size_t n, const char *tree, int dst_dirfd, const char *const *skip_xattrs, char *err,
             size_t errlen);

/* Whether the entry `path` (relative to dirfd) is an overlay whiteout: a 0/0 character device,
 * or an empty regular file with an `overlay.whiteout` attribute (user. or trusted.). */
struct stat;
int lm_is_whiteout(int dirfd, const char *path, const struct stat *st);
#endif
