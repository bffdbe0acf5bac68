/* proxy.h — the port proxy: a request the router gave RT_PORT (Host <port>-<id>.<domain>,
 * sandbox.<domain> with E2b-Sandbox-Id/-Port, or /_sandbox/<id>/<port>/<path>) goes to that port
 * on the sandbox's own loopback, over a socket made in the sandbox's network namespace
 * (sbx_socket): the host's loopback is never involved.
 *
 * libcurl speaks to the port: libmicrohttpd parsed the client's request, curl writes it to the
 * port (method, target as sent, headers but the hop-by-hop ones, the body streamed as it arrives)
 * and parses the port's answer; its head goes out as the reply's status and headers, its body is
 * streamed (bounded queues both ways: a slow client slows the port, a slow port the client).
 * A WebSocket (any Upgrade) is sent the same way; when the port answers 101 the client gets the
 * 101 with the port's headers (http.h sd_upgrade) and from then on bytes are copied both ways as
 * they are: the port's by curl (which reads a 101's sequel as a body that lasts until the port
 * closes), the client's by a second thread writing to the socket curl connected. Half-closes
 * pass through; the other direction then has PROXY_HALF_CLOSE_S to end before the tunnel is shut.
 *
 * Answers as E2B's edge: a port nothing listens on ⇒ 502 {"sandboxId","message":"The sandbox is
 * running but port is not open","port","code":502}; a sandbox that is paused or killed while a
 * request runs ⇒ that request ends (502 "The sandbox was not found" when nothing was answered
 * yet; else the connection ends). Credentials: none, or the sandbox's traffic access token
 * (router.h), which is not forwarded to the port. */
#ifndef SANDBOXD_PROXY_H
#define SANDBOXD_PROXY_H
#include "http.h"
#include "router.h"

#define PROXY_HALF_CLOSE_S 30          /* one direction ended: the other has this long */
#define PROXY_CONNECT_TIMEOUT_MS 10000
#define PROXY_BUF (16u << 10)          /* bytes in flight per direction of a tunnel, in sandboxd */

int  proxy_init(char *err, size_t errlen);   /* once, before any thread: libcurl's global state */
void proxy_handle(sd_request *r, const rt_decision *d);
#endif
