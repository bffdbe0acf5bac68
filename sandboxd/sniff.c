/* sniff — see sniff.h. */
#include "sniff.h"
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- host names ---- */

static bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static bool name_byte(unsigned char c) { return is_alpha(c) || is_digit(c) || c == '-' || c == '_' || c == '.'; }
static unsigned char lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c; }

/* ASCII only: locale-dependent case folding would make a name mean different things. */
static bool ascii_ieq(const unsigned char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (lower(a[i]) != (unsigned char)b[i]) return false;
  return true;
}

int sniff_hostname(const char *s, size_t len, char name[SNIFF_NAME_MAX + 1]) {
  const unsigned char *p = (const unsigned char *)s;
  if (len > 0 && p[len - 1] == '.') len--;   /* the absolute form of the same name */
  if (len == 0 || len > SNIFF_NAME_MAX) return -1;
  size_t label = 0, last = 0;   /* the current label's length; where the last label starts */
  for (size_t i = 0; i < len; i++) {
    if (!name_byte(p[i])) return -1;
    if (p[i] == '.') {
      if (label == 0) return -1;
      label = 0;
      last = i + 1;
    } else if (++label > 63) {
      return -1;
    }
    name[i] = (char)lower(p[i]);
  }
  if (label == 0) return -1;   /* "a.." had its one trailing dot dropped: an empty label remains */
  name[len] = '\0';
  /* An address, not a name, for inet_aton and URL parsers alike (WHATWG URL "ends in a number"):
   * the last label all digits ("10", "127.1", octal "0177.1"), or 0x + hex digits ("0x7f.1"). */
  const unsigned char *l = p + last;
  size_t ln = len - last, i = 0;
  if (ln >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X')) {
    for (i = 2; i < ln && is_hex(l[i]); i++) {}
  } else {
    for (i = 0; i < ln && is_digit(l[i]); i++) {}
  }
  return i == ln ? -1 : 0;
}

/* Could s[0..n) still begin a valid host name (the rules of sniff_hostname that a prefix can
 * break: the byte set, empty or long labels, the length)? For an early SNIFF_NONE. */
static bool name_prefix(const unsigned char *s, size_t n) {
  if (n > SNIFF_NAME_MAX + 1) return false;
  if (n == SNIFF_NAME_MAX + 1 && s[SNIFF_NAME_MAX] != '.') return false;   /* only a trailing dot fits */
  size_t label = 0;
  for (size_t i = 0; i < n; i++) {
    if (!name_byte(s[i])) return false;
    if (s[i] != '.') {
      if (++label > 63) return false;
    } else if (label == 0) {
      return false;
    } else {
      label = 0;
    }
  }
  return true;
}

/* ---- TLS ---- */

enum { OK, SHORT, BAD };   /* a field: all there; not all received yet; malformed */
#define TRY(x)                    \
  do {                            \
    int try_ = (x);               \
    if (try_ != OK) return try_;  \
  } while (0)

/* What the ClientHello parser reads: the handshake bytes received so far. */
struct rd {
  const unsigned char *p;
  size_t avail;
};

/* k bytes at off, inside a vector that ends at lim (off ≤ lim). */
static int get(const struct rd *r, size_t off, size_t k, size_t lim) {
  if (k > lim - off) return BAD;
  if (off > r->avail || k > r->avail - off) return SHORT;
  return OK;
}

/* A w-byte big-endian length at off of a vector that must end by lim. BAD as soon as the bytes
 * received (the missing ones taken as 0, its least value) say it is too long. */
static int length(const struct rd *r, size_t off, size_t w, size_t lim, size_t *n) {
  if (w > lim - off) return BAD;
  size_t have = r->avail > off ? r->avail - off : 0, v = 0;
  for (size_t i = 0; i < w; i++) v = v << 8 | (i < have ? r->p[off + i] : 0);
  if (v > lim - off - w) return BAD;
  if (have < w) return SHORT;
  *n = v;
  return OK;
}

/* The server_name extension's data at [off, end): a list of exactly one host_name. */
static int server_name(const struct rd *r, size_t off, size_t end, char name[SNIFF_NAME_MAX + 1]) {
  size_t n;
  TRY(length(r, off, 2, end, &n));
  off += 2;
  if (n != end - off) return BAD;   /* the list fills the extension */
  TRY(get(r, off, 1, end));
  if (r->p[off] != 0) return BAD;   /* host_name: the only NameType */
  off += 1;
  TRY(length(r, off, 2, end, &n));
  off += 2;
  if (n != end - off) return BAD;   /* one entry, the whole list */
  if (n > SNIFF_NAME_MAX + 1) return BAD;   /* too long even with a trailing dot (empty: below) */
  int t = get(r, off, n, end);
  if (t == SHORT) return name_prefix(r->p + off, r->avail > off ? r->avail - off : 0) ? SHORT : BAD;
  TRY(t);
  return sniff_hostname((const char *)r->p + off, n, name) == 0 ? OK : BAD;
}

