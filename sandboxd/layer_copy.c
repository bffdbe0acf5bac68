/* layer_copy.c — exact copy of a directory tree (see layer_copy.h). */
#include "layer_copy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define COPY_BUF (256u << 10)   /* read/write fallback, per regular file */

/* One directory of the walk: its names (NUL-separated), the next one to copy, its identity. */
typedef struct {
  char *names;
  size_t len, pos;
  const char *cur;       /* the entry being copied (for error messages and the climb back) */
  struct stat st;
} level;

typedef struct {
  const lc_opts *opts;
  lc_stats *stats;
  dev_t dev;             /* the source's file system: never left */
  int links;             /* scratch directory of first copies of multiply linked inodes */
  level *lv;
  int depth;             /* lv[0..depth] are open */
  size_t names_bytes;
  char *err;
  size_t errlen;
  bool failed;
} walk;

/* "a/b/c: message" for the entries being copied (a path too long keeps its end: ".../b/c"). */
__attribute__((format(printf, 2, 3))) static void fail(walk *w, const char *fmt, ...) {
  if (w->failed) return;
  w->failed = true;
  int e = errno;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t mlen = strlen(msg), room = w->errlen > mlen + 8 ? w->errlen - mlen - 8 : 0;
  int top = -1;                         /* the deepest level naming an entry */
  for (int i = 0; w->lv && i <= w->depth && w->lv[i].cur; i++) top = i;
  int first = top + 1;                  /* the shallowest level that still fits */
  size_t used = 0;
  while (first > 0 && used + strlen(w->lv[first - 1].cur) + 1 <= room) used += strlen(w->lv[--first].cur) + 1;
  size_t n = 0;
  w->err[0] = 0;
  if (top < 0) n = (size_t)snprintf(w->err, w->errlen, ".");
  else if (first > 0) n = (size_t)snprintf(w->err, w->errlen, "...");
  for (int i = first; i <= top && n < w->errlen; i++)
    n += (size_t)snprintf(w->err + n, w->errlen - n, "%s%s", n ? "/" : "", w->lv[i].cur);
  if (n < w->errlen) snprintf(w->err + n, w->errlen - n, ": %s", msg);
  errno = e;
}

static bool skipped(const walk *w, const char *name) {
  if (!w->opts || !w->opts->skip_xattrs) return false;
  for (const char *const *s = w->opts->skip_xattrs; *s; s++)
    if (!strcmp(*s, name)) return true;
  return false;
}

/* Extended attributes, through fds when both are real (regular files, directories), else through
 * /proc/self/fd/<dir>/<name> paths, which l*xattr resolve without following the last symlink. */
typedef struct { int fd; char path[64 + 256]; } xref;

static ssize_t x_list(const xref *x, char *buf, size_t n) { return x->fd >= 0 ? flistxattr(x->fd, buf, n) : llistxattr(x->path, buf, n); }
static ssize_t x_get(const xref *x, const char *k, void *v, size_t n) { return x->fd >= 0 ? fgetxattr(x->fd, k, v, n) : lgetxattr(x->path, k, v, n); }
static int x_set(const xref *x, const char *k, const void *v, size_t n) { return x->fd >= 0 ? fsetxattr(x->fd, k, v, n, 0) : lsetxattr(x->path, k, v, n, 0); }

static int copy_xattrs(walk *w, const xref *from, const xref *to) {
  char *list = NULL, *val = NULL;
  int rc = -1;
  ssize_t n = x_list(from, NULL, 0);
  if (n < 0) {
    if (errno == ENOTSUP || errno == EOPNOTSUPP) return 0;
    fail(w, "listing extended attributes: %s", strerror(errno));
    return -1;
  }
  if (n == 0) return 0;
  if (n > XATTR_LIST_MAX) n = XATTR_LIST_MAX;
  list = malloc((size_t)n);
  val = malloc(XATTR_SIZE_MAX);
  if (!list || !val) { errno = ENOMEM; fail(w, "listing extended attributes: %s", strerror(errno)); goto out; }
  n = x_list(from, list, (size_t)n);
  if (n < 0) { fail(w, "listing extended attributes: %s", strerror(errno)); goto out; }
  for (ssize_t off = 0; off < n; off += (ssize_t)strlen(list + off) + 1) {
    const char *k = list + off;
    if (skipped(w, k)) continue;
    ssize_t vn = x_get(from, k, val, XATTR_SIZE_MAX);
    if (vn < 0) {
      if (errno == ENODATA) continue;   /* gone between list and get */
      fail(w, "reading extended attribute %s: %s", k, strerror(errno));
      goto out;
    }
    if (x_set(to, k, val, (size_t)vn) != 0) { fail(w, "setting extended attribute %s: %s", k, strerror(errno)); goto out; }
  }
  rc = 0;
out:
  free(list);
  free(val);
  return rc;
}

