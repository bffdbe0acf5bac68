/* cgroups.c — a sandbox's cgroups (cgroups.h): cgroup v2 where the host has it, else v1. */
#include "cgroups.h"
#include "clocks.h"
#include "procfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* v1 controller names; on v2 pids, memory and cpu are controllers, freezing and the CPU counter
 * are core files (cgroup.freeze, cpu.stat). */
static const char *const CG_NAMES[CG_N] = {"pids", "memory", "cpu", "freezer", "cpuacct"};
#define CPU_PERIOD_US 100000L          /* the CFS period both versions get: quota = cpus × this */
#define WAIT_MS 5000                   /* a freeze, thaw or emptying the kernel has not confirmed by then failed */
#define LEAF "supervisor"              /* v2: where sandboxd moves out of a delegated cgroup it takes as its base */

enum { MODE_NONE, MODE_V1, MODE_V2 };
static struct {
  bool inited;
  int mode;
  char v1_mnt[CG_N][256];      /* v1: each controller's hierarchy, "" when missing or not writable */
  bool v1_shared[CG_N];        /* v1: mounted together with an earlier controller (one directory) */
  char v2_mnt[256];            /* v2: where cgroup2 is mounted */
  char parent[600];            /* v2: <base>/sandboxd-<hash>, sandboxes' parent; "" without one */
  bool v2_has[CG_N];           /* v2: pids, memory, cpu enabled for sandboxes; freezer: cgroup.freeze; cpuacct: cpu.stat */
  bool v2_kill;                /* v2: cgroup.kill */
  char why[1024];              /* what is missing, and why */
  char desc[1024];
} G;

/* Path formatting; inputs are bounded by the callers, so truncation means a bug: fail closed. */
__attribute__((format(printf, 3, 4))) static int xfmt(char *buf, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, cap, f, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap) { buf[0] = 0; errno = ENAMETOOLONG; return -1; }
  return 0;
}

__attribute__((format(printf, 1, 2))) static void why(const char *f, ...) {
  size_t off = strlen(G.why);
  va_list ap;
  va_start(ap, f);
  if (off < sizeof G.why) vsnprintf(G.why + off, sizeof G.why - off, f, ap);
  va_end(ap);
}

/* Sandboxes of different state dirs (parallel test runs) get separate cgroup parents. */
static void parent_name(const char *state_dir, char *out, size_t cap) {
  char real[4096];
  const char *p = realpath(state_dir, real) ? real : state_dir;
  uint64_t h = 1469598103934665603ull;
  for (; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  snprintf(out, cap, "sandboxd-%016llx", (unsigned long long)h);
}

/* A whole word of a space- or comma-separated list. */
static bool has_word(const char *list, const char *w) {
  size_t n = strlen(w);
  for (const char *q = list; (q = strstr(q, w)) != NULL; q += n)
    if ((q == list || q[-1] == ' ' || q[-1] == ',' || q[-1] == '\n') && (q[n] == 0 || q[n] == ' ' || q[n] == ',' || q[n] == '\n'))
      return true;
  return false;
}

static int write_file(const char *dir, const char *file, const char *v, char *err, size_t errlen) {
  char p[700];
  if (xfmt(p, sizeof p, "%s/%s", dir, file) != 0 || procfile_write(p, v) != 0) {
    int e = errno;
    if (err) snprintf(err, errlen, "write '%s' to %.400s/%s: %s", v, dir, file, strerror(e));
    errno = e;
    return -1;
  }
  return 0;
}

static int read_file(const char *dir, const char *file, char *buf, size_t cap) {
  char p[700];
  if (xfmt(p, sizeof p, "%s/%s", dir, file) != 0) return -1;
  return procfile_read(p, buf, cap);
}

static bool exists(const char *dir, const char *file) {
  char p[700];
  return xfmt(p, sizeof p, "%s/%s", dir, file) == 0 && access(p, F_OK) == 0;
}

/* "<key> <value>" of a stat or events file; `found` says whether the key was there. */
static uint64_t field(const char *buf, const char *key, bool *found) {
  size_t k = strlen(key);
  for (const char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (!strncmp(l, key, k) && l[k] == ' ') {
      if (found) *found = true;
      return strtoull(l + k + 1, NULL, 10);
    }
  if (found) *found = false;
  return 0;
}

/* v2: waits until `key` of dir/cgroup.events is `want` (the kernel notifies changes to it: poll's
 * POLLPRI), at most WAIT_MS. 0, or -1 with errno. */
static int events_wait(const char *dir, const char *key, uint64_t want) {
  char p[700], buf[256];
  if (xfmt(p, sizeof p, "%s/cgroup.events", dir) != 0) return -1;
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int64_t deadline = mono_ms() + WAIT_MS;
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) { int e = errno; close(fd); errno = e; return -1; }
    buf[n] = 0;
    bool found;
    uint64_t v = field(buf, key, &found);
    if (!found) { close(fd); errno = ENOENT; return -1; }
    if (v == want) { close(fd); return 0; }
    int64_t left = deadline - mono_ms();
    if (left <= 0) { close(fd); errno = ETIMEDOUT; return -1; }
    struct pollfd pf = {fd, POLLPRI, 0};
    (void)poll(&pf, 1, left < 100 ? (int)left : 100);   /* and re-read at least every 0.1 s */
  }
}

