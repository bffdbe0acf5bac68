/* mbwrap watch [-r] DIR: a long-running tool that reports the changes in DIR (and, with -r, in
 * every directory below it, those made later included) as records in `o` frames (PROTOCOL.md,
 * "watch"):
 *
 *   ready\n                      every initial watch is in place: later changes are reported
 *   ev TYPE LEN NAME\n           TYPE create|write|remove|rename|chmod; NAME (LEN bytes, any
 *                                byte but NUL) is relative to DIR
 *   overflow\n                   the kernel's event queue overflowed: events were lost
 *   gone\n                       DIR itself was removed or moved away; then the end (exit 0)
 *   err CODE DETAIL\n            a failure; then the end (exit 1)
 *
 * The mapping follows fsnotify (what E2B's watchDir reports): IN_CREATE and IN_MOVED_TO are
 * create, IN_MODIFY write, IN_DELETE remove, IN_MOVED_FROM rename, IN_ATTRIB chmod. With -r, a
 * directory that appears (made, or moved in or within) is watched at once and what it holds when
 * its watch is in place is reported as create under its new names, at any depth (so nothing made
 * in it before its watch was in place is missed; an entry made in that instant may be reported
 * twice).
 * Symbolic links are never followed below DIR; proc, sysfs and the like are not entered.
 *
 * It runs until SIGTERM, until its reader goes away (stdout's pipe reports an error), or until
 * DIR goes. Memory is bounded: at most WATCH_MAX watched directories (more is an error), names
 * shorter than PATH_MAX, one read buffer; output blocks when the reader is slow, and the kernel's
 * queue then overflows (reported) instead of anything growing here. */
#include "mbwrap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define WATCH_MAX 16384
#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | \
                    IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

struct slot {
  int wd;
  char *rel; /* "" for DIR itself */
};

static struct {
  int fd;
  int recursive;
  const char *root;
  int root_wd;
  struct slot *v;
  size_t n, cap;
} W = {.fd = -1, .root_wd = -1};

static char pathbuf[PATH_MAX];

/* DIR + "/" + rel into pathbuf; -1 when too long. */
static int full_path(const char *rel) {
  size_t rl = strlen(W.root);
  int slash = rl > 0 && W.root[rl - 1] != '/';
  int n = snprintf(pathbuf, sizeof pathbuf, "%s%s%s", W.root, *rel && slash ? "/" : "", rel);
  return n < 0 || (size_t)n >= sizeof pathbuf ? -1 : 0;
}

/* rel + "/" + name into out (PATH_MAX); -1 when too long. */
static int join(char *out, const char *rel, const char *name) {
  int n = snprintf(out, PATH_MAX, "%s%s%s", rel, *rel ? "/" : "", name);
  return n < 0 || n >= PATH_MAX ? -1 : 0;
}

static struct slot *slot_of(int wd) {
  for (size_t i = 0; i < W.n; i++)
    if (W.v[i].wd == wd) return &W.v[i];
  return NULL;
}

static void slot_drop(size_t i) {
  free(W.v[i].rel);
  W.v[i] = W.v[--W.n];
}

static void emit(const char *type, const char *name) {
  tool_printf("ev %s %zu ", type, strlen(name));
  tool_data(name, strlen(name));
  tool_data("\n", 1);
}

static int fail_errno(int e, const char *what, const char *rel) {
  const char *code = e == ENOTDIR ? "FS_NOT_DIRECTORY" : errno_name(e);
  if (full_path(rel) < 0) return tool_fail("ENAMETOOLONG", "%s: path too long", what);
  return tool_fail(code, "%s '%s': %s", what, pathbuf, strerror(e));
}

/* Pseudo file systems whose directories are not watched below DIR (proc's entries come and go
 * with every process; their events mean nothing). */
static int pseudo_fs(const char *path) {
  struct statfs sf;
  if (statfs(path, &sf) < 0) return 1;
  switch ((unsigned long)sf.f_type) {
  case 0x9fa0UL:     /* proc */
  case 0x62656572UL: /* sysfs */
  case 0x27e0ebUL:   /* cgroup */
  case 0x63677270UL: /* cgroup2 */
  case 0x64626720UL: /* debugfs */
  case 0x74726163UL: /* tracefs */
  case 0x73636673UL: /* securityfs */
    return 1;
  default:
    return 0;
  }
}

