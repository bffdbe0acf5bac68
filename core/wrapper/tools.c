/* mbwrap tool mode: one-shot questions answered with the same frames as `run` (PROTOCOL.md,
 * "Tool mode"). Usage errors go to stderr with exit status 2 and no frames: they are host bugs. */
#include "mbwrap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define KILLSESSION_POLL_MS 10
/* After SIGKILL a process normally vanishes at once; only an uninterruptible sleep delays it. */
#define KILLSESSION_KILL_CAP_MS 10000

static int usage(const char *u) {
  fprintf(stderr, "usage: mbwrap %s\n", u);
  return 2;
}

static int errno_fail(int e, const char *what, const char *path) {
  return tool_fail(errno_name(e), "%s '%s': %s", what, path, strerror(e));
}

static void version_of(const struct stat *st, char *out, size_t cap) {
  /* Unsigned arithmetic: defined wrap-around even for pre-1970 or far-future times. */
  uint64_t mt = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
  uint64_t ct = (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
  snprintf(out, cap, "%llx:%llx:%llx:%llx:%llx", (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
           (unsigned long long)st->st_size, (unsigned long long)mt, (unsigned long long)ct);
}

/* ---- realpath: like `realpath -m`, but a non-directory used as a directory is an error ---- */

static int append(char *dst, size_t *len, size_t cap, const char *s, size_t n) {
  if (*len + n >= cap) return -1;
  memcpy(dst + *len, s, n);
  *len += n;
  dst[*len] = 0;
  return 0;
}

static void pop_component(char *res, size_t *rlen) {
  while (*rlen > 1 && res[*rlen - 1] != '/') (*rlen)--;
  if (*rlen > 1) (*rlen)--; /* drop the separator, keep "/" for the root */
  res[*rlen] = 0;
}

int tool_realpath(int argc, char **argv) {
  if (argc < 2 || argc > 3) return usage("realpath PATH [CWD]");
  const char *path = argv[1];
  if (!*path) return tool_fail("ENOENT", "empty path");
  static char rest[2 * PATH_MAX], tmp[2 * PATH_MAX], res[PATH_MAX], link[PATH_MAX];
  size_t restlen = 0;
  rest[0] = 0;
  if (path[0] != '/') {
    char cwdbuf[PATH_MAX];
    const char *cwd = argc == 3 ? argv[2] : getcwd(cwdbuf, sizeof cwdbuf);
    if (!cwd) return errno_fail(errno, "cannot get the working directory", ".");
    if (cwd[0] != '/') return tool_fail("EINVAL", "working directory '%s' is not absolute", cwd);
    if (append(rest, &restlen, sizeof rest, cwd, strlen(cwd)) < 0 || append(rest, &restlen, sizeof rest, "/", 1) < 0)
      return tool_fail("ENAMETOOLONG", "path too long");
  }
  if (append(rest, &restlen, sizeof rest, path, strlen(path)) < 0) return tool_fail("ENAMETOOLONG", "path too long");

  size_t rlen = 1;
  strcpy(res, "/");
  int links = 0;
  const char *p = rest;
  while (*p) {
    while (*p == '/') p++;
    if (!*p) break;
    const char *comp = p;
    while (*p && *p != '/') p++;
    size_t clen = (size_t)(p - comp);
    int more = *p == '/'; /* followed by a separator: this component must be a directory */
    if (clen == 1 && comp[0] == '.') continue;
    if (clen == 2 && comp[0] == '.' && comp[1] == '.') {
      pop_component(res, &rlen); /* res holds no symlinks, so a lexical ".." is exact */
      continue;
    }
    if ((rlen > 1 && append(res, &rlen, sizeof res, "/", 1) < 0) || append(res, &rlen, sizeof res, comp, clen) < 0)
      return tool_fail("ENAMETOOLONG", "path too long");
    struct stat st;
    if (lstat(res, &st) < 0) {
      /* -m: missing components are kept; a later ".." may lead back to existing (linked) ones. */
      if (errno == ENOENT) continue;
      return errno_fail(errno, "cannot resolve", res);
    }
    if (S_ISLNK(st.st_mode)) {
      if (++links > 40) return errno_fail(ELOOP, "cannot resolve", path);
      ssize_t ln = readlink(res, link, sizeof link);
      if (ln < 0) return errno_fail(errno, "cannot read link", res);
      if ((size_t)ln >= sizeof link) return errno_fail(ENAMETOOLONG, "cannot read link", res);
      size_t tlen = 0;
      if (append(tmp, &tlen, sizeof tmp, link, (size_t)ln) < 0 || append(tmp, &tlen, sizeof tmp, p, strlen(p)) < 0)
        return tool_fail("ENAMETOOLONG", "path too long");
      memcpy(rest, tmp, tlen + 1);
      p = rest;
      if (link[0] == '/') {
        rlen = 1;
        strcpy(res, "/");
      } else {
        pop_component(res, &rlen);
      }
      continue;
    }
    if (more && !S_ISDIR(st.st_mode)) return errno_fail(ENOTDIR, "not a directory", res);
  }
  tool_data(res, rlen);
  return tool_finish(0);
}

/* ---- stat ---- */

static const char *kind_of(mode_t m) {
  return S_ISREG(m) ? "file" : S_ISDIR(m) ? "directory" : S_ISLNK(m) ? "symlink" : "other";
}

int tool_stat(int argc, char **argv) {
  int follow = argc == 3 && strcmp(argv[1], "-L") == 0;
  if (argc != 2 + follow) return usage("stat [-L] PATH");
  const char *path = argv[1 + follow];
  struct stat st;
  if ((follow ? stat(path, &st) : lstat(path, &st)) < 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      tool_printf("absent\n");
      return tool_finish(0);
    }
    return errno_fail(errno, "cannot stat", path);
  }
  char ver[128];
  version_of(&st, ver, sizeof ver);
  tool_printf("%s %llu %04o %s\n", kind_of(st.st_mode), (unsigned long long)st.st_size,
              (unsigned)(st.st_mode & 07777), ver);
  return tool_finish(0);
}

/* ---- read: version, content and version again, in one answer ---- */

int tool_read(int argc, char **argv) {
  uint64_t max;
  if (argc != 3 || parse_u64(argv[2], &max) < 0) return usage("read PATH MAX");
  const char *path = argv[1];
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      tool_printf("absent\n");
      return tool_finish(0);
    }
    return errno_fail(errno, "cannot open", path);
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    return errno_fail(e, "cannot stat", path);
  }
  char ver[128];
  version_of(&st, ver, sizeof ver);
  tool_printf("%s %llu %04o %s\n", kind_of(st.st_mode), (unsigned long long)st.st_size,
              (unsigned)(st.st_mode & 07777), ver);
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
    close(fd);
    return tool_finish(0);
  }
  /* At most max bytes follow, then a last line "end <n> <version now>": the content is that
   * version's when both versions agree. */
  static char buf[65536];
  uint64_t n = 0;
  for (;;) {
    size_t want = max - n < sizeof buf ? (size_t)(max - n) : sizeof buf;
    if (want == 0) break;
    ssize_t r = read(fd, buf, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return errno_fail(e, "cannot read", path);
    }
    if (r == 0) break;
    tool_data(buf, (size_t)r);
    n += (uint64_t)r;
  }
  if (fstat(fd, &st) < 0) {
    int e = errno;
    close(fd);
    return errno_fail(e, "cannot stat", path);
  }
  close(fd);
  version_of(&st, ver, sizeof ver);
  tool_printf("\nend %llu %s\n", (unsigned long long)n, ver);
  return tool_finish(0);
}

