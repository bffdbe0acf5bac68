/* test_sbx_layer_copy.c — the exact tree copy snapshot layers are made with
 * (sandboxd/layer_copy.c), against real directory trees: every file type, owners, modes with
 * set-id bits, xattrs of several namespaces (and the ones it must skip), times, hard links,
 * holes; depth with few descriptors; and each refusal, naming the path. And the layer a template
 * step's upper layers *moved* into (layers.c ly_adopt, lc_strip_tree in place) against the one
 * their copy makes (ly_capture): the same, byte for byte, times included. Links no HTTP code. */
#include "mbtest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <ftw.h>

#include "layer_copy.h"
#include "layers.h"

static char base[256];
static int basefd = -1;
static bool root;
static bool cmp_atime;   /* same_tree compares access times too */

/* fmt has one %s: arg (the test's directory). */
static void sh(const char *fmt, const char *arg) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, fmt, arg);
  if (system(cmd) != 0) fprintf(stderr, "     (command failed: %s)\n", cmd);
}

static int put(int dir, const char *name, const char *text, mode_t mode) {
  int fd = openat(dir, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? fchmodat(dir, name, mode, 0) : -1;
}

/* Every xattr of path as "k=v;" pairs, sorted by the order listxattr gives (the same on both sides:
 * both are set in the order read). */
static void xattrs_of(const char *path, char *out, size_t n) {
  char list[4096];
  out[0] = 0;
  ssize_t len = llistxattr(path, list, sizeof list);
  for (ssize_t off = 0; len > 0 && off < len; off += (ssize_t)strlen(list + off) + 1) {
    char v[1024];
    ssize_t vn = lgetxattr(path, list + off, v, sizeof v - 1);
    if (vn < 0) continue;
    v[vn] = 0;
    size_t k = strlen(out);
    snprintf(out + k, n - k, "%s=%s;", list + off, v);
  }
}

/* Compares a and b recursively (metadata, contents, xattrs); reports the first difference. */
static bool same_tree(const char *a, const char *b) {
  struct stat sa, sb;
  if (lstat(a, &sa) != 0 || lstat(b, &sb) != 0) { fprintf(stderr, "     missing %s or %s\n", a, b); return false; }
  bool ok = sa.st_mode == sb.st_mode && sa.st_uid == sb.st_uid && sa.st_gid == sb.st_gid &&
            sa.st_mtim.tv_sec == sb.st_mtim.tv_sec && sa.st_mtim.tv_nsec == sb.st_mtim.tv_nsec &&
            (!cmp_atime || (sa.st_atim.tv_sec == sb.st_atim.tv_sec && sa.st_atim.tv_nsec == sb.st_atim.tv_nsec)) &&
            (S_ISDIR(sa.st_mode) || sa.st_size == sb.st_size) && (S_ISDIR(sa.st_mode) || sa.st_nlink == sb.st_nlink) &&
            ((!S_ISCHR(sa.st_mode) && !S_ISBLK(sa.st_mode)) || sa.st_rdev == sb.st_rdev);
  if (!ok) {
    fprintf(stderr, "     %s: mode %o/%o uid %d/%d gid %d/%d mtime %ld.%ld/%ld.%ld atime %ld.%ld/%ld.%ld size %ld/%ld nlink %ld/%ld\n", a,
            sa.st_mode, sb.st_mode, sa.st_uid, sb.st_uid, sa.st_gid, sb.st_gid, (long)sa.st_mtim.tv_sec, sa.st_mtim.tv_nsec,
            (long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec, (long)sa.st_atim.tv_sec, sa.st_atim.tv_nsec, (long)sb.st_atim.tv_sec,
            sb.st_atim.tv_nsec, (long)sa.st_size, (long)sb.st_size, (long)sa.st_nlink, (long)sb.st_nlink);
    return false;
  }
  char xa[4096], xb[4096];
  xattrs_of(a, xa, sizeof xa);
  xattrs_of(b, xb, sizeof xb);
  if (strcmp(xa, xb)) { fprintf(stderr, "     %s: xattrs '%s' / '%s'\n", a, xa, xb); return false; }
  if (S_ISLNK(sa.st_mode)) {
    char ta[4096], tb[4096];
    ssize_t na = readlink(a, ta, sizeof ta), nb = readlink(b, tb, sizeof tb);
    if (na != nb || memcmp(ta, tb, (size_t)na)) { fprintf(stderr, "     %s: link target differs\n", a); return false; }
  } else if (S_ISREG(sa.st_mode)) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    for (int ca = 0, cb = 0; eq && ca != EOF;) {
      ca = fgetc(fa);
      cb = fgetc(fb);
      eq = ca == cb;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    if (!eq) { fprintf(stderr, "     %s: contents differ\n", a); return false; }
  } else if (S_ISDIR(sa.st_mode)) {
    DIR *d = opendir(a);
    if (!d) return false;
    struct dirent *de;
    int na = 0, nb = 0;
    bool all = true;
    while ((de = readdir(d)) && all) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char pa[4096], pb[4096];
      snprintf(pa, sizeof pa, "%s/%s", a, de->d_name);
      snprintf(pb, sizeof pb, "%s/%s", b, de->d_name);
      all = same_tree(pa, pb);
      na++;
    }
    closedir(d);
    if (!all) return false;
    if ((d = opendir(b))) {
      while ((de = readdir(d))) if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) nb++;
      closedir(d);
    }
    if (na != nb) { fprintf(stderr, "     %s: %d entries, copy has %d\n", a, na, nb); return false; }
  }
  return true;
}

