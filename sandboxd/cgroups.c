/* cgroups.c — a sandbox's cgroups (cgroups.h): cgroup v1 pids, memory, freezer and cpuacct. */
#include "cgroups.h"
#include "procfile.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup"
static const char *const CG_NAMES[CG_N] = {"pids", "memory", "freezer", "cpuacct"};   /* cpuacct: metrics */

/* Path formatting; inputs are bounded by the callers, so truncation means a bug: fail closed. */
__attribute__((format(printf, 3, 4))) static int xfmt(char *buf, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, cap, f, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap) { buf[0] = 0; return -1; }
  return 0;
}

/* Sandboxes of different state dirs (parallel test runs) get separate cgroup parents. */
static void cg_parent(const char *state_dir, char *out, size_t cap) {
  char real[4096];
  const char *p = realpath(state_dir, real) ? real : state_dir;
  uint64_t h = 1469598103934665603ull;
  for (; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  snprintf(out, cap, "sandboxd-%016llx", (unsigned long long)h);
}

static bool cg_available(int c) {
  char p[128];
  xfmt(p, sizeof p, CG_ROOT "/%s/cgroup.procs", CG_NAMES[c]);
  return access(p, W_OK) == 0;
}

void cg_probe(cg_caps *caps, char *why, size_t whylen) {
  size_t off = strlen(why);
#define WHY(...) do { if (off < whylen) off += (size_t)snprintf(why + off, whylen - off, __VA_ARGS__); } while (0)
  caps->pids = cg_available(CG_PIDS);
  caps->memory = cg_available(CG_MEMORY);
  caps->freezer = cg_available(CG_FREEZER);
  if (!caps->pids) WHY("no writable cgroup v1 pids controller: no process limit; ");
  if (!caps->memory) WHY("no writable cgroup v1 memory controller: no memory limit; ");
  if (!caps->freezer) WHY("no writable cgroup v1 freezer: pause uses SIGSTOP; ");
#undef WHY
}

void cg_remove(cg_set *cg, const char *id) {
  for (int c = 0; c < CG_N; c++) {
    if (!cg->path[c][0]) continue;
    if (rmdir(cg->path[c]) != 0 && errno != ENOENT)
      fprintf(stderr, "sandboxd: sandbox %s: rmdir %s: %s\n", id, cg->path[c], strerror(errno));
    /* The per-state-dir parent goes with its last sandbox (EBUSY while others live). */
    char *slash = strrchr(cg->path[c], '/');
    if (slash) { *slash = 0; (void)rmdir(cg->path[c]); }
    cg->path[c][0] = 0;
  }
}

static int write_limit(const cg_set *cg, int c, const cg_limits *lim, char *p, size_t cap) {
  char v[64];
  if (c == CG_PIDS) {
    xfmt(p, cap, "%s/pids.max", cg->path[c]);
    snprintf(v, sizeof v, "%ld", lim->pids_max);
  } else if (c == CG_MEMORY) {
    xfmt(p, cap, "%s/memory.limit_in_bytes", cg->path[c]);
    snprintf(v, sizeof v, "%ld", lim->memory_mb * 1048576L);
  } else {
    return 0;
  }
  return procfile_write(p, v);
}

int cg_create(cg_set *cg, const char *state_dir, const char *id, const cg_limits *lim, char *err, size_t errlen) {
  memset(cg, 0, sizeof *cg);
  char parent[64];
  cg_parent(state_dir, parent, sizeof parent);
  for (int c = 0; c < CG_N; c++) {
    if (!cg_available(c)) continue;
    char p[600];
    xfmt(p, sizeof p, CG_ROOT "/%s/%s", CG_NAMES[c], parent);
    xfmt(cg->path[c], sizeof cg->path[c], "%s/%s", p, id);
    int rc = -1;
    /* Retry: a concurrent destroy may remove the empty parent between the two mkdirs. */
    for (int tries = 0; rc != 0 && tries < 5; tries++) {
      if (mkdir(p, 0755) != 0 && errno != EEXIST) break;
      rc = mkdir(cg->path[c], 0755);
      if (rc != 0 && errno != ENOENT) break;
    }
    if (rc != 0) { cg->path[c][0] = 0; goto fail; }
    if (write_limit(cg, c, lim, p, sizeof p) != 0) goto fail;
    continue;
  fail:
    snprintf(err, errlen, "cgroup %s: %s: %s", CG_NAMES[c], p, strerror(errno));
    cg_remove(cg, id);
    return -1;
  }
  return 0;
}

int cg_set_limits(cg_set *cg, const cg_limits *lim) {
  char p[600];
  for (int c = 0; c < CG_N; c++)
    if (cg->path[c][0] && write_limit(cg, c, lim, p, sizeof p) != 0) return -1;
  return 0;
}

int cg_rename(cg_set *cg, const char *id) {
  char to[512];
  for (int c = 0; c < CG_N; c++) {
    if (!cg->path[c][0]) continue;
    const char *slash = strrchr(cg->path[c], '/');
    if (!slash || xfmt(to, sizeof to, "%.*s/%s", (int)(slash - cg->path[c]), cg->path[c], id) != 0) { errno = ENAMETOOLONG; return -1; }
    if (rename(cg->path[c], to) != 0) return -1;   /* v1 allows a rename within the parent */
    memcpy(cg->path[c], to, sizeof to);
  }
  return 0;
}

/* Joining a v1 cgroup through `cgroup.procs` (or with another task's pid) takes the global
 * cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period whenever no cgroup
 * write happened in the last few tens of milliseconds (9-40 ms measured, on the critical path of
 * every create). Moving only the calling thread ("0" into the `tasks` file) takes no such lock.
 * So the creating thread joins the sandbox's cgroups, clones the init there (a child is born in
 * its parent thread's cgroups: limits apply from its first instruction), and goes back. */
int cg_enter(const cg_set *cg, cg_home *home, char *err, size_t errlen) {
  char buf[4096];
  memset(home, 0, sizeof *home);
  bool any = false;
  for (int c = 0; c < CG_N; c++) any = any || cg->path[c][0];
  if (!any) return 0;
  if (procfile_read("/proc/thread-self/cgroup", buf, sizeof buf) != 0) {
    snprintf(err, errlen, "read /proc/thread-self/cgroup: %s", strerror(errno));
    return -1;
  }
  /* Lines "<id>:<controller,...>:<path>". */
  for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    for (int c = 0; c < CG_N; c++) {
      size_t n = strlen(CG_NAMES[c]);
      for (char *q = c1 + 1; (q = strstr(q, CG_NAMES[c])) != NULL; q += n)
        if ((q == c1 + 1 || q[-1] == ',') && (q[n] == 0 || q[n] == ','))
          if (xfmt(home->path[c], sizeof home->path[c], CG_ROOT "/%s%s", CG_NAMES[c], c2[1] == '/' && !c2[2] ? "" : c2 + 1) != 0)
            home->path[c][0] = 0;
    }
  }
  char p[600];
  for (int c = 0; c < CG_N; c++) {
    if (!cg->path[c][0]) continue;
    if (!home->path[c][0]) { snprintf(err, errlen, "cgroup %s: cannot tell this thread's cgroup", CG_NAMES[c]); goto fail; }
    xfmt(p, sizeof p, "%s/tasks", cg->path[c]);
    if (procfile_write(p, "0") != 0) { snprintf(err, errlen, "cgroup join %s: %s", p, strerror(errno)); goto fail; }
  }
  return 0;
fail:
  for (int c = 0; c < CG_N; c++) if (cg->path[c][0] && home->path[c][0]) {
    xfmt(p, sizeof p, "%s/tasks", home->path[c]);
    (void)procfile_write(p, "0");
  }
  return -1;
}

