/* egress_rules.c — E2B's allowOut/denyOut parsed, and the decision (see egress_rules.h). */
#include "egress_rules.h"
#include "sniff.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>


int egress_addr_parse(const char *s, egress_addr *a) {
  memset(a, 0, sizeof *a);
  if (inet_pton(AF_INET, s, a->addr) == 1) { a->family = AF_INET; return 0; }
  if (inet_pton(AF_INET6, s, a->addr) == 1) { a->family = AF_INET6; return 0; }
  return -1;
}

void egress_addr_str(const egress_addr *a, char *out, size_t cap) {
  if (!inet_ntop(a->family, a->addr, out, (socklen_t)cap) && cap) snprintf(out, cap, "?");
}

static const uint8_t MAPPED[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
void egress_unmap(egress_addr *a) {
  if (a->family != AF_INET6 || memcmp(a->addr, MAPPED, 12) != 0) return;
  memmove(a->addr, a->addr + 12, 4);
  memset(a->addr + 4, 0, 12);
  a->family = AF_INET;
}

static bool in_prefix(const egress_addr *a, const egress_addr *net, int prefix) {
  if (a->family != net->family) return false;
  int full = prefix / 8, rest = prefix % 8;
  if (memcmp(a->addr, net->addr, (size_t)full) != 0) return false;
  if (!rest) return true;
  uint8_t mask = (uint8_t)(0xff << (8 - rest));
  return (a->addr[full] & mask) == (net->addr[full] & mask);
}

/* The ranges of the safe defaults; the first match wins. */
typedef struct { int family; uint8_t net[16]; int prefix; egress_addr_class cls; } range;
#define V4(a, b, c, d) AF_INET, {a, b, c, d}
static const range RANGES[] = {
    {V4(0, 0, 0, 0), 8, ADDR_SPECIAL},        {V4(127, 0, 0, 0), 8, ADDR_SPECIAL},
    {V4(224, 0, 0, 0), 4, ADDR_SPECIAL},      {V4(240, 0, 0, 0), 4, ADDR_SPECIAL},   /* and broadcast */
    {V4(169, 254, 0, 0), 16, ADDR_LINK_LOCAL},
    {V4(10, 0, 0, 0), 8, ADDR_PRIVATE},       {V4(172, 16, 0, 0), 12, ADDR_PRIVATE},
    {V4(192, 168, 0, 0), 16, ADDR_PRIVATE},   {V4(100, 64, 0, 0), 10, ADDR_PRIVATE},
    {AF_INET6, {0}, 128, ADDR_SPECIAL},                                  /* :: */
    {AF_INET6, {[15] = 1}, 128, ADDR_SPECIAL},                           /* ::1 */
    {AF_INET6, {0}, 96, ADDR_SPECIAL},       /* IPv4-compatible (deprecated): never a real peer */
    {AF_INET6, {0xff}, 8, ADDR_SPECIAL},                                 /* multicast */
    {AF_INET6, {0xfe, 0x80}, 10, ADDR_LINK_LOCAL},
    {AF_INET6, {0xfc}, 7, ADDR_PRIVATE},
};

egress_addr_class egress_classify(const egress_addr *in) {
  egress_addr a = *in;
  egress_unmap(&a);
  for (size_t i = 0; i < sizeof RANGES / sizeof RANGES[0]; i++) {
    egress_addr net = {RANGES[i].family, {0}};
    memcpy(net.addr, RANGES[i].net, 16);
    if (in_prefix(&a, &net, RANGES[i].prefix)) return RANGES[i].cls;
  }
  return ADDR_PUBLIC;
}

/* "addr/prefix" (prefix decimal, no sign, within the family's width); host bits are cleared. */
static int parse_cidr(const char *text, egress_addr *net, int *prefix) {
  const char *slash = strchr(text, '/');
  char addr[64];
  size_t n = slash ? (size_t)(slash - text) : strlen(text);
  if (n == 0 || n >= sizeof addr) return -1;
  memcpy(addr, text, n);
  addr[n] = 0;
  if (egress_addr_parse(addr, net) != 0) return -1;
  int width = net->family == AF_INET ? 32 : 128;
  if (!slash) { *prefix = width; return 0; }
  const char *p = slash + 1;
  if (!*p || strlen(p) > 3) return -2;
  int v = 0;
  for (; *p; p++) {
    if (!isdigit((unsigned char)*p)) return -2;
    v = v * 10 + (*p - '0');
  }
  if (v > width) return -2;
  *prefix = v;
  for (int bit = v; bit < width; bit++) net->addr[bit / 8] &= (uint8_t)~(0x80 >> (bit % 8));
  return 0;
}

/* A host name, checked and normalised exactly as the sniffers return them (sniff.h), so that a
 * rule and a connection's name compare byte for byte. */
static bool valid_name(const char *s, char *out) { return sniff_hostname(s, strlen(s), out) == 0; }

static char *trimmed(const char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) n--;
  char *t = malloc(n + 1);
  if (t) { memcpy(t, s, n); t[n] = 0; }
  return t;
}