/* ---- finding the hierarchy ---- */

/* The cgroup2 mount (first) and each v1 controller's mount, from /proc/self/mountinfo. */
static void scan_mounts(char *v2_root, size_t v2_root_cap) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) { why("read /proc/self/mountinfo: %s; ", strerror(errno)); return; }
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    /* "<id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <type> <source> <super options>" */
    char *fields[6], *save = NULL, *t = strtok_r(line, " \n", &save);
    int n = 0;
    for (; t && n < 6; t = strtok_r(NULL, " \n", &save)) fields[n++] = t;
    if (n < 6) continue;
    while (t && strcmp(t, "-") != 0) t = strtok_r(NULL, " \n", &save);
    char *type = t ? strtok_r(NULL, " \n", &save) : NULL;
    char *source = type ? strtok_r(NULL, " \n", &save) : NULL;
    char *opts = source ? strtok_r(NULL, " \n", &save) : NULL;
    if (!opts) continue;
    const char *root = fields[3], *mnt = fields[4];
    if (!strcmp(type, "cgroup2") && !G.v2_mnt[0] && strlen(mnt) < sizeof G.v2_mnt) {
      snprintf(G.v2_mnt, sizeof G.v2_mnt, "%s", mnt);
      snprintf(v2_root, v2_root_cap, "%s", root);
    } else if (!strcmp(type, "cgroup")) {
      for (int c = 0; c < CG_N; c++)
        if (!G.v1_mnt[c][0] && has_word(opts, CG_NAMES[c]) && strlen(mnt) < sizeof G.v1_mnt[c])
          snprintf(G.v1_mnt[c], sizeof G.v1_mnt[c], "%s", mnt);
    }
  }
  fclose(f);
}

static void init_v1(void) {
  for (int c = 0; c < CG_N; c++) {
    char p[300];
    if (G.v1_mnt[c][0] && (xfmt(p, sizeof p, "%s/cgroup.procs", G.v1_mnt[c]) != 0 || access(p, W_OK) != 0)) G.v1_mnt[c][0] = 0;
    for (int e = 0; e < c; e++)
      if (G.v1_mnt[c][0] && !strcmp(G.v1_mnt[c], G.v1_mnt[e])) G.v1_shared[c] = true;
  }
  if (!G.v1_mnt[CG_PIDS][0]) why("no writable cgroup v1 pids controller: no process limit; ");
  if (!G.v1_mnt[CG_MEMORY][0]) why("no writable cgroup v1 memory controller: no memory limit; ");
  if (!G.v1_mnt[CG_CPU][0]) why("no writable cgroup v1 cpu controller: no CPU limit; ");
  if (!G.v1_mnt[CG_FREEZER][0]) why("no writable cgroup v1 freezer: pause uses SIGSTOP; ");
  size_t off = (size_t)snprintf(G.desc, sizeof G.desc, "cgroup v1:");
  int any = 0;
  for (int c = 0; c < CG_N; c++)
    if (G.v1_mnt[c][0] && off < sizeof G.desc) { off += (size_t)snprintf(G.desc + off, sizeof G.desc - off, " %s", CG_NAMES[c]); any++; }
  if (off < sizeof G.desc) snprintf(G.desc + off, sizeof G.desc - off, any ? " (one directory per sandbox under <mount>/sandboxd-<hash>)" : " no controller writable");
}

/* v2: the processes of dir (sandboxd among them) go to dir/LEAF, so that dir may enable
 * controllers for its children (no internal processes). 0, or -1 with err. */
static int move_to_leaf(const char *dir, char *err, size_t errlen) {
  char leaf[600], buf[16384];
  if (xfmt(leaf, sizeof leaf, "%s/" LEAF, dir) != 0) { snprintf(err, errlen, "%s/" LEAF ": path too long", dir); return -1; }
  if (mkdir(leaf, 0755) != 0 && errno != EEXIST) { snprintf(err, errlen, "mkdir %.500s: %s", leaf, strerror(errno)); return -1; }
  for (int round = 0; round < 16; round++) {   /* processes forked meanwhile: a few rounds */
    if (read_file(dir, "cgroup.procs", buf, sizeof buf) != 0) { snprintf(err, errlen, "read %s/cgroup.procs: %s", dir, strerror(errno)); return -1; }
    if (!buf[0]) return 0;
    for (char *save = NULL, *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save))
      if (write_file(leaf, "cgroup.procs", t, err, errlen) != 0 && errno != ESRCH) return -1;
  }
  snprintf(err, errlen, "%.500s keeps gaining processes: cannot empty it into " LEAF, dir);
  return -1;
}

