/* sync_walk.c — a tree under one root descriptor (sync.h): paths, the safe walk, lstat, scans.
 * Plain C over libc (with ignore.c and errors.c): mbwrap compiles the same file, so the host and
 * the sandbox walk and filter trees exactly alike. */
#include "sync.h"
#include "ignore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STAGE_PREFIX ".moonbox-sync-"
#define STAGE_SUFFIX ".tmp"

int mb_sync_errno_code(int err) {
  switch (err) {
  case ENOENT: return MB_CODE_SYNC_NOT_FOUND;
  case ENOTDIR: return MB_CODE_SYNC_NOT_DIRECTORY;
  case ELOOP: return MB_CODE_SYNC_UNSAFE_PATH;
  case EACCES: case EPERM: case EROFS: return MB_CODE_SYNC_PERMISSION_DENIED;
  case ENOSPC: case EDQUOT: return MB_CODE_SYNC_NO_SPACE;
  case ENOMEM: return MB_CODE_SYNC_NOMEM;
  default: return MB_CODE_SYNC_IO_ERROR;
  }
}

int mb_sync_sys_fail(struct mb_error *e, int err, const char *what, const char *path) {
  return mb_error_fail(e, mb_sync_errno_code(err), path, "cannot %s '%s': %s", what, path, strerror(err));
}

int mb_sync_check_path(const char *p, size_t len, struct mb_error *e) {
  char shown[256];
  mb_copy_text(shown, sizeof shown, p, len);
  if (len == 0) return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, "", "an entry with an empty name");
  if (memchr(p, '\0', len)) return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, shown, "'%s': a NUL byte in the name", shown);
  if (len > MB_SYNC_PATH_MAX)
    return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, shown, "a name over %d bytes: '%s...'", MB_SYNC_PATH_MAX, shown);
  if (p[0] == '/') return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, shown, "'%s': an absolute path", shown);
  for (size_t i = 0; i <= len;) {
    const char *s = memchr(p + i, '/', len - i);
    size_t end = s ? (size_t)(s - p) : len, cl = end - i;
    if (cl == 0) return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, shown, "'%s': an empty path component", shown);
    if (cl == 2 && p[i] == '.' && p[i + 1] == '.')
      return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, shown, "'%s': a '..' component (outside the tree)", shown);
    if (cl == 1 && p[i] == '.') return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, shown, "'%s': a '.' component", shown);
    i = end + 1;
  }
  return 0;
}

void mb_sync_version(const struct stat *st, char out[MB_SYNC_VERSION_MAX]) {
  uint64_t mt = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
  uint64_t ct = (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
  snprintf(out, MB_SYNC_VERSION_MAX, "%llx:%llx:%llx:%llx:%llx", (unsigned long long)st->st_dev,
           (unsigned long long)st->st_ino, (unsigned long long)st->st_size, (unsigned long long)mt,
           (unsigned long long)ct);
}

static int type_of(mode_t m) {
  return S_ISREG(m) ? MB_SYNC_FILE : S_ISDIR(m) ? MB_SYNC_DIR : S_ISLNK(m) ? MB_SYNC_LINK : 'o';
}

static const char *other_kind(mode_t m) {
  return S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO"
       : S_ISSOCK(m) ? "a socket" : "of an unknown type";
}

static void fill(struct mb_sync_entry *en, const struct stat *st) {
  en->type = type_of(st->st_mode);
  en->mode = (unsigned)(st->st_mode & 0777);
  en->size = en->type == MB_SYNC_FILE ? (uint64_t)st->st_size : 0;
  en->mtime_s = (int64_t)st->st_mtim.tv_sec;
  en->mtime_ns = st->st_mtim.tv_nsec;
  en->nlink = (uint64_t)st->st_nlink;
  en->dev = (uint64_t)st->st_dev;
  en->ino = (uint64_t)st->st_ino;
  mb_sync_version(st, en->version);
}

/* ---- roots ---- */

struct mb_sync_root {
  int fd;
  char *path;
};

mb_sync_root *mb_sync_root_open(const char *root, struct mb_error *e) {
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOTDIR) return (mb_error_fail(e, MB_CODE_SYNC_NOT_DIRECTORY, root, "'%s' is not a directory", root), NULL);
    return (mb_sync_sys_fail(e, err, "open", root), NULL);
  }
  mb_sync_root *r = malloc(sizeof *r);
  char *p = strdup(root);
  if (!r || !p) {
    free(r);
    free(p);
    close(fd);
    return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, root, "out of memory"), NULL);
  }
  r->fd = fd;
  r->path = p;
  return r;
}

