/* mbwrap's workspace-sync tools (PROTOCOL.md, "Sync tools"): the sandbox side of
 * lua/moonbox/workspace, driving what the sandbox image has — `tar` to unpack and pack,
 * `sha256sum` to hash — and walking trees with the host core's own walker and gitignore matcher
 * (../sync_walk.c, ../ignore.c), so both sides see a tree alike.
 *
 *   unpack  STAGE TARGET   STAGE/archive.tar → STAGE/tree (tar), checked (no device, FIFO,
 *                          socket, hard link; within the limits), then published: TARGET is
 *                          swapped with the new tree in one rename (RENAME_EXCHANGE; made when
 *                          missing), the old tree and STAGE removed. Any failure removes STAGE
 *                          and leaves TARGET as it was.
 *   manifest DIR           every entry of DIR (gitignore rules as asked), files hashed with
 *                          sha256sum in batches, as records in stdout frames.
 *   pack DIR LIST          the listed entries of DIR as one pax tar stream in stdout frames.
 * manifest and pack stream their answer, so their failure is one "err CODE detail" line in
 * stderr frames and exit status 1 (like cat); unpack answers like the other tools. */
#include "mbwrap.h"
#include "sync.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"
#define ERRBUF 2048
#define HASH_BATCH_FILES 512
#define HASH_BATCH_BYTES (64 * 1024)

struct opts {
  uint64_t max_files, max_bytes, max_meta;
  int gitignore;
  const char *exclude_b64;
  const char *tar, *sha256sum;
};

static int usage(const char *u) {
  fprintf(stderr, "usage: mbwrap %s\n", u);
  return 2;
}

/* Options before the positional arguments. → index of the first positional, -1 on a usage error. */
static int parse_opts(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.max_files = 100000, .max_bytes = (uint64_t)4 << 30, .max_meta = 64 << 20,
                     .tar = "tar", .sha256sum = "sha256sum"};
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) return i + 1;
    if (strcmp(a, "--gitignore") == 0) { o->gitignore = 1; continue; }
    if (i + 1 >= argc) return -1;
    const char *v = argv[++i];
    if (strcmp(a, "--max-files") == 0) { if (parse_u64(v, &o->max_files) < 0) return -1; }
    else if (strcmp(a, "--max-bytes") == 0) { if (parse_u64(v, &o->max_bytes) < 0) return -1; }
    else if (strcmp(a, "--max-meta") == 0) { if (parse_u64(v, &o->max_meta) < 0) return -1; }
    else if (strcmp(a, "--exclude") == 0) o->exclude_b64 = v;
    else if (strcmp(a, "--tar") == 0) o->tar = v;
    else if (strcmp(a, "--sha256sum") == 0) o->sha256sum = v;
    else return -1;
  }
  return i;
}

