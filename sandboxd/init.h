/* init.h — the in-sandbox init (pid 1) and its protocols with sandboxd.
 *
 * The init's image (sandboxd-init, or the sandboxd binary itself, where a constructor in init.c
 * recognises argv[0] = SBX_INIT_ARGV0 before main) runs first as a network pair's *starter*
 * (net.h): sandboxd spawns it with `SBX_INIT_ARGV0 <fd>`, fd being its end of a SOCK_SEQPACKET
 * socket pair. The starter makes the pair's user and network namespaces and the init's uts, ipc
 * and pid namespaces (unshare), brings up loopback, says UNSHARED, and waits (sandboxd writes the
 * id maps and links the network meanwhile, often long before a sandbox needs the pair). A BOOT
 * request then names everything of one sandbox; the starter forks the init (pid 1 of that pid
 * namespace) into a new mount namespace with sandboxd as its parent (CLONE_PARENT) and, on v2,
 * into its cgroup, answers BOOTED with the init's pid and exits. The init is that fork: no exec. It builds the root file system, takes its host name,
 * pivots, reports READY on its own channel, then serves spawn/kill requests over it: one request
 * or reply per packet, file descriptors passed with SCM_RIGHTS. */
#ifndef SANDBOXD_INIT_H
#define SANDBOXD_INIT_H
#include <stdint.h>

#define SBX_INIT_ARGV0 "sandboxd-init"
#define INIT_REQ_MAX (1u << 20)   /* spawn request: argv + env + cwd; a BOOT request likewise */

enum { INIT_REQ_SPAWN = 1, INIT_REQ_KILL = 2, INIT_REQ_KILLALL = 3, INIT_REQ_BOOT = 4, INIT_REQ_CGROUPS = 5 };
enum { INIT_MSG_READY = 1, INIT_MSG_FAILED = 2, INIT_MSG_SPAWNED = 3, INIT_MSG_EXITED = 4, INIT_MSG_UNSHARED = 5,
       INIT_MSG_BOOTED = 6, INIT_MSG_JOINED = 7 };
enum { INIT_OK = 0, INIT_EINVAL = 1, INIT_EINTERNAL = 2 };   /* SPAWNED.code */
#define INIT_F_PTY 1u
#define INIT_F_STDIN 2u

/* Request header; SPAWN is followed by cwd, argv[argc], env[envc], each NUL-terminated. */
typedef struct {
  uint32_t type, seq;
  int32_t pid, sig;               /* KILL: pid (as seen inside) and signal; KILLALL: signal */
  uint32_t uid, gid, flags;
  uint16_t rows, cols;
  uint32_t argc, envc;
} init_req;

/* Reply. SPAWNED with code INIT_OK carries fds: PTY → [master]; pipes → [stdout, stderr(, stdin)],
 * and in text "<sec>.<nsec> <us> <us>": when the request arrived (CLOCK_MONOTONIC), how long
 * until the fork, how long until the command had exec'd (SANDBOXD_TRACE_CREATE).
 * From a starter: UNSHARED (code: 0 or the errno of unshare), BOOTED (pid: the init's, as
 * sandboxd sees it; code: 0 or an errno; status: 1 when the init could not be born in the v2
 * cgroup (kernel < 5.7), which sandboxd then moves it into), JOINED (code: 0 or an errno). */
typedef struct {
  uint32_t type, seq;
  int32_t pid, status;            /* EXITED: raw wait status */
  int32_t code;
  char text[256];
} init_msg;

/* BOOT, to a starter: this header, then `nstrings` NUL-terminated strings (INIT_BOOT_*), with
 * SCM_RIGHTS descriptors: the init's channel, `ncg` cgroup descriptors (with cg_v2, one: the
 * cgroup's directory, to be born in), then `nidmap` idmapped trees (detached mounts) that the
 * system directories name by index. Paths are host paths, opened again by the init in its own
 * mount namespace (an overlay refuses layers whose mounts belong to another one).
 * cg_join: the init joins its cgroups itself before READY: it waits for one CGROUPS request on
 * its channel (an init_req, with a `tasks` file per v1 hierarchy as SCM_RIGHTS, perhaps none)
 * and writes "0" into each (the calling thread moves, which takes none of the cgroup locks a
 * move of another process takes). sandboxd makes them meanwhile.
 * A starter takes the same CGROUPS request before its BOOT (a v1 pair stocked with its cgroups,
 * net_pair_join): it moves itself in, answers JOINED, and the init it forks is born inside. */
typedef struct {
  uint32_t type;                  /* INIT_REQ_BOOT */
  uint32_t nstrings, ncg, cg_v2, nidmap, cg_join;
} init_boot;
enum {
  INIT_BOOT_HOSTNAME,             /* the sandbox id (nothing else inside names it) */
  INIT_BOOT_GROUPS,               /* "c": clear supplementary groups (every id mapped), "k": keep */
  INIT_BOOT_TEMPLATE,             /* the template's parent: the root overlay goes over <it>/root */
  INIT_BOOT_DIR,                  /* the sandbox's layer directory (upper, work, upper-<d>, work-<d>) */
  INIT_BOOT_SYSDIRS,              /* "usr,lib": overlays over host directories; "usr=<i>": its lower layer
                                   * is idmapped tree i */
  INIT_BOOT_LAYERS,               /* the snapshot layer store, "" for none */
  INIT_BOOT_LAYER_IDS,            /* its chain, top first, comma-separated */
  INIT_BOOT_NFIXED,               /* then per volume (shallowest first): its directory, its path inside */
};
#define INIT_MAX_MOUNTS 16
#define INIT_MAX_LAYERS 40
#define INIT_MAX_CG 8
#define INIT_MAX_IDMAP 8

/* The image's entry: argv = SBX_INIT_ARGV0 <starter fd>. */
int sbx_init_main(int argc, char **argv);
#endif