/* ---- list: a directory's entries with cheap metadata and canonical child paths ---- */

/* One record per entry: "<kind> <size> <version> <namelen> <name> <keylen> <key>\n" where key
 * is the canonical path of the child (a symlink's: where it leads, its kind that of the target;
 * a broken link is "other" at dir/name). Names and keys are exact bytes (newlines included). */
int tool_list(int argc, char **argv) {
  if (argc != 2) return usage("list DIR");
  const char *path = argv[1];
  DIR *d = opendir(path);
  if (!d) return errno_fail(errno, "cannot list", path);
  char base[PATH_MAX];
  if (!realpath(path, base)) {
    int e = errno;
    closedir(d);
    return errno_fail(e, "cannot resolve", path);
  }
  size_t blen = strlen(base);
  struct dirent *de;
  while ((errno = 0, de = readdir(d))) {
    const char *nm = de->d_name;
    if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
    char child[PATH_MAX];
    if (snprintf(child, sizeof child, "%s/%s", blen == 1 ? "" : base, nm) >= (int)sizeof child) continue;
    struct stat st;
    if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) continue; /* vanished meanwhile */
      int e = errno;
      closedir(d);
      return errno_fail(e, "cannot stat", child);
    }
    const char *key = child;
    char target[PATH_MAX];
    const char *kind = kind_of(st.st_mode);
    if (S_ISLNK(st.st_mode)) {
      struct stat ts;
      if (stat(child, &ts) == 0 && realpath(child, target)) {
        key = target;
        st = ts;
        kind = kind_of(ts.st_mode);
      } else {
        kind = "other";
      }
    }
    char ver[128];
    version_of(&st, ver, sizeof ver);
    tool_printf("%s %llu %s %zu ", kind, (unsigned long long)st.st_size, ver, strlen(nm));
    tool_data(nm, strlen(nm));
    tool_printf(" %zu ", strlen(key));
    tool_data(key, strlen(key));
    tool_data("\n", 1);
  }
  int e = errno;
  closedir(d);
  if (e) return errno_fail(e, "cannot list", path);
  return tool_finish(0);
}

