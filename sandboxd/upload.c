/* upload.c — see upload.h. */
#include "upload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define UPLOAD_PART_SLOTS 2048   /* twice UPLOAD_MAX_PARTS: the duplicate-path set stays sparse */

struct upload {
  const fs_ctx *c;
  const char *qpath;
  json_t *md, *results;
  int fd;                            /* the private temporary file of the current part, or -1 */
  int dirfd;                         /* O_PATH of its directory */
  char tmp[256], base[256];          /* its name there, and the target's */
  char made[PATHS_MAX];              /* its parent, and how much of it the part made (0: none) */
  size_t made_from;
  bool in_part, gz;
  uint64_t part_bytes, written, limit;
  char part_name[PATHS_MAX], cur_fn[PATHS_MAX];
  int status;
  char msg[PATHS_MAX + 256];
  uint16_t seen[UPLOAD_PART_SLOTS];  /* index + 1 into results, by path hash */
};
typedef struct upload up_ctx;

static int fail(up_ctx *u, int status, const char *fmt, const char *a) {
  u->status = status;
  snprintf(u->msg, sizeof u->msg, fmt, a);
  return 1;
}

static int fail_fd(up_ctx *u, int status, const char *fmt, const char *a) {
  fail(u, status, fmt, a);
  return -1;
}

/* Drops the current part's temporary file and the parents it made: the target was never touched. */
void upload_abort(up_ctx *u) {
  if (u->fd < 0) return;
  close(u->fd);
  u->fd = -1;
  paths_cred cr;
  paths_cred_enter(u->c, &cr);
  unlinkat(u->dirfd, u->tmp, 0);
  paths_cred_leave(&cr);
  close(u->dirfd);
  u->dirfd = -1;
  paths_unmake(u->c, u->made, u->made_from);
  u->made_from = 0;
}

/* The part arrived whole: metadata on the temporary file, then it replaces the target at once. */
int upload_finish(up_ctx *u) {
  if (u->fd < 0) return 0;
  int mr = paths_set_metadata(u->fd, u->md);
  if (mr) { upload_abort(u); return fail(u, mr == -ENOSPC ? 507 : 500, "cannot set metadata on '%s'", u->part_name); }
  paths_cred cr;
  paths_cred_enter(u->c, &cr);
  int rc = renameat(u->dirfd, u->tmp, u->dirfd, u->base) != 0 ? errno : 0;
  paths_cred_leave(&cr);
  if (rc) { upload_abort(u); return fail(u, rc == ENOSPC || rc == EDQUOT ? 507 : 500, "cannot write '%s'", u->part_name); }
  /* Watchers see the target created (moved in) and then written, as with envd's in-place write:
   * a same-size truncate through the renamed file raises IN_MODIFY under the target's name. */
  struct stat st;
  if (fstat(u->fd, &st) == 0 && ftruncate(u->fd, st.st_size) != 0) { /* only a notification is lost */ }
  close(u->fd);
  close(u->dirfd);
  u->fd = u->dirfd = -1;
  u->made_from = 0;
  return 0;
}

/* The reasons today's messages give for a target that cannot be written; -1. */
static int open_fail(up_ctx *u, const char *abs, int err, const char *fsname) {
  if (err == -EISDIR) return fail_fd(u, 400, "path '%s' is a directory", abs);
  if (err == -PATHS_ENOTREG) return fail_fd(u, 400, "path '%s' is not a regular file", abs);
  if (err == -PATHS_EFOREIGN) {
    u->status = 403;
    snprintf(u->msg, sizeof u->msg, "path '%.4000s' is on the sandbox's %s file system: /files reads and writes "
             "only the sandbox's own files", abs, fsname[0] ? fsname : "foreign");
    return -1;
  }
  if (err == -ENOSPC || err == -EDQUOT) return fail_fd(u, 507, "not enough disk space for '%s'", abs);
  char m[PATHS_MAX + 64];
  snprintf(m, sizeof m, "%.4000s: %s", abs, strerror(-err));
  return fail_fd(u, 500, "cannot open for writing: %s", m);
}

/* Whether abs's last level is a symbolic link (the levels above followed inside the root). */
static bool last_is_link(const fs_ctx *c, const char *abs) {
  int fd = paths_open(c, abs, O_PATH | O_NOFOLLOW, 0, 0);
  struct stat st;
  bool link = fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode);
  if (fd >= 0) close(fd);
  return link;
}