static void test_exact_copy(void) {
  sh("cd %s && mkdir -p src/sub/inner src/ro src/sticky", base);
  char p[600];
  snprintf(p, sizeof p, "%s/src", base);
  int s = open(p, O_RDONLY | O_DIRECTORY);
  CHECK(s >= 0);
  CHECK_INT(put(s, "plain", "hello\n", 0644), 0);
  CHECK_INT(put(s, "empty", "", 0600), 0);
  CHECK_INT(put(s, "setid", "#!/bin/sh\n", 06755), 0);
  CHECK_INT(put(s, "ro/inside", "read-only parent\n", 0444), 0);
  CHECK_INT(fchmodat(s, "ro", 0555, 0), 0);
  CHECK_INT(fchmodat(s, "sticky", 01777, 0), 0);
  CHECK_INT(symlinkat("plain", s, "link"), 0);
  CHECK_INT(symlinkat("/nowhere/at/all", s, "dangling"), 0);
  CHECK_INT(symlinkat("sub", s, "dirlink"), 0);
  CHECK_INT(linkat(s, "plain", s, "hard1", 0), 0);
  CHECK_INT(linkat(s, "plain", s, "sub/inner/hard2", 0), 0);
  CHECK_INT(mkfifoat(s, "fifo", 0640), 0);
  CHECK_INT(setxattr(p, "user.dir", "top", 3, 0), 0);
  snprintf(p, sizeof p, "%s/src/plain", base);
  CHECK_INT(setxattr(p, "user.moonbox", "value", 5, 0), 0);
  CHECK_INT(setxattr(p, "user.overlay.origin", "skip me", 7, 0), 0);   /* skipped by the caller's list */
  CHECK_INT(setxattr(p, "user.empty", "", 0, 0), 0);
  /* a sparse file: 64 MiB with 4 bytes of data */
  int sp = openat(s, "sparse", O_WRONLY | O_CREAT, 0644);
  CHECK(sp >= 0 && pwrite(sp, "tail", 4, 64 << 20) == 4);
  close(sp);
  if (root) {
    CHECK_INT(fchownat(s, "setid", 12345, 23456, 0), 0);
    CHECK_INT(fchmodat(s, "setid", 06755, 0), 0);                   /* chown cleared the set-id bits */
    CHECK_INT(fchownat(s, "link", 777, 778, AT_SYMLINK_NOFOLLOW), 0);
    CHECK_INT(mknodat(s, "whiteout", S_IFCHR | 0, makedev(0, 0)), 0);   /* an overlay whiteout */
    CHECK_INT(mknodat(s, "sock", S_IFSOCK | 0600, 0), 0);
    snprintf(p, sizeof p, "%s/src/sub", base);
    CHECK_INT(setxattr(p, "trusted.overlay.opaque", "y", 1, 0), 0);   /* an opaque directory */
    snprintf(p, sizeof p, "%s/src/whiteout", base);
    CHECK_INT(lsetxattr(p, "trusted.kept", "w", 1, 0), 0);            /* xattrs on a device node */
    snprintf(p, sizeof p, "%s/src/link", base);
    CHECK_INT(lsetxattr(p, "trusted.onlink", "l", 1, 0), 0);          /* and on a symlink itself */
  }
  /* times: in the past, on files, directories and symlinks (set last: they change as we go) */
  struct timespec old[2] = {{1000000000, 123456789}, {1000000001, 987654321}};
  CHECK_INT(utimensat(s, "plain", old, 0), 0);
  CHECK_INT(utimensat(s, "dangling", old, AT_SYMLINK_NOFOLLOW), 0);
  CHECK_INT(utimensat(s, "sub/inner", old, 0), 0);
  CHECK_INT(utimensat(s, "sub", old, 0), 0);
  CHECK_INT(utimensat(s, "ro", old, 0), 0);
  CHECK_INT(utimensat(s, ".", old, 0), 0);
  close(s);

  static const char *const skip[] = {"user.overlay.origin", NULL};
  lc_opts o = {.skip_xattrs = skip};
  lc_stats st;
  char err[1024] = "";
  CHECK_INT(lc_copy_tree(basefd, "src", basefd, "dst", &o, &st, err, sizeof err), 0);
  if (err[0]) fprintf(stderr, "     %s\n", err);
  CHECK_INT(st.links, 2);                  /* hard1 and hard2 linked to the first copy of plain */
  CHECK(st.dirs == 5 && st.files >= 5);
  /* the skipped xattr is the only difference: remove it from the source, then compare everything */
  snprintf(p, sizeof p, "%s/dst/plain", base);
  char v[16];
  CHECK(getxattr(p, "user.overlay.origin", v, sizeof v) < 0 && errno == ENODATA);
  snprintf(p, sizeof p, "%s/src/plain", base);
  CHECK_INT(removexattr(p, "user.overlay.origin"), 0);
  CHECK_INT(utimensat(AT_FDCWD, p, old, 0), 0);   /* removexattr changed ctime only; keep mtime as set */
  char a[600], b[600];
  snprintf(a, sizeof a, "%s/src", base);
  snprintf(b, sizeof b, "%s/dst", base);
  CHECK(same_tree(a, b));
  /* hard links stay links of one inode; the sparse file keeps its holes */
  struct stat h1, h2, pl, sparse;
  snprintf(p, sizeof p, "%s/dst/hard1", base);
  CHECK_INT(stat(p, &h1), 0);
  snprintf(p, sizeof p, "%s/dst/sub/inner/hard2", base);
  CHECK_INT(stat(p, &h2), 0);
  snprintf(p, sizeof p, "%s/dst/plain", base);
  CHECK_INT(stat(p, &pl), 0);
  CHECK(h1.st_ino == pl.st_ino && h2.st_ino == pl.st_ino && pl.st_nlink == 3);
  snprintf(p, sizeof p, "%s/dst/sparse", base);
  CHECK_INT(stat(p, &sparse), 0);
  CHECK(sparse.st_size == (64 << 20) + 4 && sparse.st_blocks * 512 < (1 << 20));
  /* the scratch directory of hard links is gone */
  snprintf(p, sizeof p, "%s/.dst.links", base);
  CHECK(access(p, F_OK) != 0 && errno == ENOENT);
}