/* Adds (or renames: the same directory reached under a new name) the watch of rel.
 * → the slot's index, -1 (skipped: vanished, not a directory, a pseudo file system), or
 * -1 - errno (fatal: *fatal is set). */
static long add_watch(const char *rel, int *fatal) {
  *fatal = 0;
  if (full_path(rel) < 0) return -1; /* too deep to name: not watched */
  if (*rel && pseudo_fs(pathbuf)) return -1;
  /* DIR itself may be reached through a link; nothing below it is */
  int wd = inotify_add_watch(W.fd, pathbuf, WATCH_MASK | (*rel ? IN_DONT_FOLLOW : 0));
  if (wd < 0) {
    int e = errno;
    if (*rel && (e == ENOENT || e == ENOTDIR || e == EACCES || e == ELOOP)) return -1;
    *fatal = e;
    return -1;
  }
  char *copy = strdup(rel);
  if (!copy) {
    *fatal = ENOMEM;
    return -1;
  }
  struct slot *s = slot_of(wd);
  if (s) {
    free(s->rel);
    s->rel = copy;
    return (long)(s - W.v);
  }
  if (W.n == WATCH_MAX || W.n == W.cap) {
    size_t nc = W.cap ? W.cap * 2 : 16;
    struct slot *nv = W.n == WATCH_MAX ? NULL : realloc(W.v, nc * sizeof *nv);
    if (!nv) {
      free(copy);
      inotify_rm_watch(W.fd, wd);
      *fatal = W.n == WATCH_MAX ? E2BIG : ENOMEM;
      return -1;
    }
    W.v = nv;
    W.cap = nc;
  }
  W.v[W.n++] = (struct slot){wd, copy};
  return (long)W.n - 1;
}

/* What slot i's directory holds: reported as create (with report); its directories watched
 * (recursive mode), appended as new slots. → 0 or an errno (fatal). */
