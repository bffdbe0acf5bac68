/* process_rpc.h — envd's process.Process RPCs (reference §5.3): Start and Connect (server
 * streaming), List, SendInput, CloseStdin, SendSignal, Update; StreamInput ⇒ unimplemented. */
#ifndef SANDBOXD_PROCESS_RPC_H
#define SANDBOXD_PROCESS_RPC_H
#include "http.h"
#include "router.h"

/* The route's sandbox, user and method come from the router's decision. */
void process_rpc(sd_request *r, const rt_decision *d);
#endif
