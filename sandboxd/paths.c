/* paths.c — path resolution inside the sandbox root and EntryInfo (see paths.h). */
#include "paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sys/fsuid.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define XATTR_PREFIX "user.e2b."
#define XATTR_LIST_MAX_BYTES 65536

/* Appends component comp (length n) to out (absolute, clean), folding "." and "..". */
static int push_comp(char *out, size_t outlen, size_t *len, const char *comp, size_t n) {
  if (n == 0 || (n == 1 && comp[0] == '.')) return 0;
  if (n == 2 && comp[0] == '.' && comp[1] == '.') {
    while (*len > 1 && out[*len - 1] != '/') (*len)--;
    if (*len > 1) (*len)--;                 /* drop the slash unless at "/" */
    out[*len] = '\0';
    return 0;
  }
  size_t need = *len + (*len > 1) + n + 1;
  if (need > outlen) return -ENAMETOOLONG;
  if (*len > 1) out[(*len)++] = '/';
  memcpy(out + *len, comp, n);
  *len += n;
  out[*len] = '\0';
  return 0;
}

static int push_path(char *out, size_t outlen, size_t *len, const char *p) {
  while (*p) {
    while (*p == '/') p++;
    const char *e = p;
    while (*e && *e != '/') e++;
    int rc = push_comp(out, outlen, len, p, (size_t)(e - p));
    if (rc) return rc;
    p = e;
  }
  return 0;
}

int paths_resolve(const fs_ctx *c, const char *in, char *out, size_t outlen) {
  if (outlen < 2) return -ENAMETOOLONG;
  if (strlen(in) >= PATHS_MAX) return -ENAMETOOLONG;
  out[0] = '/'; out[1] = '\0';
  size_t len = 1;
  int rc;
  if (in[0] == '~' && (in[1] == '\0' || in[1] == '/')) {
    if ((rc = push_path(out, outlen, &len, c->home))) return rc;
    in++;
  } else if (in[0] != '/') {
    if ((rc = push_path(out, outlen, &len, c->home))) return rc;
  }
  return push_path(out, outlen, &len, in);
}

int paths_open(const fs_ctx *c, const char *abs, int flags, mode_t mode, uint64_t extra) {
  struct open_how how = { .flags = (uint64_t)(flags | O_CLOEXEC), .mode = (flags & O_CREAT) ? mode : 0,
                          .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | extra };
  const char *rel = abs[0] == '/' && abs[1] ? abs + 1 : (abs[0] == '/' ? "." : abs);
  long fd = syscall(SYS_openat2, c->root, rel, &how, sizeof how);
  return fd < 0 ? -errno : (int)fd;
}

int paths_open_parent(const fs_ctx *c, const char *abs, char *name, size_t namelen) {
  const char *slash = strrchr(abs, '/');
  if (!slash || !slash[1]) return -EINVAL;
  if (strlen(slash + 1) >= namelen) return -ENAMETOOLONG;
  snprintf(name, namelen, "%s", slash + 1);
  char parent[PATHS_MAX];
  size_t n = (size_t)(slash - abs);
  if (n == 0) n = 1;
  if (n >= sizeof parent) return -ENAMETOOLONG;
  memcpy(parent, abs, n);
  parent[n] = '\0';
  return paths_open(c, parent, O_PATH | O_DIRECTORY, 0, 0);
}

static dev_t g_volume_dev;
void paths_allow_dev(dev_t dev) { g_volume_dev = dev; }

int paths_fs_check(int fd) {
  struct statfs sf;
  if (fstatfs(fd, &sf) != 0) return -errno;
  /* An allowlist: the sandbox's own files live on its overlays and tmpfs mounts, and in the
   * volumes mounted into it. proc, sysfs, devpts, cgroup and host bind mounts reach the whole
   * kernel or the host. */
  if (sf.f_type == OVERLAYFS_SUPER_MAGIC || sf.f_type == TMPFS_MAGIC) return 0;
  struct stat st;
  if (g_volume_dev && fstat(fd, &st) == 0 && st.st_dev == g_volume_dev) return 0;
  return -PATHS_EFOREIGN;
}

const char *paths_fs_name(int fd) {
  struct statfs sf;
  if (fstatfs(fd, &sf) != 0) return "unknown";
  switch (sf.f_type) {
    case PROC_SUPER_MAGIC: return "proc";
    case SYSFS_MAGIC: return "sysfs";
    case DEVPTS_SUPER_MAGIC: return "devpts";
    case CGROUP_SUPER_MAGIC: case CGROUP2_SUPER_MAGIC: return "cgroup";
    case OVERLAYFS_SUPER_MAGIC: return "overlay";
    case TMPFS_MAGIC: return "tmpfs";
    default: return "foreign";
  }
}

