/* fs_rpc.c — filesystem.Filesystem RPCs (see fs_rpc.h). */
#include "fs_rpc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clocks.h"
#include "envd/filesystem.pb-c.h"
#include "paths.h"
#include "rpc.h"
#include "sandbox.h"

/* A string field of a request: absent is "". */
static const char *str(const char *v) { return v ? v : ""; }

static int resolve(sd_request *r, const fs_ctx *c, const char *in, char *out) {
  int rc = paths_resolve(c, in, out, PATHS_MAX);
  if (rc == -ENAMETOOLONG) rpc_reply_error(r, "invalid_argument", "path is too long: %.200s...", in);
  else if (rc) rpc_reply_error(r, "invalid_argument", "invalid path '%s'", in);
  return rc;
}

static void reply_errno(sd_request *r, int err, const char *what, const char *path) {
  if (err == ENOENT || err == ENOTDIR) rpc_reply_error(r, "not_found", "%s not found: %s", what, path);
  else if (err == EACCES || err == EPERM) rpc_reply_error(r, "permission_denied", "permission denied: %s", path);
  else if (err == PATHS_EFOREIGN)
    rpc_reply_error(r, "permission_denied", "%s is not on the sandbox's own file systems (proc, sysfs, devpts, "
                           "cgroup and similar cannot be changed): %s", what, path);
  else if (err == EXDEV) rpc_reply_error(r, "invalid_argument", "a move cannot cross mount points: %s", path);
  else if (err == ELOOP) rpc_reply_error(r, "invalid_argument", "too many levels of symbolic links: %s", path);
  else if (err == ENOSPC) rpc_reply_error(r, "resource_exhausted", "no space left for %s", path);
  else rpc_reply_error(r, "internal", "%s %s: %s", what, path, strerror(err));
}

static void do_stat(sd_request *r, const fs_ctx *c, const Filesystem__StatRequest *req) {
  const char *in = str(req->path);
  char abs[PATHS_MAX];
  if (resolve(r, c, in, abs)) return;
  json_t *e = paths_entry_at(c, abs);
  if (!e) { reply_errno(r, errno, "file", abs); return; }
  rpc_reply(r, &filesystem__stat_response__descriptor, json_pack("{s:o}", "entry", e));
}

static void do_makedir(sd_request *r, const fs_ctx *c, const Filesystem__MakeDirRequest *req) {
  const char *in = str(req->path);
  char abs[PATHS_MAX];
  if (resolve(r, c, in, abs)) return;
  int fd = paths_open(c, abs, O_PATH, 0, 0);
  if (fd >= 0) {
    struct stat st;
    int isdir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    close(fd);
    if (isdir) rpc_reply_error(r, "already_exists", "directory already exists: %s", abs);
    else rpc_reply_error(r, "invalid_argument", "path already exists and is not a directory: %s", abs);
    return;
  }
  bool created;
  int rc = paths_mkdir_p(c, abs, &created, NULL);
  if (rc == -ENOTDIR) { rpc_reply_error(r, "invalid_argument", "a parent of %s is not a directory", abs); return; }
  if (rc) { reply_errno(r, -rc, "directory", abs); return; }
  json_t *e = paths_entry_at(c, abs);
  if (!e) { reply_errno(r, errno, "directory", abs); return; }
  rpc_reply(r, &filesystem__make_dir_response__descriptor, json_pack("{s:o}", "entry", e));
}