/* One entry of a list; `deny`: names are refused (E2B takes addresses only there). */
static int parse_entry(const char *given, bool deny, egress_entry *e, const char *list, size_t i, char *err, size_t errlen) {
  memset(e, 0, sizeof e[0]);
  if (!given) return transforms_fail(err, errlen, "%s[%zu]: must be a string", list, i);
  char *t = trimmed(given);
  if (!t) return transforms_fail(err, errlen, "out of memory");
  e->text = t;
  if (!*t) return transforms_fail(err, errlen, "%s[%zu]: empty entry (expected an address, a CIDR or a host name)", list, i);
  int rc = parse_cidr(t, &e->net, &e->prefix);
  if (rc == 0) {
    e->kind = ENTRY_CIDR;
    e->all = e->net.family == AF_INET && e->prefix == 0;
    return 0;
  }
  if (rc == -2) {
    return transforms_fail(err, errlen, "%s[%zu]: \"%.80s\": the prefix after '/' must be 0..%d", list, i, t,
                strchr(t, ':') ? 128 : 32);
  }
  if (strchr(t, '/') || strchr(t, ':'))
    return transforms_fail(err, errlen, "%s[%zu]: \"%.80s\" is not an IP address or CIDR", list, i, t);
  bool wild = !strncmp(t, "*.", 2);
  if (!valid_name(wild ? t + 2 : t, e->name)) {
    if (!strcmp(t, "*")) return transforms_fail(err, errlen, "%s[%zu]: a bare \"*\" is not allowed (write 0.0.0.0/0 for all traffic)", list, i);
    return transforms_fail(err, errlen, "%s[%zu]: \"%.80s\" is not an address, a CIDR, a host name or a *.wildcard "
                "(host names: labels of a-z, 0-9, '-' and '_', at most 253 characters)", list, i, t);
  }
  if (deny)
    return transforms_fail(err, errlen, "%s[%zu]: \"%.80s\": host names are not supported in denyOut (addresses and CIDRs only, as on E2B; "
                "to allow only some hosts, put them in allowOut and 0.0.0.0/0 in denyOut)", list, i, t);
  e->kind = wild ? ENTRY_WILDCARD : ENTRY_HOST;
  return 0;
}

static void free_list(egress_entry *l, size_t n) {
  for (size_t i = 0; i < n; i++) free((char *)l[i].text);
  free(l);
}

void egress_rules_free(egress_rules *r) {
  free_list(r->allow, r->nallow);
  free_list(r->deny, r->ndeny);
  transforms_free(&r->tf);
  memset(r, 0, sizeof *r);
}

void egress_rules_open(egress_rules *r) {
  memset(r, 0, sizeof *r);
  r->internet = true;
}

