/* test_sbx_dnsmsg.c — the DNS forwarder's view of a query (sandboxd/dnsmsg.c): queries built by
 * hand and by libc's res_mkquery, EDNS and other additional records, every truncation, pointers,
 * counts other than one question, responses and other opcodes, the name's byte set and lengths;
 * and refusals: the reply carries the query's id and question with RCODE set, and parses back to
 * the same question. Links no HTTP code. */
#include "mbtest.h"

#include <resolv.h>
#include <stdbool.h>

#include "dnsmsg.h"

#define CAP 70000
struct msg {
  unsigned char d[CAP];
  size_t n;
};
static void put(struct msg *m, const void *p, size_t n) {
  if (n > CAP - m->n) { fprintf(stderr, "test buffer too small\n"); exit(2); }
  memcpy(m->d + m->n, p, n);
  m->n += n;
}
static void be16(struct msg *m, unsigned v) {
  unsigned char x[2] = {(unsigned char)(v >> 8), (unsigned char)v};
  put(m, x, 2);
}
/* A header: id, the flags word, the four counts. */
static void header(struct msg *m, unsigned id, unsigned flags, unsigned qd, unsigned an, unsigned ns, unsigned ar) {
  m->n = 0;
  be16(m, id), be16(m, flags), be16(m, qd), be16(m, an), be16(m, ns), be16(m, ar);
}
/* A dotted name in wire form ("" is the root). No escapes: for raw labels, put them by hand. */
static void wname(struct msg *m, const char *dotted) {
  while (*dotted) {
    const char *dot = strchr(dotted, '.');
    size_t l = dot ? (size_t)(dot - dotted) : strlen(dotted);
    unsigned char b = (unsigned char)l;
    put(m, &b, 1);
    put(m, dotted, l);
    dotted += l + (dot ? 1 : 0);
  }
  put(m, "", 1);
}
/* A standard query (RD set) for name, type, class IN. */
static void query(struct msg *m, unsigned id, const char *name, unsigned qtype) {
  header(m, id, 0x0100, 1, 0, 0, 0);
  wname(m, name);
  be16(m, qtype), be16(m, 1);
}
/* An EDNS OPT record (RFC 6891) with rdlen bytes of options; ARCOUNT not touched. */
static void opt(struct msg *m, size_t rdlen) {
  put(m, "", 1);                       /* the root */
  be16(m, 41), be16(m, 4096);          /* OPT, the UDP payload size */
  be16(m, 0), be16(m, 0x8000);         /* extended RCODE and version 0, DO */
  be16(m, (unsigned)rdlen);
  for (size_t i = 0; i < rdlen; i++) put(m, "\x0a", 1);
}
static void set16(struct msg *m, size_t at, unsigned v) {
  m->d[at] = (unsigned char)(v >> 8);
  m->d[at + 1] = (unsigned char)v;
}

static int parse(const struct msg *m, char *name, unsigned *t, unsigned *c) {
  memset(name, '#', DNSMSG_NAME_MAX + 1);
  *t = *c = 12345678;
  return dnsmsg_question(m->d, m->n, name, t, c);
}
/* m is accepted with this question, and no prefix of it is. */
static void ok_at(const struct msg *m, const char *want, unsigned qt, unsigned qc, int line) {
  char name[DNSMSG_NAME_MAX + 1];
  unsigned t, c;
  int r = parse(m, name, &t, &c);
  if (!mbt_check(r == 0 && strcmp(name, want) == 0 && t == qt && c == qc, __FILE__, line, "the question"))
    fprintf(stderr, "     got %d \"%.*s\" %u %u, want \"%s\" %u %u\n", r, r ? 0 : DNSMSG_NAME_MAX, name, t, c, want, qt, qc);
  size_t bad = SIZE_MAX;
  for (size_t k = 0; k < m->n && bad == SIZE_MAX; k++)
    if (dnsmsg_question(m->d, k, name, &t, &c) != -1) bad = k;
  if (!mbt_check(bad == SIZE_MAX, __FILE__, line, "every truncation refused"))
    fprintf(stderr, "     the first %zu bytes parse\n", bad);
}
#define OK(m, name, qt, qc) ok_at(m, name, qt, qc, __LINE__)
static void refused_at(const struct msg *m, int line) {
  char name[DNSMSG_NAME_MAX + 1];
  unsigned t, c;
  mbt_check(parse(m, name, &t, &c) == -1, __FILE__, line, "refused");
}
#define NOT_TAKEN(m) refused_at(m, __LINE__)