int paths_open_file(const fs_ctx *c, const char *abs, int flags, char *fsname, size_t fslen) {
  if (fslen) fsname[0] = '\0';
  for (int attempt = 0; attempt < 8; attempt++) {
    int p = paths_open(c, abs, O_PATH, 0, 0);
    if (p == -ENOENT && (flags & O_CREAT)) {
      /* O_EXCL: a symlink or file that appears meanwhile is not followed; the loop looks again. */
      int fd = paths_open(c, abs, (flags & ~O_TRUNC) | O_EXCL | O_NONBLOCK, 0644, 0);
      if (fd == -EEXIST) continue;
      if (fd < 0) return fd;
      int rc = paths_fs_check(fd);
      if (rc) { if (fslen) snprintf(fsname, fslen, "%s", paths_fs_name(fd)); close(fd); return rc; }
      fcntl(fd, F_SETFL, 0);
      return fd;
    }
    if (p < 0) return p;
    struct stat st;
    int rc = fstat(p, &st) != 0 ? -errno : paths_fs_check(p);
    if (rc == -PATHS_EFOREIGN && fslen) snprintf(fsname, fslen, "%s", paths_fs_name(p));
    if (!rc && S_ISDIR(st.st_mode)) rc = -EISDIR;
    else if (!rc && !S_ISREG(st.st_mode)) rc = -PATHS_ENOTREG;
    if (rc) { close(p); return rc; }
    /* Reopen the very inode that was checked: a symlink swapped in meanwhile changes nothing. */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", p);
    int fd = open(self, (flags & ~(O_CREAT | O_EXCL)) | O_CLOEXEC);
    rc = fd < 0 ? -errno : 0;
    close(p);
    return fd < 0 ? rc : fd;
  }
  return -EAGAIN;
}

void paths_cred_enter(const fs_ctx *c, paths_cred *save) {
  save->uid = setfsuid(c->host_uid);       /* per thread: the worker thread of this request */
  save->gid = setfsgid(c->host_gid);
  /* Leaving fsuid 0 drops the file capabilities from the effective set; raise again only what
   * envd's root powers need here: write anywhere (DAC_OVERRIDE), give files to the user (CHOWN),
   * remove from sticky directories and set xattrs on others' files (FOWNER). Never reaches
   * beyond the sandbox's own file systems: every fd is checked with paths_fs_check. */
  struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
  struct __user_cap_data_struct d[2];
  const unsigned fs_caps = 1u << CAP_CHOWN | 1u << CAP_DAC_OVERRIDE | 1u << CAP_FOWNER;
  if (syscall(SYS_capget, &h, d) == 0 && (d[0].permitted & fs_caps) != (d[0].effective & fs_caps)) {
    d[0].effective |= d[0].permitted & fs_caps;
    if (syscall(SYS_capset, &h, d) != 0) { /* without them creation still works where the user may write */ }
  }
}

void paths_cred_leave(const paths_cred *save) {
  setfsuid((uid_t)save->uid);
  setfsgid((gid_t)save->gid);
}

/* The directory that abs's first k components name (k = 0: the root), opened from the root as
 * every path is; a negative errno when it does not resolve to a directory. */
static int open_prefix(const fs_ctx *c, const char *abs, const uint16_t *ends, size_t k) {
  char prefix[PATHS_MAX];
  size_t n = k ? ends[k] : 1;
  memcpy(prefix, abs, n);
  prefix[n] = '\0';
  return paths_open(c, prefix, O_PATH | O_DIRECTORY, 0, 0);
}

/* The deepest existing directory is found by bisection (a prefix that resolves has every shorter
 * one resolving) and the missing ones are made below it by fd, each checked and given to the
 * user: depth·log(depth) path steps, where opening every prefix from the root took depth² (an
 * upload 2,000 levels deep walked four million). */