void mb_sync_root_close(mb_sync_root *r) {
  if (!r) return;
  close(r->fd);
  free(r->path);
  free(r);
}

int mb_sync_root_fd(const mb_sync_root *r) { return r->fd; }
const char *mb_sync_root_path(const mb_sync_root *r) { return r->path; }

/* Opens directory `name` under dirfd without following a link; create: make it when missing. */
static int open_dir_at(int dirfd, const char *name, int create, const char *rel, size_t upto,
                       struct mb_error *e) {
  char shown[MB_SYNC_PATH_MAX + 1];
  for (int tries = 0; tries < 2; tries++) {
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return fd;
    int err = errno;
    mb_copy_text(shown, sizeof shown, rel, upto);
    if (err == ENOENT && create && tries == 0) {
      if (mkdirat(dirfd, name, 0700) == 0 || errno == EEXIST) continue;
      return mb_sync_sys_fail(e, errno, "make directory", shown);
    }
    if (err == ELOOP)
      return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_PATH, rel, "'%s' (a parent of '%s') is a symbolic link: not followed", shown, rel);
    if (err == ENOTDIR) {
      struct stat st;
      if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        return mb_error_fail(e, MB_CODE_SYNC_UNSAFE_PATH, rel, "'%s' (a parent of '%s') is a symbolic link: not followed", shown, rel);
      return mb_error_fail(e, MB_CODE_SYNC_NOT_DIRECTORY, rel, "'%s' (a parent of '%s') is not a directory", shown, rel);
    }
    return mb_sync_sys_fail(e, err, "open directory", shown);
  }
  return mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, rel, "cannot open directory '%s'", rel);
}

int mb_sync_open_parent(const mb_sync_root *r, const char *rel, int create, const char **leaf,
                        struct mb_error *e) {
  size_t len = strlen(rel);
  if (mb_sync_check_path(rel, len, e) < 0) return -1;
  char buf[MB_SYNC_PATH_MAX + 1];
  memcpy(buf, rel, len + 1);
  const char *last = strrchr(rel, '/');
  *leaf = last ? last + 1 : rel;
  int cur = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
  if (cur < 0) return mb_sync_sys_fail(e, errno, "open", r->path);
  size_t i = 0;
  while (last && i < (size_t)(last - rel)) {
    char *slash = strchr(buf + i, '/');
    *slash = 0;
    int next = open_dir_at(cur, buf + i, create, rel, (size_t)(slash - buf), e);
    close(cur);
    if (next < 0) return -1;
    cur = next;
    i = (size_t)(slash - buf) + 1;
  }
  return cur;
}

/* rel's parent directory, opened: → its descriptor, -2 when rel's parent does not exist (e
 * untouched), -1 with e set on any other failure. */
static int open_parent_if_any(const mb_sync_root *r, const char *rel, const char **leaf, struct mb_error *e) {
  struct mb_error pe;
  int pfd = mb_sync_open_parent(r, rel, 0, leaf, &pe);
  if (pfd >= 0) return pfd;
  if (pe.name == MB_CODE_SYNC_NOT_FOUND) return -2;
  if (e) *e = pe;
  return -1;
}

int mb_sync_lstat(const mb_sync_root *r, const char *rel, struct mb_sync_entry *out, char *link_buf,
                  size_t link_cap, struct mb_error *e) {
  memset(out, 0, sizeof *out);
  const char *leaf;
  int pfd = open_parent_if_any(r, rel, &leaf, e);
  if (pfd == -2) return 0;                           /* nothing there: nothing to do */
  if (pfd < 0) return -1;
  struct stat st;
  if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    int err = errno;
    close(pfd);
    if (err == ENOENT) return 0;
    return mb_sync_sys_fail(e, err, "stat", rel);
  }
  fill(out, &st);
  if (out->type == MB_SYNC_LINK && link_buf && link_cap > 1) {
    ssize_t n = readlinkat(pfd, leaf, link_buf, link_cap - 1);
    if (n < 0) {
      int err = errno;
      close(pfd);
      return mb_sync_sys_fail(e, err, "read link", rel);
    }
    if ((size_t)n >= link_cap - 1) {
      close(pfd);
      return mb_error_fail(e, MB_CODE_SYNC_TOO_LARGE, rel, "the target of link '%s' is over %zu bytes", rel, link_cap - 2);
    }
    link_buf[n] = 0;
    out->link = link_buf;
  }
  close(pfd);
  return 1;
}

