/* sandbox.h — one isolated sandbox: user/mount/pid/uts/ipc(/net) namespaces, a copy-on-write
 * root, an init process (pid 1 inside) that spawns every command, and cgroup limits where the
 * host has them. Thread-safe: every function may be called from any connection thread. */
#ifndef SANDBOXD_SANDBOX_H
#define SANDBOXD_SANDBOX_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "metrics.h"

typedef struct sbx sbx_t;

/* A volume (volumes.h) to bind-mount at path (absolute, clean, checked by the caller). */
struct volume;
typedef struct sbx_mount { struct volume *volume; const char *path; } sbx_mount;
#define SBX_MAX_MOUNTS 16
#define SBX_MOUNT_PATH_MAX 1024

typedef struct {
  const char *id;               /* lowercase alnum, unique: the id of a sandbox booted now (a claimed
                                 * spare keeps its own, sbx_id) */
  const char *state_dir;        /* sandboxd state dir; the sandbox keeps its layers under <state_dir>/sandboxes/<id> */
  bool internet;                /* allow_internet_access (net.h: as root a rule, rootless pasta or not) */
  struct egress_rules *egress;  /* its egress rules (egress_rules.h), emptied when sbx_create hands them
                                 * on (the caller frees them after either way: egress_rules_free of an
                                 * emptied set is a no-op); NULL: all traffic, or none without `internet` */
  const char *const *envs;      /* NULL-terminated "NAME=VALUE" list added to every process (create envVars) */
  long memory_mb;               /* cgroup memory limit; 0 = the default (sbx_init) (ignored without the controller) */
  long pids_max;                /* cgroup pids limit; 0 = the default */
  int cpu_count;                /* cgroup CPU quota, in CPUs; 0 = the default */
  struct layer *layer;          /* a snapshot's top layer (layers.h) to start from, NULL: the template; the
                                 * sandbox holds its own reference */
  const sbx_mount *mounts;      /* volumes bind-mounted (nosuid, nodev); the sandbox holds its own mounts */
  size_t nmounts;
  const char *workdir;          /* its commands' working directory when they name none (a template's
                                 * WORKDIR); NULL or "": the user's home */
} sbx_config;
#define SBX_WORKDIR_MAX 1024
#define SBX_DEFAULT_MEMORY_MB 2048
#define SBX_DEFAULT_PIDS_MAX 4096
#define SBX_DEFAULT_CPU_COUNT 2      /* at most the host's CPUs */
bool  sbx_valid_id(const char *id);    /* 1..64 of [a-z0-9]: what sbx_config.id accepts (a directory name) */

/* Capabilities probed once at start-up; `why` says what is missing and why. */
/* Once, before sbx_cleanup_stale: every sandbox's limits (the base template's cpuCount and
 * memoryMB; 0 = SBX_DEFAULT_*) and the cgroup subtree given with --cgroup (NULL: sandboxd finds
 * one, cgroups.h). 0, or -1 with err when `cgroup` cannot be used. */
typedef struct {
  int cpu_count; long memory_mb; long pids_max; const char *cgroup;
  /* Names warm spares (the registry's reg_new_id): a claimed spare keeps the name it was booted
   * with, host name and all. NULL: no spares (network pairs are still kept ahead). */
  int (*new_id)(char *out, size_t cap);
} sbx_defaults;
int   sbx_init(const char *state_dir, const sbx_defaults *d, char *err, size_t errlen);
/* What every sandbox gets, as getInfo reports it: the limits where the host enforces them, the
 * host's own figures where it does not. */
void  sbx_limits(int *cpu_count, long *memory_mb);

/* Capabilities probed once at start-up; `why` says what is missing and why, `cgroups` which
 * hierarchy sandboxd uses and where. */
typedef struct {
  bool userns, overlay, pidns, netns, internet, net_guard, cgroup_pids, cgroup_memory, cgroup_cpu, freezer;
  char why[1536], cgroups[1024];
} sbx_host_caps;
void sbx_probe_host(sbx_host_caps *caps);

/* A sandbox for cfg: a warm spare of its shape when the pool has one (named already), else one
 * booted now named cfg->id. 0, or -1 with err. */
int   sbx_create(const sbx_config *cfg, sbx_t **out, char *err, size_t errlen);
const char *sbx_id(const sbx_t *s);
/* Every process gone (streams ended with their `end` event), mounts gone, upper layer removed,
 * cgroups removed; then frees s. Call exactly once, when no other thread uses s any more
 * (it waits for process RPCs that are still streaming on s to finish). */