static int mkdir_p(const fs_ctx *c, const char *abs, bool *created, size_t *first) {
  *created = false;
  if (first) *first = 0;
  size_t len = strlen(abs);
  if (len >= PATHS_MAX) return -ENAMETOOLONG;
  uint16_t ends[PATHS_MAX / 2 + 1];   /* ends[k]: where component k ends in abs */
  size_t n = 0;
  for (size_t i = 1; i <= len; i++)
    if ((i == len || abs[i] == '/') && abs[i - 1] != '/') ends[++n] = (uint16_t)i;
  int fd = open_prefix(c, abs, ends, n);
  if (fd >= 0) { close(fd); return 0; }
  size_t have = 0, missing = n;        /* prefix `have` resolves, prefix `missing` does not */
  while (missing - have > 1) {
    size_t mid = have + (missing - have) / 2;
    fd = open_prefix(c, abs, ends, mid);
    if (fd >= 0) { close(fd); have = mid; }
    else missing = mid;
  }
  int dfd = open_prefix(c, abs, ends, have);
  if (dfd < 0) return dfd;             /* changed meanwhile */
  for (size_t k = have + 1; k <= n; k++) {
    int rc = paths_fs_check(dfd);
    char name[256];
    size_t from = k > 1 ? ends[k - 1] : 0;
    while (abs[from] == '/') from++;
    size_t nlen = ends[k] - from;
    if (!rc && nlen >= sizeof name) rc = -ENAMETOOLONG;
    int nfd = -1;
    if (!rc) {
      memcpy(name, abs + from, nlen);
      name[nlen] = '\0';
      if (mkdirat(dfd, name, 0755) == 0) {
        /* The new directory by fd, never by name: a symlink swapped in cannot redirect the chown. */
        nfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 || fchown(nfd, c->host_uid, c->host_gid) != 0) rc = -errno;
        else {
          *created = true;
          if (first && !*first) *first = ends[k];
        }
      } else if (errno != EEXIST) {
        rc = -errno;
      } else {
        /* there already: made meanwhile, or a file or link, which resolves from the root as any path */
        *created = false;
        nfd = open_prefix(c, abs, ends, k);
        if (nfd < 0 && k == n) { close(dfd); return 0; }
        if (nfd < 0) rc = nfd;
      }
    }
    close(dfd);
    if (rc) { if (nfd >= 0) close(nfd); return rc; }
    dfd = nfd;
  }
  close(dfd);
  return 0;
}

int paths_mkdir_p(const fs_ctx *c, const char *abs, bool *created, size_t *first) {
  paths_cred cr;
  paths_cred_enter(c, &cr);
  int rc = mkdir_p(c, abs, created, first);
  paths_cred_leave(&cr);
  return rc;
}

void paths_unmake(const fs_ctx *c, const char *abs, size_t first) {
  char dir[PATHS_MAX];
  size_t len = strlen(abs);
  if (!first || first > len || len >= sizeof dir) return;
  memcpy(dir, abs, len + 1);
  paths_cred cr;
  paths_cred_enter(c, &cr);
  while (len >= first) {
    char name[256];
    int dfd = paths_open_parent(c, dir, name, sizeof name);
    if (dfd < 0) break;
    int rc = unlinkat(dfd, name, AT_REMOVEDIR);   /* only an empty one: what another put there stays */
    close(dfd);
    if (rc != 0) break;
    while (len > 0 && dir[len - 1] != '/') len--;
    if (len > 0) len--;                           /* the slash */
    dir[len] = '\0';
  }
  paths_cred_leave(&cr);
}

/* paths_realpath, and with `create` its last level may be missing (paths_create_path). */
static int walk(const fs_ctx *c, const char *abs, bool create, char *out, size_t outlen) {
  /* todo holds what remains to walk; a symlink's target is put in front of it. */
  char todo[PATHS_MAX * 2], cur[PATHS_MAX] = "/";
  size_t curlen = 1;
  if (strlen(abs) >= sizeof todo) return -ENAMETOOLONG;
  snprintf(todo, sizeof todo, "%s", abs);
  int hops = 0;
  char *p = todo;
  while (*p) {
    while (*p == '/') p++;
    if (!*p) break;
    char *e = p;
    while (*e && *e != '/') e++;
    size_t n = (size_t)(e - p);
    size_t save = curlen;
    int rc = push_comp(cur, sizeof cur, &curlen, p, n);
    if (rc) return rc;
    p = e;
    if (n <= 2 && p[-1] == '.' && (n == 1 || p[-2] == '.')) continue;
    char name[256];
    int dfd = paths_open_parent(c, cur, name, sizeof name);
    if (dfd < 0) return dfd;
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      int er = -errno;
      close(dfd);
      if (er == -ENOENT && create) {
        if (!*p) break;                              /* the last level, missing: what a create makes */
        if (!p[strspn(p, "/")]) return -EISDIR;      /* "missing/": only a directory could be */
      }
      return er;
    }
    if (!S_ISLNK(st.st_mode)) { close(dfd); continue; }
    char target[PATHS_MAX];
    ssize_t tl = readlinkat(dfd, name, target, sizeof target - 1);
    close(dfd);
    if (tl < 0) return -errno;
    if (tl == 0) return -ENOENT;   /* an empty link leads nowhere (as the kernel says) */
    target[tl] = '\0';
    if (++hops > 40) return -ELOOP;
    char rest[PATHS_MAX * 2];
    size_t pl = strlen(p);
    if ((size_t)tl + pl + 2 > sizeof rest) return -ENAMETOOLONG;
    memcpy(rest, target, (size_t)tl);
    size_t sep = pl ? 1 : 0;   /* a link last: its target as written (a trailing '/' of its own kept) */
    rest[tl] = '/';
    memcpy(rest + tl + sep, p, pl + 1);
    memcpy(todo, rest, (size_t)tl + pl + sep + 1);
    p = todo;
    if (target[0] == '/') { cur[0] = '/'; cur[1] = '\0'; curlen = 1; }
    else { curlen = save; cur[curlen] = '\0'; }
  }
  if (curlen + 1 > outlen) return -ENAMETOOLONG;
  snprintf(out, outlen, "%s", cur);
  return 0;
}