static void do_move(sd_request *r, const fs_ctx *c, const Filesystem__MoveRequest *req) {
  const char *src_in = str(req->source), *dst_in = str(req->destination);
  if (!*src_in || !*dst_in) {   /* "" would mean the home directory itself */
    rpc_reply_error(r, "invalid_argument", "fields 'source' and 'destination' are required");
    return;
  }
  char src[PATHS_MAX], dst[PATHS_MAX], sname[256], dname[256];
  if (resolve(r, c, src_in, src) || resolve(r, c, dst_in, dst)) return;
  int sfd = paths_open_parent(c, src, sname, sizeof sname);
  struct stat st;
  if (sfd < 0 || fstatat(sfd, sname, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    int er = sfd < 0 ? -sfd : errno;
    if (sfd >= 0) close(sfd);
    if (er == EINVAL) rpc_reply_error(r, "invalid_argument", "cannot move %s", src);
    else reply_errno(r, er, "source file", src);
    return;
  }
  const char *slash = strrchr(dst, '/');
  if (slash && slash != dst) {          /* create the destination's parents, like envd */
    char parent[PATHS_MAX];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - dst), dst);
    bool created;
    int rc = paths_mkdir_p(c, parent, &created, NULL);
    if (rc) { close(sfd); reply_errno(r, -rc, "destination directory", parent); return; }
  }
  int dfd = paths_open_parent(c, dst, dname, sizeof dname);
  if (dfd < 0) {
    close(sfd);
    if (dfd == -EINVAL) rpc_reply_error(r, "invalid_argument", "cannot move onto %s", dst);
    else reply_errno(r, -dfd, "destination directory", dst);
    return;
  }
  int fsrc = paths_fs_check(sfd);
  if (fsrc == 0) fsrc = paths_fs_check(dfd);
  if (fsrc) {
    close(sfd); close(dfd);
    reply_errno(r, -fsrc, "file", fsrc == -PATHS_EFOREIGN ? src : dst);
    return;
  }
  paths_cred cr;
  paths_cred_enter(c, &cr);                 /* rename checks that the caller's fsuid is mapped */
  int rc = renameat(sfd, sname, dfd, dname) == 0 ? 0 : errno;
  paths_cred_leave(&cr);
  json_t *e = rc ? NULL : paths_entry(c, dfd, dname, dst);
  if (!rc && !e) rc = errno;
  close(sfd);
  close(dfd);
  if (rc == EINVAL) { rpc_reply_error(r, "invalid_argument", "cannot move %s into itself (%s)", src, dst); return; }
  if (rc) { reply_errno(r, rc, "file", dst); return; }
  rpc_reply(r, &filesystem__move_response__descriptor, json_pack("{s:o}", "entry", e));
}

/* ---------- ListDir: lexical pre-order, like Go's filepath.WalkDir ---------- */

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Names of dirfd's entries, sorted; NULL + errno on failure (E2BIG beyond the entry limit
 * unless partial, which returns the first FSRPC_MAX_LIST_ENTRIES names). */
static char **read_names_p(int dirfd, size_t *n, bool partial) {
  *n = 0;
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return NULL;
  DIR *d = fdopendir(fd);
  if (!d) { int er = errno; close(fd); errno = er; return NULL; }
  size_t cap = 16;
  char **v = malloc(cap * sizeof *v);
  struct dirent *de;
  while (v && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (*n == cap) {
      char **nv = realloc(v, (cap *= 2) * sizeof *v);
      if (!nv) break;
      v = nv;
    }
    if (*n >= FSRPC_MAX_LIST_ENTRIES) {
      if (partial) break;
      for (size_t i = 0; i < *n; i++) free(v[i]);
      free(v);
      closedir(d);
      *n = 0;
      errno = E2BIG;
      return NULL;
    }
    if (!(v[*n] = strdup(de->d_name))) break;
    (*n)++;
  }
  closedir(d);
  if (v) qsort(v, *n, sizeof *v, cmp_names);
  return v;
}

static char **read_names(int dirfd, size_t *n) { return read_names_p(dirfd, n, false); }

