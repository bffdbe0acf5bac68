/* snapshot_api.h — the snapshot routes of the control plane, as SDK 2.29.1 and the current SDK
 * speak them: POST /sandboxes/{id}/snapshots, GET /snapshots, DELETE /templates/{ref} (in E2B a
 * snapshot is a template) and POST /sandboxes/{id}/fork (a snapshot the forks share, in no
 * catalogue). A snapshot holds the file system only: processes and memory are not copied. */
#ifndef SANDBOXD_SNAPSHOT_API_H
#define SANDBOXD_SNAPSHOT_API_H
#include "http.h"
#include "router.h"

#define SNAPSHOT_FORK_MAX 100          /* forks per request (E2B's limit) */
#define SNAPSHOT_FORK_TIMEOUT_S 15     /* a fork's lease when the request names none (E2B's default) */

void snapshot_api_handle(sd_request *r, const rt_decision *d);
#endif
