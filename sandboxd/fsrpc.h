/* fsrpc.h — filesystem.Filesystem RPCs (reference §5.4): Stat, MakeDir, Move, ListDir, Remove,
 * WatchDir (inotify, server-streaming). Paths are resolved by paths.c inside the sandbox root. */
#ifndef SANDBOXD_FSRPC_H
#define SANDBOXD_FSRPC_H
#include "registry.h"
#include "server.h"

#define FSRPC_MAX_LIST_ENTRIES 100000
#define FSRPC_MAX_WATCHES 8192

void fsrpc_handle(sd_request *r, reg_entry *e, const char *method);
#endif
