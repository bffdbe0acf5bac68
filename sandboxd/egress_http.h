/* egress_http.h — the requests of intercepted connections (egress.h): HTTP (80) and HTTPS (443)
 * to a host whose rules set headers (transforms.h). The egress proxy hands such a connection, unread,
 * to the HTTP layer's inbound daemons (http.h: TLS with a certificate for the name it asked for,
 * from its sandbox's CA); each request is then:
 *  - bound to one host: on TLS the name of the handshake (a Host naming another ⇒ 421); on plain
 *    HTTP its own Host (none ⇒ 400); CONNECT ⇒ 405, a proxy's absolute target ⇒ 400;
 *  - decided again with the sandbox's rules as they are now (denied ⇒ 403), the name resolved by
 *    sandboxd and each address checked, never the address the sandbox dialled;
 *  - sent there by sandboxd (forward.h; HTTPS verified against the system's CAs or --egress-ca),
 *    with the rules' headers replacing the sandbox's own of those names and their secrets filled
 *    in (secrets.h) as it leaves; a secret the store does not hold for this sandbox ⇒ 502 naming
 *    it, and the request is not sent. Values are wiped once the request is gone;
 *  - answered with the upstream's answer as it streams.
 * A sandbox detached (killed, paused) ends its requests within a second. */
#ifndef SANDBOXD_EGRESS_HTTP_H
#define SANDBOXD_EGRESS_HTTP_H
#include <stddef.h>
#include <sys/socket.h>

#include "egress.h"

/* Starts the inbound daemons. ca_file: --egress-ca (NULL: the system's store). 0, or -1 with err. */
int  egress_http_start(const char *ca_file, char *err, size_t errlen);
/* egress_config.intercept. */
void egress_http_take(egress_intercepted *x, int fd, const struct sockaddr *peer, socklen_t peerlen);
void egress_http_stop(void);
#endif
