/* netns.c — sockets and work in another network namespace, on a thread of their own (netns.h). */
#include "netns.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>

typedef struct {
  int netns, rc, err;
  int (*fn)(void *);
  void *arg;
} job;

static void *run(void *p) {
  job *j = p;
  if (setns(j->netns, CLONE_NEWNET) != 0) { j->rc = -1; j->err = errno; return NULL; }
  errno = 0;
  j->rc = j->fn(j->arg);
  j->err = errno;
  return NULL;                  /* the thread, in the other namespace, ends here */
}

int netns_run(int netns_fd, int (*fn)(void *), void *arg) {
  job j = {netns_fd, -1, 0, fn, arg};
  pthread_t t;
  int rc = pthread_create(&t, NULL, run, &j);
  if (rc != 0) { errno = rc; return -1; }
  pthread_join(t, NULL);
  errno = j.err;
  return j.rc;
}

typedef struct { int domain, type, protocol; } sock_args;
static int make_socket(void *p) {
  sock_args *a = p;
  return socket(a->domain, a->type | SOCK_CLOEXEC, a->protocol);
}

int netns_socket(int netns_fd, int domain, int type, int protocol) {
  sock_args a = {domain, type, protocol};
  return netns_run(netns_fd, make_socket, &a);
}
