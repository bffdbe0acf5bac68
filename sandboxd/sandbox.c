/* sandbox.c — create/destroy one sandbox: namespaces, id maps, cgroups, the init, the layers;
 * pause/resume, capture; what the warm pool (pool.c) boots and hands out. */
#include "sandbox.h"
#include "clocks.h"
#include "errbuf.h"
#include "procfile.h"

#include "cgroups.h"
#include "init.h"
#include "layers.h"
#include "egress.h"
#include "egress_trust.h"
#include "fdpass.h"
#include "net.h"
#include "pidfile.h"
#include "pool.h"
#include "ptab.h"
#include "sbxlog.h"
#include "template.h"
#include "users.h"
#include "volumes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#define SBX_UID_BASE 100000u
#define SBX_UID_COUNT 65536u
#define SBX_READY_TIMEOUT_MS 30000   /* safety net only: setup normally takes milliseconds */
struct sbx {
  char id[65];
  char workdir[SBX_WORKDIR_MAX];   /* its commands' working directory when they name none ("": home) */
  bool trusts_egress_ca;       /* its egress CA is in its trust stores (egress_trust.h) */
  char dir[4096];              /* <state_dir>/sandboxes/<id> */
  cg_set cg;                   /* its cgroups (cgroups.h) */
  pid_t init_pid;              /* host pid of the sandbox's pid 1 */
  int root_fd;
  bool privileged;             /* full 65536-id range (sandboxd runs as root) */
  uid_t uid0;                  /* host uid of inner root when !privileged */
  gid_t gid0;
  bool killed;
  bool internet;
  net_pair *net;               /* its user and network namespaces (and pasta) */
  int ctl;                     /* channel to the init until the process table owns it (then -1) */
  pthread_mutex_t mu;
  ptab *pt;
  layer *layer;                /* the snapshot layer it started from (held), or NULL */
  sbx_mount mounts[SBX_MAX_MOUNTS];   /* its volumes (held) and where (paths copied) */
  size_t nmounts;
  mx_ring mx;                  /* its metric samples (metrics.h) */
  sbxlog *log;                 /* what happened to it and in it (sbxlog.h) */
  uint64_t oom_seen;           /* OOM kills already logged */
  int nsys;                    /* its system overlays (upper-<d>), as the template had them */
  char sys[TPL_MAX_SYSDIRS][16];
};

/* Path formatting; state_dir is bounded at create, so truncation means a bug: fail closed. */
__attribute__((format(printf, 3, 4))) static int xfmt(char *buf, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, cap, f, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap) { buf[0] = 0; return -1; }
  return 0;
}

/* SANDBOXD_TRACE_CREATE: sandboxd's own steps of a create, as "name us" pairs. */
typedef struct { char text[800]; struct timespec last; } step_trace;
static void step(step_trace *t, const char *what) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  size_t n = strlen(t->text);
  if (what && n < sizeof t->text - 1)
    snprintf(t->text + n, sizeof t->text - n, "%s%s %ldus", n ? ", " : "", what,
             (long)((now.tv_sec - t->last.tv_sec) * 1000000 + (now.tv_nsec - t->last.tv_nsec) / 1000));
  t->last = now;
}


static uid_t map_uid(bool priv, uid_t uid0, uid_t inner) {
  if (priv) return inner < SBX_UID_COUNT ? SBX_UID_BASE + inner : (uid_t)-1;
  return inner == 0 ? uid0 : (uid_t)-1;
}
uid_t sbx_host_uid(const sbx_t *s, uid_t inner) { return map_uid(s->privileged, s->uid0, inner); }
gid_t sbx_host_gid(const sbx_t *s, gid_t inner) { return (gid_t)map_uid(s->privileged, (uid_t)s->gid0, (uid_t)inner); }
int sbx_root_fd(sbx_t *s) { return s->root_fd; }
int sbx_socket(sbx_t *s, int domain, int type) {
  if (!s->net) { errno = ENETUNREACH; return -1; }
  return net_pair_socket(s->net, domain, type);
}
void sbx_id_range(uid_t *uid_base, gid_t *gid_base, uint32_t *count) {
  bool priv = geteuid() == 0;
  *uid_base = priv ? SBX_UID_BASE : geteuid();
  *gid_base = priv ? SBX_UID_BASE : getegid();
  *count = priv ? SBX_UID_COUNT : 1;
}

/* How a sandbox's user namespace maps ids: the 65536-id range as root, else sandboxd's own id. */
static void idmap_here(net_idmap *m) {
  memset(m, 0, sizeof *m);
  if (geteuid() == 0) {
    snprintf(m->uid_map, sizeof m->uid_map, "0 %u %u\n", SBX_UID_BASE, SBX_UID_COUNT);
    snprintf(m->gid_map, sizeof m->gid_map, "0 %u %u\n", SBX_UID_BASE, SBX_UID_COUNT);
  } else {
    snprintf(m->uid_map, sizeof m->uid_map, "0 %u 1\n", (unsigned)geteuid());
    snprintf(m->gid_map, sizeof m->gid_map, "0 %u 1\n", (unsigned)getegid());
    m->deny_setgroups = true;
  }
}
ptab *sbx_ptab(sbx_t *s) { return s->pt; }

int sbx_fs_ctx(sbx_t *s, const char *user, fs_ctx *c) {
  memset(c, 0, sizeof *c);
  c->root = s->root_fd;
  c->user = user;
  if (users_lookup(user, &c->uid, &c->gid, &c->home) != 0) return -1;
  c->host_uid = sbx_host_uid(s, c->uid);
  c->host_gid = sbx_host_gid(s, c->gid);
  c->host_root_uid = sbx_host_uid(s, 0);
  c->host_user_uid = sbx_host_uid(s, 1000);
  c->host_root_gid = sbx_host_gid(s, 0);
  c->host_user_gid = sbx_host_gid(s, 1000);
  return 0;
}

/* Every sandbox's limits (sbx_init). */
static cg_limits g_lim = {SBX_DEFAULT_PIDS_MAX, SBX_DEFAULT_MEMORY_MB, SBX_DEFAULT_CPU_COUNT};
/* What a spare or a stocked kit's cgroups have already (field by field: padding is no value). */
static bool default_limits(const cg_limits *l) {
  return l->pids_max == g_lim.pids_max && l->memory_mb == g_lim.memory_mb && l->cpu_count == g_lim.cpu_count;
}
/* A sandbox's limits: its config's, the defaults where it gives none. */
static cg_limits limits_of(const sbx_config *cfg) {
  return (cg_limits){cfg->pids_max > 0 ? cfg->pids_max : g_lim.pids_max, cfg->memory_mb > 0 ? cfg->memory_mb : g_lim.memory_mb,
                     cfg->cpu_count > 0 ? cfg->cpu_count : g_lim.cpu_count};
}
/* A claimed spare or a stocked kit's cgroups have the default limits: only other ones are written. */
static int write_limits(sbx_t *s, const sbx_config *cfg, char *err, size_t errlen) {
  cg_limits lim = limits_of(cfg);
  return default_limits(&lim) ? 0 : cg_set_limits(&s->cg, &lim, err, errlen);
}