/* The handshake message in hs[0..avail): OK when it is a whole ClientHello with one valid
 * server name (in name). Every field is checked as soon as its bytes are in. */
static int client_hello(const unsigned char *hs, size_t avail, size_t cap, char name[SNIFF_NAME_MAX + 1]) {
  const struct rd r = {hs, avail};
  size_t n, end, off;
  TRY(get(&r, 0, 1, cap));
  if (hs[0] != 1) return BAD;   /* client_hello */
  TRY(length(&r, 1, 3, cap, &n));
  end = 4 + n;
  off = 4;
  /* legacy_version: TLS 1.0..1.2 (1.3 sends 1.2 here) */
  TRY(get(&r, off, 1, end));
  if (hs[off] != 3) return BAD;
  TRY(get(&r, off + 1, 1, end));
  if (hs[off + 1] < 1 || hs[off + 1] > 3) return BAD;
  off += 2;
  TRY(get(&r, off, 32, end));   /* random */
  off += 32;
  TRY(length(&r, off, 1, end, &n));   /* legacy_session_id<0..32> */
  if (n > 32) return BAD;
  off += 1;
  TRY(get(&r, off, n, end));
  off += n;
  TRY(length(&r, off, 2, end, &n));   /* cipher_suites<2..2^16-2>, two bytes each */
  if (n == 0 || n % 2 != 0) return BAD;
  off += 2;
  TRY(get(&r, off, n, end));
  off += n;
  TRY(length(&r, off, 1, end, &n));   /* compression_methods<1..2^8-1>, null among them */
  if (n == 0) return BAD;
  off += 1;
  TRY(get(&r, off, n, end));
  if (!memchr(hs + off, 0, n)) return BAD;
  off += n;
  TRY(length(&r, off, 2, end, &n));   /* no extensions at all: BAD here (no server_name) */
  off += 2;
  if (n != end - off) return BAD;   /* the extensions fill the rest of the message */
  uint64_t seen[65536 / 64];        /* extension types met, one bit each */
  memset(seen, 0, sizeof seen);
  bool named = false;
  while (off < end) {
    TRY(get(&r, off, 2, end));
    unsigned type = (unsigned)hs[off] << 8 | hs[off + 1];
    if (seen[type / 64] >> (type % 64) & 1) return BAD;   /* RFC 8446 §4.2: each type at most once */
    seen[type / 64] |= (uint64_t)1 << (type % 64);
    TRY(length(&r, off + 2, 2, end, &n));
    off += 4;
    if (type == 0) {
      TRY(server_name(&r, off, off + n, name));
      named = true;
    } else {
      TRY(get(&r, off, n, end));
    }
    off += n;
  }
  return named ? OK : BAD;
}

sniff_result sniff_tls(const unsigned char *buf, size_t len, char name[SNIFF_NAME_MAX + 1]) {
  /* The handshake message, reassembled from its records: each record costs 5 header bytes. */
  unsigned char hs[SNIFF_LIMIT - 5];
  size_t n = len < SNIFF_LIMIT ? len : SNIFF_LIMIT, pos = 0, hn = 0;
  while (pos < n) {
    const unsigned char *h = buf + pos;
    size_t have = n - pos;
    /* record header: handshake (22), version 3.1..3.4, length 1..2^14 — each byte as it comes */
    if (h[0] != 22) return SNIFF_NONE;
    if (have >= 2 && h[1] != 3) return SNIFF_NONE;
    if (have >= 3 && (h[2] < 1 || h[2] > 4)) return SNIFF_NONE;
    if (have >= 4 && h[3] > 0x40) return SNIFF_NONE;
    if (have < 5) break;
    size_t rlen = (size_t)h[3] << 8 | h[4];
    if (rlen == 0 || rlen > 16384) return SNIFF_NONE;   /* RFC 8446 §5.1: no empty handshake fragments */
    if (rlen > SNIFF_LIMIT - pos - 5) return SNIFF_NONE; /* it would end beyond what we look at */
    size_t k = rlen < have - 5 ? rlen : have - 5;
    if (k > sizeof hs - hn) return SNIFF_NONE;   /* cannot happen: pos ≥ 5 per record */
    memcpy(hs + hn, h + 5, k);
    size_t rec_end = hn + rlen;   /* where this record's data ends in the message */
    hn += k;
    if (hn >= 4) {
      size_t mend = 4 + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
      size_t next = pos + 5 + rlen;   /* the next record's offset, ≤ SNIFF_LIMIT */
      /* The first flight is the ClientHello alone: its last record ends with it. */
      if (rec_end > mend) return SNIFF_NONE;
      /* The rest needs another record: its header and the rest must fit within the limit. */
      if (rec_end < mend && (SNIFF_LIMIT - next < 5 || mend - rec_end > SNIFF_LIMIT - next - 5)) return SNIFF_NONE;
    }
    if (k < rlen) break;   /* the rest of the record has not arrived */
    pos += 5 + rlen;
    if (hn >= 4 && hn == 4 + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3])) break;   /* whole */
  }
  switch (client_hello(hs, hn, sizeof hs, name)) {
  case OK: return SNIFF_NAME;
  case SHORT: return len >= SNIFF_LIMIT ? SNIFF_NONE : SNIFF_MORE;   /* no more bytes will be looked at */
  default: return SNIFF_NONE;
  }
}

