/* egress_rules.h — a sandbox's egress policy and the one function that decides a connection.
 *
 * E2B's network options (`allow_internet_access`, `network.allowOut`, `network.denyOut`) parsed
 * once into rules; egress_decide() is what the egress proxy asks for every connection and UDP flow,
 * what the DNS forwarder asks for every query, and what `moonbox policy network --check` shows
 * (moonbox links this file too, so the explanation and the enforcement cannot drift apart).
 *
 * E2B's semantics, kept:
 *  - entries are IPv4/IPv6 addresses, CIDRs, host names and `*.example.com` wildcards (which match
 *    subdomains at any depth, never the apex); denyOut takes addresses and CIDRs only;
 *  - an allowOut entry wins over a denyOut entry; `0.0.0.0/0` is all traffic (IPv6 included);
 *  - `allow_internet_access: false` replaces denyOut with all traffic (allowOut stays: what it
 *    names is still reached, as on E2B);
 *  - a host name is decided by what the connection says it is for — TLS SNI on port 443, the HTTP
 *    Host header on port 80 — never by DNS; other ports and UDP are decided by address only.
 * sandboxd's own safe defaults, which no rule of a sandbox overrides:
 *  - never: loopback, unspecified, multicast, broadcast and reserved addresses (and the host's own
 *    addresses, which the caller checks: EGRESS_HOST);
 *  - link-local (169.254.0.0/16, fe80::/10: instance metadata) unless the host unblocks it;
 *  - private and shared ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) unless the host
 *    unblocks them or the sandbox's allowOut names an address or CIDR inside them explicitly
 *    (a /0 does not count, nor does a host name: a name that resolves to a private address is no
 *    way into the LAN).
 * IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are decided as the IPv4 address they carry. */
#ifndef SANDBOXD_EGRESS_RULES_H
#define SANDBOXD_EGRESS_RULES_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transforms.h"

#define EGRESS_MAX_ENTRIES 512        /* per list */
#define EGRESS_NAME_MAX 253

typedef struct {
  int family;                          /* AF_INET or AF_INET6 */
  uint8_t addr[16];                    /* network byte order; IPv4 in the first 4 bytes */
} egress_addr;

typedef enum { ENTRY_CIDR, ENTRY_HOST, ENTRY_WILDCARD } egress_entry_kind;
typedef struct {
  egress_entry_kind kind;
  egress_addr net;                     /* ENTRY_CIDR: the network (host bits zero) */
  int prefix;                          /* ENTRY_CIDR: 0..32 or 0..128; an address is a /32 or /128 */
  bool all;                            /* ENTRY_CIDR 0.0.0.0/0: all traffic, both families */
  char name[EGRESS_NAME_MAX + 1];      /* ENTRY_HOST: the name; ENTRY_WILDCARD: the suffix after "*." */
  const char *text;                    /* the entry as given (owned by the rules) */
} egress_entry;

typedef struct egress_rules {
  bool internet;                       /* allow_internet_access */
  egress_entry *allow, *deny;          /* deny is empty when !internet: all traffic is denied */
  size_t nallow, ndeny;
  bool has_names;                      /* allow holds a host name or wildcard */
  transforms tf;                       /* network.rules: what an allowed request to a host gets */
} egress_rules;

/* Parses the lists (any of them may be NULL with n 0) into *r. 0, or -1 with err naming the entry
 * (`allowOut[2]: "10.0.0.0/33": prefix must be 0..32`). Entries are trimmed; names lower-cased,
 * a final dot dropped. */
int  egress_rules_parse(egress_rules *r, bool internet, const char *const *allow, size_t nallow,
                        const char *const *deny, size_t ndeny, char *err, size_t errlen);
void egress_rules_free(egress_rules *r);
/* The rules that let everything through that the safe defaults allow (no network option). */
void egress_rules_open(egress_rules *r);

/* Host-wide settings: ranges sandboxd was started to unblock (--egress-unblock). */
#define EGRESS_MAX_UNBLOCK 32
typedef struct {
  egress_entry unblock[EGRESS_MAX_UNBLOCK];
  size_t nunblock;
} egress_site;
/* `private`, `link-local`, or a CIDR inside the private, shared or link-local ranges. 0 or -1. */
int egress_site_unblock(egress_site *s, const char *what, char *err, size_t errlen);

/* What an address is, for the safe defaults. */
typedef enum { ADDR_PUBLIC, ADDR_PRIVATE, ADDR_LINK_LOCAL, ADDR_SPECIAL } egress_addr_class;
egress_addr_class egress_classify(const egress_addr *a);
/* ::ffff:a.b.c.d → a.b.c.d; anything else unchanged. */
void egress_unmap(egress_addr *a);

enum { EGRESS_TCP = 6, EGRESS_UDP = 17 };
typedef struct {
  egress_addr addr;                    /* where the connection was addressed */
  uint16_t port;
  int proto;                           /* EGRESS_TCP or EGRESS_UDP */
  const char *name;                    /* what it says it is for (SNI / Host), NULL if unknown */
  bool host_local;                     /* addr is one of the host's own addresses (the caller knows) */
} egress_dest;

typedef enum {
  EGRESS_ALLOW,                        /* connect to addr */
  EGRESS_ALLOW_NAME,                   /* connect to `name` as the host resolves it (each address
                                        * checked again with egress_decide_resolved) */
  EGRESS_DENY,
  EGRESS_NEED_NAME                     /* decided by the name: read the first bytes (SNI / Host) */
} egress_verdict;

typedef struct {
  egress_verdict verdict;
  const egress_entry *rule;            /* the entry that decided, NULL for a default or a safe default */
  char list;                           /* 'a' allowOut, 'd' denyOut, 0 none */
  size_t index;                        /* the entry's index in its list */
  const char *why;                     /* a short reason, static: "link-local address", ... */
} egress_decision;

egress_decision egress_decide(const egress_rules *r, const egress_site *s, const egress_dest *d);
/* For a connection allowed by name: may it go to this address the name resolved to? The safe
 * defaults apply (a name is no way to a private or link-local address the rules did not name). */
egress_decision egress_decide_resolved(const egress_rules *r, const egress_site *s, const egress_addr *a, bool host_local);
/* The DNS forwarder: answer a query for name? Every name while the rules let public addresses
 * through by default; otherwise only names an allowOut name or wildcard matches (so that a sandbox
 * with an allow list cannot leak data through queries for names it may never reach). */
bool egress_dns_allowed(const egress_rules *r, const char *name);
/* Does entry e (ENTRY_HOST / ENTRY_WILDCARD) match name (lower-case, no final dot)? */
bool egress_name_matches(const egress_entry *e, const char *name);

/* Text forms: "198.51.100.7", "2001:db8::1"; an entry as canonical text ("10.0.0.0/8"). */
void egress_addr_str(const egress_addr *a, char *out, size_t cap);
/* Parses an address literal (no prefix). 0 or -1. */
int  egress_addr_parse(const char *s, egress_addr *a);
#endif