static int parse_list(const char *const *in, size_t n, bool deny, const char *name, egress_entry **out, size_t *nout,
                      char *err, size_t errlen) {
  *out = NULL;
  *nout = 0;
  if (n > EGRESS_MAX_ENTRIES) return transforms_fail(err, errlen, "%s: at most %d entries (got %zu)", name, EGRESS_MAX_ENTRIES, n);
  if (!n) return 0;
  egress_entry *l = calloc(n, sizeof *l);
  if (!l) return transforms_fail(err, errlen, "out of memory");
  for (size_t i = 0; i < n; i++) {
    if (parse_entry(in[i], deny, &l[i], name, i, err, errlen) != 0) {
      free_list(l, i + 1);
      return -1;
    }
  }
  *out = l;
  *nout = n;
  return 0;
}

int egress_rules_parse(egress_rules *r, bool internet, const char *const *allow, size_t nallow,
                       const char *const *deny, size_t ndeny, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  r->internet = internet;
  if (parse_list(allow, nallow, false, "allowOut", &r->allow, &r->nallow, err, errlen) != 0 ||
      parse_list(deny, ndeny, true, "denyOut", &r->deny, &r->ndeny, err, errlen) != 0) {
    egress_rules_free(r);
    return -1;
  }
  for (size_t i = 0; i < r->nallow; i++)
    if (r->allow[i].kind != ENTRY_CIDR) r->has_names = true;
  return 0;
}

int egress_site_unblock(egress_site *s, const char *what, char *err, size_t errlen) {
  static const char *const PRIVATE[] = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"};
  static const char *const LINK_LOCAL[] = {"169.254.0.0/16", "fe80::/10"};
  const char *const *set = NULL;
  size_t n = 1;
  if (!strcmp(what, "private")) { set = PRIVATE; n = 5; }
  else if (!strcmp(what, "link-local")) { set = LINK_LOCAL; n = 2; }
  if (s->nunblock + n > EGRESS_MAX_UNBLOCK) return transforms_fail(err, errlen, "at most %d ranges can be unblocked", EGRESS_MAX_UNBLOCK);
  for (size_t i = 0; i < n; i++) {
    egress_entry *e = &s->unblock[s->nunblock];
    memset(e, 0, sizeof *e);
    const char *text = set ? set[i] : what;
    if (parse_cidr(text, &e->net, &e->prefix) != 0)
      return transforms_fail(err, errlen, "\"%.80s\": expected private, link-local or a CIDR inside them", what);
    egress_addr_class c = egress_classify(&e->net);
    egress_addr last = e->net;   /* the range must lie inside one protected range: check both ends */
    int width = last.family == AF_INET ? 32 : 128;
    for (int bit = e->prefix; bit < width; bit++) last.addr[bit / 8] |= (uint8_t)(0x80 >> (bit % 8));
    if ((c != ADDR_PRIVATE && c != ADDR_LINK_LOCAL) || egress_classify(&last) != c)
      return transforms_fail(err, errlen, "\"%.80s\": only private, shared or link-local ranges can be unblocked "
                  "(10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, 169.254/16, fe80::/10)", what);
    e->kind = ENTRY_CIDR;
    s->nunblock++;
  }
  return 0;
}

bool egress_name_matches(const egress_entry *e, const char *name) {
  if (e->kind == ENTRY_HOST) return !strcmp(e->name, name);
  if (e->kind != ENTRY_WILDCARD) return false;
  size_t n = strlen(name), k = strlen(e->name);   /* a subdomain at any depth, never the apex */
  return n > k + 1 && name[n - k - 1] == '.' && !strcmp(name + n - k, e->name);
}

/* The first CIDR entry of l that holds a; `specific`: only entries that name a range (not /0). */
static const egress_entry *match_cidr(const egress_entry *l, size_t n, const egress_addr *a, bool specific, size_t *idx) {
  for (size_t i = 0; i < n; i++) {
    const egress_entry *e = &l[i];
    if (e->kind != ENTRY_CIDR) continue;
    if (specific && e->prefix == 0) continue;
    if (e->all || in_prefix(a, &e->net, e->prefix)) { *idx = i; return e; }
  }
  return NULL;
}