int paths_realpath(const fs_ctx *c, const char *abs, char *out, size_t outlen) { return walk(c, abs, false, out, outlen); }
int paths_create_path(const fs_ctx *c, const char *abs, char *out, size_t outlen) { return walk(c, abs, true, out, outlen); }

/* Go's FileMode.String() for an lstat mode: type letters, then rwxrwxrwx. */
static void go_mode_string(mode_t m, char *out) {
  size_t i = 0;
  if (S_ISDIR(m)) out[i++] = 'd';
  if (S_ISLNK(m)) out[i++] = 'L';
  if (S_ISBLK(m) || S_ISCHR(m)) out[i++] = 'D';
  if (S_ISFIFO(m)) out[i++] = 'p';
  if (S_ISSOCK(m)) out[i++] = 'S';
  if (m & S_ISUID) out[i++] = 'u';
  if (m & S_ISGID) out[i++] = 'g';
  if (S_ISCHR(m)) out[i++] = 'c';
  if (m & S_ISVTX) out[i++] = 't';
  if (i == 0) out[i++] = '-';
  static const char rwx[] = "rwxrwxrwx";
  for (int b = 0; b < 9; b++) out[i++] = (m & (1u << (8 - b))) ? rwx[b] : '-';
  out[i] = '\0';
}

static void id_name(uid_t id, uid_t host_root, uid_t host_user, char *out, size_t outlen) {
  if (id == host_root) snprintf(out, outlen, "root");
  else if (id == host_user) snprintf(out, outlen, "user");
  else if (host_root == 0) snprintf(out, outlen, "%u", (unsigned)id);           /* identity map */
  else if (id > host_root && id - host_root < 65536) snprintf(out, outlen, "%u", (unsigned)(id - host_root));
  else snprintf(out, outlen, "nobody");                                          /* unmapped: overflow id inside */
}

void paths_owner_name(const fs_ctx *c, uid_t id, char *out, size_t outlen) {
  id_name(id, c->host_root_uid, c->host_user_uid, out, outlen);
}
void paths_group_name(const fs_ctx *c, gid_t id, char *out, size_t outlen) {
  id_name(id, (uid_t)c->host_root_gid, (uid_t)c->host_user_gid, out, outlen);
}

static json_t *timestamp(const struct timespec *ts) {
  time_t t = ts->tv_sec;
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[64];
  int n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                   tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  long ns = ts->tv_nsec;   /* protobuf JSON: 0, 3, 6 or 9 fractional digits */
  if (ns % 1000000 == 0 && ns) snprintf(buf + n, sizeof buf - (size_t)n, ".%03ldZ", ns / 1000000);
  else if (ns % 1000 == 0 && ns) snprintf(buf + n, sizeof buf - (size_t)n, ".%06ldZ", ns / 1000);
  else if (ns) snprintf(buf + n, sizeof buf - (size_t)n, ".%09ldZ", ns);
  else snprintf(buf + n, sizeof buf - (size_t)n, "Z");
  return json_string(buf);
}

static int proc_fd_path(int fd, char *buf, size_t len) {
  return snprintf(buf, len, "/proc/self/fd/%d", fd) >= (int)len ? -1 : 0;
}

