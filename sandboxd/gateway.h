/* gateway.h — the network namespace every sandbox's traffic leaves through (sandboxd as root).
 *
 * sandboxd makes one network namespace of its own, the gateway, held by a descriptor only (no
 * name in /run/netns, no process in it). Each sandbox's network namespace is joined to it by a
 * veth pair: `eth0` inside (a link-local /32 of its own, GATEWAY_ADDR as default gateway and
 * DNS server), `sbx<index>` in the gateway. The gateway routes nothing (IPv4 forwarding off,
 * IPv6 off): its nftables table hands every TCP connection and UDP datagram a sandbox sends to
 * sandboxd's egress proxy (transparent proxying: GATEWAY_PORT, fwmark 1 → a local route), drops
 * packets whose source address is not the address of the link they came in on, and refuses every
 * other protocol (ICMP "administratively prohibited"). Nothing in the gateway is visible to a
 * sandbox: root inside owns its own namespace only, and whatever it does there (flush its
 * netfilter tables, add routes or addresses, raw or packet sockets, another DNS server) still ends
 * at the veth and the gateway's table.
 *
 * The egress proxy (egress.h) makes its upstream sockets in the host's namespace with a mark
 * (GATEWAY_MARK); the host guard, an nftables table in the host's namespace, rejects every packet
 * with that mark addressed to one of the host's own addresses (the proxy checks that itself too). */
#ifndef SANDBOXD_GATEWAY_H
#define SANDBOXD_GATEWAY_H
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

#define GATEWAY_ADDR "169.254.1.1"          /* the sandboxes' gateway and DNS server */
#define GATEWAY_PORT 6000                   /* the proxy's listeners, inside the gateway */
#define GATEWAY_MARK 0x5bd00001u            /* the proxy's upstream sockets, for the host guard */
#define GATEWAY_MAX_SANDBOXES 16384         /* addresses 169.254.128.1 … */

/* Once, before any sandbox (as root): the gateway namespace, its table and routes, the proxy's
 * listeners, and the host guard for this state dir (replacing a crashed run's). false with why
 * when the host cannot have it (then sandboxes get loopback only, or pasta rootless). */
bool gateway_init(const char *state_dir, char *why, size_t whylen);
bool gateway_available(void);
void gateway_shutdown(void);        /* removes the host guard; the namespace goes with sandboxd */

/* The proxy's listeners (made in the gateway by gateway_init): a TCP socket listening with
 * IP_TRANSPARENT, a UDP socket with IP_TRANSPARENT and IP_RECVORIGDSTADDR. Owned by the gateway. */
void gateway_listeners(int *tcp, int *udp);
/* The gateway namespace's descriptor, for sockets that must live there (setns, then socket). */
int  gateway_netns(void);

/* Joins the network namespace netns_fd to the gateway (veth, addresses, routes) and gives the
 * sandbox an index (its address). 0, or -1 with err. */
int  gateway_attach(int netns_fd, int *index, char *err, size_t errlen);
void gateway_detach(int index);     /* the veth pair removed, the index free again */

void gateway_sandbox_addr(int index, struct in_addr *out);
int  gateway_index_of(const struct in_addr *a);     /* -1 when a is no sandbox's address */
#endif
