/* rtnl.c — rtnetlink requests over libmnl (see rtnl.h). */
#include "rtnl.h"

#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct rtnl {
  struct mnl_socket *nl;
  unsigned portid, seq;
  char buf[8192];                  /* one request, then its acknowledgement (MNL_SOCKET_BUFFER_SIZE) */
};

rtnl *rtnl_open(int fd) {
  rtnl *r = calloc(1, sizeof *r);
  if (!r) { close(fd); errno = ENOMEM; return NULL; }
  r->nl = mnl_socket_fdopen(fd);
  if (!r->nl || mnl_socket_bind(r->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
    int e = errno;
    if (r->nl) mnl_socket_close(r->nl); else close(fd);
    free(r);
    errno = e;
    return NULL;
  }
  r->portid = mnl_socket_get_portid(r->nl);
  r->seq = (unsigned)time(NULL);
  return r;
}

void rtnl_close(rtnl *r) {
  if (!r) return;
  mnl_socket_close(r->nl);
  free(r);
}

static struct nlmsghdr *start(rtnl *r, uint16_t type, uint16_t flags) {
  struct nlmsghdr *nlh = mnl_nlmsg_put_header(r->buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  nlh->nlmsg_seq = ++r->seq;
  return nlh;
}

/* Sends nlh and waits for its acknowledgement. 0, or -1 with errno and err ("what: reason"). */
static int request(rtnl *r, struct nlmsghdr *nlh, const char *what, char *err, size_t errlen) {
  unsigned seq = nlh->nlmsg_seq;
  if (mnl_socket_sendto(r->nl, nlh, nlh->nlmsg_len) < 0) goto fail;
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(r->nl, r->buf, sizeof r->buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      goto fail;
    }
    int rc = mnl_cb_run(r->buf, (size_t)n, seq, r->portid, NULL, NULL);
    if (rc == MNL_CB_ERROR) goto fail;
    if (rc == MNL_CB_STOP) return 0;   /* the acknowledgement (error 0) */
  }
fail:;
  int e = errno;
  if (err && errlen) snprintf(err, errlen, "%s: %s", what, strerror(e));
  errno = e;
  return -1;
}

int rtnl_veth_add(rtnl *r, const char *name, const char *peer, int peer_netns_fd, char *err, size_t errlen) {
  struct nlmsghdr *nlh = start(r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
  ifi->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
  struct nlattr *info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
  struct nlattr *data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
  struct nlattr *p = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
  /* The peer's attributes follow an ifinfomsg of its own inside the nest. */
  struct ifinfomsg *pifi = mnl_nlmsg_put_extra_header(nlh, sizeof *pifi);
  pifi->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, peer);
  if (peer_netns_fd >= 0) mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, (uint32_t)peer_netns_fd);
  mnl_attr_nest_end(nlh, p);
  mnl_attr_nest_end(nlh, data);
  mnl_attr_nest_end(nlh, info);
  char what[64];
  snprintf(what, sizeof what, "veth %s/%s", name, peer);
  return request(r, nlh, what, err, errlen);
}

int rtnl_link_index(rtnl *r, const char *name) {
  /* if_nametoindex asks the calling thread's namespace, which need not be the socket's: ask the
   * socket's own namespace instead (RTM_GETLINK by name). */
  struct nlmsghdr *nlh = start(r, RTM_GETLINK, 0);
  nlh->nlmsg_flags = NLM_F_REQUEST;
  struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
  ifi->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
  unsigned seq = nlh->nlmsg_seq;
  if (mnl_socket_sendto(r->nl, nlh, nlh->nlmsg_len) < 0) return 0;
  ssize_t n;
  while ((n = mnl_socket_recvfrom(r->nl, r->buf, sizeof r->buf)) < 0 && errno == EINTR) {}
  if (n < (ssize_t)sizeof(struct nlmsghdr)) return 0;
  struct nlmsghdr *reply = (struct nlmsghdr *)r->buf;
  if (reply->nlmsg_seq != seq || reply->nlmsg_type != RTM_NEWLINK) return 0;
  struct ifinfomsg *got = mnl_nlmsg_get_payload(reply);
  return got->ifi_index;
}

static int link_change(rtnl *r, uint16_t type, const char *name, unsigned flags, unsigned change, const char *what,
                       char *err, size_t errlen) {
  struct nlmsghdr *nlh = start(r, type, 0);
  struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
  ifi->ifi_family = AF_UNSPEC;
  ifi->ifi_flags = flags;
  ifi->ifi_change = change;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
  char w[64];
  snprintf(w, sizeof w, "%s %s", what, name);
  return request(r, nlh, w, err, errlen);
}

int rtnl_link_del(rtnl *r, const char *name, char *err, size_t errlen) {
  return link_change(r, RTM_DELLINK, name, 0, 0, "delete link", err, errlen);
}

int rtnl_link_up(rtnl *r, const char *name, char *err, size_t errlen) {
  return link_change(r, RTM_NEWLINK, name, IFF_UP, IFF_UP, "bring up", err, errlen);
}

