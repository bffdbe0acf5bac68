/* sync.h — the host side of workspace sync (lua/moonbox/workspace): a directory tree seen
 * through one root descriptor, never through a symbolic link.
 *
 *   - paths inside a tree are relative, '/'-separated, without empty, "." or ".." components
 *     (mb_sync_check_path); every parent is opened from the root with O_NOFOLLOW|O_DIRECTORY, so a
 *     symlinked parent is refused (SYNC_UNSAFE_PATH) instead of followed out of the tree;
 *   - a scan walks the tree in steps (gitignore rules of ignore.h, the caller's limits on entries,
 *     bytes and metadata), never following a link, refusing device files, FIFOs and sockets;
 *   - a pack turns a scan into ONE tar stream (libarchive, pax) handed out in pieces
 *     (mb_pack_read: a pull interface an upload body or a file writer drains), hashing every file
 *     (SHA-256) as it reads it, failing with SYNC_CHANGED when a file changes under it;
 *   - an unpack reads an untrusted tar file in steps into a private staging directory (files and
 *     links are staged under names of their own, so an entry's name can never place anything);
 *     absolute names, ".." components, hard links, device files, FIFOs and sockets are refused
 *     with an error naming the entry; files are hashed as they are staged;
 *   - placements (rename from the staging directory, mkdir, chmod, unlink, rmdir) check what is
 *     at the target right before acting (its version: dev:ino:size:mtime_ns:ctime_ns, mbwrap's).
 *
 * Errors: -1 (or NULL) with the core's one error type, a struct mb_error (errors.h, set by
 * mb_error_fail): its name a SYNC_* code of error_codes.def (MB_CODE_SYNC_*), the message naming
 * the path, and the entry's path. Limits are the caller's; nothing is allocated
 * without one. Blocking file I/O is done in steps so that a caller on a loop can yield between
 * them. */
#ifndef MB_SYNC_H
#define MB_SYNC_H
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "errors.h"

#define MB_SYNC_PATH_MAX 4096 /* bytes of a relative path or link target */
#define MB_SYNC_VERSION_MAX 96

/* errno → a SYNC_* code; a failed system call on `path` (returns -1). */
int mb_sync_errno_code(int err);
int mb_sync_sys_fail(struct mb_error *e, int err, const char *what, const char *path);
/* A staging directory's name (".moonbox-sync-*.tmp"): never part of a tree. */
int mb_sync_is_stage_name(const char *name);

/* → 0, or -1 with SYNC_UNSAFE_ENTRY naming the reason (absolute, "..", empty component...). */
int mb_sync_check_path(const char *p, size_t len, struct mb_error *e);

enum { MB_SYNC_FILE = 'f', MB_SYNC_DIR = 'd', MB_SYNC_LINK = 'l' };

struct mb_sync_entry {
  char *path;      /* relative; "" for the root itself */
  char *link;      /* a symlink's target, else NULL */
  size_t plen;
  int type;        /* MB_SYNC_FILE | MB_SYNC_DIR | MB_SYNC_LINK */
  unsigned mode;   /* permission bits & 0777 */
  uint64_t size;
  int64_t mtime_s;
  long mtime_ns;
  char version[MB_SYNC_VERSION_MAX];
  uint64_t dev, ino, nlink;
  unsigned char sha256[32];
  int hashed;
  int excluded;    /* scans with keep_excluded: matched a rule (not descended) */
};
void mb_sync_version(const struct stat *st, char out[MB_SYNC_VERSION_MAX]);

/* ---- a tree ---- */
typedef struct mb_sync_root mb_sync_root;
/* root: an absolute path to an existing directory (followed if it is itself a link: the
 * caller chose it). → NULL with SYNC_NOT_FOUND / SYNC_NOT_DIRECTORY / SYNC_IO_ERROR. */
mb_sync_root *mb_sync_root_open(const char *root, struct mb_error *e);
void mb_sync_root_close(mb_sync_root *r);
int mb_sync_root_fd(const mb_sync_root *r);
const char *mb_sync_root_path(const mb_sync_root *r);

/* The directory holding `rel` (its last component in *leaf), every component opened without
 * following links. create: missing directories are made (0700). → fd (the caller closes it) | -1. */
int mb_sync_open_parent(const mb_sync_root *r, const char *rel, int create, const char **leaf,
                        struct mb_error *e);

/* lstat through the safe walk. → 1 (out filled, no hash), 0 absent, -1 error. */
int mb_sync_lstat(const mb_sync_root *r, const char *rel, struct mb_sync_entry *out, char *link_buf,
                  size_t link_cap, struct mb_error *e);