void  sbx_destroy(sbx_t *s);
int   sbx_pause(sbx_t *s);              /* freeze every process (cgroup freezer, else SIGSTOP); 0 or -1 */
int   sbx_resume(sbx_t *s);
/* A socket in s's network namespace (net_pair_socket): connect it to 127.0.0.1 to reach a port
 * of s's loopback. -1 with errno. */
int   sbx_socket(sbx_t *s, int domain, int type);
int   sbx_root_fd(sbx_t *s);            /* O_PATH fd of "/" as the sandbox's processes see it: use openat2(RESOLVE_IN_ROOT) */
uid_t sbx_host_uid(const sbx_t *s, uid_t inner);   /* inner uid/gid → host id, for fchown from the host */
/* Every sandbox's map: inner id i < *count is host id *uid_base + i (*gid_base + i). */
void  sbx_id_range(uid_t *uid_base, gid_t *gid_base, uint32_t *count);
gid_t sbx_host_gid(const sbx_t *s, gid_t inner);
/* Remove what a crashed earlier run left behind (and this process's spares), rebuild the
 * template, then start the warm pool for state_dir. */
void  sbx_cleanup_stale(const char *state_dir);
/* sandboxd --clean-up: what a crashed run of state_dir left (its pastas, its sandboxes' processes,
 * cgroups and directories) removed, without starting anything (no pool, no template). */
void  sbx_cleanup_crashed(const char *state_dir);

/* The warm pool (pool.h) for state_dir: spares booted ahead of need with the default shape,
 * each under an id of its own (sbx_defaults.new_id: layer directory, cgroups, host name);
 * sbx_create claims one when cfg's state dir and flag match and it asks for no snapshot layer or
 * volume, and gives it the requested limits (when not the default), egress rules and envVars.
 * Network pairs (linked, their starter waiting) go to sandboxes that find no spare. */
void  sbx_pool_start(const char *state_dir);
void  sbx_pool_stop(void);
/* At exit, after every sandbox: the pool stopped, the cgroup parent removed. */
void  sbx_shutdown(void);

/* Kill every process (SIGKILL to pid 1: the pid namespace dies with it; thawed first), end every
 * process stream cleanly. Idempotent; sbx_destroy calls it too. */
void sbx_stop(sbx_t *s);

/* A snapshot of s's file system: s is frozen (cgroup freezer, else SIGSTOP), its upper layers
 * are copied into a new layer over the one s started from (layers.h), s is thawed. *out is a new
 * reference. 0, or -1 with err. The caller keeps s from being paused or resumed meanwhile. */
int sbx_capture(sbx_t *s, struct layer **out, char *err, size_t errlen);
/* As sbx_capture, for a sandbox that is being destroyed (a template step's build sandbox): s is
 * stopped (every process killed and reaped: its mount namespace, and the overlays in it, gone
 * with them; idempotent), its root fd closed, and its upper layers *moved* into the new layer
 * (ly_adopt) rather than copied. Nothing may use s afterwards but sbx_destroy, which removes what
 * is left of its directory (the work directories). The caller makes sure nothing else holds s
 * (registry.h reg_kill_with: every request on it ended). 0, or -1 with err. */
int sbx_capture_final(sbx_t *s, struct layer **out, char *err, size_t errlen);
/* Metrics (metrics.h), as E2B's getMetrics has them. */
typedef mx_sample sbx_metric;
/* A sample now if due, then every sample with from_ms <= ts_ms <= to_ms (*out: free()). 0 or -1. */
int sbx_metrics(sbx_t *s, int64_t from_ms, int64_t to_ms, sbx_metric **out, size_t *n);

/* New egress rules for s (taken): what opens from now on is decided by them, and open connections
 * they deny are reset before this returns (egress.h). 0, or -1 with err. */
struct egress_rules;
int sbx_set_egress(sbx_t *s, struct egress_rules *rules, char *err, size_t errlen);

/* The layer s started from (NULL: the template); borrowed. */
struct layer *sbx_layer(sbx_t *s);
/* The working directory of its commands that name none ("": the user's home). */
const char *sbx_workdir(const sbx_t *s);

/* The process table (ptab.h) of a created sandbox. */
struct ptab;
struct ptab *sbx_ptab(sbx_t *s);
/* Its log (sbxlog.h): what the control plane did to it and the processes it ran. Borrowed. */
struct sbxlog *sbx_log(sbx_t *s);

/* The file-system context (paths.h) of `user` in s: -1 for an unknown user. */
#include "paths.h"
int sbx_fs_ctx(sbx_t *s, const char *user, fs_ctx *c);
#endif
