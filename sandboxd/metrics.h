/* metrics.h — a sandbox's metrics, as E2B's getMetrics has them: samples taken when asked (at
 * most one per MX_INTERVAL_MS; the newest MX_MAX kept). CPU from the sandbox's cgroup, as a share
 * of the sandbox's CPUs since the previous sample (or the start); memory from its cgroup (used
 * without page cache, the limit as total); disk: what its upper layers hold (at most
 * MX_DU_ENTRIES entries counted) of the state dir's file system. */
#ifndef SANDBOXD_METRICS_H
#define SANDBOXD_METRICS_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "cgroups.h"

typedef struct {
  int64_t ts_ms;
  int cpu_count;
  double cpu_pct;
  uint64_t mem_used, mem_total, mem_cache, disk_used, disk_total;
} mx_sample;
#define MX_INTERVAL_MS 1000
#define MX_MAX 720
#define MX_DU_ENTRIES 1000000

/* One sandbox's samples; thread-safe. */
typedef struct {
  pthread_mutex_t mu;
  mx_sample *samples;          /* oldest first; MX_MAX allocated at the first sample */
  size_t n;
  uint64_t cpu_ns_last;        /* the CPU counter at the last sample */
  struct timespec mono_last;   /* mx_init, then the last sample */
} mx_ring;
void mx_init(mx_ring *r);
void mx_free(mx_ring *r);

/* What a sample reads: the sandbox's cgroups, its directory and the upper layers in it ("upper",
 * then "upper-<sys[i]>"). */
typedef struct {
  const cg_set *cg;
  const char *dir;
  const char (*sys)[16];
  int nsys;
  int cpu_count;               /* the sandbox's CPUs: the share cpu_pct is of */
} mx_source;

/* A sample now if due, then every sample with from_ms <= ts_ms <= to_ms (*out: free()). 0 or -1. */
int mx_query(mx_ring *r, const mx_source *src, int64_t from_ms, int64_t to_ms, mx_sample **out, size_t *n);
#endif
