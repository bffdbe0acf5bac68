/* fdout.c — non-blocking writes to a borrowed descriptor (see fdout.h). */
#include "fdout.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { MB_FDO_DIRECT, MB_FDO_PRIVATE, MB_FDO_SOCKET, MB_FDO_POLLED };

struct mb_fdout {
  uv_loop_t *uv;
  int fd;          /* what we write to: the caller's, or our private re-opened one */
  int own;         /* fd is ours to close */
  int mode;
  uv_poll_t *poll; /* armed while waiting for room */
  mb_fdout_cb writable;
  void *ud;
};

int mb_fdout_new(uv_loop_t *uv, int fd, mb_fdout_cb writable, void *ud, struct mb_fdout **out,
                 struct mb_error *err) {
  *out = NULL;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0)
    return mb_error_set(err, MB_E_INVALID, "descriptor %d: %s", fd, strerror(fd < 0 ? EBADF : errno));
  struct mb_fdout *o = calloc(1, sizeof *o);
  if (!o) return mb_error_set(err, MB_E_NOMEM, "out of memory");
  o->uv = uv;
  o->fd = fd;
  o->writable = writable;
  o->ud = ud;
  if (S_ISSOCK(st.st_mode)) {
    o->mode = MB_FDO_SOCKET;
  } else if (S_ISFIFO(st.st_mode) || isatty(fd)) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int own = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (own >= 0) {
      o->fd = own;
      o->own = 1;
      o->mode = MB_FDO_PRIVATE;
    } else {
      o->mode = MB_FDO_POLLED;
    }
  } else {
    o->mode = MB_FDO_DIRECT;
  }
  *out = o;
  return MB_OK;
}

static void free_poll(uv_handle_t *h) { free(h); }

void mb_fdout_free(struct mb_fdout *o) {
  if (!o) return;
  if (o->poll) {
    uv_poll_stop(o->poll);
    uv_close((uv_handle_t *)o->poll, free_poll);
  }
  if (o->own) close(o->fd);
  free(o);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  struct mb_fdout *o = h->data;
  uv_poll_stop(h);
  o->writable(o->ud); /* last: the owner may free o */
}

/* Waits for room through the loop; → 0, or -errno when the descriptor cannot be watched. */
static int arm(struct mb_fdout *o) {
  if (!o->poll) {
    uv_poll_t *p = malloc(sizeof *p);
    if (!p) return -ENOMEM;
    /* uv_poll_init makes the descriptor non-blocking; only our own private one may stay so
     * (a borrowed socket's or terminal's flags belong to everyone sharing it). */
    int flags = fcntl(o->fd, F_GETFL);
    int rc = uv_poll_init(o->uv, p, o->fd);
    if (!o->own && flags >= 0) fcntl(o->fd, F_SETFL, flags);
    if (rc != 0) {
      free(p);
      return rc; /* libuv errors are -errno */
    }
    p->data = o;
    o->poll = p;
  }
  int rc = uv_poll_start(o->poll, UV_WRITABLE, on_poll);
  return rc;
}

/* write(2) to a pipe with SIGPIPE held back: a reader that went away is EPIPE, never a signal
 * that kills the host. A SIGPIPE this write raised is taken off the pending set again. */
static ssize_t write_nosigpipe(int fd, const void *p, size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  int was_pending = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t w = write(fd, p, n);
  int e = errno;
  if (w < 0 && e == EPIPE && !was_pending) {
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {}
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = e;
  return w;
}

ssize_t mb_fdout_write(struct mb_fdout *o, const void *p, size_t n) {
  if (n == 0) return 0;
  for (;;) {
    ssize_t w;
    switch (o->mode) {
    case MB_FDO_SOCKET: w = send(o->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL); break;
    case MB_FDO_POLLED: {
      struct pollfd pf = {.fd = o->fd, .events = POLLOUT};
      int r = poll(&pf, 1, 0); /* never waits: timeout 0 */
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return -errno;
      if (r == 0) { w = -1; errno = EAGAIN; break; }
      if (pf.revents & (POLLERR | POLLNVAL)) return -EIO;
      w = write_nosigpipe(o->fd, p, n < PIPE_BUF ? n : PIPE_BUF);
      break;
    }
    default: w = write_nosigpipe(o->fd, p, n); break;
    }
    if (w >= 0) {
      if (w > 0) return w;
      return -EIO; /* a zero-byte write of a non-empty buffer: the descriptor takes nothing */
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rc = arm(o);
      return rc == 0 ? 0 : rc;
    }
    return -errno;
  }
}
