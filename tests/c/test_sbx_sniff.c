/* test_sbx_sniff.c — what a connection says it is for (sandboxd/sniff.c): the server name of TLS
 * ClientHellos made by OpenSSL and GnuTLS (with and without SNI, TLS 1.2 and 1.3, large ones
 * re-framed over several records, ones over the limit), hand-built ClientHellos breaking each rule,
 * and HTTP/1.x request heads, each rule with them. Every prefix of a valid message must answer
 * SNIFF_MORE, an invalid one must stay SNIFF_NONE once it says so, and bytes after a message must
 * not change its answer. Links no HTTP code. */
#include "mbtest.h"

#include <errno.h>
#include <stdbool.h>
#include <gnutls/gnutls.h>
#include <openssl/ssl.h>

#include "sniff.h"

typedef sniff_result (*sniffer)(const unsigned char *, size_t, char *);
static const char *const RES[] = {"MORE", "NAME", "NONE"};

/* The answer for b[0..n). */
static sniff_result run(sniffer f, const void *b, size_t n, char *name) {
  memset(name, '#', SNIFF_NAME_MAX + 1);   /* a name left from an earlier call must not pass */
  return f(b, n, name);
}

/* b answers want (with name) whole and with junk after it, and every proper prefix of it answers
 * MORE. */
static void expect_at(sniffer f, const void *b, size_t n, sniff_result want, const char *want_name, int line) {
  char name[SNIFF_NAME_MAX + 1];
  sniff_result r = run(f, b, n, name);
  if (!mbt_check(r == want && (want != SNIFF_NAME || strcmp(name, want_name) == 0), __FILE__, line, "whole answer"))
    fprintf(stderr, "     got %s \"%.*s\", want %s \"%s\"\n", RES[r], r == SNIFF_NAME ? SNIFF_NAME_MAX : 0, name, RES[want],
            want_name ? want_name : "");
  size_t bad = SIZE_MAX;
  for (size_t k = 0; k < n && bad == SIZE_MAX; k++)
    if (run(f, b, k, name) != SNIFF_MORE) bad = k;
  if (!mbt_check(bad == SIZE_MAX, __FILE__, line, "every prefix MORE"))
    fprintf(stderr, "     the first %zu bytes answer %s\n", bad, RES[run(f, b, bad, name)]);
  if (want == SNIFF_MORE) return;
  unsigned char *junk = mbt_xmalloc(n + 300);
  memcpy(junk, b, n);
  mbt_fill(junk + n, 300);
  r = run(f, junk, n + 300, name);
  mbt_check(r == want && (want != SNIFF_NAME || strcmp(name, want_name) == 0), __FILE__, line, "same answer with junk after");
  free(junk);
}
#define EXPECT(f, b, n, want, name) expect_at(f, b, n, want, name, __LINE__)
#define EXPECT_NAME(f, b, n, name) expect_at(f, b, n, SNIFF_NAME, name, __LINE__)

/* b answers NONE, first at its prefix of at bytes (every shorter one MORE, every longer one NONE);
 * at 0: only that the answers are MORE up to some prefix and NONE from there on. */
static void bad_at(sniffer f, const void *b, size_t n, size_t at, int line) {
  char name[SNIFF_NAME_MAX + 1];
  size_t first = SIZE_MAX, again = SIZE_MAX;
  for (size_t k = 0; k <= n; k++) {
    sniff_result r = run(f, b, k, name);
    if (r == SNIFF_NAME || (first != SIZE_MAX && r != SNIFF_NONE)) { again = k; break; }
    if (r == SNIFF_NONE && first == SIZE_MAX) first = k;
  }
  if (!mbt_check(again == SIZE_MAX && first != SIZE_MAX, __FILE__, line, "MORE, then NONE for good"))
    fprintf(stderr, "     first NONE at %zu, then %s at %zu\n", first, again == SIZE_MAX ? "-" : RES[run(f, b, again, name)],
            again);
  if (at && !mbt_check(first == at, __FILE__, line, "NONE from the first wrong byte"))
    fprintf(stderr, "     first NONE at %zu bytes, want %zu\n", first, at);
}
#define BAD(f, b, n) bad_at(f, b, n, 0, __LINE__)
#define BAD_AT(f, b, n, at) bad_at(f, b, n, at, __LINE__)

/* ---- building ClientHellos ---- */

#define CAP 70000
struct buf {
  unsigned char d[CAP];
  size_t n;
};
static void put(struct buf *b, const void *p, size_t n) {
  if (n > CAP - b->n) { fprintf(stderr, "test buffer too small\n"); exit(2); }
  memcpy(b->d + b->n, p, n);
  b->n += n;
}
static void be(struct buf *b, unsigned long v, size_t w) {
  unsigned char x[4];
  for (size_t i = 0; i < w; i++) x[i] = (unsigned char)(v >> (8 * (w - 1 - i)));
  put(b, x, w);
}
static void zeros(struct buf *b, size_t n) {
  for (size_t i = 0; i < n; i++) be(b, 0, 1);
}

/* One extension. */
static void ext(struct buf *b, unsigned type, const void *data, size_t n) {
  be(b, type, 2);
  be(b, n, 2);
  put(b, data, n);
}
/* A server_name extension naming name[0..n). */
static void sni_n(struct buf *b, const char *name, size_t n) {
  struct buf d = {.n = 0};
  be(&d, n + 3, 2);
  be(&d, 0, 1);
  be(&d, n, 2);
  put(&d, name, n);
  ext(b, 0, d.d, d.n);
}
static void sni(struct buf *b, const char *name) { sni_n(b, name, strlen(name)); }

