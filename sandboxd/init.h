/* init.h — the in-sandbox init (pid 1) and its protocol with sandboxd.
 *
 * sandboxd clones the sandbox's first process into new namespaces; once the id maps are written
 * it becomes root inside and re-executes the sandboxd binary (a fresh, single-threaded image)
 * with argv[0] = SBX_INIT_ARGV0. A constructor in init.c recognises that and runs sbx_init_main
 * before main(), so sandboxd's main needs no hook. The init builds the root file system, pivots
 * into it, reports READY, then serves spawn/kill requests over one SOCK_SEQPACKET socket:
 * one request or reply per packet, file descriptors passed with SCM_RIGHTS. */
#ifndef SANDBOXD_INIT_H
#define SANDBOXD_INIT_H
#include <stdint.h>

#define SBX_INIT_ARGV0 "sandboxd-init"
#define INIT_REQ_MAX (1u << 20)   /* spawn request: argv + env + cwd */

enum { INIT_REQ_SPAWN = 1, INIT_REQ_KILL = 2, INIT_REQ_KILLALL = 3, INIT_REQ_HOSTNAME = 4 };
enum { INIT_MSG_READY = 1, INIT_MSG_FAILED = 2, INIT_MSG_SPAWNED = 3, INIT_MSG_EXITED = 4, INIT_MSG_HOSTNAME = 5 };
enum { INIT_OK = 0, INIT_EINVAL = 1, INIT_EINTERNAL = 2 };   /* SPAWNED.code */
#define INIT_F_PTY 1u
#define INIT_F_STDIN 2u

/* Request header; SPAWN is followed by cwd, argv[argc], env[envc], each NUL-terminated;
 * HOSTNAME (sent once, before any SPAWN) by the NUL-terminated name, answered by HOSTNAME with
 * code 0 or an errno. */
typedef struct {
  uint32_t type, seq;
  int32_t pid, sig;               /* KILL: pid (as seen inside) and signal; KILLALL: signal */
  uint32_t uid, gid, flags;
  uint16_t rows, cols;
  uint32_t argc, envc;
} init_req;

/* Reply. SPAWNED with code INIT_OK carries fds: PTY → [master]; pipes → [stdout, stderr(, stdin)]. */
typedef struct {
  uint32_t type, seq;
  int32_t pid, status;            /* EXITED: raw wait status */
  int32_t code;
  char text[256];
} init_msg;

/* argv: SBX_INIT_ARGV0 ctl_fd tpl_fd sbx_fd groups(c|k) sysdirs(comma list) layers ("-", or
 * "<fd>:<id>,<id>..." top first: snapshot layers below the upper layer, in the store the fd
 * opens, layers.h) nmounts, then nmounts of "<fd>:<path>" (a volume's directory, bind-mounted
 * nosuid and nodev at path; shallowest first). Nothing names the
 * sandbox: the host name is "sandbox" until the HOSTNAME request. The network namespace is
 * always the sandbox's own (lo up; pasta adds the interface to the internet, net.h). */
int sbx_init_main(int argc, char **argv);
#endif