/* ---- scans ---- */

struct pending {
  size_t entry;     /* the directory's entry */
  size_t ig_depth;  /* rule frames in force for its children, before its own .gitignore */
};

struct mb_sync_scan {
  const mb_sync_root *r;
  struct mb_sync_scan_opts o;
  mb_ignore *ig;
  struct mb_sync_entry *v;
  size_t n, cap;
  struct pending *stack;
  size_t depth, scap;
  uint64_t bytes, meta, excluded, entries;
  int failed;
};

static int meta_add(mb_sync_scan *s, uint64_t n, const char *path, struct mb_error *e) {
  if (s->meta + n > s->o.max_meta)
    return mb_error_fail(e, MB_CODE_SYNC_TOO_LARGE, path,
                        "the tree's names and links are over maxMetaBytes (%llu bytes) at '%s'",
                        (unsigned long long)s->o.max_meta, path);
  s->meta += n;
  return 0;
}

static int push_entry(mb_sync_scan *s, struct mb_error *e, const char *path) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 64;
    if (meta_add(s, (nc - s->cap) * sizeof *s->v, path, e) < 0) return -1;
    struct mb_sync_entry *nv = realloc(s->v, nc * sizeof *nv);
    if (!nv) return mb_error_fail(e, MB_CODE_SYNC_NOMEM, path, "out of memory");
    s->v = nv;
    s->cap = nc;
  }
  memset(&s->v[s->n], 0, sizeof s->v[s->n]);
  return 0;
}

static int push_pending(mb_sync_scan *s, size_t entry, size_t depth, struct mb_error *e) {
  if (s->depth == s->scap) {
    size_t nc = s->scap ? s->scap * 2 : 16;
    if (meta_add(s, (nc - s->scap) * sizeof *s->stack, s->v[entry].path, e) < 0) return -1;
    struct pending *ns = realloc(s->stack, nc * sizeof *ns);
    if (!ns) return mb_error_fail(e, MB_CODE_SYNC_NOMEM, s->v[entry].path, "out of memory");
    s->stack = ns;
    s->scap = nc;
  }
  s->stack[s->depth++] = (struct pending){entry, depth};
  return 0;
}

mb_sync_scan *mb_sync_scan_new(const mb_sync_root *r, const struct mb_sync_scan_opts *o, struct mb_error *e) {
  mb_sync_scan *s = calloc(1, sizeof *s);
  if (!s) return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, "", "out of memory"), NULL);
  s->r = r;
  s->o = *o;
  s->o.exclude = NULL;
  s->ig = mb_ignore_new(o->max_meta > 4096 ? (size_t)(o->max_meta < SIZE_MAX ? o->max_meta : SIZE_MAX) : 4096);
  if (!s->ig) {
    free(s);
    return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, "", "out of memory"), NULL);
  }
  int why;
  if (o->exclude && o->exclude_len &&
      mb_ignore_push(s->ig, "", 0, o->exclude, o->exclude_len, MB_IGNORE_CALLER, &why) < 0) {
    mb_sync_scan_free(s);
    return (mb_error_fail(e, why == 1 ? MB_CODE_SYNC_TOO_LARGE : MB_CODE_SYNC_NOMEM, "", "the exclude patterns are over maxMetaBytes"), NULL);
  }
  struct stat st;
  if (fstat(mb_sync_root_fd(r), &st) < 0) {
    mb_sync_sys_fail(e, errno, "stat", mb_sync_root_path(r));
    mb_sync_scan_free(s);
    return NULL;
  }
  if (push_entry(s, e, "") < 0) {
    mb_sync_scan_free(s);
    return NULL;
  }
  struct mb_sync_entry *root = &s->v[0];
  root->path = strdup("");
  if (!root->path) {
    mb_sync_scan_free(s);
    return (mb_error_fail(e, MB_CODE_SYNC_NOMEM, "", "out of memory"), NULL);
  }
  fill(root, &st);
  s->n = 1;
  if (push_pending(s, 0, mb_ignore_depth(s->ig), e) < 0) {
    mb_sync_scan_free(s);
    return NULL;
  }
  return s;
}

