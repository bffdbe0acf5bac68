/* proxy.h — the port proxy: a request the router gave RT_PORT (Host <port>-<id>.<domain>,
 * sandbox.<domain> with E2b-Sandbox-Id/-Port, or /_sandbox/<id>/<port>/<path>) goes to that port
 * on the sandbox's own loopback, over a socket made in the sandbox's network namespace
 * (sbx_socket): the host's loopback is never involved. The request, its body, its answer and
 * WebSocket tunnels travel as forward.h says; the sandbox's maskRequestHost is sent as Host.
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


int  proxy_init(char *err, size_t errlen);   /* once, before any thread: libcurl's global state */
void proxy_handle(sd_request *r, const rt_decision *d);
#endif