/* v2: the controllers sandboxes need, enabled in dir/cgroup.subtree_control (each on its own:
 * one refused does not cost the others). Only a missing one is written: a write there takes
 * the kernel's cgroup threadgroup lock, tens of ms. Returns how many are enabled. */
static int enable_controllers(const char *dir, bool report) {
  static const int want[] = {CG_PIDS, CG_MEMORY, CG_CPU};
  char avail[512] = "", on[512] = "", e[600];
  if (read_file(dir, "cgroup.controllers", avail, sizeof avail) != 0) {
    if (report) why("cgroup v2: read %s/cgroup.controllers: %s; ", dir, strerror(errno));
    return 0;
  }
  (void)read_file(dir, "cgroup.subtree_control", on, sizeof on);
  int n = 0;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const char *name = CG_NAMES[want[i]];
    if (has_word(on, name)) { n++; continue; }
    if (!has_word(avail, name)) {
      if (report) why("cgroup v2: no %s controller in %s/cgroup.controllers (not enabled or not delegated above it); ", name, dir);
      continue;
    }
    char plus[32];
    snprintf(plus, sizeof plus, "+%s", name);
    if (write_file(dir, "cgroup.subtree_control", plus, e, sizeof e) == 0) n++;
    else if (report) why("cgroup v2: %s; ", e);
  }
  return n;
}

/* v2: systemd marks a cgroup it delegates (Delegate=yes) with the trusted.delegate xattr; for an
 * unprivileged owner the test that matters is whether it may write the files. */
static bool delegated(const char *dir, bool root) {
  if (root) {
    char x[8] = "";
    return getxattr(dir, "trusted.delegate", x, sizeof x - 1) > 0 && x[0] == '1';
  }
  char p[700];
  return access(dir, W_OK) == 0 && xfmt(p, sizeof p, "%s/cgroup.procs", dir) == 0 && access(p, W_OK) == 0 &&
         xfmt(p, sizeof p, "%s/cgroup.subtree_control", dir) == 0 && access(p, W_OK) == 0;
}