/* Parents made (0755, the user's) as before; then a private temporary file (O_EXCL, 0644 or the
 * target's mode, the user's) in the target's directory (a symlinked target: its real path's).
 * 0, or -1 after fail(). */
static int open_target(up_ctx *u, const char *abs, const char *slash) {
  u->made_from = 0;
  if (slash != abs) {
    char *parent = u->made;
    snprintf(parent, sizeof u->made, "%.*s", (int)(slash - abs), abs);
    bool created;
    int rc = paths_mkdir_p(u->c, parent, &created, &u->made_from);
    if (rc == -ENOTDIR) return fail_fd(u, 400, "a parent of '%s' is not a directory", abs);
    if (rc == -PATHS_EFOREIGN)
      return fail_fd(u, 403, "the parent of '%s' is not on the sandbox's own file systems (proc, sysfs, devpts, "
                     "cgroup and similar are refused)", abs);
    if (rc) return fail_fd(u, rc == -ENOSPC ? 507 : 500, "cannot create the parents of '%s'", abs);
  }
  char real[PATHS_MAX], fsname[32] = "";
  snprintf(real, sizeof real, "%s", abs);
  mode_t mode = 0644;
  int p = paths_open(u->c, abs, O_PATH, 0, 0);
  if (p >= 0) {                                        /* an existing target: checked like today */
    struct stat st;
    int rc = fstat(p, &st) != 0 ? -errno : paths_fs_check(p);
    if (rc == -PATHS_EFOREIGN) snprintf(fsname, sizeof fsname, "%s", paths_fs_name(p));
    if (!rc && S_ISDIR(st.st_mode)) rc = -EISDIR;
    else if (!rc && !S_ISREG(st.st_mode)) rc = -PATHS_ENOTREG;
    close(p);
    if (rc) return open_fail(u, abs, rc, fsname);
    mode = st.st_mode & 0777;
  } else if (p != -ENOENT) {
    return open_fail(u, abs, p, fsname);
  }
  /* A link at abs, to a file or dangling: the file goes where open(O_CREAT) writes through it, the
   * last link's target, the links kept (envd's upload opens the path so); a dangling one whose
   * target's directory is missing is an error. Else abs itself, its parent resolved by the kernel
   * below: a plain upload walks no level. */
  if (last_is_link(u->c, abs)) {
    int rc = paths_create_path(u->c, abs, real, sizeof real);
    if (rc) return open_fail(u, abs, rc, fsname);
  }
  int dfd = paths_open_parent(u->c, real, u->base, sizeof u->base);
  if (dfd < 0) return open_fail(u, abs, dfd, fsname);
  int rc = paths_fs_check(dfd);
  if (rc) {
    if (rc == -PATHS_EFOREIGN) snprintf(fsname, sizeof fsname, "%s", paths_fs_name(dfd));
    close(dfd);
    return open_fail(u, abs, rc, fsname);
  }
  paths_cred cr;
  paths_cred_enter(u->c, &cr);
  int fd = -EEXIST;
  for (int i = 0; i < 16 && fd == -EEXIST; i++) {
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) rnd = (uint64_t)time(NULL) * 2654435761u + (uint64_t)i;
    snprintf(u->tmp, sizeof u->tmp, ".%.200s.upload-%016llx", u->base, (unsigned long long)rnd);
    fd = openat(dfd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) fd = -errno;
  }
  paths_cred_leave(&cr);
  if (fd < 0) { close(dfd); return open_fail(u, abs, fd, fsname); }
  u->fd = fd;
  u->dirfd = dfd;
  if (fchown(fd, u->c->host_uid, u->c->host_gid) != 0 || fchmod(fd, mode) != 0) {
    upload_abort(u);
    return fail_fd(u, 500, "cannot chown '%s'", abs);
  }
  return 0;
}

