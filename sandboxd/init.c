/* init.c — pid 1 of every sandbox: builds the root file system, then spawns commands for sandboxd
 * and reports their exits; reaps every orphan. Runs in a fresh image of the sandboxd binary
 * (single-threaded), so plain libc is safe here. Protocol: init.h. */
#include "init.h"
#include "../core/include/moonbox_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

static int g_ctl = -1;
/* Setup timing (µs per phase), reported in READY's text for SANDBOXD_TRACE_CREATE. */
static char g_trace[200];
static struct timespec g_mark;
static void mark(const char *what) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  size_t n = strlen(g_trace);
  if (g_mark.tv_sec && n < sizeof g_trace - 1)
    snprintf(g_trace + n, sizeof g_trace - n, "%s%s %ldus", n ? ", " : "", what,
             (long)((t.tv_sec - g_mark.tv_sec) * 1000000 + (t.tv_nsec - g_mark.tv_nsec) / 1000));
  g_mark = t;
}
static int g_clear_groups;

static void send_msg(const init_msg *m, const int *fds, int nfds) {
  struct iovec iov = {(void *)m, sizeof *m};
  union { char buf[CMSG_SPACE(sizeof(int) * 3)]; struct cmsghdr align; } u;
  struct msghdr mh = {0};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (nfds > 0) {
    memset(&u, 0, sizeof u);
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  while (sendmsg(g_ctl, &mh, MSG_NOSIGNAL) < 0) {
    if (errno == EINTR) continue;
    _exit(1);   /* sandboxd is gone: dying takes the whole pid namespace with us */
  }
}

/* Sends a message of `type` whose text is printf(fmt, ap); seq and code as given. */
static void send_text(uint32_t type, uint32_t seq, int code, const char *fmt, va_list ap) {
  init_msg m;
  memset(&m, 0, sizeof m);
  m.type = type;
  m.seq = seq;
  m.code = code;
  vsnprintf(m.text, sizeof m.text, fmt, ap);
  send_msg(&m, NULL, 0);
}

static void fail_setup(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_text(INIT_MSG_FAILED, 0, 0, fmt, ap);
  va_end(ap);
  _exit(1);
}

#define CHECK(expr, what) do { if ((expr) != 0) fail_setup("%s: %s", what, strerror(errno)); } while (0)

static int parse_fd(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  return (*end || v < 0 || v > 1 << 20) ? -1 : (int)v;
}

static void bind_dev(const char *name) {
  char src[64], dst[64];
  snprintf(src, sizeof src, "/dev/%s", name);
  snprintf(dst, sizeof dst, "dev/%s", name);
  int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) fail_setup("create %s: %s", dst, strerror(errno));
  close(fd);
  if (mount(src, dst, NULL, MS_BIND, NULL) != 0) fail_setup("bind %s: %s", src, strerror(errno));
}

/* Volumes (argv[7..]): each an fd of its directory and an absolute path inside the sandbox. */
#define INIT_MAX_MOUNTS 16
static int g_mount_fd[INIT_MAX_MOUNTS];
static const char *g_mount_path[INIT_MAX_MOUNTS];
static int g_nmounts;

static void parse_mounts(int argc, char **argv) {
  char *end;
  long n = strtol(argv[7], &end, 10);
  if (*end || n < 0 || n > INIT_MAX_MOUNTS || argc != 8 + n) _exit(2);
  for (long i = 0; i < n; i++) {
    char *colon = strchr(argv[8 + i], ':');
    if (!colon || colon[1] != '/') _exit(2);
    *colon = 0;
    g_mount_fd[i] = parse_fd(argv[8 + i]);
    *colon = ':';
    if (g_mount_fd[i] < 0) _exit(2);
    g_mount_path[i] = colon + 1;
  }
  g_nmounts = (int)n;
}

/* Each volume on its path inside the new root (the cwd): missing directories are made (0755,
 * root's), and no level may be a symlink or a file, so a mount never lands outside the root or on
 * what a snapshot put there in its place. The volume's tree is cloned and attached nosuid, nodev. */