/* ---- cat: a regular file's bytes as stdout frames, however large (a streaming read) ---- */

/* Unlike the other tools, a failure is one "err CODE detail" line in *stderr* frames (the
 * stdout frames are the content, which may be anything) and exit status 1. */
int tool_cat(int argc, char **argv) {
  if (argc != 2) return usage("cat PATH");
  const char *path = argv[1];
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  struct stat st;
  int e = 0;
  if (fd < 0) e = errno;
  else if (fstat(fd, &st) < 0) e = errno;
  else if (!S_ISREG(st.st_mode)) e = EISDIR;
  if (!e) {
    static char buf[65536];
    for (;;) {
      ssize_t r = read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) { e = errno; break; }
      if (r == 0) break;
      tool_data(buf, (size_t)r);
    }
  }
  if (fd >= 0) close(fd);
  if (!e) return tool_finish(0);
  char line[PATH_MAX + 256];
  int n = snprintf(line, sizeof line, "err %s cannot read '%s': %s\n", e == EISDIR ? "FS_NOT_REGULAR_FILE" : errno_name(e),
                   path, strerror(e));
  for (int i = 0; i < n - 1 && i < (int)sizeof line - 1; i++)
    if (line[i] == '\n') line[i] = ' ';
  tool_error_data(line, n < (int)sizeof line ? (size_t)n : sizeof line - 1);
  return tool_finish(1);
}

/* ---- publish ---- */

static const char *fs_code(int e) {
  switch (e) {
  case ENOENT: return "FS_NOT_FOUND";
  case EACCES: case EPERM: case EROFS: return "FS_PERMISSION_DENIED";
  case EISDIR: return "FS_NOT_REGULAR_FILE";
  case ENOTDIR: return "FS_NOT_DIRECTORY";
  default: return "FS_IO_ERROR";
  }
}

static const char *publish_target; /* set once parsed; the staging cleanup must never touch its dir */

static size_t dir_len(const char *p) {
  const char *slash = strrchr(p, '/');
  return slash ? (size_t)(slash - p) : 0;
}

static void remove_staging(const char *staging, int unlink_file) {
  if (unlink_file) unlink(staging);
  /* The staging file lives alone in a private directory: remove it (rmdir only removes it empty),
   * but never the target's own directory, even if the host got the layout wrong. */
  size_t n = dir_len(staging);
  if (n == 0) return;
  if (publish_target && dir_len(publish_target) == n && strncmp(publish_target, staging, n) == 0) return;
  char dir[PATH_MAX];
  if (n >= sizeof dir) return;
  memcpy(dir, staging, n);
  dir[n] = 0;
  rmdir(dir);
}

static int publish_fail(const char *staging, const char *code, const char *detail, const char *path, int e) {
  remove_staging(staging, 1);
  if (e) return tool_fail(code, "%s '%s': %s", detail, path, strerror(e));
  return tool_fail(code, "%s", detail);
}

/* mkdir -p of the directory part of `path` (as `mkdir -p` does, with the umask's mode). */
int mkdir_parents(const char *path) {
  char dir[PATH_MAX];
  size_t n = dir_len(path);
  if (n == 0 || n >= sizeof dir) return n == 0 ? 0 : (errno = ENAMETOOLONG, -1);
  memcpy(dir, path, n);
  dir[n] = 0;
  for (char *p = dir + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(dir, 0777) < 0 && errno != EEXIST) return -1;
      *p = c;
      if (!c) break;
    }
  }
  return 0;
}

/* --stdin: the host hands the content over on stdin (local providers: no upload API). The
 * staging file is made here, alone in a fresh private directory next to the target. */