/* A ClientHello's fields; hello() builds the handshake message. */
struct ch {
  unsigned type, version;       /* handshake type, legacy_version */
  size_t sid, cs;               /* session id bytes, cipher suite bytes */
  const char *comp;             /* compression methods */
  size_t ncomp;
  bool no_ext;                  /* no extension block at all */
  long ext_delta, len_delta;    /* added to the extensions' and the message's length fields */
  const struct buf *ext;
};
static struct ch ch(const struct buf *e) {
  return (struct ch){1, 0x0303, 32, 4, "\0", 1, false, 0, 0, e};
}
static size_t hello(unsigned char *out, const struct ch *c) {
  struct buf b = {.n = 0};
  be(&b, c->type, 1);
  be(&b, 0, 3);   /* filled below */
  be(&b, c->version, 2);
  for (unsigned i = 0; i < 32; i++) be(&b, i * 7 + 1, 1);   /* random */
  be(&b, c->sid, 1);
  zeros(&b, c->sid);
  be(&b, c->cs, 2);
  for (size_t i = 0; i < c->cs; i++) be(&b, i % 2 ? 0x2f : 0x00, 1);   /* TLS_RSA_WITH_AES_128_CBC_SHA, ... */
  be(&b, c->ncomp, 1);
  put(&b, c->comp, c->ncomp);
  if (!c->no_ext) {
    be(&b, (unsigned long)((long)c->ext->n + c->ext_delta), 2);
    put(&b, c->ext->d, c->ext->n);
  }
  unsigned long len = (unsigned long)((long)b.n - 4 + c->len_delta);
  b.d[1] = (unsigned char)(len >> 16);
  b.d[2] = (unsigned char)(len >> 8);
  b.d[3] = (unsigned char)len;
  memcpy(out, b.d, b.n);
  return b.n;
}

/* hs[0..n) in records of at most frag bytes (record version ver): the stream's length. */
static size_t frame_v(unsigned char *out, const unsigned char *hs, size_t n, size_t frag, unsigned ver) {
  size_t o = 0;
  for (size_t i = 0; i < n; i += frag) {
    size_t k = n - i < frag ? n - i : frag;
    out[o++] = 22;
    out[o++] = (unsigned char)(ver >> 8);
    out[o++] = (unsigned char)ver;
    out[o++] = (unsigned char)(k >> 8);
    out[o++] = (unsigned char)k;
    memcpy(out + o, hs + i, k);
    o += k;
  }
  return o;
}
static size_t frame(unsigned char *out, const unsigned char *hs, size_t n, size_t frag) {
  return frame_v(out, hs, n, frag, 0x0301);
}
/* In two records, the first of k bytes. */
static size_t frame2(unsigned char *out, const unsigned char *hs, size_t n, size_t k) {
  size_t o = frame(out, hs, k, k);
  return o + frame(out + o, hs + k, n - k, n - k);
}
/* The handshake bytes of a stream of handshake records. */
static size_t unframe(const unsigned char *s, size_t n, unsigned char *hs) {
  size_t o = 0, h = 0;
  while (o + 5 <= n) {
    size_t k = (size_t)s[o + 3] << 8 | s[o + 4];
    CHECK_INT(s[o], 22);
    if (k > n - o - 5) break;
    memcpy(hs + h, s + o + 5, k);
    h += k;
    o += 5 + k;
  }
  CHECK_INT(o, n);
  return h;
}

/* A ClientHello (one record) naming name: the stream's length. */
static size_t tls_named(unsigned char *out, const char *name) {
  struct buf e = {.n = 0};
  sni(&e, name);
  unsigned char hs[CAP];
  struct ch c = ch(&e);
  return frame(out, hs, hello(hs, &c), 16384);
}

/* ---- real clients ---- */

/* OpenSSL's first flight. max: 0 or TLS1_2_VERSION. */
static size_t openssl_hello(unsigned char *out, size_t cap, const char *name, int max, const char *ciphers,
                            const unsigned char *alpn, size_t alpn_len) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  CHECK(ctx != NULL);
  if (max) CHECK(SSL_CTX_set_max_proto_version(ctx, max) == 1);
  if (ciphers) CHECK(SSL_CTX_set_cipher_list(ctx, ciphers) == 1);
  SSL *s = SSL_new(ctx);
  BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
  SSL_set_bio(s, rb, wb);
  if (name) CHECK(SSL_set_tlsext_host_name(s, name) == 1);
  if (alpn) CHECK(SSL_set_alpn_protos(s, alpn, (unsigned)alpn_len) == 0);
  int r = SSL_connect(s);
  CHECK(r <= 0 && SSL_get_error(s, r) == SSL_ERROR_WANT_READ);   /* waiting for the ServerHello */
  size_t n = BIO_ctrl_pending(wb);
  CHECK(n > 0 && n <= cap);
  if (n > cap) n = cap;
  CHECK_INT(BIO_read(wb, out, (int)n), (long long)n);
  SSL_free(s);
  SSL_CTX_free(ctx);
  return n;
}

struct capture {
  unsigned char *d;
  size_t n, cap;
};
static ssize_t g_push(gnutls_transport_ptr_t p, const void *data, size_t n) {
  struct capture *c = p;
  if (n > c->cap - c->n) { errno = ENOSPC; return -1; }
  memcpy(c->d + c->n, data, n);
  c->n += n;
  return (ssize_t)n;
}
static ssize_t g_pull(gnutls_transport_ptr_t p, void *data, size_t n) {
  (void)p, (void)data, (void)n;
  errno = EAGAIN;   /* no ServerHello: the handshake stops after the first flight */
  return -1;
}
/* GnuTLS's first flight with priority string prio. */
static size_t gnutls_hello(unsigned char *out, size_t cap, const char *name, const char *prio) {
  gnutls_certificate_credentials_t cred;
  gnutls_session_t s;
  CHECK(gnutls_certificate_allocate_credentials(&cred) == 0);
  CHECK(gnutls_init(&s, GNUTLS_CLIENT | GNUTLS_NONBLOCK) == 0);
  CHECK(gnutls_priority_set_direct(s, prio, NULL) == 0);
  CHECK(gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred) == 0);
  if (name) CHECK(gnutls_server_name_set(s, GNUTLS_NAME_DNS, name, strlen(name)) == 0);
  struct capture c = {out, 0, cap};
  gnutls_transport_set_ptr(s, &c);
  gnutls_transport_set_push_function(s, g_push);
  gnutls_transport_set_pull_function(s, g_pull);
  CHECK_INT(gnutls_handshake(s), GNUTLS_E_AGAIN);
  gnutls_deinit(s);
  gnutls_certificate_free_credentials(cred);
  CHECK(c.n > 0);
  return c.n;
}