static int host_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int (*g_new_id)(char *out, size_t cap);   /* sbx_defaults.new_id: names spares */

int sbx_init(const char *state_dir, const sbx_defaults *d, char *err, size_t errlen) {
  g_new_id = d->new_id;
  if (d->pids_max > 0) g_lim.pids_max = d->pids_max;
  if (d->memory_mb > 0) g_lim.memory_mb = d->memory_mb;
  g_lim.cpu_count = d->cpu_count > 0 ? d->cpu_count : SBX_DEFAULT_CPU_COUNT;
  if (g_lim.cpu_count > host_cpus()) g_lim.cpu_count = host_cpus();   /* a larger quota would limit nothing */
  return cg_init(state_dir, d->cgroup, err, errlen);
}

void sbx_limits(int *cpu_count, long *memory_mb) {
  cg_caps cc;
  char why[8] = "", desc[8];
  cg_probe(&cc, why, 0, desc, 0);
  struct sysinfo si;
  long host_mb = sysinfo(&si) == 0 ? (long)((uint64_t)si.totalram * si.mem_unit >> 20) : 0;
  *cpu_count = cc.cpu ? g_lim.cpu_count : host_cpus();
  *memory_mb = cc.memory && (!host_mb || g_lim.memory_mb < host_mb) ? g_lim.memory_mb : host_mb;
}

void sbx_probe_host(sbx_host_caps *caps) {
  memset(caps, 0, sizeof *caps);
  size_t off = 0;
#define WHY(...) do { if (off < sizeof caps->why) off += (size_t)snprintf(caps->why + off, sizeof caps->why - off, __VA_ARGS__); } while (0)
  static const int flags[2] = {CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC, CLONE_NEWUSER | CLONE_NEWNET};
  int errs[2];
  for (int i = 0; i < 2; i++) {
    long pid = syscall(SYS_clone, (unsigned long)flags[i] | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) syscall(SYS_exit_group, 0);
    errs[i] = pid < 0 ? errno : 0;
    if (pid > 0) while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  caps->userns = caps->pidns = errs[0] == 0;
  if (errs[0]) WHY("user/mount/pid/uts/ipc namespaces: %s (kernel.unprivileged_userns_clone or user.max_user_namespaces?); ", strerror(errs[0]));
  caps->netns = errs[1] == 0;
  if (errs[1]) WHY("network namespace (every sandbox needs its own): %s; ", strerror(errs[1]));
  char nwhy[512];
  caps->internet = net_available(nwhy, sizeof nwhy);
  if (!caps->internet) WHY("internet access: %s (sandboxes need allow_internet_access: false); ", nwhy);
  caps->net_guard = net_guarded();
  if (caps->internet && !caps->net_guard)
    WHY("not root: pasta runs as you, egress rules (network.allowOut/denyOut) are unavailable, and nothing keeps "
        "sandboxes with internet access from the host's non-loopback addresses; ");
  char fs[8192] = "";
  caps->overlay = procfile_read("/proc/filesystems", fs, sizeof fs) == 0 && strstr(fs, "\toverlay\n");
  if (!caps->overlay) WHY("overlay file system not available; ");
  cg_caps cc;
  cg_probe(&cc, caps->why, sizeof caps->why, caps->cgroups, sizeof caps->cgroups);
  off = strlen(caps->why);
  caps->cgroup_pids = cc.pids;
  caps->cgroup_memory = cc.memory;
  caps->cgroup_cpu = cc.cpu;
  caps->freezer = cc.freezer;
  if (geteuid() != 0) WHY("not root: a single id is mapped, so commands for 'user' run as root inside (= your uid outside); ");
#undef WHY
}

int sbx_pause(sbx_t *s) {
  if (cg_can_freeze(&s->cg)) return cg_freeze(&s->cg, true);
  return ptab_killall(s->pt, SIGSTOP);
}

int sbx_resume(sbx_t *s) {
  if (cg_can_freeze(&s->cg)) return cg_freeze(&s->cg, false);
  return ptab_killall(s->pt, SIGCONT);
}

static void sbx_kill_init(sbx_t *s) {
  pthread_mutex_lock(&s->mu);
  if (!s->killed && s->init_pid > 0) {
    kill(s->init_pid, SIGKILL);
    cg_kill_all(&s->cg);   /* v2: every task at once; v1: thawed, as frozen tasks only die once thawed */
    while (waitpid(s->init_pid, NULL, 0) < 0 && errno == EINTR) {}
    s->killed = true;   /* the kernel has reaped the whole pid namespace before init is reaped */
  }
  pthread_mutex_unlock(&s->mu);
}

/* The init image, which every network pair's starter (init.h) runs: sandboxd-init next to the
 * sandboxd binary when it exists (tiny, static: fast to start and to fork, and no library
 * constructors running inside the sandbox), else sandboxd itself.
 *
 * It is copied once into a sealed memfd of mode 0111 that sandbox root may execute but not read.
 * Executing an unreadable image marks the process non-dumpable from its first instruction (fs/exec.c
 * would_dump); its memory belongs to the host's user namespace, where it was started, and the
 * init keeps it non-dumpable, so root inside cannot ptrace pid 1, open /proc/1/mem or
 * /proc/1/fd: an attach that stops the init would wedge the whole sandbox. */
static pthread_mutex_t image_mu = PTHREAD_MUTEX_INITIALIZER;
static int image_fd = -2;      /* -2 not made yet, -1 unavailable (the file is used as it is) */

static int init_file_fd(void) {
  char self[4096], path[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = 0;
      if (xfmt(path, sizeof path, "%s/sandboxd-init", self) == 0 && access(path, X_OK) == 0) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) return fd;
      }
    }
  }
  return open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
}

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
static int make_image(void) {
  char mode[8] = "0";
  (void)procfile_read("/proc/sys/vm/memfd_noexec", mode, sizeof mode);
  if (mode[0] == '2') return -1;           /* the host forbids executable memfds */
  int src = init_file_fd();
  if (src < 0) return -1;
  int fd = (int)syscall(SYS_memfd_create, "sandboxd-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) fd = (int)syscall(SYS_memfd_create, "sandboxd-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  struct stat st;
  bool ok = fd >= 0 && fstat(src, &st) == 0;
  for (off_t done = 0; ok && done < st.st_size;) {
    ssize_t k = sendfile(fd, src, NULL, (size_t)(st.st_size - done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) ok = false;
    else done += k;
  }
  ok = ok && fchmod(fd, 0111) == 0 &&
       fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0;
  close(src);
  if (!ok) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

static int init_exe_fd(void) {
  pthread_mutex_lock(&image_mu);
  if (image_fd == -2) {
    image_fd = geteuid() == 0 ? make_image() : -1;   /* rootless: the owner may read it anyway */
    if (image_fd < 0 && geteuid() == 0)
      fprintf(stderr, "sandboxd: cannot make an unreadable init image (memfd): the init's image is read from its file\n");
  }
  int fd = image_fd >= 0 ? fcntl(image_fd, F_DUPFD_CLOEXEC, 3) : -1;
  pthread_mutex_unlock(&image_mu);
  return fd >= 0 ? fd : init_file_fd();
}

/* ---- idmapped lower layers ----
 * Host /usr seen through an idmapped mount (host 0 → 100000, i.e. root inside), so that sandbox
 * root owns the system files it sees and may change them (copy-up into its own upper layer).
 * Without it they show as nobody and are read-only even for sandbox root. Root mode only. */
static pthread_mutex_t idmap_mu = PTHREAD_MUTEX_INITIALIZER;
static int idmap_userns = -2;   /* -2 not tried, -1 unavailable */

static int idmap_userns_fd(void) {
  pthread_mutex_lock(&idmap_mu);
  if (idmap_userns == -2) {
    idmap_userns = -1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
      /* A throwaway process gives us a user namespace with the sandbox mapping. */
      long pid = syscall(SYS_clone, (unsigned long)CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
      if (pid == 0) {
        char c;
        syscall(SYS_read, p[0], &c, 1);
        syscall(SYS_exit_group, 0);
      }
      if (pid > 0) {
        char path[64], map[64];
        snprintf(map, sizeof map, "0 %u %u\n", SBX_UID_BASE, SBX_UID_COUNT);
        snprintf(path, sizeof path, "/proc/%ld/uid_map", pid);
        int ok = procfile_write(path, map) == 0;
        snprintf(path, sizeof path, "/proc/%ld/gid_map", pid);
        ok = ok && procfile_write(path, map) == 0;
        snprintf(path, sizeof path, "/proc/%ld/ns/user", pid);
        if (ok) idmap_userns = open(path, O_RDONLY | O_CLOEXEC);
        if (idmap_userns < 0) idmap_userns = -1;
        if (write(p[1], "x", 1) < 0) kill((pid_t)pid, SIGKILL);
        while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR) {}
      }
      close(p[0]);
      close(p[1]);
    }
  }
  int fd = idmap_userns;
  pthread_mutex_unlock(&idmap_mu);
  return fd;
}

/* A detached, idmapped clone of host /<name>, or -1 (then the plain host directory is used). */
static int idmapped_tree(const char *name) {
  int ns = idmap_userns_fd();
  if (ns < 0) return -1;
  char path[64];
  snprintf(path, sizeof path, "/%s", name);
  int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (fd < 0) return -1;
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  /* Read-only: this view maps host root to sandbox root, so it must never be writable itself. */
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = (uint64_t)ns;
  if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) { close(fd); return -1; }
  return fd;
}

/* ---- layers ---- */
static int mkdir_owned(const char *p, mode_t mode, uid_t u, gid_t g) {
  if (mkdir(p, mode) != 0) return -1;
  if (chown(p, u, g) != 0 && errno != EPERM) return -1;
  return 0;
}

/* The directories of a sandbox's layers, all the sandbox root's, made ahead (what the init makes
 * otherwise): <dir> (0700) and in it upper, work, and upper-<d>, work-<d> per system directory.
 * 0, or -1 with err. */
static int layer_dirs(const char *dir, const tpl_info *tpl, uid_t ru, gid_t rg, char *err, size_t errlen) {
  if (mkdir_owned(dir, 0700, ru, rg) != 0) { seterr(err, errlen, "mkdir %s: %s", dir, strerror(errno)); return -1; }
  char p[4200];
  for (int i = -1; i < tpl->nsys; i++)
    for (int w = 0; w < 2; w++) {
      if (xfmt(p, sizeof p, "%s/%s%s%s", dir, w ? "work" : "upper", i < 0 ? "" : "-", i < 0 ? "" : tpl->sys[i]) != 0 ||
          mkdir_owned(p, 0755, ru, rg) != 0) {
        seterr(err, errlen, "mkdir %s: %s", p, strerror(errno ? errno : ENAMETOOLONG));
        return -1;
      }
    }
  return 0;
}

/* What the pool keeps for sandboxes that find no spare (pool.h "pairs"): a network pair, linked,
 * a layer directory made ahead, <state>/sandboxes/k<n>, which a sandbox renames to its id
 * (one rename instead of five mkdirs and chowns while the client waits), and on v1 its cgroups
 * k<n>, with the default limits, which the pair's starter has joined already: the init is born
 * in them (no cgroups to make, no move of a running init, while the client waits). */
typedef struct {
  net_pair *net;
  char dir[4096];               /* "" when it could not be made */
  cg_set cg;
  bool has_cg;
} kit;

bool sbx_valid_id(const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n == 0 || n > 64) return false;
  for (size_t i = 0; i < n; i++)
    if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '0' && id[i] <= '9'))) return false;
  return true;
}

