/* paths.h — every request path is resolved INSIDE the sandbox root (openat2 RESOLVE_IN_ROOT), and
 * EntryInfo (reference §5.4) is built from what the sandbox's processes would see. Functions
 * return 0 / an fd, or -errno. A leaf: the root is a directory fd and the ids are numbers, so the
 * unit tests and the fuzzer run it against a plain temporary tree (sandbox.c makes the context
 * of a real sandbox: sbx_fs_ctx). */
#ifndef SANDBOXD_PATHS_H
#define SANDBOXD_PATHS_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <sys/types.h>

#define PATHS_MAX 4096

typedef struct {
  int root;                 /* O_PATH fd of "/" as the sandbox's processes see it */
  const char *user, *home;
  uid_t uid; gid_t gid;     /* the user's ids inside */
  uid_t host_uid; gid_t host_gid;             /* ... and on the host (what the file system stores) */
  uid_t host_root_uid, host_user_uid;         /* host ids of root and user, for owner names */
  gid_t host_root_gid, host_user_gid;
} fs_ctx;

/* "~", "~/x", relative (against home) → a clean absolute path ("." and ".." folded lexically).
 * -EINVAL for NUL bytes, -ENAMETOOLONG. */
int paths_resolve(const fs_ctx *c, const char *in, char *out, size_t outlen);

/* openat2(root, abs, flags, mode, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS|extra). */
int paths_open(const fs_ctx *c, const char *abs, int flags, mode_t mode, uint64_t extra_resolve);
/* The sandbox's own file systems only (overlay, tmpfs): 0, -PATHS_EFOREIGN, or -errno. */
#define PATHS_EFOREIGN EREMOTE    /* on proc, sysfs, devpts, cgroup or any other foreign mount */
#define PATHS_ENOTREG  ENODEV     /* not a regular file (FIFO, device, socket) */
int paths_fs_check(int fd);
/* And the file system (st_dev) of the volumes that sandboxes mount (volumes.h); 0: none. */
void paths_allow_dev(dev_t dev);
const char *paths_fs_name(int fd);   /* "proc", "sysfs", ... for messages */
/* A regular file on the sandbox's own file systems, opened with flags (O_RDONLY, or
 * O_WRONLY|O_CREAT|O_TRUNC to create it 0644). Checked on an O_PATH fd, then reopened through
 * /proc/self/fd, so what is opened is what was checked. fd, or -PATHS_EFOREIGN (fsname set),
 * -PATHS_ENOTREG, -EISDIR, -errno. */
int paths_open_file(const fs_ctx *c, const char *abs, int flags, char *fsname, size_t fslen);
/* O_PATH|O_DIRECTORY fd of abs's parent and its last component in name; -EINVAL for "/". */
int paths_open_parent(const fs_ctx *c, const char *abs, char *name, size_t namelen);
/* mkdir -p: every missing level 0755 owned by the user. *created = the last level was made;
 * *first (may be NULL) = the length of abs's prefix that names the first level made, 0 if none.
 * -ENOTDIR when a level exists and is not a directory. */
int paths_mkdir_p(const fs_ctx *c, const char *abs, bool *created, size_t *first);
/* Undoes paths_mkdir_p(c, abs, …, &first) for an operation that did not happen: removes abs and
 * its parents down to the level `first` names, each only while empty. */
void paths_unmake(const fs_ctx *c, const char *abs, size_t first);
/* Symlinks evaluated inside the root (like EvalSymlinks); -ENOENT if some level is missing. */
int paths_realpath(const fs_ctx *c, const char *abs, char *out, size_t outlen);
/* Where creating abs makes its file, as open(O_CREAT) finds it: paths_realpath, but the last
 * level may be missing — through a dangling link (or a chain), the last link's target, which is
 * what envd's upload writes. -ENOENT if a level above it is missing, -EISDIR for "missing/". */
int paths_create_path(const fs_ctx *c, const char *abs, char *out, size_t outlen);

/* Files sandboxd creates from the host must be created with an id the sandbox's filesystem maps
 * (creating as host root fails with EOVERFLOW on a user-namespace overlay): enter switches this
 * thread's fsuid/fsgid to the user's host ids and keeps root's file capabilities; leave undoes it. */
typedef struct { int uid, gid; } paths_cred;
void paths_cred_enter(const fs_ctx *c, paths_cred *save);
void paths_cred_leave(const paths_cred *save);

/* EntryInfo (RPC flavour) of dirfd/name displayed as `display` (absolute). NULL + errno. */
json_t *paths_entry(const fs_ctx *c, int dirfd, const char *name, const char *display);
/* The same for an absolute path (lstat of the last component). */
json_t *paths_entry_at(const fs_ctx *c, const char *abs);

/* user.e2b.* xattrs of the inode behind fd as {"k":"v"}; an empty object when none. */
json_t *paths_metadata(int fd);
/* Replace the whole user.e2b.* set of fd's inode with md (object of strings, may be NULL). */
int paths_set_metadata(int fd, json_t *md);

/* uid/gid as seen from the host → name inside the sandbox ("root", "user", or a number). */
void paths_owner_name(const fs_ctx *c, uid_t host_uid, char *out, size_t outlen);
void paths_group_name(const fs_ctx *c, gid_t host_gid, char *out, size_t outlen);
#endif