static void init_v2(const char *state_dir, const char *given, const char *mnt_root, char *err, size_t errlen, int *rc) {
  char own[512] = "", buf[4096], base[512];
  /* "0::<path>", relative to the cgroup namespace, which is what the mount's root is relative to */
  if (procfile_read("/proc/self/cgroup", buf, sizeof buf) == 0) {
    char *l = strstr(buf, "0::");
    if (l && (l == buf || l[-1] == '\n')) {
      char *path = l + 3, *nl = strchr(path, '\n');
      if (nl) *nl = 0;
      size_t rl = strlen(mnt_root);
      if (strcmp(mnt_root, "/") != 0 && !strncmp(path, mnt_root, rl) && (path[rl] == '/' || !path[rl])) path += rl;
      if (xfmt(own, sizeof own, "%s%s", G.v2_mnt, !strcmp(path, "/") ? "" : path) != 0) own[0] = 0;
    }
  }
  bool root = geteuid() == 0;
  const char *how;
  if (given) {
    size_t ml = strlen(G.v2_mnt);
    if (strncmp(given, G.v2_mnt, ml) != 0 || (given[ml] != '/' && given[ml] != 0) || strlen(given) >= sizeof base) {
      snprintf(err, errlen, "--cgroup %s: not a directory of the cgroup2 file system at %s", given, G.v2_mnt);
      *rc = -1;
      return;
    }
    if (mkdir(given, 0755) != 0 && errno != EEXIST) {
      snprintf(err, errlen, "--cgroup %s: mkdir: %s", given, strerror(errno));
      *rc = -1;
      return;
    }
    snprintf(base, sizeof base, "%s", given);
    how = "given with --cgroup";
  } else {
    if (own[0] && strcmp(own, G.v2_mnt) != 0 && delegated(own, root)) {
      snprintf(base, sizeof base, "%s", own);
      how = "sandboxd's own delegated cgroup";
    } else if (root) {
      snprintf(base, sizeof base, "%s", G.v2_mnt);
      how = "the hierarchy's root (sandboxd runs as root, not in a delegated cgroup)";
    } else {
      why("cgroup v2: sandboxd's cgroup %s is not delegated to uid %u (its cgroup.procs and cgroup.subtree_control are not "
          "writable): no process, memory or CPU limit, pause uses SIGSTOP — run it in a delegated scope "
          "(systemd-run --user --scope -p Delegate=yes sandboxd ...) or pass --cgroup DIR (a writable cgroup of its own); ",
          own[0] ? own : "(unknown)", (unsigned)geteuid());
      snprintf(G.desc, sizeof G.desc, "cgroup v2 at %s: nothing delegated to sandboxd (uid %u)", G.v2_mnt, (unsigned)geteuid());
      return;
    }
  }
  /* A base sandboxd itself is in (its own cgroup, or one given that holds it) must hold no
   * process once it has children with controllers: they move to a leaf. The root is exempt. */
  char e[600];
  if (strcmp(base, G.v2_mnt) != 0 && !strcmp(own, base) && move_to_leaf(base, e, sizeof e) != 0) {
    why("cgroup v2: %s; ", e);
    snprintf(G.desc, sizeof G.desc, "cgroup v2: base %s (%s) unusable", base, how);
    return;
  }
  if (enable_controllers(base, true) == 0) {
    snprintf(G.desc, sizeof G.desc, "cgroup v2: no controller usable in %s (%s)", base, how);
    return;
  }
  char name[64];
  parent_name(state_dir, name, sizeof name);
  if (xfmt(G.parent, sizeof G.parent, "%s/%s", base, name) != 0 || (mkdir(G.parent, 0755) != 0 && errno != EEXIST)) {
    why("cgroup v2: mkdir %s/%s: %s: no limits, pause uses SIGSTOP; ", base, name, strerror(errno));
    G.parent[0] = 0;
    return;
  }
  enable_controllers(G.parent, true);
  char on[512] = "";
  (void)read_file(G.parent, "cgroup.subtree_control", on, sizeof on);
  G.v2_has[CG_PIDS] = has_word(on, "pids");
  G.v2_has[CG_MEMORY] = has_word(on, "memory");
  G.v2_has[CG_CPU] = has_word(on, "cpu");
  G.v2_has[CG_FREEZER] = exists(G.parent, "cgroup.freeze");   /* kernel >= 5.2 */
  G.v2_has[CG_CPUACCT] = exists(G.parent, "cpu.stat");
  G.v2_kill = exists(G.parent, "cgroup.kill");                /* kernel >= 5.14 */
  if (!G.v2_has[CG_PIDS]) why("cgroup v2: no pids controller for sandboxes: no process limit; ");
  if (!G.v2_has[CG_MEMORY]) why("cgroup v2: no memory controller for sandboxes: no memory limit; ");
  if (!G.v2_has[CG_CPU]) why("cgroup v2: no cpu controller for sandboxes: no CPU limit; ");
  if (!G.v2_has[CG_FREEZER]) why("cgroup v2 without cgroup.freeze (kernel < 5.2): pause uses SIGSTOP; ");
  snprintf(G.desc, sizeof G.desc, "cgroup v2: sandboxes in %.600s (%s):%s%s%s%s%s", G.parent, how,
           G.v2_has[CG_PIDS] ? " pids" : "", G.v2_has[CG_MEMORY] ? " memory" : "", G.v2_has[CG_CPU] ? " cpu" : "",
           G.v2_has[CG_FREEZER] ? " freeze" : "", G.v2_kill ? " kill" : "");
}

int cg_init(const char *state_dir, const char *given, char *err, size_t errlen) {
  if (G.inited) return 0;
  G.inited = true;
  char v2_root[256] = "/";
  scan_mounts(v2_root, sizeof v2_root);
  char ctl[512] = "";
  /* v2 when a cgroup2 mount has the controllers; an empty one next to v1 (hybrid) does not count */
  bool v2 = G.v2_mnt[0] && read_file(G.v2_mnt, "cgroup.controllers", ctl, sizeof ctl) == 0 &&
            (has_word(ctl, "pids") || has_word(ctl, "memory") || has_word(ctl, "cpu"));
  bool v1 = false;
  for (int c = 0; c < CG_N; c++) v1 = v1 || G.v1_mnt[c][0];
  if (given && !v2) {
    snprintf(err, errlen, "--cgroup %s: this host has no cgroup v2 hierarchy with controllers (%s)", given,
             v1 ? "its controllers are mounted as cgroup v1" : "no cgroup file system is mounted");
    return -1;
  }
  int rc = 0;
  if (v2) {
    G.mode = MODE_V2;
    init_v2(state_dir, given, v2_root, err, errlen, &rc);
  } else if (v1) {
    G.mode = MODE_V1;
    init_v1();
  } else {
    G.mode = MODE_NONE;
    why("no cgroup file system mounted: no process, memory or CPU limit, pause uses SIGSTOP; ");
    snprintf(G.desc, sizeof G.desc, "no cgroups");
  }
  return rc;
}

void cg_probe(cg_caps *caps, char *whybuf, size_t whylen, char *desc, size_t desclen) {
  memset(caps, 0, sizeof *caps);
  if (G.mode == MODE_V1) {
    caps->pids = G.v1_mnt[CG_PIDS][0];
    caps->memory = G.v1_mnt[CG_MEMORY][0];
    caps->cpu = G.v1_mnt[CG_CPU][0];
    caps->freezer = G.v1_mnt[CG_FREEZER][0];
  } else if (G.mode == MODE_V2 && G.parent[0]) {
    caps->pids = G.v2_has[CG_PIDS];
    caps->memory = G.v2_has[CG_MEMORY];
    caps->cpu = G.v2_has[CG_CPU];
    caps->freezer = G.v2_has[CG_FREEZER];
  }
  size_t off = strlen(whybuf);
  if (off < whylen) snprintf(whybuf + off, whylen - off, "%s", G.why);
  if (desclen) snprintf(desc, desclen, "%s", G.desc);
}

