/* net.h — a sandbox's way to the internet: user-mode networking by pasta (Debian package passt)
 * attached to the sandbox's own network namespace, and the host guard that keeps the host's own
 * addresses out of reach.
 *
 * Every sandbox has its own network namespace. With internet access, pasta runs on the host
 * (foreground, one per sandbox) with a tap device in the sandbox's namespace and translates its
 * traffic to ordinary host sockets. It maps nothing of the host into the sandbox: no port
 * forwarding either way (-t/-u/-T/-U none), no gateway-to-host mapping (--no-map-gw). DNS
 * queries to NET_DNS_FORWARDER (port 53/udp) go to the host's first resolver.
 *
 * pasta runs as NET_UID, a host uid of its own: as root, sandboxd creates each sandbox's user
 * namespace with that uid as its owner, so that pasta, which drops to its --runas uid before it
 * joins the namespaces, may still join them. The host guard, an nftables table, rejects every
 * packet a NET_UID socket sends to a local address of the host (loopback or any interface's),
 * except DNS to the resolver pasta forwards to. Rootless sandboxd runs pasta as itself and has no
 * guard (the start-up report says so). */
#ifndef SANDBOXD_NET_H
#define SANDBOXD_NET_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define NET_UID 99999u                    /* pasta's host uid (sandboxd as root) */
#define NET_DNS_FORWARDER "169.254.1.1"   /* the resolver the sandbox's resolv.conf names */
#define NET_READY_TIMEOUT_MS 10000

/* Once, before any sandbox: finds pasta, checks the tun device, reads the host's resolver and,
 * as root, installs the host guard for this state dir (replacing a crashed run's). Returns true
 * when sandboxes can have internet access; otherwise why says what is missing. */
bool net_init(const char *state_dir, char *why, size_t whylen);
bool net_available(char *why, size_t whylen);   /* what net_init found */
bool net_guarded(void);                         /* the host guard is installed (root only) */
void net_shutdown(void);                        /* removes the host guard */

/* One pasta for the sandbox whose init is `init_pid` (user and network namespace). `logdir` gets
 * pasta.log. Started with net_start (returns at once), ready after net_wait. */
typedef struct { pid_t pid; int ready_fd; } net_proc;
#define NET_PROC_NONE ((net_proc){.pid = 0, .ready_fd = -1})
int  net_start(pid_t init_pid, const char *logdir, net_proc *np, char *err, size_t errlen);
int  net_wait(net_proc *np, const char *logdir, int timeout_ms, char *err, size_t errlen);
void net_stop(net_proc *np);                    /* SIGKILL and reap; idempotent */
#endif
