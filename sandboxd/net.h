/* net.h — a sandbox's network: the user and network namespace pair it is booted into, and, with
 * internet access, pasta (Debian package passt) connecting that network namespace to the host's
 * network; plus the host guard that keeps the host's own addresses out of reach.
 *
 * Every sandbox has its own network namespace. With internet access, pasta runs on the host
 * (foreground, one per pair) with a tap device in the pair's namespace and translates its traffic
 * to ordinary host sockets. It maps nothing of the host into the sandbox: no port forwarding either
 * way (-t/-u/-T/-U none), no gateway-to-host mapping (--no-map-gw). DNS queries to
 * NET_DNS_FORWARDER (port 53/udp) go to the host's first IPv4 resolver.
 *
 * pasta runs as NET_UID, a host uid of its own: as root, sandboxd creates each pair's user
 * namespace with that uid as its owner, so that pasta, which drops to its --runas uid before it
 * joins the namespaces, may still join them. The host guard, an nftables table, rejects every
 * packet a NET_UID socket sends to a local address of the host (loopback or any interface's),
 * except DNS to the resolver pasta forwards to. Rootless sandboxd runs pasta as itself and has no
 * guard (the start-up report says so).
 *
 * pasta takes ~30 ms to start, so sandbox.c keeps pairs with pasta ready in its warm pool; a
 * pair's pasta is recorded under <state>/net until it is stopped, so that a crashed run's are
 * found at the next start. */
#ifndef SANDBOXD_NET_H
#define SANDBOXD_NET_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define NET_UID 99999u                    /* pasta's host uid (sandboxd as root) */
#define NET_DNS_FORWARDER "169.254.1.1"   /* the resolver the sandbox's resolv.conf names */
#define NET_READY_TIMEOUT_MS 10000

/* Once, before any sandbox: stops what a crashed run recorded, finds pasta, checks the tun device
 * and, as root, installs the host guard for this state dir (replacing a crashed run's). Returns
 * true when sandboxes can have internet access; otherwise why says what is missing. */
bool net_init(const char *state_dir, char *why, size_t whylen);
bool net_available(char *why, size_t whylen);   /* what net_init found */
bool net_guarded(void);                         /* the host guard is installed (root only) */
void net_shutdown(void);                        /* removes the host guard */

/* How a pair's user namespace maps ids (written when it is made). */
typedef struct {
  char uid_map[64], gid_map[64];   /* e.g. "0 100000 65536\n" */
  bool deny_setgroups;             /* needed for an unprivileged map */
  bool own_by_net_uid;             /* root: NET_UID owns the namespace (see above) */
} net_idmap;

/* A user namespace and a network namespace in it (loopback only, down), with pasta attached and
 * its network up when `internet`. Blocks until then (at most NET_READY_TIMEOUT_MS). NULL with err. */
typedef struct net_pair net_pair;
net_pair *net_pair_new(const net_idmap *map, bool internet, char *err, size_t errlen);
void  net_pair_free(net_pair *p);               /* SIGKILL to pasta, reaped; namespaces let go */
int   net_pair_userns(const net_pair *p);       /* O_RDONLY fds of /proc/.../ns/{user,net} */
int   net_pair_netns(const net_pair *p);
pid_t net_pair_pasta(const net_pair *p);        /* 0 without internet access */
/* A socket (close-on-exec) in the pair's network namespace, whatever the calling thread's: as root
 * made by a thread that joins it; rootless by a child that joins the pair's user namespace first
 * (net.c). The sandbox's loopback is reached through it, never the host's. -1 with errno. */
int   net_pair_socket(const net_pair *p, int domain, int type);
#endif