/* A ClientHello's extension types in order (from the handshake bytes): to see what was sent. */
static bool has_ext(const unsigned char *hs, size_t n, unsigned type) {
  size_t o = 4 + 2 + 32;
  o += 1 + hs[o];
  o += 2 + ((size_t)hs[o] << 8 | hs[o + 1]);
  o += 1 + hs[o];
  o += 2;
  while (o + 4 <= n) {
    unsigned t = (unsigned)hs[o] << 8 | hs[o + 1];
    if (t == type) return true;
    o += 4 + ((size_t)hs[o + 2] << 8 | hs[o + 3]);
  }
  return false;
}

static unsigned char s1[CAP], s2[CAP], hs1[CAP];

static void test_openssl(void) {
  size_t n = openssl_hello(s1, CAP, "www.example.com", 0, NULL, NULL, 0);
  size_t h = unframe(s1, n, hs1);
  CHECK(has_ext(hs1, h, 43));   /* supported_versions: a TLS 1.3 ClientHello */
  EXPECT_NAME(sniff_tls, s1, n, "www.example.com");
  n = openssl_hello(s1, CAP, NULL, 0, NULL, NULL, 0);
  h = unframe(s1, n, hs1);
  CHECK(!has_ext(hs1, h, 0));
  EXPECT(sniff_tls, s1, n, SNIFF_NONE, NULL);   /* no SNI: complete, no name */
  n = openssl_hello(s1, CAP, "Mixed.Case.Example.", TLS1_2_VERSION, NULL, NULL, 0);
  h = unframe(s1, n, hs1);
  CHECK(!has_ext(hs1, h, 43));   /* TLS 1.2 only */
  EXPECT_NAME(sniff_tls, s1, n, "mixed.case.example");
  n = openssl_hello(s1, CAP, NULL, TLS1_2_VERSION, NULL, NULL, 0);
  EXPECT(sniff_tls, s1, n, SNIFF_NONE, NULL);
  n = openssl_hello(s1, CAP, "192.0.2.1", 0, NULL, NULL, 0);   /* OpenSSL sends an address if told to */
  h = unframe(s1, n, hs1);
  CHECK(has_ext(hs1, h, 0));
  const unsigned char *at = memmem(s1, n, "192.0.2.1", 9);
  CHECK(at != NULL);
  BAD_AT(sniff_tls, s1, n, at ? (size_t)(at - s1) + 9 : 0);   /* NONE once the name is whole */
  n = openssl_hello(s1, CAP, "under_score-and-dash.example", 0, NULL, NULL, 0);
  EXPECT_NAME(sniff_tls, s1, n, "under_score-and-dash.example");
  /* Many cipher suites (TLS 1.2: every one OpenSSL has) and an ALPN list of many protocols. */
  n = openssl_hello(s1, CAP, "api.example.org", TLS1_2_VERSION, "ALL:COMPLEMENTOFALL:@SECLEVEL=0", NULL, 0);
  EXPECT_NAME(sniff_tls, s1, n, "api.example.org");
  unsigned char alpn[20000 + 16];
  size_t an = 0;
  for (int i = 0; an + 12 <= 9000; i++) an += (size_t)snprintf((char *)alpn + an, 13, "%cproto-%05d", 11, i);
  n = openssl_hello(s1, CAP, "big.example", 0, NULL, alpn, an);
  CHECK(n > 9000 && n < 16384 - 16);
  CHECK_INT((size_t)s1[3] << 8 | s1[4], n - 5);   /* OpenSSL sent it in one record */
  EXPECT_NAME(sniff_tls, s1, n, "big.example");
  /* Re-framed: two records split at every byte; every prefix of one split; records of 1, 2, 100
   * and 4096 bytes; TLS 1.3's record version 0x0303 and 0x0304. */
  h = unframe(s1, n, hs1);
  char name[SNIFF_NAME_MAX + 1];
  size_t wrong = 0;
  for (size_t k = 1; k < h; k++) {
    size_t m = frame2(s2, hs1, h, k);
    if (run(sniff_tls, s2, m, name) != SNIFF_NAME || strcmp(name, "big.example") != 0) wrong++;
  }
  CHECK_INT(wrong, 0);
  EXPECT_NAME(sniff_tls, s2, frame2(s2, hs1, h, h / 2), "big.example");
  EXPECT_NAME(sniff_tls, s2, frame2(s2, hs1, h, 3), "big.example");   /* the first record too short for a header */
  EXPECT_NAME(sniff_tls, s2, frame(s2, hs1, h, 4096), "big.example");
  EXPECT_NAME(sniff_tls, s2, frame(s2, hs1, h, 100), "big.example");
  EXPECT_NAME(sniff_tls, s2, frame_v(s2, hs1, h, 16384, 0x0303), "big.example");
  EXPECT_NAME(sniff_tls, s2, frame_v(s2, hs1, h, 16384, 0x0304), "big.example");
  size_t m = frame(s2, hs1, h, 2);   /* 2-byte records: 2.5 times the bytes, over the limit */
  CHECK(m > SNIFF_LIMIT);
  CHECK_INT(run(sniff_tls, s2, m, name), SNIFF_NONE);
  n = openssl_hello(s1, CAP, "www.example.com", 0, NULL, NULL, 0);
  h = unframe(s1, n, hs1);
  EXPECT_NAME(sniff_tls, s2, frame(s2, hs1, h, 1), "www.example.com");   /* one byte a record */
  EXPECT_NAME(sniff_tls, s2, frame(s2, hs1, h, 2), "www.example.com");
  /* Over the limit: an ALPN list of 20000 bytes, which OpenSSL itself sends in two records. NONE
   * as soon as the first record's header is in: that record would end beyond the limit. */
  an = 0;
  for (int i = 0; an + 12 <= 20000; i++) an += (size_t)snprintf((char *)alpn + an, 13, "%cproto-%05d", 11, i);
  n = openssl_hello(s1, CAP, "huge.example", 0, NULL, alpn, an);
  CHECK(n > SNIFF_LIMIT);
  CHECK_INT((size_t)s1[3] << 8 | s1[4], 16384);
  BAD_AT(sniff_tls, s1, n, 5);
  h = unframe(s1, n, hs1);   /* in smaller records: NONE once the message's length is known to be too much */
  CHECK(hs1[1] == 0 && hs1[2] > 0x40);
  BAD_AT(sniff_tls, s2, frame(s2, hs1, h, 8192), 8);
}

