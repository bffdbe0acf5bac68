/* dnsmsg — see dnsmsg.h. */
#include "dnsmsg.h"
#include <stdbool.h>
#include <string.h>

#define HEADER 12
#define WIRE_NAME_MAX 255   /* RFC 1035 §3.1: a name's octets, length bytes and the root's included */

static unsigned u16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }

static bool label_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* The question name at msg[off..len): the offset just past it, or 0 when it is not one we take. */
static size_t qname(const unsigned char *msg, size_t len, size_t off, char name[DNSMSG_NAME_MAX + 1]) {
  size_t start = off, out = 0;
  for (;;) {
    if (off >= len) return 0;
    size_t l = msg[off];
    if (l == 0) break;
    if (l > 63) return 0;   /* 0xC0: a pointer, refused here; 0x40, 0x80: reserved (RFC 6891 §5) */
    if (l > len - off - 1) return 0;
    /* Wire length so far, this label and the root's zero byte: at most 255 (so the text, ≤ 253,
     * always fits name). */
    if (off - start + 1 + l + 1 > WIRE_NAME_MAX) return 0;
    if (out > 0) name[out++] = '.';
    for (size_t i = 0; i < l; i++) {
      unsigned char c = msg[off + 1 + i];
      if (!label_byte(c)) return 0;   /* also a `.` inside a label */
      name[out++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    off += 1 + l;
  }
  name[out] = '\0';
  return off + 1;
}

/* A resource record's owner name, not interpreted: labels up to a root or a pointer (the end). */
static size_t skip_name(const unsigned char *msg, size_t len, size_t off) {
  size_t start = off;
  for (;;) {
    if (off >= len) return 0;
    size_t l = msg[off];
    if (l == 0) return off + 1;
    if ((l & 0xC0) == 0xC0) return len - off >= 2 ? off + 2 : 0;   /* a pointer: always the name's last part */
    if (l > 63) return 0;
    if (l > len - off - 1 || off - start + 1 + l + 1 > WIRE_NAME_MAX) return 0;
    off += 1 + l;
  }
}

/* The question's end (its name, type and class), or 0 when msg is not a query we take. */
static size_t question(const unsigned char *msg, size_t len, char name[DNSMSG_NAME_MAX + 1], unsigned *qtype,
                       unsigned *qclass) {
  if (len < HEADER || len > 65535) return 0;
  if (msg[2] & 0x80) return 0;                 /* QR: a response */
  if ((msg[2] >> 3 & 0x0F) != 0) return 0;     /* OPCODE: not a standard query */
  if (u16(msg + 4) != 1 || u16(msg + 6) != 0 || u16(msg + 8) != 0) return 0;   /* QD 1, AN 0, NS 0 */
  size_t off = qname(msg, len, HEADER, name);
  if (off == 0 || len - off < 4) return 0;
  *qtype = u16(msg + off);
  *qclass = u16(msg + off + 2);
  size_t end = off + 4;
  /* The additional records, each whole, then the end of the message. */
  off = end;
  for (unsigned ar = u16(msg + 10); ar > 0; ar--) {
    off = skip_name(msg, len, off);
    if (off == 0 || len - off < 10) return 0;   /* type, class, TTL, RDLENGTH */
    size_t rdlen = u16(msg + off + 8);
    off += 10;
    if (rdlen > len - off) return 0;
    off += rdlen;
  }
  return off == len ? end : 0;
}

int dnsmsg_question(const unsigned char *msg, size_t len, char name[DNSMSG_NAME_MAX + 1], unsigned *qtype,
                    unsigned *qclass) {
  return question(msg, len, name, qtype, qclass) ? 0 : -1;
}

size_t dnsmsg_refuse(const unsigned char *msg, size_t len, unsigned rcode, unsigned char *out, size_t cap) {
  char name[DNSMSG_NAME_MAX + 1];
  unsigned qtype, qclass;
  if (rcode > 15) return 0;   /* extended RCODEs need an OPT record, which this reply has not */
  size_t end = question(msg, len, name, &qtype, &qclass);
  if (end == 0 || end > cap) return 0;
  /* Read what the header keeps before writing: out may be msg. */
  unsigned char id0 = msg[0], id1 = msg[1];
  unsigned char rd = msg[2] & 0x01, cd = msg[3] & 0x10;
  memmove(out + HEADER, msg + HEADER, end - HEADER);
  const unsigned char header[HEADER] = {
    id0, id1,
    (unsigned char)(0x80 | rd),                    /* QR=1, OPCODE 0, AA=0, TC=0, RD as asked */
    (unsigned char)(0x80 | cd | rcode),            /* RA=1, Z=0, AD=0, CD as asked, RCODE */
    0, 1, 0, 0, 0, 0, 0, 0,                        /* QD 1, AN 0, NS 0, AR 0 */
  };
  memcpy(out, header, HEADER);
  return end;
}
