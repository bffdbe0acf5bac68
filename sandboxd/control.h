/* control.h — E2B's control-plane REST API (reference §2, and the v2 routes of the current SDK)
 * over the registry. Routing and the API key are the router's. */
#ifndef SANDBOXD_CONTROL_H
#define SANDBOXD_CONTROL_H
#include <stdbool.h>
#include "http.h"
#include "router.h"

#define SANDBOXD_ENVD_VERSION "0.6.3"
#define SANDBOXD_TEMPLATE "base"
#define SANDBOXD_MAX_TIMEOUT_S 86400

void control_init(const char *state_dir);             /* for diskSizeMB */
/* The control-plane routes, and GET /health. */
void control_handle(sd_request *r, const rt_decision *d);
#endif