static struct msg m, r;

static void test_hand_built(void) {
  query(&m, 0xbeef, "Example.COM", 1);
  OK(&m, "example.com", 1, 1);
  query(&m, 1, "", 2);   /* the root, NS */
  OK(&m, "", 2, 1);
  query(&m, 1, "_sip._tcp.x-y.example", 33);
  OK(&m, "_sip._tcp.x-y.example", 33, 1);
  query(&m, 1, "a.example", 255);   /* ANY, and any class */
  set16(&m, m.n - 2, 3);
  OK(&m, "a.example", 255, 3);
  query(&m, 1, "a.example", 0xffff);
  set16(&m, m.n - 2, 0xffff);
  OK(&m, "a.example", 0xffff, 0xffff);
  query(&m, 1, "4.3.2.1.in-addr.arpa", 12);   /* digits are names here: PTR queries are made of them */
  OK(&m, "4.3.2.1.in-addr.arpa", 12, 1);
  query(&m, 1, "10.0.0.1", 1);
  OK(&m, "10.0.0.1", 1, 1);
  /* The other flags of a query are not looked at: RD off, TC, AA, AD, CD, Z, an RCODE. */
  static const unsigned flags[] = {0x0000, 0x0200, 0x0400, 0x0020, 0x0010, 0x0040, 0x000f, 0x077f};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    query(&m, 1, "a.example", 1);
    set16(&m, 2, flags[i]);
    OK(&m, "a.example", 1, 1);
  }
  /* A response, and opcodes other than QUERY (IQUERY, STATUS, NOTIFY, UPDATE, 15). */
  query(&m, 1, "a.example", 1);
  set16(&m, 2, 0x8180);
  NOT_TAKEN(&m);
  static const unsigned ops[] = {1, 2, 3, 4, 5, 6, 8, 15};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    query(&m, 1, "a.example", 1);
    set16(&m, 2, 0x0100 | ops[i] << 11);
    NOT_TAKEN(&m);
  }
  /* Counts: no question, two, an answer or an authority record. */
  header(&m, 1, 0x0100, 0, 0, 0, 0);
  NOT_TAKEN(&m);
  header(&m, 1, 0x0100, 2, 0, 0, 0);
  wname(&m, "a.example"), be16(&m, 1), be16(&m, 1);
  wname(&m, "b.example"), be16(&m, 1), be16(&m, 1);
  NOT_TAKEN(&m);
  m.d[5] = 1;   /* the same bytes with QDCOUNT 1: the second question is then trailing bytes */
  NOT_TAKEN(&m);
  static const size_t count_at[] = {6, 8};
  for (size_t i = 0; i < 2; i++) {
    query(&m, 1, "a.example", 1);
    m.d[count_at[i] + 1] = 1;   /* counted, absent */
    NOT_TAKEN(&m);
    opt(&m, 0);   /* counted and present */
    NOT_TAKEN(&m);
  }
  /* Shorter than a header; a name running off the end; no type and class; a byte too many. */
  header(&m, 1, 0x0100, 1, 0, 0, 0);
  m.n = 11;
  NOT_TAKEN(&m);
  query(&m, 1, "a.example", 1);
  put(&m, "", 1);
  NOT_TAKEN(&m);
  query(&m, 1, "a.example", 1);
  m.d[12] = 40;   /* the first label claims more than there is */
  NOT_TAKEN(&m);
}

