/* fdpass.h — one packet with descriptors over a local socket (SCM_RIGHTS), both ways: what
 * sandboxd, a network pair's starter and a sandbox's init say to each other (init.h) carries the
 * init's channel, cgroup and idmap descriptors, pipe ends and PTY masters. A leaf: libc only. */
#ifndef SBX_FDPASS_H
#define SBX_FDPASS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define FDPASS_MAX 16   /* descriptors in one packet, either way */

/* Sends buf[0..len) with fds[0..nfds) (nfds ≤ FDPASS_MAX) as one packet, retrying on EINTR.
 * 0, or -1 with errno (EMSGSIZE when only part of buf went, EINVAL when nfds is out of range). */
int fdpass_send(int sock, const void *buf, size_t len, const int *fds, int nfds);

/* Receives one packet into buf[0..cap) (flags: MSG_DONTWAIT or 0; MSG_CMSG_CLOEXEC is always
 * added), retrying on EINTR. The descriptors it carried go to fds[0..*nfds) up to maxfds; any
 * beyond are closed. *truncated says the packet or its descriptors did not fit. The byte count,
 * 0 at end of stream, or -1 with errno (and no descriptor taken). */
ssize_t fdpass_recv(int sock, void *buf, size_t cap, int flags, int *fds, int maxfds, int *nfds, bool *truncated);

#endif
