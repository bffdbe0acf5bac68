/* sync_tree.c — the host's operations on a tree (sync.h): stepped hashing, placements,
 * removal, the staging sweep. */
#include "sync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>

#define STAGE_PREFIX ".moonbox-sync-"
#define sys_fail mb_sync_sys_fail

/* ---- hashing ---- */

struct mb_sync_hash {
  int fd;
  EVP_MD_CTX *md;
  uint64_t n;
  struct stat st0;
  char rel[MB_SYNC_PATH_MAX + 1];
};

mb_sync_hash *mb_sync_hash_open(const mb_sync_root *r, const char *rel, struct mb_error *e) {
  const char *leaf;
  int pfd = mb_sync_open_parent(r, rel, 0, &leaf, e);
  if (pfd < 0) return NULL;
  int fd = openat(pfd, leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  int err = errno;
  close(pfd);
  if (fd < 0) {
    if (err == ELOOP) return (mb_error_fail(e, MB_CODE_SYNC_CHANGED, rel, "'%s' is no longer a regular file", rel), NULL);
    return (sys_fail(e, err, "open", rel), NULL);
  }
  mb_sync_hash *h = calloc(1, sizeof *h);
  if (!h) {
    close(fd);
    return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, rel, "out of memory"), NULL);
  }
  h->fd = fd;
  snprintf(h->rel, sizeof h->rel, "%s", rel);
  if (fstat(fd, &h->st0) < 0 || !S_ISREG(h->st0.st_mode)) {
    mb_sync_hash_free(h);
    return (mb_error_fail(e, MB_CODE_SYNC_CHANGED, rel, "'%s' is no longer a regular file", rel), NULL);
  }
  h->md = EVP_MD_CTX_new();
  if (!h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1) {
    mb_sync_hash_free(h);
    return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, rel, "cannot start a SHA-256 digest"), NULL);
  }
  return h;
}

static void hex_of(const unsigned char *d, char *out) {
  static const char X[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = X[d[i] >> 4];
    out[2 * i + 1] = X[d[i] & 15];
  }
  out[64] = 0;
}

int mb_sync_hash_step(mb_sync_hash *h, size_t budget, char hex[65], uint64_t *size, char version[MB_SYNC_VERSION_MAX],
                      struct mb_error *e) {
  static char buf[65536];
  size_t done = 0;
  while (done < budget) {
    ssize_t k = read(h->fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return sys_fail(e, errno, "read", h->rel);
    if (k == 0) {
      struct stat st;
      if (fstat(h->fd, &st) < 0) return sys_fail(e, errno, "stat", h->rel);
      if (st.st_size != h->st0.st_size || (uint64_t)st.st_size != h->n || st.st_mtim.tv_sec != h->st0.st_mtim.tv_sec ||
          st.st_mtim.tv_nsec != h->st0.st_mtim.tv_nsec)
        return mb_error_fail(e, MB_CODE_SYNC_CHANGED, h->rel, "'%s' changed while it was read", h->rel);
      unsigned char d[32];
      unsigned int dl = 0;
      if (EVP_DigestFinal_ex(h->md, d, &dl) != 1 || dl != 32)
        return mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, h->rel, "SHA-256 failed");
      hex_of(d, hex);
      *size = h->n;
      mb_sync_version(&st, version);
      return 1;
    }
    if (EVP_DigestUpdate(h->md, buf, (size_t)k) != 1) return mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, h->rel, "SHA-256 failed");
    h->n += (uint64_t)k;
    done += (size_t)k;
  }
  return 0;
}

void mb_sync_hash_free(mb_sync_hash *h) {
  if (!h) return;
  if (h->fd >= 0) close(h->fd);
  EVP_MD_CTX_free(h->md);
  free(h);
}

/* ---- placements ---- */

/* What is at (pfd, leaf) against expect. → 0 as expected, -1 (SYNC_CONFLICT or an I/O error). */
static int check_expect(int pfd, const char *leaf, const char *rel, const char *expect, struct stat *st, int *exists,
                        struct mb_error *e) {
  *exists = fstatat(pfd, leaf, st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!*exists && errno != ENOENT) return sys_fail(e, errno, "stat", rel);
  if (!expect) return 0;
  if (strcmp(expect, "absent") == 0) {
    if (*exists) return mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' appeared on the host meanwhile", rel);
    return 0;
  }
  if (!*exists) return mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' was removed on the host meanwhile", rel);
  char v[MB_SYNC_VERSION_MAX];
  mb_sync_version(st, v);
  if (strcmp(v, expect) != 0) return mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' changed on the host meanwhile", rel);
  return 0;
}