static void test_name_rules(void) {
  /* Compression pointers, and the reserved label types 01 and 10. */
  header(&m, 1, 0x0100, 1, 0, 0, 0);
  put(&m, "\xc0\x0c", 2), be16(&m, 1), be16(&m, 1);
  NOT_TAKEN(&m);
  header(&m, 1, 0x0100, 1, 0, 0, 0);
  put(&m, "\x01" "a\xc0\x0c", 4), be16(&m, 1), be16(&m, 1);
  NOT_TAKEN(&m);
  header(&m, 1, 0x0100, 1, 0, 0, 0);
  put(&m, "\x41" "a", 2), be16(&m, 1), be16(&m, 1);   /* 0x40: extended label type */
  NOT_TAKEN(&m);
  header(&m, 1, 0x0100, 1, 0, 0, 0);
  put(&m, "\x81" "a", 2), be16(&m, 1), be16(&m, 1);
  NOT_TAKEN(&m);
  /* The byte set: [A-Za-z0-9_-]; a dot inside a label (an escaped dot), space, NUL, 0xff, '*'. */
  static const char *const bad[] = {"a.b", "a b", "a\\", "*", "\xff", "\x80", "a/b", "a@b", "\x7f"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    header(&m, 1, 0x0100, 1, 0, 0, 0);
    unsigned char l = (unsigned char)strlen(bad[i]);
    put(&m, &l, 1), put(&m, bad[i], l), wname(&m, "example"), be16(&m, 1), be16(&m, 1);
    NOT_TAKEN(&m);
  }
  header(&m, 1, 0x0100, 1, 0, 0, 0);
  put(&m, "\x03" "a\0b\x00", 5), be16(&m, 1), be16(&m, 1);
  NOT_TAKEN(&m);
  query(&m, 1, "AZaz09_-.Example", 1);
  OK(&m, "azaz09_-.example", 1, 1);
  /* Labels of 63 bytes pass (64 is label type 01); 255 bytes on the wire pass, 256 do not. */
  char l63[64], name[300];
  memset(l63, 'a', 63), l63[63] = 0;
  snprintf(name, sizeof name, "%s.%s.%s.%.61s", l63, l63, l63, l63);   /* 3·64 + 62 + 1 = 255 */
  CHECK_INT(strlen(name), 253);
  query(&m, 1, name, 1);
  CHECK_INT(m.n, 12 + 255 + 4);
  OK(&m, name, 1, 1);
  snprintf(name, sizeof name, "%s.%s.%s.%.62s", l63, l63, l63, l63);
  query(&m, 1, name, 1);
  NOT_TAKEN(&m);
  snprintf(name, sizeof name, "%s.%s.%s.%.60s.b", l63, l63, l63, l63);   /* 256 with one more label */
  query(&m, 1, name, 1);
  NOT_TAKEN(&m);
  memset(name, 'a', 64), name[64] = 0;
  query(&m, 1, name, 1);
  NOT_TAKEN(&m);
}

/* The additional section: records each whole (EDNS OPT, a pointer-named one), then the end. */
static void test_additional(void) {
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);
  opt(&m, 0);
  OK(&m, "a.example", 28, 1);
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);
  opt(&m, 12);   /* a cookie's worth of options */
  OK(&m, "a.example", 28, 1);
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 2);
  opt(&m, 0);
  put(&m, "\x03key\xc0\x0c", 6), be16(&m, 250), be16(&m, 255), be16(&m, 0), be16(&m, 0), be16(&m, 3), put(&m, "xyz", 3);
  OK(&m, "a.example", 28, 1);   /* a TSIG-like record whose owner ends in a pointer */
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);   /* counted, absent */
  NOT_TAKEN(&m);
  query(&m, 7, "a.example", 28);
  opt(&m, 0);   /* present, not counted: trailing bytes */
  NOT_TAKEN(&m);
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);
  opt(&m, 4);
  set16(&m, m.n - 6, 5);   /* RDLENGTH beyond the end */
  NOT_TAKEN(&m);
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);
  put(&m, "\xc0", 1);   /* a pointer cut in half */
  NOT_TAKEN(&m);
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);
  put(&m, "\x41", 1), be16(&m, 41), be16(&m, 512), be16(&m, 0), be16(&m, 0), be16(&m, 0);   /* reserved label type */
  NOT_TAKEN(&m);
  /* The largest message: 65535 bytes; one more is no DNS message. */
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);
  size_t base = m.n + 11;
  opt(&m, 65535 - base);
  CHECK_INT(m.n, 65535);
  OK(&m, "a.example", 28, 1);
  query(&m, 7, "a.example", 28);
  set16(&m, 10, 1);
  opt(&m, 65536 - base);
  CHECK_INT(m.n, 65536);
  NOT_TAKEN(&m);
}