/* A BOOT request (init.h) being built: room for the header, then the strings. */
typedef struct { char *p; size_t len, cap; uint32_t n; bool over; } boot_buf;
static void boot_add(boot_buf *b, const char *str) {
  size_t k = strlen(str) + 1;
  if (b->over || b->len + k > sizeof(init_boot) + INIT_REQ_MAX) { b->over = true; return; }
  if (b->len + k > b->cap) {
    size_t nc = (b->len + k) * 2;
    char *np = realloc(b->p, nc);
    if (!np) { b->over = true; return; }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, str, k);
  b->len += k;
  b->n++;
}
static void boot_begin(boot_buf *b) {
  b->len = sizeof(init_boot);
  b->cap = 8192;
  b->p = calloc(1, b->cap);
  b->over = !b->p;
}

/* Layers, cgroups, namespaces, init up and READY with its host name; the channel stays in s->ctl
 * (no process table yet). cfg is validated by the caller. */
static int create_booted(const sbx_config *cfg, sbx_t **out, char *err, size_t errlen, step_trace *trace) {
  step_trace *tr = trace;
  *out = NULL;
  sbx_t *s = calloc(1, sizeof *s);
  if (!s) { seterr(err, errlen, "out of memory"); return -1; }
  pthread_mutex_init(&s->mu, NULL);
  mx_init(&s->mx);
  if (!(s->log = sbxlog_new())) { pthread_mutex_destroy(&s->mu); free(s); seterr(err, errlen, "out of memory"); return -1; }
  s->cg.fd = -1;
  snprintf(s->id, sizeof s->id, "%s", cfg->id);
  s->internet = cfg->internet;
  s->ctl = -1;
  s->root_fd = -1;
  s->privileged = geteuid() == 0;
  s->uid0 = geteuid();
  s->gid0 = getegid();
  uid_t ru = sbx_host_uid(s, 0), uu = sbx_host_uid(s, 1000);
  gid_t rg = sbx_host_gid(s, 0), ug = sbx_host_gid(s, 1000);
  if (uu == (uid_t)-1) { uu = ru; ug = rg; }
  /* fds: the init's channel, the cgroup descriptors, the idmapped trees (init.h BOOT). */
  int sv[2] = {-1, -1}, fds[1 + INIT_MAX_CG + INIT_MAX_IDMAP], ncg = 0, nidfds = 0;
  pid_t pid = 0;
  boot_buf b = {0};
  bool dir_made = false;
  tpl_info tpl;
  if (tpl_ensure(cfg->state_dir, ru, rg, uu, ug, NET_DNS_FORWARDER, &tpl, err, errlen) != 0) goto fail;
  /* On a base image (fromImage): the bare template below its layers, no host system directory. */
  bool bare = cfg->layer && ly_image_based(cfg->layer);
  s->nsys = bare ? 0 : tpl.nsys;
  memcpy(s->sys, tpl.sys, sizeof s->sys);
  if (cfg->layer) { ly_hold(cfg->layer); s->layer = cfg->layer; }
  if (cfg->nmounts > SBX_MAX_MOUNTS) { seterr(err, errlen, "more than %d volume mounts", SBX_MAX_MOUNTS); goto fail; }
  /* Volume mounts, shallowest first (a mount inside another is made after it). */
  for (size_t i = 0; i < cfg->nmounts; i++) {
    char *p = strdup(cfg->mounts[i].path);
    if (!p) { seterr(err, errlen, "out of memory"); goto fail; }
    vol_mount_hold(cfg->mounts[i].volume);
    size_t at = s->nmounts++;
    while (at > 0 && strlen(s->mounts[at - 1].path) > strlen(p)) { s->mounts[at] = s->mounts[at - 1]; at--; }
    s->mounts[at] = (sbx_mount){cfg->mounts[i].volume, p};
  }
  step(tr, "tpl");

  /* Its user and network namespaces and its layer directory: a pair from the pool (linked
   * already, the directory made) or made now. */
  bool link = net_wants_link(cfg->internet);
  kit *k = link ? pool_take_pair(cfg->state_dir) : NULL;
  bool stocked_cg = k && k->has_cg;   /* v1: the starter is in them; the init will be born there */
  if (k) {
    s->net = k->net;
    if (stocked_cg) s->cg = k->cg;
    step(tr, "pair (pool)");
  }
  char p[4200];
  xfmt(p, sizeof p, "%s/sandboxes", cfg->state_dir);
  xfmt(s->dir, sizeof s->dir, "%s/%s", p, s->id);
  /* Owned by the sandbox's root, as what is in it: the init resolves its layers from there with
   * its own credentials. */
  if (k && k->dir[0] && rename(k->dir, s->dir) == 0) {
    dir_made = true;
    step(tr, "dir (pool)");
  } else {
    /* The init makes what goes in it (upper, work, upper-<d>, work-<d>): as the sandbox's root,
     * without a chown each, and while its helper makes the others. */
    if (k && k->dir[0]) (void)tpl_rm_tree(k->dir);
    int drc = mkdir_owned(s->dir, 0700, ru, rg);
    if (drc != 0 && errno == ENOENT && (mkdir(p, 0711) == 0 || errno == EEXIST)) drc = mkdir_owned(s->dir, 0700, ru, rg);
    if (drc != 0) {
      seterr(err, errlen, "mkdir %s: %s", s->dir, strerror(errno));
      free(k);
      goto fail;
    }
    dir_made = true;
    step(tr, "dir");
  }
  free(k);
  /* "usr" (lower = host /usr) or "usr=<i>" (lower = idmapped tree i of the BOOT request). */
  char sysdirs[TPL_MAX_SYSDIRS * 32 + 1] = "";
  int idfds[TPL_MAX_SYSDIRS];
  for (int i = 0; i < s->nsys; i++) {
    int ifd = s->privileged && nidfds < INIT_MAX_IDMAP ? idmapped_tree(tpl.sys[i]) : -1;
    char one[48];
    if (ifd >= 0) { snprintf(one, sizeof one, "%s%s=%d", i ? "," : "", tpl.sys[i], nidfds); idfds[nidfds++] = ifd; }
    else snprintf(one, sizeof one, "%s%s", i ? "," : "", tpl.sys[i]);
    strcat(sysdirs, one);
  }
  step(tr, "idmap");
  cg_limits lim = limits_of(cfg);
  /* v2: the init is born in its cgroup, made now; v1: made while the init sets itself up, which
   * then joins it (cgroups.h). */
  cg_entry cge = cg_entry_mode();
  if (stocked_cg) {
    /* Named by the sandbox's id as any other's (a rename that fails leaves the kit's name: the
     * set still works). */
    char why[600];
    if (cg_rename(&s->cg, s->id, why, sizeof why) != 0) fprintf(stderr, "sandboxd: sandbox %s: %s\n", s->id, why);
    if (write_limits(s, cfg, err, errlen) != 0) goto fail;
    cge = CG_NONE;   /* nothing more to make or join */
    step(tr, "cgroups (pool)");
  } else if (cge == CG_BORN) {
    if (cg_create(&s->cg, cfg->state_dir, s->id, &lim, err, errlen) != 0) goto fail;
    if ((ncg = cg_boot_fds(&s->cg, fds + 1, INIT_MAX_CG, err, errlen)) < 0) { ncg = 0; goto fail; }
    step(tr, "cgroups");
  }

  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    seterr(err, errlen, "socketpair: %s", strerror(errno));
    goto fail;
  }
  /* Spawn requests carry argv+env in one packet: raise the limit where we may. */
  for (int i = 0; i < 2; i++) {
    int sz = (int)(2 * INIT_REQ_MAX + 65536);
    if (setsockopt(sv[i], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) != 0)
      (void)setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  }
  fds[0] = sv[1];
  /* The template's parent: the init reaches the template as "<dir>/root", a name it can mount on. */
  char tpl_parent[4096];
  snprintf(tpl_parent, sizeof tpl_parent, "%s", bare ? tpl.bare : tpl.root);
  char *tslash = strrchr(tpl_parent, '/');
  if (!tslash || strcmp(tslash, "/root") != 0) { seterr(err, errlen, "unexpected template path %s", tpl_parent); goto fail; }
  *tslash = 0;
  /* Snapshot layers: the store and the chain's ids, top first, each checked to hold every tree. */
  char layer_ids[LY_MAX_DEPTH * (LY_ID_LEN + 1) + 1] = "";
  const char *lay_dir = cfg->layer ? ly_dir() : "";
  if (cfg->layer) {
    int lay_fd = open(lay_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (lay_fd < 0) { seterr(err, errlen, "open %s: %s", lay_dir, strerror(errno)); goto fail; }
    size_t n = 0;
    for (layer *l = cfg->layer; l; l = ly_parent(l)) {
      for (int i = -1; i < s->nsys; i++) {
        char tree[LY_ID_LEN + 32];
        struct stat st;
        snprintf(tree, sizeof tree, "%s/%s", ly_id(l), i < 0 ? "root" : tpl.sys[i]);
        errno = 0;
        if (fstatat(lay_fd, tree, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
          seterr(err, errlen, "snapshot layer %s has no /%s tree (taken where the host had other system directories?): %s",
                 ly_id(l), i < 0 ? "" : tpl.sys[i], strerror(errno ? errno : ENOTDIR));
          close(lay_fd);
          goto fail;
        }
      }
      n += (size_t)snprintf(layer_ids + n, sizeof layer_ids - n, "%s%s", l == cfg->layer ? "" : ",", ly_id(l));
    }
    close(lay_fd);
  }
  /* The BOOT request. Nothing in it reaches the init's command line: a spare looks exactly like
   * a sandbox booted on demand. */
  init_boot h = {INIT_REQ_BOOT, 0, (uint32_t)ncg, cge == CG_BORN, (uint32_t)nidfds, cge == CG_JOINS};
  boot_begin(&b);
  boot_add(&b, s->id);
  boot_add(&b, s->privileged ? "c" : "k");
  boot_add(&b, tpl_parent);
  boot_add(&b, s->dir);
  boot_add(&b, sysdirs);
  boot_add(&b, lay_dir);
  boot_add(&b, layer_ids);
  for (size_t i = 0; i < s->nmounts; i++) {   /* each volume: its directory, its path inside */
    boot_add(&b, vol_dir(s->mounts[i].volume));
    boot_add(&b, s->mounts[i].path);
  }
  if (b.over) { seterr(err, errlen, "the sandbox's boot request is too large"); goto fail; }
  h.nstrings = b.n;
  memcpy(b.p, &h, sizeof h);
  for (int i = 0; i < nidfds; i++) fds[1 + ncg + i] = idfds[i];
  step(tr, "request");
  if (!s->net) {
    net_idmap map;
    idmap_here(&map);
    int exe_fd = init_exe_fd();
    s->net = exe_fd >= 0 ? net_pair_new(&map, exe_fd, link, err, errlen) : NULL;
    if (exe_fd < 0) seterr(err, errlen, "the init's image: %s", strerror(errno));
    else close(exe_fd);
    if (!s->net) goto fail;
    step(tr, link ? "network (link)" : "network");
  }
  /* Its starter forks the init, born in the cgroups (v2), into new mount/pid/uts/ipc namespaces
   * with sandboxd as its parent (init.h). Its answer is awaited at once: a thread about to sleep
   * lets the starter run on its own CPU at once (a wake-up elsewhere can cost a millisecond). */
  if (net_pair_boot(s->net, b.p, b.len, fds, 1 + ncg + nidfds, err, errlen) != 0) goto fail;
  for (int i = 1; i < 1 + ncg + nidfds; i++) close(fds[i]);
  ncg = nidfds = 0;
  close(sv[1]);
  sv[1] = -1;
  bool late = false;
  pid = net_pair_booted(s->net, &late, err, errlen);
  if (pid <= 0) goto fail;
  s->init_pid = pid;
  step(tr, "boot");
  if (late && cg_attach(&s->cg, s->init_pid, err, errlen) != 0) goto fail;
  if (cge == CG_JOINS) {   /* v1: made while the init sets itself up; it joins them before READY */
    if (cg_create(&s->cg, cfg->state_dir, s->id, &lim, err, errlen) != 0) goto fail;
    int tasks[INIT_MAX_CG], nt = cg_boot_fds(&s->cg, tasks, INIT_MAX_CG, err, errlen);
    if (nt < 0) goto fail;
    init_req rq;
    memset(&rq, 0, sizeof rq);
    rq.type = INIT_REQ_CGROUPS;
    int rc = fdpass_send(sv[0], &rq, sizeof rq, tasks, nt);
    for (int i = 0; i < nt; i++) close(tasks[i]);
    if (rc != 0) { seterr(err, errlen, "sandbox init: %s", strerror(errno)); goto fail; }
    step(tr, "cgroups");
  }
  /* For sbx_cleanup_stale after a crash (a crash before this is written leaves an init that
   * exits by itself: its channel is gone; the cgroup sweep finds it too). */
  xfmt(p, sizeof p, "%s/init.pid", s->dir);
  if (pidfile_write(p, s->init_pid) != 0) { seterr(err, errlen, "write %s: %s", p, strerror(errno)); goto fail; }
  /* An OOM-killed init would take the whole sandbox down: let the kernel pick a command. */
  xfmt(p, sizeof p, "/proc/%d/oom_score_adj", (int)pid);
  (void)procfile_write(p, "-1000");
  struct pollfd pf = {sv[0], POLLIN, 0};
  int pr;
  do pr = poll(&pf, 1, SBX_READY_TIMEOUT_MS); while (pr < 0 && errno == EINTR);
  if (pr == 0) { seterr(err, errlen, "sandbox init not ready after %d ms", SBX_READY_TIMEOUT_MS); goto fail; }
  step(tr, "until ready");
  init_msg m;
  ssize_t n = recv(sv[0], &m, sizeof m, 0);
  if (n != (ssize_t)sizeof m) {
    int status = 0;
    kill(s->init_pid, SIGKILL);
    while (waitpid(s->init_pid, &status, 0) < 0 && errno == EINTR) {}
    s->init_pid = 0;
    seterr(err, errlen, "sandbox init exited during setup (wait status %d)", status);
    goto fail;
  }
  if (m.type != INIT_MSG_READY) {
    m.text[sizeof m.text - 1] = 0;
    seterr(err, errlen, "sandbox setup failed: %s", m.type == INIT_MSG_FAILED ? m.text : "unexpected message");
    goto fail;
  }
  net_pair_reap(s->net);   /* the starter exited long ago */
  xfmt(p, sizeof p, "/proc/%d/root", (int)pid);
  s->root_fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (s->root_fd < 0) { seterr(err, errlen, "open sandbox root: %s", strerror(errno)); goto fail; }
  s->ctl = sv[0];
  sv[0] = -1;
  free(b.p);
  /* The init's phases, each "init <what> <n>us": they make up "until ready". */
  m.text[sizeof m.text - 1] = 0;
  for (char *save = NULL, *ph = strtok_r(m.text, ",", &save); ph; ph = strtok_r(NULL, ",", &save)) {
    size_t tl = strlen(tr->text);
    snprintf(tr->text + tl, sizeof tr->text - tl, "%sinit %s", tl ? ", " : "", ph + strspn(ph, " "));
  }
  *out = s;
  return 0;
fail:
  free(b.p);
  for (int i = 0; i < 2; i++) if (sv[i] >= 0) close(sv[i]);
  for (int i = 1; i < 1 + ncg; i++) close(fds[i]);
  for (int i = 0; i < nidfds; i++) close(idfds[i]);
  if (s->root_fd >= 0) close(s->root_fd);
  bool unused;
  char why[8];
  if (s->init_pid <= 0 && s->net && (pid = net_pair_booted(s->net, &unused, why, sizeof why)) > 0)
    s->init_pid = pid;   /* booted, but we failed before we took its pid: it is our child to reap */
  if (s->init_pid > 0) {
    kill(s->init_pid, SIGKILL);
    while (waitpid(s->init_pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  net_pair_free(s->net);
  cg_remove(&s->cg, s->id);
  if (dir_made) (void)tpl_rm_tree(s->dir);
  ly_release(s->layer);
  for (size_t i = 0; i < s->nmounts; i++) { vol_unmount(s->mounts[i].volume); free((char *)s->mounts[i].path); }
  mx_free(&s->mx);
  sbxlog_free(s->log);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return -1;
}

/* The last of discard and sbx_destroy, once init is gone: root fd, cgroup, directory, the struct. */
static void release(sbx_t *s) {
  net_pair_free(s->net);
  s->net = NULL;
  if (s->root_fd >= 0) close(s->root_fd);
  cg_usage u;   /* what the kernel's OOM killer did inside is worth a line to whoever runs sandboxd */
  cg_read_usage(&s->cg, &u);
  if (u.oom_kills) {
    char peak[48] = "";
    if (u.has_peak) snprintf(peak, sizeof peak, ", peak %llu MiB", (unsigned long long)(u.mem_peak >> 20));
    fprintf(stderr, "sandboxd: sandbox %s: %llu process%s killed out of memory (limit %llu MiB%s)\n", s->id,
            (unsigned long long)u.oom_kills, u.oom_kills == 1 ? "" : "es", (unsigned long long)(u.mem_limit >> 20), peak);
  }
  cg_remove(&s->cg, s->id);
  if (tpl_rm_tree(s->dir) != 0)
    fprintf(stderr, "sandboxd: sandbox %s: removing %s: %s\n", s->id, s->dir, strerror(errno));
  ly_release(s->layer);   /* after its directory: a chain no one else holds goes too */
  mx_free(&s->mx);
  sbxlog_free(s->log);
  for (size_t i = 0; i < s->nmounts; i++) { vol_unmount(s->mounts[i].volume); free((char *)s->mounts[i].path); }
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* A booted sandbox that never got its process table (a spare, or a create that failed late). */
static void discard(sbx_t *s) {
  if (s->init_pid > 0) {
    kill(s->init_pid, SIGKILL);
    while (waitpid(s->init_pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  if (s->ctl >= 0) close(s->ctl);
  release(s);
}

static bool trace_on(void) { return getenv("SANDBOXD_TRACE_CREATE") != NULL; }

/* ---- what the warm pool (pool.h) keeps: spares booted with the default shape, network pairs ---- */
static void *spare_boot(const char *state_dir, bool internet, char *err, size_t errlen) {
  char id[32];
  if (!g_new_id || g_new_id(id, sizeof id) != 0 || !sbx_valid_id(id)) { seterr(err, errlen, "no id for a spare"); return NULL; }
  sbx_config cfg = {.id = id, .state_dir = state_dir, .internet = internet};
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  step_trace tr = {.text = "", .last = t0};
  sbx_t *s = NULL;
  if (create_booted(&cfg, &s, err, errlen, &tr) != 0) return NULL;
  if (trace_on()) fprintf(stderr, "sandboxd: spare %s booted in %.2f ms (%s)\n", id, ms_since(t0), tr.text);
  return s;
}
static void spare_discard(void *s) { discard(s); }
static void pair_discard(void *p) {
  kit *k = p;
  net_pair_free(k->net);   /* its starter, in the cgroups, killed and reaped first */
  if (k->has_cg) cg_remove(&k->cg, "(a stocked network pair)");
  if (k->dir[0]) (void)tpl_rm_tree(k->dir);
  free(k);
}

/* v1: the kit's cgroups, made under its name and joined by the pair's starter. Cgroups that
 * cannot be made are no loss here (the sandbox makes its own, and says why it cannot); 0 then.
 * A starter that could not join them (perhaps some) is: -1 with err, the caller frees the pair
 * (its starter first) and with it the cgroups. */
static int kit_cgroups(kit *k, const char *state_dir, const char *name, char *err, size_t errlen) {
  if (cg_entry_mode() != CG_JOINS) return 0;
  char why[600];
  if (cg_create(&k->cg, state_dir, name, &g_lim, why, sizeof why) != 0) return 0;
  k->has_cg = true;
  int tasks[INIT_MAX_CG], nt = cg_boot_fds(&k->cg, tasks, INIT_MAX_CG, err, errlen);
  int rc = nt < 0 ? -1 : net_pair_join(k->net, tasks, nt, err, errlen);
  for (int i = 0; i < nt; i++) close(tasks[i]);
  return rc;
}
static void *pair_new(const char *state_dir, char *err, size_t errlen) {
  kit *k = calloc(1, sizeof *k);
  if (!k) { seterr(err, errlen, "out of memory"); return NULL; }
  net_idmap map;
  idmap_here(&map);
  int exe_fd = init_exe_fd();
  if (exe_fd < 0) { seterr(err, errlen, "the init's image: %s", strerror(errno)); free(k); return NULL; }
  k->net = net_pair_new(&map, exe_fd, true, err, errlen);
  close(exe_fd);
  if (!k->net) { free(k); return NULL; }
  static unsigned long serial;
  static pthread_mutex_t serial_mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&serial_mu);
  unsigned long n = ++serial;
  pthread_mutex_unlock(&serial_mu);
  char name[48];
  snprintf(name, sizeof name, "k%lx%lx", (unsigned long)getpid(), n);
  if (kit_cgroups(k, state_dir, name, err, errlen) != 0) {
    k->dir[0] = 0;
    pair_discard(k);
    return NULL;
  }
  /* The directory is a help, not a need: without it the sandbox makes its own. */
  sbx_t probe = {.privileged = geteuid() == 0, .uid0 = geteuid(), .gid0 = getegid()};
  uid_t ru = sbx_host_uid(&probe, 0), uu = sbx_host_uid(&probe, 1000);
  gid_t rg = sbx_host_gid(&probe, 0), ug = sbx_host_gid(&probe, 1000);
  if (uu == (uid_t)-1) { uu = ru; ug = rg; }
  tpl_info tpl;
  char why[256];
  char parent[4200];
  if (tpl_ensure(state_dir, ru, rg, uu, ug, NET_DNS_FORWARDER, &tpl, why, sizeof why) != 0 ||
      xfmt(parent, sizeof parent, "%s/sandboxes", state_dir) != 0 || (mkdir(parent, 0711) != 0 && errno != EEXIST) ||
      xfmt(k->dir, sizeof k->dir, "%s/%s", parent, name) != 0 ||
      layer_dirs(k->dir, &tpl, ru, rg, why, sizeof why) != 0) {
    if (k->dir[0] && access(k->dir, F_OK) == 0) (void)tpl_rm_tree(k->dir);
    k->dir[0] = 0;
  }
  return k;
}
static const pool_ops POOL_OPS = {spare_boot, spare_discard, pair_new, pair_discard};
static const pool_ops PAIRS_ONLY = {NULL, NULL, pair_new, pair_discard};

void sbx_pool_start(const char *state_dir) { pool_start(state_dir, g_new_id ? &POOL_OPS : &PAIRS_ONLY); }
void sbx_pool_stop(void) { pool_stop(); }
void sbx_shutdown(void) {
  pool_stop();
  cg_shutdown();
}

/* A spare of the right shape for cfg, or NULL. It was booted under its own id, host name and
 * all: nothing is renamed. One whose init died meanwhile (its channel hung up) is discarded. */
static sbx_t *claim_spare(const sbx_config *cfg, step_trace *tr) {
  if (cfg->layer || cfg->nmounts) return NULL;   /* spares have the default shape only */
  for (;;) {
    sbx_t *s = pool_claim(cfg->state_dir, net_wants_link(cfg->internet));
    if (!s) return NULL;
    struct pollfd pf = {s->ctl, POLLIN, 0};
    if (poll(&pf, 1, 0) == 0) {   /* the init sends nothing unasked: anything here is its end */
      step(tr, "pool");
      return s;
    }
    fprintf(stderr, "sandboxd: warm pool: spare %s is gone; trying another\n", s->id);
    discard(s);
  }
}

/* The sandbox's egress CA into its trust stores, once (the first rules that set headers). */
static int trust_egress_ca(sbx_t *s, char *err, size_t errlen) {
  if (s->trusts_egress_ca) return 0;
  char *pem = egress_ca_pem_of(net_pair_index(s->net));
  fs_ctx root;
  int rc = pem && sbx_fs_ctx(s, "root", &root) == 0 ? egress_trust_install(&root, pem, err, errlen) : -1;
  if (!pem) seterr(err, errlen, "the sandbox has no egress CA");
  free(pem);
  if (rc == 0) s->trusts_egress_ca = true;
  return rc;
}

/* envs and egress_trust_env's variables that envs does not set (malloc'ed array; NULL: none). */
static const char **with_trust_env(const char *const *envs) {
  size_t n = 0, k = 0;
  while (envs && envs[n]) n++;
  const char **all = calloc(n + 3, sizeof *all);
  if (!all) return NULL;
  for (; k < n; k++) all[k] = envs[k];
  for (const char *const *t = egress_trust_env; *t; t++) {
    size_t nl = (size_t)(strchr(*t, '=') - *t) + 1;
    bool set = false;
    for (size_t i = 0; i < n && !set; i++) set = !strncmp(envs[i], *t, nl);
    if (!set) all[k++] = *t;
  }
  return all;
}

const char *sbx_id(const sbx_t *s) { return s->id; }

/* The process table's observer (ptab_observe): each process started, refused and ended goes into
 * the sandbox's log, and an end that the kernel's OOM killer caused says so. */
static void log_process(void *cls, int kind, int32_t pid, const json_t *config, int status, const char *text) {
  sbx_t *s = cls;
  char cmd[SBXLOG_VALUE_MAX + 1] = "", spid[16], st[64];
  size_t o = 0;
  const char *c = json_string_value(json_object_get(config, "cmd"));
  if (c) o += (size_t)snprintf(cmd, sizeof cmd, "%s", c);
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(config, "args"), i, a) {
    if (o >= sizeof cmd - 1) break;
    o += (size_t)snprintf(cmd + o, sizeof cmd - o, " %s", json_string_value(a) ? json_string_value(a) : "");
  }
  snprintf(spid, sizeof spid, "%d", (int)pid);
  if (kind == PTAB_START) { sbxlog_add(s->log, SBXLOG_INFO, "process started", "pid", spid, "cmd", cmd, NULL); return; }
  if (kind == PTAB_ERROR) { sbxlog_add(s->log, SBXLOG_ERROR, "process could not start", "cmd", cmd, "error", text, NULL); return; }
  ptab_status_string(status, st, sizeof st);
  sbxlog_add(s->log, WIFEXITED(status) && WEXITSTATUS(status) == 0 ? SBXLOG_INFO : SBXLOG_WARN, "process ended",
             "pid", spid, "cmd", cmd, "status", st, NULL);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) return;
  cg_usage u;
  cg_read_usage(&s->cg, &u);
  if (u.oom_kills > s->oom_seen) {
    char limit[32];
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)(u.mem_limit >> 20));
    sbxlog_add(s->log, SBXLOG_ERROR, "out of memory: the kernel killed a process in the sandbox", "pid", spid,
               "memoryLimitMB", limit, NULL);
    s->oom_seen = u.oom_kills;
  }
}

int sbx_create(const sbx_config *cfg, sbx_t **out, char *err, size_t errlen) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  step_trace tr = {.text = "", .last = t0};
  *out = NULL;
  if (!cfg || !sbx_valid_id(cfg->id)) { seterr(err, errlen, "invalid sandbox id"); return -1; }
  if (!cfg->state_dir || cfg->state_dir[0] != '/' || strlen(cfg->state_dir) > 3000) {
    seterr(err, errlen, "state dir must be an absolute path shorter than 3000 bytes");
    return -1;
  }
  sbx_t *s = claim_spare(cfg, &tr);
  bool warm = s != NULL;
  if (warm && write_limits(s, cfg, err, errlen) != 0) {
    fprintf(stderr, "sandboxd: warm pool: spare %s unusable (%s); booting one\n", s->id, err);
    discard(s);
    warm = false;
    tr.text[0] = 0;
  }
  if (!warm && create_booted(cfg, &s, err, errlen, &tr) != 0) return -1;
  /* From here the sandbox's traffic is decided by its rules (before: everything refused). */
  if (net_pair_index(s->net)) {
    egress_rules open;
    egress_rules *rules = cfg->egress;
    if (!rules) {
      egress_rules_open(&open);
      open.internet = cfg->internet;
      rules = &open;
    }
    bool headers = rules->tf.nhosts > 0;
    if (egress_attach(net_pair_index(s->net), s->id, rules, err, errlen) != 0) { discard(s); return -1; }
    if (headers && trust_egress_ca(s, err, errlen) != 0) { discard(s); return -1; }
    step(&tr, "egress");
  }
  /* Created with header rules: node and requests told where the CA is (unless told otherwise). */
  const char **envs = s->trusts_egress_ca ? with_trust_env(cfg->envs) : NULL;
  s->pt = ptab_create(s->ctl, envs ? envs : cfg->envs, trace_on() ? s->id : NULL, err, errlen);
  free(envs);
  s->ctl = -1;   /* owned by the table now, even on failure */
  if (!s->pt) { discard(s); return -1; }
  ptab_observe(s->pt, log_process, s);
  snprintf(s->workdir, sizeof s->workdir, "%s", cfg->workdir ? cfg->workdir : "");
  step(&tr, "table");
  *out = s;
  if (trace_on())
    fprintf(stderr, "sandboxd: sandbox %s ready in %.2f ms (%s: %s)\n", s->id, ms_since(t0), warm ? "warm" : "cold", tr.text);
  return 0;
}

layer *sbx_layer(sbx_t *s) { return s->layer; }
const char *sbx_workdir(const sbx_t *s) { return s->workdir; }
sbxlog *sbx_log(sbx_t *s) { return s->log; }

int sbx_set_egress(sbx_t *s, egress_rules *rules, char *err, size_t errlen) {
  if (!net_pair_index(s->net)) {
    egress_rules_free(rules);
    seterr(err, errlen, "this sandbox's network has no egress rules (sandboxd without root)");
    return -1;
  }
  bool headers = rules->tf.nhosts > 0;
  if (egress_update(net_pair_index(s->net), rules, err, errlen) != 0) return -1;
  /* Rules that set headers for the first time: the CA is trusted from now on (the bundle; node and
   * requests read their variables, which only a sandbox created with such rules has). */
  return headers ? trust_egress_ca(s, err, errlen) : 0;
}

int sbx_metrics(sbx_t *s, int64_t from_ms, int64_t to_ms, sbx_metric **out, size_t *n) {
  long mem_mb;
  mx_source src = {&s->cg, s->dir, (const char (*)[16])s->sys, s->nsys, 0};
  sbx_limits(&src.cpu_count, &mem_mb);
  return mx_query(&s->mx, &src, from_ms, to_ms, out, n);
}

/* The trees of s's upper layers: "upper" as the layer's root, "upper-<d>" as <d>. */
typedef struct { char src[TPL_MAX_SYSDIRS][32]; ly_tree t[1 + TPL_MAX_SYSDIRS]; size_t n; } upper_trees;
static void upper_trees_of(const sbx_t *s, upper_trees *u) {
  u->t[0] = (ly_tree){"upper", "root"};
  u->n = 1;
  for (int i = 0; i < s->nsys; i++) {
    snprintf(u->src[i], sizeof u->src[i], "upper-%s", s->sys[i]);
    u->t[u->n++] = (ly_tree){u->src[i], s->sys[i]};
  }
}

static int capture_depth_ok(const sbx_t *s, char *err, size_t errlen) {
  if (!s->layer || ly_depth(s->layer) < LY_MAX_DEPTH) return 0;
  seterr(err, errlen, "the sandbox runs on a chain of %d snapshot layers, the most sandboxd stacks: a snapshot of it "
         "would be one more", ly_depth(s->layer));
  return -1;
}

int sbx_capture(sbx_t *s, layer **out, char *err, size_t errlen) {
  *out = NULL;
  if (capture_depth_ok(s, err, errlen) != 0) return -1;
  upper_trees u;
  upper_trees_of(s, &u);
  const ly_tree *trees = u.t;
  size_t n = u.n;
  int dfd = open(s->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) { seterr(err, errlen, "open %s: %s", s->dir, strerror(errno)); return -1; }
  /* Frozen, nothing inside changes a file while its layer is copied. */
  if (sbx_pause(s) != 0) {
    seterr(err, errlen, "cannot freeze the sandbox: %s", strerror(errno));
    (void)sbx_resume(s);
    close(dfd);
    return -1;
  }
  int rc = ly_capture(dfd, trees, n, s->layer, sbx_host_uid(s, 0), sbx_host_gid(s, 0), out, err, errlen);
  if (sbx_resume(s) != 0) fprintf(stderr, "sandboxd: sandbox %s: thaw after the snapshot: %s\n", s->id, strerror(errno));
  close(dfd);
  return rc;
}

int sbx_capture_final(sbx_t *s, layer **out, char *err, size_t errlen) {
  *out = NULL;
  if (capture_depth_ok(s, err, errlen) != 0) return -1;
  sbx_stop(s);
  pthread_mutex_lock(&s->mu);
  bool dead = s->killed;
  pthread_mutex_unlock(&s->mu);
  if (!dead) { seterr(err, errlen, "the sandbox's init (pid %d) was not reaped: its upper layers may still be mounted", (int)s->init_pid); return -1; }
  /* The init is reaped: the kernel reaped its whole pid namespace first, and the last of its
   * processes took the mount namespace with it. What could still hold its overlays are sandboxd's
   * own descriptors into it: the root fd (a path in the root overlay) and those of requests, which
   * the caller waited for. With none left, no overlay has the upper directories any more. */
  if (s->root_fd >= 0) close(s->root_fd);
  s->root_fd = -1;
  upper_trees u;
  upper_trees_of(s, &u);
  int dfd = open(s->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) { seterr(err, errlen, "open %s: %s", s->dir, strerror(errno)); return -1; }
  /* Moved out of s->dir: what sbx_destroy removes then is the rest (work directories). */
  int rc = ly_adopt(dfd, u.t, u.n, s->layer, sbx_host_uid(s, 0), sbx_host_gid(s, 0), out, err, errlen);
  close(dfd);
  return rc;
}

void sbx_stop(sbx_t *s) {
  sbx_kill_init(s);
  ptab_shutdown(s->pt);
}

void sbx_destroy(sbx_t *s) {
  if (!s) return;
  sbx_stop(s);   /* kills init, ends every stream with its end event, joins the pump */
  ptab_free(s->pt);
  release(s);
}

/* What a crashed run of state_dir left: every task of its cgroups killed and the cgroups removed,
 * each sandbox's init killed (its pid namespace goes with it) and its directory removed. */
static void sweep_stale(const char *state_dir) {
  char p[4200];
  char cerr[256];
  if (cg_init(state_dir, NULL, cerr, sizeof cerr) != 0) fprintf(stderr, "sandboxd: cleanup: %s\n", cerr);   /* no-op after sbx_init */
  cg_cleanup_stale(state_dir);
  xfmt(p, sizeof p, "%s/sandboxes", state_dir);
  DIR *d = opendir(p);
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      if (de->d_name[0] == '.') continue;
      char sd[4600];
      /* The init: its pid namespace goes with it (its pasta, if any, net_init stopped). */
      xfmt(sd, sizeof sd, "%s/%s/init.pid", p, de->d_name);
      pidfile_kill(sd);
      xfmt(sd, sizeof sd, "%s/%s", p, de->d_name);
      if (tpl_rm_tree(sd) != 0) fprintf(stderr, "sandboxd: cleanup: removing %s: %s\n", sd, strerror(errno));
    }
    closedir(d);
  }
}