static void test_refusals(void) {
  char err[1024];
  /* the copy must not exist yet; the source must be a directory */
  CHECK_INT(lc_copy_tree(basefd, "src", basefd, "dst", NULL, NULL, err, sizeof err), -1);
  CHECK_HAS(err, "dst: File exists");
  CHECK_INT(lc_copy_tree(basefd, "src/plain", basefd, "x", NULL, NULL, err, sizeof err), -1);
  CHECK_HAS(err, "src/plain: not a directory");
  CHECK_INT(lc_copy_tree(basefd, "missing", basefd, "x", NULL, NULL, err, sizeof err), -1);
  CHECK_HAS(err, "missing: No such file or directory");
  CHECK_INT(lc_copy_tree(basefd, "src", basefd, "a/b", NULL, NULL, err, sizeof err), -1);
  CHECK_HAS(err, "one short path component");
  char p[600];
  snprintf(p, sizeof p, "%s/.x.links", base);
  CHECK(access(p, F_OK) != 0);             /* nothing left by the refusals */
  if (!root) return;
  /* another file system inside: refused, naming where */
  sh("mkdir -p %s/mnt/a/b", base);
  snprintf(p, sizeof p, "%s/mnt/a/b", base);
  if (mount("tmpfs", p, "tmpfs", 0, "size=64k") != 0) { fprintf(stderr, "     (no tmpfs mount: %s)\n", strerror(errno)); return; }
  CHECK_INT(lc_copy_tree(basefd, "mnt", basefd, "mntcopy", NULL, NULL, err, sizeof err), -1);
  CHECK_HAS(err, "a/b: another file system is mounted here");
  CHECK(umount(p) == 0);
  /* an extended attribute the destination cannot take (tmpfs refuses trusted.* for... none here): a
   * copy onto a file system without user xattrs names the attribute */
  sh("cd %s && mkdir -p noxattr xsrc", base);
  snprintf(p, sizeof p, "%s/noxattr", base);
  if (mount("ramfs", p, "ramfs", 0, NULL) == 0) {
    snprintf(p, sizeof p, "%s/xsrc", base);
    int x = open(p, O_RDONLY | O_DIRECTORY);
    CHECK_INT(put(x, "f", "x", 0644), 0);
    close(x);
    snprintf(p, sizeof p, "%s/xsrc/f", base);
    CHECK_INT(setxattr(p, "user.k", "v", 1, 0), 0);
    snprintf(p, sizeof p, "%s/noxattr", base);
    int nx = open(p, O_RDONLY | O_DIRECTORY);
    CHECK_INT(lc_copy_tree(basefd, "xsrc", nx, "c", NULL, NULL, err, sizeof err), -1);
    CHECK_HAS(err, "f: setting extended attribute user.k:");
    close(nx);
    CHECK(umount(p) == 0);
  }
}