/* ---- one sandbox's set ---- */

static int v1_write_limits(const cg_set *cg, const cg_limits *lim, char *err, size_t errlen) {
  char v[64];
  if (cg->path[CG_PIDS][0]) {
    snprintf(v, sizeof v, "%ld", lim->pids_max);
    if (write_file(cg->path[CG_PIDS], "pids.max", v, err, errlen) != 0) return -1;
  }
  if (cg->path[CG_MEMORY][0]) {
    /* With swap accounting, memory+swap gets the same bound (as v2's memory.swap.max 0): a
     * higher limit must raise memsw first, a lower one the memory limit first. */
    snprintf(v, sizeof v, "%ld", lim->memory_mb * 1048576L);
    bool memsw = exists(cg->path[CG_MEMORY], "memory.memsw.limit_in_bytes");
    if (write_file(cg->path[CG_MEMORY], "memory.limit_in_bytes", v, err, errlen) != 0) {
      if (!memsw || errno != EINVAL) return -1;
      if (write_file(cg->path[CG_MEMORY], "memory.memsw.limit_in_bytes", v, err, errlen) != 0 ||
          write_file(cg->path[CG_MEMORY], "memory.limit_in_bytes", v, err, errlen) != 0) return -1;
    } else if (memsw && write_file(cg->path[CG_MEMORY], "memory.memsw.limit_in_bytes", v, err, errlen) != 0) {
      return -1;
    }
  }
  if (cg->path[CG_CPU][0]) {
    /* cpu.cfs_period_us is the kernel's default, 100 ms, in every new cgroup: not written. */
    snprintf(v, sizeof v, "%ld", (long)lim->cpu_count * CPU_PERIOD_US);
    if (write_file(cg->path[CG_CPU], "cpu.cfs_quota_us", v, err, errlen) != 0) return -1;
  }
  return 0;
}

static int v2_write_limits(const cg_set *cg, const cg_limits *lim, char *err, size_t errlen) {
  char v[64];
  if (G.v2_has[CG_PIDS]) {
    snprintf(v, sizeof v, "%ld", lim->pids_max);
    if (write_file(cg->dir, "pids.max", v, err, errlen) != 0) return -1;
  }
  if (G.v2_has[CG_MEMORY]) {
    snprintf(v, sizeof v, "%ld", lim->memory_mb * 1048576L);
    if (write_file(cg->dir, "memory.max", v, err, errlen) != 0) return -1;
    /* No swap: memoryMB bounds what the sandbox holds, as RAM bounds an E2B VM (the file is
     * missing without swap accounting) */
    if (exists(cg->dir, "memory.swap.max") && write_file(cg->dir, "memory.swap.max", "0", err, errlen) != 0) return -1;
  }
  if (G.v2_has[CG_CPU]) {
    snprintf(v, sizeof v, "%ld %ld", (long)lim->cpu_count * CPU_PERIOD_US, CPU_PERIOD_US);
    if (write_file(cg->dir, "cpu.max", v, err, errlen) != 0) return -1;
  }
  return 0;
}

int cg_set_limits(cg_set *cg, const cg_limits *lim, char *err, size_t errlen) {
  if (cg->dir[0]) return v2_write_limits(cg, lim, err, errlen);
  return v1_write_limits(cg, lim, err, errlen);
}

static void v1_remove(cg_set *cg, const char *id) {
  for (int c = 0; c < CG_N; c++) {
    if (!cg->path[c][0]) continue;
    if (!G.v1_shared[c]) {
      if (rmdir(cg->path[c]) != 0 && errno != ENOENT)
        fprintf(stderr, "sandboxd: sandbox %s: rmdir %s: %s\n", id, cg->path[c], strerror(errno));
      /* The per-state-dir parent goes with its last sandbox (EBUSY while others live). */
      char *slash = strrchr(cg->path[c], '/');
      if (slash) { *slash = 0; (void)rmdir(cg->path[c]); }
    }
    cg->path[c][0] = 0;
  }
}

static void v2_remove(cg_set *cg, const char *id) {
  if (cg->fd >= 0) close(cg->fd);
  cg->fd = -1;
  /* Every task has been reaped, but the kernel may not have taken the last one off the cgroup
   * yet: wait for "populated 0" before the rmdir. The parent stays (cg_shutdown). */
  int rc = rmdir(cg->dir), e = errno;
  if (rc != 0 && e == EBUSY && events_wait(cg->dir, "populated", 0) == 0) { rc = rmdir(cg->dir); e = errno; }
  if (rc != 0 && e != ENOENT) fprintf(stderr, "sandboxd: sandbox %s: rmdir %s: %s\n", id, cg->dir, strerror(e));
  cg->dir[0] = 0;
}

