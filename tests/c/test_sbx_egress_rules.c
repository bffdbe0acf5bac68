/* test_sbx_egress_rules.c — sandboxd/egress_rules.c: parsing E2B's allowOut/denyOut (every error
 * names its entry), the safe defaults, E2B's precedence, names on ports 80/443 only, the DNS rule. */
#include <arpa/inet.h>
#include <sys/socket.h>

#include "egress_rules.h"
#include "mbtest.h"

static egress_rules R;
static egress_site S;
static char err[512];

static int parse(bool internet, const char *const *allow, size_t na, const char *const *deny, size_t nd) {
  egress_rules_free(&R);
  err[0] = 0;
  return egress_rules_parse(&R, internet, allow, na, deny, nd, err, sizeof err);
}

static egress_decision dec(const char *addr, int port, int proto, const char *name) {
  egress_dest d = {.port = (uint16_t)port, .proto = proto, .name = name};
  if (egress_addr_parse(addr, &d.addr) != 0) abort();
  return egress_decide(&R, &S, &d);
}
#define V(addr, port, name) dec(addr, port, EGRESS_TCP, name).verdict

static void test_parse_errors(void) {
  const char *bad[][2] = {
      {"", "allowOut[1]: empty entry"},
      {"10.0.0.0/33", "allowOut[1]: \"10.0.0.0/33\": the prefix after '/' must be 0..32"},
      {"2001:db8::/129", "must be 0..128"},
      {"10.0.0.0/", "prefix after '/'"},
      {"10.0.0.0/+8", "prefix after '/'"},
      {"10.0.0.0/1x", "prefix after '/'"},
      {"foo/24", "is not an IP address or CIDR"},
      {"1.2.3", "is not an address, a CIDR, a host name"},
      {"10.0.0.256", "is not an address, a CIDR, a host name"},
      {"*", "a bare \"*\" is not allowed"},
      {"*.", "is not an address"},
      {"a..b", "is not an address"},
      {"exa mple.com", "is not an address"},
      {"ex!ample.com", "is not an address"},
      {"2001:db8::zz", "is not an IP address or CIDR"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *a[] = {"1.1.1.1", bad[i][0]};
    CHECK_INT(parse(true, a, 2, NULL, 0), -1);
    CHECK_HAS(err, bad[i][1]);
    CHECK_HAS(err, "allowOut[1]");
  }
  char label[80];
  memset(label, 'a', 64);
  strcpy(label + 64, ".com");
  const char *l[] = {label};
  CHECK_INT(parse(true, l, 1, NULL, 0), -1);
  const char *d[] = {"8.8.8.8", "example.com"};
  CHECK_INT(parse(true, NULL, 0, d, 2), -1);
  CHECK_HAS(err, "denyOut[1]: \"example.com\": host names are not supported in denyOut");
  const char *w[] = {"*.example.com"};
  CHECK_INT(parse(true, NULL, 0, w, 1), -1);
  CHECK_HAS(err, "denyOut[0]");
  const char *many[EGRESS_MAX_ENTRIES + 1];
  for (size_t i = 0; i <= EGRESS_MAX_ENTRIES; i++) many[i] = "1.1.1.1";
  CHECK_INT(parse(true, many, EGRESS_MAX_ENTRIES + 1, NULL, 0), -1);
  CHECK_HAS(err, "allowOut: at most 512 entries");
  CHECK_INT(parse(true, many, EGRESS_MAX_ENTRIES, NULL, 0), 0);
  const char *nul[] = {NULL};
  CHECK_INT(parse(true, nul, 1, NULL, 0), -1);
  CHECK_HAS(err, "allowOut[0]: must be a string");
}

static void test_parse_forms(void) {
  const char *a[] = {" 8.8.8.0/24 ", "1.1.1.1", "2001:db8::/32", "Example.COM.", "*.Pkg.Dev", "10.1.2.3/8", "0.0.0.0/0", "_svc.x-y.io"};
  CHECK_INT(parse(true, a, 8, NULL, 0), 0);
  CHECK_INT(R.nallow, 8);
  CHECK_INT(R.allow[0].kind, ENTRY_CIDR);
  CHECK_INT(R.allow[0].prefix, 24);
  CHECK_STR(R.allow[0].text, "8.8.8.0/24");
  CHECK_INT(R.allow[1].prefix, 32);
  CHECK_INT(R.allow[2].net.family, AF_INET6);
  CHECK_INT(R.allow[3].kind, ENTRY_HOST);
  CHECK_STR(R.allow[3].name, "example.com");
  CHECK_INT(R.allow[4].kind, ENTRY_WILDCARD);
  CHECK_STR(R.allow[4].name, "pkg.dev");
  char s[64];
  egress_addr_str(&R.allow[5].net, s, sizeof s);
  CHECK_STR(s, "10.0.0.0");                 /* host bits cleared, as Go's ParseCIDR */
  CHECK(R.allow[6].all);
  CHECK(!R.allow[0].all);
  CHECK(R.has_names);
  CHECK_STR(R.allow[7].name, "_svc.x-y.io");
}

static void test_safe_defaults(void) {
  egress_rules_free(&R), egress_rules_open(&R);
  memset(&S, 0, sizeof S);
  CHECK_INT(V("198.51.100.7", 443, NULL), EGRESS_ALLOW);
  CHECK_INT(V("169.254.169.254", 80, NULL), EGRESS_DENY);
  CHECK_HAS(dec("169.254.169.254", 80, EGRESS_TCP, NULL).why, "link-local");
  CHECK_INT(V("fe80::1", 80, NULL), EGRESS_DENY);
  CHECK_INT(V("::ffff:169.254.169.254", 80, NULL), EGRESS_DENY);   /* mapped: decided as IPv4 */
  CHECK_INT(V("::ffff:10.0.0.1", 80, NULL), EGRESS_DENY);
  CHECK_INT(V("::ffff:198.51.100.7", 80, NULL), EGRESS_ALLOW);
  const char *priv[] = {"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1", "100.127.255.254", "fc00::1", "fd12::3"};
  for (size_t i = 0; i < 8; i++) {
    CHECK_INT(V(priv[i], 443, NULL), EGRESS_DENY);
    CHECK_HAS(dec(priv[i], 443, EGRESS_TCP, NULL).why, "private");
  }
  const char *pub[] = {"172.32.0.1", "172.15.255.255", "100.128.0.1", "11.0.0.1", "192.169.0.1", "2001:db8::1", "fe00::1"};
  for (size_t i = 0; i < 7; i++) CHECK_INT(V(pub[i], 443, NULL), EGRESS_ALLOW);
  const char *special[] = {"127.0.0.1", "127.9.9.9", "0.0.0.0", "0.1.2.3", "255.255.255.255", "224.0.0.1", "240.0.0.1", "::", "::1", "ff02::1", "::1.2.3.4", "::ffff:127.0.0.1"};
  for (size_t i = 0; i < 12; i++) CHECK_INT(V(special[i], 443, NULL), EGRESS_DENY);
  /* the host's own address, as the caller says */
  egress_dest d = {.port = 80, .proto = EGRESS_TCP, .host_local = true};
  egress_addr_parse("198.51.100.7", &d.addr);
  CHECK_INT(egress_decide(&R, &S, &d).verdict, EGRESS_DENY);
  CHECK_HAS(egress_decide(&R, &S, &d).why, "host's own");
  /* 0.0.0.0/0 is no way into the LAN or to metadata; an explicit CIDR inside is */
  const char *all[] = {"0.0.0.0/0"};
  parse(true, all, 1, NULL, 0);
  CHECK_INT(V("10.1.2.3", 443, NULL), EGRESS_DENY);
  CHECK_INT(V("169.254.169.254", 80, NULL), EGRESS_DENY);
  const char *lan[] = {"10.1.0.0/16", "192.168.7.7", "169.254.169.254"};
  parse(true, lan, 3, NULL, 0);
  CHECK_INT(V("10.1.2.3", 443, NULL), EGRESS_ALLOW);
  CHECK_INT(dec("10.1.2.3", 443, EGRESS_TCP, NULL).index, 0);
  CHECK_INT(V("10.2.0.1", 443, NULL), EGRESS_DENY);
  CHECK_INT(V("192.168.7.7", 22, NULL), EGRESS_ALLOW);
  CHECK_INT(V("192.168.7.8", 22, NULL), EGRESS_DENY);
  CHECK_INT(V("169.254.169.254", 80, NULL), EGRESS_DENY);          /* link-local: only the host decides */
  /* the host's flags */
  CHECK_INT(egress_site_unblock(&S, "link-local", err, sizeof err), 0);
  CHECK_INT(V("169.254.169.254", 80, NULL), EGRESS_ALLOW);
  CHECK_INT(egress_site_unblock(&S, "10.9.0.0/16", err, sizeof err), 0);
  egress_rules_free(&R), egress_rules_open(&R);
  CHECK_INT(V("10.9.1.1", 80, NULL), EGRESS_ALLOW);
  CHECK_INT(V("10.8.1.1", 80, NULL), EGRESS_DENY);
  CHECK_INT(egress_site_unblock(&S, "private", err, sizeof err), 0);
  CHECK_INT(V("10.8.1.1", 80, NULL), EGRESS_ALLOW);
  CHECK_INT(V("127.0.0.1", 80, NULL), EGRESS_DENY);                /* never */
  CHECK_INT(egress_site_unblock(&S, "8.8.8.0/24", err, sizeof err), -1);
  CHECK_HAS(err, "only private, shared or link-local ranges");
  CHECK_INT(egress_site_unblock(&S, "10.0.0.0/7", err, sizeof err), -1);   /* reaches past 10/8 */
  CHECK_INT(egress_site_unblock(&S, "nonsense", err, sizeof err), -1);
  CHECK_HAS(err, "expected private, link-local or a CIDR");
  memset(&S, 0, sizeof S);
}

static void test_precedence(void) {
  const char *allow[] = {"8.8.8.8", "api.example.com", "*.pkg.dev"};
  const char *deny[] = {"0.0.0.0/0"};
  CHECK_INT(parse(true, allow, 3, deny, 1), 0);
  CHECK_INT(V("8.8.8.8", 53, NULL), EGRESS_ALLOW);                  /* allowOut wins over denyOut */
  CHECK_INT(dec("8.8.8.8", 53, EGRESS_UDP, NULL).verdict, EGRESS_ALLOW);
  CHECK_INT(V("9.9.9.9", 22, NULL), EGRESS_DENY);
  CHECK_INT(dec("9.9.9.9", 22, EGRESS_TCP, NULL).list, 'd');
  CHECK_INT(V("2001:db8::1", 22, NULL), EGRESS_DENY);               /* 0.0.0.0/0 is IPv6 too */
  CHECK_INT(dec("9.9.9.9", 53, EGRESS_UDP, NULL).verdict, EGRESS_DENY);
  /* names: only TCP 80 and 443, by what the connection says */
  CHECK_INT(V("9.9.9.9", 443, NULL), EGRESS_NEED_NAME);
  CHECK_INT(V("9.9.9.9", 80, NULL), EGRESS_NEED_NAME);
  CHECK_INT(V("9.9.9.9", 8443, NULL), EGRESS_DENY);
  CHECK_INT(dec("9.9.9.9", 443, EGRESS_UDP, NULL).verdict, EGRESS_DENY);   /* QUIC: no names */
  CHECK_INT(V("9.9.9.9", 443, "api.example.com"), EGRESS_ALLOW_NAME);
  CHECK_INT(dec("9.9.9.9", 443, EGRESS_TCP, "api.example.com").index, 1);
  CHECK_INT(V("9.9.9.9", 443, "example.com"), EGRESS_DENY);
  CHECK_INT(V("9.9.9.9", 443, "x.api.example.com"), EGRESS_DENY);
  CHECK_INT(V("9.9.9.9", 443, "pkg.dev"), EGRESS_DENY);             /* a wildcard never matches its apex */
  CHECK_INT(V("9.9.9.9", 443, "a.pkg.dev"), EGRESS_ALLOW_NAME);
  CHECK_INT(V("9.9.9.9", 443, "a.b.pkg.dev"), EGRESS_ALLOW_NAME);
  CHECK_INT(V("9.9.9.9", 443, "apkg.dev"), EGRESS_DENY);
  CHECK_INT(V("10.0.0.1", 443, "api.example.com"), EGRESS_DENY);    /* safe defaults first */
  /* allowed by name: every address it resolves to is checked again */
  egress_addr a;
  egress_addr_parse("10.0.0.1", &a);
  CHECK_INT(egress_decide_resolved(&R, &S, &a, false).verdict, EGRESS_DENY);
  egress_addr_parse("198.51.100.1", &a);
  CHECK_INT(egress_decide_resolved(&R, &S, &a, false).verdict, EGRESS_ALLOW);
  CHECK_INT(egress_decide_resolved(&R, &S, &a, true).verdict, EGRESS_DENY);
  /* a name is not needed where the address decides already */
  const char *d2[] = {"9.9.9.0/24"};
  parse(true, allow, 3, d2, 1);
  CHECK_INT(V("1.2.3.4", 443, NULL), EGRESS_ALLOW);
  CHECK_INT(V("9.9.9.9", 443, NULL), EGRESS_NEED_NAME);
  /* without names in allowOut, no sniffing */
  parse(true, allow, 1, d2, 1);
  CHECK_INT(V("9.9.9.9", 443, NULL), EGRESS_DENY);
  CHECK_INT(dec("9.9.9.9", 443, EGRESS_TCP, NULL).index, 0);
}

static void test_no_internet(void) {
  CHECK_INT(parse(false, NULL, 0, NULL, 0), 0);
  CHECK_INT(V("198.51.100.7", 443, NULL), EGRESS_DENY);
  CHECK_HAS(dec("198.51.100.7", 443, EGRESS_TCP, NULL).why, "allow_internet_access is false");
  CHECK(!egress_dns_allowed(&R, "example.com"));
  /* as on E2B, allowOut still holds */
  const char *allow[] = {"198.51.100.0/24", "example.com"};
  const char *deny[] = {"1.1.1.1"};
  CHECK_INT(parse(false, allow, 2, deny, 1), 0);
  CHECK_INT(V("198.51.100.7", 22, NULL), EGRESS_ALLOW);
  CHECK_INT(V("1.2.3.4", 443, NULL), EGRESS_NEED_NAME);
  CHECK_INT(V("1.2.3.4", 443, "example.com"), EGRESS_ALLOW_NAME);
  CHECK_INT(V("1.2.3.4", 22, NULL), EGRESS_DENY);
}

static void test_dns(void) {
  egress_rules_free(&R), egress_rules_open(&R);
  CHECK(egress_dns_allowed(&R, "anything.example"));
  const char *allow[] = {"api.example.com", "*.pkg.dev", "1.1.1.1"};
  const char *some[] = {"9.0.0.0/8"};
  parse(true, allow, 3, some, 1);
  CHECK(egress_dns_allowed(&R, "anything.example"));                  /* still open by default */
  const char *all[] = {"0.0.0.0/0"};
  parse(true, allow, 3, all, 1);
  CHECK(egress_dns_allowed(&R, "api.example.com"));
  CHECK(egress_dns_allowed(&R, "x.pkg.dev"));
  CHECK(!egress_dns_allowed(&R, "pkg.dev"));
  CHECK(!egress_dns_allowed(&R, "exfil-1234.attacker.example"));
}

static void test_classify(void) {
  egress_addr a;
  egress_addr_parse("::ffff:192.168.0.1", &a);
  CHECK_INT(egress_classify(&a), ADDR_PRIVATE);
  egress_unmap(&a);
  CHECK_INT(a.family, AF_INET);
  char s[64];
  egress_addr_str(&a, s, sizeof s);
  CHECK_STR(s, "192.168.0.1");
  egress_addr_parse("2001:db8::ffff:1.2.3.4", &a);
  egress_unmap(&a);
  CHECK_INT(a.family, AF_INET6);
  CHECK_INT(egress_addr_parse("1.2.3.4/8", &a), -1);
}

int main(void) {
  MBT_RUN(test_parse_errors);
  MBT_RUN(test_parse_forms);
  MBT_RUN(test_safe_defaults);
  MBT_RUN(test_precedence);
  MBT_RUN(test_no_internet);
  MBT_RUN(test_dns);
  MBT_RUN(test_classify);
  egress_rules_free(&R);
  return mbt_report();
}