int mb_sync_is_stage_name(const char *nm) {
  size_t n = strlen(nm), pl = sizeof STAGE_PREFIX - 1, sl = sizeof STAGE_SUFFIX - 1;
  return n > pl + sl && memcmp(nm, STAGE_PREFIX, pl) == 0 && memcmp(nm + n - sl, STAGE_SUFFIX, sl) == 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Reads a .gitignore (a regular file, not a link) into a frame based at dir. */
static int read_gitignore(mb_sync_scan *s, int dfd, const char *dir, struct mb_error *e) {
  int fd = openat(dfd, ".gitignore", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return 0; /* absent, a link, unreadable: no rules */
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return 0;
  }
  char shown[MB_SYNC_PATH_MAX + 16];
  snprintf(shown, sizeof shown, "%s%s.gitignore", dir, *dir ? "/" : "");
  if ((uint64_t)st.st_size > s->o.max_meta - s->meta) {
    close(fd);
    return mb_error_fail(e, MB_CODE_SYNC_TOO_LARGE, shown, "'%s' is over maxMetaBytes", shown);
  }
  size_t cap = (size_t)st.st_size, got = 0;
  char *buf = malloc(cap ? cap : 1);
  if (!buf) {
    close(fd);
    return mb_error_fail(e, MB_CODE_SYNC_NOMEM, shown, "out of memory");
  }
  while (got < cap) {
    ssize_t k = read(fd, buf + got, cap - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(fd);
  int why, rc = mb_ignore_push(s->ig, dir, strlen(dir), buf, got, MB_IGNORE_FILE, &why);
  free(buf);
  if (rc < 0) return mb_error_fail(e, why == 1 ? MB_CODE_SYNC_TOO_LARGE : MB_CODE_SYNC_NOMEM, shown, "the rules of '%s' are over maxMetaBytes", shown);
  return 0;
}

/* Lists one directory (every name, sorted) and records what is not excluded. → names visited | -1 */
static long scan_dir(mb_sync_scan *s, struct pending pd, struct mb_error *e) {
  mb_ignore_pop_to(s->ig, pd.ig_depth);
  char dpath[MB_SYNC_PATH_MAX + 1];
  snprintf(dpath, sizeof dpath, "%s", s->v[pd.entry].path);
  uint64_t want_dev = s->v[pd.entry].dev, want_ino = s->v[pd.entry].ino;
  int dfd;
  if (!dpath[0]) { /* a fresh open file description: a dup would share (and move) the offset */
    dfd = openat(mb_sync_root_fd(s->r), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return mb_sync_sys_fail(e, errno, "open", mb_sync_root_path(s->r));
  } else {
    const char *leaf;
    int pfd = mb_sync_open_parent(s->r, dpath, 0, &leaf, e);
    if (pfd < 0) return -1;
    dfd = openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    close(pfd);
    if (dfd < 0) {
      if (err == ELOOP || err == ENOTDIR || err == ENOENT)
        return mb_error_fail(e, MB_CODE_SYNC_CHANGED, dpath, "directory '%s' changed while the tree was scanned", dpath);
      return mb_sync_sys_fail(e, err, "open directory", dpath);
    }
  }
  struct stat dst;
  if (fstat(dfd, &dst) < 0 || (uint64_t)dst.st_dev != want_dev || (uint64_t)dst.st_ino != want_ino) {
    close(dfd);
    return mb_error_fail(e, MB_CODE_SYNC_CHANGED, dpath, "directory '%s' changed while the tree was scanned", dpath);
  }
  if (s->o.gitignore && read_gitignore(s, dfd, dpath, e) < 0) {
    close(dfd);
    return -1;
  }
  size_t child_depth = mb_ignore_depth(s->ig);
  int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
  if (!d) {
    int err = errno;
    if (lfd >= 0) close(lfd);
    close(dfd);
    return mb_sync_sys_fail(e, err, "list", dpath[0] ? dpath : mb_sync_root_path(s->r));
  }
  char **names = NULL;
  size_t nn = 0, ncap = 0;
  uint64_t listed = 0;
  long rc = 0;
  struct dirent *de;
  while ((errno = 0, de = readdir(d))) {
    const char *nm = de->d_name;
    if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
    if (!dpath[0] && mb_sync_is_stage_name(nm)) continue;
    size_t l = strlen(nm);
    listed += l + 1 + sizeof(char *);
    if (listed > s->o.max_meta - s->meta) {
      rc = mb_error_fail(e, MB_CODE_SYNC_TOO_LARGE, dpath, "directory '%s' lists more names than maxMetaBytes allows", dpath);
      break;
    }
    if (nn == ncap) {
      size_t nc = ncap ? ncap * 2 : 64;
      char **nv = realloc(names, nc * sizeof *nv);
      if (!nv) { rc = mb_error_fail(e, MB_CODE_SYNC_NOMEM, dpath, "out of memory"); break; }
      names = nv;
      ncap = nc;
    }
    if (!(names[nn] = strdup(nm))) { rc = mb_error_fail(e, MB_CODE_SYNC_NOMEM, dpath, "out of memory"); break; }
    nn++;
  }
  if (rc == 0 && errno) rc = mb_sync_sys_fail(e, errno, "list", dpath);
  closedir(d);
  if (rc == 0 && nn > 1) qsort(names, nn, sizeof *names, cmp_names);
  size_t first_child = s->n, subdirs = 0;
  for (size_t i = 0; rc == 0 && i < nn; i++) {
    char path[MB_SYNC_PATH_MAX + 2];
    int pl = snprintf(path, sizeof path, "%s%s%s", dpath, dpath[0] ? "/" : "", names[i]);
    if (pl < 0 || pl > MB_SYNC_PATH_MAX) {
      rc = mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, dpath, "a name in '%s' makes a path over %d bytes", dpath, MB_SYNC_PATH_MAX);
      break;
    }
    struct stat st;
    if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) continue; /* gone meanwhile: not part of the tree */
      rc = mb_sync_sys_fail(e, errno, "stat", path);
      break;
    }
    int t = type_of(st.st_mode), excluded = mb_ignore_match(s->ig, path, (size_t)pl, S_ISDIR(st.st_mode));
    if (excluded) {
      s->excluded++;
      if (!s->o.keep_excluded) continue;
      /* recorded (not descended, not counted): the other side must not take it for deleted */
      if (meta_add(s, (uint64_t)pl + 1, path, e) < 0 || push_entry(s, e, path) < 0) { rc = -1; break; }
      struct mb_sync_entry *en = &s->v[s->n];
      fill(en, &st);
      en->excluded = 1;
      if (!(en->path = malloc((size_t)pl + 1))) { rc = mb_error_fail(e, MB_CODE_SYNC_NOMEM, path, "out of memory"); break; }
      memcpy(en->path, path, (size_t)pl + 1);
      en->plen = (size_t)pl;
      s->n++;
      continue;
    }
    if (t == 'o') {
      rc = mb_error_fail(e, MB_CODE_SYNC_UNSUPPORTED_TYPE, path, "'%s' is %s: not synced (exclude it)", path, other_kind(st.st_mode));
      break;
    }
    if (++s->entries > s->o.max_entries) {
      rc = mb_error_fail(e, MB_CODE_SYNC_TOO_MANY_FILES, path, "the tree has more than maxFiles (%llu) entries at '%s'",
                        (unsigned long long)s->o.max_entries, path);
      break;
    }
    if (t == MB_SYNC_FILE && (uint64_t)st.st_size > s->o.max_bytes - s->bytes) {
      rc = mb_error_fail(e, MB_CODE_SYNC_TOO_LARGE, path, "the tree's files are over maxBytes (%llu bytes) at '%s'",
                        (unsigned long long)s->o.max_bytes, path);
      break;
    }
    char lbuf[MB_SYNC_PATH_MAX + 2];
    ssize_t ll = 0;
    if (t == MB_SYNC_LINK) {
      ll = readlinkat(dfd, names[i], lbuf, sizeof lbuf - 1);
      if (ll < 0) { rc = mb_sync_sys_fail(e, errno, "read link", path); break; }
      if (ll > MB_SYNC_PATH_MAX) {
        rc = mb_error_fail(e, MB_CODE_SYNC_UNSAFE_ENTRY, path, "the target of link '%s' is over %d bytes", path, MB_SYNC_PATH_MAX);
        break;
      }
      lbuf[ll] = 0;
    }
    if (meta_add(s, (uint64_t)pl + 1 + (t == MB_SYNC_LINK ? (uint64_t)ll + 1 : 0), path, e) < 0 ||
        push_entry(s, e, path) < 0) { rc = -1; break; }
    struct mb_sync_entry *en = &s->v[s->n];
    fill(en, &st);
    en->path = malloc((size_t)pl + 1);
    en->link = t == MB_SYNC_LINK ? malloc((size_t)ll + 1) : NULL;
    if (!en->path || (t == MB_SYNC_LINK && !en->link)) {
      free(en->path);
      free(en->link);
      rc = mb_error_fail(e, MB_CODE_SYNC_NOMEM, path, "out of memory");
      break;
    }
    memcpy(en->path, path, (size_t)pl + 1);
    en->plen = (size_t)pl;
    if (en->link) memcpy(en->link, lbuf, (size_t)ll + 1);
    if (t == MB_SYNC_FILE) s->bytes += en->size;
    s->n++;
    if (t == MB_SYNC_DIR) subdirs++;
  }
  /* Subdirectories are visited in name order: pushed last first. */
  for (size_t i = s->n; rc == 0 && subdirs && i-- > first_child;) {
    if (s->v[i].type != MB_SYNC_DIR || s->v[i].excluded) continue;
    if (push_pending(s, i, child_depth, e) < 0) rc = -1;
    subdirs--;
  }
  for (size_t i = 0; i < nn; i++) free(names[i]);
  free(names);
  close(dfd);
  return rc < 0 ? -1 : (long)(nn ? nn : 1);
}

int mb_sync_scan_step(mb_sync_scan *s, size_t budget, struct mb_error *e) {
  if (s->failed) return mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, "", "the scan failed before");
  size_t done = 0;
  while (s->depth > 0 && done < budget) {
    struct pending pd = s->stack[--s->depth];
    long k = scan_dir(s, pd, e);
    if (k < 0) {
      s->failed = 1;
      return -1;
    }
    done += (size_t)k;
  }
  return s->depth == 0 ? 1 : 0;
}