void cg_remove(cg_set *cg, const char *id) {
  if (cg->dir[0]) v2_remove(cg, id);
  else v1_remove(cg, id);
}

static int v1_create(cg_set *cg, const char *state_dir, const char *name, const cg_limits *lim, char *err, size_t errlen) {
  char parent[64];
  parent_name(state_dir, parent, sizeof parent);
  for (int c = 0; c < CG_N; c++) {
    if (!G.v1_mnt[c][0]) continue;
    if (G.v1_shared[c]) {   /* the directory of the first controller of its hierarchy */
      for (int e = 0; e < c; e++)
        if (!strcmp(G.v1_mnt[e], G.v1_mnt[c]) && cg->path[e][0]) memcpy(cg->path[c], cg->path[e], sizeof cg->path[c]);
      continue;
    }
    char p[600];
    if (xfmt(p, sizeof p, "%s/%s", G.v1_mnt[c], parent) != 0 || xfmt(cg->path[c], sizeof cg->path[c], "%s/%s", p, name) != 0) {
      snprintf(err, errlen, "cgroup %s: path too long", CG_NAMES[c]);
      v1_remove(cg, name);
      return -1;
    }
    /* The parent usually exists: made only when missing. Retry: a concurrent destroy may remove
     * the empty parent between the two mkdirs. */
    int rc = mkdir(cg->path[c], 0755);
    for (int tries = 0; rc != 0 && errno == ENOENT && tries < 5; tries++) {
      if (mkdir(p, 0755) != 0 && errno != EEXIST) break;
      rc = mkdir(cg->path[c], 0755);
    }
    if (rc != 0) {
      snprintf(err, errlen, "cgroup %s: mkdir %s: %s", CG_NAMES[c], cg->path[c], strerror(errno));
      cg->path[c][0] = 0;
      v1_remove(cg, name);
      return -1;
    }
  }
  if (v1_write_limits(cg, lim, err, errlen) != 0) {
    v1_remove(cg, name);
    return -1;
  }
  return 0;
}

static int v2_create(cg_set *cg, const char *name, const cg_limits *lim, char *err, size_t errlen) {
  if (xfmt(cg->dir, sizeof cg->dir, "%s/%s", G.parent, name) != 0) { snprintf(err, errlen, "cgroup %s/%s: path too long", G.parent, name); return -1; }
  /* The parent is made at start; one removed under us (by hand) is made again, controllers and all. */
  for (int tries = 0;; tries++) {
    if (mkdir(cg->dir, 0755) == 0) break;
    if (errno != ENOENT || tries >= 2 || (mkdir(G.parent, 0755) != 0 && errno != EEXIST)) {
      snprintf(err, errlen, "cgroup: mkdir %s: %s", cg->dir, strerror(errno));
      cg->dir[0] = 0;
      return -1;
    }
    enable_controllers(G.parent, false);
  }
  cg->fd = open(cg->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg->fd < 0) {
    snprintf(err, errlen, "cgroup: open %s: %s", cg->dir, strerror(errno));
    v2_remove(cg, name);
    return -1;
  }
  if (v2_write_limits(cg, lim, err, errlen) != 0) {
    v2_remove(cg, name);
    return -1;
  }
  return 0;
}

int cg_create(cg_set *cg, const char *state_dir, const char *name, const cg_limits *lim, char *err, size_t errlen) {
  memset(cg, 0, sizeof *cg);
  cg->fd = -1;
  if (G.mode == MODE_V1) return v1_create(cg, state_dir, name, lim, err, errlen);
  if (G.mode == MODE_V2 && G.parent[0]) return v2_create(cg, name, lim, err, errlen);
  return 0;
}

cg_entry cg_entry_mode(void) {
  if (G.mode == MODE_V2 && G.parent[0]) return CG_BORN;
  if (G.mode == MODE_V1) return CG_JOINS;
  return CG_NONE;
}

int cg_boot_fds(const cg_set *cg, int *fds, int max, char *err, size_t errlen) {
  int n = 0;
  if (cg->dir[0]) {
    if (max < 1 || (fds[n] = fcntl(cg->fd, F_DUPFD_CLOEXEC, 3)) < 0) { snprintf(err, errlen, "cgroup %s: dup: %s", cg->dir, strerror(errno ? errno : EMFILE)); return -1; }
    return 1;
  }
  /* Each v1 hierarchy once (controllers mounted together share a directory). */
  for (int c = 0; c < CG_N; c++) {
    if (!cg->path[c][0] || G.v1_shared[c]) continue;
    char p[600];
    if (n == max || xfmt(p, sizeof p, "%s/tasks", cg->path[c]) != 0 || (fds[n] = open(p, O_WRONLY | O_CLOEXEC)) < 0) {
      snprintf(err, errlen, "cgroup %s: open tasks: %s", cg->path[c], strerror(n == max ? EMFILE : errno));
      while (n > 0) close(fds[--n]);
      return -1;
    }
    n++;
  }
  return n;
}

