/* harden.h — what sandboxd does to itself before it holds a secret (the API key, envd and
 * traffic tokens, the secret store's key and values), so that none leaves through the process:
 *
 *  - no core dump: RLIMIT_CORE's soft limit 0 (what sandboxd starts inherits it and may raise
 *    it again up to the hard limit, which stays), and
 *  - as root with CAP_SYS_PTRACE: prctl(PR_SET_DUMPABLE, 0), so that no core dump is written
 *    whatever core_pattern says, and /proc/<pid>/{mem,environ,maps,fd,...} and ptrace are closed
 *    to every process without CAP_SYS_PTRACE. Children that exec (sandboxd-init, pasta, nft) are
 *    dumpable again; those that do not (the throwaway namespace holders) inherit the flag, which
 *    is why it needs CAP_SYS_PTRACE: sandboxd opens their /proc/<pid>/ns files itself, a ptrace
 *    access check. Without root (rootless) the flag is not set: the kernel would make those
 *    holders' /proc files root's, and sandboxd could no longer write their uid_map; the same
 *    user can read <state>/secrets.key there anyway;
 *  - every buffer jansson lets go of is wiped first (OPENSSL_cleanse over its usable size):
 *    request bodies parsed into JSON held secret values.
 *
 * harden_process says what it could not do, in `why` ("" when everything applied). */
#ifndef SANDBOXD_HARDEN_H
#define SANDBOXD_HARDEN_H
#include <stdbool.h>
#include <stddef.h>

/* Once, at start, before any thread and before any secret is read. true when sandboxd is
 * non-dumpable. */
bool harden_process(char *why, size_t whylen);
#endif
