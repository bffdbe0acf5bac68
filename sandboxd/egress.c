/* egress.c — the egress proxy's loop (egress.h): TCP relays decided by address or name, UDP flows,
 * the DNS forwarder, rule changes applied to what is open. */
#include "egress.h"

#include <ares.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clocks.h"
#include "dnsmsg.h"
#include "egress_ca.h"
#include "gateway.h"
#include "rtnl.h"
#include "sniff.h"

#define CHUNK 65536                      /* one copied read of a relay (sandboxd's buffer) */
#define PIPE_CHUNK (512 * 1024)          /* one spliced read of a bulk transfer (the pipe's size) */
#define FLOW_BUCKETS 4096
#define ARES_SOCKS 16
#define DNS_MSG_MAX 4096

typedef enum { H_TCP_LISTEN, H_UDP_LISTEN, H_WAKE, H_DOWN, H_UP, H_FLOW_DOWN, H_FLOW_UP, H_ARES } hkind;
typedef struct handle {
  hkind kind;
  int fd;
  uint32_t events;                       /* what epoll watches now (0: not registered) */
  void *owner;
} handle;

typedef struct conn conn;
typedef struct flow flow;

/* What the proxy counts of a sandbox (open ones: the limits; the rest: for a trace or a debugger). */
typedef struct {
  uint64_t tcp_allowed, tcp_denied, udp_allowed, udp_denied, dns_answered, dns_refused;
  uint64_t bytes_out, bytes_in;          /* payload sent for the sandbox / received for it */
  unsigned open_conns, open_flows;
} egress_stats;

/* A sandbox attached to the proxy. rules: under g.mu; everything else: the loop's. */
typedef struct esb {
  int index;
  char id[72];
  egress_rules rules;
  egress_ca *ca;                         /* made with the first rules that set headers; under g.mu */
  conn *conns;
  flow *flows;
  egress_stats st;
} esb;

enum { C_NEW, C_SNIFF, C_RESOLVE, C_CONNECT, C_RELAY };
enum { TO_UP, TO_DOWN };                 /* the two directions of a relay */

typedef struct resolve_req { conn *c; } resolve_req;

struct conn {
  conn *prev, *next;                     /* in its sandbox's list; next: in the graveyard once dead */
  esb *sb;
  handle down, up;                       /* the sandbox's side (in the gateway), the host's */
  int state;
  egress_dest dest;
  char name[SNIFF_NAME_MAX + 1];
  egress_addr target[8];                 /* where to connect, in order */
  int ntarget, itarget;
  bool dns;                              /* to the resolver: no mark, never re-decided */
  bool addr_allowed;                     /* sniffed for its rules' headers, though its address was allowed */
  /* Bytes read from one side that the other did not take yet: the sniffed first bytes in a buffer
   * (TO_UP only), then whatever a pipe holds (splice: the kernel moves the bytes, no copy here). */
  uint8_t *pend[2];
  size_t plen[2], poff[2], pcap;
  int pipe_fd[2][2];                     /* per direction, made when it turns bulk; -1 before */
  size_t inpipe[2];
  bool bulk[2];                          /* a read filled sandboxd's buffer: splice from now on */
  bool eof[2];                           /* [TO_UP]: the sandbox sent FIN; [TO_DOWN]: the upstream did */
  int64_t deadline;                      /* sniff / connect; 0 while relaying */
  resolve_req *rq;
};

struct flow {
  flow *prev, *next;                     /* in its sandbox's list; next: in the graveyard once dead */
  flow *hnext;                           /* in its hash bucket */
  esb *sb;
  handle down, up;
  struct sockaddr_in src;                /* the sandbox's address and port */
  egress_addr dst;
  uint16_t dport;
  bool dns;
  int64_t last;
};

typedef struct cmd { struct cmd *next; int type, index; unsigned long serial; } cmd;
enum { CMD_RECHECK, CMD_DETACH, CMD_STOP };

static struct {
  pthread_mutex_t mu;                    /* table and rules */
  esb *table[GATEWAY_MAX_SANDBOXES];
  egress_config cfg;
  bool running;
  pthread_t th;
  int ep, gwns, hostns;
  handle tcp, udp, wake;
  rtnl *route;                           /* the host's routes: is an address the host's own? */
  pthread_mutex_t route_mu;              /* route: the loop's and the intercepted requests' threads */
  ares_channel ares;
  handle ares_h[ARES_SOCKS];
  struct sockaddr_storage resolver;      /* where the DNS forwarder sends (the first resolver) */
  char dns_csv[EGRESS_DNS_SERVERS * 66];  /* --dns for c-ares ("": the host's resolv.conf) */
  socklen_t resolver_len;
  flow *bucket[FLOW_BUCKETS];
  /* Closed connections and flows, freed after the round of events that may still name them. */
  conn *dead_conns;
  flow *dead_flows;
  /* commands from other threads */
  pthread_mutex_t cmu;
  pthread_cond_t ccv;
  cmd *q;
  unsigned long serial, done;
  uint8_t buf[CHUNK];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .route_mu = PTHREAD_MUTEX_INITIALIZER, .cmu = PTHREAD_MUTEX_INITIALIZER, .ccv = PTHREAD_COND_INITIALIZER, .ep = -1};

static void trace(const esb *e, const char *what, const egress_addr *a, unsigned port, const char *name,
                  const egress_decision *d) {
  if (!g.cfg.trace) return;
  char addr[64];
  egress_addr_str(a, addr, sizeof addr);
  fprintf(stderr, "sandboxd: egress %s: %s %s:%u%s%s%s -> %s%s%s%s%s%s\n", e ? e->id : "?", what, addr, port,
          name ? " (" : "", name ? name : "", name ? ")" : "",
          !d ? "?" : d->verdict == EGRESS_DENY ? "deny" : d->verdict == EGRESS_NEED_NAME ? "need name" : "allow",
          d && d->why ? ": " : "", d && d->why ? d->why : "", d && d->rule ? " (" : "", d && d->rule ? d->rule->text : "",
          d && d->rule ? ")" : "");
}

/* ---- sockets ---- */

static void sa_to_addr(const struct sockaddr_storage *ss, egress_addr *a, uint16_t *port) {
  memset(a, 0, sizeof *a);
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
    a->family = AF_INET;
    memcpy(a->addr, &s4->sin_addr, 4);
    *port = ntohs(s4->sin_port);
  } else {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    a->family = AF_INET6;
    memcpy(a->addr, &s6->sin6_addr, 16);
    *port = ntohs(s6->sin6_port);
  }
}

static socklen_t addr_to_sa(const egress_addr *a, uint16_t port, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof *ss);
  if (a->family == AF_INET) {
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    memcpy(&s4->sin_addr, a->addr, 4);
    return sizeof *s4;
  }
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
  s6->sin6_family = AF_INET6;
  s6->sin6_port = htons(port);
  memcpy(&s6->sin6_addr, a->addr, 16);
  return sizeof *s6;
}

/* Is a one of the host's own addresses (what `fib daddr type local` says)? On doubt: yes. */
static bool host_local(const egress_addr *a) {
  pthread_mutex_lock(&g.route_mu);
  int t = rtnl_route_type(g.route, a->family, a->addr);
  int e = errno;
  pthread_mutex_unlock(&g.route_mu);
  errno = e;
  return t < 0 ? errno != ENETUNREACH && errno != EHOSTUNREACH : t == RTN_LOCAL;
}