static void test_gnutls(void) {
  size_t n = gnutls_hello(s1, CAP, "files.example.net", "NORMAL");
  size_t h = unframe(s1, n, hs1);
  CHECK(has_ext(hs1, h, 43));
  EXPECT_NAME(sniff_tls, s1, n, "files.example.net");
  n = gnutls_hello(s1, CAP, "TLS12.Example.NET", "NORMAL:-VERS-ALL:+VERS-TLS1.2");
  h = unframe(s1, n, hs1);
  CHECK(!has_ext(hs1, h, 43));
  EXPECT_NAME(sniff_tls, s1, n, "tls12.example.net");
  n = gnutls_hello(s1, CAP, NULL, "NORMAL");
  EXPECT(sniff_tls, s1, n, SNIFF_NONE, NULL);
  n = gnutls_hello(s1, CAP, "x.example", "NORMAL:%COMPAT");
  h = unframe(s1, n, hs1);
  EXPECT_NAME(sniff_tls, s2, frame(s2, hs1, h, 7), "x.example");
}

/* Each record-layer rule. */
static void test_records(void) {
  size_t n = tls_named(s1, "example.com");
  EXPECT_NAME(sniff_tls, s1, n, "example.com");
  memcpy(s2, s1, n);
  s2[0] = 23;   /* application data */
  BAD_AT(sniff_tls, s2, n, 1);
  s2[0] = 21;   /* alert */
  BAD_AT(sniff_tls, s2, n, 1);
  s2[0] = 0x80;   /* an SSL 2 ClientHello */
  BAD_AT(sniff_tls, s2, n, 1);
  static const unsigned versions[][2] = {{0x0300, 0}, {0x0305, 0}, {0x0201, 0}, {0x0403, 0}, {0x0301, 1}, {0x0302, 1},
                                         {0x0303, 1}, {0x0304, 1}};
  for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
    memcpy(s2, s1, n);
    s2[1] = (unsigned char)(versions[i][0] >> 8);
    s2[2] = (unsigned char)versions[i][0];
    if (versions[i][1]) EXPECT_NAME(sniff_tls, s2, n, "example.com");
    else BAD_AT(sniff_tls, s2, n, s2[1] != 3 ? 2 : 3);
  }
  /* record length 0 (no empty handshake fragments), 2^14 + 1, and a high byte over 0x40 */
  static const unsigned char empty[] = {22, 3, 1, 0, 0}, over[] = {22, 3, 1, 0x40, 1}, high[] = {22, 3, 1, 0x41};
  BAD_AT(sniff_tls, empty, sizeof empty, 5);
  BAD_AT(sniff_tls, over, sizeof over, 5);
  BAD_AT(sniff_tls, high, sizeof high, 4);
  /* A record that ends beyond the limit: NONE from its header. */
  static const unsigned char full[] = {22, 3, 1, 0x40, 0x00, 1, 0, 0x3f, 0xfc};
  BAD_AT(sniff_tls, full, sizeof full, 5);
  /* Two records, and another content type between them. */
  unsigned char hs[CAP];
  size_t h = unframe(s1, n, hs);
  size_t m = frame2(s2, hs, h, 20);
  EXPECT_NAME(sniff_tls, s2, m, "example.com");
  s2[25] = 20;   /* the second record: change_cipher_spec */
  BAD_AT(sniff_tls, s2, m, 26);
  m = frame2(s2, hs, h, 20);
  s2[26] = 2;   /* the second record's version */
  BAD_AT(sniff_tls, s2, m, 27);
  /* The message's last record carries more: NONE once the record's header says so. */
  memcpy(s2, s1, n);
  s2[n] = 1;   /* a byte more in the record */
  s2[4]++;
  BAD_AT(sniff_tls, s2, n + 1, 9);
  /* A second ClientHello's record after the first: not looked at. */
  memcpy(s2, s1, n);
  memcpy(s2 + n, s1, n);
  char name[SNIFF_NAME_MAX + 1];
  CHECK_INT(run(sniff_tls, s2, 2 * n, name), SNIFF_NAME);
  /* Empty input and a lone header: MORE. */
  CHECK_INT(run(sniff_tls, s1, 0, name), SNIFF_MORE);
  CHECK_INT(run(sniff_tls, s1, 5, name), SNIFF_MORE);
}

/* The limit: a ClientHello whose stream ends at SNIFF_LIMIT bytes exactly is taken, one byte more
 * is not — in one record or two (each header costs 5 bytes). */
static size_t padded(unsigned char *hs, size_t hs_len) {
  struct buf e = {.n = 0};
  sni(&e, "edge.example");
  struct ch c = ch(&e);
  size_t base = hello(hs, &c);
  struct buf p = {.n = 0};
  zeros(&p, hs_len - base - 4);
  ext(&e, 21, p.d, p.n);   /* padding (RFC 7685) */
  size_t n = hello(hs, &c);
  CHECK_INT(n, hs_len);
  return n;
}
static void test_limit(void) {
  unsigned char hs[CAP];
  char name[SNIFF_NAME_MAX + 1];
  size_t h = padded(hs, SNIFF_LIMIT - 5), n = frame(s1, hs, h, 16384);
  CHECK_INT(n, SNIFF_LIMIT);
  EXPECT_NAME(sniff_tls, s1, n, "edge.example");
  h = padded(hs, SNIFF_LIMIT - 4);   /* a byte too many: the record (2^14 bytes) ends beyond */
  n = frame(s1, hs, h, 16384);
  BAD_AT(sniff_tls, s1, n, 5);
  h = padded(hs, SNIFF_LIMIT - 10);
  n = frame2(s1, hs, h, 1000);
  CHECK_INT(n, SNIFF_LIMIT);
  EXPECT_NAME(sniff_tls, s1, n, "edge.example");
  h = padded(hs, SNIFF_LIMIT - 9);   /* in two records it cannot fit: known once its length is in */
  n = frame2(s1, hs, h, 1000);
  BAD_AT(sniff_tls, s1, n, 9);
  n = frame2(s1, hs, h, 3);   /* the second record itself would end beyond: NONE at its header */
  BAD_AT(sniff_tls, s1, n, 13);
  /* Bytes beyond the limit are not looked at: a whole ClientHello in the first SNIFF_LIMIT bytes
   * answers the same with more after it; a stream that is no ClientHello within them is NONE. */
  h = padded(hs, SNIFF_LIMIT - 5);
  n = frame(s1, hs, h, 16384);
  mbt_fill(s1 + n, 100);
  CHECK_INT(run(sniff_tls, s1, n + 100, name), SNIFF_NAME);
  /* A message length larger than any record could carry, in its first byte. */
  static const unsigned char huge[] = {22, 3, 1, 0x10, 0x00, 1, 1, 0, 0};
  BAD_AT(sniff_tls, huge, sizeof huge, 7);
}