/* ---- scans ---- */
struct mb_sync_scan_opts {
  uint64_t max_entries;   /* entries (files, directories, links) → SYNC_TOO_MANY_FILES */
  uint64_t max_bytes;     /* sum of file sizes → SYNC_TOO_LARGE */
  uint64_t max_meta;      /* bytes of paths, link targets and rules kept → SYNC_TOO_LARGE */
  int gitignore;          /* read each directory's .gitignore */
  int keep_excluded;      /* record excluded entries (flagged, not descended) instead of skipping them */
  const char *exclude;    /* the caller's patterns, LF-separated (may be NULL) */
  size_t exclude_len;
};
typedef struct mb_sync_scan mb_sync_scan;
mb_sync_scan *mb_sync_scan_new(const mb_sync_root *r, const struct mb_sync_scan_opts *o,
                               struct mb_error *e);
/* Visits up to `budget` entries. → 1 done, 0 more to do, -1 error (the scan is then unusable). */
int mb_sync_scan_step(mb_sync_scan *s, size_t budget, struct mb_error *e);
size_t mb_sync_scan_count(const mb_sync_scan *s);
struct mb_sync_entry *mb_sync_scan_entry(mb_sync_scan *s, size_t i); /* 0 = the root */
uint64_t mb_sync_scan_bytes(const mb_sync_scan *s);
uint64_t mb_sync_scan_excluded(const mb_sync_scan *s);
void mb_sync_scan_free(mb_sync_scan *s);

/* ---- hashing one file in steps ---- */
typedef struct mb_sync_hash mb_sync_hash;
mb_sync_hash *mb_sync_hash_open(const mb_sync_root *r, const char *rel, struct mb_error *e);
/* Reads up to budget bytes. → 1 done (hex: 64 chars + NUL, *size, version), 0 more, -1 error. */
int mb_sync_hash_step(mb_sync_hash *h, size_t budget, char hex[65], uint64_t *size,
                      char version[MB_SYNC_VERSION_MAX], struct mb_error *e);
void mb_sync_hash_free(mb_sync_hash *h);

/* ---- placements (each checks `expect` right before it acts: NULL = anything, "absent", or a
 * version string; a mismatch is SYNC_CONFLICT) ---- */
int mb_sync_place(const mb_sync_root *r, const char *staged, const char *rel, const char *expect,
                  struct mb_error *e);      /* rename(staged, rel); parents must exist */
int mb_sync_mkdir(const mb_sync_root *r, const char *rel, unsigned mode, struct mb_error *e);
int mb_sync_chmod(const mb_sync_root *r, const char *rel, unsigned mode, const char *expect,
                  struct mb_error *e);
int mb_sync_unlink(const mb_sync_root *r, const char *rel, const char *expect, struct mb_error *e);
int mb_sync_rmdir(const mb_sync_root *r, const char *rel, struct mb_error *e); /* SYNC_NOT_EMPTY */
/* Removes rel and everything below it, never following a link. Absent: 0. */
int mb_sync_rmtree(const mb_sync_root *r, const char *rel, struct mb_error *e);
/* Removes the staging directories (".moonbox-sync-<pid>-*.tmp" at the root) of processes that
 * are gone. → how many. */
int mb_sync_sweep(const mb_sync_root *r);

/* ---- packs: a scan as one tar stream ---- */
typedef struct mb_pack mb_pack;
/* The scan must stay alive (and unchanged) until the pack is freed. */
mb_pack *mb_pack_new(const mb_sync_root *r, mb_sync_scan *s, struct mb_error *e);
/* Up to cap bytes of the archive. → bytes (> 0), 0 at the end, -1 error (mb_pack_error). */
ssize_t mb_pack_read(mb_pack *p, char *buf, size_t cap);
const struct mb_error *mb_pack_error(const mb_pack *p);
struct mb_pack_progress {
  uint64_t bytes_in, bytes_out, files_done, entries_done;
};
void mb_pack_progress(const mb_pack *p, struct mb_pack_progress *out);
void mb_pack_free(mb_pack *p);

/* ---- unpacks: an untrusted tar file into a staging directory ---- */
struct mb_unpack_item {
  char *path;             /* as checked: relative, "./" prefix removed */
  char *link;             /* symlink target */
  int type;               /* MB_SYNC_FILE | MB_SYNC_DIR | MB_SYNC_LINK */
  unsigned mode;
  int64_t mtime_s;
  long mtime_ns;
  uint64_t size;
  unsigned char sha256[32];
  char staged[32];        /* the name in the staging directory (files and links) */
};
typedef struct mb_unpack mb_unpack;
/* archive: a host path; stage: the staging directory, relative to the root (made by the caller,
 * private); staged names are prefix (at most 15 bytes) + 'f' or 'l' + a number, so several
 * unpacks can share one staging directory. max_entries / max_bytes: the caller's limits on
 * entries and file bytes. */
mb_unpack *mb_unpack_new(const mb_sync_root *r, const char *archive, const char *stage, const char *prefix,
                         uint64_t max_entries, uint64_t max_bytes, struct mb_error *e);
/* Stages up to budget bytes. → 1 done, 0 more, -1 error. */
int mb_unpack_step(mb_unpack *u, size_t budget, struct mb_error *e);
size_t mb_unpack_count(const mb_unpack *u);
const struct mb_unpack_item *mb_unpack_item(const mb_unpack *u, size_t i);
void mb_unpack_free(mb_unpack *u);
#endif