static void proc_path(char *out, size_t n, int dirfd, const char *name) { snprintf(out, n, "/proc/self/fd/%d/%s", dirfd, name); }

/* Bytes [from, to) of s into d at the same offsets: copy_file_range (the kernel copies, or shares
 * blocks where the file system can), else read/write. */
static int copy_range(walk *w, int s, int d, off_t from, off_t to, char **buf) {
  off_t in = from, out = from;
  bool plain = false;
  while (in < to) {
    size_t want = (size_t)(to - in) > (1u << 30) ? (1u << 30) : (size_t)(to - in);
    if (!plain) {
      ssize_t k = copy_file_range(s, &in, d, &out, want, 0);
      if (k > 0) { w->stats->bytes += (uint64_t)k; continue; }
      if (k == 0) { errno = EIO; fail(w, "the file shrank while it was copied"); return -1; }
      if (errno == EINTR) continue;
      if (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS) {
        fail(w, "copying contents: %s", strerror(errno));
        return -1;
      }
      plain = true;
    }
    if (!*buf && !(*buf = malloc(COPY_BUF))) { errno = ENOMEM; fail(w, "copying contents: %s", strerror(errno)); return -1; }
    size_t chunk = want > COPY_BUF ? COPY_BUF : want;
    ssize_t r = pread(s, *buf, chunk, in);
    if (r < 0) { if (errno == EINTR) continue; fail(w, "reading: %s", strerror(errno)); return -1; }
    if (r == 0) { errno = EIO; fail(w, "the file shrank while it was copied"); return -1; }
    for (ssize_t done = 0; done < r;) {
      ssize_t k = pwrite(d, *buf + done, (size_t)(r - done), out + done);
      if (k < 0) { if (errno == EINTR) continue; fail(w, "writing: %s", strerror(errno)); return -1; }
      done += k;
    }
    in += r;
    out += r;
    w->stats->bytes += (uint64_t)r;
  }
  return 0;
}

/* Contents of a regular file: one clone if the file system shares blocks, else its data extents
 * only (holes stay holes), then the length. */
static int copy_data(walk *w, int s, int d, off_t size) {
  if (size == 0) return 0;
  if (ioctl(d, FICLONE, s) == 0) { w->stats->bytes += (uint64_t)size; return 0; }
  char *buf = NULL;
  int rc = -1;
  for (off_t off = 0; off < size;) {
    off_t data = lseek(s, off, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;                 /* only a hole remains */
      if (errno != EINVAL && errno != EOPNOTSUPP) { fail(w, "seeking data: %s", strerror(errno)); goto out; }
      data = off;                                /* no SEEK_DATA here: copy everything */
    }
    if (data >= size) break;
    off_t hole = lseek(s, data, SEEK_HOLE);
    if (hole < 0 || hole > size) hole = size;
    if (copy_range(w, s, d, data, hole, &buf) != 0) goto out;
    off = hole;
  }
  if (ftruncate(d, size) != 0) { fail(w, "setting the length: %s", strerror(errno)); goto out; }
  rc = 0;
out:
  free(buf);
  return rc;
}

static void times_of(const struct stat *st, struct timespec t[2]) {
  t[0] = st->st_atim;
  t[1] = st->st_mtim;
}

