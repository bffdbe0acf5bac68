/* layer_merge.c — overlay layers made into one (see layer_merge.h). */
#include "layer_merge.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define OPAQUE_XATTR "user.overlay.opaque"   /* sandboxd mounts its overlays with userxattr */

typedef struct {
  const int *fds;
  int dst;
  const char *const *skip;
  char path[LM_PATH_MAX];              /* the directory being merged, relative to every root */
  char *err;
  size_t errlen;
  bool failed;
} mctx;

__attribute__((format(printf, 3, 4))) static int fail(mctx *m, const char *name, const char *fmt, ...) {
  if (m->failed) return -1;
  m->failed = true;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(m->err, m->errlen, "%s%s%s: %s", m->path, name ? "/" : "", name ? name : "", msg);
  return -1;
}

/* /proc/self/fd/<dirfd>/<path>: what l*xattr take (they do not follow the last symlink). */
static void proc_path(char *out, size_t cap, int dirfd, const char *path) { snprintf(out, cap, "/proc/self/fd/%d/%s", dirfd, path); }

static bool xattr_is(int dirfd, const char *path, const char *name, char want) {
  char p[LM_PATH_MAX + 64], v[4];
  proc_path(p, sizeof p, dirfd, path);
  ssize_t n = lgetxattr(p, name, v, sizeof v);
  return n == 1 && v[0] == want;
}

int lm_is_whiteout(int dirfd, const char *path, const struct stat *st) {
  if (S_ISCHR(st->st_mode) && major(st->st_rdev) == 0 && minor(st->st_rdev) == 0) return 1;
  if (!S_ISREG(st->st_mode) || st->st_size != 0) return 0;
  char p[LM_PATH_MAX + 64];
  proc_path(p, sizeof p, dirfd, path);
  return lgetxattr(p, "user.overlay.whiteout", NULL, 0) >= 0 || lgetxattr(p, "trusted.overlay.whiteout", NULL, 0) >= 0;
}

static bool is_opaque(int dirfd, const char *path) {
  return xattr_is(dirfd, path, "user.overlay.opaque", 'y') || xattr_is(dirfd, path, "trusted.overlay.opaque", 'y');
}

static bool skipped(const mctx *m, const char *name) {
  if (!strcmp(name, "user.overlay.opaque") || !strcmp(name, "trusted.overlay.opaque")) return true;   /* decided by the merge */
  for (const char *const *s = m->skip; s && *s; s++)
    if (!strcmp(*s, name)) return true;
  return false;
}

/* The directory's extended attributes from layer fd onto dst (both at m->path). */
static int copy_xattrs(mctx *m, int fd) {
  char sp[LM_PATH_MAX + 64], dp[LM_PATH_MAX + 64];
  proc_path(sp, sizeof sp, fd, m->path);
  proc_path(dp, sizeof dp, m->dst, m->path);
  ssize_t n = llistxattr(sp, NULL, 0);
  if (n <= 0) return n < 0 && errno != ENOTSUP ? fail(m, NULL, "listing extended attributes: %s", strerror(errno)) : 0;
  char *names = malloc((size_t)n + 1), *val = malloc(65536);
  int rc = 0;
  if (!names || !val) { rc = fail(m, NULL, "out of memory"); goto out; }
  n = llistxattr(sp, names, (size_t)n);
  if (n < 0) { rc = fail(m, NULL, "listing extended attributes: %s", strerror(errno)); goto out; }
  names[n] = 0;
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (skipped(m, k)) continue;
    ssize_t vl = lgetxattr(sp, k, val, 65536);
    if (vl < 0) { rc = fail(m, NULL, "reading attribute %s: %s", k, strerror(errno)); goto out; }
    if (lsetxattr(dp, k, val, (size_t)vl, 0) != 0) { rc = fail(m, NULL, "setting attribute %s: %s", k, strerror(errno)); goto out; }
  }
out:
  free(names);
  free(val);
  return rc;
}

/* The names in directory m->path of layer fd, NUL-separated, into *out (free it); 0 or -1. */
static int list_names(mctx *m, int fd, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int d = openat(fd, m->path[0] ? m->path : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d < 0) return fail(m, NULL, "opening the directory: %s", strerror(errno));
  DIR *dh = fdopendir(d);
  if (!dh) { close(d); return fail(m, NULL, "opening the directory: %s", strerror(errno)); }
  size_t cap = 0;
  char *buf = NULL;
  int rc = 0;
  for (struct dirent *de; (de = readdir(dh));) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    size_t l = strlen(de->d_name) + 1;
    if (*len + l > LM_MAX_DIR_NAMES) { rc = fail(m, NULL, "more than %u bytes of names", LM_MAX_DIR_NAMES); break; }
    if (*len + l > cap) {
      size_t nc = cap ? cap * 2 : 4096;
      while (nc < *len + l) nc *= 2;
      char *nb = realloc(buf, nc);
      if (!nb) { rc = fail(m, NULL, "out of memory"); break; }
      buf = nb;
      cap = nc;
    }
    memcpy(buf + *len, de->d_name, l);
    *len += l;
  }
  closedir(dh);
  if (rc != 0) { free(buf); *len = 0; return -1; }
  *out = buf;
  return 0;
}