int upload_begin_file(up_ctx *u, const char *target) {
  char abs[PATHS_MAX];
  if (!target || !*target) return fail(u, 400, "%s", "a file part has no filename and the request has no 'path' query parameter");
  if (paths_resolve(u->c, target, abs, sizeof abs)) return fail(u, 400, "invalid path '%.200s'", target);
  size_t n = json_array_size(u->results);
  if (n >= UPLOAD_MAX_PARTS) return fail(u, 400, "more than %s files in one upload", UPLOAD_MAX_PARTS_STR);
  /* Duplicate paths: an open-addressing set of the results' indexes (twice the part limit). */
  uint64_t h = 1469598103934665603ull;
  for (const char *q = abs; *q; q++) h = (h ^ (unsigned char)*q) * 1099511628211ull;
  size_t slot = (size_t)(h % UPLOAD_PART_SLOTS);
  for (; u->seen[slot]; slot = (slot + 1) % UPLOAD_PART_SLOTS)
    if (!strcmp(json_string_value(json_object_get(json_array_get(u->results, u->seen[slot] - 1), "path")), abs))
      return fail(u, 400, "path '%s' is given more than once in one upload", abs);
  const char *slash = strrchr(abs, '/');
  if (!slash[1]) return fail(u, 400, "path '%s' is a directory", abs);
  json_t *res = json_pack("{s:s,s:s,s:s}", "path", abs, "name", slash + 1, "type", "file");
  if (!res) return fail(u, 400, "%s", "the path is not valid UTF-8");   /* checked before anything is created */
  if (open_target(u, abs, slash) < 0) { json_decref(res); return 1; }
  snprintf(u->part_name, sizeof u->part_name, "%s", abs);
  if (json_object_size(u->md)) json_object_set(res, "metadata", u->md);
  json_array_append_new(u->results, res);
  u->seen[slot] = (uint16_t)json_array_size(u->results);
  return 0;
}

int upload_write(up_ctx *u, const char *data, size_t len) {
  if (len > u->limit - u->written) {                   /* counted in bytes written: bounds gzip bombs too */
    if (u->gz) {
      u->status = 413;
      snprintf(u->msg, sizeof u->msg, "gzip body expands beyond the limit of %llu bytes", (unsigned long long)u->limit);
    } else {
      u->status = 413;
      snprintf(u->msg, sizeof u->msg, "request body exceeds the limit of %llu bytes", (unsigned long long)u->limit);
    }
    return 1;
  }
  u->written += len;
  while (len) {
    ssize_t n = write(u->fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(u, errno == ENOSPC || errno == EDQUOT ? 507 : 500,
                  errno == ENOSPC || errno == EDQUOT ? "not enough disk space for '%s'" : "cannot write '%s'", u->part_name);
    }
    data += n; len -= (size_t)n;
  }
  return 0;
}

int upload_part(void *cls, const char *name, const char *filename, const char *data, uint64_t off, size_t size) {
  up_ctx *u = cls;
  if (strcmp(name, "file") != 0) return 0;          /* other form fields are ignored, like envd */
  const char *fn = filename ? filename : "";
  /* off == 0 starts a part, unless MHD is just continuing one that has had no bytes yet. */
  bool continuing = u->in_part && u->part_bytes == 0 && strcmp(fn, u->cur_fn) == 0;
  bool new_part = !u->in_part || (off == 0 && !continuing);
  if (new_part) {
    if (upload_finish(u)) return 1;                   /* the previous part ended with its boundary */
    const char *target = u->qpath && *u->qpath ? u->qpath : filename;
    if (upload_begin_file(u, target)) return 1;
    u->in_part = true;
    u->part_bytes = 0;
    snprintf(u->cur_fn, sizeof u->cur_fn, "%s", fn);
  }
  u->part_bytes += size;
  return size ? upload_write(u, data, size) : 0;
}

/* The request body as it arrives, gzip-decoded when asked (incrementally, 64 KiB at a time). */

upload *upload_new(const fs_ctx *c, const char *qpath, json_t *metadata, uint64_t limit, bool gz) {
  up_ctx *u = calloc(1, sizeof *u);
  if (!u) return NULL;
  u->c = c;
  u->qpath = qpath;
  u->md = json_incref(metadata);
  u->results = json_array();
  u->fd = u->dirfd = -1;
  u->gz = gz;
  u->limit = limit;
  if (!u->results) { upload_free(u); return NULL; }
  return u;
}

void upload_free(up_ctx *u) {
  if (!u) return;
  upload_abort(u);                               /* nothing half-written stays behind */
  json_decref(u->results);
  json_decref(u->md);
  free(u);
}

int upload_fail(up_ctx *u, int status, const char *msg) { return fail(u, status, "%s", msg); }
json_t *upload_results(const up_ctx *u) { return u->results; }
size_t upload_files(const up_ctx *u) { return json_array_size(u->results); }
int upload_status(const up_ctx *u) { return u->status; }
const char *upload_message(const up_ctx *u) { return u->msg; }