static void free_names(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Directories a ListDir walk holds open, over every request: each level of the walk keeps its
 * directory open, so the budget bounds the fds all walks together may take. */
static atomic_int walk_fds;

typedef struct { int fd; char **names; size_t n, i; char *display; } walk_frame;

/* Iterative pre-order walk (the heap holds the levels, not the stack). */
static int walk(const fs_ctx *c, int rootfd, const char *root_display, unsigned depth, json_t *out) {
  walk_frame *st = calloc(depth, sizeof *st);
  if (!st) return -ENOMEM;
  size_t top = 0;
  int rc = 0;
  st[0].fd = rootfd;
  st[0].names = read_names(rootfd, &st[0].n);
  if (!st[0].names) { rc = -errno; free(st); return rc; }
  if (!(st[0].display = strdup(root_display))) { free_names(st[0].names, st[0].n); free(st); return -ENOMEM; }
  top = 1;
  while (top > 0 && rc == 0) {
    walk_frame *f = &st[top - 1];
    if (f->i >= f->n) {                           /* this level is done: pop it */
      free_names(f->names, f->n);
      free(f->display);
      if (top > 1) { close(f->fd); atomic_fetch_sub(&walk_fds, 1); }
      top--;
      continue;
    }
    const char *name = f->names[f->i++];
    if (json_array_size(out) >= FSRPC_MAX_LIST_ENTRIES) { rc = -E2BIG; break; }
    char path[PATHS_MAX];
    if (snprintf(path, sizeof path, "%s%s%s", f->display, strcmp(f->display, "/") ? "/" : "", name) >= (int)sizeof path)
      continue;
    json_t *e = paths_entry(c, f->fd, name, path);
    if (!e) continue;                    /* vanished or not representable: skipped, like envd */
    json_array_append_new(out, e);
    struct stat sb;
    if (top >= depth || fstatat(f->fd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) continue;
    if (atomic_fetch_add(&walk_fds, 1) >= FSRPC_MAX_WALK_FDS) { atomic_fetch_sub(&walk_fds, 1); rc = -EMFILE; break; }
    int sub = openat(f->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) { atomic_fetch_sub(&walk_fds, 1); continue; }
    walk_frame *nf = &st[top];
    *nf = (walk_frame){ .fd = sub };
    nf->names = read_names(sub, &nf->n);
    nf->display = strdup(path);
    if (!nf->names || !nf->display) {
      int er = nf->names ? ENOMEM : errno;
      free_names(nf->names, nf->n); free(nf->display);
      close(sub); atomic_fetch_sub(&walk_fds, 1);
      if (er == ENOENT || er == EACCES) continue;
      rc = -er;
      break;
    }
    top++;
  }
  for (size_t k = 0; k < top; k++) {            /* what an error left */
    free_names(st[k].names, st[k].n);
    free(st[k].display);
    if (k > 0) { close(st[k].fd); atomic_fetch_sub(&walk_fds, 1); }
  }
  free(st);
  return rc;
}

static void do_listdir(sd_request *r, const fs_ctx *c, const Filesystem__ListDirRequest *req) {
  const char *in = str(req->path);
  char abs[PATHS_MAX];
  if (resolve(r, c, in, abs)) return;
  uint32_t depth = 1;
  if (req->has_depth) {
    if (req->depth > FSRPC_MAX_DEPTH) {
      rpc_reply_error(r, "invalid_argument", "field 'depth' must be an integer from 0 to %d", FSRPC_MAX_DEPTH);
      return;
    }
    depth = req->depth ? req->depth : 1;
  }
  int fd = paths_open(c, abs, O_RDONLY | O_DIRECTORY, 0, 0);   /* the root's symlinks are followed */
  if (fd == -ENOTDIR) { rpc_reply_error(r, "invalid_argument", "path is not a directory: %s", abs); return; }
  if (fd < 0) { reply_errno(r, -fd, "directory", abs); return; }
  json_t *out = json_array();
  int rc = walk(c, fd, abs, (unsigned)depth, out);
  close(fd);
  if (rc == -E2BIG) {
    json_decref(out);
    rpc_reply_error(r, "resource_exhausted", "more than %d entries under %s", FSRPC_MAX_LIST_ENTRIES, abs);
    return;
  }
  if (rc == -EMFILE) {
    json_decref(out);
    rpc_reply_error(r, "resource_exhausted", "too many directories open by ListDir calls at once; retry later (%s)", abs);
    return;
  }
  if (rc) { json_decref(out); reply_errno(r, -rc, "directory", abs); return; }
  rpc_reply(r, &filesystem__list_dir_response__descriptor, json_pack("{s:o}", "entries", out));
}

/* ---------- Remove: os.RemoveAll ---------- */

static int remove_all(int dirfd, const char *name, int level) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -errno;
  if (!S_ISDIR(st.st_mode)) return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
  if (level > 512) return -ELOOP;
  int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) return errno == ENOENT ? 0 : -errno;
  int rc = paths_fs_check(sub);             /* never empty a proc, sysfs, devpts or cgroup mount */
  if (rc) { close(sub); return rc; }
  for (;;) {                 /* re-read until empty: entries may appear while we delete */
    size_t n;
    char **names = read_names_p(sub, &n, true);
    if (!names) { rc = -errno; break; }
    for (size_t i = 0; i < n && rc == 0; i++) rc = remove_all(sub, names[i], level + 1);
    free_names(names, n);
    if (rc || n == 0) break;
  }
  close(sub);
  if (rc) return rc;
  return unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -errno;
}