/* Each ClientHello rule, on a hand-built message. */
static void tls_case(const struct ch *c, sniff_result want, const char *name, int line) {
  unsigned char hs[CAP];
  size_t n = frame(s1, hs, hello(hs, c), 16384);
  if (want == SNIFF_NONE) bad_at(sniff_tls, s1, n, 0, line);
  else expect_at(sniff_tls, s1, n, want, name, line);
}
#define TLS_CASE(c, want, name) tls_case(c, want, name, __LINE__)

static void test_client_hello(void) {
  struct buf e = {.n = 0};
  sni(&e, "example.com");
  struct ch c = ch(&e);
  TLS_CASE(&c, SNIFF_NAME, "example.com");
  c.type = 2;   /* a ServerHello */
  unsigned char hs[CAP];
  size_t n = frame(s1, hs, hello(hs, &c), 16384);
  BAD_AT(sniff_tls, s1, n, 6);
  static const unsigned vers[][2] = {{0x0300, 0}, {0x0304, 0}, {0x0203, 0}, {0x0301, 1}, {0x0302, 1}};
  for (size_t i = 0; i < sizeof vers / sizeof vers[0]; i++) {
    c = ch(&e);
    c.version = vers[i][0];
    n = frame(s1, hs, hello(hs, &c), 16384);
    if (vers[i][1]) EXPECT_NAME(sniff_tls, s1, n, "example.com");
    else BAD_AT(sniff_tls, s1, n, vers[i][0] >> 8 != 3 ? 10 : 11);
  }
  c = ch(&e);
  c.sid = 0;
  TLS_CASE(&c, SNIFF_NAME, "example.com");
  c.sid = 33;   /* longer than 32: NONE at its length byte (5 + 4 + 2 + 32 + 1) */
  n = frame(s1, hs, hello(hs, &c), 16384);
  BAD_AT(sniff_tls, s1, n, 44);
  c = ch(&e);
  c.cs = 0;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  c.cs = 3;   /* odd */
  TLS_CASE(&c, SNIFF_NONE, NULL);
  c.cs = 2000;
  TLS_CASE(&c, SNIFF_NAME, "example.com");
  c = ch(&e);
  c.ncomp = 0;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  c.comp = "\x01";   /* DEFLATE only: null missing */
  c.ncomp = 1;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  c.comp = "\x01\x00";
  c.ncomp = 2;
  TLS_CASE(&c, SNIFF_NAME, "example.com");
  /* The extension block: absent, empty, its length short or long of the message's rest. */
  c = ch(&e);
  c.no_ext = true;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  struct buf none = {.n = 0};
  c = ch(&none);
  TLS_CASE(&c, SNIFF_NONE, NULL);
  c = ch(&e);
  c.ext_delta = -1;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  c.ext_delta = 1;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  /* The message's length short or long of its contents (long: more bytes than sent — MORE). */
  c = ch(&e);
  c.len_delta = -1;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  c.len_delta = 1;
  TLS_CASE(&c, SNIFF_NONE, NULL);
  /* An extension's length beyond the block. */
  struct buf x = e;
  x.d[x.n - 1 - 11 - 2 - 1 - 2] += 1;   /* the SNI extension's own length (data: 2 + 1 + 2 + 11) */
  c = ch(&x);
  TLS_CASE(&c, SNIFF_NONE, NULL);
  /* Other extensions before and after; duplicates of any type. */
  struct buf o = {.n = 0};
  ext(&o, 0x0a0a, "", 0);   /* GREASE */
  ext(&o, 16, "\x00\x03\x02h2", 5);
  sni(&o, "Before.Example");
  ext(&o, 43, "\x02\x03\x04", 3);
  ext(&o, 0xfafa, "\x00", 1);
  c = ch(&o);
  TLS_CASE(&c, SNIFF_NAME, "before.example");
  ext(&o, 16, "\x00\x03\x02h2", 5);   /* ALPN twice */
  c = ch(&o);
  TLS_CASE(&c, SNIFF_NONE, NULL);
  struct buf two = {.n = 0};
  sni(&two, "a.example");
  sni(&two, "a.example");   /* server_name twice, even the same */
  c = ch(&two);
  TLS_CASE(&c, SNIFF_NONE, NULL);
}

/* server_name's own rules, each on an otherwise valid ClientHello. */
static void sni_raw(const void *data, size_t n, sniff_result want, const char *name, int line) {
  struct buf e = {.n = 0};
  ext(&e, 0, data, n);
  struct ch c = ch(&e);
  tls_case(&c, want, name, line);
}
#define SNI_RAW(d, n, want, name) sni_raw(d, n, want, name, __LINE__)

