/* init.c — a network pair's starter and pid 1 of every sandbox (init.h). The starter makes the
 * pair's namespaces and forks the init when sandboxd sends a sandbox's BOOT; the init builds the
 * root file system, then spawns commands for sandboxd and reports their exits; reaps every
 * orphan. Both run in a fresh image (sandboxd-init, or the sandboxd binary), single-threaded, so
 * plain libc is safe here. */
#include "init.h"
#include "fdpass.h"
#include "../core/include/moonbox_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <sched.h>
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
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
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
static bool g_cg_join;       /* join the cgroups sandboxd sends before READY (init_boot.cg_join) */
static bool g_host_root;     /* sandboxd runs as root (the starter was started by host root) */

static void send_msg(const init_msg *m, const int *fds, int nfds) {
  if (fdpass_send(g_ctl, m, sizeof *m, fds, nfds) != 0)
    _exit(1);   /* sandboxd is gone: dying takes the whole pid namespace with us */
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

/* What the BOOT request named (strings point into the request, which the init keeps). */
static const char *g_str[INIT_BOOT_NFIXED + 2 * INIT_MAX_MOUNTS];
static int g_idmap_fd[INIT_MAX_IDMAP], g_nidmap;
/* Volumes: each its directory (opened again by the init) and an absolute path inside. */
static int g_mount_fd[INIT_MAX_MOUNTS];
static const char *g_mount_path[INIT_MAX_MOUNTS];
static int g_nmounts;

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

/* Snapshot layers: the store's fd and the chain's ids, top first; none by default. */
static int g_layers_fd = -1;
static char g_layer_ids[INIT_MAX_LAYERS][24];
static int g_nlayers;

static void parse_layers(const char *ids) {
  for (const char *p = ids; *p;) {
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= sizeof g_layer_ids[0] || g_nlayers == INIT_MAX_LAYERS) fail_setup("malformed snapshot layer list");
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

/* The host name resolves (sudo and others look it up): /etc/hosts gets "127.0.1.1 <name>" unless
 * a line already names it. Best effort: a sandbox whose /etc/hosts is not a plain file keeps it. */
static void hosts_entry(const char *name) {
  int fd = open("/etc/hosts", O_RDWR | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return; }   /* a FIFO there would block the boot */
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

/* A layer's upper and work directories in the sandbox's directory, made by the init (root
 * inside: the sandbox's root owns them, as the directory they are in) unless sandboxd made them
 * ahead (its directory came from the pool): the directory is new either way. */
static void layer_dirs(int sbx_fd, const char *layer) {
  char name[48];
  for (int w = 0; w < 2; w++) {
    snprintf(name, sizeof name, "%s%s%s", w ? "work" : "upper", layer[0] ? "-" : "", layer);
    if (mkdirat(sbx_fd, name, 0755) != 0 && errno != EEXIST) fail_setup("mkdir %s: %s", name, strerror(errno));
  }
}

/* The system overlays (/usr, ...) are mounted by a helper process while we mount the root
 * overlay and /proc, /dev, /sys on it (each costs a few file-system round trips), then moved into
 * place. The helper stacks each on the host directory it covers, /<name> of the old root
 * (detached later with all of it): no mount point directory to create. Same mount namespace, so
 * its mounts are ours. sysdirs: "usr,lib" or "usr=<i>" (lower layer: idmapped tree i). */
static pid_t mount_system_overlays(int sbx_fd, char *sysdirs, char names[][16], int *n) {
  *n = 0;
  char *save = NULL;
  for (char *d = strtok_r(sysdirs, ",", &save); d && *n < INIT_MAX_IDMAP; d = strtok_r(NULL, ",", &save)) {
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
    layer_dirs(sbx_fd, d);
    if (eq) {
      /* An idmapped tree of the host directory: attach it over the directory, then stack the
       * overlay on it (the lower layer is looked up before the overlay covers it). */
      int i = parse_fd(eq + 1);
      if (i < 0 || i >= g_nidmap || syscall(SYS_move_mount, g_idmap_fd[i], "", AT_FDCWD, stage, MOVE_MOUNT_F_EMPTY_PATH) != 0)
        fail_setup("attach idmapped /%s: %s", d, strerror(errno));
    }
    mount_overlay(stage, stage, sbx_fd, d);
  }
  _exit(0);
}

/* v1: into the cgroups sandboxd made while we set up (init_boot.cg_join): before READY, so every
 * command is born inside. Without `wait`, only if they have come already (false if not). */
static bool join_cgroups(bool wait) {
  init_req rq;
  int fds[INIT_MAX_CG], nfds;
  bool trunc;
  ssize_t n = fdpass_recv(g_ctl, &rq, sizeof rq, wait ? 0 : MSG_DONTWAIT, fds, INIT_MAX_CG, &nfds, &trunc);
  if (n < 0 && !wait && errno == EAGAIN) return false;
  if (n <= 0) _exit(0);   /* sandboxd gave up on us */
  if (n != (ssize_t)sizeof rq || rq.type != INIT_REQ_CGROUPS || trunc)
    fail_setup("expected the sandbox's cgroups");
  for (int i = 0; i < nfds; i++) {
    if (write(fds[i], "0", 1) != 1) fail_setup("join the sandbox's cgroups: %s", strerror(errno));
    close(fds[i]);
  }
  g_cg_join = false;
  mark("cgroups joined");
  return true;
}

static void setup_root(int tpl_fd, int sbx_fd, char *sysdirs, const char *hostname) {
  char path[128], names[INIT_MAX_IDMAP][16];
  int nsys;
  CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make mounts private");
  /* tpl_fd is the template's parent: the root overlay is mounted over the template itself
   * (looked up as its lower layer first), in this mount namespace only. */
  snprintf(path, sizeof path, "/proc/self/fd/%d/root", tpl_fd);
  mark("private");
  pid_t helper = mount_system_overlays(sbx_fd, sysdirs, names, &nsys);
  if (helper < 0) fail_setup("fork: %s", strerror(errno));
  layer_dirs(sbx_fd, "");
  mount_overlay(path, path, sbx_fd, "");
  mark("root overlay");
  CHECK(chdir(path), "chdir to new root");   /* "root" is looked up normally: lands on the overlay */
  /* /etc/hosts gets its line (a copy-up: several file-system round trips) from a child chrooted
   * in the new root (so that no symlink a snapshot left there leads out of it), meanwhile;
   * unless a volume covers /etc: then after the volumes are mounted, as before. */
  bool etc_volume = false;
  for (int i = 0; i < g_nmounts; i++) etc_volume = etc_volume || !strcmp(g_mount_path[i], "/etc");
  pid_t hosts = -1;
  if (!etc_volume && (hosts = fork()) == 0) {
    if (chroot(".") != 0) _exit(1);
    hosts_entry(hostname);
    _exit(0);
  }
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
  if (g_cg_join) (void)join_cgroups(false);   /* they are likely there: while the helper still mounts */
  int status;
  while (waitpid(helper, &status, 0) < 0)
    if (errno != EINTR) fail_setup("wait: %s", strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) _exit(1);   /* the helper reported why */
  /* Our copies of the idmapped trees: once the overlays hold them, nothing else may. */
  for (int i = 0; i < g_nidmap; i++) close(g_idmap_fd[i]);
  g_nidmap = 0;
  for (int i = 0; i < nsys; i++) {
    char stage[160];
    snprintf(stage, sizeof stage, "/%s", names[i]);
    if (mount(stage, names[i], NULL, MS_MOVE, NULL) != 0) fail_setup("move /%s overlay: %s", names[i], strerror(errno));
  }
  mark("system overlays");
  mount_volumes();
  mark("volumes");
  CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root");
  CHECK(umount2(".", MNT_DETACH), "detach host root");
  CHECK(chdir("/"), "chdir /");
  mark("pivot");
  CHECK(sethostname(hostname, strlen(hostname)), "sethostname");
  if (hosts > 0) while (waitpid(hosts, NULL, 0) < 0 && errno == EINTR) {}
  else hosts_entry(hostname);
  if (g_clear_groups) CHECK(setgroups(0, NULL), "clear supplementary groups");
  mark("host name");
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

static long us_between(struct timespec a, struct timespec b) {
  return (long)((b.tv_sec - a.tv_sec) * 1000000 + (b.tv_nsec - a.tv_nsec) / 1000);
}

/* `got`: when the request arrived (SANDBOXD_TRACE_CREATE reads the times SPAWNED carries). */
static void do_spawn(const init_req *rq, const char *str, size_t slen, struct timespec got) {
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
  struct timespec forked, execd;
  clock_gettime(CLOCK_MONOTONIC, &forked);
  /* fork, not a vfork sharing our memory: the child makes its memory dumpable (it must, to
   * write its own oom_score_adj), which on ours would let root inside ptrace the init. */
  pid_t pid = fork();
  if (pid < 0) { spawn_reply(rq->seq, INIT_EINTERNAL, "fork: %s", strerror(errno)); goto out; }
  if (pid == 0) {
    struct child_err ce = {0, 0};
    /* Every disposition is the default already (the starter reset them: nothing sandboxd
     * ignores, SIGPIPE, reaches commands); only the init's mask is left. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
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
  clock_gettime(CLOCK_MONOTONIC, &execd);
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
  /* When it arrived (absolute: the same clock as sandboxd's), the µs until fork, until exec'd. */
  snprintf(m.text, sizeof m.text, "%lld.%09ld %ld %ld", (long long)got.tv_sec, got.tv_nsec, us_between(got, forked),
           us_between(forked, execd));
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


/* ---- the init ---- */

/* Forked by the starter: in the sandbox's user and network namespaces and new mount, pid, uts and
 * ipc ones, still with the host credentials it was started with. Never returns. */
static void init_run(int ctl) {
  g_ctl = ctl;
  mark(NULL);
  /* Opened again in this mount namespace (an overlay refuses layers whose mounts belong to
   * another one), while the host credentials that own the state directory still reach it. */
  int tpl_fd = open(g_str[INIT_BOOT_TEMPLATE], O_PATH | O_DIRECTORY | O_CLOEXEC);
  int sbx_fd = open(g_str[INIT_BOOT_DIR], O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (tpl_fd < 0 || sbx_fd < 0) fail_setup("open the layer directories: %s", strerror(errno));
  if (g_str[INIT_BOOT_LAYERS][0]) {
    if ((g_layers_fd = open(g_str[INIT_BOOT_LAYERS], O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
      fail_setup("open %s: %s", g_str[INIT_BOOT_LAYERS], strerror(errno));
    parse_layers(g_str[INIT_BOOT_LAYER_IDS]);
  }
  for (int i = 0; i < g_nmounts; i++)
    if ((g_mount_fd[i] = open(g_str[INIT_BOOT_NFIXED + 2 * i], O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
      fail_setup("volume mount %s: open its directory: %s", g_mount_path[i], strerror(errno));
  /* Root inside (host SBX_UID_BASE) from here: the sandbox's root owns what the init makes. */
  if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) fail_setup("become root inside: %s", strerror(errno));
  if (g_host_root) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);   /* see starter(); the new ids reset it anyway */
  /* Only SIGCHLD, read through a signalfd. */
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_SETMASK, &chld, NULL);
  char sysdirs[512];
  snprintf(sysdirs, sizeof sysdirs, "%s", g_str[INIT_BOOT_SYSDIRS]);
  setup_root(tpl_fd, sbx_fd, sysdirs, g_str[INIT_BOOT_HOSTNAME]);
  if (g_cg_join) (void)join_cgroups(true);
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
      struct timespec got;
      clock_gettime(CLOCK_MONOTONIC, &got);
      ssize_t n = recv(g_ctl, buf, cap, MSG_TRUNC);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(0);   /* sandboxd closed the channel: the sandbox ends with us */
      if ((size_t)n > cap || (size_t)n < sizeof(init_req)) continue;
      init_req rq;
      memcpy(&rq, buf, sizeof rq);
      if (rq.type == INIT_REQ_SPAWN) {
        do_spawn(&rq, buf + sizeof rq, (size_t)n - sizeof rq, got);
        reap();   /* a child that already exited: report after its SPAWNED */
      } else if (rq.type == INIT_REQ_KILL) {
        /* The whole process group (each command is a session leader): killing only
         * `bash -c "sleep 9; true"` would leave sleep holding the output pipe open. */
        if (rq.pid > 1 && kill(-rq.pid, rq.sig) != 0 && tracked(rq.pid, 0)) kill(rq.pid, rq.sig);
      } else if (rq.type == INIT_REQ_KILLALL) {
        kill(-1, rq.sig);   /* every process of the pid namespace but pid 1 */
      }
    }
  }
}

/* ---- the starter ---- */

static int loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  int rc = s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0 ? -1 : 0;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (rc == 0) rc = ioctl(s, SIOCSIFFLAGS, &ifr);
  int e = errno;
  if (s >= 0) close(s);
  errno = e;
  return rc;
}

static void starter_reply(int st, uint32_t type, int32_t pid, int code, int status) {
  init_msg m;
  memset(&m, 0, sizeof m);
  m.type = type;
  m.pid = pid;
  m.code = code;
  m.status = status;
  while (send(st, &m, sizeof m, MSG_NOSIGNAL) < 0)
    if (errno != EINTR) _exit(1);
}

/* The BOOT request: its header, strings and descriptors checked and taken into g_*; fds[0] is
 * the init's channel, then the cgroup descriptors, then the idmapped trees. 0 or an errno. */
static int take_boot(char *buf, size_t n, const int *fds, int nfds, init_boot *h) {
  if (n < sizeof *h) return EINVAL;
  memcpy(h, buf, sizeof *h);
  if (h->type != INIT_REQ_BOOT || h->ncg > INIT_MAX_CG || h->nidmap > INIT_MAX_IDMAP || nfds != 1 + (int)(h->ncg + h->nidmap) ||
      h->nstrings < INIT_BOOT_NFIXED || h->nstrings > INIT_BOOT_NFIXED + 2 * INIT_MAX_MOUNTS || (h->nstrings - INIT_BOOT_NFIXED) % 2)
    return EINVAL;
  size_t off = sizeof *h;
  for (uint32_t i = 0; i < h->nstrings; i++) {
    const char *end = off < n ? memchr(buf + off, 0, n - off) : NULL;
    if (!end) return EINVAL;
    g_str[i] = buf + off;
    off = (size_t)(end - buf) + 1;
  }
  g_nmounts = (int)(h->nstrings - INIT_BOOT_NFIXED) / 2;
  for (int i = 0; i < g_nmounts; i++)
    if ((g_mount_path[i] = g_str[INIT_BOOT_NFIXED + 2 * i + 1])[0] != '/') return EINVAL;
  g_nidmap = (int)h->nidmap;
  for (int i = 0; i < g_nidmap; i++) g_idmap_fd[i] = fds[1 + h->ncg + i];
  g_clear_groups = g_str[INIT_BOOT_GROUPS][0] == 'c';
  g_cg_join = h->cg_join != 0;
  return 0;
}

/* Makes the pair's namespaces, then waits for one sandbox's BOOT, forks its init, and exits. */
static void starter(int st) {
  /* Nothing of sandboxd's but the socket; never its stdio (the sandbox must not write to the
   * host's terminal or log), nor its signal state (an ignored SIGPIPE would reach commands). */
  if (st > 3) syscall(SYS_close_range, 3, (unsigned)st - 1, 0);
  syscall(SYS_close_range, (unsigned)st + 1, ~0U, 0);
  int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (nul >= 0) { dup2(nul, 0); dup2(nul, 1); dup2(nul, 2); if (nul > 2) close(nul); }
  mb_default_signals();
  prctl(PR_SET_NAME, "sandboxd-init", 0, 0, 0);   /* what `ps` shows as pid 1 inside */
  /* As root, nobody inside may ptrace the init: its memory belongs to the host's user namespace,
   * where this image was started, and it is not dumpable (executing the unreadable image, see
   * sandbox.c init_exe_fd, made it so; kept so below). A tracer that stops pid 1 would stop every
   * command. Rootless, sandboxd itself (the same user, no privilege) must reach the init's /proc
   * files: it stays dumpable, inside the sandbox's trust boundary. */
  g_host_root = geteuid() == 0;
  int code = 0;
  /* The user and network namespaces, and already those of the init to come that hold nothing of
   * the host: its uts and ipc namespaces, and the pid namespace its first child (the init) is pid
   * 1 of. Its mount namespace is made when it is forked (a copy of the host's mounts taken then,
   * none kept alive meanwhile). */
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0 || unshare(CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID) != 0 ||
      loopback_up() != 0)
    code = errno;
  starter_reply(st, INIT_MSG_UNSHARED, 0, code, 0);
  if (code) _exit(1);
  /* sandboxd writes the id maps and links the network namespace; later (when a sandbox needs the
   * pair) the BOOT request comes. */
  size_t cap = sizeof(init_boot) + INIT_REQ_MAX;
  char *buf = malloc(cap);
  if (!buf) _exit(1);
  int fds[1 + INIT_MAX_CG + INIT_MAX_IDMAP], nfds;
  bool trunc;
  ssize_t n;
  uint32_t type;
  /* v1, a stocked pair: its cgroups first (a CGROUPS request), so that the init is born in them
   * as on v2. The starter moves itself (thread-only: none of the global locks a move of another
   * process takes) while no client waits. Then the BOOT. */
  for (;;) {
    n = fdpass_recv(st, buf, cap, 0, fds, (int)(sizeof fds / sizeof fds[0]), &nfds, &trunc);
    if (n <= 0) _exit(0);   /* sandboxd let the pair go */
    if ((size_t)n < sizeof type) break;
    memcpy(&type, buf, sizeof type);
    if (type != INIT_REQ_CGROUPS) break;
    code = trunc || n != (ssize_t)sizeof(init_req) ? EINVAL : 0;
    for (int i = 0; i < nfds; i++) {
      if (!code && write(fds[i], "0", 1) != 1) code = errno;
      close(fds[i]);
    }
    starter_reply(st, INIT_MSG_JOINED, 0, code, 0);
  }
  init_boot h;
  code = trunc ? EINVAL : take_boot(buf, (size_t)n, fds, nfds, &h);
  /* v2: clone3 puts the init into its cgroup (v1: it joins them itself, init_boot.cg_join). */
  long pid = -1;
  int late = 0;
  const uint64_t flags = CLONE_PARENT | CLONE_NEWNS;
  if (!code && h.cg_v2 && h.ncg == 1) {
    struct { uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup; } a;
    memset(&a, 0, sizeof a);
    a.flags = flags | CLONE_INTO_CGROUP;
    a.exit_signal = SIGCHLD;
    a.cgroup = (uint64_t)fds[1];
    pid = syscall(SYS_clone3, &a, sizeof a);
    if (pid < 0 && (errno == ENOSYS || errno == E2BIG || errno == EINVAL)) late = 1;   /* < 5.7: sandboxd moves it */
    else if (pid < 0) code = errno;
  }
  if (!code && pid < 0) pid = syscall(SYS_clone, (unsigned long)flags | SIGCHLD, 0, 0, 0, 0);
  if (!code && pid < 0) code = errno;
  if (pid == 0) {
    close(st);
    for (uint32_t i = 0; i < h.ncg; i++) close(fds[1 + i]);
    init_run(fds[0]);
  }
  starter_reply(st, INIT_MSG_BOOTED, code ? 0 : (int32_t)pid, code, late);
  _exit(0);
}

/* argv: SBX_INIT_ARGV0 <starter socket>. */
int sbx_init_main(int argc, char **argv) {
  int st = argc == 2 ? parse_fd(argv[1]) : -1;
  if (st < 3) return 2;
  starter(st);
  return 1;
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