static void do_remove(sd_request *r, const fs_ctx *c, const Filesystem__RemoveRequest *req) {
  const char *in = str(req->path);
  char abs[PATHS_MAX], name[256];
  if (!*in) { rpc_reply_error(r, "invalid_argument", "field 'path' is required"); return; }
  if (resolve(r, c, in, abs)) return;
  int dfd = paths_open_parent(c, abs, name, sizeof name);
  if (dfd == -EINVAL) { rpc_reply_error(r, "invalid_argument", "refusing to remove the root directory"); return; }
  if (dfd == -ENOENT || dfd == -ENOTDIR) { rpc_reply(r, &filesystem__remove_response__descriptor, json_object()); return; }   /* nothing to remove */
  if (dfd < 0) { reply_errno(r, -dfd, "file", abs); return; }
  int fsrc = paths_fs_check(dfd);
  if (fsrc) { close(dfd); reply_errno(r, -fsrc, "file", abs); return; }
  paths_cred cr;
  paths_cred_enter(c, &cr);
  int rc = remove_all(dfd, name, 0);
  paths_cred_leave(&cr);
  close(dfd);
  if (rc) { reply_errno(r, -rc, "file", abs); return; }
  rpc_reply(r, &filesystem__remove_response__descriptor, json_object());
}

/* ---------- WatchDir ---------- */

typedef struct { int wd; char *rel; } watch_slot;
typedef struct {
  const fs_ctx *c;
  int ifd;
  watch_slot *v;
  size_t n, cap;
  bool recursive;
} watcher;

#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR)

/* inotify instances and watches belong to host root and are shared with the whole host: every
 * WatchDir stream together takes at most a share of the host's limits. */
static atomic_int watch_streams, watch_total;

static int host_limit(const char *path, int fallback) {
  FILE *f = fopen(path, "re");
  int v = fallback;
  if (f) { if (fscanf(f, "%d", &v) != 1) v = fallback; fclose(f); }
  return v;
}

static int max_streams(void) {
  int host = host_limit("/proc/sys/fs/inotify/max_user_instances", 128) / 4;
  return host < FSRPC_MAX_WATCH_STREAMS ? (host > 0 ? host : 1) : FSRPC_MAX_WATCH_STREAMS;
}

static int max_total_watches(void) {
  static atomic_int cached;
  int v = atomic_load(&cached);
  if (!v) { v = host_limit("/proc/sys/fs/inotify/max_user_watches", 8192) / 2; if (v < 1) v = 1; atomic_store(&cached, v); }
  return v;
}

static const char *slot_rel(watcher *w, int wd) {
  for (size_t i = 0; i < w->n; i++) if (w->v[i].wd == wd) return w->v[i].rel;
  return NULL;
}