int cg_attach(const cg_set *cg, pid_t pid, char *err, size_t errlen) {
  char v[32];
  snprintf(v, sizeof v, "%ld", (long)pid);
  return cg->dir[0] ? write_file(cg->dir, "cgroup.procs", v, err, errlen) : 0;
}

int cg_rename(cg_set *cg, const char *name, char *err, size_t errlen) {
  if (cg->dir[0]) { snprintf(err, errlen, "cgroup %s: v2 cgroups cannot be renamed", cg->dir); errno = ENOTSUP; return -1; }
  for (int c = 0; c < CG_N; c++) {
    if (!cg->path[c][0] || G.v1_shared[c]) continue;
    char to[sizeof cg->path[c]];
    const char *slash = strrchr(cg->path[c], '/');
    if (!slash || xfmt(to, sizeof to, "%.*s/%s", (int)(slash - cg->path[c]), cg->path[c], name) != 0) {
      snprintf(err, errlen, "cgroup %s: path too long", CG_NAMES[c]);
      errno = ENAMETOOLONG;
      return -1;
    }
    if (rename(cg->path[c], to) != 0) {
      int e = errno;
      snprintf(err, errlen, "cgroup %s: rename %.400s to %s: %s", CG_NAMES[c], cg->path[c], name, strerror(e));
      errno = e;
      return -1;
    }
    memcpy(cg->path[c], to, sizeof to);
    for (int d = c + 1; d < CG_N; d++)   /* controllers mounted with it share the directory */
      if (G.v1_shared[d] && cg->path[d][0] && !strcmp(G.v1_mnt[d], G.v1_mnt[c])) memcpy(cg->path[d], to, sizeof to);
  }
  return 0;
}

bool cg_can_freeze(const cg_set *cg) {
  return cg->dir[0] ? G.v2_has[CG_FREEZER] : cg->path[CG_FREEZER][0] != 0;
}

/* A failed freeze or thaw is said on stderr (which file, why): the caller's error is generic. */
static int freeze_failed(const char *dir, const char *file, bool frozen) {
  int e = errno;
  fprintf(stderr, "sandboxd: cgroup: %s %s/%s: %s\n", frozen ? "freezing" : "thawing", dir, file,
          e == ETIMEDOUT ? "the kernel did not confirm it within 5 s" : strerror(e));
  errno = e;
  return -1;
}

