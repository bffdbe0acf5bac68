/* template_api.h — template builds on the control plane, as E2B's Template builder speaks them
 * (template_build.h does the work):
 *   POST /v3/templates {name|alias, tags?, cpuCount?, memoryMB?} → 202 {templateID, buildID, names, aliases, tags, public}
 *   GET  /templates/{templateID}/files/{hash} → 201 {present: true} or {present: false, url}
 *   PUT  that url (the archive the SDK makes: tar, gzip or not): the same path with ?token=, a
 *        one-time token for that file, instead of the API key (SDK 2.29.1 sends the URL alone) → 200
 *   POST /v2/templates/{templateID}/builds/{buildID} (TemplateBuildStartV2) → 202, the build runs
 *   GET  /templates/{templateID}/builds/{buildID}/status?logsOffset=N → TemplateBuildInfo
 *   POST /templates/tags {target: "name[:tag]", tags} → 201 {buildID, tags}: the target's build takes the tags
 *   DELETE /templates/tags {name, tags} → 204: the template loses them
 *   GET  /templates/{templateID or name}/tags → 200 [{tag, buildID, createdAt}] */
#ifndef SANDBOXD_TEMPLATE_API_H
#define SANDBOXD_TEMPLATE_API_H
#include "http.h"
#include "router.h"

#define TEMPLATE_UPLOAD_TOKEN_PARAM "token"

void template_api_handle(sd_request *r, const rt_decision *d);
#endif