static size_t addr_len(int family) { return family == AF_INET ? 4 : 16; }

/* dev's index, or 0 with errno ENODEV and err ("<what> on <dev>: no such link"). */
static int link_or_fail(rtnl *r, const char *dev, const char *what, char *err, size_t errlen) {
  int index = rtnl_link_index(r, dev);
  if (!index) {
    if (err && errlen) snprintf(err, errlen, "%s on %s: no such link", what, dev);
    errno = ENODEV;
  }
  return index;
}

int rtnl_addr_add(rtnl *r, const char *dev, int family, const void *addr, int prefix, bool nodad, char *err, size_t errlen) {
  int index = link_or_fail(r, dev, "address", err, errlen);
  if (!index) return -1;
  struct nlmsghdr *nlh = start(r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE);
  struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof *ifa);
  ifa->ifa_family = (unsigned char)family;
  ifa->ifa_prefixlen = (unsigned char)prefix;
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  ifa->ifa_index = (unsigned)index;
  if (nodad) ifa->ifa_flags = IFA_F_NODAD;
  mnl_attr_put(nlh, IFA_LOCAL, addr_len(family), addr);
  mnl_attr_put(nlh, IFA_ADDRESS, addr_len(family), addr);
  char w[64];
  snprintf(w, sizeof w, "address on %s", dev);
  return request(r, nlh, w, err, errlen);
}

int rtnl_route_add(rtnl *r, int family, const void *dst, int prefix, const void *gw, const char *dev,
                   uint32_t table, bool local, char *err, size_t errlen) {
  int index = dev ? link_or_fail(r, dev, "route", err, errlen) : 0;
  if (dev && !index) return -1;
  struct nlmsghdr *nlh = start(r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
  struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof *rtm);
  rtm->rtm_family = (unsigned char)family;
  rtm->rtm_dst_len = (unsigned char)prefix;
  rtm->rtm_table = table < 256 ? (unsigned char)(table ? table : RT_TABLE_MAIN) : RT_TABLE_UNSPEC;
  rtm->rtm_protocol = RTPROT_STATIC;
  rtm->rtm_type = local ? RTN_LOCAL : RTN_UNICAST;
  rtm->rtm_scope = local ? RT_SCOPE_HOST : gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
  if (table >= 256) mnl_attr_put_u32(nlh, RTA_TABLE, table);
  if (prefix) mnl_attr_put(nlh, RTA_DST, addr_len(family), dst);
  if (gw) mnl_attr_put(nlh, RTA_GATEWAY, addr_len(family), gw);
  if (index) mnl_attr_put_u32(nlh, RTA_OIF, (uint32_t)index);
  return request(r, nlh, "route", err, errlen);
}

int rtnl_rule_add(rtnl *r, int family, uint32_t fwmark, uint32_t table, char *err, size_t errlen) {
  struct nlmsghdr *nlh = start(r, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL);
  struct fib_rule_hdr *frh = mnl_nlmsg_put_extra_header(nlh, sizeof *frh);
  frh->family = (unsigned char)family;
  frh->action = FR_ACT_TO_TBL;
  frh->table = table < 256 ? (unsigned char)table : RT_TABLE_UNSPEC;
  if (table >= 256) mnl_attr_put_u32(nlh, FRA_TABLE, table);
  mnl_attr_put_u32(nlh, FRA_FWMARK, fwmark);
  mnl_attr_put_u32(nlh, FRA_FWMASK, 0xffffffffu);
  return request(r, nlh, "policy rule", err, errlen);
}

int rtnl_route_type(rtnl *r, int family, const void *dst) {
  struct nlmsghdr *nlh = start(r, RTM_GETROUTE, 0);
  nlh->nlmsg_flags = NLM_F_REQUEST;
  struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof *rtm);
  rtm->rtm_family = (unsigned char)family;
  rtm->rtm_dst_len = family == AF_INET ? 32 : 128;
  mnl_attr_put(nlh, RTA_DST, addr_len(family), dst);
  unsigned seq = nlh->nlmsg_seq;
  if (mnl_socket_sendto(r->nl, nlh, nlh->nlmsg_len) < 0) return -1;
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(r->nl, r->buf, sizeof r->buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    struct nlmsghdr *reply = (struct nlmsghdr *)r->buf;
    if (!mnl_nlmsg_ok(reply, (int)n) || reply->nlmsg_seq != seq) continue;   /* a stale answer */
    if (reply->nlmsg_type == NLMSG_ERROR) {
      const struct nlmsgerr *e = mnl_nlmsg_get_payload(reply);
      errno = e->error ? -e->error : EIO;
      return e->error == -ENETUNREACH ? RTN_UNREACHABLE : -1;
    }
    if (reply->nlmsg_type != RTM_NEWROUTE) { errno = EIO; return -1; }
    const struct rtmsg *got = mnl_nlmsg_get_payload(reply);
    return got->rtm_type;
  }
}
