/* fdpass.c — one packet with descriptors over a local socket (fdpass.h). */
#include "fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef union { char b[CMSG_SPACE(sizeof(int) * FDPASS_MAX)]; struct cmsghdr align; } fdpass_cmsg;

int fdpass_send(int sock, const void *buf, size_t len, const int *fds, int nfds) {
  if (nfds < 0 || nfds > FDPASS_MAX) { errno = EINVAL; return -1; }
  fdpass_cmsg u;
  memset(&u, 0, sizeof u);
  struct iovec iov = {(void *)buf, len};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds > 0) {
    mh.msg_control = u.b;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  ssize_t w;
  do w = sendmsg(sock, &mh, MSG_NOSIGNAL); while (w < 0 && errno == EINTR);
  if (w == (ssize_t)len) return 0;
  if (w >= 0) errno = EMSGSIZE;
  return -1;
}

ssize_t fdpass_recv(int sock, void *buf, size_t cap, int flags, int *fds, int maxfds, int *nfds, bool *truncated) {
  fdpass_cmsg u;
  struct iovec iov = {buf, cap};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
  *nfds = 0;
  *truncated = false;
  ssize_t n;
  do n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC); while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*nfds < maxfds) fds[(*nfds)++] = fd;
      else { close(fd); *truncated = true; }
    }
  }
  if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) *truncated = true;
  return n;
}
