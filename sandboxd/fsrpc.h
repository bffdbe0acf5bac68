/* fsrpc.h — filesystem.Filesystem RPCs (reference §5.4): Stat, MakeDir, Move, ListDir, Remove,
 * WatchDir (inotify, server-streaming). Paths are resolved by paths.c inside the sandbox root. */
#ifndef SANDBOXD_FSRPC_H
#define SANDBOXD_FSRPC_H
#include "registry.h"
#include "server.h"

#define FSRPC_MAX_LIST_ENTRIES 100000
#define FSRPC_MAX_DEPTH 1024           /* ListDir depth; deeper ⇒ invalid_argument */
#define FSRPC_MAX_WALK_FDS 8192        /* directories all ListDir walks together hold open */
#define FSRPC_MAX_WATCHES 1024         /* inotify watches per WatchDir stream */
#define FSRPC_MAX_WATCH_STREAMS 32     /* WatchDir streams at once, over every sandbox (inotify instances are host root's) */
#define FSRPC_MAX_WATCH_STREAMS_PER_SBX 8

void fsrpc_handle(sd_request *r, reg_entry *e, const char *method);
#endif