/* Back to where the thread came from. Failing here would leave a sandboxd thread inside a sandbox's
 * cgroups (its memory charged there, the cgroup undeletable): try the hierarchy root as a last resort. */
void cg_leave(const cg_set *cg, const cg_home *home) {
  char p[600];
  for (int c = 0; c < CG_N; c++) {
    if (!cg->path[c][0]) continue;
    xfmt(p, sizeof p, "%s/tasks", home->path[c]);
    if (procfile_write(p, "0") == 0) continue;
    fprintf(stderr, "sandboxd: cgroup: back to %s: %s\n", p, strerror(errno));
    xfmt(p, sizeof p, CG_ROOT "/%s/tasks", CG_NAMES[c]);
    if (procfile_write(p, "0") != 0) fprintf(stderr, "sandboxd: cgroup: back to %s: %s\n", p, strerror(errno));
  }
}

bool cg_can_freeze(const cg_set *cg) { return cg->path[CG_FREEZER][0] != 0; }

int cg_freeze(const cg_set *cg, bool frozen) {
  const char *state = frozen ? "FROZEN" : "THAWED";
  char p[600], cur[64];
  xfmt(p, sizeof p, "%s/freezer.state", cg->path[CG_FREEZER]);
  if (procfile_write(p, state) != 0) return -1;
  /* FREEZING → FROZEN is asynchronous; wait for the kernel to confirm (bounded). */
  for (int i = 0; i < 5000; i++) {
    if (procfile_read(p, cur, sizeof cur) != 0) return -1;
    if (!strncmp(cur, state, strlen(state))) return 0;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  errno = ETIMEDOUT;
  return -1;
}

static uint64_t read_u64(const char *path) {
  char buf[64];
  return procfile_read(path, buf, sizeof buf) == 0 ? strtoull(buf, NULL, 10) : 0;
}

/* "<key> <value>" of a cgroup stat file. */
static uint64_t stat_field(const char *path, const char *key) {
  char buf[8192];
  if (procfile_read(path, buf, sizeof buf) != 0) return 0;
  size_t k = strlen(key);
  for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (!strncmp(l, key, k) && l[k] == ' ') return strtoull(l + k + 1, NULL, 10);
  return 0;
}

void cg_read_usage(const cg_set *cg, cg_usage *u) {
  memset(u, 0, sizeof *u);
  char p[600];
  if (cg->path[CG_MEMORY][0]) {
    u->has_mem = true;
    xfmt(p, sizeof p, "%s/memory.limit_in_bytes", cg->path[CG_MEMORY]);
    u->mem_limit = read_u64(p);
    xfmt(p, sizeof p, "%s/memory.stat", cg->path[CG_MEMORY]);
    u->mem_cache = stat_field(p, "total_cache");
    xfmt(p, sizeof p, "%s/memory.usage_in_bytes", cg->path[CG_MEMORY]);
    u->mem_usage = read_u64(p);
  }
  if (cg->path[CG_CPUACCT][0]) {
    u->has_cpu = true;
    xfmt(p, sizeof p, "%s/cpuacct.usage", cg->path[CG_CPUACCT]);
    u->cpu_ns = read_u64(p);
  }
}

/* ---- leftovers of a crashed run ---- */
static void kill_cgroup(const char *dir) {
  char p[600], buf[65536];
  xfmt(p, sizeof p, "%s/freezer.state", dir);
  (void)procfile_write(p, "THAWED");
  xfmt(p, sizeof p, "%s/cgroup.procs", dir);
  for (int round = 0; round < 1000; round++) {
    if (procfile_read(p, buf, sizeof buf) != 0 || !buf[0]) break;
    for (char *save = NULL, *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save))
      kill((pid_t)atoi(t), SIGKILL);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  if (rmdir(dir) != 0 && errno != ENOENT) fprintf(stderr, "sandboxd: cleanup: rmdir %s: %s\n", dir, strerror(errno));
}

void cg_cleanup_stale(const char *state_dir) {
  char parent[64], p[600];
  cg_parent(state_dir, parent, sizeof parent);
  for (int c = 0; c < CG_N; c++) {
    xfmt(p, sizeof p, CG_ROOT "/%s/%s", CG_NAMES[c], parent);
    DIR *d = opendir(p);
    if (!d) continue;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      if (de->d_type != DT_DIR || de->d_name[0] == '.') continue;
      char cg[600];
      if (xfmt(cg, sizeof cg, "%s/%s", p, de->d_name) == 0) kill_cgroup(cg);
    }
    closedir(d);
    (void)rmdir(p);
  }
}