/* Watch fd's directory (shown as rel) and, when recursive, its subdirectories. */
static int add_tree(watcher *w, int fd, const char *rel, int level) {
  if (level > 64) return 0;
  if (w->n >= FSRPC_MAX_WATCHES) return -E2BIG;
  char p[64];
  snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
  if (atomic_fetch_add(&watch_total, 1) >= max_total_watches()) { atomic_fetch_sub(&watch_total, 1); return -ENOSPC; }
  int wd = inotify_add_watch(w->ifd, p, WATCH_MASK);
  if (wd < 0 || slot_rel(w, wd)) atomic_fetch_sub(&watch_total, 1);   /* counted once per slot */
  if (wd < 0) return -errno;
  if (!slot_rel(w, wd)) {
    if (w->n == w->cap) {
      size_t nc = w->cap ? w->cap * 2 : 16;
      watch_slot *nv = realloc(w->v, nc * sizeof *nv);
      if (!nv) { atomic_fetch_sub(&watch_total, 1); return -ENOMEM; }
      w->v = nv; w->cap = nc;
    }
    char *copy = strdup(rel);
    if (!copy) { atomic_fetch_sub(&watch_total, 1); return -ENOMEM; }
    w->v[w->n++] = (watch_slot){ wd, copy };
  }
  if (!w->recursive) return 0;
  size_t n;
  char **names = read_names(fd, &n);
  if (!names) return 0;
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    int sub = openat(fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    if (paths_fs_check(sub) != 0) { close(sub); continue; }   /* proc, sysfs, ...: not watched */
    char srel[PATHS_MAX];
    if (snprintf(srel, sizeof srel, "%s%s%s", rel, *rel ? "/" : "", names[i]) < (int)sizeof srel)
      rc = add_tree(w, sub, srel, level + 1);
    if (rc != -E2BIG && rc != -ENOSPC) rc = 0;                /* a vanished directory is skipped */
    close(sub);
  }
  free_names(names, n);
  return rc;
}

static int send_event(rpc_stream *s, watcher *w, const char *watched, const char *name, const char *type,
                      bool include_entry) {
  json_t *ev = json_pack("{s:s,s:s}", "name", name, "type", type);
  if (!ev) return 0;                        /* a name that is not UTF-8: dropped */
  if (include_entry && (!strcmp(type, "EVENT_TYPE_CREATE") || !strcmp(type, "EVENT_TYPE_WRITE") ||
                        !strcmp(type, "EVENT_TYPE_CHMOD"))) {
    char abs[PATHS_MAX];
    if (snprintf(abs, sizeof abs, "%s%s%s", watched, strcmp(watched, "/") ? "/" : "", name) < (int)sizeof abs) {
      json_t *e = paths_entry_at(w->c, abs);
      if (e) json_object_set_new(ev, "entry", e);
    }
  }
  return rpc_send(s, json_pack("{s:o}", "filesystem", ev));
}