void sbx_cleanup_crashed(const char *state_dir) {
  net_cleanup_stale(state_dir);
  sweep_stale(state_dir);
  cg_shutdown();   /* v2: the state dir's parent cgroup too (v1: the sweep removed it) */
}

void sbx_cleanup_stale(const char *state_dir) {
  sbx_pool_stop();   /* our own spares first: the sweep below would kill them under the pool */
  sweep_stale(state_dir);
  /* Rebuild the template now rather than on the first create (it copies ~1 MB of /etc). */
  sbx_t probe = {.privileged = geteuid() == 0, .uid0 = geteuid(), .gid0 = getegid()};
  uid_t uu = sbx_host_uid(&probe, 1000);
  gid_t ug = sbx_host_gid(&probe, 1000);
  if (uu == (uid_t)-1) { uu = sbx_host_uid(&probe, 0); ug = sbx_host_gid(&probe, 0); }
  tpl_info tpl;
  char err[512];
  if (tpl_ensure(state_dir, sbx_host_uid(&probe, 0), sbx_host_gid(&probe, 0), uu, ug, NET_DNS_FORWARDER, &tpl, err, sizeof err) != 0)
    fprintf(stderr, "sandboxd: cleanup: %s\n", err);
  else
    sbx_pool_start(state_dir);
}
