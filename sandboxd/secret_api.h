/* secret_api.h — E2B's secret API over HTTP, as the current SDK's Secret class speaks it (the
 * control plane: the API key): POST /secrets (create), GET /secrets (list: limit, nextToken,
 * X-Next-Token), GET /secrets/{id or name} (getInfo; exists is a getInfo), POST /secrets/{id or
 * name} (update: a new version), DELETE /secrets/{id or name} (destroy). A secret is answered as
 * E2B's Secret {secretID, name, currentVersion, metadata, createdAt, updatedAt}: never its value.
 * A scoped secret (metadata "sandboxd.sandbox", secrets.h) must name a sandbox that exists.
 * A malformed body is refused by its position only: jansson's message quotes the text near the
 * error, which may be a value. */
#ifndef SANDBOXD_SECRET_API_H
#define SANDBOXD_SECRET_API_H
#include "http.h"
#include "router.h"

#define SECRET_API_LIST_MAX 100        /* a page: limit 1..100, 100 when not given */

void secret_api_handle(sd_request *r, const rt_decision *d);
#endif