size_t mb_sync_scan_count(const mb_sync_scan *s) { return s->n; }
struct mb_sync_entry *mb_sync_scan_entry(mb_sync_scan *s, size_t i) { return i < s->n ? &s->v[i] : NULL; }
uint64_t mb_sync_scan_bytes(const mb_sync_scan *s) { return s->bytes; }
uint64_t mb_sync_scan_excluded(const mb_sync_scan *s) { return s->excluded; }

void mb_sync_scan_free(mb_sync_scan *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) {
    free(s->v[i].path);
    free(s->v[i].link);
  }
  free(s->v);
  free(s->stack);
  mb_ignore_free(s->ig);
  free(s);
}


/* ---- removal ---- */

#define RMTREE_DEPTH_MAX 512

static int rmtree_at(int pfd, const char *name, int depth, const char *rel, struct mb_error *e) {
  if (unlinkat(pfd, name, 0) == 0 || errno == ENOENT) return 0;
  if (errno != EISDIR && errno != EPERM) return mb_sync_sys_fail(e, errno, "remove", rel);
  if (depth > RMTREE_DEPTH_MAX) return mb_error_fail(e, MB_CODE_SYNC_IO_ERROR, rel, "'%s' is nested too deeply to remove", rel);
  int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return mb_sync_sys_fail(e, errno, "open directory", rel);
  DIR *d = fdopendir(fd);
  if (!d) {
    int err = errno;
    close(fd);
    return mb_sync_sys_fail(e, err, "list", rel);
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    rc = rmtree_at(dirfd(d), de->d_name, depth + 1, rel, e);
  }
  closedir(d);
  if (rc == 0 && unlinkat(pfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) rc = mb_sync_sys_fail(e, errno, "remove directory", rel);
  return rc;
}

int mb_sync_rmtree(const mb_sync_root *r, const char *rel, struct mb_error *e) {
  const char *leaf;
  int pfd = open_parent_if_any(r, rel, &leaf, e);
  if (pfd == -2) return 0;                           /* nothing there: nothing to do */
  if (pfd < 0) return -1;
  int rc = rmtree_at(pfd, leaf, 0, rel, e);
  close(pfd);
  return rc;
}

