/* files.h — envd's plain HTTP file API (reference §6): GET/POST /files with gzip, multipart and
 * octet-stream uploads, user.e2b.* metadata, and v1 URL signatures with expiry. */
#ifndef SANDBOXD_FILES_H
#define SANDBOXD_FILES_H
#include "registry.h"
#include "server.h"

#define FILES_INLINE_MAX (4u << 20)       /* smaller downloads go out with Content-Length */

void files_handle(sd_request *r, reg_entry *e);
/* For /files without E2b-Sandbox-Id: the sandbox whose token verifies the signature (new
 * reference), or NULL after replying 401. */
reg_entry *files_find_signed(sd_request *r);
/* The same checks without replying (for authentication before the body is read): the entry /
 * 0, or NULL / the HTTP status with the reason in msg. */
reg_entry *files_lookup_signed(sd_request *r, int *status, char *msg, size_t len);
int files_auth(sd_request *r, reg_entry *e, char *msg, size_t len);
#endif
