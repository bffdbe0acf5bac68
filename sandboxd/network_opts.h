/* network_opts.h — E2B's network options as the control plane receives them: `network` and
 * `allow_internet_access` when a sandbox is created, the body of PUT /sandboxes/{id}/network
 * (which replaces every egress rule: what it leaves out is cleared). Parsed into the sandbox's
 * egress rules (egress_rules.h) and the `network` object getInfo and list report (allowOut and
 * denyOut as in force: all traffic denied when allow_internet_access is false, as on E2B;
 * allowPublicTraffic and maskRequestHost as given at create).
 *
 * Taken: allowOut, denyOut, rules (per-host request headers: transforms.h, egress_http.h),
 * allowPublicTraffic (false: the sandbox's ports need its traffic access token, router.c),
 * maskRequestHost (the port proxy's Host). Refused by name, 400: `egressProxy`, `httpsPorts`,
 * any other field. Egress rules
 * where sandboxd cannot enforce them (without root: pasta) ⇒ 501 naming the field. */
#ifndef SANDBOXD_NETWORK_OPTS_H
#define SANDBOXD_NETWORK_OPTS_H
#include <jansson.h>
#include <stdbool.h>

#include "egress_rules.h"
#include "http.h"

typedef struct {
  bool internet;              /* allow_internet_access */
  egress_rules rules;
  json_t *reported;           /* `network` for getInfo, or NULL when nothing was asked for */
  bool private_ports;         /* allowPublicTraffic: false */
} net_opts;

/* Create: network (NULL or null: none) and allow_internet_access. 0, or -1 after replying. */
int  net_opts_create(sd_request *r, json_t *network, bool internet, net_opts *out);
/* PUT /sandboxes/{id}/network: body, over the sandbox's `network` now (its ingress fields stay). */
int  net_opts_update(sd_request *r, json_t *body, json_t *current, net_opts *out);
void net_opts_free(net_opts *o);
/* The rules a reported `network` (as net_opts made it; NULL: none) stands for, with that
 * allow_internet_access: what a fork of the sandbox gets. */
void net_opts_rules(json_t *reported, bool internet, egress_rules *out);
/* allowPublicTraffic: false in a reported `network` (NULL: none): a fork's ports are private too. */
bool net_opts_private_ports(json_t *network);
/* The Host the port proxy sends for port (maskRequestHost with ${PORT} replaced) into out;
 * false when network has no mask. */
bool net_opts_mask_host(json_t *network, unsigned port, char *out, size_t cap);
#endif
