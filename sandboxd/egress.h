/* egress.h — the egress proxy: where every TCP connection and UDP datagram a sandbox sends ends up
 * (transparently, from the gateway namespace: gateway.h), is decided with the sandbox's rules
 * (egress_rules.h) and, when allowed, is carried on by sandboxd's own sockets on the host.
 *
 * One thread, one epoll loop:
 *  - TCP: the connection is accepted in the gateway (the sandbox sees it open). An address decides
 *    at once: allowed → sandboxd connects to that address and relays bytes both ways (half-closes
 *    and resets passed on); denied → reset. Where the rules need a name (egress_rules.h: TCP 80/443
 *    with names in allowOut), the first bytes are read (TLS SNI, HTTP Host; sniff.h); a name the
 *    rules allow is resolved by sandboxd (not by anything the sandbox said: its DNS answers and
 *    the address it dialled are not trusted) and each address checked again before the connection
 *    is made there; the bytes read are sent first.
 *  - UDP: one flow per (sandbox port, destination), decided by address, then relayed by a
 *    socket in the gateway bound to the destination (transparent) and a host socket connected to
 *    it; flows end after a minute without traffic.
 *  - DNS: what a sandbox sends to GATEWAY_ADDR port 53 is forwarded to the host's resolver (or
 *    `--dns`), query by query: a name egress_dns_allowed refuses gets REFUSED, malformed queries
 *    are dropped. TCP to port 53 is relayed to the resolver while the rules let DNS through at all.
 * Rule changes (egress_update) apply to what opens after they return; open TCP connections and UDP
 * flows that the new rules deny are reset/ended before egress_update returns. */
#ifndef SANDBOXD_EGRESS_H
#define SANDBOXD_EGRESS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "egress_rules.h"

#define EGRESS_MAX_CONNS 1024          /* open TCP connections per sandbox; more are reset */
#define EGRESS_MAX_FLOWS 1024          /* UDP flows per sandbox; datagrams of more are dropped */
#define EGRESS_SNIFF_MS 10000          /* the first bytes of a connection decided by name */
#define EGRESS_CONNECT_MS 30000
#define EGRESS_UDP_IDLE_MS 60000
#define EGRESS_DNS_IDLE_MS 5000        /* a DNS flow: one query and its answer, mostly */
#define EGRESS_DNS_SERVERS 4

/* A connection taken over for its rules' headers (egress_http.h): which sandbox, where to. */
struct egress_ca;
typedef struct egress_intercepted {
  int index;                           /* the sandbox's gateway index ... */
  char id[72];                         /* ... while this sandbox holds it */
  char name[254];                      /* the name it gave (TLS: its SNI; HTTP: its first Host) */
  egress_addr dest;                    /* the address it dialled */
  uint16_t port;                       /* 80 or 443 */
  bool tls;
  struct egress_ca *ca;                /* a reference: its certificates */
} egress_intercepted;
void egress_intercepted_free(egress_intercepted *x);

typedef struct egress_config {
  egress_site site;                    /* the ranges sandboxd was started to unblock */
  /* The resolvers ("ADDR" or "ADDR:PORT", IPv6 as "[ADDR]:PORT") for the sandboxes' DNS and for
   * names sandboxd resolves; none: the host's /etc/resolv.conf. */
  char dns[EGRESS_DNS_SERVERS][64];
  size_t ndns;
  bool trace;                          /* a line on stderr per decision (SANDBOXD_TRACE_EGRESS) */
  /* Takes an intercepted connection over (fd: non-blocking, connected, unread; x: taken). */
  void (*intercept)(egress_intercepted *x, int fd, const struct sockaddr *peer, socklen_t peerlen);
} egress_config;

/* After gateway_init: starts the loop on the gateway's listeners. 0, or -1 with err. */
int  egress_start(const egress_config *cfg, char *err, size_t errlen);
void egress_stop(void);
bool egress_running(void);

/* The sandbox at gateway index `index` is decided by rules (taken: freed by the proxy) from now
 * on; until then (a spare) everything it sends is refused. 0, or -1 with err. */
int  egress_attach(int index, const char *id, egress_rules *rules, char *err, size_t errlen);
/* New rules (taken); returns once open connections and flows they deny are gone. */
int  egress_update(int index, egress_rules *rules, char *err, size_t errlen);
/* Every connection and flow of the sandbox closed, its address refused again. */
void egress_detach(int index);

/* The sandbox's CA (PEM, malloc'ed), once its rules set headers; NULL before (and without one). */
char *egress_ca_pem_of(int index);

/* What an intercepted request to host (lower-case) may do now: EGRESS_DENY (why says why;
 * also when the sandbox is gone) or allowed, with the addresses sandboxd resolved host to that
 * the rules allow (each checked as a connection to it would be), and the headers the rules set
 * (copied templates, placeholders unfilled). `known` (may be NULL) keeps a connection's last
 * answer: a later request of that connection for the same host is checked against those
 * addresses instead of asking DNS again (its upstream connection goes to one of them anyway). */
#define EGRESS_PLAN_ADDRS 8
typedef struct {
  char host[254];
  egress_addr addrs[EGRESS_PLAN_ADDRS];
  size_t naddrs;
} egress_answer;
typedef struct {
  egress_verdict verdict;
  const char *why;
  egress_addr addrs[EGRESS_PLAN_ADDRS];
  size_t naddrs;
  transform_header *headers;
  size_t nheaders;
} egress_plan;
void egress_plan_request(const egress_intercepted *x, const char *host, egress_answer *known, egress_plan *out);
void egress_plan_free(egress_plan *p);
/* Is x's sandbox still attached (the same one)? */
bool egress_attached(const egress_intercepted *x);
/* A socket for an upstream connection (the host's namespace, the guard's mark). */
int egress_upstream_socket(int family, int type);

#endif
