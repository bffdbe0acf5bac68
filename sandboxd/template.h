/* template.h — the read-only template every sandbox root is layered on: a minimal /etc with the
 * root and user accounts, empty mount points, and the host's merged-/usr symlinks. Host system
 * directories themselves (/usr and any real /bin, /lib* ...) are not copied: each gets its own
 * overlay with the host directory as lower layer (overlays do not see mounts below them).
 * Roots on a base image (fromImage) are layered on the bare template instead: no host directory. */
#ifndef SANDBOXD_TEMPLATE_H
#define SANDBOXD_TEMPLATE_H
#include <stddef.h>
#include <sys/types.h>

#define TPL_MAX_SYSDIRS 8

typedef struct {
  char root[4096];                     /* <state_dir>/template/root */
  char bare[4096];                     /* <state_dir>/template/bare/root: below a base image's layer
                                        * (layers.h ly_image_based): mount points, /home/user and an
                                        * /etc with resolv.conf, hosts, passwd and group, nothing of the host */
  int nsys;                            /* host system directories that need their own overlay */
  char sys[TPL_MAX_SYSDIRS][16];       /* names below "/", e.g. "usr" */
} tpl_info;

/* Build <state_dir>/template once per sandboxd process (files owned by host uid/gid `owner`, the
 * sandbox root; /home/user by `user_owner`; /etc/resolv.conf names `nameserver`). Thread-safe;
 * later calls return the cached info. */
int tpl_ensure(const char *state_dir, uid_t owner, gid_t owner_gid, uid_t user_owner, gid_t user_gid,
               const char *nameserver, tpl_info *out, char *err, size_t errlen);

/* Remove a directory tree without following symlinks or crossing into other file systems,
 * using a constant number of fds whatever the depth. 0 on success, -1 with errno. */
int tpl_rm_tree(const char *path);
#endif
