/* fuzz_sbx_dnsmsg.c — libFuzzer target for the DNS forwarder's view of a query
 * (sandboxd/dnsmsg.c). Input: [rcode][cap][message...]; rcode's low 5 bits are the RCODE asked
 * for (16..31: out of range), cap (× 2) the reply buffer's size when under 0xF0, else room enough.
 * Properties checked, independently of the parser:
 *  - an accepted message is a standard query with one question and no answer or authority
 *    records; its name is the question's labels, lower-cased, each 1..63 bytes of [a-z0-9_-]
 *    joined by dots, ≤ 253 bytes; the same bytes give the same answer twice; and, the other way,
 *    such a query without additional records is accepted;
 *  - dnsmsg_refuse answers exactly for accepted messages and RCODEs ≤ 15 that fit: a reply no
 *    longer than the query nor cap, with the query's id and question bytes, QR=1, OPCODE 0,
 *    AA=0, TC=0, RD and CD as asked, RA=1, Z=0, AD=0, the RCODE, counts 1/0/0/0 — and with QR
 *    cleared it parses back with dnsmsg_question to the same name, type and class;
 *  - written in place over the query, the reply is the same bytes. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dnsmsg.h"

static unsigned u16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* The question name at msg+12 written out as dnsmsg.h says, or false if it is not one. */
static bool expected_name(const uint8_t *msg, size_t len, char *out, size_t *end) {
  size_t o = 12, n = 0;
  while (o < len && msg[o] != 0) {
    size_t l = msg[o];
    if (l > 63 || o + 1 + l > len) return false;
    if (n) out[n++] = '.';
    if (n + l > DNSMSG_NAME_MAX) return false;
    for (size_t i = 0; i < l; i++) {
      uint8_t c = msg[o + 1 + i];
      if (c >= 'A' && c <= 'Z') c = (uint8_t)(c + 32);
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
      out[n++] = (char)c;
    }
    o += 1 + l;
  }
  if (o >= len) return false;
  out[n] = 0;
  *end = o + 1 + 4;
  return *end <= len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t out[65536 + 64], inplace[65536 + 64];
  if (size < 2) return 0;
  unsigned rcode = data[0] & 31;
  size_t cap = data[1] < 0xF0 ? (size_t)data[1] * 2 : sizeof out;
  const uint8_t *msg = data + 2;
  size_t len = size - 2;
  if (len > 65536) len = 65536;

  char name[DNSMSG_NAME_MAX + 1], name2[DNSMSG_NAME_MAX + 1], want[DNSMSG_NAME_MAX + 2];
  unsigned qt = 0, qc = 0, qt2 = 0, qc2 = 0;
  int q = dnsmsg_question(msg, len, name, &qt, &qc);
  if (q != 0 && q != -1) __builtin_trap();
  if (dnsmsg_question(msg, len, name2, &qt2, &qc2) != q) __builtin_trap();
  size_t qend = 0;
  /* The converse, for messages without additional records: a plain query of a name we take must
   * be accepted. */
  if (len >= 12 && !(msg[2] & 0xF8) && u16(msg + 4) == 1 && u16(msg + 6) == 0 && u16(msg + 8) == 0 &&
      u16(msg + 10) == 0 && expected_name(msg, len, want, &qend) && qend == len && q != 0)
    __builtin_trap();
  if (q == 0) {
    if (len < 17 || len > 65535) __builtin_trap();
    if ((msg[2] & 0x80) || (msg[2] & 0x78)) __builtin_trap();   /* QR 0, OPCODE 0 */
    if (u16(msg + 4) != 1 || u16(msg + 6) != 0 || u16(msg + 8) != 0) __builtin_trap();
    if (!expected_name(msg, len, want, &qend)) __builtin_trap();
    if (strcmp(want, name) != 0 || strcmp(name, name2) != 0) __builtin_trap();
    if (qt != u16(msg + qend - 4) || qc != u16(msg + qend - 2) || qt2 != qt || qc2 != qc) __builtin_trap();
    if (u16(msg + 10) == 0 && qend != len) __builtin_trap();   /* no additional records: nothing after */
  }

  memset(out, 0xA5, sizeof out);
  size_t r = dnsmsg_refuse(msg, len, rcode, out, cap);
  if (q != 0 || rcode > 15) {
    if (r != 0) __builtin_trap();
    return 0;
  }
  if (qend > cap) {
    if (r != 0) __builtin_trap();
    return 0;
  }
  if (r != qend || r > len || r > cap || r > 12 + 255 + 4) __builtin_trap();
  if (r < sizeof out && out[r] != 0xA5) __builtin_trap();   /* nothing past the reply */
  if (out[0] != msg[0] || out[1] != msg[1]) __builtin_trap();
  unsigned f = u16(out + 2), qf = u16(msg + 2);
  if (f != (0x8000 | (qf & 0x0100) | 0x0080 | (qf & 0x0010) | rcode)) __builtin_trap();
  if (u16(out + 4) != 1 || u16(out + 6) || u16(out + 8) || u16(out + 10)) __builtin_trap();
  if (memcmp(out + 12, msg + 12, r - 12) != 0) __builtin_trap();
  /* Parsed back, with QR cleared: the same question. */
  if (dnsmsg_question(out, r, name2, &qt2, &qc2) != -1) __builtin_trap();   /* a reply is no query */
  out[2] &= 0x7F;
  if (dnsmsg_question(out, r, name2, &qt2, &qc2) != 0) __builtin_trap();
  if (strcmp(name, name2) != 0 || qt != qt2 || qc != qc2) __builtin_trap();
  out[2] |= 0x80;
  /* In place. */
  memcpy(inplace, msg, len);
  if (dnsmsg_refuse(inplace, len, rcode, inplace, len) != r || memcmp(inplace, out, r) != 0) __builtin_trap();
  return 0;
}