/* Deeper than LC_MAX_DEPTH: refused, naming the depth. Within it: copied with few descriptors. */
static void test_depth(void) {
  /* on tmpfs where there is one: thousands of directories cost a block allocation each on disk */
  char shm[64] = "/dev/shm/mb-layer-copy-XXXXXX", p[600];
  bool on_shm = mkdtemp(shm) != NULL;
  const char *dir = on_shm ? shm : base;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  snprintf(p, sizeof p, "%s/deep", dir);
  CHECK_INT(mkdir(p, 0755), 0);
  int fd = open(p, O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 3000 && fd >= 0; i++) {
    if (mkdirat(fd, "d", 0755) != 0) { close(fd); fd = -1; break; }
    int n = openat(fd, "d", O_RDONLY | O_DIRECTORY);
    close(fd);
    fd = n;
  }
  CHECK(fd >= 0);
  CHECK_INT(put(fd, "leaf", "at the bottom\n", 0644), 0);
  close(fd);
  struct rlimit old, few = {32, 32};
  getrlimit(RLIMIT_NOFILE, &old);
  few.rlim_max = old.rlim_max;
  CHECK_INT(setrlimit(RLIMIT_NOFILE, &few), 0);
  char err[1024] = "";
  lc_stats st;
  CHECK_INT(lc_copy_tree(dfd, "deep", dfd, "deepcopy", NULL, &st, err, sizeof err), 0);
  setrlimit(RLIMIT_NOFILE, &old);
  if (err[0]) fprintf(stderr, "     %s\n", err);
  CHECK_INT(st.dirs, 3001);
  CHECK_INT(st.files, 1);
  /* one level more than allowed */
  snprintf(p, sizeof p, "%s/toodeep", dir);
  CHECK_INT(mkdir(p, 0755), 0);
  fd = open(p, O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < LC_MAX_DEPTH + 1 && fd >= 0; i++) {
    if (mkdirat(fd, "d", 0755) != 0) { close(fd); fd = -1; break; }
    int n = openat(fd, "d", O_RDONLY | O_DIRECTORY);
    close(fd);
    fd = n;
  }
  CHECK(fd >= 0);
  close(fd);
  CHECK_INT(lc_copy_tree(dfd, "toodeep", dfd, "toodeepcopy", NULL, NULL, err, sizeof err), -1);
  CHECK_HAS(err, ".../d/d/d/d");     /* the path's end, then the reason, whatever the depth */
  CHECK_HAS(err, "d: directories nested deeper than 4096");
  close(dfd);
  if (on_shm) sh("rm -rf %s", shm);
}

