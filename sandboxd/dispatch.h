/* dispatch.h — the HTTP layer's hooks (http.h): the router admits a request from its headers
 * (router.h), then the handler of its route serves it — the control plane (control.c), envd's
 * /health, /files (files.c), process RPCs (process_rpc.c) and filesystem RPCs (fs_rpc.c). */
#ifndef SANDBOXD_DISPATCH_H
#define SANDBOXD_DISPATCH_H
#include "http.h"

const sd_hooks *dispatch_hooks(void);
#endif
