/* dnsmsg — the DNS forwarder's view of a query (RFC 1035 §4.1): the one question it asks, and a
 * reply that refuses it. For UDP messages (≤ 512 bytes, or up to 4096 with EDNS) and TCP messages
 * (the caller strips the 2-byte length prefix); any length up to 65535 is taken.
 *
 * A query dnsmsg_question accepts: header QR=0 and OPCODE 0 (the other flags are not looked at),
 * QDCOUNT 1, ANCOUNT 0, NSCOUNT 0; the question's name without compression pointers, labels 1..63
 * bytes of [A-Za-z0-9_-] (so a `.` inside a label — an escaped dot — is refused: a name never
 * differs between what we match and what the upstream resolves), at most 255 bytes on the wire;
 * then ARCOUNT additional records (EDNS OPT, cookies, TSIG: not interpreted, but each must be a
 * whole record — owner name, which may end in a pointer, type, class, TTL, RDLENGTH, RDATA), and
 * the message must end exactly there.
 *
 * Pure and bounded: no allocation, no I/O. A leaf: libc only. */
#ifndef SBX_DNSMSG_H
#define SBX_DNSMSG_H
#include <stddef.h>

#define DNSMSG_NAME_MAX 253

/* A standard query (QR=0, OPCODE 0) with exactly one question: its name (lower-cased, no
 * trailing dot, "" for the root), qtype, qclass. 0, or -1 when msg is anything else. Compression
 * pointers in the question name are refused (-1). */
int dnsmsg_question(const unsigned char *msg, size_t len, char name[DNSMSG_NAME_MAX + 1], unsigned *qtype,
                    unsigned *qclass);

/* A reply to that query with RCODE rcode (0..15, e.g. 5 REFUSED): the query's id and question
 * (its bytes as sent: the name's case is kept, as resolvers randomising it expect), QR=1, OPCODE 0,
 * AA=0, TC=0, RD and CD copied from the query, RA=1, AD=0, no answer/authority/additional records
 * (so no OPT, even for an EDNS query). Returns its length (≤ cap), or 0 if it does not fit, rcode
 * is over 15, or msg is not a query dnsmsg_question accepts. out may be msg itself (or overlap it):
 * the reply is then written in place. */
size_t dnsmsg_refuse(const unsigned char *msg, size_t len, unsigned rcode, unsigned char *out, size_t cap);

#endif