static egress_decision decision(egress_verdict v, const egress_entry *rule, char list, size_t index, const char *why) {
  egress_decision d = {v, rule, list, index, why};
  return d;
}

/* The safe defaults for address a; a decision with verdict EGRESS_DENY, or EGRESS_ALLOW to go on. */
static egress_decision safe_defaults(const egress_rules *r, const egress_site *s, const egress_addr *a, bool host_local) {
  size_t i;
  egress_addr_class c = egress_classify(a);
  if (c == ADDR_SPECIAL)
    return decision(EGRESS_DENY, NULL, 0, 0, "not a destination a sandbox may reach (loopback, unspecified, multicast, broadcast or reserved)");
  if (host_local) return decision(EGRESS_DENY, NULL, 0, 0, "one of the host's own addresses");
  bool unblocked = s && match_cidr(s->unblock, s->nunblock, a, false, &i);
  if (c == ADDR_LINK_LOCAL && !unblocked)
    return decision(EGRESS_DENY, NULL, 0, 0, "link-local address (where clouds serve instance metadata); refused unless sandboxd runs with --egress-unblock link-local");
  if (c == ADDR_PRIVATE && !unblocked && !(r && match_cidr(r->allow, r->nallow, a, true, &i)))
    return decision(EGRESS_DENY, NULL, 0, 0, "private or shared address; refused unless allowOut names an address or CIDR inside it, or sandboxd runs with --egress-unblock private");
  return decision(EGRESS_ALLOW, NULL, 0, 0, NULL);
}

egress_decision egress_decide(const egress_rules *r, const egress_site *s, const egress_dest *dest) {
  egress_addr a = dest->addr;
  egress_unmap(&a);
  egress_decision safe = safe_defaults(r, s, &a, dest->host_local);
  if (safe.verdict == EGRESS_DENY) return safe;
  size_t i;
  const egress_entry *e = match_cidr(r->allow, r->nallow, &a, false, &i);
  if (e) return decision(EGRESS_ALLOW, e, 'a', i, "allowed by allowOut");
  const egress_entry *deny = NULL;
  size_t di = 0;
  if (r->internet) deny = match_cidr(r->deny, r->ndeny, &a, false, &di);
  if (r->internet && !deny) return decision(EGRESS_ALLOW, NULL, 0, 0, "no denyOut entry holds the address");
  if (dest->proto == EGRESS_TCP && (dest->port == 80 || dest->port == 443) && r->has_names) {
    if (!dest->name) return decision(EGRESS_NEED_NAME, NULL, 0, 0, "decided by the host name the connection names");
    for (i = 0; i < r->nallow; i++)
      if (egress_name_matches(&r->allow[i], dest->name)) return decision(EGRESS_ALLOW_NAME, &r->allow[i], 'a', i, "allowed by allowOut");
  }
  if (!r->internet) return decision(EGRESS_DENY, NULL, 0, 0, "allow_internet_access is false and no allowOut entry allows it");
  return decision(EGRESS_DENY, deny, 'd', di, "denied by denyOut");
}

egress_decision egress_decide_resolved(const egress_rules *r, const egress_site *s, const egress_addr *in, bool host_local) {
  egress_addr a = *in;
  egress_unmap(&a);
  egress_decision d = safe_defaults(r, s, &a, host_local);
  if (d.verdict == EGRESS_ALLOW) d.why = "an address of the allowed name";
  return d;
}

bool egress_dns_allowed(const egress_rules *r, const char *name) {
  bool closed = !r->internet;
  for (size_t i = 0; i < r->ndeny && !closed; i++) closed = r->deny[i].all;
  if (!closed) return true;
  for (size_t i = 0; i < r->nallow; i++)
    if (egress_name_matches(&r->allow[i], name)) return true;
  return false;
}