/* ---- a layer moved in place of a copy (ly_adopt) ---- */

/* Times that depend only on an entry's path below the tree (so that two trees made alike have
 * them all alike). */
static size_t times_root_len;
static int set_times(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  unsigned h = 5381;
  for (const char *c = path + times_root_len; *c; c++) h = h * 33 + (unsigned char)*c;
  struct timespec t[2] = {{1000000000 + (time_t)(h % 100000), (long)(h % 1000000000u)}, {900000000 + (time_t)(h % 77777), 1234}};
  return utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : (perror(path), 1);
}

static void setx(int dir, const char *rel, const char *k, const char *v) {
  char p[700];
  snprintf(p, sizeof p, "/proc/self/fd/%d/%s", dir, rel);
  if (lsetxattr(p, k, v, strlen(v), 0) != 0) fprintf(stderr, "     (lsetxattr %s %s: %s)\n", rel, k, strerror(errno));
}

/* <dir>/upper and <dir>/upper-usr as a sandbox's build step leaves them: every file type, set-id
 * bits, hard links, a sparse file, overlay's own xattrs (which a layer drops) beside whiteouts and
 * an opaque directory (which it keeps), several owners. */
static void make_upper(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "mkdir -p %s/upper/sub/inner %s/upper/ro %s/upper/sticky %s/upper/home/user %s/upper-usr/bin %s/upper-usr/lib/x",
           dir, dir, dir, dir, dir, dir);
  CHECK_INT(system(cmd), 0);
  char p[600];
  snprintf(p, sizeof p, "%s/upper", dir);
  int s = open(p, O_RDONLY | O_DIRECTORY);
  CHECK(s >= 0);
  const char *ov = root ? "trusted.overlay." : "user.overlay.";
  char k[64];
  CHECK_INT(put(s, "plain", "hello\n", 0644), 0);
  CHECK_INT(put(s, "empty", "", 0600), 0);
  CHECK_INT(put(s, "setid", "#!/bin/sh\n", 06755), 0);
  CHECK_INT(put(s, "ro/inside", "read-only parent\n", 0444), 0);
  CHECK_INT(put(s, "home/user/.bashrc", "export A=1\n", 0644), 0);
  CHECK_INT(symlinkat("plain", s, "link"), 0);
  CHECK_INT(symlinkat("/nowhere/at/all", s, "dangling"), 0);
  CHECK_INT(symlinkat("sub", s, "dirlink"), 0);
  CHECK_INT(linkat(s, "plain", s, "hard1", 0), 0);
  CHECK_INT(linkat(s, "plain", s, "sub/inner/hard2", 0), 0);
  CHECK_INT(mkfifoat(s, "fifo", 0640), 0);
  int sp = openat(s, "sparse", O_WRONLY | O_CREAT, 0644);
  CHECK(sp >= 0 && pwrite(sp, "tail", 4, 16 << 20) == 4);
  close(sp);
  setx(s, "plain", "user.moonbox", "value");
  setx(s, "plain", "user.overlay.origin", "an origin handle");   /* dropped (both namespaces) */
  setx(s, ".", "user.overlay.impure", "y");
  setx(s, "sub", "user.overlay.opaque", "y");                      /* kept */
  setx(s, "sub/inner", "user.overlay.nlink", "U+1");
  setx(s, "home", "user.overlay.uuid", "0123456789abcdef");
  if (root) {
    CHECK_INT(fchownat(s, "setid", 12345, 23456, 0), 0);
    CHECK_INT(fchmodat(s, "setid", 06755, 0), 0);
    CHECK_INT(fchownat(s, "link", 777, 778, AT_SYMLINK_NOFOLLOW), 0);
    CHECK_INT(fchownat(s, "home/user", 1000, 1000, 0), 0);
    CHECK_INT(fchownat(s, "home/user/.bashrc", 1000, 1000, 0), 0);
    CHECK_INT(mknodat(s, "whiteout", S_IFCHR | 0, makedev(0, 0)), 0);   /* an overlay whiteout */
    CHECK_INT(mknodat(s, "sock", S_IFSOCK | 0600, 0), 0);
    snprintf(k, sizeof k, "%sopaque", ov);
    setx(s, "ro", k, "y");
    snprintf(k, sizeof k, "%sorigin", ov);
    setx(s, "setid", k, "origin");
    setx(s, "whiteout", k, "origin of a whiteout");
    setx(s, "link", k, "origin of a link");
    snprintf(k, sizeof k, "%simpure", ov);
    setx(s, "sub", k, "y");
    snprintf(k, sizeof k, "%suuid", ov);
    setx(s, ".", k, "uuid");
    setx(s, "whiteout", "trusted.kept", "w");
  }
  CHECK_INT(fchmodat(s, "ro", 0555, 0), 0);
  CHECK_INT(fchmodat(s, "sticky", 01777, 0), 0);
  close(s);
  snprintf(p, sizeof p, "%s/upper-usr", dir);
  s = open(p, O_RDONLY | O_DIRECTORY);
  CHECK(s >= 0);
  CHECK_INT(put(s, "bin/tool", "#!/bin/sh\necho tool\n", 0755), 0);
  CHECK_INT(put(s, "lib/x/data", "data", 0600), 0);
  CHECK_INT(symlinkat("../bin/tool", s, "lib/tool"), 0);
  setx(s, "bin/tool", "user.overlay.origin", "usr origin");
  if (root) CHECK_INT(mknodat(s, "lib/gone", S_IFCHR | 0, makedev(0, 0)), 0);
  close(s);
  /* every time set last, from the entry's path */
  times_root_len = strlen(dir);
  CHECK_INT(nftw(dir, set_times, 16, FTW_PHYS | FTW_DEPTH), 0);
}