/* One entry that is not a directory, into dfd under the same name. */
static int copy_leaf(walk *w, int sfd, int dfd, const char *name, const struct stat *st) {
  char key[64];
  if (st->st_nlink > 1) {   /* a hard link: the first copy of its inode is kept under `key` */
    snprintf(key, sizeof key, "%jx-%jx", (uintmax_t)st->st_dev, (uintmax_t)st->st_ino);
    if (linkat(w->links, key, dfd, name, 0) == 0) { w->stats->links++; return 0; }
    if (errno != ENOENT) { fail(w, "linking: %s", strerror(errno)); return -1; }
  }
  struct timespec t[2];
  times_of(st, t);
  mode_t perm = st->st_mode & 07777;
  if (S_ISREG(st->st_mode)) {
    int s = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NOATIME);
    if (s < 0 && errno == EPERM) s = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (s < 0) { fail(w, "opening: %s", strerror(errno)); return -1; }
    int d = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (d < 0) { fail(w, "creating: %s", strerror(errno)); close(s); return -1; }
    xref xs = {s, ""}, xd = {d, ""};
    int rc = -1;
    struct stat now;
    if (fstat(s, &now) != 0) fail(w, "opening: %s", strerror(errno));
    else if (now.st_ino != st->st_ino) { errno = ESTALE; fail(w, "replaced while it was copied"); }
    else if (copy_data(w, s, d, st->st_size) != 0) {}
    /* chown first: it clears set-id bits and file capabilities, which come back after it */
    else if (fchown(d, st->st_uid, st->st_gid) != 0) fail(w, "setting the owner: %s", strerror(errno));
    else if (copy_xattrs(w, &xs, &xd) != 0) {}
    else if (fchmod(d, perm) != 0) fail(w, "setting the mode: %s", strerror(errno));
    else if (futimens(d, t) != 0) fail(w, "setting the times: %s", strerror(errno));
    else rc = 0;
    close(s);
    if (close(d) != 0 && rc == 0) { fail(w, "writing: %s", strerror(errno)); rc = -1; }
    if (rc) return -1;
    w->stats->files++;
  } else {
    if (S_ISLNK(st->st_mode)) {
      char target[4097];
      if (st->st_size <= 0 || st->st_size >= (off_t)sizeof target) { errno = ENAMETOOLONG; fail(w, "symlink target of %jd bytes", (intmax_t)st->st_size); return -1; }
      ssize_t n = readlinkat(sfd, name, target, sizeof target);
      if (n < 0) { fail(w, "reading the symlink: %s", strerror(errno)); return -1; }
      if (n != st->st_size) { errno = ESTALE; fail(w, "the symlink changed while it was copied"); return -1; }
      target[n] = 0;
      if (symlinkat(target, dfd, name) != 0) { fail(w, "creating the symlink: %s", strerror(errno)); return -1; }
    } else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) || S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode)) {
      /* devices (an overlay whiteout is the character device 0:0), FIFOs and sockets */
      if (mknodat(dfd, name, (st->st_mode & S_IFMT) | 0600, st->st_rdev) != 0) {
        fail(w, "creating the %s: %s", S_ISFIFO(st->st_mode) ? "FIFO" : S_ISSOCK(st->st_mode) ? "socket" : "device node",
             strerror(errno));
        return -1;
      }
    } else {
      errno = EINVAL;
      fail(w, "unknown file type %o", (unsigned)(st->st_mode & S_IFMT));
      return -1;
    }
    xref xs = {-1, ""}, xd = {-1, ""};
    proc_path(xs.path, sizeof xs.path, sfd, name);
    proc_path(xd.path, sizeof xd.path, dfd, name);
    if (fchownat(dfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) != 0) { fail(w, "setting the owner: %s", strerror(errno)); return -1; }
    if (copy_xattrs(w, &xs, &xd) != 0) return -1;
    if (!S_ISLNK(st->st_mode) && fchmodat(dfd, name, perm, 0) != 0) { fail(w, "setting the mode: %s", strerror(errno)); return -1; }
    if (utimensat(dfd, name, t, AT_SYMLINK_NOFOLLOW) != 0) { fail(w, "setting the times: %s", strerror(errno)); return -1; }
    w->stats->others++;
  }
  if (st->st_nlink > 1 && linkat(dfd, name, w->links, key, 0) != 0) { fail(w, "recording a hard link: %s", strerror(errno)); return -1; }
  return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every name of the directory fd (not "." or ".."), sorted, into lv. */
