/* process.h — a sandbox's process table (sandboxd side of the init protocol) and the glue between
 * sandbox.c and process.c. The RPC entry point, process_rpc, is declared in sandbox.h.
 *
 * One pump thread per sandbox reads the init channel (spawn replies, exits) and every process's
 * output, and fans chunks out to the subscribed Start/Connect streams. Each subscriber queue is
 * bounded (PT_SUB_QUEUE_MAX bytes); while one is full the pump stops reading that process's
 * output, so a slow client slows the process (pipe backpressure) instead of growing memory. */
#ifndef SANDBOXD_PROCESS_H
#define SANDBOXD_PROCESS_H
#include "sandbox.h"

#define PT_SUB_QUEUE_MAX (256u << 10)
#define PT_PIPE_CHUNK (32u << 10)   /* stdout/stderr data messages */
#define PT_PTY_CHUNK (16u << 10)    /* pty data messages */

typedef struct ptab ptab;

/* Takes ownership of ctl_fd (sandboxd's end of the init channel); copies envs. */
ptab *ptab_create(int ctl_fd, const char *const *envs, char *err, size_t errlen);
int   ptab_killall(ptab *t, int sig);    /* signal every process but init (pause fallback) */
void  ptab_shutdown(ptab *t);            /* init is dead: end every stream, wait for RPCs, join pump */
void  ptab_free(ptab *t);

/* Provided by sandbox.c. */
ptab *sbx_ptab(sbx_t *s);
void  sbx_kill_init(sbx_t *s);           /* SIGKILL pid 1 (thaws first); the pid namespace dies with it */
#endif
