/* gateway.c — the gateway namespace, its table, the veth pairs, the host guard (gateway.h). */
#include "gateway.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <nftables/libnftables.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netns.h"
#include "procfile.h"
#include "rtnl.h"

#define ROUTE_TABLE 100                     /* the local route transparent proxying needs */
#define FIRST_SANDBOX 0xa9fe8000u           /* 169.254.128.0: index i is this + i */

static struct {
  bool ready;
  int netns;                                /* the gateway namespace */
  int tcp, udp;                             /* the proxy's listeners, inside it */
  rtnl *nl;                                 /* a netlink socket inside it */
  pthread_mutex_t mu;                       /* nl and the index map */
  uint64_t used[GATEWAY_MAX_SANDBOXES / 64];
  int next;                                 /* where the search for a free index starts */
  char guard[64];                           /* the host guard's table, "" when not installed */
} g = {.netns = -1, .tcp = -1, .udp = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

bool gateway_available(void) { return g.ready; }
int  gateway_netns(void) { return g.netns; }
void gateway_listeners(int *tcp, int *udp) { *tcp = g.tcp; *udp = g.udp; }

void gateway_sandbox_addr(int index, struct in_addr *out) { out->s_addr = htonl(FIRST_SANDBOX + (uint32_t)index); }

int gateway_index_of(const struct in_addr *a) {
  uint32_t v = ntohl(a->s_addr);
  if (v <= FIRST_SANDBOX || v >= FIRST_SANDBOX + GATEWAY_MAX_SANDBOXES) return -1;
  return (int)(v - FIRST_SANDBOX);
}

/* Runs an nftables script in the calling thread's network namespace; 0, or -1 with nft's words. */
static int run_nft(const char *script, char *err, size_t errlen) {
  /* libnftables exits the process when it cannot open its netlink socket (a kernel without
   * nfnetlink): ask first. */
  int probe = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (probe < 0) {
    snprintf(err, errlen, "nftables: the kernel has no netfilter netlink (%s)", strerror(errno));
    return -1;
  }
  close(probe);
  struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (!ctx) { snprintf(err, errlen, "nft: cannot make a context"); return -1; }
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  int rc = nft_run_cmd_from_buffer(ctx, script);
  if (rc != 0) {
    const char *e = nft_ctx_get_error_buffer(ctx);
    size_t n = e ? strcspn(e, "\n") : 0;
    snprintf(err, errlen, "nft: %.*s", (int)(n > 300 ? 300 : n), n ? e : "failed");
  }
  nft_ctx_free(ctx);
  return rc == 0 ? 0 : -1;
}

/* The gateway's own table. Everything a sandbox sends arrives on a sbx* link: TCP and UDP go to
 * the proxy's listeners (tproxy; the mark selects the local route), the rest is refused; a source
 * address that is not the link's own sandbox's is dropped (fib: no route back through that link). */
static const char GATEWAY_TABLE[] =
    "table inet sandboxd_gateway {\n"
    "  chain pre {\n"
    "    type filter hook prerouting priority mangle; policy drop;\n"
    "    iif \"lo\" accept\n"
    "    meta nfproto ipv6 drop\n"
    "    fib saddr . iif oif missing drop\n"
    "    meta l4proto tcp tproxy ip to :%d meta mark set 1 accept\n"
    "    meta l4proto udp tproxy ip to :%d meta mark set 1 accept\n"
    "    meta mark set 2 accept\n"
    "  }\n"
    "  chain in {\n"
    "    type filter hook input priority filter; policy drop;\n"
    "    iif \"lo\" accept\n"
    "    meta mark 1 accept\n"
    "    meta mark 2 reject with icmp type admin-prohibited\n"
    "  }\n"
    "}\n";

typedef struct { char *err; size_t errlen; } setup_args;

static int listener(int type, char *err, size_t errlen) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(GATEWAY_PORT)};
  if (fd < 0 || setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      (type == SOCK_DGRAM && setsockopt(fd, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one) != 0) ||
      (type == SOCK_STREAM && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) ||
      bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || (type == SOCK_STREAM && listen(fd, 4096) != 0)) {
    snprintf(err, errlen, "the proxy's %s listener: %s", type == SOCK_STREAM ? "TCP" : "UDP", strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

/* Inside the new namespace: loopback, the gateway address, the local route for marked packets,
 * no IPv6, the table, the listeners. */
static int setup(void *p) {
  setup_args *a = p;
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);   /* NETLINK_ROUTE */
  if (fd < 0 || !(g.nl = rtnl_open(fd))) { snprintf(a->err, a->errlen, "netlink: %s", strerror(errno)); return -1; }
  struct in_addr gw, any = {0};
  inet_pton(AF_INET, GATEWAY_ADDR, &gw);
  char script[2048];
  snprintf(script, sizeof script, GATEWAY_TABLE, GATEWAY_PORT, GATEWAY_PORT);
  if (rtnl_link_up(g.nl, "lo", a->err, a->errlen) != 0 ||
      rtnl_addr_add(g.nl, "lo", AF_INET, &gw, 32, false, a->err, a->errlen) != 0 ||
      rtnl_rule_add(g.nl, AF_INET, 1, ROUTE_TABLE, a->err, a->errlen) != 0 ||
      rtnl_rule_add(g.nl, AF_INET, 2, ROUTE_TABLE, a->err, a->errlen) != 0 ||
      rtnl_route_add(g.nl, AF_INET, &any, 0, NULL, "lo", ROUTE_TABLE, true, a->err, a->errlen) != 0)
    return -1;
  /* IPv6 off: nothing a sandbox sends over IPv6 is handled (the table drops it too). */
  if (procfile_write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1") != 0 ||
      procfile_write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1") != 0) {
    if (errno != ENOENT) { snprintf(a->err, a->errlen, "disable IPv6 in the gateway: %s", strerror(errno)); return -1; }
  }
  if (run_nft(script, a->err, a->errlen) != 0) return -1;
  if ((g.tcp = listener(SOCK_STREAM, a->err, a->errlen)) < 0 || (g.udp = listener(SOCK_DGRAM, a->err, a->errlen)) < 0) return -1;
  return 0;
}

static int make_netns(void *p) {
  (void)p;
  if (unshare(CLONE_NEWNET) != 0) return -1;
  return open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
}

/* A thread of its own makes the namespace (unshare moves only the calling thread). */
static void *netns_thread(void *p) {
  *(int *)p = make_netns(NULL);
  if (*(int *)p < 0) *(int *)p = -errno;
  return NULL;
}

/* The host guard: one table per state dir (parallel sandboxds each own theirs), replaced
 * atomically, so a crashed run's is simply overwritten. */
static int install_guard(const char *state_dir, char *err, size_t errlen) {
  uint64_t h = 1469598103934665603ull;        /* the same name the cgroups use */
  for (const char *p = state_dir; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  char table[64], script[1024];
  snprintf(table, sizeof table, "sandboxd_%016llx", (unsigned long long)h);
  snprintf(script, sizeof script,
           "add table inet %s\n"
           "delete table inet %s\n"
           "table inet %s {\n"
           "  chain output {\n"
           "    type filter hook output priority 0; policy accept;\n"
           "    meta mark 0x%08x fib daddr type local reject\n"
           "  }\n"
           "}\n",
           table, table, table, GATEWAY_MARK);
  if (run_nft(script, err, errlen) != 0) return -1;
  snprintf(g.guard, sizeof g.guard, "%s", table);
  return 0;
}

bool gateway_init(const char *state_dir, char *why, size_t whylen) {
  char err[400] = "";
  if (geteuid() != 0) { snprintf(why, whylen, "needs sandboxd as root"); return false; }
  pthread_t t;
  int fd = -1;
  if (pthread_create(&t, NULL, netns_thread, &fd) != 0) { snprintf(why, whylen, "cannot start a thread"); return false; }
  pthread_join(t, NULL);
  if (fd < 0) { snprintf(why, whylen, "cannot make the gateway network namespace: %s", strerror(-fd)); return false; }
  g.netns = fd;
  setup_args a = {err, sizeof err};
  if (netns_run(g.netns, setup, &a) != 0 || install_guard(state_dir, err, sizeof err) != 0) {
    snprintf(why, whylen, "gateway: %.400s", err[0] ? err : strerror(errno));
    if (g.tcp >= 0) close(g.tcp);
    if (g.udp >= 0) close(g.udp);
    rtnl_close(g.nl);
    close(g.netns);
    g.nl = NULL;
    g.netns = g.tcp = g.udp = -1;
    return false;
  }
  g.next = 1;
  g.ready = true;
  return true;
}

void gateway_shutdown(void) {
  if (!g.guard[0]) return;
  char script[128], err[256];
  snprintf(script, sizeof script, "delete table inet %s\n", g.guard);
  if (run_nft(script, err, sizeof err) != 0) fprintf(stderr, "sandboxd: removing the host guard: %s\n", err);
  g.guard[0] = 0;
}

static int take_index(void) {
  for (int k = 0; k < GATEWAY_MAX_SANDBOXES; k++) {
    int i = (g.next + k) % GATEWAY_MAX_SANDBOXES;
    if (i == 0 || (g.used[i / 64] >> (i % 64) & 1)) continue;
    g.used[i / 64] |= 1ull << (i % 64);
    g.next = i + 1;            /* round robin: an index comes back as late as possible */
    return i;
  }
  return -1;
}

static void veth_name(int index, char *out, size_t cap) { snprintf(out, cap, "sbx%d", index); }

int gateway_attach(int netns_fd, int *index, char *err, size_t errlen) {
  if (!g.ready) { snprintf(err, errlen, "no gateway"); return -1; }
  /* The sandbox's side is configured through a netlink socket of its own namespace. */
  int fd = netns_socket(netns_fd, AF_NETLINK, SOCK_RAW, 0);
  rtnl *in = fd >= 0 ? rtnl_open(fd) : NULL;
  if (!in) { snprintf(err, errlen, "netlink in the sandbox's namespace: %s", strerror(errno)); return -1; }
  struct in_addr gw;
  inet_pton(AF_INET, GATEWAY_ADDR, &gw);
  int rc = -1, i = -1;
  pthread_mutex_lock(&g.mu);
  /* An index whose last pair the kernel has not removed yet (gateway_detach) has its name taken
   * still: the next one. */
  for (int tries = 0; tries < 64 && rc != 0; tries++) {
    if ((i = take_index()) < 0) { snprintf(err, errlen, "every one of the %d sandbox addresses is in use", GATEWAY_MAX_SANDBOXES); break; }
    char name[16];
    veth_name(i, name, sizeof name);
    struct in_addr me;
    gateway_sandbox_addr(i, &me);
    if (rtnl_veth_add(g.nl, name, "eth0", netns_fd, err, errlen) != 0) {
      g.used[i / 64] &= ~(1ull << (i % 64));
      if (errno == EEXIST) continue;
      break;
    }
    if (rtnl_link_up(g.nl, name, err, errlen) == 0 &&
        rtnl_route_add(g.nl, AF_INET, &me, 32, NULL, name, 0, false, err, errlen) == 0 &&
        rtnl_addr_add(in, "eth0", AF_INET, &me, 32, false, err, errlen) == 0 &&
        rtnl_link_up(in, "eth0", err, errlen) == 0 &&
        rtnl_route_add(in, AF_INET, &gw, 32, NULL, "eth0", 0, false, err, errlen) == 0 &&
        rtnl_route_add(in, AF_INET, &gw, 0, &gw, "eth0", 0, false, err, errlen) == 0) {
      rc = 0;
    } else {
      rtnl_link_del(g.nl, name, NULL, 0);
      g.used[i / 64] &= ~(1ull << (i % 64));
      break;
    }
  }
  if (rc == 0) *index = i;
  pthread_mutex_unlock(&g.mu);
  rtnl_close(in);
  return rc;
}

void gateway_detach(int index) {
  if (!g.ready || index <= 0 || index >= GATEWAY_MAX_SANDBOXES) return;
  /* Nothing to delete: the pair goes when the sandbox's network namespace does (the kernel's
   * clean-up work, later: deleting it here would wait for an RCU grace period, 10-40 ms). Until
   * then its gateway end still has the name; gateway_attach skips an index whose name is taken. */
  pthread_mutex_lock(&g.mu);
  g.used[index / 64] &= ~(1ull << (index % 64));
  pthread_mutex_unlock(&g.mu);
}