static int read_names(walk *w, int fd, level *lv) {
  int dup_fd = dup(fd);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) { if (dup_fd >= 0) close(dup_fd); fail(w, "listing: %s", strerror(errno)); return -1; }
  rewinddir(d);
  size_t cap = 0, count = 0;
  lv->names = NULL;
  lv->len = lv->pos = 0;
  int rc = 0;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) { if (errno) { fail(w, "listing: %s", strerror(errno)); rc = -1; } break; }
    const char *n = de->d_name;
    if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
    size_t k = strlen(n) + 1;
    if (w->names_bytes + k > LC_MAX_NAMES_BYTES) {
      errno = E2BIG;
      fail(w, "the directories being copied list more than %u bytes of names", LC_MAX_NAMES_BYTES);
      rc = -1;
      break;
    }
    if (lv->len + k > cap) {
      size_t nc = cap ? cap * 2 : 4096;
      while (nc < lv->len + k) nc *= 2;
      char *p = realloc(lv->names, nc);
      if (!p) { errno = ENOMEM; fail(w, "listing: %s", strerror(errno)); rc = -1; break; }
      lv->names = p;
      cap = nc;
    }
    memcpy(lv->names + lv->len, n, k);
    lv->len += k;
    w->names_bytes += k;
    count++;
  }
  closedir(d);
  if (rc) return -1;
  /* sorted, so that copies (and their errors) do not depend on directory order */
  if (count > 1) {
    char **ptrs = malloc(count * sizeof *ptrs), *sorted = malloc(lv->len);
    if (!ptrs || !sorted) { free(ptrs); free(sorted); errno = ENOMEM; fail(w, "listing: %s", strerror(errno)); return -1; }
    size_t i = 0;
    for (size_t off = 0; off < lv->len; off += strlen(lv->names + off) + 1) ptrs[i++] = lv->names + off;
    qsort(ptrs, count, sizeof *ptrs, cmp_names);
    size_t o = 0;
    for (i = 0; i < count; i++) { size_t k = strlen(ptrs[i]) + 1; memcpy(sorted + o, ptrs[i], k); o += k; }
    free(ptrs);
    free(lv->names);
    lv->names = sorted;
  }
  return 0;
}

/* Owner and extended attributes of a copied directory while it is open; its mode and times come
 * once its parent is current again (a read-only mode must not stop the climb, and the times must
 * follow the last change inside it). */
static int finish_dir_open(walk *w, int sfd, int dfd, const struct stat *st) {
  xref xs = {sfd, ""}, xd = {dfd, ""};
  if (fchown(dfd, st->st_uid, st->st_gid) != 0) { fail(w, "setting the owner: %s", strerror(errno)); return -1; }
  return copy_xattrs(w, &xs, &xd);
}

static int finish_dir_at(walk *w, int pdfd, const char *name, const struct stat *st) {
  struct timespec t[2];
  times_of(st, t);
  if (fchmodat(pdfd, name, st->st_mode & 07777, 0) != 0) { fail(w, "setting the mode: %s", strerror(errno)); return -1; }
  if (utimensat(pdfd, name, t, AT_SYMLINK_NOFOLLOW) != 0) { fail(w, "setting the times: %s", strerror(errno)); return -1; }
  w->stats->dirs++;
  return 0;
}

static int open_dir(int at, const char *name) { return openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }

static bool same(const struct stat *a, const struct stat *b) { return a->st_dev == b->st_dev && a->st_ino == b->st_ino; }

static void rm_links(int dst_dirfd, const char *links_name, int links) {
  if (links < 0) return;
  int dup_fd = dup(links);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
      if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) (void)unlinkat(links, de->d_name, 0);
    closedir(d);
  } else if (dup_fd >= 0) close(dup_fd);
  close(links);
  (void)unlinkat(dst_dirfd, links_name, AT_REMOVEDIR);
}

