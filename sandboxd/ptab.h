/* ptab.h — a sandbox's process table: sandboxd's side of the init protocol (init.h). It starts
 * commands through the init, tracks them by pid and tag, and delivers what they do (start, output
 * chunks, end) to subscribers. No HTTP here: process_rpc.c serves envd's process RPCs on top.
 *
 * One pump thread per table reads the init channel (spawn replies, exits) and every process's
 * output, and fans chunks out to the subscribers: a chunk is read straight into the event the
 * first subscriber receives (others get copies), up to PTAB_PIPE_CHUNK bytes at a time. Each subscriber queue is bounded
 * (PTAB_SUB_QUEUE_MAX bytes); while one is full the pump stops reading that process's output, so
 * a slow client slows the process (pipe backpressure) instead of growing memory. A process ends
 * when it has exited and its output reached end-of-file. */
#ifndef SANDBOXD_PTAB_H
#define SANDBOXD_PTAB_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#define PTAB_SUB_QUEUE_MAX (1u << 20)
#define PTAB_PIPE_CHUNK (256u << 10)  /* stdout/stderr: the most one read (one chunk) takes */
#define PTAB_PIPE_SIZE (1u << 20)     /* their pipes' capacity (F_SETPIPE_SZ; best effort) */
#define PTAB_PTY_CHUNK (16u << 10)    /* pty chunks */
#define PTAB_EV_POOL 8                /* full-size data events kept for reuse, per table */
#define PTAB_MAX_ENVS 4096
#define PTAB_MAX_ARGS 65536

typedef struct ptab ptab;
typedef struct ptab_sub ptab_sub;

/* Takes ownership of ctl_fd (sandboxd's end of the init channel); copies envs ("NAME=VALUE",
 * added to every process). trace: non-NULL (the sandbox's id) to print on stderr where the first
 * command's time went (SANDBOXD_TRACE_CREATE). NULL with err. */
ptab *ptab_create(int ctl_fd, const char *const *envs, const char *trace, char *err, size_t errlen);
/* The table's envs (NULL-terminated "NAME=VALUE"), fixed at create: borrowed. */
const char *const *ptab_envs(ptab *t);
int   ptab_killall(ptab *t, int sig);    /* signal every process but init (pause fallback) */
void  ptab_shutdown(ptab *t);            /* init is dead: end every stream, wait for subscribers, join pump */
void  ptab_free(ptab *t);

/* What a subscriber receives, in order: START (or ERROR), DATA*, END. ERROR and END are last. */
enum { PTAB_START = 1, PTAB_DATA, PTAB_END, PTAB_ERROR };
enum { PTAB_STDOUT, PTAB_STDERR, PTAB_PTY };
typedef struct ptab_ev {
  struct ptab_ev *next;   /* the queue's */
  int kind, stream;       /* stream: DATA */
  int32_t pid;            /* START, END */
  int status;             /* END: the raw wait status */
  const char *code;       /* ERROR: a Connect code ("internal", "unavailable", ...) */
  size_t len;             /* DATA: bytes in data; ERROR: the message is data, NUL-terminated */
  size_t cap;             /* bytes data has room for */
  char data[];
} ptab_ev;
/* Result codes of the functions below: 0 or a Connect code as a static string, with err set. */

/* A process to start. Environment: PATH HOME USER LOGNAME, the table's envs, then envs
 * ("NAME=VALUE"); a later NAME wins. cwd is absolute. */
typedef struct {
  uid_t uid;
  gid_t gid;
  const char *user, *home, *cwd, *cmd, *tag;      /* tag may be NULL */
  const char *const *args; size_t nargs;
  const char *const *envs; size_t nenvs;
  bool pty, stdin_pipe;
  uint16_t rows, cols;                            /* pty; 0 = 24x80 */
  int64_t lifetime_ms;                            /* SIGKILL to its group when it elapses; 0 = never */
  json_t *config;                                 /* kept for ptab_list (a reference is taken) */
} ptab_spawn;
/* Starts it; its subscription receives START, or ERROR when it cannot start. */
ptab_sub *ptab_start(ptab *t, const ptab_spawn *sp, const char **code, char *err, size_t errlen);

/* A running process, by pid or by tag. */
typedef struct { bool by_pid; uint32_t pid; const char *tag; } ptab_sel;
ptab_sub *ptab_attach(ptab *t, const ptab_sel *sel, const char **code, char *err, size_t errlen);

/* The next event, waiting at most wait_ms; NULL when there is none yet. Give it back with
 * ptab_ev_free (full-size data events are reused: no fresh pages per chunk). */
ptab_ev *ptab_next(ptab_sub *s, int64_t wait_ms);
void ptab_ev_free(ptab_sub *s, ptab_ev *e);
void ptab_unsubscribe(ptab_sub *s);      /* the process goes on; s is gone */

/* Every process: pid, tag (or NULL), config. ptab_list_free frees the copy. */
typedef struct { int32_t pid; char *tag; json_t *config; } ptab_info;
ptab_info *ptab_list(ptab *t, size_t *n);
void ptab_list_free(ptab_info *v, size_t n);

const char *ptab_input(ptab *t, const ptab_sel *sel, bool pty, const void *data, size_t len, char *err, size_t errlen);
const char *ptab_close_stdin(ptab *t, const ptab_sel *sel, char *err, size_t errlen);
const char *ptab_signal(ptab *t, const ptab_sel *sel, int sig, char *err, size_t errlen);
/* A PTY process; resize false only checks that it is one. */
const char *ptab_resize(ptab *t, const ptab_sel *sel, bool resize, uint16_t rows, uint16_t cols, char *err, size_t errlen);

/* What happens to the table's processes, for whoever keeps the sandbox's log: START (config
 * as given to ptab_start), ERROR (it could not start: text says why) and END (status: the raw wait
 * status). Called with the table's lock held: copy what you need, never call back into the table. */
typedef void (*ptab_observer)(void *cls, int kind, int32_t pid, const json_t *config, int status, const char *text);
void ptab_observe(ptab *t, ptab_observer fn, void *cls);

/* "exit status 1" / "signal: killed" exactly as Go's os.ProcessState.String(). */
void ptab_status_string(int status, char *out, size_t cap);
#endif