static void mount_volumes(void) {
  for (int i = 0; i < g_nmounts; i++) {
    const char *path = g_mount_path[i];
    int dir = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) fail_setup("volume mount %s: %s", path, strerror(errno));
    for (const char *p = path; *p;) {
      while (*p == '/') p++;
      size_t n = strcspn(p, "/");
      if (n == 0) break;
      char comp[256];
      if (n >= sizeof comp) fail_setup("volume mount %s: a component is too long", path);
      memcpy(comp, p, n);
      comp[n] = 0;
      p += n;
      int next = openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0 && errno == ENOENT && mkdirat(dir, comp, 0755) == 0) next = openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0)
        fail_setup("volume mount %s: '%s' %s", path, comp, errno == ENOTDIR || errno == ELOOP ? "is not a directory (a file or a symlink)" : strerror(errno));
      close(dir);
      dir = next;
    }
    int tree = (int)syscall(SYS_open_tree, g_mount_fd[i], "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    struct mount_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (tree < 0 || syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0 ||
        syscall(SYS_move_mount, tree, "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
      fail_setup("volume mount %s: %s", path, strerror(errno));
    close(tree);
    close(dir);
    close(g_mount_fd[i]);
  }
}

/* Snapshot layers (argv[6]): the store's fd and the chain's ids, top first; none by default. */
static int g_layers_fd = -1;
static char g_layer_ids[40][24];
static int g_nlayers;

static void parse_layers(const char *spec) {
  if (!strcmp(spec, "-")) return;
  const char *colon = strchr(spec, ':');
  char fdtext[16];
  if (!colon || (size_t)(colon - spec) >= sizeof fdtext) _exit(2);
  memcpy(fdtext, spec, (size_t)(colon - spec));
  fdtext[colon - spec] = 0;
  if ((g_layers_fd = parse_fd(fdtext)) < 0) _exit(2);
  for (const char *p = colon + 1; *p;) {
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= sizeof g_layer_ids[0] || g_nlayers == 40) _exit(2);
    memcpy(g_layer_ids[g_nlayers], p, n);
    g_layer_ids[g_nlayers++][n] = 0;
    p += n;
    if (*p == ',') p++;
  }
}

/* Layers in <sbx>: "upper"/"work" for the root, "upper-<d>"/"work-<d>" for system directory d;
 * below the upper layer each snapshot layer's tree ("root" or d), then `lower`. */
static void mount_overlay(const char *target, const char *lower, int sbx_fd, const char *layer) {
  char opts[4096], lowers[3072] = "";
  const char *dash = layer[0] ? "-" : "";
  size_t n = 0;
  for (int i = 0; i < g_nlayers; i++) {
    int k = snprintf(lowers + n, sizeof lowers - n, "/proc/self/fd/%d/%s/%s:", g_layers_fd, g_layer_ids[i], layer[0] ? layer : "root");
    if (k < 0 || (size_t)k >= sizeof lowers - n) fail_setup("overlay on %s: too many snapshot layers", target);
    n += (size_t)k;
  }
  int k = snprintf(opts, sizeof opts,
           "lowerdir=%s%s,upperdir=/proc/self/fd/%d/upper%s%s,workdir=/proc/self/fd/%d/work%s%s,userxattr,volatile",
           lowers, lower, sbx_fd, dash, layer, sbx_fd, dash, layer);
  if (k < 0 || (size_t)k >= sizeof opts) fail_setup("overlay on %s: options too long", target);
  if (mount("overlay", target, "overlay", 0, opts) == 0) return;
  /* "volatile" skips syncs of a layer that is deleted anyway; older kernels lack it. */
  char *v = strstr(opts, ",volatile");
  if (v) *v = 0;
  if (mount("overlay", target, "overlay", 0, opts) != 0)
    fail_setup("overlay on %s (lower %s%s): %s", target, g_nlayers ? "snapshot layers and " : "", lower, strerror(errno));
}