/* A failure of a streaming tool: one "err" line in stderr frames, exit status 1. */
static int stream_fail(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int stream_fail(const char *code, const char *fmt, ...) {
  char line[3200];
  va_list ap;
  va_start(ap, fmt);
  size_t n = tool_err_line(line, sizeof line, code, fmt, ap);
  va_end(ap);
  tool_error_data(line, n);
  return tool_finish(1);
}

/* ---- child processes (tar, sha256sum) ---- */

struct child {
  pid_t pid;
  int out, err; /* our ends, -1 when not captured / closed */
};

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Starts argv in cwd: stdin from in_fd (-1: /dev/null), stdout captured (or /dev/null), stderr
 * captured. A bare program name is searched on our PATH (a default one when there is none). */
static int start_child(char **argv, const char *cwd, int in_fd, int capture_out, struct child *c) {
  int op[2] = {-1, -1}, ep[2];
  if (pipe2(ep, O_CLOEXEC) < 0) return -1;
  if (capture_out && pipe2(op, O_CLOEXEC) < 0) {
    close(ep[0]);
    close(ep[1]);
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(ep[0]);
    close(ep[1]);
    if (capture_out) {
      close(op[0]);
      close(op[1]);
    }
    errno = err;
    return -1;
  }
  if (pid == 0) {
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (dup2(in_fd >= 0 ? in_fd : nul, 0) < 0 || dup2(capture_out ? op[1] : nul, 1) < 0 || dup2(ep[1], 2) < 0) _exit(127);
    if (cwd && chdir(cwd) < 0) {
      fprintf(stderr, "mbwrap: cannot enter '%s': %s\n", cwd, strerror(errno));
      _exit(127);
    }
    if (!getenv("PATH")) setenv("PATH", DEFAULT_PATH, 1);
    mb_default_signals();
    exec_program(argv, environ, -1);
    _exit(127);
  }
  close(ep[1]);
  if (capture_out) close(op[1]);
  c->pid = pid;
  c->out = capture_out ? op[0] : -1;
  c->err = ep[0];
  return 0;
}

typedef int (*out_fn)(void *ud, const char *p, size_t n); /* -1: stop (the child is killed) */

/* Drains the child's stdout (to on_out) and stderr (the first cap-1 bytes into errbuf) until both
 * end, then reaps it. → exit status (128 + signal for a signal), -2 when on_out stopped it. */
static int finish_child(struct child *c, out_fn on_out, void *ud, char *errbuf, size_t cap) {
  static char buf[65536];
  size_t elen = 0;
  int stopped = 0;
  errbuf[0] = 0;
  while (c->out >= 0 || c->err >= 0) {
    struct pollfd p[2] = {{.fd = c->out, .events = POLLIN}, {.fd = c->err, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      int *fd = i == 0 ? &c->out : &c->err;
      if (*fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(*fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close_fd(fd);
        continue;
      }
      if (i == 1) {
        size_t k = (size_t)n < cap - 1 - elen ? (size_t)n : cap - 1 - elen;
        memcpy(errbuf + elen, buf, k);
        elen += k;
        errbuf[elen] = 0;
      } else if (!stopped && on_out && on_out(ud, buf, (size_t)n) < 0) {
        stopped = 1;
        kill(c->pid, SIGKILL);
        close_fd(fd);
      }
    }
  }
  int st = 0;
  while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (stopped) return -2;
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

static void one_line(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = 0;
  for (char *p = s; *p; p++)
    if (*p == '\n') *p = ' ';
}

/* ---- small helpers ---- */

static int split_path(const char *path, char *dir, size_t cap, const char **base) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash[1] == 0) return -1;
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  if (n >= cap) return -1;
  memcpy(dir, path, n);
  dir[n] = 0;
  *base = slash + 1;
  return 0;
}

/* rm -rf of an absolute path, never following a link. */
static void remove_path(const char *path) {
  char dir[PATH_MAX];
  const char *base;
  if (split_path(path, dir, sizeof dir, &base) < 0) return;
  mb_sync_root *r = mb_sync_root_open(dir, NULL);
  if (!r) return;
  mb_sync_rmtree(r, base, NULL);
  mb_sync_root_close(r);
}


/* A sync error from the walker as a tool failure (unpack: stdout; streaming tools: stderr, then
 * the entry's path as "path <n> <bytes>\n" when there is one). */
static int walk_fail(const struct mb_error *e, int streaming) {
  const char *code = e->name ? mb_error_code(e) : "SYNC_IO_ERROR";
  if (!streaming) return tool_fail(code, "%s", e->message);
  if (e->path[0]) {
    char head[64];
    int n = snprintf(head, sizeof head, "path %zu ", strlen(e->path));
    char line[3200];
    int m = snprintf(line, sizeof line, "err %s %s\n", code, e->message);
    for (int i = 0; i < m - 1 && i < (int)sizeof line - 1; i++)
      if (line[i] == '\n') line[i] = ' ';
    tool_error_data(line, m < (int)sizeof line ? (size_t)m : sizeof line - 1);
    tool_error_data(head, (size_t)n);
    tool_error_data(e->path, strlen(e->path));
    tool_error_data("\n", 1);
    return tool_finish(1);
  }
  return stream_fail(code, "%s", e->message);
}

static mb_sync_scan *scan_all(mb_sync_root *r, const struct mb_sync_scan_opts *so, struct mb_error *e) {
  mb_sync_scan *s = mb_sync_scan_new(r, so, e);
  if (!s) return NULL;
  int rc;
  while ((rc = mb_sync_scan_step(s, 4096, e)) == 0) {
  }
  if (rc < 0) {
    mb_sync_scan_free(s);
    return NULL;
  }
  return s;
}

/* ---- unpack ---- */

static int unpack_fail(const char *stage, const char *code, const char *fmt, const char *a, const char *b) {
  remove_path(stage);
  char detail[2 * PATH_MAX + ERRBUF];
  snprintf(detail, sizeof detail, fmt, a ? a : "", b ? b : "");
  return tool_fail(code, "%s", detail);
}

int tool_unpack(int argc, char **argv) {
  static const char *U = "unpack [--max-files N] [--max-bytes N] [--max-meta N] [--tar PROG] STAGE TARGET";
  struct opts o;
  int i = parse_opts(argc, argv, &o);
  if (i < 0 || argc - i != 2) return usage(U);
  const char *stage = argv[i], *target = argv[i + 1];
  if (stage[0] != '/' || target[0] != '/') return usage(U);
  struct stat st;
  if (lstat(stage, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
    return unpack_fail(stage, "SYNC_IO_ERROR", "staging directory '%s' is not a directory of ours%s", stage, NULL);
  char archive[PATH_MAX], tree[PATH_MAX];
  if (snprintf(archive, sizeof archive, "%s/archive.tar", stage) >= (int)sizeof archive ||
      snprintf(tree, sizeof tree, "%s/tree", stage) >= (int)sizeof tree)
    return unpack_fail(stage, "SYNC_IO_ERROR", "staging path '%s' is too long%s", stage, NULL);
  if (lstat(archive, &st) < 0 || !S_ISREG(st.st_mode))
    return unpack_fail(stage, "SYNC_IO_ERROR", "'%s' is not a regular file%s", archive, NULL);
  if (mkdir(tree, 0700) < 0) return unpack_fail(stage, "SYNC_IO_ERROR", "cannot make '%s': %s", tree, strerror(errno));

  char *targv[] = {(char *)o.tar, "-x", "-p", "--no-same-owner", "--delay-directory-restore",
                   "--warning=no-unknown-keyword", "-f", archive, "-C", tree, NULL};
  struct child c;
  if (start_child(targv, NULL, -1, 0, &c) < 0)
    return unpack_fail(stage, "SYNC_REMOTE_TOOL", "cannot start tar: %s%s", strerror(errno), NULL);
  char err[ERRBUF];
  int rc = finish_child(&c, NULL, NULL, err, sizeof err);
  one_line(err);
  if (rc != 0) {
    char status[32];
    snprintf(status, sizeof status, "%d", rc);
    return unpack_fail(stage, "SYNC_REMOTE_TOOL", "tar -x failed (exit status %s): %s", status, err);
  }
  unlink(archive);

  /* What tar made must be a plain tree within the limits: no device, FIFO, socket or hard link. */
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tree, &e);
  struct mb_sync_scan_opts so = {.max_entries = o.max_files, .max_bytes = o.max_bytes, .max_meta = o.max_meta};
  mb_sync_scan *s = r ? scan_all(r, &so, &e) : NULL;
  uint64_t files = 0, dirs = 0, links = 0;
  for (size_t k = 1; s && k < mb_sync_scan_count(s); k++) {
    const struct mb_sync_entry *en = mb_sync_scan_entry(s, k);
    if (en->type == MB_SYNC_FILE && en->nlink > 1) {
      mb_error_fail(&e, MB_CODE_SYNC_UNSAFE_ENTRY, en->path, "'%s' is a hard link: refused", en->path);
      mb_sync_scan_free(s);
      s = NULL;
      break;
    }
    files += en->type == MB_SYNC_FILE;
    dirs += en->type == MB_SYNC_DIR;
    links += en->type == MB_SYNC_LINK;
  }
  int scanned = s != NULL;
  uint64_t bytes = s ? mb_sync_scan_bytes(s) : 0;
  mb_sync_scan_free(s);
  mb_sync_root_close(r);
  if (!scanned) {
    remove_path(stage);
    return walk_fail(&e, 0);
  }

  /* Publish: one rename swaps the trees (or moves the new one in). */
  if (mkdir_parents(target) < 0)
    return unpack_fail(stage, "SYNC_IO_ERROR", "cannot make the parents of '%s': %s", target, strerror(errno));
  int exists = lstat(target, &st) == 0;
  if (!exists && errno != ENOENT) return unpack_fail(stage, "SYNC_IO_ERROR", "cannot stat '%s': %s", target, strerror(errno));
  if (exists && !S_ISDIR(st.st_mode))
    return unpack_fail(stage, "SYNC_NOT_DIRECTORY", "'%s' exists and is not a directory%s", target, NULL);
  if (!exists) {
    if (rename(tree, target) < 0) return unpack_fail(stage, "SYNC_IO_ERROR", "cannot publish '%s': %s", target, strerror(errno));
  } else if (syscall(SYS_renameat2, AT_FDCWD, tree, AT_FDCWD, target, 2 /* RENAME_EXCHANGE */) < 0) {
    if (errno != EINVAL && errno != ENOSYS)
      return unpack_fail(stage, "SYNC_IO_ERROR", "cannot publish '%s': %s", target, strerror(errno));
    /* No exchange on this filesystem: two renames (a moment without TARGET). */
    char old[PATH_MAX];
    snprintf(old, sizeof old, "%s/old", stage);
    if (rename(target, old) < 0) return unpack_fail(stage, "SYNC_IO_ERROR", "cannot publish '%s': %s", target, strerror(errno));
    if (rename(tree, target) < 0) {
      int err2 = errno;
      if (rename(old, target) < 0) {
      }
      return unpack_fail(stage, "SYNC_IO_ERROR", "cannot publish '%s': %s", target, strerror(err2));
    }
  }
  remove_path(stage); /* the previous tree (swapped into STAGE/tree) with it */
  tool_printf("ok %llu %llu %llu %llu\n", (unsigned long long)files, (unsigned long long)dirs, (unsigned long long)links,
              (unsigned long long)bytes);
  return tool_finish(0);
}

/* ---- manifest ---- */

/* Records are gathered into one buffer and sent in few frames (a record alone is tiny). */
static char rec_buf[65536];
static size_t rec_len;

static void rec_flush(void) {
  if (rec_len) tool_data(rec_buf, rec_len);
  rec_len = 0;
}

static void rec_add(const char *p, size_t n) {
  while (n) {
    if (rec_len == sizeof rec_buf) rec_flush();
    size_t k = n < sizeof rec_buf - rec_len ? n : sizeof rec_buf - rec_len;
    memcpy(rec_buf + rec_len, p, k);
    rec_len += k;
    p += k;
    n -= k;
  }
}

struct hash_batch {
  struct mb_sync_entry **v; /* the batch's files, in argument order */
  size_t n, next;
  char line[MB_SYNC_PATH_MAX + 80];
  size_t llen;
  int overflow;
};

static int hex_digit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* One "HASH  NAME" record (NUL-terminated, -z: names unescaped). Files sha256sum could not read
 * have no record: everything before the matching name stays unhashed. */
static void hash_record(struct hash_batch *b) {
  const char *l = b->line;
  size_t n = b->llen;
  if (b->overflow || n < 67) return;
  for (int i = 0; i < 64; i++)
    if (!hex_digit(l[i])) return;
  if (l[64] != ' ' || (l[65] != ' ' && l[65] != '*')) return;
  const char *name = l + 66;
  size_t nl = n - 66;
  for (size_t j = b->next; j < b->n; j++) {
    struct mb_sync_entry *en = b->v[j];
    if (en->plen == nl && memcmp(en->path, name, nl) == 0) {
      for (int i = 0; i < 32; i++) {
        int hi = l[2 * i] <= '9' ? l[2 * i] - '0' : l[2 * i] - 'a' + 10;
        int lo = l[2 * i + 1] <= '9' ? l[2 * i + 1] - '0' : l[2 * i + 1] - 'a' + 10;
        en->sha256[i] = (unsigned char)(hi << 4 | lo);
      }
      en->hashed = 1;
      b->next = j + 1;
      return;
    }
  }
}

static int hash_out(void *ud, const char *p, size_t n) {
  struct hash_batch *b = ud;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == 0) {
      hash_record(b);
      b->llen = 0;
      b->overflow = 0;
      continue;
    }
    if (b->llen < sizeof b->line) b->line[b->llen++] = p[i];
    else b->overflow = 1;
  }
  return 0;
}

/* A batch of sha256sum in flight. */
struct hash_slot {
  struct child c;
  struct hash_batch b;
  char **argv;
  char err[ERRBUF];
  size_t elen;
  int used;
};

/* Fills slot with the next batch of files from index *k. → files in the batch */
static size_t next_batch(const struct opts *o, mb_sync_scan *s, size_t *k, struct hash_slot *sl) {
  size_t count = mb_sync_scan_count(s), bytes = 0, na = 0;
  struct mb_sync_entry **v = sl->b.v;
  memset(&sl->b, 0, sizeof sl->b);
  sl->b.v = v;
  sl->argv[na++] = (char *)o->sha256sum;
  sl->argv[na++] = "-z";
  sl->argv[na++] = "--";
  for (; *k < count && sl->b.n < HASH_BATCH_FILES && bytes < HASH_BATCH_BYTES; (*k)++) {
    struct mb_sync_entry *en = mb_sync_scan_entry(s, *k);
    if (en->type != MB_SYNC_FILE || en->excluded) continue;
    v[sl->b.n++] = en;
    sl->argv[na++] = en->path;
    bytes += en->plen + 1;
  }
  sl->argv[na] = NULL;
  return sl->b.n;
}

/* Hashes every file of the scan with sha256sum, a few batches at once (one per CPU, up to 4). */
static int hash_files(const struct opts *o, const char *dir, mb_sync_scan *s, char *err, size_t cap) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int nslots = cpus < 1 ? 1 : cpus > 4 ? 4 : (int)cpus;
  struct hash_slot *slots = calloc((size_t)nslots, sizeof *slots);
  int rc = slots ? 0 : -1;
  for (int i = 0; rc == 0 && i < nslots; i++) {
    slots[i].b.v = malloc(HASH_BATCH_FILES * sizeof *slots[i].b.v);
    slots[i].argv = malloc((HASH_BATCH_FILES + 4) * sizeof *slots[i].argv);
    if (!slots[i].b.v || !slots[i].argv) rc = -1;
  }
  if (rc < 0) snprintf(err, cap, "out of memory");
  size_t k = 1;
  int running = 0;
  static char buf[65536];
  while (rc == 0) {
    for (int i = 0; i < nslots && k < mb_sync_scan_count(s); i++) {
      struct hash_slot *sl = &slots[i];
      if (sl->used) continue;
      if (next_batch(o, s, &k, sl) == 0) break;
      if (start_child(sl->argv, dir, -1, 1, &sl->c) < 0) {
        snprintf(err, cap, "cannot start %s: %s", o->sha256sum, strerror(errno));
        rc = -1;
        break;
      }
      sl->used = 1;
      sl->elen = 0;
      sl->err[0] = 0;
      running++;
    }
    if (running == 0) break;
    struct pollfd p[8];
    int who[8], np = 0;
    for (int i = 0; i < nslots; i++) {
      if (!slots[i].used) continue;
      if (slots[i].c.out >= 0) { p[np] = (struct pollfd){.fd = slots[i].c.out, .events = POLLIN}; who[np++] = 2 * i; }
      if (slots[i].c.err >= 0) { p[np] = (struct pollfd){.fd = slots[i].c.err, .events = POLLIN}; who[np++] = 2 * i + 1; }
    }
    if (np && poll(p, (nfds_t)np, -1) < 0 && errno != EINTR) {
      snprintf(err, cap, "poll: %s", strerror(errno));
      rc = -1;
      break;
    }
    for (int j = 0; j < np; j++) {
      if (!(p[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      struct hash_slot *sl = &slots[who[j] / 2];
      int *fd = who[j] % 2 ? &sl->c.err : &sl->c.out;
      ssize_t n = read(*fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) { close_fd(fd); continue; }
      if (who[j] % 2) {
        size_t m = (size_t)n < sizeof sl->err - 1 - sl->elen ? (size_t)n : sizeof sl->err - 1 - sl->elen;
        memcpy(sl->err + sl->elen, buf, m);
        sl->elen += m;
        sl->err[sl->elen] = 0;
      } else {
        hash_out(&sl->b, buf, (size_t)n);
      }
    }
    for (int i = 0; i < nslots; i++) {
      struct hash_slot *sl = &slots[i];
      if (!sl->used || sl->c.out >= 0 || sl->c.err >= 0) continue;
      int st = 0;
      while (waitpid(sl->c.pid, &st, 0) < 0 && errno == EINTR) {
      }
      sl->used = 0;
      running--;
      if (sl->b.llen) hash_record(&sl->b); /* a last record without its NUL */
      int code = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
      /* 1: some file could not be read (it has no hash: reported as such); more: the tool failed */
      if (code != 0 && code != 1 && rc == 0) {
        one_line(sl->err);
        snprintf(err, cap, "%s failed (exit status %d): %s", o->sha256sum, code, sl->err);
        rc = -1;
      }
    }
  }
  for (int i = 0; slots && i < nslots; i++) {
    if (slots[i].used) {
      kill(slots[i].c.pid, SIGKILL);
      close_fd(&slots[i].c.out);
      close_fd(&slots[i].c.err);
      waitpid(slots[i].c.pid, NULL, 0);
    }
    free(slots[i].b.v);
    free(slots[i].argv);
  }
  free(slots);
  return rc;
}

int tool_manifest(int argc, char **argv) {
  static const char *U =
      "manifest [--max-files N] [--max-bytes N] [--max-meta N] [--gitignore] [--exclude BASE64] [--sha256sum PROG] DIR";
  struct opts o;
  int i = parse_opts(argc, argv, &o);
  if (i < 0 || argc - i != 1) return usage(U);
  const char *dir = argv[i];
  unsigned char *exclude = NULL;
  long xlen = 0;
  if (o.exclude_b64) {
    size_t n = strlen(o.exclude_b64);
    exclude = malloc(n / 4 * 3 + 1);
    if (!exclude || (xlen = mb_b64_decode(o.exclude_b64, n, exclude)) < 0) {
      free(exclude);
      return usage(U);
    }
  }
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(dir, &e);
  if (!r) {
    free(exclude);
    return walk_fail(&e, 1);
  }
  struct mb_sync_scan_opts so = {.max_entries = o.max_files, .max_bytes = o.max_bytes, .max_meta = o.max_meta,
                                 .gitignore = o.gitignore, .keep_excluded = 1, .exclude = (const char *)exclude,
                                 .exclude_len = (size_t)xlen};
  mb_sync_scan *s = scan_all(r, &so, &e);
  free(exclude);
  mb_sync_root_close(r);
  if (!s) return walk_fail(&e, 1);
  char err[ERRBUF + 256];
  if (hash_files(&o, dir, s, err, sizeof err) < 0) {
    mb_sync_scan_free(s);
    return stream_fail("SYNC_REMOTE_TOOL", "%s", err);
  }
  /* "<t> <mode> <size> <mtime_s>.<ns> <sha256|-|!> <plen> <path> <llen> <link>\n"; t: f d l, or x
   * for an excluded entry (mode's place: d or f); '!' = a file sha256sum could not read. */
  static const char X[] = "0123456789abcdef";
  for (size_t k = 1; k < mb_sync_scan_count(s); k++) {
    const struct mb_sync_entry *en = mb_sync_scan_entry(s, k);
    char head[160], hx[65];
    const char *h = "-";
    if (en->type == MB_SYNC_FILE && !en->excluded) {
      if (en->hashed) {
        for (int b = 0; b < 32; b++) {
          hx[2 * b] = X[en->sha256[b] >> 4];
          hx[2 * b + 1] = X[en->sha256[b] & 15];
        }
        hx[64] = 0;
        h = hx;
      } else {
        h = "!";
      }
    }
    int n;
    if (en->excluded)
      n = snprintf(head, sizeof head, "x %c 0 0.000000000 - %zu ", en->type == MB_SYNC_DIR ? 'd' : 'f', en->plen);
    else
      n = snprintf(head, sizeof head, "%c %04o %llu %lld.%09ld %s %zu ", en->type, en->mode, (unsigned long long)en->size,
                   (long long)en->mtime_s, en->mtime_ns, h, en->plen);
    rec_add(head, (size_t)n);
    rec_add(en->path, en->plen);
    size_t ll = en->link ? strlen(en->link) : 0;
    n = snprintf(head, sizeof head, " %zu ", ll);
    rec_add(head, (size_t)n);
    if (ll) rec_add(en->link, ll);
    rec_add("\n", 1);
  }
  rec_flush();
  mb_sync_scan_free(s);
  return tool_finish(0);
}

/* ---- pack ---- */

struct pack_out {
  uint64_t n, max;
};

static int pack_out(void *ud, const char *p, size_t n) {
  struct pack_out *po = ud;
  po->n += n;
  if (po->n > po->max) return -1;
  tool_data(p, n);
  return 0;
}

int tool_pack(int argc, char **argv) {
  static const char *U = "pack [--max-bytes N] [--tar PROG] DIR LIST_BASE64";
  struct opts o;
  int i = parse_opts(argc, argv, &o);
  if (i < 0 || argc - i != 2) return usage(U);
  const char *dir = argv[i], *b64 = argv[i + 1];
  size_t bl = strlen(b64);
  char *list = malloc(bl / 4 * 3 + 1);
  long ln = list ? mb_b64_decode(b64, bl, (unsigned char *)list) : -1;
  if (ln <= 0 || list[ln - 1] != 0) {
    free(list);
    return usage(U);
  }
  /* Every name is checked here as it will be by the host: relative, inside DIR. */
  for (long p = 0; p < ln;) {
    size_t n = strlen(list + p);
    struct mb_error e = {0};
    if (mb_sync_check_path(list + p, n, &e) < 0) {
      free(list);
      return stream_fail("SYNC_UNSAFE_ENTRY", "%s", e.message);
    }
    p += (long)n + 1;
  }
  int np[2];
  if (pipe2(np, O_CLOEXEC) < 0) {
    free(list);
    return stream_fail("SYNC_IO_ERROR", "pipe: %s", strerror(errno));
  }
  pid_t w = fork();
  if (w == 0) { /* feeds the names to tar's stdin */
    close(np[0]);
    for (long off = 0; off < ln;) {
      ssize_t k = write(np[1], list + off, (size_t)(ln - off));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) _exit(1);
      off += k;
    }
    _exit(0);
  }
  close(np[1]);
  free(list);
  if (w < 0) {
    close(np[0]);
    return stream_fail("SYNC_IO_ERROR", "fork: %s", strerror(errno));
  }
  char *targv[] = {(char *)o.tar, "-c", "-f", "-", "-H", "pax", "--null", "--no-recursion", "--hard-dereference",
                   "-C", (char *)dir, "-T", "-", NULL};
  struct child c;
  int rc = start_child(targv, NULL, np[0], 1, &c);
  close(np[0]);
  if (rc < 0) {
    kill(w, SIGKILL);
    waitpid(w, NULL, 0);
    return stream_fail("SYNC_REMOTE_TOOL", "cannot start tar: %s", strerror(errno));
  }
  struct pack_out po = {.max = o.max_bytes};
  char err[ERRBUF];
  int st = finish_child(&c, pack_out, &po, err, sizeof err);
  kill(w, SIGKILL);
  waitpid(w, NULL, 0);
  one_line(err);
  if (st == -2) return stream_fail("SYNC_TOO_LARGE", "the archive is over maxBytes (%llu bytes)", (unsigned long long)o.max_bytes);
  if (st == 1) return stream_fail("SYNC_CHANGED", "a file changed while it was packed: %s", err);
  if (st != 0) return stream_fail("SYNC_REMOTE_TOOL", "tar -c failed (exit status %d): %s", st, err);
  return tool_finish(0);
}
