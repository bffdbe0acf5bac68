/* cgroups.h — a sandbox's cgroups: where the host has them, its process, memory and CPU limits,
 * the freezer that pauses it, the kill that ends it and the counters its metrics read.
 *
 * cg_init finds the hierarchy once: cgroup v2 when a cgroup2 file system has the controllers (a
 * v2-only host), else v1 controllers when they are mounted (v1, or v1 with an empty unified
 * mount), else nothing. On v2 sandboxd works in a subtree it owns ("the base"): the directory
 * given with --cgroup; else its own cgroup when that is delegated to it (systemd Delegate=yes:
 * the trusted.delegate xattr as root, a writable cgroup rootless), sandboxd and whatever else is
 * in it then moving to the leaf <base>/supervisor (no internal processes); else, as root, the
 * hierarchy's root; else (rootless, nothing delegated) none, and the report says so. Sandboxes
 * live in <base>/sandboxd-<hash of the state dir>/<name>, with the controllers enabled on the way
 * down. On v1 one directory per hierarchy: <mount>/sandboxd-<hash>/<name>.
 *
 * Not thread-safe per set: the sandbox serializes its own calls. */
#ifndef SANDBOXD_CGROUPS_H
#define SANDBOXD_CGROUPS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum { CG_PIDS, CG_MEMORY, CG_CPU, CG_FREEZER, CG_CPUACCT, CG_N };

/* A sandbox's cgroups. v1: one directory per controller ("" when it is not used; controllers
 * mounted together share one, made and removed through the first). v2: one directory, and an fd
 * of it. */
typedef struct {
  char path[CG_N][512];
  char dir[512];
  int fd;
} cg_set;

/* Once, before any other call: finds the hierarchy and, on v2, prepares the subtree for
 * state_dir (given: --cgroup DIR, else NULL). -1 with err only when `given` cannot be used;
 * anything else missing is reported by cg_probe. */
int  cg_init(const char *state_dir, const char *given, char *err, size_t errlen);

/* What the host offers; appends what is missing, and why, to why (a "; "-separated list), and a
 * one-line description (hierarchy, where, what) to desc. */
typedef struct { bool pids, memory, cpu, freezer; } cg_caps;
void cg_probe(cg_caps *caps, char *why, size_t whylen, char *desc, size_t desclen);

typedef struct { long pids_max; long memory_mb; int cpu_count; } cg_limits;   /* > 0 each */

/* The set for sandbox `name` of state_dir, with its limits written. 0, or -1 with err naming the
 * file that failed (nothing left behind). A host without cgroups gives an empty set and 0. */
int  cg_create(cg_set *cg, const char *state_dir, const char *name, const cg_limits *lim, char *err, size_t errlen);
/* Writes lim's values. 0, or -1 with err naming the file. */
int  cg_set_limits(cg_set *cg, const cg_limits *lim, char *err, size_t errlen);
/* Removes the set (v1: and the per-state-dir parent when it was the last). `id` names it in
 * errors. Every task must be gone. */
void cg_remove(cg_set *cg, const char *id);

/* How a sandbox's init gets into its set. CG_BORN (v2): its starter (init.h) clones it into the
 * cgroup (clone3 CLONE_INTO_CGROUP), so the set is made first. CG_JOINS (v1): the init writes "0"
 * into each hierarchy's `tasks` file before it reports READY (only the calling thread moves,
 * which takes none of the global locks a move of another process takes), so the set can be made
 * while the init sets itself up. CG_NONE: no cgroups. */
typedef enum { CG_NONE, CG_BORN, CG_JOINS } cg_entry;
cg_entry cg_entry_mode(void);
/* What the init needs to get into the set: v2 the cgroup's directory, v1 each hierarchy's
 * `tasks` file opened for writing. Up to max descriptors, the caller's to close; the count, or
 * -1 with err. */
int  cg_boot_fds(const cg_set *cg, int *fds, int max, char *err, size_t errlen);
/* v2 without CLONE_INTO_CGROUP (kernel < 5.7): moves process pid in. 0, or -1 with err. */
int  cg_attach(const cg_set *cg, pid_t pid, char *err, size_t errlen);

/* v1: the set's directories renamed to `name` (a set made ahead for a sandbox whose id comes
 * later); its tasks stay in it. 0, or -1 with err (what was renamed already stays so: each path
 * is right). v2 cannot rename: -1 (ENOTSUP). */
int  cg_rename(cg_set *cg, const char *name, char *err, size_t errlen);
bool cg_can_freeze(const cg_set *cg);
/* Freezes or thaws every task and waits until the kernel says so (bounded). 0, or -1 with errno. */
int  cg_freeze(const cg_set *cg, bool frozen);
/* With the caller's SIGKILL to the init: v2 kills every task at once (cgroup.kill, kernel >= 5.14),
 * v1 thaws the freezer (frozen v1 tasks die only once thawed). */
void cg_kill_all(const cg_set *cg);

/* Counters for the metrics and the tests; each `has_` says whether the host gave it. */
typedef struct {
  bool has_cpu, has_mem, has_peak, has_throttle;
  uint64_t cpu_ns;                            /* CPU time of every task, ever */
  uint64_t mem_limit, mem_usage, mem_cache;   /* bytes; mem_usage includes mem_cache; limit 0: none */
  uint64_t mem_peak;                          /* the highest mem_usage seen */
  uint64_t oom_kills;                         /* tasks the OOM killer chose inside */
  uint64_t nr_throttled, throttled_us;        /* CPU quota periods throttled, time throttled */
} cg_usage;
void cg_read_usage(const cg_set *cg, cg_usage *u);

/* Kills every task of every cgroup a crashed run of state_dir left, removes them. */
void cg_cleanup_stale(const char *state_dir);
/* At exit, every sandbox gone: removes the per-state-dir parent. */
void cg_shutdown(void);
#endif