static void test_server_name(void) {
  SNI_RAW("\x00\x04\x00\x00\x01" "a", 6, SNIFF_NAME, "a");
  SNI_RAW("", 0, SNIFF_NONE, NULL);   /* empty: what a server sends back, never a client */
  SNI_RAW("\x00\x05\x00\x00\x01" "a", 6, SNIFF_NONE, NULL);   /* list longer than the extension */
  SNI_RAW("\x00\x03\x00\x00\x01" "a", 6, SNIFF_NONE, NULL);   /* shorter */
  SNI_RAW("\x00\x04\x01\x00\x01" "a", 6, SNIFF_NONE, NULL);   /* a name type that is not host_name */
  SNI_RAW("\x00\x03\x00\x00\x00", 5, SNIFF_NONE, NULL);        /* an empty name */
  SNI_RAW("\x00\x04\x00\x00\x02" "a", 6, SNIFF_NONE, NULL);   /* the name longer than the list */
  SNI_RAW("\x00\x08\x00\x00\x01" "a" "\x00\x00\x01" "b", 10, SNIFF_NONE, NULL);   /* two names */
  SNI_RAW("\x00\x08\x00\x00\x01" "a" "\x01\x00\x01" "b", 10, SNIFF_NONE, NULL);   /* a name and another type */
  SNI_RAW("\x00\x00", 2, SNIFF_NONE, NULL);                     /* an empty list */
  SNI_RAW("\x00", 1, SNIFF_NONE, NULL);
  /* The name's own rules (shared with HTTP; sniff_hostname has them all in test_hostname). */
  static const struct { const char *in, *out; } names[] = {
    {"example.com", "example.com"}, {"Example.COM.", "example.com"}, {"xn--bcher-kva.example", "xn--bcher-kva.example"},
    {"_dmarc.example", "_dmarc.example"}, {"123.example", "123.example"}, {"1.2.3.4a", "1.2.3.4a"},
    {"10.0.0.1", NULL}, {"127.1", NULL}, {"0x7f.1", NULL}, {"0X7F000001", NULL}, {"a.0x", NULL}, {"8", NULL},
    {"exa mple.com", NULL}, {"ex*ample.com", NULL}, {"b\xc3\xbc" "cher.example", NULL}, {"a..b", NULL}, {".a", NULL},
    {"a.", "a"}, {"a..", NULL}, {".", NULL}, {"[::1]", NULL}, {"::1", NULL}, {"a:443", NULL}, {"a/b", NULL},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    struct buf e = {.n = 0};
    sni(&e, names[i].in);
    struct ch c = ch(&e);
    tls_case(&c, names[i].out ? SNIFF_NAME : SNIFF_NONE, names[i].out, __LINE__);
  }
  struct buf e = {.n = 0};
  sni_n(&e, "a\0b", 3);   /* a NUL inside */
  struct ch c = ch(&e);
  TLS_CASE(&c, SNIFF_NONE, NULL);
  /* 63-byte labels and 253 bytes in all (254 with a trailing dot) pass; 64 and 254 do not. */
  char l63[64], l64[65], n253[260], n254[260];
  memset(l63, 'a', 63), l63[63] = 0;
  memset(l64, 'a', 64), l64[64] = 0;
  snprintf(n253, sizeof n253, "%s.%s.%s.%.61s", l63, l63, l63, l63);
  CHECK_INT(strlen(n253), 253);
  memcpy(n254, n253, 253); n254[253] = '.'; n254[254] = 0;
  e.n = 0, sni(&e, l63), c = ch(&e);
  TLS_CASE(&c, SNIFF_NAME, l63);
  e.n = 0, sni(&e, n253), c = ch(&e);
  TLS_CASE(&c, SNIFF_NAME, n253);
  e.n = 0, sni(&e, n254), c = ch(&e);
  TLS_CASE(&c, SNIFF_NAME, n253);
  e.n = 0, sni(&e, l64), c = ch(&e);
  TLS_CASE(&c, SNIFF_NONE, NULL);
  snprintf(n254, sizeof n254, "%s.%s.%s.%.62s", l63, l63, l63, l63);
  e.n = 0, sni(&e, n254), c = ch(&e);
  TLS_CASE(&c, SNIFF_NONE, NULL);
  /* A bad byte in the name: NONE when it arrives, before the rest of the message. */
  e.n = 0, sni(&e, "good.bad*.example"), c = ch(&e);
  unsigned char hs[CAP];
  size_t n = frame(s1, hs, hello(hs, &c), 16384);
  const unsigned char *star = memchr(s1, '*', n);
  BAD_AT(sniff_tls, s1, n, (size_t)(star - s1) + 1);
}

static void test_hostname(void) {
  char out[SNIFF_NAME_MAX + 1];
  CHECK_INT(sniff_hostname("Example.COM.", 12, out), 0);
  CHECK_STR(out, "example.com");
  CHECK_INT(sniff_hostname("example.com", 7, out), 0);   /* only len bytes */
  CHECK_STR(out, "example");
  CHECK_INT(sniff_hostname("", 0, out), -1);
  CHECK_INT(sniff_hostname(".", 1, out), -1);
  CHECK_INT(sniff_hostname("a-.-b", 5, out), 0);   /* the byte set, no LDH rule */
  CHECK_INT(sniff_hostname("0x", 2, out), -1);
  CHECK_INT(sniff_hostname("a.0xg", 5, out), 0);
  CHECK_INT(sniff_hostname("1e5", 3, out), 0);
  CHECK_INT(sniff_hostname("a.09", 4, out), -1);
  CHECK_INT(sniff_hostname("a.b\x7f", 4, out), -1);
}

/* ---- HTTP ---- */

static void http_at(const char *head, sniff_result want, const char *name, int line) {
  if (want == SNIFF_NONE) bad_at(sniff_http, head, strlen(head), 0, line);
  else expect_at(sniff_http, head, strlen(head), want, name, line);
}
#define HTTP(head, want, name) http_at(head, want, name, __LINE__)
#define HTTP_NAME(head, name) http_at(head, SNIFF_NAME, name, __LINE__)
#define HTTP_NONE(head) http_at(head, SNIFF_NONE, NULL, __LINE__)

