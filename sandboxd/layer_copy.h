/* layer_copy.h — copy a directory tree exactly, for snapshot layers (layers.h): contents (holes
 * stay holes; reflinked where the file system can share blocks), every file type (directories,
 * regular files, symlinks, devices, FIFOs, sockets, overlay whiteouts), owners, modes with their
 * set-id bits, extended attributes of every namespace, access and modification times, and hard
 * links inside the tree. It follows no symlink, crosses into no other file system, and keeps two
 * directories open whatever the depth (the walk's state is on the heap, bounded below). */
#ifndef SANDBOXD_LAYER_COPY_H
#define SANDBOXD_LAYER_COPY_H
#include <stddef.h>
#include <stdint.h>

#define LC_MAX_DEPTH 4096                  /* directories below the top */
#define LC_MAX_NAMES_BYTES (64u << 20)     /* names of the directories being walked, together */

typedef struct {
  /* Exact extended attribute names not copied (NULL-terminated list, or NULL). */
  const char *const *skip_xattrs;
} lc_opts;

typedef struct { uint64_t dirs, files, links, others, bytes; } lc_stats;

/* Copies the directory src (relative to src_dirfd) to dst (relative to dst_dirfd, which must not
 * exist yet). Hard links are matched through a scratch directory ".<dst>.links" next to dst,
 * removed before returning. 0, or -1 with err naming the path (relative to src) and the reason;
 * then dst may hold a partial copy, which the caller removes. stats may be NULL. */
int lc_copy_tree(int src_dirfd, const char *src, int dst_dirfd, const char *dst, const lc_opts *opts,
                 lc_stats *stats, char *err, size_t errlen);

/* In place, what lc_copy_tree does to its copy of the directory `dir` (relative to dirfd): every
 * extended attribute opts->skip_xattrs names removed from every entry; contents, owners, modes,
 * other xattrs, hard links and times left as they are (directories read without touching their
 * access times, or given them back), so that a tree moved where a copy would have gone is what the
 * copy would be, without a byte of file data written. Same walk and bounds as lc_copy_tree: no
 * symlink followed, another file system inside refused. stats counts the entries visited (links:
 * those with more than one hard link; bytes: 0). 0, or -1 with err naming the path (relative to dir); then some
 * entries may still hold the attributes. */
int lc_strip_tree(int dirfd, const char *dir, const lc_opts *opts, lc_stats *stats, char *err, size_t errlen);
#endif