static const ly_tree UPPERS[] = {{"upper", "root"}, {"upper-usr", "usr"}};

/* No attribute of SKIP's names anywhere under path. */
static bool none_skipped(const char *path) {
  char out[4096];
  xattrs_of(path, out, sizeof out);
  static const char *const names[] = {"overlay.origin=", "overlay.impure=", "overlay.nlink=", "overlay.uuid=", NULL};
  for (int i = 0; names[i]; i++)
    if (strstr(out, names[i])) { fprintf(stderr, "     %s keeps %s\n", path, out); return false; }
  struct stat st;
  if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return true;
  DIR *d = opendir(path);
  bool ok = d != NULL;
  for (struct dirent *de; ok && (de = readdir(d));) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, de->d_name);
    ok = none_skipped(p);
  }
  if (d) closedir(d);
  return ok;
}

static void layer_path(char *out, size_t n, const layer *l, const char *rel) { snprintf(out, n, "%s/%s/%s", ly_dir(), ly_id(l), rel); }

static void test_moved_as_copied(void) {
  char p[700], a[300], b[300], err[1024] = "";
  snprintf(p, sizeof p, "%s/state", base);
  CHECK_INT(mkdir(p, 0755), 0);
  CHECK_INT(ly_init(p, err, sizeof err), 0);
  /* two sandboxes' directories, made alike */
  snprintf(a, sizeof a, "%s/sbx-copied", base);
  snprintf(b, sizeof b, "%s/sbx-moved", base);
  CHECK_INT(mkdir(a, 0700), 0);
  CHECK_INT(mkdir(b, 0700), 0);
  make_upper(a);
  make_upper(b);
  struct stat plain_before;
  snprintf(p, sizeof p, "%s/upper/plain", b);
  CHECK_INT(stat(p, &plain_before), 0);
  int afd = open(a, O_PATH | O_DIRECTORY), bfd = open(b, O_PATH | O_DIRECTORY);
  layer *copied = NULL, *moved = NULL;
  CHECK_INT(ly_capture(afd, UPPERS, 2, NULL, geteuid(), getegid(), &copied, err, sizeof err), 0);
  if (err[0]) fprintf(stderr, "     %s\n", err);
  CHECK_INT(ly_adopt(bfd, UPPERS, 2, NULL, geteuid(), getegid(), &moved, err, sizeof err), 0);
  if (err[0]) fprintf(stderr, "     %s\n", err);
  close(afd);
  if (!copied || !moved) { close(bfd); ly_release(copied); ly_release(moved); return; }
  /* moved, not copied: gone from the sandbox's directory, the same inodes in the layer */
  snprintf(p, sizeof p, "%s/upper", b);
  CHECK(access(p, F_OK) != 0 && errno == ENOENT);
  snprintf(p, sizeof p, "%s/upper-usr", b);
  CHECK(access(p, F_OK) != 0 && errno == ENOENT);
  struct stat plain_after;
  layer_path(p, sizeof p, moved, "root/plain");
  CHECK_INT(stat(p, &plain_after), 0);
  CHECK(plain_after.st_ino == plain_before.st_ino && plain_after.st_dev == plain_before.st_dev);
  /* the layers are the same, every tree, times and all, none of overlay's own records left */
  cmp_atime = true;
  char ca[700], cb[700];
  layer_path(ca, sizeof ca, copied, "root");
  layer_path(cb, sizeof cb, moved, "root");
  CHECK(same_tree(ca, cb));
  CHECK(none_skipped(cb));
  layer_path(ca, sizeof ca, copied, "usr");
  layer_path(cb, sizeof cb, moved, "usr");
  CHECK(same_tree(ca, cb));
  CHECK(none_skipped(cb));
  cmp_atime = false;
  /* what the layer keeps: the opaque directory, the whiteouts, hard links as links */
  char v[16];
  layer_path(p, sizeof p, moved, "root/sub");
  CHECK(getxattr(p, "user.overlay.opaque", v, sizeof v) == 1);
  struct stat h, w;
  layer_path(p, sizeof p, moved, "root/sub/inner/hard2");
  CHECK_INT(stat(p, &h), 0);
  CHECK(h.st_ino == plain_after.st_ino && h.st_nlink == 3);
  if (root) {
    layer_path(p, sizeof p, moved, "root/ro");
    CHECK(getxattr(p, "trusted.overlay.opaque", v, sizeof v) == 1);
    layer_path(p, sizeof p, moved, "root/whiteout");
    CHECK_INT(lstat(p, &w), 0);
    CHECK(S_ISCHR(w.st_mode) && w.st_rdev == makedev(0, 0));
    layer_path(p, sizeof p, moved, "root/home/user/.bashrc");
    CHECK_INT(lstat(p, &w), 0);
    CHECK(w.st_uid == 1000 && w.st_gid == 1000);
  }
  /* the layer's own files: its parent (none), its directory's owner and mode */
  struct stat la, lb;
  layer_path(ca, sizeof ca, copied, "");
  layer_path(cb, sizeof cb, moved, "");
  CHECK_INT(stat(ca, &la), 0);
  CHECK_INT(stat(cb, &lb), 0);
  CHECK(la.st_mode == lb.st_mode && la.st_uid == lb.st_uid && la.st_gid == lb.st_gid);
  layer_path(p, sizeof p, moved, "parent");
  CHECK_INT(stat(p, &lb), 0);
  CHECK_INT(lb.st_size, 0);
  /* a second capture over it: the parent recorded, the source missing now is an error naming it */
  layer *none = NULL;
  CHECK_INT(ly_adopt(bfd, UPPERS, 2, moved, geteuid(), getegid(), &none, err, sizeof err), -1);
  CHECK_HAS(err, "moving upper: No such file or directory");
  CHECK(none == NULL);
  close(bfd);
  ly_release(copied);
  ly_release(moved);
  CHECK_INT(ly_count(), 0);
}