static void test_res_mkquery(void) {
  static const struct { const char *in, *out; int type; } qs[] = {
    {"www.Example.org", "www.example.org", ns_t_aaaa}, {"example.com.", "example.com", ns_t_a}, {".", "", ns_t_ns},
    {"_443._tcp.example", "_443._tcp.example", ns_t_any}, {"a\\.b.example", NULL, ns_t_a}, {"a\\032b.example", NULL, ns_t_a},
    {"a\\000b", NULL, ns_t_txt}, {"a*b.example", NULL, ns_t_a},
  };
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
    int n = res_mkquery(ns_o_query, qs[i].in, ns_c_in, qs[i].type, NULL, 0, NULL, m.d, sizeof m.d);
    CHECK(n > 12);
    m.n = n > 0 ? (size_t)n : 0;
    if (qs[i].out) ok_at(&m, qs[i].out, (unsigned)qs[i].type, ns_c_in, __LINE__);
    else refused_at(&m, __LINE__);
  }
  /* With EDNS, as a stub resolver sends it. */
  int n = res_mkquery(ns_o_query, "edns.example", ns_c_in, ns_t_a, NULL, 0, NULL, m.d, sizeof m.d);
  CHECK(n > 12);
  m.n = n > 0 ? (size_t)n : 0;
  set16(&m, 10, 1);
  opt(&m, 0);
  OK(&m, "edns.example", ns_t_a, ns_c_in);
  /* Other opcodes from res_mkquery: refused. */
  n = res_mkquery(ns_o_notify, "a.example", ns_c_in, ns_t_soa, NULL, 0, NULL, m.d, sizeof m.d);
  CHECK(n > 12);
  m.n = n > 0 ? (size_t)n : 0;
  NOT_TAKEN(&m);
}

/* dnsmsg_refuse(q) with rcode: the reply's header and question, and its question parsed back. */
static void refuse_at(const struct msg *q, unsigned rcode, int line) {
  char qname[DNSMSG_NAME_MAX + 1], name[DNSMSG_NAME_MAX + 1];
  unsigned qt, qc, t, c;
  if (!mbt_check(parse(q, qname, &qt, &qc) == 0, __FILE__, line, "a query")) return;
  size_t qend = 12;   /* the question's end: the name's labels, then type and class */
  while (q->d[qend]) qend += 1 + q->d[qend];
  qend += 1 + 4;
  memset(r.d, 0xee, 600);
  size_t n = dnsmsg_refuse(q->d, q->n, rcode, r.d, sizeof r.d);
  r.n = n;
  if (!mbt_check(n == qend, __FILE__, line, "the reply's length: header and question")) {
    fprintf(stderr, "     got %zu, want %zu\n", n, qend);
    return;
  }
  mbt_check(r.d[n] == 0xee, __FILE__, line, "nothing written past the reply");
  mbt_check(memcmp(r.d, q->d, 2) == 0, __FILE__, line, "the query's id");
  unsigned qf = (unsigned)q->d[2] << 8 | q->d[3], f = (unsigned)r.d[2] << 8 | r.d[3];
  /* QR 1, OPCODE 0, AA 0, TC 0, RD as asked, RA 1, Z 0, AD 0, CD as asked, RCODE */
  unsigned want = 0x8000 | (qf & 0x0100) | 0x0080 | (qf & 0x0010) | rcode;
  if (!mbt_check(f == want, __FILE__, line, "the reply's flags"))
    fprintf(stderr, "     got %04x, want %04x\n", f, want);
  mbt_check(memcmp(r.d + 4, "\0\1\0\0\0\0\0\0", 8) == 0, __FILE__, line, "one question, no records");
  mbt_check(memcmp(r.d + 12, q->d + 12, qend - 12) == 0, __FILE__, line, "the question as sent (case kept)");
  /* A reply is no query; with QR cleared it parses to the same question. */
  mbt_check(parse(&r, name, &t, &c) == -1, __FILE__, line, "a reply is not a query");
  r.d[2] &= 0x7f;
  mbt_check(parse(&r, name, &t, &c) == 0 && strcmp(name, qname) == 0 && t == qt && c == qc, __FILE__, line,
            "the reply's question parses back");
  /* Exactly as much room as it needs; a byte less. */
  mbt_check(dnsmsg_refuse(q->d, q->n, rcode, r.d, qend) == qend, __FILE__, line, "fits exactly");
  mbt_check(dnsmsg_refuse(q->d, q->n, rcode, r.d, qend - 1) == 0, __FILE__, line, "a byte short");
}
#define REFUSE(q, rcode) refuse_at(q, rcode, __LINE__)