json_t *paths_metadata(int fd) {
  json_t *md = json_object();
  char p[64];
  if (!md || proc_fd_path(fd, p, sizeof p)) return md;
  /* Through /proc/self/fd: works for O_PATH fds and follows to the inode itself. */
  ssize_t n = listxattr(p, NULL, 0);
  if (n <= 0 || n > XATTR_LIST_MAX_BYTES) return md;
  char *names = malloc((size_t)n);
  if (!names) return md;
  n = listxattr(p, names, (size_t)n);
  for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1) {
    const char *nm = names + off;
    if (strncmp(nm, XATTR_PREFIX, strlen(XATTR_PREFIX)) != 0) continue;
    char val[4097];
    ssize_t vl = getxattr(p, nm, val, sizeof val - 1);
    if (vl < 0) continue;
    val[vl] = '\0';
    json_t *s = json_stringn(val, (size_t)vl);
    if (s) json_object_set_new(md, nm + strlen(XATTR_PREFIX), s);
  }
  free(names);
  return md;
}

int paths_set_metadata(int fd, json_t *md) {
  char p[64];
  if (proc_fd_path(fd, p, sizeof p)) return -EINVAL;
  ssize_t n = listxattr(p, NULL, 0);
  if (n > 0 && n <= XATTR_LIST_MAX_BYTES) {
    char *names = malloc((size_t)n);
    if (!names) return -ENOMEM;
    n = listxattr(p, names, (size_t)n);
    for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1)
      if (strncmp(names + off, XATTR_PREFIX, strlen(XATTR_PREFIX)) == 0 && removexattr(p, names + off) != 0 &&
          errno != ENODATA) {
        int er = -errno;
        free(names);
        return er;
      }
    free(names);
  }
  const char *k;
  json_t *v;
  json_object_foreach(md, k, v) {
    char name[300];
    if (snprintf(name, sizeof name, XATTR_PREFIX "%s", k) >= (int)sizeof name) return -ENAMETOOLONG;
    const char *s = json_string_value(v);
    if (setxattr(p, name, s, strlen(s), 0) != 0) return -errno;
  }
  return 0;
}

json_t *paths_entry(const fs_ctx *c, int dirfd, const char *name, const char *display) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return NULL;
  const char *slash = strrchr(display, '/');
  const char *base = slash && slash[1] ? slash + 1 : "/";
  mode_t tmode = st.st_mode;       /* the type and permissions reported: the target's for a symlink */
  char target[PATHS_MAX] = "";
  if (S_ISLNK(st.st_mode)) {
    int fd = paths_open(c, display, O_PATH, 0, 0);
    struct stat ts;
    if (fd >= 0 && fstat(fd, &ts) == 0) tmode = ts.st_mode;
    else tmode = 0;                /* dangling: no type */
    if (fd >= 0) close(fd);
    if (paths_realpath(c, display, target, sizeof target) != 0) snprintf(target, sizeof target, "%s", display);
  }
  const char *type = S_ISREG(tmode) ? "FILE_TYPE_FILE" : S_ISDIR(tmode) ? "FILE_TYPE_DIRECTORY" : NULL;
  char perms[32], owner[32], group[32], size[32];
  go_mode_string(st.st_mode, perms);
  paths_owner_name(c, st.st_uid, owner, sizeof owner);
  paths_group_name(c, st.st_gid, group, sizeof group);
  snprintf(size, sizeof size, "%lld", (long long)st.st_size);
  json_t *e = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s,s:s}", "name", base, "path", display, "size", size,
                        "mode", (int)(tmode & 0777), "permissions", perms, "owner", owner, "group", group);
  if (!e) { errno = EILSEQ; return NULL; }   /* names that are not UTF-8 cannot travel in JSON */
  if (type) json_object_set_new(e, "type", json_string(type));
  if (st.st_mtim.tv_sec || st.st_mtim.tv_nsec) json_object_set_new(e, "modifiedTime", timestamp(&st.st_mtim));
  if (target[0]) json_object_set_new(e, "symlinkTarget", json_string(target));
  if (!S_ISLNK(st.st_mode)) {
    int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      json_t *md = paths_metadata(fd);
      close(fd);
      if (md && json_object_size(md)) json_object_set_new(e, "metadata", md);
      else json_decref(md);
    }
  }
  return e;
}

json_t *paths_entry_at(const fs_ctx *c, const char *abs) {
  if (strcmp(abs, "/") == 0) {
    int fd = paths_open(c, "/", O_PATH | O_DIRECTORY, 0, 0);
    if (fd < 0) { errno = -fd; return NULL; }
    json_t *e = paths_entry(c, fd, ".", "/");
    int er = errno;
    close(fd);
    errno = er;
    return e;
  }
  char name[256];
  int dfd = paths_open_parent(c, abs, name, sizeof name);
  if (dfd < 0) { errno = -dfd; return NULL; }
  json_t *e = paths_entry(c, dfd, name, abs);
  int er = errno;
  close(dfd);
  errno = er;
  return e;
}