/* A socket of the host's network namespace (the loop's own). mark: the host guard's. */
static int host_socket(int family, int type, bool mark) {
  int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  uint32_t m = GATEWAY_MARK;
  if (fd >= 0 && mark && setsockopt(fd, SOL_SOCKET, SO_MARK, &m, sizeof m) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* A UDP socket in the gateway bound to a (which may be any address: transparent) and connected to
 * the sandbox's src: what the sandbox sends to a from src arrives on it, and what it sends goes to
 * the sandbox from a. */
static int gateway_flow_socket(const egress_addr *a, uint16_t port, const struct sockaddr_in *src) {
  if (setns(g.gwns, CLONE_NEWNET) != 0) return -1;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int e = errno;
  if (setns(g.hostns, CLONE_NEWNET) != 0) {
    /* The loop must never stay in the gateway: its upstream sockets would be made there. */
    fprintf(stderr, "sandboxd: egress: cannot return to the host's network namespace: %s\n", strerror(errno));
    abort();
  }
  if (fd < 0) { errno = e; return -1; }
  int one = 1;
  struct sockaddr_storage ss;
  socklen_t len = addr_to_sa(a, port, &ss);
  if (setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || bind(fd, (struct sockaddr *)&ss, len) != 0 ||
      connect(fd, (const struct sockaddr *)src, sizeof *src) != 0) {
    e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static void watch(handle *h, uint32_t events) {
  if (h->fd < 0 || h->events == events) return;
  struct epoll_event ev = {.events = events, .data.ptr = h};
  int op = !h->events ? EPOLL_CTL_ADD : !events ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
  if (epoll_ctl(g.ep, op, h->fd, &ev) == 0 || (op == EPOLL_CTL_DEL && errno == EBADF)) h->events = events;
  else fprintf(stderr, "sandboxd: egress: epoll_ctl: %s\n", strerror(errno));
}

static void handle_close(handle *h, bool reset) {
  if (h->fd < 0) return;
  h->events = 0;                         /* close takes it out of epoll: the descriptor is ours alone */
  if (reset) {
    struct linger lg = {1, 0};         /* close with RST: the peer sees the connection refused/reset */
    setsockopt(h->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  close(h->fd);
  h->fd = -1;
}

/* ---- TCP ---- */

static void conn_free(conn *c, bool reset) {
  esb *e = c->sb;
  if (c->prev) c->prev->next = c->next; else e->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  e->st.open_conns--;
  if (c->rq) c->rq->c = NULL;            /* its lookup ends later, for nobody */
  handle_close(&c->down, reset);
  handle_close(&c->up, reset);
  c->next = g.dead_conns;
  g.dead_conns = c;
}

static void conn_deny(conn *c, const egress_decision *d) {
  c->sb->st.tcp_denied++;
  trace(c->sb, "tcp", &c->dest.addr, c->dest.port, c->name[0] ? c->name : NULL, d);
  conn_free(c, true);
}

static size_t pending(const conn *c, int dir) { return c->plen[dir] + c->inpipe[dir]; }

/* What epoll should watch on both sides of a relay: read a side only while nothing of it waits
 * for the other side (backpressure), write a side while something waits for it. */
static void relay_interest(conn *c) {
  uint32_t d = 0, u = 0;
  if (!c->eof[TO_UP] && !pending(c, TO_UP)) d |= EPOLLIN;
  if (pending(c, TO_DOWN)) d |= EPOLLOUT;
  if (!c->eof[TO_DOWN] && !pending(c, TO_DOWN)) u |= EPOLLIN;
  if (pending(c, TO_UP)) u |= EPOLLOUT;
  watch(&c->down, d);
  watch(&c->up, u);
}

static void count(conn *c, int dir, size_t n) {
  if (dir == TO_UP) c->sb->st.bytes_out += n; else c->sb->st.bytes_in += n;
}

/* Sends what waits for direction dir, as far as the other side takes it; true when the
 * connection is still fine. */
static bool flush(conn *c, int dir) {
  handle *to = dir == TO_UP ? &c->up : &c->down;
  while (c->plen[dir]) {
    ssize_t n = send(to->fd, c->pend[dir] + c->poff[dir], c->plen[dir], MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c->poff[dir] += (size_t)n;
    c->plen[dir] -= (size_t)n;
    count(c, dir, (size_t)n);
  }
  c->poff[dir] = 0;
  while (c->inpipe[dir]) {
    ssize_t n = splice(c->pipe_fd[dir][0], NULL, to->fd, NULL, c->inpipe[dir], SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    c->inpipe[dir] -= (size_t)n;
    count(c, dir, (size_t)n);
  }
  /* The source ended and everything of it went: pass the half-close on. */
  if (c->eof[dir]) shutdown(to->fd, SHUT_WR);
  return true;
}

static void relay_done_or_watch(conn *c) {
  if (c->eof[TO_UP] && c->eof[TO_DOWN] && !pending(c, TO_UP) && !pending(c, TO_DOWN)) { conn_free(c, false); return; }
  relay_interest(c);
}

/* Keeps n bytes the other side did not take yet for direction dir (its buffer is empty). */
static bool keep(conn *c, int dir, const uint8_t *p, size_t n) {
  uint8_t *b = malloc(n);
  if (!b) return false;
  memcpy(b, p, n);
  free(c->pend[dir]);
  c->pend[dir] = b;
  c->plen[dir] = n;
  c->poff[dir] = 0;
  return true;
}

/* One read from the source of direction dir (TO_UP: the sandbox's side), passed on at once as
 * far as the other side takes it. A direction starts by copying through sandboxd's buffer (a
 * request, an answer: no pipe to make); a read that fills the buffer makes it a bulk transfer,
 * which goes through a pipe from then on (splice: the kernel moves the bytes, sandboxd never
 * sees them). */
static void relay_read(conn *c, int dir) {
  handle *from = dir == TO_UP ? &c->down : &c->up, *to = dir == TO_UP ? &c->up : &c->down;
  if (!c->bulk[dir]) {
    ssize_t n = recv(from->fd, g.buf, sizeof g.buf, 0);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) conn_free(c, true);   /* a reset resets the other side */
      return;
    }
    if (n == 0) c->eof[dir] = true;
    if ((size_t)n == sizeof g.buf) c->bulk[dir] = true;
    ssize_t w = n ? send(to->fd, g.buf, (size_t)n, MSG_NOSIGNAL) : 0;
    if (w < 0 && errno != EAGAIN && errno != EINTR) { conn_free(c, true); return; }
    if (w < 0) w = 0;
    count(c, dir, (size_t)w);
    if ((w < n && !keep(c, dir, g.buf + w, (size_t)(n - w))) || !flush(c, dir)) { conn_free(c, true); return; }
    relay_done_or_watch(c);
    return;
  }
  if (c->pipe_fd[dir][0] < 0) {
    if (pipe2(c->pipe_fd[dir], O_NONBLOCK | O_CLOEXEC) != 0) {
      c->pipe_fd[dir][0] = c->pipe_fd[dir][1] = -1;
      conn_free(c, true);
      return;
    }
    (void)fcntl(c->pipe_fd[dir][1], F_SETPIPE_SZ, PIPE_CHUNK);   /* fewer, larger moves; 64 KiB if refused */
  }
  ssize_t n = splice(from->fd, NULL, c->pipe_fd[dir][1], NULL, PIPE_CHUNK, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    conn_free(c, true);                  /* a reset on one side resets the other */
    return;
  }
  if (n == 0) c->eof[dir] = true;
  c->inpipe[dir] += (size_t)n;
  if (!flush(c, dir)) { conn_free(c, true); return; }
  relay_done_or_watch(c);
}

static void relay_write(conn *c, int dir) {
  if (!flush(c, dir)) { conn_free(c, true); return; }
  relay_done_or_watch(c);
}

static void start_relay(conn *c) {
  c->state = C_RELAY;
  c->deadline = 0;
  int one = 1;   /* bytes go on as they come: the two ends decide how to batch them (the sandbox's
                  * side has it from the listener) */
  setsockopt(c->up.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (!flush(c, TO_UP)) { conn_free(c, true); return; }   /* the sniffed bytes first */
  relay_done_or_watch(c);
}

/* Connects to the next target; on none left, the connection is reset. */
static void try_connect(conn *c) {
  while (c->itarget < c->ntarget) {
    egress_addr *a = &c->target[c->itarget++];
    handle_close(&c->up, false);
    int fd = host_socket(c->dns ? g.resolver.ss_family : a->family, SOCK_STREAM, !c->dns);
    if (fd < 0) continue;
    c->up.fd = fd;
    struct sockaddr_storage ss;
    socklen_t len = addr_to_sa(a, c->dest.port, &ss);
    if (c->dns) len = g.resolver_len, memcpy(&ss, &g.resolver, len);
    if (connect(fd, (struct sockaddr *)&ss, len) == 0) { start_relay(c); return; }
    if (errno == EINPROGRESS) {
      c->state = C_CONNECT;
      c->deadline = mono_ms() + EGRESS_CONNECT_MS;
      watch(&c->down, 0);
      watch(&c->up, EPOLLOUT);
      return;
    }
  }
  if (g.cfg.trace) trace(c->sb, "tcp connect failed", &c->dest.addr, c->dest.port, c->name[0] ? c->name : NULL, NULL);
  conn_free(c, true);
}

static void connected(conn *c) {
  int e = 0;
  socklen_t l = sizeof e;
  if (getsockopt(c->up.fd, SOL_SOCKET, SO_ERROR, &e, &l) != 0 || e != 0) { try_connect(c); return; }
  start_relay(c);
}

/* c-ares: the addresses of an allowed name, each checked again, then the connection. */
static void resolved(void *arg, int status, int timeouts, struct ares_addrinfo *res) {
  (void)timeouts;
  resolve_req *rq = arg;
  conn *c = rq->c;
  free(rq);
  if (!c) { if (res) ares_freeaddrinfo(res); return; }
  c->rq = NULL;
  c->ntarget = c->itarget = 0;
  egress_decision d = {EGRESS_DENY, NULL, 0, 0, "the name does not resolve"};
  for (struct ares_addrinfo_node *n = status == ARES_SUCCESS && res ? res->nodes : NULL; n && c->ntarget < 8; n = n->ai_next) {
    egress_addr a;
    uint16_t port;
    sa_to_addr((const struct sockaddr_storage *)n->ai_addr, &a, &port);
    pthread_mutex_lock(&g.mu);
    d = egress_decide_resolved(&c->sb->rules, &g.cfg.site, &a, host_local(&a));
    pthread_mutex_unlock(&g.mu);
    if (d.verdict == EGRESS_ALLOW) c->target[c->ntarget++] = a;
  }
  if (res) ares_freeaddrinfo(res);
  if (!c->ntarget) { conn_deny(c, &d); return; }
  c->sb->st.tcp_allowed++;
  trace(c->sb, "tcp", &c->dest.addr, c->dest.port, c->name, &(egress_decision){EGRESS_ALLOW_NAME, NULL, 'a', 0, "resolved"});
  try_connect(c);
}

static void start_resolve(conn *c) {
  resolve_req *rq = malloc(sizeof *rq);
  if (!rq) { conn_free(c, true); return; }
  rq->c = c;
  c->rq = rq;
  c->state = C_RESOLVE;
  watch(&c->down, 0);                    /* the sandbox's further bytes wait in the kernel */
  struct ares_addrinfo_hints hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  ares_getaddrinfo(g.ares, c->name, NULL, &hints, resolved, rq);
}

/* Allowed to where it was addressed: connect there. */
static void relay_as_addressed(conn *c, const egress_decision *d) {
  c->sb->st.tcp_allowed++;
  trace(c->sb, "tcp", &c->dest.addr, c->dest.port, c->dest.name,
        d ? d : &(egress_decision){EGRESS_ALLOW, NULL, 0, 0, "no name: no rule's headers"});
  c->target[0] = c->dest.addr;
  egress_unmap(&c->target[0]);
  c->ntarget = 1;
  try_connect(c);
}

/* HTTP (80) and HTTPS (443) of a sandbox whose rules set headers: its name decides whether the
 * proxy takes the requests over (egress_http.h). */
static bool wants_headers(const conn *c) {
  if (c->dest.port != 80 && c->dest.port != 443) return false;
  pthread_mutex_lock(&g.mu);
  bool any = c->sb->rules.tf.nhosts > 0 && c->sb->ca;
  pthread_mutex_unlock(&g.mu);
  return any;
}

/* A named connection that the rules allow and whose host has headers to set. */
static bool headers_for(conn *c) {
  if (c->dest.port != 80 && c->dest.port != 443) return false;
  pthread_mutex_lock(&g.mu);
  bool yes = c->sb->ca && transforms_for(&c->sb->rules.tf, c->name);
  egress_decision d = yes ? egress_decide(&c->sb->rules, &g.cfg.site, &c->dest) : (egress_decision){0};
  pthread_mutex_unlock(&g.mu);
  return yes && (d.verdict == EGRESS_ALLOW || d.verdict == EGRESS_ALLOW_NAME);
}

/* The connection goes to the HTTP layer (cfg.intercept), unread: its requests are forwarded one by
 * one with their headers (egress_http.h), each decided again. */
static void intercept(conn *c) {
  egress_intercepted *x = calloc(1, sizeof *x);
  struct sockaddr_storage peer;
  socklen_t pl = sizeof peer;
  if (!x || !g.cfg.intercept || getpeername(c->down.fd, (struct sockaddr *)&peer, &pl) != 0) {
    free(x);
    conn_free(c, true);
    return;
  }
  x->index = c->sb->index;
  snprintf(x->id, sizeof x->id, "%s", c->sb->id);
  snprintf(x->name, sizeof x->name, "%s", c->name);
  x->dest = c->dest.addr;
  x->port = c->dest.port;
  x->tls = c->dest.port == 443;
  pthread_mutex_lock(&g.mu);
  x->ca = c->sb->ca;
  egress_ca_ref(x->ca);
  pthread_mutex_unlock(&g.mu);
  c->sb->st.tcp_allowed++;
  trace(c->sb, "tcp", &c->dest.addr, c->dest.port, c->name,
        &(egress_decision){EGRESS_ALLOW_NAME, NULL, 0, 0, "intercepted: its rules set headers"});
  int fd = c->down.fd;
  watch(&c->down, 0);
  c->down.fd = -1;                       /* the HTTP layer's from now on */
  conn_free(c, false);
  g.cfg.intercept(x, fd, (struct sockaddr *)&peer, pl);
}

/* The decision for c as it stands (its name, if it has one), applied. */
static void decide_conn(conn *c) {
  pthread_mutex_lock(&g.mu);
  egress_decision d = egress_decide(&c->sb->rules, &g.cfg.site, &c->dest);
  pthread_mutex_unlock(&g.mu);
  if (d.verdict == EGRESS_ALLOW && c->state == C_NEW && wants_headers(c)) {
    /* Allowed by its address, but a host with rules may be behind it: its name first. */
    c->addr_allowed = true;
    d.verdict = EGRESS_NEED_NAME;
  }
  switch (d.verdict) {
  case EGRESS_ALLOW:
    relay_as_addressed(c, &d);
    return;
  case EGRESS_ALLOW_NAME:
    start_resolve(c);
    return;
  case EGRESS_NEED_NAME:
    if (c->state != C_NEW) break;        /* (cannot happen: a name was given) */
    c->state = C_SNIFF;
    c->deadline = mono_ms() + EGRESS_SNIFF_MS;
    /* The first bytes are peeked, not read: they stay for the relay or the interception. Edge-
     * triggered: each arrival is looked at once (what was peeked is still there). */
    watch(&c->down, EPOLLIN | EPOLLET);
    return;
  case EGRESS_DENY:
    break;
  }
  conn_deny(c, &d);
}

/* More of the first bytes: a name, or more to wait for, or none (denied, or relayed as it is when
 * its address was allowed). */
static void sniff_read(conn *c) {
  ssize_t n = recv(c->down.fd, g.buf, SNIFF_LIMIT, MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) { conn_free(c, n < 0); return; }   /* gone before it said where to */
  sniff_result r = c->dest.port == 443 ? sniff_tls(g.buf, (size_t)n, c->name) : sniff_http(g.buf, (size_t)n, c->name);
  if (r == SNIFF_MORE && n < SNIFF_LIMIT) return;
  if (r != SNIFF_NAME && c->addr_allowed) {      /* no name, so no rule's headers: as addressed */
    c->name[0] = 0;
    c->state = C_RESOLVE;
    relay_as_addressed(c, NULL);
    return;
  }
  if (r != SNIFF_NAME) {
    c->name[0] = 0;
    egress_decision d = {EGRESS_DENY, NULL, 0, 0, c->dest.port == 443 ? "no TLS server name (SNI) in its first bytes"
                                                                      : "no HTTP Host in its first bytes"};
    conn_deny(c, &d);
    return;
  }
  c->dest.name = c->name;
  c->state = C_RESOLVE;                  /* decided now, by name */
  if (headers_for(c)) { intercept(c); return; }
  decide_conn(c);
}

static esb *sandbox_of(const struct sockaddr_in *src) {
  int i = gateway_index_of(&src->sin_addr);
  return i < 0 ? NULL : g.table[i];
}

static void tcp_accept(void) {
  for (int k = 0; k < 64; k++) {
    struct sockaddr_storage peer, local;
    socklen_t pl = sizeof peer, ll = sizeof local;
    int fd = accept4(g.tcp.fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) fprintf(stderr, "sandboxd: egress: accept: %s\n", strerror(errno));
      return;
    }
    pthread_mutex_lock(&g.mu);
    esb *e = peer.ss_family == AF_INET ? sandbox_of((struct sockaddr_in *)&peer) : NULL;
    pthread_mutex_unlock(&g.mu);
    handle h = {H_DOWN, fd, 0, NULL};
    conn *c = e && e->st.open_conns < EGRESS_MAX_CONNS && getsockname(fd, (struct sockaddr *)&local, &ll) == 0
                  ? calloc(1, sizeof *c) : NULL;
    if (!c) {                            /* a spare, a sandbox gone, or too many: refused */
      if (e) e->st.tcp_denied++;
      handle_close(&h, true);
      continue;
    }
    c->sb = e;
    memset(c->pipe_fd, -1, sizeof c->pipe_fd);
    c->down = h;
    c->down.owner = c;
    c->up = (handle){H_UP, -1, 0, c};
    sa_to_addr(&local, &c->dest.addr, &c->dest.port);
    c->dest.proto = EGRESS_TCP;
    c->next = e->conns;
    if (e->conns) e->conns->prev = c;
    e->conns = c;
    e->st.open_conns++;
    struct in_addr gw;
    inet_pton(AF_INET, GATEWAY_ADDR, &gw);
    if (c->dest.addr.family == AF_INET && !memcmp(c->dest.addr.addr, &gw, 4)) {
      /* The gateway itself: DNS over TCP to the resolver, while the rules let DNS through. */
      pthread_mutex_lock(&g.mu);
      bool open = egress_dns_allowed(&e->rules, "") && g.resolver_len;
      pthread_mutex_unlock(&g.mu);
      if (c->dest.port == 53 && open) {
        c->dns = true;
        c->ntarget = 1;
        try_connect(c);
      } else {
        egress_decision d = {EGRESS_DENY, NULL, 0, 0, "the gateway serves DNS (port 53) only"};
        conn_deny(c, &d);
      }
      continue;
    }
    c->dest.host_local = host_local(&c->dest.addr);
    decide_conn(c);
  }
}

/* ---- UDP ---- */

static unsigned flow_hash(const struct sockaddr_in *src, const egress_addr *dst, uint16_t dport) {
  uint64_t h = 1469598103934665603ull;
  const uint8_t *parts[3] = {(const uint8_t *)&src->sin_addr, (const uint8_t *)&src->sin_port, dst->addr};
  size_t lens[3] = {4, 2, 16};
  for (int p = 0; p < 3; p++)
    for (size_t i = 0; i < lens[p]; i++) h = (h ^ parts[p][i]) * 1099511628211ull;
  h = (h ^ dport) * 1099511628211ull;
  return (unsigned)(h % FLOW_BUCKETS);
}

static flow *flow_find(const struct sockaddr_in *src, const egress_addr *dst, uint16_t dport) {
  for (flow *f = g.bucket[flow_hash(src, dst, dport)]; f; f = f->hnext)
    if (f->src.sin_addr.s_addr == src->sin_addr.s_addr && f->src.sin_port == src->sin_port && f->dport == dport &&
        !memcmp(&f->dst, dst, sizeof *dst))
      return f;
  return NULL;
}

static void flow_free(flow *f) {
  esb *e = f->sb;
  if (f->prev) f->prev->next = f->next; else e->flows = f->next;
  if (f->next) f->next->prev = f->prev;
  flow **pp = &g.bucket[flow_hash(&f->src, &f->dst, f->dport)];
  while (*pp && *pp != f) pp = &(*pp)->hnext;
  if (*pp) *pp = f->hnext;
  e->st.open_flows--;
  handle_close(&f->down, false);
  handle_close(&f->up, false);
  f->next = g.dead_flows;
  g.dead_flows = f;
}

static void bury(void) {
  while (g.dead_conns) {
    conn *c = g.dead_conns;
    g.dead_conns = c->next;
    for (int d = 0; d < 2; d++) {
      free(c->pend[d]);
      for (int k = 0; k < 2; k++) if (c->pipe_fd[d][k] >= 0) close(c->pipe_fd[d][k]);
    }
    free(c);
  }
  while (g.dead_flows) {
    flow *f = g.dead_flows;
    g.dead_flows = f->next;
    free(f);
  }
}

/* A query from the sandbox to its DNS server: forwarded, or answered REFUSED, or dropped. */
static void dns_query(flow *f, uint8_t *msg, size_t len) {
  char name[DNSMSG_NAME_MAX + 1];
  unsigned qtype, qclass;
  if (dnsmsg_question(msg, len, name, &qtype, &qclass) != 0) return;   /* not a query we forward */
  pthread_mutex_lock(&g.mu);
  bool ok = egress_dns_allowed(&f->sb->rules, name);
  pthread_mutex_unlock(&g.mu);
  if (g.cfg.trace) fprintf(stderr, "sandboxd: egress %s: dns %s type %u -> %s\n", f->sb->id, name, qtype, ok ? "forward" : "refused");
  if (!ok) {
    f->sb->st.dns_refused++;
    size_t n = dnsmsg_refuse(msg, len, 5, msg, len);
    if (n) (void)send(f->down.fd, msg, n, MSG_NOSIGNAL);
    return;
  }
  f->sb->st.dns_answered++;
  if (send(f->up.fd, msg, len, MSG_NOSIGNAL) > 0) f->sb->st.bytes_out += len;
}

/* A datagram from the sandbox on flow f. */
static void flow_out(flow *f, uint8_t *msg, size_t len) {
  f->last = mono_ms();
  if (f->dns) { dns_query(f, msg, len); return; }
  if (send(f->up.fd, msg, len, MSG_NOSIGNAL) > 0) f->sb->st.bytes_out += len;
}

static flow *flow_new(esb *e, const struct sockaddr_in *src, const egress_addr *dst, uint16_t dport, bool dns) {
  if (dns && !g.resolver_len) return NULL;
  flow *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->sb = e;
  f->src = *src;
  f->dst = *dst;
  f->dport = dport;
  f->dns = dns;
  f->down = (handle){H_FLOW_DOWN, -1, 0, f};
  f->up = (handle){H_FLOW_UP, -1, 0, f};
  egress_addr to = *dst;
  egress_unmap(&to);
  int family = dns ? g.resolver.ss_family : to.family;
  struct sockaddr_storage ss;
  socklen_t len = dns ? g.resolver_len : addr_to_sa(&to, dport, &ss);
  if (dns) memcpy(&ss, &g.resolver, len);
  f->up.fd = host_socket(family, SOCK_DGRAM, !dns);
  if (f->up.fd < 0 || connect(f->up.fd, (struct sockaddr *)&ss, len) != 0 ||
      (f->down.fd = gateway_flow_socket(dst, dport, src)) < 0) {
    handle_close(&f->up, false);
    free(f);
    return NULL;
  }
  f->next = e->flows;
  if (e->flows) e->flows->prev = f;
  e->flows = f;
  unsigned b = flow_hash(src, dst, dport);
  f->hnext = g.bucket[b];
  g.bucket[b] = f;
  e->st.open_flows++;
  f->last = mono_ms();
  watch(&f->down, EPOLLIN);
  watch(&f->up, EPOLLIN);
  return f;
}

/* Datagrams that reached the listener: the first of each flow (later ones go to its own socket). */
static void udp_receive(void) {
  for (int k = 0; k < 64; k++) {
    struct sockaddr_in src;
    char cbuf[CMSG_SPACE(sizeof(struct sockaddr_in6))];
    struct iovec iov = {g.buf, sizeof g.buf};
    struct msghdr m = {.msg_name = &src, .msg_namelen = sizeof src, .msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    ssize_t n = recvmsg(g.udp.fd, &m, 0);
    if (n < 0) return;
    struct sockaddr_storage orig;
    bool have = false;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
      if (cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_ORIGDSTADDR && cm->cmsg_len >= CMSG_LEN(sizeof(struct sockaddr_in))) {
        memset(&orig, 0, sizeof orig);
        memcpy(&orig, CMSG_DATA(cm), sizeof(struct sockaddr_in));
        have = true;
      }
    if (!have || src.sin_family != AF_INET) continue;
    egress_addr dst;
    uint16_t dport;
    sa_to_addr(&orig, &dst, &dport);
    pthread_mutex_lock(&g.mu);
    esb *e = sandbox_of(&src);
    pthread_mutex_unlock(&g.mu);
    if (!e) continue;
    flow *f = flow_find(&src, &dst, dport);
    if (!f) {
      struct in_addr gw;
      inet_pton(AF_INET, GATEWAY_ADDR, &gw);
      bool to_gw = dst.family == AF_INET && !memcmp(dst.addr, &gw, 4);
      egress_decision d = {EGRESS_DENY, NULL, 0, 0, "the gateway serves DNS (port 53) only"};
      if (!to_gw) {
        egress_dest dd = {dst, dport, EGRESS_UDP, NULL, host_local(&dst)};
        pthread_mutex_lock(&g.mu);
        d = egress_decide(&e->rules, &g.cfg.site, &dd);
        pthread_mutex_unlock(&g.mu);
      } else if (dport == 53) {
        d.verdict = EGRESS_ALLOW;
        d.why = "DNS";
      }
      if (d.verdict != EGRESS_ALLOW || e->st.open_flows >= EGRESS_MAX_FLOWS) {
        e->st.udp_denied++;
        if (!to_gw) trace(e, "udp", &dst, dport, NULL, &d);
        continue;
      }
      if (!to_gw) {
        e->st.udp_allowed++;
        trace(e, "udp", &dst, dport, NULL, &d);
      }
      if (!(f = flow_new(e, &src, &dst, dport, to_gw))) {
        if (g.cfg.trace) fprintf(stderr, "sandboxd: egress %s: udp flow: %s\n", e->id, strerror(errno));
        continue;
      }
    }
    flow_out(f, g.buf, (size_t)n);
  }
}

static void flow_event(handle *h, uint32_t ev) {
  flow *f = h->owner;
  (void)ev;
  ssize_t n = recv(h->fd, g.buf, sizeof g.buf, 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    if (h->kind == H_FLOW_UP && errno == ECONNREFUSED) return;   /* an ICMP error of a past datagram */
    flow_free(f);
    return;
  }
  if (h->kind == H_FLOW_DOWN) { flow_out(f, g.buf, (size_t)n); return; }
  f->last = mono_ms();
  if (send(f->down.fd, g.buf, (size_t)n, MSG_NOSIGNAL) > 0) f->sb->st.bytes_in += (uint64_t)n;
}

/* ---- c-ares on the loop ---- */

static void ares_sock(void *data, ares_socket_t fd, int readable, int writable) {
  (void)data;
  handle *free_h = NULL, *h = NULL;
  for (int i = 0; i < ARES_SOCKS; i++) {
    if (g.ares_h[i].fd == fd) h = &g.ares_h[i];
    else if (g.ares_h[i].fd < 0 && !free_h) free_h = &g.ares_h[i];
  }
  if (!readable && !writable) {
    if (h) { watch(h, 0); h->fd = -1; }
    return;
  }
  if (!h) {
    if (!free_h) return;
    h = free_h;
    *h = (handle){H_ARES, fd, 0, NULL};
  }
  watch(h, (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0));
}

/* ---- commands, timers, the loop ---- */

static void sandbox_close_all(esb *e) {
  while (e->conns) conn_free(e->conns, true);
  while (e->flows) flow_free(e->flows);
}

/* Open connections and flows of e, decided again with its rules as they are now. */
static void recheck(esb *e) {
  for (conn *c = e->conns, *next; c; c = next) {
    next = c->next;
    if (c->dns || c->state == C_SNIFF) continue;   /* a sniffing one is decided when it names itself */
    pthread_mutex_lock(&g.mu);
    egress_decision d = egress_decide(&e->rules, &g.cfg.site, &c->dest);
    pthread_mutex_unlock(&g.mu);
    if (d.verdict == EGRESS_DENY) conn_deny(c, &d);
  }
  for (flow *f = e->flows, *next; f; f = next) {
    next = f->next;
    if (f->dns) continue;
    egress_dest dd = {f->dst, f->dport, EGRESS_UDP, NULL, false};
    pthread_mutex_lock(&g.mu);
    egress_decision d = egress_decide(&e->rules, &g.cfg.site, &dd);
    pthread_mutex_unlock(&g.mu);
    if (d.verdict == EGRESS_DENY) flow_free(f);
  }
}

static void free_esb(esb *e) {
  egress_rules_free(&e->rules);
  if (e->ca) egress_ca_unref(e->ca);
  free(e);
}

static bool run_commands(void) {
  uint64_t v;
  if (read(g.wake.fd, &v, sizeof v) < 0 && errno != EAGAIN) {}
  pthread_mutex_lock(&g.cmu);
  cmd *q = g.q;
  g.q = NULL;
  pthread_mutex_unlock(&g.cmu);
  /* Oldest first. */
  cmd *rev = NULL;
  while (q) { cmd *n = q->next; q->next = rev; rev = q; q = n; }
  bool stop = false;
  unsigned long last = 0;
  while (rev) {
    cmd *c = rev;
    rev = c->next;
    pthread_mutex_lock(&g.mu);
    esb *e = c->index > 0 && c->index < GATEWAY_MAX_SANDBOXES ? g.table[c->index] : NULL;
    pthread_mutex_unlock(&g.mu);
    if (c->type == CMD_STOP) stop = true;
    else if (e && c->type == CMD_RECHECK) recheck(e);
    else if (e && c->type == CMD_DETACH) {
      sandbox_close_all(e);
      pthread_mutex_lock(&g.mu);
      g.table[c->index] = NULL;
      pthread_mutex_unlock(&g.mu);
      free_esb(e);
    }
    last = c->serial;
    free(c);
  }
  pthread_mutex_lock(&g.cmu);
  if (last > g.done) g.done = last;
  pthread_cond_broadcast(&g.ccv);
  pthread_mutex_unlock(&g.cmu);
  return stop;
}

/* Posts a command to the loop and waits until it ran. false when the loop is not running. */
static bool post(int type, int index) {
  cmd *c = calloc(1, sizeof *c);
  if (!c) return false;
  c->type = type;
  c->index = index;
  pthread_mutex_lock(&g.cmu);
  if (!g.running) { pthread_mutex_unlock(&g.cmu); free(c); return false; }
  c->serial = ++g.serial;
  c->next = g.q;
  g.q = c;
  uint64_t one = 1;
  if (write(g.wake.fd, &one, sizeof one) < 0) {}
  unsigned long want = c->serial;
  while (g.done < want) pthread_cond_wait(&g.ccv, &g.cmu);
  pthread_mutex_unlock(&g.cmu);
  return true;
}

static void sweep(int64_t now) {
  for (int i = 1; i < GATEWAY_MAX_SANDBOXES; i++) {
    esb *e = g.table[i];                 /* only the loop removes entries: reading is safe here */
    if (!e) continue;
    for (conn *c = e->conns, *next; c; c = next) {
      next = c->next;
      if (c->deadline && now >= c->deadline) {
        if (c->state == C_SNIFF && c->addr_allowed) {
          c->state = C_RESOLVE;
          relay_as_addressed(c, NULL);   /* a silent client of an allowed address: as addressed */
        } else if (c->state == C_SNIFF) {
          egress_decision d = {EGRESS_DENY, NULL, 0, 0, "said nothing naming a host in time"};
          conn_deny(c, &d);
        } else if (c->state == C_CONNECT) {
          try_connect(c);
        }
      }
    }
    for (flow *f = e->flows, *next; f; f = next) {
      next = f->next;
      if (now - f->last >= (f->dns ? EGRESS_DNS_IDLE_MS : EGRESS_UDP_IDLE_MS)) flow_free(f);
    }
  }
}

static void event(handle *h, uint32_t ev) {
  switch (h->kind) {
  case H_TCP_LISTEN: tcp_accept(); return;
  case H_UDP_LISTEN: udp_receive(); return;
  case H_FLOW_DOWN: case H_FLOW_UP: flow_event(h, ev); return;
  case H_ARES:
    ares_process_fd(g.ares, ev & (EPOLLIN | EPOLLERR | EPOLLHUP) ? h->fd : ARES_SOCKET_BAD,
                    ev & EPOLLOUT ? h->fd : ARES_SOCKET_BAD);
    return;
  case H_WAKE: return;
  case H_DOWN: case H_UP: break;
  }
  conn *c = h->owner;
  bool down = h->kind == H_DOWN;
  switch (c->state) {
  case C_SNIFF: if (down) sniff_read(c); return;
  case C_CONNECT: if (!down) connected(c); return;
  case C_RESOLVE: return;
  case C_RELAY: {
    int in = down ? TO_UP : TO_DOWN, out = down ? TO_DOWN : TO_UP;
    /* Writes first (they free room); c may be gone after either: the next round reads. */
    if (ev & EPOLLOUT) { relay_write(c, out); return; }
    /* A hang-up or error reported while this side's bytes still wait for the other side: look
     * again once they went (relay_interest watches it again then). */
    if (pending(c, in)) { watch(h, 0); return; }
    relay_read(c, in);   /* errors and hang-ups show as readable: recv tells which */
    return;
  }
  }
}

static void *loop(void *arg) {
  (void)arg;
  struct epoll_event evs[128];
  int64_t next_sweep = mono_ms() + 1000;
  for (;;) {
    int64_t now = mono_ms();
    int timeout = (int)(next_sweep > now ? next_sweep - now : 0);
    struct timeval maxtv = {timeout / 1000, (timeout % 1000) * 1000}, tv, *t = ares_timeout(g.ares, &maxtv, &tv);
    if (t) timeout = (int)(t->tv_sec * 1000 + t->tv_usec / 1000);
    int n = epoll_wait(g.ep, evs, 128, timeout);
    bool stop = false;
    for (int i = 0; i < n; i++) {
      handle *h = evs[i].data.ptr;
      if (h->kind == H_WAKE) { stop |= run_commands(); continue; }
      /* A handle closed by an earlier event of this round (its owner waits in the graveyard). */
      if (h->fd < 0 || !h->events) continue;
      event(h, evs[i].events);
    }
    if (stop) break;
    ares_process_fd(g.ares, ARES_SOCKET_BAD, ARES_SOCKET_BAD);   /* timeouts */
    now = mono_ms();
    if (now >= next_sweep) { sweep(now); next_sweep = now + 1000; }
    bury();
  }
  bury();
  return NULL;
}

/* ---- the public side ---- */

/* The resolvers: --dns, else the host's resolv.conf; the first one is the DNS forwarder's. */
static int setup_resolvers(char *err, size_t errlen) {
  char csv[EGRESS_DNS_SERVERS * 66] = "";
  char first[64] = "";
  if (g.cfg.ndns) {
    for (size_t i = 0; i < g.cfg.ndns; i++) {
      strcat(csv, i ? "," : "");
      strcat(csv, g.cfg.dns[i]);
    }
    snprintf(first, sizeof first, "%s", g.cfg.dns[0]);
    snprintf(g.dns_csv, sizeof g.dns_csv, "%s", csv);
    if (ares_set_servers_ports_csv(g.ares, csv) != ARES_SUCCESS) { snprintf(err, errlen, "--dns %s: not ADDR or ADDR:PORT", csv); return -1; }
  } else {
    FILE *f = fopen("/etc/resolv.conf", "re");
    char line[512];
    while (f && !first[0] && fgets(line, sizeof line, f))
      if (sscanf(line, "nameserver %63s", first) != 1) first[0] = 0;
    if (f) fclose(f);
  }
  if (!first[0]) return 0;                 /* no resolver: the forwarder answers nothing */
  /* "ADDR", "ADDR:PORT", "[ADDR]:PORT" */
  char host[64];
  unsigned port = 53;
  egress_addr a;
  if (first[0] == '[') {
    char *close_b = strchr(first, ']');
    if (!close_b) goto bad;
    snprintf(host, sizeof host, "%.*s", (int)(close_b - first - 1), first + 1);
    if (close_b[1] == ':' && sscanf(close_b + 2, "%u", &port) != 1) goto bad;
  } else if (strchr(first, ':') && strchr(first, ':') == strrchr(first, ':')) {
    snprintf(host, sizeof host, "%.*s", (int)(strchr(first, ':') - first), first);
    if (sscanf(strchr(first, ':') + 1, "%u", &port) != 1) goto bad;
  } else {
    snprintf(host, sizeof host, "%s", first);
  }
  if (egress_addr_parse(host, &a) != 0 || port == 0 || port > 65535) goto bad;
  g.resolver_len = addr_to_sa(&a, (uint16_t)port, &g.resolver);
  return 0;
bad:
  snprintf(err, errlen, "resolver \"%s\": expected ADDR, ADDR:PORT or [ADDR]:PORT", first);
  return -1;
}

int egress_start(const egress_config *cfg, char *err, size_t errlen) {
  if (g.running) return 0;
  g.cfg = *cfg;
  int tcp, udp;
  gateway_listeners(&tcp, &udp);
  g.gwns = gateway_netns();
  g.hostns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int rfd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);
  g.route = rfd >= 0 ? rtnl_open(rfd) : NULL;
  if (tcp < 0 || udp < 0 || g.hostns < 0 || !g.route) {
    snprintf(err, errlen, "egress: %s", tcp < 0 ? "no gateway" : strerror(errno));
    return -1;
  }
  static bool ares_ready;
  if (!ares_ready && ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) { snprintf(err, errlen, "c-ares: cannot initialise"); return -1; }
  ares_ready = true;
  for (int i = 0; i < ARES_SOCKS; i++) g.ares_h[i] = (handle){H_ARES, -1, 0, NULL};
  struct ares_options o = {.sock_state_cb = ares_sock, .lookups = (char *)"b", .timeout = 2000, .tries = 2};
  if (ares_init_options(&g.ares, &o, ARES_OPT_SOCK_STATE_CB | ARES_OPT_LOOKUPS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES) != ARES_SUCCESS) {
    snprintf(err, errlen, "c-ares: cannot make a channel");
    return -1;
  }
  if (setup_resolvers(err, errlen) != 0) { ares_destroy(g.ares); return -1; }
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  g.tcp = (handle){H_TCP_LISTEN, tcp, 0, NULL};
  g.udp = (handle){H_UDP_LISTEN, udp, 0, NULL};
  g.wake = (handle){H_WAKE, eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), 0, NULL};
  if (g.ep < 0 || g.wake.fd < 0) { snprintf(err, errlen, "egress: %s", strerror(errno)); return -1; }
  watch(&g.tcp, EPOLLIN);
  watch(&g.udp, EPOLLIN);
  watch(&g.wake, EPOLLIN);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);   /* main waits for the signals, not this thread */
  int rc = pthread_create(&g.th, NULL, loop, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) { snprintf(err, errlen, "egress: thread: %s", strerror(rc)); return -1; }
  pthread_mutex_lock(&g.cmu);
  g.running = true;
  pthread_mutex_unlock(&g.cmu);
  return 0;
}

bool egress_running(void) { return g.running; }

void egress_stop(void) {
  if (!g.running) return;
  post(CMD_STOP, 0);
  pthread_join(g.th, NULL);
  pthread_mutex_lock(&g.cmu);
  g.running = false;
  pthread_mutex_unlock(&g.cmu);
  for (int i = 1; i < GATEWAY_MAX_SANDBOXES; i++)
    if (g.table[i]) { sandbox_close_all(g.table[i]); free_esb(g.table[i]); g.table[i] = NULL; }
  bury();
  ares_destroy(g.ares);
  close(g.ep);
  close(g.wake.fd);
  g.ep = -1;
}

int egress_attach(int index, const char *id, egress_rules *rules, char *err, size_t errlen) {
  if (index <= 0 || index >= GATEWAY_MAX_SANDBOXES) { snprintf(err, errlen, "no network link"); egress_rules_free(rules); return -1; }
  esb *e = calloc(1, sizeof *e);
  if (!e) { snprintf(err, errlen, "out of memory"); egress_rules_free(rules); return -1; }
  e->index = index;
  snprintf(e->id, sizeof e->id, "%s", id);
  if (rules->tf.nhosts && !(e->ca = egress_ca_new(id, err, errlen))) { free(e); egress_rules_free(rules); return -1; }
  e->rules = *rules;
  memset(rules, 0, sizeof *rules);
  pthread_mutex_lock(&g.mu);
  bool taken = g.table[index] != NULL;
  if (!taken) g.table[index] = e;
  pthread_mutex_unlock(&g.mu);
  if (taken) { snprintf(err, errlen, "network link %d is in use", index); free_esb(e); return -1; }
  return 0;
}

int egress_update(int index, egress_rules *rules, char *err, size_t errlen) {
  egress_rules old;
  pthread_mutex_lock(&g.mu);
  esb *e = index > 0 && index < GATEWAY_MAX_SANDBOXES ? g.table[index] : NULL;
  bool need_ca = e && !e->ca && rules->tf.nhosts;
  char id[72];
  if (e) snprintf(id, sizeof id, "%s", e->id);
  pthread_mutex_unlock(&g.mu);
  /* The first rules with headers: the sandbox's CA, made before they apply (not under the lock). */
  egress_ca *ca = need_ca ? egress_ca_new(id, err, errlen) : NULL;
  if (need_ca && !ca) { egress_rules_free(rules); return -1; }
  pthread_mutex_lock(&g.mu);
  e = index > 0 && index < GATEWAY_MAX_SANDBOXES ? g.table[index] : NULL;
  if (e && ca && !e->ca) { e->ca = ca; ca = NULL; }
  if (e) { old = e->rules; e->rules = *rules; }
  pthread_mutex_unlock(&g.mu);
  if (ca) egress_ca_unref(ca);
  if (!e) { snprintf(err, errlen, "the sandbox has no egress"); egress_rules_free(rules); return -1; }
  memset(rules, 0, sizeof *rules);
  egress_rules_free(&old);
  post(CMD_RECHECK, index);              /* returns once open ones the new rules deny are gone */
  return 0;
}

void egress_detach(int index) {
  if (index <= 0 || index >= GATEWAY_MAX_SANDBOXES) return;
  if (post(CMD_DETACH, index)) return;
  pthread_mutex_lock(&g.mu);             /* no loop: nothing is open */
  esb *e = g.table[index];
  g.table[index] = NULL;
  pthread_mutex_unlock(&g.mu);
  if (e) free_esb(e);
}

/* ---- intercepted requests (egress_http.h) ---- */

void egress_intercepted_free(egress_intercepted *x) {
  if (!x) return;
  if (x->ca) egress_ca_unref(x->ca);
  free(x);
}

/* x's sandbox, if it is still the one at its index (under g.mu). */
static esb *esb_of(const egress_intercepted *x) {
  esb *e = x->index > 0 && x->index < GATEWAY_MAX_SANDBOXES ? g.table[x->index] : NULL;
  return e && !strcmp(e->id, x->id) ? e : NULL;
}

bool egress_attached(const egress_intercepted *x) {
  pthread_mutex_lock(&g.mu);
  bool yes = esb_of(x) != NULL;
  pthread_mutex_unlock(&g.mu);
  return yes;
}

char *egress_ca_pem_of(int index) {
  pthread_mutex_lock(&g.mu);
  esb *e = index > 0 && index < GATEWAY_MAX_SANDBOXES ? g.table[index] : NULL;
  char *pem = e && e->ca ? strdup(egress_ca_pem(e->ca)) : NULL;
  pthread_mutex_unlock(&g.mu);
  return pem;
}

int egress_upstream_socket(int family, int type) { return host_socket(family, type, true); }

typedef struct { egress_addr *out; size_t max, n; bool done; } sync_lookup;

static void sync_done(void *arg, int status, int timeouts, struct ares_addrinfo *res) {
  (void)timeouts;
  sync_lookup *l = arg;
  for (struct ares_addrinfo_node *n = status == ARES_SUCCESS && res ? res->nodes : NULL; n && l->n < l->max; n = n->ai_next) {
    uint16_t port;
    sa_to_addr((const struct sockaddr_storage *)n->ai_addr, &l->out[l->n], &port);
    egress_unmap(&l->out[l->n]);
    l->n++;
  }
  if (res) ares_freeaddrinfo(res);
  l->done = true;
}

/* name's addresses, as the loop's resolvers give them, on the caller's thread (its own channel). */
static size_t resolve_sync(const char *name, egress_addr *out, size_t max) {
  ares_channel ch;
  struct ares_options o = {.lookups = (char *)"b", .timeout = 2000, .tries = 2};
  if (ares_init_options(&ch, &o, ARES_OPT_LOOKUPS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES) != ARES_SUCCESS) return 0;
  if (g.dns_csv[0] && ares_set_servers_ports_csv(ch, g.dns_csv) != ARES_SUCCESS) { ares_destroy(ch); return 0; }
  sync_lookup l = {out, max, 0, false};
  struct ares_addrinfo_hints hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  ares_getaddrinfo(ch, name, NULL, &hints, sync_done, &l);
  while (!l.done) {
    ares_socket_t socks[ARES_GETSOCK_MAXNUM];
    int bits = ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
    struct pollfd pf[ARES_GETSOCK_MAXNUM];
    nfds_t n = 0;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
      short ev = (short)((ARES_GETSOCK_READABLE(bits, i) ? POLLIN : 0) | (ARES_GETSOCK_WRITABLE(bits, i) ? POLLOUT : 0));
      if (ev) pf[n++] = (struct pollfd){socks[i], ev, 0};
    }
    struct timeval tv, *t = ares_timeout(ch, NULL, &tv);
    int ms = t ? (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000) : 1000;
    int pr = poll(pf, n, ms);
    if (pr <= 0) { ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD); continue; }
    for (nfds_t i = 0; i < n; i++)
      if (pf[i].revents)
        ares_process_fd(ch, pf[i].revents & (POLLIN | POLLERR | POLLHUP) ? pf[i].fd : ARES_SOCKET_BAD,
                        pf[i].revents & POLLOUT ? pf[i].fd : ARES_SOCKET_BAD);
  }
  ares_destroy(ch);
  return l.n;
}

void egress_plan_free(egress_plan *p) {
  for (size_t i = 0; i < p->nheaders; i++) {
    free(p->headers[i].name);
    free(p->headers[i].value);
  }
  free(p->headers);
  p->headers = NULL;
  p->nheaders = 0;
}

void egress_plan_request(const egress_intercepted *x, const char *host, egress_answer *known, egress_plan *out) {
  memset(out, 0, sizeof *out);
  out->verdict = EGRESS_DENY;
  egress_dest d = {x->dest, x->port, EGRESS_TCP, host, host_local(&x->dest)};
  pthread_mutex_lock(&g.mu);
  esb *e = esb_of(x);
  egress_decision dd = e ? egress_decide(&e->rules, &g.cfg.site, &d) : (egress_decision){EGRESS_DENY, NULL, 0, 0, "the sandbox is gone"};
  pthread_mutex_unlock(&g.mu);
  if (dd.verdict != EGRESS_ALLOW && dd.verdict != EGRESS_ALLOW_NAME) {
    out->why = dd.why ? dd.why : "denied by its rules";
    return;
  }
  /* Where the name goes is sandboxd's to say: the address the sandbox dialled counts for nothing. */
  egress_addr found[EGRESS_PLAN_ADDRS];
  bool local[EGRESS_PLAN_ADDRS];
  size_t nfound;
  if (known && known->naddrs && !strcmp(known->host, host)) {
    nfound = known->naddrs;
    memcpy(found, known->addrs, nfound * sizeof *found);
  } else {
    nfound = resolve_sync(host, found, EGRESS_PLAN_ADDRS);
    if (known && strlen(host) < sizeof known->host) {
      snprintf(known->host, sizeof known->host, "%s", host);
      memcpy(known->addrs, found, nfound * sizeof *found);
      known->naddrs = nfound;                    /* none: asked again next time */
    }
  }
  for (size_t i = 0; i < nfound; i++) local[i] = host_local(&found[i]);
  pthread_mutex_lock(&g.mu);
  e = esb_of(x);
  for (size_t i = 0; e && i < nfound; i++) {
    egress_dest da = {found[i], x->port, EGRESS_TCP, host, local[i]};
    egress_decision v = egress_decide(&e->rules, &g.cfg.site, &da);
    if (v.verdict == EGRESS_ALLOW_NAME) v = egress_decide_resolved(&e->rules, &g.cfg.site, &found[i], local[i]);
    if (v.verdict == EGRESS_ALLOW) out->addrs[out->naddrs++] = found[i];
  }
  const transform_host *th = e && out->naddrs ? transforms_for(&e->rules.tf, host) : NULL;
  bool ok = true;
  if (th && th->nheaders) {
    out->headers = calloc(th->nheaders, sizeof *out->headers);
    ok = out->headers != NULL;
    for (size_t i = 0; ok && i < th->nheaders; i++) {
      out->headers[i].name = strdup(th->headers[i].name);
      out->headers[i].value = strdup(th->headers[i].value);
      out->nheaders = i + 1;
      ok = out->headers[i].name && out->headers[i].value;
    }
  }
  pthread_mutex_unlock(&g.mu);
  if (!e) { out->why = "the sandbox is gone"; egress_plan_free(out); return; }
  if (!out->naddrs) { out->why = nfound ? "it resolves to no address its rules allow" : "the name does not resolve"; return; }
  if (!ok) { out->why = "out of memory"; out->naddrs = 0; egress_plan_free(out); return; }
  out->verdict = EGRESS_ALLOW_NAME;
}
