/* sniff — what a TCP connection says it is for, from its first bytes: the host name of a TLS
 * ClientHello's server_name extension, or of an HTTP/1.x request head's Host header. For the
 * egress proxy, which decides hostname rules before it connects anywhere.
 *
 * Each sniffer takes the bytes received so far from the start of the stream (call it again with
 * more) and answers:
 *   SNIFF_MORE  the bytes are a valid prefix of such a message, and more bytes could complete it
 *               within SNIFF_LIMIT;
 *   SNIFF_NAME  a complete message naming exactly one valid host name, in name (lower-cased, no
 *               trailing dot, NUL-terminated);
 *   SNIFF_NONE  anything else: malformed, ambiguous, no name, an address instead of a name, or not
 *               complete within the first SNIFF_LIMIT bytes. Final: more bytes never change it.
 * The answer depends only on the first SNIFF_LIMIT bytes (and on whether len reached it); for a
 * prefix it is MORE or the answer for the whole. Bytes after the message are not looked at (so a
 * second request on a kept-alive connection, or a second ClientHello after a HelloRetryRequest,
 * is the caller's concern). name is meaningful only with SNIFF_NAME (otherwise it may hold
 * anything, NUL-terminated or not).
 *
 * Host names (both sniffers and sniff_hostname): bytes [A-Za-z0-9._-] only; one trailing dot
 * dropped; labels 1..63 bytes; at most 253 bytes; not an IPv4 literal in any form inet_aton or a
 * URL parser accepts — refused when the last label is all digits, or 0x/0X and hex digits (the
 * WHATWG URL standard's "ends in a number"). IPv6 literals cannot pass the byte set.
 *
 * Pure and bounded: no allocation, no I/O, no state. sniff_tls uses about 25 KiB of stack. A
 * leaf: libc only. */
#ifndef SBX_SNIFF_H
#define SBX_SNIFF_H
#include <stddef.h>

typedef enum { SNIFF_MORE, SNIFF_NAME, SNIFF_NONE } sniff_result;

#define SNIFF_NAME_MAX 253
#define SNIFF_LIMIT 16384 /* bytes looked at, at most: beyond that SNIFF_NONE */

/* A TLS ClientHello (RFC 8446 §4.1.2; TLS 1.0..1.3), in handshake records (content type 22,
 * record version 0x0301..0x0304, 1..2^14 bytes each), possibly spread over several records, the
 * last of which ends with it. legacy_version 0x0301..0x0303, session id ≤ 32 bytes, cipher
 * suites an even, non-zero count of bytes, compression methods 1..255 including null (0), an
 * extension block filling the rest exactly, no extension type twice, and a server_name
 * extension (type 0) whose list holds exactly one entry, a host_name (type 0). */
sniff_result sniff_tls(const unsigned char *buf, size_t len, char name[SNIFF_NAME_MAX + 1]);

/* An HTTP/1.0 or 1.1 request head (RFC 9112), up to and including its empty line: request line
 * `method SP request-target SP HTTP/1.x CRLF` (method a token; target visible ASCII: origin-form
 * `/…`, `*` for OPTIONS, absolute-form `http(s)://authority…`, authority-form `host:port` for
 * CONNECT), header fields `name:OWS value OWS CRLF` (name a token; value visible bytes, obs-text,
 * SP and HTAB), every line ending CRLF. Exactly one Host field whose value is `host[:port]`
 * (port 1..5 digits, ≤ 65535); an absolute- or authority-form target must name the same host
 * (userinfo refused). Refused: obs-fold (a line starting with SP or HTAB), a bare CR or LF, NUL
 * and other controls, empty lines before the request line. */
sniff_result sniff_http(const unsigned char *buf, size_t len, char name[SNIFF_NAME_MAX + 1]);

/* s[0..len) checked and normalised as a host name (rules above) into name: 0, or -1 (name is
 * then unspecified). For configured rule names, so that they compare with what the sniffers
 * return. */
int sniff_hostname(const char *s, size_t len, char name[SNIFF_NAME_MAX + 1]);

#endif