static int stage_stdin(const char *staging, const char *target) {
  char sdir[PATH_MAX];
  size_t n = dir_len(staging);
  if (n == 0 || n >= sizeof sdir) return (tool_fail("FS_IO_ERROR", "bad staging path '%s'", staging), 1);
  memcpy(sdir, staging, n);
  sdir[n] = 0;
  if (mkdir_parents(target) < 0) return (tool_fail(fs_code(errno), "cannot make the parents of '%s': %s", target, strerror(errno)), 1);
  if (mkdir(sdir, 0700) < 0) return (tool_fail(fs_code(errno), "cannot make '%s': %s", sdir, strerror(errno)), 1);
  int fd = open(staging, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    rmdir(sdir);
    return (tool_fail(fs_code(e), "cannot create '%s': %s", staging, strerror(e)), 1);
  }
  static char buf[65536];
  for (;;) {
    ssize_t r = read(0, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return (publish_fail(staging, "FS_IO_ERROR", "cannot read the content", "stdin", e), 1);
    }
    if (r == 0) break;
    for (ssize_t off = 0; off < r;) {
      ssize_t w = write(fd, buf + off, (size_t)(r - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        int e = errno;
        close(fd);
        return (publish_fail(staging, fs_code(e), "cannot write", staging, e), 1);
      }
      off += w;
    }
  }
  if (fsync(fd) < 0 || close(fd) < 0) return (publish_fail(staging, "FS_IO_ERROR", "cannot write", staging, errno), 1);
  return 0;
}

int tool_publish(int argc, char **argv) {
  static const char *U =
      "publish [--create-only | --expect VERSION] [--mode OCTAL | --keep-mode] [--before MAXBYTES] [--stdin] STAGING TARGET";
  int create_only = 0, keep_mode = 0, have_mode = 0, want_before = 0, from_stdin = 0;
  const char *expect = NULL;
  unsigned long mode = 0;
  uint64_t before_max = 0;
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--create-only") == 0) create_only = 1;
    else if (strcmp(a, "--keep-mode") == 0) keep_mode = 1;
    else if (strcmp(a, "--stdin") == 0) from_stdin = 1;
    else if (i + 1 < argc && strcmp(a, "--expect") == 0) expect = argv[++i];
    else if (i + 1 < argc && strcmp(a, "--before") == 0) {
      if (parse_u64(argv[++i], &before_max) < 0) return usage(U);
      want_before = 1;
    } else if (i + 1 < argc && strcmp(a, "--mode") == 0) {
      char *end;
      const char *m = argv[++i];
      errno = 0;
      mode = strtoul(m, &end, 8);
      if (!*m || *end || errno || mode > 07777) return usage(U);
      have_mode = 1;
    } else
      return usage(U);
  }
  if (argc - i != 2 || (create_only && expect) || (have_mode && keep_mode)) return usage(U);
  const char *staging = argv[i], *target = argv[i + 1];
  publish_target = target;
  if (from_stdin && stage_stdin(staging, target)) return 0;

  int sfd = open(staging, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat sst;
  if (sfd < 0) return publish_fail(staging, fs_code(errno), "cannot open staging file", staging, errno);
  if (fstat(sfd, &sst) < 0 || !S_ISREG(sst.st_mode))
    return publish_fail(staging, "FS_IO_ERROR", "staging file is not a regular file", staging, 0);

  struct stat tst;
  int exists = 1, tfd = -1;
  if (lstat(target, &tst) < 0) {
    if (errno != ENOENT) return publish_fail(staging, fs_code(errno), "cannot stat", target, errno);
    exists = 0;
  }
  if (exists && !S_ISREG(tst.st_mode))
    return publish_fail(staging, "FS_NOT_REGULAR_FILE", "target is not a regular file", target, 0);
  if (exists && want_before) {
    /* Hold the old inode open: its content stays readable after the rename replaces it. */
    tfd = open(target, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (tfd < 0) return publish_fail(staging, fs_code(errno), "cannot read", target, errno);
    if (fstat(tfd, &tst) < 0 || !S_ISREG(tst.st_mode))
      return publish_fail(staging, "FS_NOT_REGULAR_FILE", "target is not a regular file", target, 0);
  }
  if (create_only && exists) return publish_fail(staging, "FS_NOT_OBSERVED", "target already exists", NULL, 0);
  if (expect) {
    char ver[128];
    if (!exists) return publish_fail(staging, "FS_STALE_VERSION", "file no longer exists", NULL, 0);
    version_of(&tst, ver, sizeof ver);
    if (strcmp(ver, expect) != 0)
      return publish_fail(staging, "FS_STALE_VERSION", "file changed since it was read", NULL, 0);
  }
  mode_t m = have_mode ? (mode_t)mode : exists ? (tst.st_mode & 0777) : 0600;
  if (fchmod(sfd, m) < 0) return publish_fail(staging, fs_code(errno), "cannot chmod", staging, errno);

  if (create_only) {
    /* link(2) never replaces: a creator that raced us keeps its file. */
    if (link(staging, target) < 0) {
      if (errno == EEXIST) return publish_fail(staging, "FS_NOT_OBSERVED", "target already exists", NULL, 0);
      return publish_fail(staging, fs_code(errno), "cannot publish", target, errno);
    }
    unlink(staging);
  } else if (rename(staging, target) < 0) {
    return publish_fail(staging, fs_code(errno), "cannot publish", target, errno);
  }
  remove_staging(staging, 0);
  /* The published inode, after the link count / rename changed its ctime. */
  struct stat nst;
  char nver[128];
  if (fstat(sfd, &nst) < 0) nst = sst;
  version_of(&nst, nver, sizeof nver);
  close(sfd);

  if (want_before) {
    if (!exists) {
      tool_printf("before-absent\n");
    } else if ((uint64_t)tst.st_size > before_max) {
      tool_printf("before-too-large %llu\n", (unsigned long long)tst.st_size);
    } else {
      size_t cap = (size_t)tst.st_size + 1, len = 0;
      char *buf = malloc(cap);
      while (buf && len < cap) {
        ssize_t r = read(tfd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
      }
      if (!buf || len > before_max) {
        tool_printf("before-too-large %llu\n", (unsigned long long)len);
      } else {
        tool_printf("before %zu\n", len);
        tool_data(buf, len);
        tool_data("\n", 1);
      }
      free(buf);
    }
  }
  if (tfd >= 0) close(tfd);
  tool_printf("ok %s %s\n", exists ? "update" : "create", nver);
  return tool_finish(0);
}

/* ---- remove, mkdir, rename: one name in a directory, its last component never followed ---- */

/* errno → seam code for operations on names (publish keeps fs_code's narrower table). */
static const char *entry_code(int e) {
  switch (e) {
  case ENOTEMPTY: return "FS_NOT_EMPTY";
  case EEXIST: return "FS_ALREADY_EXISTS";
  case EXDEV: return "FS_CROSS_DEVICE";
  case EBUSY: case EINVAL: return "FS_INVALID_TARGET";
  default: return fs_code(e);
  }
}

static int entry_fail(int e, const char *what, const char *path) {
  return tool_fail(entry_code(e), "%s '%s': %s", what, path, strerror(e));
}

/* Is `st` the root directory of this process's file system view? */
static int is_root(const struct stat *st) {
  struct stat rs;
  return stat("/", &rs) == 0 && rs.st_dev == st->st_dev && rs.st_ino == st->st_ino;
}

/* Where a recursive removal failed: the entry's name (within its directory) and the errno. */
static char rm_failed_name[NAME_MAX + 1];
static int rm_failed_errno;

static int rm_failed(const char *name, int e) {
  snprintf(rm_failed_name, sizeof rm_failed_name, "%s", name);
  rm_failed_errno = e;
  return -1;
}

#define RM_PASSES 8 /* entries made while we empty a directory are removed too, up to this */

/* Removes everything inside the directory open as fd (taken over: closed on return), never
 * following a symlink (a link is removed, not what it leads to). 0, or -1 with rm_failed_*. */
static int empty_dir(int fd) {
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return rm_failed(".", e);
  }
  for (int pass = 0;; pass++) {
    size_t seen = 0;
    rewinddir(d);
    for (;;) {
      errno = 0;
      struct dirent *de = readdir(d);
      if (!de) {
        if (errno) {
          int e = errno;
          closedir(d);
          return rm_failed(".", e);
        }
        break;
      }
      const char *nm = de->d_name;
      if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
      seen++;
      struct stat st;
      if (fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT) continue; /* removed by someone else meanwhile */
        rm_failed(nm, errno); /* before closedir: nm lives in d's buffer */
        closedir(d);
        return -1;
      }
      if (S_ISDIR(st.st_mode)) {
        int cfd = openat(dirfd(d), nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd < 0) {
          if (errno == ENOENT) continue;
          rm_failed(nm, errno);
          closedir(d);
          return -1;
        }
        if (empty_dir(cfd) < 0) {
          closedir(d);
          return -1;
        }
        if (unlinkat(dirfd(d), nm, AT_REMOVEDIR) < 0 && errno != ENOENT) {
          rm_failed(nm, errno);
          closedir(d);
          return -1;
        }
      } else if (unlinkat(dirfd(d), nm, 0) < 0 && errno != ENOENT) {
        rm_failed(nm, errno); /* before closedir: nm lives in d's buffer */
        closedir(d);
        return -1;
      }
    }
    if (seen == 0) break;
    if (pass + 1 >= RM_PASSES) {
      closedir(d);
      return rm_failed(".", ENOTEMPTY);
    }
  }
  closedir(d);
  return 0;
}

int tool_remove(int argc, char **argv) {
  int recursive = argc == 3 && strcmp(argv[1], "-r") == 0;
  if (argc != 2 + recursive) return usage("remove [-r] PATH");
  const char *path = argv[1 + recursive];
  struct stat st;
  if (lstat(path, &st) < 0) {
    if (errno == ENOENT) return tool_fail("FS_NOT_FOUND", "no such file or directory");
    return entry_fail(errno, "cannot stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    if (is_root(&st)) return tool_fail("FS_INVALID_TARGET", "it is the root directory");
    if (recursive) {
      int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return entry_fail(errno, "cannot open", path);
      if (empty_dir(fd) < 0) {
        int e = rm_failed_errno;
        if (strcmp(rm_failed_name, ".") == 0) return entry_fail(e, "cannot empty", path);
        return tool_fail(entry_code(e), "cannot remove '%s' in '%s': %s", rm_failed_name, path, strerror(e));
      }
    }
    if (rmdir(path) < 0) {
      if (errno == ENOTEMPTY || errno == EEXIST)
        return tool_fail("FS_NOT_EMPTY", "the directory is not empty (recursive removes its contents too)");
      if (errno == ENOENT) return tool_fail("FS_NOT_FOUND", "no such file or directory");
      return entry_fail(errno, "cannot remove", path);
    }
  } else if (unlink(path) < 0) {
    if (errno == ENOENT) return tool_fail("FS_NOT_FOUND", "no such file or directory");
    return entry_fail(errno, "cannot remove", path);
  }
  tool_printf("ok %s\n", kind_of(st.st_mode));
  return tool_finish(0);
}

int tool_mkdir(int argc, char **argv) {
  int parents = argc == 3 && strcmp(argv[1], "-p") == 0;
  if (argc != 2 + parents) return usage("mkdir [-p] PATH");
  const char *path = argv[1 + parents];
  int created = 1;
  if (parents && mkdir_parents(path) < 0) {
    int e = errno;
    return tool_fail(entry_code(e), "cannot make the parents of '%s': %s", path, strerror(e));
  }
  if (mkdir(path, 0777) < 0) {
    int e = errno;
    struct stat st;
    if (e == EEXIST && parents && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) created = 0;
    else if (e == EEXIST) return tool_fail("FS_ALREADY_EXISTS", parents ? "it exists and is not a directory" : "it already exists");
    else if (e == ENOENT) return tool_fail("FS_NOT_FOUND", "its parent directory does not exist");
    else return entry_fail(e, "cannot make", path);
  }
  struct stat st;
  if (stat(path, &st) < 0) return entry_fail(errno, "cannot stat", path);
  char ver[128];
  version_of(&st, ver, sizeof ver);
  tool_printf("ok %s %s\n", created ? "created" : "existed", ver);
  return tool_finish(0);
}

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

/* rename(2) that never replaces: renameat2(RENAME_NOREPLACE); where the kernel or the file system
 * lacks it (ENOSYS, EINVAL), a check then rename(2) (a creator racing in between loses). */
static int rename_noreplace(const char *from, const char *to) {
#ifdef SYS_renameat2
  if (syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
  if (errno != ENOSYS && errno != EINVAL) return -1;
#endif
  struct stat st;
  if (lstat(to, &st) == 0) {
    errno = EEXIST;
    return -1;
  }
  if (errno != ENOENT) return -1;
  return rename(from, to);
}

int tool_rename(int argc, char **argv) {
  int noreplace = argc == 4 && strcmp(argv[1], "--no-replace") == 0;
  if (argc != 3 + noreplace) return usage("rename [--no-replace] FROM TO");
  const char *from = argv[1 + noreplace], *to = argv[2 + noreplace];
  struct stat st;
  if (lstat(from, &st) == 0 && S_ISDIR(st.st_mode) && is_root(&st))
    return tool_fail("FS_INVALID_TARGET", "the source is the root directory");
  if ((noreplace ? rename_noreplace(from, to) : rename(from, to)) < 0) {
    int e = errno;
    switch (e) {
    case ENOENT:
      if (lstat(from, &st) < 0 && (errno == ENOENT || errno == ENOTDIR))
        return tool_fail("FS_NOT_FOUND", "the source does not exist");
      return tool_fail("FS_NOT_FOUND", "the destination's directory does not exist");
    case EEXIST:
      if (noreplace) return tool_fail("FS_ALREADY_EXISTS", "the destination exists");
      return tool_fail("FS_NOT_EMPTY", "the destination is a directory that is not empty");
    case ENOTEMPTY: return tool_fail("FS_NOT_EMPTY", "the destination is a directory that is not empty");
    case EXDEV: return tool_fail("FS_CROSS_DEVICE", "source and destination are on different file systems");
    case EINVAL: return tool_fail("FS_INVALID_TARGET", "a directory cannot move into itself");
    case EISDIR: return tool_fail("FS_NOT_REGULAR_FILE", "the destination is a directory and the source is not");
    case ENOTDIR:
      return tool_fail("FS_NOT_DIRECTORY", "the source is a directory and the destination is not, or a parent is not a directory");
    default: return tool_fail(entry_code(e), "%s", strerror(e));
    }
  }
  if (lstat(to, &st) < 0) return entry_fail(errno, "cannot stat", to);
  char ver[128];
  version_of(&st, ver, sizeof ver);
  tool_printf("ok %s %s\n", kind_of(st.st_mode), ver);
  return tool_finish(0);
}

/* ---- which ---- */

static int is_exec_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode) && faccessat(AT_FDCWD, p, X_OK, AT_EACCESS) == 0;
}

int tool_which(int argc, char **argv) {
  if (argc != 3) return usage("which NAME PATHLIST");
  const char *name = argv[1], *list = argv[2];
  if (!*name) return tool_fail("EINVAL", "empty program name");
  if (strchr(name, '/')) {
    if (name[0] != '/') return tool_fail("EINVAL", "'%s' is a relative path; use an absolute path or a bare name", name);
    if (!is_exec_file(name)) return tool_fail("ENOENT", "'%s' is not an executable file", name);
    tool_data(name, strlen(name));
    return tool_finish(0);
  }
  char cwd[PATH_MAX];
  int have_cwd = getcwd(cwd, sizeof cwd) != NULL;
  for (const char *p = list; p;) {
    const char *colon = strchr(p, ':');
    size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
    char full[PATH_MAX];
    int n;
    if (dlen == 0 || p[0] != '/') {
      /* A relative entry (empty = ".") is taken against the current directory; report it absolute. */
      n = have_cwd ? snprintf(full, sizeof full, "%s/%.*s%s%s", cwd, (int)dlen, p, dlen ? "/" : "", name) : -1;
    } else {
      n = snprintf(full, sizeof full, "%.*s/%s", (int)dlen, p, name);
    }
    if (n > 0 && (size_t)n < sizeof full && is_exec_file(full)) {
      tool_data(full, (size_t)n);
      return tool_finish(0);
    }
    p = colon ? colon + 1 : NULL;
  }
  return tool_fail("ENOENT", "'%s' not found on PATH", name);
}

/* ---- fg: foreground group of a terminal and whether it waits for input ---- */

static int fd_is_tty(pid_t pid, long fd, int tty_nr) {
  char p[64];
  struct stat st;
  snprintf(p, sizeof p, "/proc/%d/fd/%ld", (int)pid, fd);
  if (stat(p, &st) < 0 || !S_ISCHR(st.st_mode)) return 0;
  /* /proc's tty_nr encoding: minor low byte | major << 8 | minor high bits << 12. */
  unsigned maj = ((unsigned)tty_nr >> 8) & 0xfff, min = ((unsigned)tty_nr & 0xff) | (((unsigned)tty_nr >> 12) & 0xfff00);
  return major(st.st_rdev) == maj && minor(st.st_rdev) == min;
}

/* Best effort: the foreground leader is asleep in a read of the terminal (or in a poll-family wait
 * while its stdin is the terminal), per /proc/<pid>/syscall; /proc/<pid>/wchan is the fallback. */
static int input_waiting(pid_t pid, int tty_nr) {
  struct pstat ps;
  if (proc_stat(pid, &ps) < 0 || ps.state != 'S') return 0;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = -1;
  if (fd >= 0) {
    do n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
  }
  if (n > 0) {
    buf[n] = 0;
    char *end;
    long nr = strtol(buf, &end, 10);
    if (end == buf) return 0; /* "running" */
    unsigned long long a0 = strtoull(end, NULL, 16);
    if (nr == SYS_read || nr == SYS_readv) return fd_is_tty(pid, (long)a0, tty_nr);
    int pollish = nr == SYS_pselect6 || nr == SYS_ppoll || nr == SYS_epoll_pwait;
#ifdef SYS_poll
    pollish = pollish || nr == SYS_poll;
#endif
#ifdef SYS_select
    pollish = pollish || nr == SYS_select;
#endif
#ifdef SYS_epoll_wait
    pollish = pollish || nr == SYS_epoll_wait;
#endif
    return pollish && fd_is_tty(pid, 0, tty_nr);
  }
  snprintf(path, sizeof path, "/proc/%d/wchan", (int)pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  do n = read(fd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  /* Coarser: a tty read sleeps in n_tty_read (older kernels) or wait_woken (newer); poll-family
   * waits in do_select / do_sys_poll / ep_poll. Counted only when its stdin is the terminal. */
  static const char *const waits[] = {"n_tty_read", "wait_woken", "do_select", "do_sys_poll", "ep_poll"};
  for (size_t i = 0; i < sizeof waits / sizeof waits[0]; i++)
    if (strcmp(buf, waits[i]) == 0) return fd_is_tty(pid, 0, tty_nr);
  return 0;
}

static int parse_pid(const char *s, pid_t *out) {
  uint64_t v;
  if (parse_u64(s, &v) < 0 || v < 1 || v > INT_MAX) return -1;
  *out = (pid_t)v;
  return 0;
}

int tool_fg(int argc, char **argv) {
  pid_t pid;
  if (argc != 2 || parse_pid(argv[1], &pid) < 0) return usage("fg PID");
  struct pstat ps;
  if (proc_stat(pid, &ps) < 0 || ps.state == 'Z' || ps.state == 'X') {
    tool_printf("absent\n");
    return tool_finish(0);
  }
  int iw = ps.tpgid > 0 ? input_waiting(ps.tpgid, ps.tty_nr) : 0;
  tool_printf("%d %d\n", (int)ps.tpgid, iw);
  return tool_finish(0);
}

/* ---- killsession: HUP+TERM, grace, KILL until the session is empty ---- */

struct pidset {
  pid_t *v;
  size_t n, cap;
};

static int pidset_has(const struct pidset *s, pid_t p) {
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i] == p) return 1;
  return 0;
}

static void pidset_add(struct pidset *s, pid_t p) {
  if (pidset_has(s, p)) return;
  if (s->n == s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 64;
    pid_t *nv = realloc(s->v, nc * sizeof *nv);
    if (!nv) return; /* the count may be low; the kill itself still happened */
    s->v = nv;
    s->cap = nc;
  }
  s->v[s->n++] = p;
}

/* Signals every live member of the session; returns how many were alive. SIGTERM means HUP, TERM
 * and CONT: HUP first, because an interactive shell ignores TERM but exits at once on HUP (the
 * hangup of its terminal) and a stopped process acts on either only once continued. */
static size_t signal_session(pid_t sid, int sig, struct pidset *seen, int only_new) {
  struct pstat *all;
  size_t n, live = 0;
  if (proc_list(&all, &n) < 0) return 0;
  pid_t self = getpid();
  for (size_t i = 0; i < n; i++) {
    if (all[i].sid != sid || all[i].pid == self || all[i].state == 'Z' || all[i].state == 'X') continue;
    live++;
    if (only_new && pidset_has(seen, all[i].pid)) continue;
    if (sig == SIGTERM) kill(all[i].pid, SIGHUP);
    if (kill(all[i].pid, sig) == 0) {
      pidset_add(seen, all[i].pid);
      if (sig == SIGTERM) kill(all[i].pid, SIGCONT);
    }
  }
  free(all);
  return live;
}

int tool_killsession(int argc, char **argv) {
  pid_t sid;
  uint64_t grace;
  if (argc != 3 || parse_pid(argv[1], &sid) < 0 || sid < 2 || parse_u64(argv[2], &grace) < 0 || grace > INT_MAX)
    return usage("killsession SID GRACE_MS");
  struct pidset seen = {0};
  int64_t deadline = mb_now_ms() + (int64_t)grace;
  int only_new = 0;
  size_t live;
  /* TERM everyone (and newcomers) until the session is empty or the grace is over. */
  while ((live = signal_session(sid, SIGTERM, &seen, only_new)) > 0 && mb_now_ms() < deadline) {
    only_new = 1;
    mb_sleep_ms(KILLSESSION_POLL_MS);
  }
  int64_t cap = mb_now_ms() + KILLSESSION_KILL_CAP_MS;
  while (live > 0) {
    live = signal_session(sid, SIGKILL, &seen, 0);
    if (live == 0) break;
    if (mb_now_ms() >= cap) {
      free(seen.v);
      return tool_fail("EBUSY", "session %d still has %zu live processes after SIGKILL", (int)sid, live);
    }
    mb_sleep_ms(KILLSESSION_POLL_MS);
  }
  tool_printf("%zu\n", seen.n);
  free(seen.v);
  return tool_finish(0);
}

/* ---- signal ---- */

int tool_signal(int argc, char **argv) {
  pid_t pgid;
  int sig;
  if (argc != 3 || parse_pid(argv[1], &pgid) < 0 || pgid < 2 || (sig = signal_from_name(argv[2])) < 0)
    return usage("signal PGID SIGNAME");
  if (kill(-pgid, sig) < 0) return tool_fail(errno_name(errno), "kill -%d -%d: %s", sig, (int)pgid, strerror(errno));
  return tool_finish(0);
}