static void test_http_basic(void) {
  HTTP_NAME("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com");
  HTTP_NAME("GET /x?y=1 HTTP/1.0\r\nHost: example.com\r\nAccept: */*\r\n\r\n", "example.com");
  HTTP_NAME("POST /upload HTTP/1.1\r\nContent-Length: 5\r\nhOsT: Example.COM.\r\nX-Empty:\r\n\r\n", "example.com");
  HTTP_NAME("GET / HTTP/1.1\r\nHost:example.com\r\n\r\n", "example.com");
  HTTP_NAME("GET / HTTP/1.1\r\nHost: \t example.com \t \r\n\r\n", "example.com");   /* OWS around the value */
  HTTP_NAME("get / HTTP/1.1\r\nHost: a\r\n\r\n", "a");   /* any token is a method */
  HTTP_NAME("GET / HTTP/1.1\r\nX-Bin: \x80\xff ok\r\nHost: a\r\n\r\n", "a");   /* obs-text in another field */
  char name[SNIFF_NAME_MAX + 1];
  static const char body[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\n\x00\x01\n body bytes are not looked at";
  CHECK_INT(run(sniff_http, body, sizeof body - 1, name), SNIFF_NAME);
  CHECK_STR(name, "a");
}

static void test_http_host(void) {
  HTTP_NAME("GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", "example.com");
  HTTP_NAME("GET / HTTP/1.1\r\nHost: example.com:0\r\n\r\n", "example.com");
  HTTP_NAME("GET / HTTP/1.1\r\nHost: example.com:65535\r\n\r\n", "example.com");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: example.com:65536\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: example.com:123456\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: example.com:\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: example.com:8a\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: example.com:+80\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: example.com:80:80\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: :80\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: \r\n\r\n");   /* empty: no name */
  HTTP_NONE("GET / HTTP/1.0\r\nAccept: */*\r\n\r\n");   /* none */
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n");   /* two, even the same */
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: 127.1:80\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: 0x7f000001\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: 2130706433\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: exa mple.com\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a,b\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: user@a\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a%2eb\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: b\xc3\xbc" "cher.example\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a..b\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost-Name: a\r\n\r\n");   /* not Host: no Host at all */
  /* Early answers: a second Host is NONE at its colon; a bad byte in Host at once. */
  const char *dup = "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n";
  BAD_AT(sniff_http, dup, strlen(dup), strlen("GET / HTTP/1.1\r\nHost: a\r\nHost:"));
  const char *sp = "GET / HTTP/1.1\r\nHost: exa mple.com\r\n\r\n";
  BAD_AT(sniff_http, sp, strlen(sp), strlen("GET / HTTP/1.1\r\nHost: exa m"));
  const char *port = "GET / HTTP/1.1\r\nHost: a:123456\r\n\r\n";
  BAD_AT(sniff_http, port, strlen(port), strlen("GET / HTTP/1.1\r\nHost: a:123456"));
}

static void test_http_syntax(void) {
  /* Line ends: CRLF only. */
  HTTP_NONE("GET / HTTP/1.1\nHost: a\n\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\n\n");
  const char *cr = "GET / HTTP/1.1\r\nX: a\rHost: b\r\n\r\n";   /* a bare CR */
  BAD_AT(sniff_http, cr, strlen(cr), strlen("GET / HTTP/1.1\r\nX: a\rH"));
  cr = "GET / HTTP/1.1\rHost: b\r\n\r\n";
  BAD_AT(sniff_http, cr, strlen(cr), strlen("GET / HTTP/1.1\rH"));
  cr = "GET / HTTP/1.1\r\nHost: a\r\n\rX";
  BAD_AT(sniff_http, cr, strlen(cr), strlen(cr));
  HTTP_NONE("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");   /* an empty line first */
  /* The request line. */
  HTTP_NONE("GET  / HTTP/1.1\r\nHost: a\r\n\r\n");
  HTTP_NONE("GET /  HTTP/1.1\r\nHost: a\r\n\r\n");
  HTTP_NONE("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n");
  HTTP_NONE(" GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  HTTP_NONE("GE(T / HTTP/1.1\r\nHost: a\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.2\r\nHost: a\r\n\r\n");
  HTTP_NONE("GET / HTTP/2.0\r\nHost: a\r\n\r\n");
  HTTP_NONE("GET / http/1.1\r\nHost: a\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1 \r\nHost: a\r\n\r\n");
  HTTP_NONE("GET /\r\n\r\n");   /* HTTP/0.9 */
  HTTP_NONE("GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n");   /* the target: visible ASCII only */
  HTTP_NONE("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");   /* the HTTP/2 preface */
  /* Header fields. */
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n");   /* obs-fold */
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\n\tz\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\n Host: a\r\n\r\n");   /* whitespace before the first field */
  HTTP_NONE("GET / HTTP/1.1\r\nHost : a\r\n\r\n");   /* whitespace before the colon */
  HTTP_NONE("GET / HTTP/1.1\r\nHo st: a\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nX(y): z\r\nHost: a\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\n: z\r\nHost: a\r\n\r\n");   /* an empty name */
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\nNo-Colon\r\n\r\n");
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n");   /* controls in a value */
  HTTP_NONE("GET / HTTP/1.1\r\nHost: a\r\nX: \x7f\r\n\r\n");
  /* NUL anywhere in the head (strings with a NUL, so by length). */
  static const char *const nul[] = {"G\0ET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n",
                                    "GET / HTTP/1.1\0\r\nHost: a\r\n\r\n", "GET / HTTP/1.1\r\nHo\0st: a\r\n\r\n",
                                    "GET / HTTP/1.1\r\nHost: a\0\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\nX: \0\r\n\r\n",
                                    "GET / HTTP/1.1\r\nHost: a\r\n\0\r\n"};
  for (size_t i = 0; i < sizeof nul / sizeof nul[0]; i++) {
    size_t n = strlen(nul[i]);
    n += 1 + strlen(nul[i] + n + 1);
    BAD_AT(sniff_http, nul[i], n, strlen(nul[i]) + 1);
  }
}

static void test_http_target(void) {
  HTTP_NAME("GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com");
  HTTP_NAME("GET HTTP://EXAMPLE.com:8080/x HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com");   /* case, port */
  HTTP_NAME("GET https://example.com HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "example.com");
  HTTP_NAME("GET http://example.com?q HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com");
  HTTP_NAME("GET http://example.com./ HTTP/1.1\r\nHost: Example.com\r\n\r\n", "example.com");
  HTTP_NONE("GET http://other.example/ HTTP/1.1\r\nHost: example.com\r\n\r\n");   /* ambiguous */
  HTTP_NONE("GET http://example.com.evil/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET http://user@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET http://example.com@evil/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET http:///x HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET http://[::1]/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET http://10.0.0.1/ HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n");
  HTTP_NONE("GET http://example.com:99999/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET http:/example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET http://example.com/ HTTP/1.1\r\n\r\n");   /* no Host: NONE, even with a name in the target */
  /* A target is NONE at its first byte that no ending could make right; a name differing from
   * Host's at the end of the Host line. */
  static const struct { const char *head, *upto; } early[] = {
    {"GET http://user@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "GET http://user@"},
    {"GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "GET f"},
    {"GET hTTpS:/x HTTP/1.1\r\nHost: example.com\r\n\r\n", "GET hTTpS:/x"},
    {"GET http://a.example:99999/ HTTP/1.1\r\nHost: a.example\r\n\r\n", "GET http://a.example:99999"},
    {"GET http://a.example:123456/ HTTP/1.1\r\nHost: a.example\r\n\r\n", "GET http://a.example:123456"},
    {"GET http://a..example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", "GET http://a.."},
    {"GET *x HTTP/1.1\r\nHost: a.example\r\n\r\n", "GET *"},
    {"OPTIONS *x HTTP/1.1\r\nHost: a.example\r\n\r\n", "OPTIONS *x"},
    {"CONNECT /x HTTP/1.1\r\nHost: a.example\r\n\r\n", "CONNECT /"},
    {"CONNECT a.example HTTP/1.1\r\nHost: a.example\r\n\r\n", "CONNECT a.example "},
    {"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", "GET http://a.example/ HTTP/1.1\r\nHost: b.example\r"},
    {"GET / HTTP/1.1\r\nHost: a.example:65536\r\n\r\n", "GET / HTTP/1.1\r\nHost: a.example:65536"},
  };
  for (size_t i = 0; i < sizeof early / sizeof early[0]; i++)
    bad_at(sniff_http, early[i].head, strlen(early[i].head), strlen(early[i].upto), __LINE__);
  /* asterisk-form for OPTIONS only; authority-form for CONNECT only (with a port) */
  HTTP_NAME("OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com");
  HTTP_NONE("GET * HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("M-SEARCH * HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NAME("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "example.com");
  HTTP_NONE("CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("CONNECT other.example:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
  HTTP_NONE("CONNECT / HTTP/1.1\r\nHost: example.com\r\n\r\n");
  HTTP_NONE("GET example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n");
}

static void test_http_limit(void) {
  /* A head of exactly SNIFF_LIMIT bytes passes, one more does not; a head not ended within the
   * limit is NONE when the limit is reached, MORE before. */
  static char head[SNIFF_LIMIT + 100];
  const char *pre = "GET / HTTP/1.1\r\nHost: limit.example\r\nX-Pad: ", *post = "\r\n\r\n";
  size_t fill = SNIFF_LIMIT - strlen(pre) - strlen(post);
  snprintf(head, sizeof head, "%s%*s%s", pre, (int)fill, "x", post);
  CHECK_INT(strlen(head), SNIFF_LIMIT);
  EXPECT_NAME(sniff_http, head, SNIFF_LIMIT, "limit.example");
  snprintf(head, sizeof head, "%s%*s%s", pre, (int)fill + 1, "x", post);
  char name[SNIFF_NAME_MAX + 1];
  CHECK_INT(run(sniff_http, head, SNIFF_LIMIT - 1, name), SNIFF_MORE);
  CHECK_INT(run(sniff_http, head, SNIFF_LIMIT, name), SNIFF_NONE);
  CHECK_INT(run(sniff_http, head, SNIFF_LIMIT + 1, name), SNIFF_NONE);
}

/* Random heads assembled from valid and invalid pieces: whatever the answer, every prefix is MORE
 * or the same answer, and NONE or NAME never turns into anything else with more bytes. */
static void test_http_random(void) {
  static const char *const parts[] = {"GET ", "/ ", "http://a.example/ ", "HTTP/1.1", "\r\n", "Host: ", "a.example",
                                      "A.EXAMPLE:80", "\r\n\r\n", "X: y", " ", "\n", ":", "\t", "[::1]", "b.example",
                                      "Host:", "\r", "\x00", "1.2.3.4"};
  char name[SNIFF_NAME_MAX + 1], whole_name[SNIFF_NAME_MAX + 1];
  unsigned char b[512];
  size_t wrong = 0, named = 0;
  for (int iter = 0; iter < 20000; iter++) {
    size_t n = 0;
    /* mostly the shape of a request, with random pieces */
    const char *seq[] = {"GET ", "/ ", "HTTP/1.1", "\r\n", "Host: ", "a.example", "\r\n\r\n"};
    for (size_t i = 0; i < 7; i++) {
      const char *p = mbt_rand() % 4 ? seq[i] : parts[mbt_rand() % (sizeof parts / sizeof parts[0])];
      size_t k = p[0] ? strlen(p) : 1;
      memcpy(b + n, p, k);
      n += k;
    }
    sniff_result w = run(sniff_http, b, n, whole_name);
    if (w == SNIFF_NAME) named++;
    for (size_t k = 0; k < n; k++) {
      sniff_result r = run(sniff_http, b, k, name);
      if (r != SNIFF_MORE && (r != w || (r == SNIFF_NAME && strcmp(name, whole_name) != 0))) wrong++;
    }
  }
  CHECK_INT(wrong, 0);
  CHECK(named > 1000);   /* the test reached names, not only refusals */
}

int main(void) {
  SSL_library_init();
  MBT_RUN(test_openssl);
  MBT_RUN(test_gnutls);
  MBT_RUN(test_records);
  MBT_RUN(test_limit);
  MBT_RUN(test_client_hello);
  MBT_RUN(test_server_name);
  MBT_RUN(test_hostname);
  MBT_RUN(test_http_basic);
  MBT_RUN(test_http_host);
  MBT_RUN(test_http_syntax);
  MBT_RUN(test_http_target);
  MBT_RUN(test_http_limit);
  MBT_RUN(test_http_random);
  return mbt_report();
}