/* m->path + "/" + name into child (relative to every root). */
static int join(mctx *m, const char *name, char *child, size_t cap) {
  int k = snprintf(child, cap, "%s%s%s", m->path, m->path[0] ? "/" : "", name);
  if (k < 0 || (size_t)k >= cap) return fail(m, name, "the path is longer than %d bytes", LM_PATH_MAX - 1);
  return 0;
}

/* Makes directory m->path in dst as the merge of that directory in layers idx[0..k-1] (top
 * first, each holding it as a directory); opaque: the merged directory hides what is below. */
static int merge_dir(mctx *m, const int *idx, size_t k, bool opaque) {
  int top = m->fds[idx[0]];
  struct stat st;
  if (fstatat(top, m->path, &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(m, NULL, "stat: %s", strerror(errno));
  if (mkdirat(m->dst, m->path, 0700) != 0) return fail(m, NULL, "mkdir: %s", strerror(errno));
  if (copy_xattrs(m, top) != 0) return -1;
  if (opaque) {
    char dp[LM_PATH_MAX + 64];
    proc_path(dp, sizeof dp, m->dst, m->path);
    if (lsetxattr(dp, OPAQUE_XATTR, "y", 1, 0) != 0) return fail(m, NULL, "marking it opaque: %s", strerror(errno));
  }
  int *sub = malloc(k * sizeof *sub);
  if (!sub) return fail(m, NULL, "out of memory");
  size_t plen = strlen(m->path);
  int rc = 0;
  for (size_t p = 0; p < k && rc == 0; p++) {
    char *names;
    size_t len;
    if (list_names(m, m->fds[idx[p]], &names, &len) != 0) { rc = -1; break; }
    for (size_t off = 0; off < len && rc == 0; off += strlen(names + off) + 1) {
      const char *name = names + off;
      char child[LM_PATH_MAX];
      if (join(m, name, child, sizeof child) != 0) { rc = -1; break; }
      bool seen = false;   /* a layer above has the name: handled there */
      struct stat cs;
      for (size_t q = 0; q < p && !seen; q++) seen = fstatat(m->fds[idx[q]], child, &cs, AT_SYMLINK_NOFOLLOW) == 0;
      if (seen) continue;
      int fd = m->fds[idx[p]];
      if (fstatat(fd, child, &cs, AT_SYMLINK_NOFOLLOW) != 0) { rc = fail(m, name, "stat: %s", strerror(errno)); break; }
      if (!S_ISDIR(cs.st_mode)) {   /* a file, link, device or whiteout: the layer's own inode */
        if (linkat(fd, child, m->dst, child, 0) != 0) rc = fail(m, name, "link: %s", strerror(errno));
        continue;
      }
      /* A directory: merged with the same directory of the layers below, down to one that hides
       * what is under it (opaque, or not a directory there: then so is the merge). */
      size_t nk = 0;
      sub[nk++] = idx[p];
      bool opq = is_opaque(fd, child);
      for (size_t r = p + 1; r < k && !opq; r++) {
        struct stat ls;
        int lf = m->fds[idx[r]];
        if (fstatat(lf, child, &ls, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISDIR(ls.st_mode) || lm_is_whiteout(lf, child, &ls)) { opq = true; break; }
        sub[nk++] = idx[r];
        opq = is_opaque(lf, child);
      }
      memcpy(m->path, child, strlen(child) + 1);
      rc = merge_dir(m, sub, nk, opq);
      m->path[plen] = 0;
    }
    free(names);
  }
  free(sub);
  if (rc != 0) return -1;
  /* Last: its owner, mode and times (adding entries changed them; a mode without write for its
   * owner would have refused them). */
  if (fchownat(m->dst, m->path, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM)
    return fail(m, NULL, "chown: %s", strerror(errno));
  if (fchmodat(m->dst, m->path, st.st_mode & 07777, 0) != 0) return fail(m, NULL, "chmod: %s", strerror(errno));
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  if (utimensat(m->dst, m->path, ts, AT_SYMLINK_NOFOLLOW) != 0) return fail(m, NULL, "setting times: %s", strerror(errno));
  return 0;
}

int lm_merge(const int *layer_fds, size_t n, const char *tree, int dst_dirfd, const char *const *skip_xattrs, char *err,
             size_t errlen) {
  mctx m = {.fds = layer_fds, .dst = dst_dirfd, .skip = skip_xattrs, .err = err, .errlen = errlen};
  if (n == 0 || n > LM_MAX_LAYERS) { snprintf(err, errlen, "%zu layers to merge (1 to %d)", n, LM_MAX_LAYERS); return -1; }
  if (!tree[0] || strchr(tree, '/') || strlen(tree) >= sizeof m.path) { snprintf(err, errlen, "'%s' is not a tree name", tree); return -1; }
  snprintf(m.path, sizeof m.path, "%s", tree);
  int idx[LM_MAX_LAYERS];
  size_t k = 0;
  bool opq = false;
  for (size_t i = 0; i < n && !opq; i++) {
    struct stat st;
    if (fstatat(layer_fds[i], tree, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISDIR(st.st_mode)) { snprintf(err, errlen, "%s: not a directory in layer %zu", tree, i); return -1; }
    idx[k++] = (int)i;
    opq = is_opaque(layer_fds[i], tree);
  }
  if (k == 0) { snprintf(err, errlen, "%s: in none of the layers", tree); return -1; }
  return merge_dir(&m, idx, k, opq);
}