/* The trees on another file system than the store: rename says EXDEV, and they are copied. */
static void test_moved_across_file_systems(void) {
  if (!root) return;
  char p[600], err[1024] = "";
  snprintf(p, sizeof p, "%s/other", base);
  CHECK_INT(mkdir(p, 0700), 0);
  if (mount("tmpfs", p, "tmpfs", 0, "size=32m") != 0) { fprintf(stderr, "     (no tmpfs mount: %s)\n", strerror(errno)); return; }
  make_upper(p);
  int fd = open(p, O_PATH | O_DIRECTORY);
  layer *l = NULL;
  CHECK_INT(ly_adopt(fd, UPPERS, 2, NULL, geteuid(), getegid(), &l, err, sizeof err), 0);
  if (err[0]) fprintf(stderr, "     %s\n", err);
  close(fd);
  if (l) {
    char q[700];
    layer_path(q, sizeof q, l, "usr/bin/tool");
    CHECK(access(q, F_OK) == 0);
    layer_path(q, sizeof q, l, "root");
    CHECK(none_skipped(q));
  }
  ly_release(l);
  CHECK(umount(p) == 0);
}

/* lc_strip_tree alone: only the listed names go; a mount inside is refused, naming where. */
static void test_strip_in_place(void) {
  char p[600], err[1024] = "";
  sh("mkdir -p %s/strip/d", base);
  snprintf(p, sizeof p, "%s/strip/d", base);
  CHECK_INT(setxattr(p, "user.a", "1", 1, 0), 0);
  CHECK_INT(setxattr(p, "user.b", "2", 1, 0), 0);
  struct timespec old[2] = {{1000000000, 5}, {1000000001, 6}};
  CHECK_INT(utimensat(AT_FDCWD, p, old, 0), 0);
  static const char *const skip[] = {"user.b", NULL};
  lc_opts o = {.skip_xattrs = skip};
  lc_stats st;
  CHECK_INT(lc_strip_tree(basefd, "strip", &o, &st, err, sizeof err), 0);
  CHECK_INT(st.dirs, 2);
  char v[8];
  CHECK(getxattr(p, "user.a", v, sizeof v) == 1);
  CHECK(getxattr(p, "user.b", v, sizeof v) < 0 && errno == ENODATA);
  struct stat s;
  CHECK_INT(stat(p, &s), 0);
  CHECK(s.st_atim.tv_sec == old[0].tv_sec && s.st_atim.tv_nsec == old[0].tv_nsec && s.st_mtim.tv_sec == old[1].tv_sec);
  CHECK_INT(lc_strip_tree(basefd, "strip/d/missing", &o, NULL, err, sizeof err), -1);
  CHECK_HAS(err, "strip/d/missing: No such file or directory");
  if (!root) return;
  if (mount("tmpfs", p, "tmpfs", 0, "size=64k") != 0) return;
  CHECK_INT(lc_strip_tree(basefd, "strip", &o, NULL, err, sizeof err), -1);
  CHECK_HAS(err, "d: another file system is mounted here");
  CHECK(umount(p) == 0);
}

int main(void) {
  root = geteuid() == 0;
  snprintf(base, sizeof base, "/tmp/mb-layer-copy-XXXXXX");
  if (!mkdtemp(base)) { perror("mkdtemp"); return 1; }
  basefd = open(base, O_RDONLY | O_DIRECTORY);
  if (!root) printf("(not root: owners, device nodes, trusted.* xattrs and mounts are not tested)\n");
  MBT_RUN(test_exact_copy);
  MBT_RUN(test_refusals);
  MBT_RUN(test_depth);
  MBT_RUN(test_strip_in_place);
  MBT_RUN(test_moved_as_copied);
  MBT_RUN(test_moved_across_file_systems);
  close(basefd);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx %s 2>/dev/null; rm -rf %s", base, base);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", base);
  return mbt_report();
}
