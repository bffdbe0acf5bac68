/* test_sbx_fdpass.c — one packet with descriptors (sandboxd/fdpass.c): bytes and descriptors
 * arrive together and work; none is fine; more than the receiver takes are closed and reported;
 * a packet larger than the buffer is reported; a bad count and a dead peer are errors. */
#include "mbtest.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"

static void test_roundtrip(void) {
  int sv[2], p[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  CHECK(pipe(p) == 0);
  CHECK_INT(fdpass_send(sv[0], "hello", 5, &p[1], 1), 0);
  char buf[16];
  int fds[4], n;
  bool trunc;
  CHECK_INT(fdpass_recv(sv[1], buf, sizeof buf, 0, fds, 4, &n, &trunc), 5);
  CHECK_INT(n, 1);
  CHECK(!trunc);
  CHECK(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);                  /* received close-on-exec */
  CHECK_INT(write(fds[0], "x", 1), 1);                          /* the pipe's write end indeed */
  CHECK_INT(read(p[0], buf, 1), 1);
  close(fds[0]);
  /* none */
  CHECK_INT(fdpass_send(sv[0], "ab", 2, NULL, 0), 0);
  CHECK_INT(fdpass_recv(sv[1], buf, sizeof buf, 0, fds, 4, &n, &trunc), 2);
  CHECK_INT(n, 0);
  CHECK(!trunc);
  /* three sent, two taken: the third is closed, and said */
  int three[3] = {p[0], p[1], p[1]};
  CHECK_INT(fdpass_send(sv[0], "t", 1, three, 3), 0);
  CHECK_INT(fdpass_recv(sv[1], buf, sizeof buf, 0, fds, 2, &n, &trunc), 1);
  CHECK_INT(n, 2);
  CHECK(trunc);
  close(fds[0]); close(fds[1]);
  /* a packet larger than the buffer */
  CHECK_INT(fdpass_send(sv[0], "0123456789", 10, NULL, 0), 0);
  CHECK_INT(fdpass_recv(sv[1], buf, 4, 0, fds, 4, &n, &trunc), 4);
  CHECK(trunc);
  /* nothing queued, not waiting */
  CHECK_INT(fdpass_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT, fds, 4, &n, &trunc), -1);
  CHECK_INT(errno, EAGAIN);
  /* counts out of range */
  errno = 0;
  CHECK_INT(fdpass_send(sv[0], "x", 1, three, FDPASS_MAX + 1), -1);
  CHECK_INT(errno, EINVAL);
  CHECK_INT(fdpass_send(sv[0], "x", 1, three, -1), -1);
  /* the peer gone: end of stream one way, EPIPE the other */
  close(sv[0]);
  CHECK_INT(fdpass_recv(sv[1], buf, sizeof buf, 0, fds, 4, &n, &trunc), 0);
  CHECK_INT(fdpass_send(sv[1], "x", 1, NULL, 0), -1);
  CHECK_INT(errno, EPIPE);
  close(sv[1]); close(p[0]); close(p[1]);
}

int main(void) {
  MBT_RUN(test_roundtrip);
  return mbt_report();
}