int lc_copy_tree(int src_dirfd, const char *src, int dst_dirfd, const char *dst, const lc_opts *opts,
                 lc_stats *stats, char *err, size_t errlen) {
  lc_stats dummy;
  char noerr[8];
  if (!err || errlen == 0) { err = noerr; errlen = sizeof noerr; }
  walk w = {.opts = opts, .stats = stats ? stats : &dummy, .links = -1, .err = err, .errlen = errlen};
  memset(w.stats, 0, sizeof *w.stats);
  err[0] = 0;
  char links_name[300];
  if (snprintf(links_name, sizeof links_name, ".%s.links", dst) >= (int)sizeof links_name || strchr(dst, '/')) {
    snprintf(err, errlen, "%s: the copy's name must be one short path component", dst);
    errno = EINVAL;
    return -1;
  }
  int sfd = -1, dfd = -1, rc = -1;
  struct stat rst;
  if (fstatat(src_dirfd, src, &rst, AT_SYMLINK_NOFOLLOW) != 0) { snprintf(err, errlen, "%s: %s", src, strerror(errno)); return -1; }
  if (!S_ISDIR(rst.st_mode)) { errno = ENOTDIR; snprintf(err, errlen, "%s: not a directory", src); return -1; }
  w.dev = rst.st_dev;
  w.lv = calloc(LC_MAX_DEPTH + 1, sizeof *w.lv);
  if (!w.lv) { errno = ENOMEM; snprintf(err, errlen, "%s", strerror(errno)); return -1; }
  if (mkdirat(dst_dirfd, links_name, 0700) != 0 || (w.links = open_dir(dst_dirfd, links_name)) < 0) {
    snprintf(err, errlen, "%s: %s", links_name, strerror(errno));
    goto out;
  }
  if (mkdirat(dst_dirfd, dst, 0700) != 0) { snprintf(err, errlen, "%s: %s", dst, strerror(errno)); goto out; }
  sfd = open_dir(src_dirfd, src);
  dfd = open_dir(dst_dirfd, dst);
  struct stat now;
  errno = 0;
  if (sfd < 0 || dfd < 0 || fstat(sfd, &now) != 0 || !same(&now, &rst)) {
    snprintf(err, errlen, "%s: %s", sfd < 0 ? src : dst, errno ? strerror(errno) : "replaced while it was copied");
    goto out;
  }
  w.depth = 0;
  w.lv[0].st = rst;
  if (read_names(&w, sfd, &w.lv[0]) != 0) goto out;
  for (;;) {
    level *lv = &w.lv[w.depth];
    if (lv->pos < lv->len) {
      const char *name = lv->names + lv->pos;
      lv->pos += strlen(name) + 1;
      lv->cur = name;
      struct stat st;
      if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) { fail(&w, "%s", strerror(errno)); goto out; }
      if (st.st_dev != w.dev) { errno = EXDEV; fail(&w, "another file system is mounted here"); goto out; }
      if (!S_ISDIR(st.st_mode)) {
        if (copy_leaf(&w, sfd, dfd, name, &st) != 0) goto out;
        lv->cur = NULL;
        continue;
      }
      if (w.depth + 1 > LC_MAX_DEPTH) { errno = ELOOP; fail(&w, "directories nested deeper than %d", LC_MAX_DEPTH); goto out; }
      if (mkdirat(dfd, name, 0700) != 0) { fail(&w, "creating the directory: %s", strerror(errno)); goto out; }
      errno = 0;
      int ns = open_dir(sfd, name), nd = ns >= 0 ? open_dir(dfd, name) : -1;
      if (ns < 0 || nd < 0 || fstat(ns, &now) != 0 || !same(&now, &st)) {
        if (!errno) errno = ESTALE;
        fail(&w, "opening the directory: %s", strerror(errno));
        if (ns >= 0) close(ns);
        if (nd >= 0) close(nd);
        goto out;
      }
      close(sfd);
      close(dfd);
      sfd = ns;
      dfd = nd;
      w.depth++;
      w.lv[w.depth] = (level){.st = st};
      if (read_names(&w, sfd, &w.lv[w.depth]) != 0) goto out;
      continue;
    }
    /* this directory is complete */
    if (finish_dir_open(&w, sfd, dfd, &lv->st) != 0) goto out;
    struct stat done = lv->st;
    free(lv->names);
    w.names_bytes -= lv->len;
    *lv = (level){0};
    if (w.depth == 0) {
      struct timespec t[2];
      times_of(&rst, t);
      if (fchmod(dfd, rst.st_mode & 07777) != 0 || futimens(dfd, t) != 0) { fail(&w, "setting the mode and times: %s", strerror(errno)); goto out; }
      w.stats->dirs++;
      rc = 0;
      goto out;
    }
    int ps = open_dir(sfd, ".."), pd = ps >= 0 ? open_dir(dfd, "..") : -1;
    w.depth--;
    errno = 0;
    if (ps < 0 || pd < 0 || fstat(ps, &now) != 0 || !same(&now, &w.lv[w.depth].st)) {
      if (!errno) errno = ESTALE;
      fail(&w, "returning to the parent directory: %s", strerror(errno));
      if (ps >= 0) close(ps);
      if (pd >= 0) close(pd);
      goto out;
    }
    close(sfd);
    close(dfd);
    sfd = ps;
    dfd = pd;
    if (finish_dir_at(&w, dfd, w.lv[w.depth].cur, &done) != 0) goto out;
    w.lv[w.depth].cur = NULL;
  }