static void test_refuse(void) {
  query(&m, 0x1234, "MiXeD.Example", 1);
  for (unsigned rc = 0; rc < 16; rc++) REFUSE(&m, rc);
  CHECK_INT(dnsmsg_refuse(m.d, m.n, 16, r.d, sizeof r.d), 0);   /* extended RCODEs need OPT */
  query(&m, 0xffff, "", 2);
  REFUSE(&m, 5);
  /* The query's own flags: RD off, CD on, and AA, TC, AD, Z, an RCODE that the reply does not keep. */
  static const unsigned flags[] = {0x0000, 0x0010, 0x0110, 0x0400, 0x0200, 0x0020, 0x0040, 0x000f, 0x077f};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    query(&m, 0x4242, "a.example", 28);
    set16(&m, 2, flags[i]);
    REFUSE(&m, 5);
  }
  /* An EDNS query: the reply has no OPT (and is shorter than the query). */
  query(&m, 9, "edns.example", 1);
  set16(&m, 10, 1);
  opt(&m, 8);
  REFUSE(&m, 5);
  CHECK(r.n < m.n);
  /* The longest question. */
  char l63[64], name[300];
  memset(l63, 'b', 63), l63[63] = 0;
  snprintf(name, sizeof name, "%s.%s.%s.%.61s", l63, l63, l63, l63);
  query(&m, 9, name, 16);
  REFUSE(&m, 3);
  /* Not a query dnsmsg_question takes: no reply. */
  query(&m, 1, "a.example", 1);
  set16(&m, 2, 0x8180);
  CHECK_INT(dnsmsg_refuse(m.d, m.n, 5, r.d, sizeof r.d), 0);
  header(&m, 1, 0x0100, 1, 0, 0, 0);
  put(&m, "\xc0\x0c", 2), be16(&m, 1), be16(&m, 1);
  CHECK_INT(dnsmsg_refuse(m.d, m.n, 5, r.d, sizeof r.d), 0);
  query(&m, 1, "a.example", 1);
  CHECK_INT(dnsmsg_refuse(m.d, m.n - 1, 5, r.d, sizeof r.d), 0);
  CHECK_INT(dnsmsg_refuse(m.d, 0, 5, r.d, sizeof r.d), 0);
  /* In place, and into buffers overlapping the query either way: the same reply. */
  query(&m, 0xabcd, "Over.Lap.example", 65);
  set16(&m, 10, 1);
  opt(&m, 0);
  size_t want = dnsmsg_refuse(m.d, m.n, 5, r.d, sizeof r.d);
  CHECK(want > 0);
  unsigned char expect[600];
  memcpy(expect, r.d, want);
  static const long shifts[] = {0, 7, -7, 1, -1, 40};
  for (size_t i = 0; i < sizeof shifts / sizeof shifts[0]; i++) {
    unsigned char big[1200];
    memset(big, 0, sizeof big);
    memcpy(big + 100, m.d, m.n);
    size_t got = dnsmsg_refuse(big + 100, m.n, 5, big + 100 + shifts[i], 500);
    if (!CHECK(got == want && memcmp(big + 100 + shifts[i], expect, want) == 0))
      fprintf(stderr, "     shift %ld\n", shifts[i]);
  }
  /* res_mkquery's query, refused. */
  int n = res_mkquery(ns_o_query, "Refused.Example.", ns_c_in, ns_t_mx, NULL, 0, NULL, m.d, sizeof m.d);
  CHECK(n > 12);
  m.n = n > 0 ? (size_t)n : 0;
  REFUSE(&m, 5);
}

int main(void) {
  MBT_RUN(test_hand_built);
  MBT_RUN(test_name_rules);
  MBT_RUN(test_additional);
  MBT_RUN(test_res_mkquery);
  MBT_RUN(test_refuse);
  return mbt_report();
}