static int scan(size_t i, int report) {
  static char child[PATH_MAX];
  if (full_path(W.v[i].rel) < 0) return 0;
  DIR *d = opendir(pathbuf);
  if (!d) return 0; /* vanished meanwhile */
  struct dirent *de;
  int fatal = 0;
  while (!fatal && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (join(child, W.v[i].rel, de->d_name) < 0) continue;
    if (report) emit("create", child);
    int isdir = de->d_type == DT_DIR;
    if (de->d_type == DT_UNKNOWN) {
      struct stat st;
      isdir = fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (isdir) add_watch(child, &fatal);
  }
  closedir(d);
  return fatal;
}

/* Watches rel and, in recursive mode, breadth first every directory below it: the new slots,
 * in order (slots only grow meanwhile). With report, what they hold is reported as create.
 * → 0 or an errno (fatal). */
static int add_tree(const char *rel, int report) {
  size_t first = W.n;
  int fatal;
  long at = add_watch(rel, &fatal);
  if (at < 0 || !W.recursive) return fatal;
  if ((size_t)at < first) { /* a known directory under a new name: it is scanned again */
    fatal = scan((size_t)at, report);
    if (fatal) return fatal;
  }
  for (size_t i = first; i < W.n; i++) {
    fatal = scan(i, report);
    if (fatal) return fatal;
  }
  return 0;
}

/* A directory of the tree left it (or is about to reappear under another name): its watches and
 * those below it end. */
static void drop_tree(const char *rel) {
  size_t rl = strlen(rel);
  for (size_t i = 0; i < W.n;) {
    const char *r = W.v[i].rel;
    if (strncmp(r, rel, rl) == 0 && (r[rl] == 0 || r[rl] == '/')) {
      inotify_rm_watch(W.fd, W.v[i].wd);
      slot_drop(i);
    } else {
      i++;
    }
  }
}

static int tree_error(int e, const char *rel) {
  if (e == E2BIG) return tool_fail("FS_TOO_LARGE", "more than %d directories to watch", WATCH_MAX);
  if (e == ENOSPC) return fail_errno(e, "the user's inotify watches are used up at", rel);
  return fail_errno(e, "cannot watch", rel);
}

/* One batch of kernel events. *done when the watch ended (DIR is gone, a failure): then the
 * tool's exit status. */
static int handle(const char *buf, size_t len, int *done) {
  static char name[PATH_MAX];
  for (size_t off = 0; off + sizeof(struct inotify_event) <= len;) {
    const struct inotify_event *ev = (const struct inotify_event *)(const void *)(buf + off);
    off += sizeof *ev + ev->len;
    if (ev->mask & IN_Q_OVERFLOW) {
      tool_printf("overflow\n");
      continue;
    }
    if (ev->wd == W.root_wd && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED))) {
      tool_printf("gone\n");
      *done = 1;
      return tool_finish(0);
    }
    struct slot *s = slot_of(ev->wd);
    if (ev->mask & IN_IGNORED) {
      if (s) slot_drop((size_t)(s - W.v));
      continue;
    }
    if (!s || !ev->len || !ev->name[0]) continue; /* events of a directory itself: its parent reports them */
    if (join(name, s->rel, ev->name) < 0) continue;
    int isdir = (ev->mask & IN_ISDIR) != 0;
    if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
      emit("create", name);
      if (W.recursive && isdir) {
        /* What it holds appears under new names (created in it before its watch was in place, or
         * moved in with it): reported as create. */
        int e = add_tree(name, 1);
        if (e) {
          *done = 1;
          return tree_error(e, name);
        }
      }
    }
    if (ev->mask & IN_MOVED_FROM) {
      emit("rename", name);
      if (W.recursive && isdir) drop_tree(name);
    }
    if (ev->mask & IN_ATTRIB) emit("chmod", name);
    if (ev->mask & IN_MODIFY) emit("write", name);
    if (ev->mask & IN_DELETE) emit("remove", name);
  }
  return 0;
}

int tool_watch(int argc, char **argv) {
  int i = 1;
  if (i < argc && strcmp(argv[i], "-r") == 0) {
    W.recursive = 1;
    i++;
  }
  if (argc != i + 1 || !argv[i][0]) {
    fprintf(stderr, "usage: mbwrap watch [-r] DIR\n");
    return 2;
  }
  W.root = argv[i];
  /* Default dispositions: TERM ends it; a vanished reader ends it (EPIPE or SIGPIPE). */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGPIPE);
  sigprocmask(SIG_UNBLOCK, &set, NULL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);

  struct stat st;
  if (stat(W.root, &st) < 0) return fail_errno(errno, "cannot watch", "");
  if (!S_ISDIR(st.st_mode)) return fail_errno(ENOTDIR, "cannot watch", "");
  W.fd = inotify_init1(IN_CLOEXEC);
  if (W.fd < 0) return fail_errno(errno, "cannot make an inotify instance for", "");
  int e = add_tree("", 0);
  if (e) return tree_error(e, "");
  struct slot *root = NULL;
  for (size_t k = 0; k < W.n; k++)
    if (W.v[k].rel[0] == 0) root = &W.v[k];
  if (!root) return fail_errno(ENOENT, "cannot watch", "");
  W.root_wd = root->wd;
  tool_printf("ready\n");
  tool_flush();

  static _Alignas(struct inotify_event) char buf[64 * 1024];
  for (;;) {
    struct pollfd p[2] = {{.fd = W.fd, .events = POLLIN}, {.fd = 1, .events = 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return tool_fail(errno_name(errno), "poll: %s", strerror(errno));
    }
    if (p[1].revents & (POLLERR | POLLHUP | POLLNVAL)) return 0; /* nobody reads any more */
    if (!(p[0].revents & POLLIN)) continue;
    ssize_t n = read(W.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return tool_fail(errno_name(errno), "cannot read events: %s", strerror(errno));
    }
    int done = 0;
    int r = handle(buf, (size_t)n, &done);
    if (done) return r;
    tool_flush();
  }
}