out:
  if (sfd >= 0) close(sfd);
  if (dfd >= 0) close(dfd);
  for (int i = 0; i <= LC_MAX_DEPTH && w.lv; i++) free(w.lv[i].names);
  free(w.lv);
  int e = errno;
  rm_links(dst_dirfd, links_name, w.links);
  errno = e;
  return rc;
}

/* ---- in place (lc_strip_tree) ---- */

/* The skipped attributes of one entry removed (an inode reached again by another hard link has
 * them no more: ENODATA is fine). */
static int strip_xattrs(walk *w, const xref *x) {
  if (!w->opts || !w->opts->skip_xattrs) return 0;
  char list[4096];
  ssize_t n = x_list(x, list, sizeof list);
  if (n < 0 && errno == ERANGE) {   /* more names than the buffer: ask for the size, then read them */
    ssize_t want = x_list(x, NULL, 0);
    if (want < 0) { fail(w, "listing extended attributes: %s", strerror(errno)); return -1; }
    char *big = malloc((size_t)want + 1);
    if (!big) { errno = ENOMEM; fail(w, "listing extended attributes: %s", strerror(errno)); return -1; }
    n = x_list(x, big, (size_t)want);
    int rc = 0;
    if (n < 0) { fail(w, "listing extended attributes: %s", strerror(errno)); rc = -1; }
    for (ssize_t off = 0; rc == 0 && off < n; off += (ssize_t)strlen(big + off) + 1)
      if (skipped(w, big + off) && (x->fd >= 0 ? fremovexattr(x->fd, big + off) : lremovexattr(x->path, big + off)) != 0 &&
          errno != ENODATA) {
        fail(w, "removing extended attribute %s: %s", big + off, strerror(errno));
        rc = -1;
      }
    free(big);
    return rc;
  }
  if (n < 0) {
    if (errno == ENOTSUP || errno == EOPNOTSUPP) return 0;
    fail(w, "listing extended attributes: %s", strerror(errno));
    return -1;
  }
  for (ssize_t off = 0; off < n; off += (ssize_t)strlen(list + off) + 1) {
    const char *k = list + off;
    if (!skipped(w, k)) continue;
    if ((x->fd >= 0 ? fremovexattr(x->fd, k) : lremovexattr(x->path, k)) != 0 && errno != ENODATA) {
      fail(w, "removing extended attribute %s: %s", k, strerror(errno));
      return -1;
    }
  }
  return 0;
}

/* A directory opened for reading without changing its access time where we may (its owner, or
 * CAP_FOWNER); elsewhere the caller gives the time back. */
static int open_dir_quiet(int at, const char *name) {
  int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = open_dir(at, name);
  return fd;
}

