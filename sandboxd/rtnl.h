/* rtnl.h — the few rtnetlink requests sandboxd makes (links, addresses, routes, rules), over
 * libmnl, on a netlink socket the caller made in the network namespace the requests are for.
 * Each request waits for the kernel's acknowledgement; errors come back as -1 with errno and a
 * sentence naming the request in err. Not thread-safe per socket: one user at a time. */
#ifndef SANDBOXD_RTNL_H
#define SANDBOXD_RTNL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rtnl rtnl;
/* Takes fd (socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE), made in the namespace of choice); NULL
 * with errno. rtnl_close closes it. */
rtnl *rtnl_open(int fd);
void  rtnl_close(rtnl *r);

/* A veth pair: `name` in this socket's namespace, `peer` in the namespace of peer_netns_fd (-1:
 * here too). */
int rtnl_veth_add(rtnl *r, const char *name, const char *peer, int peer_netns_fd, char *err, size_t errlen);
int rtnl_link_del(rtnl *r, const char *name, char *err, size_t errlen);
int rtnl_link_up(rtnl *r, const char *name, char *err, size_t errlen);
int rtnl_link_index(rtnl *r, const char *name);          /* 0 when unknown */

/* family AF_INET/AF_INET6, addr in network order; nodad: usable at once (IPv6). */
int rtnl_addr_add(rtnl *r, const char *dev, int family, const void *addr, int prefix, bool nodad, char *err, size_t errlen);
/* A route: dst/prefix via gw (NULL: on-link) on dev (NULL: none, e.g. a local route on "lo"),
 * in table (0: main); local: a route of type local (what transparent proxying needs). */
int rtnl_route_add(rtnl *r, int family, const void *dst, int prefix, const void *gw, const char *dev,
                   uint32_t table, bool local, char *err, size_t errlen);
/* The type of the route the kernel would use for dst (RTN_LOCAL: one of this namespace's own
 * addresses; RTN_UNICAST, RTN_UNREACHABLE, ...), or -1 with errno. */
int rtnl_route_type(rtnl *r, int family, const void *dst);
/* A policy rule: packets with fwmark go to table. */
int rtnl_rule_add(rtnl *r, int family, uint32_t fwmark, uint32_t table, char *err, size_t errlen);
#endif