int cg_freeze(const cg_set *cg, bool frozen) {
  if (cg->dir[0]) {
    if (write_file(cg->dir, "cgroup.freeze", frozen ? "1" : "0", NULL, 0) != 0) return freeze_failed(cg->dir, "cgroup.freeze", frozen);
    /* asynchronous: wait for the kernel */
    return events_wait(cg->dir, "frozen", frozen ? 1 : 0) == 0 ? 0 : freeze_failed(cg->dir, "cgroup.events", frozen);
  }
  const char *state = frozen ? "FROZEN" : "THAWED";
  char p[600], cur[64];
  if (xfmt(p, sizeof p, "%s/freezer.state", cg->path[CG_FREEZER]) != 0) return -1;
  if (procfile_write(p, state) != 0) return freeze_failed(cg->path[CG_FREEZER], "freezer.state", frozen);
  /* FREEZING → FROZEN is asynchronous; wait for the kernel to confirm (bounded). */
  for (int i = 0; i < WAIT_MS; i++) {
    if (procfile_read(p, cur, sizeof cur) != 0) return freeze_failed(cg->path[CG_FREEZER], "freezer.state", frozen);
    if (!strncmp(cur, state, strlen(state))) return 0;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  errno = ETIMEDOUT;
  return freeze_failed(cg->path[CG_FREEZER], "freezer.state", frozen);
}

void cg_kill_all(const cg_set *cg) {
  if (cg->dir[0] && G.v2_kill) (void)write_file(cg->dir, "cgroup.kill", "1", NULL, 0);
  else if (!cg->dir[0] && cg->path[CG_FREEZER][0]) (void)cg_freeze(cg, false);
}

void cg_read_usage(const cg_set *cg, cg_usage *u) {
  memset(u, 0, sizeof *u);
  char buf[8192], v[64];
  bool f1, f2;
  if (cg->dir[0]) {
    if (G.v2_has[CG_MEMORY] && read_file(cg->dir, "memory.current", v, sizeof v) == 0) {
      u->has_mem = true;
      u->mem_usage = strtoull(v, NULL, 10);
      if (read_file(cg->dir, "memory.max", v, sizeof v) == 0) u->mem_limit = strtoull(v, NULL, 10);   /* "max": 0 */
      if (read_file(cg->dir, "memory.stat", buf, sizeof buf) == 0) u->mem_cache = field(buf, "file", NULL);
      if ((u->has_peak = read_file(cg->dir, "memory.peak", v, sizeof v) == 0)) u->mem_peak = strtoull(v, NULL, 10);   /* >= 5.19 */
      if (read_file(cg->dir, "memory.events", buf, sizeof buf) == 0) u->oom_kills = field(buf, "oom_kill", NULL);
    }
    if (read_file(cg->dir, "cpu.stat", buf, sizeof buf) == 0) {
      u->cpu_ns = field(buf, "usage_usec", &u->has_cpu) * 1000;
      u->nr_throttled = field(buf, "nr_throttled", &f1);
      u->throttled_us = field(buf, "throttled_usec", &f2);
      u->has_throttle = f1 && f2;
    }
    return;
  }
  const char *d = cg->path[CG_MEMORY];
  if (d[0] && read_file(d, "memory.usage_in_bytes", v, sizeof v) == 0) {
    u->has_mem = true;
    u->mem_usage = strtoull(v, NULL, 10);
    if (read_file(d, "memory.limit_in_bytes", v, sizeof v) == 0) u->mem_limit = strtoull(v, NULL, 10);
    if (read_file(d, "memory.stat", buf, sizeof buf) == 0) u->mem_cache = field(buf, "total_cache", NULL);
    if ((u->has_peak = read_file(d, "memory.max_usage_in_bytes", v, sizeof v) == 0)) u->mem_peak = strtoull(v, NULL, 10);
    if (read_file(d, "memory.oom_control", buf, sizeof buf) == 0) u->oom_kills = field(buf, "oom_kill", NULL);
  }
  if (cg->path[CG_CPUACCT][0] && read_file(cg->path[CG_CPUACCT], "cpuacct.usage", v, sizeof v) == 0) {
    u->has_cpu = true;
    u->cpu_ns = strtoull(v, NULL, 10);
  }
  if (cg->path[CG_CPU][0] && read_file(cg->path[CG_CPU], "cpu.stat", buf, sizeof buf) == 0) {
    u->nr_throttled = field(buf, "nr_throttled", &f1);
    u->throttled_us = field(buf, "throttled_time", &f2) / 1000;   /* v1 counts ns */
    u->has_throttle = f1 && f2;
  }
}

/* ---- leftovers of a crashed run ---- */

/* Every task of dir killed (thawed first: v1 frozen tasks die only once thawed), dir removed. */
static void kill_cgroup(const char *dir, bool v2) {
  char buf[65536];
  if (v2) {
    (void)write_file(dir, "cgroup.freeze", "0", NULL, 0);
    if (write_file(dir, "cgroup.kill", "1", NULL, 0) == 0) (void)events_wait(dir, "populated", 0);
  } else {
    (void)write_file(dir, "freezer.state", "THAWED", NULL, 0);
  }
  for (int round = 0; round < 1000; round++) {   /* without cgroup.kill, and whatever was not empty yet */
    if (read_file(dir, "cgroup.procs", buf, sizeof buf) != 0 || !buf[0]) break;
    for (char *save = NULL, *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save))
      kill((pid_t)atoi(t), SIGKILL);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  int rc = rmdir(dir), e = errno;
  if (rc != 0 && e == EBUSY && v2 && events_wait(dir, "populated", 0) == 0) { rc = rmdir(dir); e = errno; }
  if (rc != 0 && e != ENOENT) fprintf(stderr, "sandboxd: cleanup: rmdir %s: %s\n", dir, strerror(e));
}

static void sweep(const char *p, bool v2) {
  DIR *d = opendir(p);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_type != DT_DIR || de->d_name[0] == '.') continue;
    char cg[600];
    if (xfmt(cg, sizeof cg, "%s/%s", p, de->d_name) == 0) kill_cgroup(cg, v2);
  }
  closedir(d);
}

void cg_cleanup_stale(const char *state_dir) {
  if (G.mode == MODE_V2) {
    if (G.parent[0]) sweep(G.parent, true);   /* the parent itself stays: it has its controllers */
    return;
  }
  char parent[64], p[600];
  parent_name(state_dir, parent, sizeof parent);
  for (int c = 0; c < CG_N; c++) {
    if (!G.v1_mnt[c][0] || G.v1_shared[c] || xfmt(p, sizeof p, "%s/%s", G.v1_mnt[c], parent) != 0) continue;
    sweep(p, false);
    (void)rmdir(p);
  }
}

void cg_shutdown(void) {
  if (G.mode == MODE_V2 && G.parent[0] && rmdir(G.parent) != 0 && errno != ENOENT)
    fprintf(stderr, "sandboxd: cgroup: rmdir %s: %s\n", G.parent, strerror(errno));
}