static bool same_time(struct timespec a, struct timespec b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

/* A walked directory: its skipped attributes removed, its times as they were before the walk. */
static int strip_dir(walk *w, int fd, const struct stat *before) {
  xref x = {fd, ""};
  if (strip_xattrs(w, &x) != 0) return -1;
  struct stat now;
  if (fstat(fd, &now) != 0) { fail(w, "%s", strerror(errno)); return -1; }
  if (!same_time(now.st_atim, before->st_atim) || !same_time(now.st_mtim, before->st_mtim)) {
    struct timespec t[2];
    times_of(before, t);
    if (futimens(fd, t) != 0) { fail(w, "setting the times: %s", strerror(errno)); return -1; }
  }
  w->stats->dirs++;
  return 0;
}

int lc_strip_tree(int dirfd, const char *dir, const lc_opts *opts, lc_stats *stats, char *err, size_t errlen) {
  lc_stats dummy;
  char noerr[8];
  if (!err || errlen == 0) { err = noerr; errlen = sizeof noerr; }
  walk w = {.opts = opts, .stats = stats ? stats : &dummy, .links = -1, .err = err, .errlen = errlen};
  memset(w.stats, 0, sizeof *w.stats);
  err[0] = 0;
  struct stat rst, now;
  if (fstatat(dirfd, dir, &rst, AT_SYMLINK_NOFOLLOW) != 0) { snprintf(err, errlen, "%s: %s", dir, strerror(errno)); return -1; }
  if (!S_ISDIR(rst.st_mode)) { errno = ENOTDIR; snprintf(err, errlen, "%s: not a directory", dir); return -1; }
  w.dev = rst.st_dev;
  w.lv = calloc(LC_MAX_DEPTH + 1, sizeof *w.lv);
  if (!w.lv) { errno = ENOMEM; snprintf(err, errlen, "%s", strerror(errno)); return -1; }
  int fd = open_dir_quiet(dirfd, dir), rc = -1;
  errno = 0;
  if (fd < 0 || fstat(fd, &now) != 0 || !same(&now, &rst)) {
    snprintf(err, errlen, "%s: %s", dir, errno ? strerror(errno) : "replaced while it was walked");
    goto out;
  }
  w.lv[0].st = rst;
  if (read_names(&w, fd, &w.lv[0]) != 0) goto out;
  for (;;) {
    level *lv = &w.lv[w.depth];
    if (lv->pos < lv->len) {
      const char *name = lv->names + lv->pos;
      lv->pos += strlen(name) + 1;
      lv->cur = name;
      struct stat st;
      if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) { fail(&w, "%s", strerror(errno)); goto out; }
      if (st.st_dev != w.dev) { errno = EXDEV; fail(&w, "another file system is mounted here"); goto out; }
      if (!S_ISDIR(st.st_mode)) {
        xref x = {-1, ""};
        proc_path(x.path, sizeof x.path, fd, name);
        if (strip_xattrs(&w, &x) != 0) goto out;
        if (st.st_nlink > 1) w.stats->links++;
        if (S_ISREG(st.st_mode)) w.stats->files++;
        else w.stats->others++;
        lv->cur = NULL;
        continue;
      }
      if (w.depth + 1 > LC_MAX_DEPTH) { errno = ELOOP; fail(&w, "directories nested deeper than %d", LC_MAX_DEPTH); goto out; }
      errno = 0;
      int nfd = open_dir_quiet(fd, name);
      if (nfd < 0 || fstat(nfd, &now) != 0 || !same(&now, &st)) {
        if (!errno) errno = ESTALE;
        fail(&w, "opening the directory: %s", strerror(errno));
        if (nfd >= 0) close(nfd);
        goto out;
      }
      close(fd);
      fd = nfd;
      w.depth++;
      w.lv[w.depth] = (level){.st = st};
      if (read_names(&w, fd, &w.lv[w.depth]) != 0) goto out;
      continue;
    }
    /* this directory is complete */
    if (strip_dir(&w, fd, &lv->st) != 0) goto out;
    free(lv->names);
    w.names_bytes -= lv->len;
    *lv = (level){0};
    if (w.depth == 0) { rc = 0; goto out; }
    w.depth--;
    errno = 0;
    int pfd = open_dir_quiet(fd, "..");
    if (pfd < 0 || fstat(pfd, &now) != 0 || !same(&now, &w.lv[w.depth].st)) {
      if (!errno) errno = ESTALE;
      fail(&w, "returning to the parent directory: %s", strerror(errno));
      if (pfd >= 0) close(pfd);
      goto out;
    }
    close(fd);
    fd = pfd;
    w.lv[w.depth].cur = NULL;
  }
out:
  if (fd >= 0) close(fd);
  for (int i = 0; i <= LC_MAX_DEPTH && w.lv; i++) free(w.lv[i].names);
  free(w.lv);
  return rc;
}
