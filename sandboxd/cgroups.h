/* cgroups.h — a sandbox's cgroups: where the host has them, the pids and memory limits, the
 * freezer that pauses it and the counters its metrics read. One set per sandbox, under a parent
 * of sandboxd's own per state dir; the creating thread joins the set around the clone of the
 * init, so the init is born inside (ISOLATION.md, "Creation"). Not thread-safe per set: the
 * sandbox serializes its own calls. */
#ifndef SANDBOXD_CGROUPS_H
#define SANDBOXD_CGROUPS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { CG_PIDS, CG_MEMORY, CG_FREEZER, CG_CPUACCT, CG_N };

/* A sandbox's cgroups: one directory per v1 controller, "" when that controller is not used. */
typedef struct { char path[CG_N][512]; } cg_set;

/* What the host offers sandboxd, probed at start-up. */
typedef struct { bool pids, memory, freezer; } cg_caps;
/* Fills caps; appends what is missing, and why, to why (a "; "-separated list). */
void cg_probe(cg_caps *caps, char *why, size_t whylen);

typedef struct { long pids_max; long memory_mb; } cg_limits;   /* > 0 each */

/* The set for sandbox `id` of state_dir, with its limits written. 0, or -1 with err naming the
 * file that failed (nothing left behind). A host without cgroups gives an empty set and 0. */
int  cg_create(cg_set *cg, const char *state_dir, const char *id, const cg_limits *lim, char *err, size_t errlen);
/* Writes lim's values (a claimed spare's non-default limits). 0, or -1 with errno. */
int  cg_set_limits(cg_set *cg, const cg_limits *lim);
/* Renames each directory to `id` within its parent (a claimed spare). 0, or -1 with errno. */
int  cg_rename(cg_set *cg, const char *id);
/* Removes the set and, when it was the last, the per-state-dir parent. `id` names it in errors. */
void cg_remove(cg_set *cg, const char *id);

/* Where the calling thread was before cg_enter: cg_leave takes it back. */
typedef struct { char path[CG_N][512]; } cg_home;
/* The calling thread (only it) joins the set: what it clones is born inside. 0, or -1 with err. */
int  cg_enter(const cg_set *cg, cg_home *home, char *err, size_t errlen);
void cg_leave(const cg_set *cg, const cg_home *home);

bool cg_can_freeze(const cg_set *cg);
/* Freezes or thaws every task and waits until the kernel says so (bounded). 0, or -1 with errno. */
int  cg_freeze(const cg_set *cg, bool frozen);

/* Counters for the metrics; each `has_` says whether the host gave it. */
typedef struct {
  bool has_cpu, has_mem;
  uint64_t cpu_ns;                 /* CPU time of every task, ever */
  uint64_t mem_limit, mem_usage, mem_cache;   /* bytes; mem_usage includes mem_cache */
} cg_usage;
void cg_read_usage(const cg_set *cg, cg_usage *u);

/* Kills every task of every cgroup a crashed run of state_dir left, removes them. */
void cg_cleanup_stale(const char *state_dir);
#endif
