/* files.h — envd's plain HTTP file API (reference §6): GET /files (gzip when accepted, large
 * files streamed) and POST /files (multipart or octet-stream, gzip, X-Metadata-* headers; the
 * writing is upload.c's). Credentials (token or v1 signature) and the user are the router's. */
#ifndef SANDBOXD_FILES_H
#define SANDBOXD_FILES_H
#include "http.h"
#include "router.h"

#define FILES_INLINE_MAX (4u << 20)       /* smaller downloads go out with Content-Length */

void files_handle(sd_request *r, const rt_decision *d);
#endif