static void do_watchdir(sd_request *r, reg_entry *re, const fs_ctx *c, const Filesystem__WatchDirRequest *req) {
  const char *in = str(req->path);
  char abs[PATHS_MAX];
  if (resolve(r, c, in, abs)) return;
  bool include_entry = req->has_include_entry && req->include_entry;
  int fd = paths_open(c, abs, O_RDONLY | O_DIRECTORY, 0, 0);
  if (fd == -ENOTDIR) { rpc_reply_error(r, "invalid_argument", "path %s is not a directory", abs); return; }
  if (fd < 0) { reply_errno(r, -fd, "directory", abs); return; }
  int fsrc = paths_fs_check(fd);
  if (fsrc) { close(fd); reply_errno(r, -fsrc, "directory", abs); return; }
  int per = reg_watch_slot(re, +1, FSRPC_MAX_WATCH_STREAMS_PER_SBX);
  if (per < 0) {
    close(fd);
    rpc_reply_error(r, "resource_exhausted", "this sandbox already has %d WatchDir streams open (the limit); "
                           "close one first", FSRPC_MAX_WATCH_STREAMS_PER_SBX);
    return;
  }
  int limit = max_streams();
  if (atomic_fetch_add(&watch_streams, 1) >= limit) {
    atomic_fetch_sub(&watch_streams, 1);
    reg_watch_slot(re, -1, 0);
    close(fd);
    rpc_reply_error(r, "resource_exhausted", "sandboxd already serves %d WatchDir streams (the limit over all "
                           "sandboxes); retry later", limit);
    return;
  }
  watcher w = { .c = c, .recursive = req->has_recursive && req->recursive };
  w.ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (w.ifd < 0) { close(fd); rpc_reply_error(r, "resource_exhausted", "inotify: %s", strerror(errno)); goto out; }
  int rc = add_tree(&w, fd, "", 0);
  close(fd);
  if (rc == -E2BIG) {
    rpc_reply_error(r, "resource_exhausted", "more than %d directories to watch under %s", FSRPC_MAX_WATCHES, abs);
    goto out;
  }
  if (rc) {
    rpc_reply_error(r, "resource_exhausted", "cannot watch %s: %s", abs,
                           rc == -ENOSPC ? "sandboxd's share of the host's inotify watches is used up" : strerror(-rc));
    goto out;
  }
  const char *ka = sd_header(r, "Keepalive-Ping-Interval"), *to = sd_header(r, "Connect-Timeout-Ms");
  int64_t keep_ms = ka && atoll(ka) > 0 ? atoll(ka) * 1000 : 90000;
  int64_t deadline = to && atoll(to) > 0 ? mono_ms() + atoll(to) : INT64_MAX;
  rpc_stream rs, *s = &rs;
  if (!rpc_stream_open(r, &filesystem__watch_dir_response__descriptor, &rs)) goto out;
  const char *end_code = NULL, *end_msg = NULL;
  int64_t last = mono_ms();
  if (rpc_send(s, json_pack("{s:{}}", "start")) != 0) goto done;
  _Alignas(struct inotify_event) char buf[64 * 1024];
  for (;;) {
    int64_t now = mono_ms();
    if (now >= deadline) { end_code = "deadline_exceeded"; end_msg = "the operation timed out"; break; }
    if (reg_dying(re)) { end_code = "unavailable"; end_msg = "the sandbox was killed"; break; }
    if (sd_stream_closed(s->s)) break;
    if (now - last >= keep_ms) {
      if (rpc_send(s, json_pack("{s:{}}", "keepalive")) != 0) break;
      last = now;
    }
    int64_t wait = 1000;   /* wake at least once a second to notice a client hang-up */
    if (deadline - now < wait) wait = deadline - now;
    if (last + keep_ms - now < wait) wait = last + keep_ms - now;
    struct pollfd p[2] = { { .fd = w.ifd, .events = POLLIN }, { .fd = reg_kill_fd(re), .events = POLLIN } };
    if (poll(p, 2, (int)(wait > 0 ? wait : 0)) <= 0 || !(p[0].revents & POLLIN)) continue;
    ssize_t n = read(w.ifd, buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
      struct inotify_event *ev = (struct inotify_event *)(buf + off);
      off += (ssize_t)(sizeof *ev + ev->len);
      if (ev->mask & IN_IGNORED) {
        for (size_t i = 0; i < w.n; i++)
          if (w.v[i].wd == ev->wd) { free(w.v[i].rel); w.v[i] = w.v[--w.n]; atomic_fetch_sub(&watch_total, 1); break; }
        continue;
      }
      const char *rel = slot_rel(&w, ev->wd);
      if (!rel || !ev->len) continue;
      char name[PATHS_MAX];
      if (snprintf(name, sizeof name, "%s%s%s", rel, *rel ? "/" : "", ev->name) >= (int)sizeof name) continue;
      /* One message per operation, in fsnotify's order: create, rename, chmod, write, remove. */
      int err = 0;
      if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
        err |= send_event(s, &w, abs, name, "EVENT_TYPE_CREATE", include_entry);
        if (w.recursive && (ev->mask & IN_ISDIR)) {
          char sub[PATHS_MAX];
          int sfd = -1;
          if (snprintf(sub, sizeof sub, "%s%s%s", abs, strcmp(abs, "/") ? "/" : "", name) < (int)sizeof sub)
            sfd = paths_open(c, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, 0);
          if (sfd >= 0 && paths_fs_check(sfd) == 0) add_tree(&w, sfd, name, 0);
          if (sfd >= 0) close(sfd);
        }
      }
      if (ev->mask & IN_MOVED_FROM) err |= send_event(s, &w, abs, name, "EVENT_TYPE_RENAME", include_entry);
      if (ev->mask & IN_ATTRIB) err |= send_event(s, &w, abs, name, "EVENT_TYPE_CHMOD", include_entry);
      if (ev->mask & IN_MODIFY) err |= send_event(s, &w, abs, name, "EVENT_TYPE_WRITE", include_entry);
      if (ev->mask & IN_DELETE) err |= send_event(s, &w, abs, name, "EVENT_TYPE_REMOVE", include_entry);
      if (err) goto done;
      last = mono_ms();
    }
  }
