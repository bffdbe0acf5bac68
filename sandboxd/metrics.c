/* metrics.c — a sandbox's metric samples (metrics.h). */
#include "metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

void mx_init(mx_ring *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  clock_gettime(CLOCK_MONOTONIC, &r->mono_last);
}

void mx_free(mx_ring *r) {
  free(r->samples);
  r->samples = NULL;
  pthread_mutex_destroy(&r->mu);
}

/* Bytes allocated below dirfd (its own entry not counted), at most `*budget` entries and
 * MX_DU_DEPTH levels: beyond them the sum is a lower bound. */
#define MX_DU_DEPTH 128
static uint64_t du_below(int dirfd, int depth, uint64_t *budget) {
  int dup_fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) { if (dup_fd >= 0) close(dup_fd); return 0; }
  uint64_t sum = 0;
  struct dirent *de;
  while (*budget > 0 && (de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    (*budget)--;
    struct stat st;
    if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) sum += (uint64_t)st.st_blocks * 512 / st.st_nlink;   /* shared inodes once */
    else sum += (uint64_t)st.st_blocks * 512;
    if (S_ISDIR(st.st_mode) && depth < MX_DU_DEPTH) {
      int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) { sum += du_below(sub, depth + 1, budget); close(sub); }
    }
  }
  closedir(d);
  return sum;
}

int mx_query(mx_ring *r, const mx_source *src, int64_t from_ms, int64_t to_ms, mx_sample **out, size_t *n) {
  *out = NULL;
  *n = 0;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&r->mu);
  double since_ms = (double)(now.tv_sec - r->mono_last.tv_sec) * 1e3 + (double)(now.tv_nsec - r->mono_last.tv_nsec) / 1e6;
  bool fresh = r->n == 0 || since_ms >= MX_INTERVAL_MS;
  pthread_mutex_unlock(&r->mu);
  mx_sample m;
  memset(&m, 0, sizeof m);
  if (fresh) {
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    m.ts_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
    m.cpu_count = src->cpu_count > 0 ? src->cpu_count : 1;
    struct sysinfo si;
    uint64_t host_mem = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : 0;
    m.mem_total = host_mem;
    cg_usage u;
    cg_read_usage(src->cg, &u);
    if (u.has_mem) {
      if (u.mem_limit && (!host_mem || u.mem_limit < host_mem)) m.mem_total = u.mem_limit;
      m.mem_cache = u.mem_cache;
      m.mem_used = u.mem_usage > u.mem_cache ? u.mem_usage - u.mem_cache : 0;
    }
    uint64_t budget = MX_DU_ENTRIES;
    int dfd = open(src->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = -1; dfd >= 0 && i < src->nsys; i++) {   /* the upper layers: what the sandbox wrote */
      char name[32];
      if (i < 0) snprintf(name, sizeof name, "upper");
      else snprintf(name, sizeof name, "upper-%s", src->sys[i]);
      int u2 = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (u2 >= 0) { m.disk_used += du_below(u2, 0, &budget); close(u2); }
    }
    if (dfd >= 0) close(dfd);
    struct statvfs vf;
    if (statvfs(src->dir, &vf) == 0) m.disk_total = (uint64_t)vf.f_blocks * vf.f_frsize;
    uint64_t cpu_ns = u.has_cpu ? u.cpu_ns : 0;
    pthread_mutex_lock(&r->mu);
    double wall_ns = ((double)(now.tv_sec - r->mono_last.tv_sec) * 1e9 + (double)(now.tv_nsec - r->mono_last.tv_nsec));
    if (wall_ns > 0 && cpu_ns >= r->cpu_ns_last) m.cpu_pct = (double)(cpu_ns - r->cpu_ns_last) / wall_ns / m.cpu_count * 100.0;
    if (m.cpu_pct > 100) m.cpu_pct = 100;
    r->cpu_ns_last = cpu_ns;
    r->mono_last = now;
    if (!r->samples) r->samples = malloc(MX_MAX * sizeof *r->samples);   /* bounded: one ring per sandbox */
    if (r->samples) {
      if (r->n == MX_MAX) memmove(r->samples, r->samples + 1, --r->n * sizeof *r->samples);
      r->samples[r->n++] = m;
    }
    pthread_mutex_unlock(&r->mu);
  }
  pthread_mutex_lock(&r->mu);
  mx_sample *v = malloc((r->n ? r->n : 1) * sizeof *v);
  if (v)
    for (size_t i = 0; i < r->n; i++)
      if (r->samples[i].ts_ms >= from_ms && r->samples[i].ts_ms <= to_ms) v[(*n)++] = r->samples[i];
  pthread_mutex_unlock(&r->mu);
  if (!v) return -1;
  *out = v;
  return 0;
}
