/* fs_rpc.h — envd's filesystem.Filesystem RPCs (reference §5.4): Stat, MakeDir, Move, ListDir,
 * Remove, WatchDir (inotify, server-streaming). Paths are resolved by paths.c inside the sandbox
 * root. */
#ifndef SANDBOXD_FS_RPC_H
#define SANDBOXD_FS_RPC_H
#include "http.h"
#include "router.h"

#define FSRPC_MAX_LIST_ENTRIES 100000
#define FSRPC_MAX_DEPTH 1024           /* ListDir depth; deeper ⇒ invalid_argument */
#define FSRPC_MAX_WALK_FDS 8192        /* directories all ListDir walks together hold open */
#define FSRPC_MAX_WATCHES 1024         /* inotify watches per WatchDir stream */
#define FSRPC_MAX_WATCH_STREAMS 32     /* WatchDir streams at once, over every sandbox (inotify instances are host root's) */
#define FSRPC_MAX_WATCH_STREAMS_PER_SBX 8

/* The route's sandbox, user and method come from the router's decision. */
void fs_rpc(sd_request *r, const rt_decision *d);
#endif