/* ---- HTTP ---- */

static bool tchar(unsigned char c) {
  return is_alpha(c) || is_digit(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* `host[:port]` (a Host value or a target's authority) → the host as a name. Port: 1..5 digits,
 * at most 65535. An IPv6 literal `[…]` is no name. */
static int host_port(const unsigned char *s, size_t n, bool port_required, char name[SNIFF_NAME_MAX + 1]) {
  size_t h = 0;
  while (h < n && s[h] != ':') h++;
  if (h < n) {
    size_t d = n - h - 1;
    if (d == 0 || d > 5) return -1;
    unsigned long v = 0;
    for (size_t i = h + 1; i < n; i++) {
      if (!is_digit(s[i])) return -1;
      v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v > 65535) return -1;
  } else if (port_required) {
    return -1;
  }
  return sniff_hostname((const char *)s, h, name);
}

/* Could s[0..n) begin a `host[:port]` that host_port takes? *used: how much of s it spans (what
 * follows is the caller's: whitespace after a Host value, a path after an authority). */
static bool authority_prefix(const unsigned char *s, size_t n, size_t *used) {
  size_t i = 0;
  while (i < n && name_byte(s[i])) i++;
  if (!name_prefix(s, i)) return false;
  if (i < n && s[i] == ':') {
    unsigned long v = 0;
    size_t d = ++i;
    while (i < n && is_digit(s[i])) {
      v = v * 10 + (unsigned long)(s[i] - '0');
      if (++i - d > 5 || v > 65535) return false;
    }
  }
  *used = i;
  return true;
}

/* Could the Host value received so far, v[0..n) (from just after the colon), still be valid? */
static bool host_value_prefix(const unsigned char *v, size_t n) {
  size_t i = 0, used;
  while (i < n && (v[i] == ' ' || v[i] == '\t')) i++;   /* OWS */
  if (!authority_prefix(v + i, n - i, &used)) return false;
  i += used;
  while (i < n && (v[i] == ' ' || v[i] == '\t')) i++;   /* OWS */
  return i == n;
}

/* Could t[0..n), a request target of method m[0..mn) still arriving, become one target() takes? */
static bool target_prefix(const unsigned char *m, size_t mn, const unsigned char *t, size_t n) {
  size_t used, s;
  if (mn == 7 && memcmp(m, "CONNECT", 7) == 0) return authority_prefix(t, n, &used) && used == n;
  if (n == 0 || t[0] == '/') return true;
  if (t[0] == '*') return n == 1 && mn == 7 && memcmp(m, "OPTIONS", 7) == 0;
  if (n >= 7 && ascii_ieq(t, "http://", 7)) s = 7;
  else if (n >= 8 && ascii_ieq(t, "https://", 8)) s = 8;
  else return ascii_ieq(t, "http://", n < 7 ? n : 7) || ascii_ieq(t, "https://", n < 8 ? n : 8);
  size_t a = s;
  while (a < n && t[a] != '/' && t[a] != '?' && t[a] != '#') a++;
  return authority_prefix(t + s, a - s, &used) && used == a - s;
}

/* The Host value v[0..n) → the name; optional whitespace around it. */
static int host_value(const unsigned char *v, size_t n, char name[SNIFF_NAME_MAX + 1]) {
  while (n > 0 && (v[0] == ' ' || v[0] == '\t')) v++, n--;
  while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  return host_port(v, n, false, name);
}

/* The request target t[0..tn) of method m[0..mn) in one of its four forms (RFC 9112 §3.2). The
 * absolute and authority forms name a host (*named), which must be the Host header's. */
static int target(const unsigned char *m, size_t mn, const unsigned char *t, size_t tn, char host[SNIFF_NAME_MAX + 1],
                  bool *named) {
  *named = false;
  if (mn == 7 && memcmp(m, "CONNECT", 7) == 0) {   /* methods are case-sensitive */
    *named = true;
    return host_port(t, tn, true, host);   /* authority-form: host:port */
  }
  if (t[0] == '/') return 0;   /* origin-form */
  if (tn == 1 && t[0] == '*') return mn == 7 && memcmp(m, "OPTIONS", 7) == 0 ? 0 : -1;
  size_t s;   /* absolute-form: http or https (either case), "//" and an authority */
  if (tn >= 7 && ascii_ieq(t, "http://", 7)) s = 7;
  else if (tn >= 8 && ascii_ieq(t, "https://", 8)) s = 8;
  else return -1;
  size_t a = s;
  while (a < tn && t[a] != '/' && t[a] != '?' && t[a] != '#') a++;
  /* userinfo (`user@host`, deprecated and a way to mislead: RFC 9110 §4.2.4) fails the name's
   * byte set, so is refused there. */
  *named = true;
  return host_port(t + s, a - s, false, host);
}

enum { H_METHOD, H_TARGET, H_VERSION, H_CR, H_LF, H_LINE, H_NAME, H_VALUE, H_END };

sniff_result sniff_http(const unsigned char *buf, size_t len, char name[SNIFF_NAME_MAX + 1]) {
  static const char version[] = "HTTP/1.";   /* then 0 or 1 */
  size_t n = len < SNIFF_LIMIT ? len : SNIFF_LIMIT;
  size_t start = 0, method_len = 0, hosts = 0;   /* start: where the current token, target or value begins */
  int st = H_METHOD;
  bool in_host = false, target_named = false;
  char target_host[SNIFF_NAME_MAX + 1];
  for (size_t i = 0; i < n; i++) {
    unsigned char c = buf[i];
    switch (st) {
    case H_METHOD:
      if (c == ' ' && i > 0) {
        method_len = i;
        start = i + 1;
        st = H_TARGET;
      } else if (!tchar(c)) {
        return SNIFF_NONE;
      }
      break;
    case H_TARGET:
      if (c == ' ' && i > start) {
        if (target(buf, method_len, buf + start, i - start, target_host, &target_named) != 0) return SNIFF_NONE;
        start = i + 1;
        st = H_VERSION;
      } else if (c < 0x21 || c > 0x7e) {   /* visible ASCII only: no controls, no second SP */
        return SNIFF_NONE;
      }
      break;
    case H_VERSION:
      if (i - start < 7 ? c != (unsigned char)version[i - start] : (c != '0' && c != '1')) return SNIFF_NONE;
      if (i - start == 7) st = H_CR;
      break;
    case H_CR:
      if (c != '\r') return SNIFF_NONE;
      st = H_LF;
      break;
    case H_LF:
      if (c != '\n') return SNIFF_NONE;   /* a bare CR */
      st = H_LINE;
      break;
    case H_LINE:
      if (c == '\r') {
        st = H_END;
      } else if (tchar(c)) {
        start = i;
        st = H_NAME;
      } else {
        return SNIFF_NONE;   /* obs-fold (SP, HTAB), an empty name, a bare LF, ... */
      }
      break;
    case H_NAME:
      if (c == ':') {
        in_host = i - start == 4 && ascii_ieq(buf + start, "host", 4);
        if (in_host && ++hosts > 1) return SNIFF_NONE;   /* which one would the server take? */
        start = i + 1;
        st = H_VALUE;
      } else if (!tchar(c)) {
        return SNIFF_NONE;   /* including whitespace before the colon (RFC 9112 §5.1) */
      }
      break;
    case H_VALUE:
      if (c == '\r') {
        if (in_host) {
          if (host_value(buf + start, i - start, name) != 0) return SNIFF_NONE;
          /* The target named a host too (always before Host): two names, ambiguous unless equal. */
          if (target_named && strcmp(target_host, name) != 0) return SNIFF_NONE;
        }
        in_host = false;
        st = H_LF;
      } else if (c != '\t' && (c < 0x20 || c == 0x7f)) {
        return SNIFF_NONE;   /* controls: NUL, a bare LF, ... */
      }
      break;
    case H_END:
      if (c != '\n') return SNIFF_NONE;
      /* The head is whole. */
      return hosts == 1 ? SNIFF_NAME : SNIFF_NONE;
    }
  }
  if (len >= SNIFF_LIMIT) return SNIFF_NONE;   /* no end within the limit */
  /* What has arrived of a target or a Host value: NONE as soon as no ending could save it. */
  if (st == H_TARGET && !target_prefix(buf, method_len, buf + start, n - start)) return SNIFF_NONE;
  if (st == H_VALUE && in_host && !host_value_prefix(buf + start, n - start)) return SNIFF_NONE;
  return SNIFF_MORE;
}