done:
  rpc_end(s, end_code, end_msg);
out:
  for (size_t i = 0; i < w.n; i++) free(w.v[i].rel);
  atomic_fetch_sub(&watch_total, (int)w.n);
  free(w.v);
  if (w.ifd >= 0) close(w.ifd);
  atomic_fetch_sub(&watch_streams, 1);
  reg_watch_slot(re, -1, 0);
}

void fs_rpc(sd_request *r, const rt_decision *d) {
  const char *method = d->rpc;
  if (strcmp(sd_method(r), "POST") != 0) {
    rpc_reply_error(r, "unimplemented", "RPC methods must be called with POST, not %s", sd_method(r));
    return;
  }
  static const struct { const char *name; const ProtobufCMessageDescriptor *in; bool streaming; } M[] = {
    {"Stat", &filesystem__stat_request__descriptor, false}, {"MakeDir", &filesystem__make_dir_request__descriptor, false},
    {"Move", &filesystem__move_request__descriptor, false}, {"ListDir", &filesystem__list_dir_request__descriptor, false},
    {"Remove", &filesystem__remove_request__descriptor, false}, {"WatchDir", &filesystem__watch_dir_request__descriptor, true},
  };
  size_t i = 0;
  while (i < sizeof M / sizeof M[0] && strcmp(M[i].name, method) != 0) i++;
  if (i == sizeof M / sizeof M[0]) {
    rpc_reply_error(r, "unimplemented", "filesystem.Filesystem/%.60s is not implemented by sandboxd", method);
    return;
  }
  if (!rpc_accept(r, M[i].streaming)) return;
  if (d->user_error) { rpc_reply_error(r, "unauthenticated", "invalid Authorization header: %s", d->user_error); return; }
  if (d->user_unknown) { rpc_reply_error(r, "unauthenticated", "invalid username: '%s'", d->user); return; }
  fs_ctx c;
  if (sbx_fs_ctx(reg_sbx(d->entry), d->user, &c) != 0) {
    rpc_reply_error(r, "unauthenticated", "invalid username: '%s'", d->user);
    return;
  }
  struct mb_arena ar;
  ProtobufCMessage *req = rpc_request(r, M[i].in, &ar);
  if (!req) return;
  switch (i) {
    case 0: do_stat(r, &c, (const Filesystem__StatRequest *)req); break;
    case 1: do_makedir(r, &c, (const Filesystem__MakeDirRequest *)req); break;
    case 2: do_move(r, &c, (const Filesystem__MoveRequest *)req); break;
    case 3: do_listdir(r, &c, (const Filesystem__ListDirRequest *)req); break;
    case 4: do_remove(r, &c, (const Filesystem__RemoveRequest *)req); break;
    default: do_watchdir(r, d->entry, &c, (const Filesystem__WatchDirRequest *)req); break;
  }
  mb_arena_free(&ar);
}
