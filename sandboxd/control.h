/* control.h — E2B's control-plane REST API (reference §2) over the registry. */
#ifndef SANDBOXD_CONTROL_H
#define SANDBOXD_CONTROL_H
#include <stdbool.h>
#include "server.h"

#define SANDBOXD_ENVD_VERSION "0.6.3"
#define SANDBOXD_TEMPLATE "base"
#define SANDBOXD_MAX_TIMEOUT_S 86400

void control_init(const char *state_dir);             /* for diskSizeMB */
void control_handle(sd_request *r, const char *api_key);
/* X-API-KEY check in constant time (over the configured key's length). */
bool control_key_ok(const char *key, const char *api_key);
#endif