/* The system overlays (/usr, ...) are mounted by a helper process while we mount the root
 * overlay (each costs a few file-system round trips), then moved into place. The helper stacks
 * each on the host directory it covers, /<name> of the old root (detached later with all of
 * it): no mount point directory to create. Same mount namespace, so its mounts are ours. */
static pid_t mount_system_overlays(int sbx_fd, char *sysdirs, char names[][16], int *n) {
  *n = 0;
  char *save = NULL;
  for (char *d = strtok_r(sysdirs, ",", &save); d && *n < 8; d = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(d, '=');
    if (eq) *eq = 0;
    snprintf(names[*n], 16, "%s", d);
    names[(*n)++][15] = 0;
    if (eq) *eq = '=';
  }
  pid_t pid = fork();
  if (pid != 0) return pid;   /* parent (or -1: the caller mounts nothing then fails) */
  save = NULL;
  for (char *d = strtok_r(sysdirs, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
    char stage[128];
    char *eq = strchr(d, '=');
    if (eq) *eq = 0;
    snprintf(stage, sizeof stage, "/%s", d);
    if (eq) {
      /* An idmapped tree of the host directory: attach it over the directory, then stack the
       * overlay on it (the lower layer is looked up before the overlay covers it). */
      int fd = parse_fd(eq + 1);
      if (fd < 0 || syscall(SYS_move_mount, fd, "", AT_FDCWD, stage, MOVE_MOUNT_F_EMPTY_PATH) != 0)
        fail_setup("attach idmapped /%s: %s", d, strerror(errno));
    }
    mount_overlay(stage, stage, sbx_fd, d);
  }
  _exit(0);
}

static void setup_root(int tpl_fd, int sbx_fd, char *sysdirs) {
  char path[128], names[8][16];
  int nsys;
  CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make mounts private");
  /* tpl_fd is the template's parent: the root overlay is mounted over the template itself
   * (looked up as its lower layer first), in this mount namespace only. */
  snprintf(path, sizeof path, "/proc/self/fd/%d/root", tpl_fd);
  mark(NULL);
  char sysdirs_copy[512];
  snprintf(sysdirs_copy, sizeof sysdirs_copy, "%s", sysdirs);   /* strtok_r below cuts sysdirs */
  pid_t helper = mount_system_overlays(sbx_fd, sysdirs, names, &nsys);
  if (helper < 0) fail_setup("fork: %s", strerror(errno));
  mount_overlay(path, path, sbx_fd, "");
  mark("root overlay");
  CHECK(chdir(path), "chdir to new root");   /* "root" is looked up normally: lands on the overlay */
  int status;
  while (waitpid(helper, &status, 0) < 0)
    if (errno != EINTR) fail_setup("wait: %s", strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) _exit(1);   /* the helper reported why */
  /* Our copies of the idmapped trees: once the overlays hold them, nothing else may. */
  for (const char *q = strchr(sysdirs_copy, '='); q; q = strchr(q + 1, '=')) {
    int fd = (int)strtol(q + 1, NULL, 10);
    if (fd > 2) close(fd);
  }
  for (int i = 0; i < nsys; i++) {
    char stage[160];
    snprintf(stage, sizeof stage, "/%s", names[i]);
    if (mount(stage, names[i], NULL, MS_MOVE, NULL) != 0) fail_setup("move /%s overlay: %s", names[i], strerror(errno));
  }
  mark("system overlays");
  CHECK(mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /proc");
  CHECK(mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=65536"), "mount /dev");
  static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) bind_dev(nodes[i]);
  CHECK(mkdir("dev/pts", 0755), "mkdir /dev/pts");
  CHECK(mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"),
        "mount /dev/pts");
  CHECK(symlink("pts/ptmx", "dev/ptmx"), "link /dev/ptmx");
  CHECK(mkdir("dev/shm", 01777), "mkdir /dev/shm");
  CHECK(mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"), "mount /dev/shm");
  CHECK(symlink("/proc/self/fd", "dev/fd"), "link /dev/fd");
  CHECK(symlink("/proc/self/fd/0", "dev/stdin"), "link /dev/stdin");
  CHECK(symlink("/proc/self/fd/1", "dev/stdout"), "link /dev/stdout");
  CHECK(symlink("/proc/self/fd/2", "dev/stderr"), "link /dev/stderr");
  /* sysfs may only be mounted by the owner of the network namespace: ours, always. */
  (void)mount("sysfs", "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mark("proc+dev+sys");
  mount_volumes();
  CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root");
  CHECK(umount2(".", MNT_DETACH), "detach host root");
  CHECK(chdir("/"), "chdir /");
  CHECK(sethostname("sandbox", 7), "sethostname");   /* the sandbox id comes with INIT_REQ_HOSTNAME */
  {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) fail_setup("loopback: %s", strerror(errno));
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) fail_setup("loopback up: %s", strerror(errno));
    close(s);
  }
  if (g_clear_groups) CHECK(setgroups(0, NULL), "clear supplementary groups");
  mark("pivot+uts+net");
}

/* The host name resolves (sudo and others look it up): /etc/hosts gets "127.0.1.1 <name>" unless
 * a line already names it. Best effort: a sandbox whose /etc/hosts is not a plain file keeps it. */
static void hosts_entry(const char *name) {
  int fd = open("/etc/hosts", O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  size_t nl = strlen(name);
  bool found = false;
  if (n >= 0) {
    buf[n] = 0;
    for (char *p = buf; (p = strstr(p, name)) != NULL; p += nl)
      if ((p == buf || p[-1] == ' ' || p[-1] == '\t') && (p[nl] == 0 || p[nl] == '\n' || p[nl] == ' ' || p[nl] == '\t')) found = true;
  }
  if (n >= 0 && n < (ssize_t)sizeof buf - 1 && !found) {
    char line[128];
    int k = snprintf(line, sizeof line, "%s127.0.1.1\t%s\n", n > 0 && buf[n - 1] != '\n' ? "\n" : "", name);
    if (k > 0 && write(fd, line, (size_t)k) != k) { /* best effort */ }
  }
  close(fd);
}

/* ---- spawned children ---- */
static int32_t *g_pids;
static size_t g_npids, g_cap;

static int track(int32_t pid) {
  if (g_npids == g_cap) {
    size_t nc = g_cap ? g_cap * 2 : 64;
    if (nc > (1u << 22)) return -1;
    int32_t *p = realloc(g_pids, nc * sizeof *p);
    if (!p) return -1;
    g_pids = p;
    g_cap = nc;
  }
  g_pids[g_npids++] = pid;
  return 0;
}

static int tracked(int32_t pid, int remove) {
  for (size_t i = 0; i < g_npids; i++)
    if (g_pids[i] == pid) {
      if (remove) g_pids[i] = g_pids[--g_npids];
      return 1;
    }
  return 0;
}

struct child_err { int step, err; };
enum { STEP_TTY = 1, STEP_IDS, STEP_CHDIR, STEP_EXEC };

static void spawn_reply(uint32_t seq, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_text(INIT_MSG_SPAWNED, seq, code, fmt, ap);
  va_end(ap);
}

static void do_spawn(const init_req *rq, const char *str, size_t slen) {
  /* Strings: cwd, argv..., env...; every one must be NUL-terminated inside the packet. */
  size_t want = 1 + (size_t)rq->argc + rq->envc;
  if (rq->argc < 1 || rq->argc > slen || rq->envc > slen || want > slen + 1) {
    spawn_reply(rq->seq, INIT_EINTERNAL, "malformed spawn request");
    return;
  }
  char **argv = calloc(rq->argc + 1, sizeof *argv), **envp = calloc(rq->envc + 1, sizeof *envp);
  const char *cwd = NULL;
  int pfd[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}, master = -1, slave = -1, ep[2] = {-1, -1};
  if (!argv || !envp) { spawn_reply(rq->seq, INIT_EINTERNAL, "out of memory"); goto out; }
  size_t off = 0;
  for (size_t i = 0; i < want; i++) {
    const char *p = memchr(str + off, 0, slen - off);
    if (off >= slen || !p) { spawn_reply(rq->seq, INIT_EINTERNAL, "malformed spawn request"); goto out; }
    const char *s = str + off;
    if (i == 0) cwd = s;
    else if (i <= rq->argc) argv[i - 1] = (char *)s;
    else envp[i - 1 - rq->argc] = (char *)s;
    off = (size_t)(p - str) + 1;
  }
  struct stat st;
  if (stat(cwd, &st) != 0) { spawn_reply(rq->seq, INIT_EINVAL, "cwd '%s' does not exist", cwd); goto out; }
  if (!S_ISDIR(st.st_mode)) { spawn_reply(rq->seq, INIT_EINVAL, "cwd '%s' is not a directory", cwd); goto out; }
  int pty = (rq->flags & INIT_F_PTY) != 0;
  if (pty) {
    master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    int unlock = 0;
    if (master < 0 || ioctl(master, TIOCSPTLCK, &unlock) != 0 ||
        (slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
      spawn_reply(rq->seq, INIT_EINTERNAL, "open pty: %s", strerror(errno));
      goto out;
    }
    struct winsize ws = {.ws_row = rq->rows ? rq->rows : 24, .ws_col = rq->cols ? rq->cols : 80};
    (void)ioctl(master, TIOCSWINSZ, &ws);
  } else {
    for (int i = 0; i < 3; i++)
      if ((i > 0 || (rq->flags & INIT_F_STDIN)) && pipe2(pfd[i], O_CLOEXEC) != 0) {
        spawn_reply(rq->seq, INIT_EINTERNAL, "pipe: %s", strerror(errno));
        goto out;
      }
    if (!(rq->flags & INIT_F_STDIN) && (pfd[0][0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
      spawn_reply(rq->seq, INIT_EINTERNAL, "open /dev/null: %s", strerror(errno));
      goto out;
    }
  }
  if (pipe2(ep, O_CLOEXEC) != 0) { spawn_reply(rq->seq, INIT_EINTERNAL, "pipe: %s", strerror(errno)); goto out; }
  pid_t pid = fork();
  if (pid < 0) { spawn_reply(rq->seq, INIT_EINTERNAL, "fork: %s", strerror(errno)); goto out; }
  if (pid == 0) {
    struct child_err ce = {0, 0};
    mb_default_signals(); /* nothing sandboxd ignores (SIGPIPE) reaches commands */
    setsid();
    if (pty) {
      /* The terminal belongs to its user (group tty where that id is mapped). */
      if (fchown(slave, rq->uid, 5) != 0 && fchown(slave, rq->uid, (gid_t)-1) != 0) { ce.step = STEP_TTY; goto cfail; }
      if (ioctl(slave, TIOCSCTTY, 0) != 0 || dup2(slave, 0) < 0 ||
          dup2(slave, 1) < 0 || dup2(slave, 2) < 0) { ce.step = STEP_TTY; goto cfail; }
    } else if (dup2(pfd[0][0], 0) < 0 || dup2(pfd[1][1], 1) < 0 || dup2(pfd[2][1], 2) < 0) {
      ce.step = STEP_TTY;
      goto cfail;
    }
    if ((g_clear_groups && setgroups(0, NULL) != 0) || setresgid(rq->gid, rq->gid, rq->gid) != 0 ||
        setresuid(rq->uid, rq->uid, rq->uid) != 0) { ce.step = STEP_IDS; goto cfail; }
    umask(022);
    /* The init is not dumpable; the command is its own: root inside may trace it, and its /proc
     * files are its own (needed for oom_score_adj below). exec decides again for the program. */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    /* The init is shielded from the OOM killer (-1000, set by sandboxd); commands are not. */
    int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (oom >= 0) { if (write(oom, "100", 3) < 0) {} close(oom); }
    if (chdir(cwd) != 0) { ce.step = STEP_CHDIR; goto cfail; }
    syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    environ = envp;   /* execvpe searches the PATH of environ */
    execvpe(argv[0], argv, envp);
    ce.step = STEP_EXEC;
  cfail:
    ce.err = errno;
    if (write(ep[1], &ce, sizeof ce) < 0) _exit(127);
    _exit(127);
  }
  close(ep[1]);
  ep[1] = -1;
  struct child_err ce;
  ssize_t n;
  do n = read(ep[0], &ce, sizeof ce); while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof ce) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    static const char *const what[] = {"", "set up stdio", "switch user", "chdir", "exec"};
    const char *w = ce.step >= 1 && ce.step <= 4 ? what[ce.step] : "start";
    if (ce.step == STEP_EXEC)
      spawn_reply(rq->seq, INIT_EINTERNAL, "error starting process: exec %s: %s", argv[0], strerror(ce.err));
    else if (ce.step == STEP_CHDIR)
      spawn_reply(rq->seq, INIT_EINTERNAL, "error starting process: chdir %s: %s", cwd, strerror(ce.err));
    else
      spawn_reply(rq->seq, INIT_EINTERNAL, "error starting process: %s: %s", w, strerror(ce.err));
    goto out;
  }
  if (track(pid) != 0) {   /* cannot report its exit: do not let it run */
    kill(pid, SIGKILL);
    spawn_reply(rq->seq, INIT_EINTERNAL, "too many processes");
    goto out;
  }
  init_msg m;
  memset(&m, 0, sizeof m);
  m.type = INIT_MSG_SPAWNED;
  m.seq = rq->seq;
  m.pid = pid;
  int fds[3], nfds = 0;
  if (pty) fds[nfds++] = master;
  else {
    fds[nfds++] = pfd[1][0];
    fds[nfds++] = pfd[2][0];
    if (rq->flags & INIT_F_STDIN) fds[nfds++] = pfd[0][1];
  }
  send_msg(&m, fds, nfds);
out:
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++)
      if (pfd[i][j] >= 0) close(pfd[i][j]);
  if (master >= 0) close(master);
  if (slave >= 0) close(slave);
  if (ep[0] >= 0) close(ep[0]);
  if (ep[1] >= 0) close(ep[1]);
  free(argv);
  free(envp);
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    if (!tracked(pid, 1)) continue;   /* an orphan: reaping is all we owe it */
    init_msg m;
    memset(&m, 0, sizeof m);
    m.type = INIT_MSG_EXITED;
    m.pid = pid;
    m.status = status;
    send_msg(&m, NULL, 0);
  }
}


int sbx_init_main(int argc, char **argv) {
  if (argc < 8) return 2;
  g_ctl = parse_fd(argv[1]);
  int tpl_fd = parse_fd(argv[2]), sbx_fd = parse_fd(argv[3]);
  if (g_ctl < 0 || tpl_fd < 0 || sbx_fd < 0) return 2;
  g_clear_groups = argv[4][0] == 'c';
  parse_layers(argv[6]);
  parse_mounts(argc, argv);
  /* Inherit nothing from sandboxd but the descriptors named in argv, whatever it forgot to mark
   * CLOEXEC: the channel, the layer directories and the idmapped trees ("usr=<fd>"). */
  int keep[4 + 16 + INIT_MAX_MOUNTS] = {g_ctl, tpl_fd, sbx_fd}, nkeep = 3;
  if (g_layers_fd >= 0) keep[nkeep++] = g_layers_fd;
  for (int i = 0; i < g_nmounts; i++) keep[nkeep++] = g_mount_fd[i];
  for (const char *q = strchr(argv[5], '='); q && nkeep < (int)(sizeof keep / sizeof keep[0]); q = strchr(q + 1, '=')) {
    int fd = (int)strtol(q + 1, NULL, 10);
    if (fd > 2) keep[nkeep++] = fd;
  }
  for (int i = 0; i < nkeep; i++)
    for (int j = i + 1; j < nkeep; j++)
      if (keep[j] < keep[i]) { int x = keep[i]; keep[i] = keep[j]; keep[j] = x; }
  unsigned lo = 3;
  for (int i = 0; i < nkeep; i++) {
    if ((unsigned)keep[i] > lo) syscall(SYS_close_range, lo, (unsigned)keep[i] - 1, 0);
    if ((unsigned)keep[i] + 1 > lo) lo = (unsigned)keep[i] + 1;
  }
  syscall(SYS_close_range, lo, ~0U, 0);
  /* Never keep sandboxd's stdio: the sandbox must not write to the host's terminal or log. */
  int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (nul >= 0) { dup2(nul, 0); dup2(nul, 1); dup2(nul, 2); if (nul > 2) close(nul); }
  prctl(PR_SET_NAME, "sandboxd-init", 0, 0, 0);   /* what `ps` shows as pid 1 inside */
  /* Nobody inside may ptrace us (the image is unreadable to them, see sandbox.c init_exe_fd; this
   * keeps it so whatever the image's mode): a tracer that stops pid 1 would stop every command. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  /* Our own mask, whatever the sandboxd thread that cloned us had blocked: only SIGCHLD (read
   * through a signalfd). */
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_SETMASK, &chld, NULL);
  setup_root(tpl_fd, sbx_fd, argv[5]);
  close(tpl_fd);
  close(sbx_fd);
  if (g_layers_fd >= 0) close(g_layers_fd);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) fail_setup("signalfd: %s", strerror(errno));
  init_msg ready;
  memset(&ready, 0, sizeof ready);
  ready.type = INIT_MSG_READY;
  memcpy(ready.text, g_trace, sizeof g_trace);
  send_msg(&ready, NULL, 0);
  size_t cap = sizeof(init_req) + INIT_REQ_MAX;
  char *buf = malloc(cap);
  if (!buf) _exit(1);
  for (;;) {
    struct pollfd pf[2] = {{g_ctl, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(pf, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (pf[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
      reap();
    }
    if (pf[0].revents) {
      ssize_t n = recv(g_ctl, buf, cap, MSG_TRUNC);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(0);   /* sandboxd closed the channel: the sandbox ends with us */
      if ((size_t)n > cap || (size_t)n < sizeof(init_req)) continue;
      init_req rq;
      memcpy(&rq, buf, sizeof rq);
      if (rq.type == INIT_REQ_SPAWN) {
        do_spawn(&rq, buf + sizeof rq, (size_t)n - sizeof rq);
        reap();   /* a child that already exited: report after its SPAWNED */
      } else if (rq.type == INIT_REQ_KILL) {
        /* The whole process group (each command is a session leader): killing only
         * `bash -c "sleep 9; true"` would leave sleep holding the output pipe open. */
        if (rq.pid > 1 && kill(-rq.pid, rq.sig) != 0 && tracked(rq.pid, 0)) kill(rq.pid, rq.sig);
      } else if (rq.type == INIT_REQ_KILLALL) {
        kill(-1, rq.sig);   /* every process of the pid namespace but pid 1 */
      } else if (rq.type == INIT_REQ_HOSTNAME) {
        const char *name = buf + sizeof rq;
        size_t len = (size_t)n - sizeof rq;
        init_msg m;
        memset(&m, 0, sizeof m);
        m.type = INIT_MSG_HOSTNAME;
        if (len < 2 || len > 65 || name[len - 1] || memchr(name, 0, len - 1)) m.code = EINVAL;
        else if (sethostname(name, len - 1) != 0) m.code = errno;
        else hosts_entry(name);
        send_msg(&m, NULL, 0);
      }
    }
  }
}

#ifdef SBX_INIT_STANDALONE
/* The small, preferably static, sandboxd-init binary: execs in a fraction of a millisecond. */
int main(int argc, char **argv) { return sbx_init_main(argc, argv); }
#else
/* Fallback when no sandboxd-init binary sits next to sandboxd: sandboxd re-executes itself and
 * this runs before its main(). */
__attribute__((constructor)) static void init_entry(int argc, char **argv) {
  if (argc >= 1 && argv && argv[0] && strcmp(argv[0], SBX_INIT_ARGV0) == 0) _exit(sbx_init_main(argc, argv));
}
#endif
