/* control.h — E2B's control-plane REST API (reference §2, and the v2 routes of the current SDK)
 * over the registry. Routing and the API key are the router's. */
#ifndef SANDBOXD_CONTROL_H
#define SANDBOXD_CONTROL_H
#include <stdbool.h>
#include "http.h"
#include "registry.h"
#include "router.h"

#define SANDBOXD_ENVD_VERSION "0.6.3"
#define SANDBOXD_TEMPLATE "base"

void control_init(const char *state_dir, const char *domain);   /* for diskSizeMB; the sandboxes' domain (NULL: none) */
/* E2B's Sandbox object (create, connect, fork): id, template, token. */
json_t *control_sandbox_json(const reg_info *in);
/* "base" (or "base:default"): the template every sandbox without a snapshot starts from. */
bool control_is_base(const char *ref);
/* Unix ms → an RFC 3339 JSON string (UTC, milliseconds). */
json_t *control_rfc3339(int64_t ms);
/* cpuCount, memoryMB, diskSizeMB into j: what a sandbox gets on this host. */
void control_host_sizes(json_t *j);
/* When sandboxd started (Unix ms). */
int64_t control_started_ms(void);
/* The control-plane routes, and GET /health. */
void control_handle(sd_request *r, const rt_decision *d);
#endif
