/* volume_api.h — volumes over HTTP, as SDK 2.29.1 and the current SDK speak them: the control
 * plane's /volumes (create, list, get, delete; the API key) and the volume content API
 * /volumecontent/{id}/{dir,file,path} (the volume's token; the SDK sends it to
 * E2B_VOLUME_API_URL, which is sandboxd's address too). Errors of the content API have E2B's
 * shape for it: {"code": "<what>", "message"}. */
#ifndef SANDBOXD_VOLUME_API_H
#define SANDBOXD_VOLUME_API_H
#include "http.h"
#include "router.h"

void volume_api_handle(sd_request *r, const rt_decision *d);
#endif