int mb_sync_place(const mb_sync_root *r, const char *staged, const char *rel, const char *expect,
                  struct mb_error *e) {
  const char *sleaf, *leaf;
  int sfd = mb_sync_open_parent(r, staged, 0, &sleaf, e);
  if (sfd < 0) return -1;
  int pfd = mb_sync_open_parent(r, rel, 0, &leaf, e);
  if (pfd < 0) {
    close(sfd);
    return -1;
  }
  struct stat st;
  int exists, rc = check_expect(pfd, leaf, rel, expect, &st, &exists, e);
  if (rc == 0 && exists && S_ISDIR(st.st_mode))
    rc = mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' is a directory on the host", rel);
  if (rc == 0 && renameat(sfd, sleaf, pfd, leaf) < 0) rc = sys_fail(e, errno, "rename into", rel);
  close(sfd);
  close(pfd);
  return rc;
}

int mb_sync_mkdir(const mb_sync_root *r, const char *rel, unsigned mode, struct mb_error *e) {
  const char *leaf;
  int pfd = mb_sync_open_parent(r, rel, 0, &leaf, e);
  if (pfd < 0) return -1;
  int rc = 0;
  if (mkdirat(pfd, leaf, 0700) < 0 && errno != EEXIST) rc = sys_fail(e, errno, "make directory", rel);
  if (rc == 0) {
    int fd = openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) rc = mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' exists on the host and is not a directory", rel);
    else {
      if (fchmod(fd, mode & 0777) < 0) rc = sys_fail(e, errno, "chmod", rel);
      close(fd);
    }
  }
  close(pfd);
  return rc;
}

int mb_sync_chmod(const mb_sync_root *r, const char *rel, unsigned mode, const char *expect, struct mb_error *e) {
  const char *leaf;
  int pfd = mb_sync_open_parent(r, rel, 0, &leaf, e);
  if (pfd < 0) return -1;
  struct stat st;
  int exists, rc = check_expect(pfd, leaf, rel, expect, &st, &exists, e);
  if (rc == 0 && !exists) rc = mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' is not on the host", rel);
  if (rc == 0 && S_ISLNK(st.st_mode)) rc = mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' is a symbolic link on the host", rel);
  if (rc == 0 && fchmodat(pfd, leaf, mode & 0777, AT_SYMLINK_NOFOLLOW) < 0) rc = sys_fail(e, errno, "chmod", rel);
  close(pfd);
  return rc;
}

int mb_sync_unlink(const mb_sync_root *r, const char *rel, const char *expect, struct mb_error *e) {
  const char *leaf;
  int pfd = mb_sync_open_parent(r, rel, 0, &leaf, e);
  if (pfd < 0) return -1;
  struct stat st;
  int exists, rc = check_expect(pfd, leaf, rel, expect, &st, &exists, e);
  if (rc == 0 && exists && S_ISDIR(st.st_mode))
    rc = mb_error_fail(e, MB_CODE_SYNC_CONFLICT, rel, "'%s' is a directory on the host", rel);
  if (rc == 0 && exists && unlinkat(pfd, leaf, 0) < 0 && errno != ENOENT) rc = sys_fail(e, errno, "remove", rel);
  close(pfd);
  return rc;
}

int mb_sync_rmdir(const mb_sync_root *r, const char *rel, struct mb_error *e) {
  const char *leaf;
  int pfd = mb_sync_open_parent(r, rel, 0, &leaf, e);
  if (pfd < 0) return -1;
  int rc = 0;
  if (unlinkat(pfd, leaf, AT_REMOVEDIR) < 0 && errno != ENOENT) {
    if (errno == ENOTEMPTY || errno == EEXIST)
      rc = mb_error_fail(e, MB_CODE_SYNC_NOT_EMPTY, rel, "directory '%s' is not empty on the host", rel);
    else rc = sys_fail(e, errno, "remove directory", rel);
  }
  close(pfd);
  return rc;
}

int mb_sync_sweep(const mb_sync_root *r) {
  int fd = openat(mb_sync_root_fd(r), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return 0;
  }
  int n = 0;
  struct dirent *de;
  char names[16][256];
  int k = 0;
  while ((de = readdir(d)) && k < 16) {
    long pid;
    char rest[256];
    if (!mb_sync_is_stage_name(de->d_name) || sscanf(de->d_name, STAGE_PREFIX "%ld-%255s", &pid, rest) != 2 || pid <= 0) continue;
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    snprintf(names[k++], sizeof names[0], "%s", de->d_name);
  }
  closedir(d);
  for (int i = 0; i < k; i++)
    if (mb_sync_rmtree(r, names[i], NULL) == 0) n++;
  return n;
}
