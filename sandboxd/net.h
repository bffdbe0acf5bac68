/* net.h — a sandbox's network: the user and network namespace pair it is booted into, and its
 * link to the world.
 *
 * Every sandbox has its own network namespace. As root, its link is a veth pair into sandboxd's
 * gateway namespace (gateway.h), where the egress proxy (egress.h) decides every connection with
 * the sandbox's rules: every sandbox gets one, and `allow_internet_access: false` is a rule (deny
 * all traffic), which updateNetwork can change. Rootless, sandboxd cannot make a veth pair: a
 * sandbox with internet access gets pasta (Debian package passt), which connects the namespace to
 * the host's network with ordinary sockets of the user's, maps nothing of the host in or out
 * (-t/-u/-T/-U none, --no-map-gw) and forwards DNS to NET_DNS_FORWARDER; egress rules are not
 * available there (the start-up report says so).
 *
 * Links take a moment to make (a veth pair ~1 ms, pasta ~30 ms), so the warm pool (pool.c) keeps pairs ready
 * ahead; a pasta is recorded under <state>/net until it is stopped, so that a crashed
 * run's are found at the next start. */
#ifndef SANDBOXD_NET_H
#define SANDBOXD_NET_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define NET_DNS_FORWARDER "169.254.1.1"   /* the resolver the sandbox's resolv.conf names (GATEWAY_ADDR) */
#define NET_READY_TIMEOUT_MS 10000

struct egress_config;
/* Once, before any sandbox: stops what a crashed run recorded; as root, the gateway and the egress
 * proxy (configured by egress), rootless, pasta and the tun device. Returns true when sandboxes
 * can have a link; otherwise why says what is missing. */
bool net_init(const char *state_dir, const struct egress_config *egress, char *why, size_t whylen);
bool net_available(char *why, size_t whylen);   /* what net_init found */
/* The pastas a crashed run of state_dir recorded (they outlive everything else of a sandbox):
 * stopped, their records removed. net_init does it first. */
void net_cleanup_stale(const char *state_dir);
bool net_guarded(void);                         /* egress rules and the host guard (root only) */
/* Does a sandbox with this internet flag get a link? Every sandbox does where egress rules are
 * enforced (the flag is a rule there); rootless, those with internet access. */
bool net_wants_link(bool internet);
void net_shutdown(void);                        /* the egress proxy stopped, the host guard removed */

/* How a pair's user namespace maps ids (written when it is made). */
typedef struct {
  char uid_map[64], gid_map[64];   /* e.g. "0 100000 65536\n" */
  bool deny_setgroups;             /* needed for an unprivileged map */
} net_idmap;

/* A user namespace and a network namespace in it (loopback up), linked (veth to the gateway,
 * or pasta with its network up) when `link`, made by the pair's starter: the init's image
 * (exe_fd, init.h), which then waits in them for net_pair_boot. Blocks until then (at most
 * NET_READY_TIMEOUT_MS). NULL with err. */
typedef struct net_pair net_pair;
net_pair *net_pair_new(const net_idmap *map, int exe_fd, bool link, char *err, size_t errlen);
/* Before its BOOT (v1): the starter moves itself into the cgroups whose `tasks` files fds are
 * (cg_boot_fds), so that the init is born in them. 0, or -1 with err. */
int   net_pair_join(net_pair *p, const int *fds, int nfds, char *err, size_t errlen);
/* Hands the starter a sandbox's BOOT request (init.h: req, with fds as SCM_RIGHTS, at most 16);
 * 0, or -1 with err. Once per pair: the starter exits after it. */
int   net_pair_boot(net_pair *p, const void *req, size_t len, const int *fds, int nfds, char *err, size_t errlen);
/* The starter's answer: the init's pid (sandboxd's child), or -1 with err. *late: the init could
 * not be born in its v2 cgroup and must be moved there. */
pid_t net_pair_booted(net_pair *p, bool *late, char *err, size_t errlen);
/* Reaps the starter that booted (it exits right after its answer; net_pair_free reaps it too). */
void  net_pair_reap(net_pair *p);
void  net_pair_free(net_pair *p);               /* its link removed (pasta killed); namespaces let go */
int   net_pair_userns(const net_pair *p);       /* O_RDONLY fds of /proc/.../ns/{user,net} */
int   net_pair_netns(const net_pair *p);
pid_t net_pair_pasta(const net_pair *p);        /* 0 without pasta */
int   net_pair_index(const net_pair *p);        /* its gateway index (egress.h), 0 without a veth */
/* A socket (close-on-exec) in the pair's network namespace, whatever the calling thread's: as root
 * made by a thread that joins it; rootless by a child that joins the pair's user namespace first
 * (net.c). The sandbox's loopback is reached through it, never the host's. -1 with errno. */
int   net_pair_socket(const net_pair *p, int domain, int type);
#endif
