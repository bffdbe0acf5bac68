/* ptab.c — a sandbox's process table over the init channel (see ptab.h, init.h). */
#include "ptab.h"

#include "clocks.h"
#include "init.h"
#include "fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define PTAB_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct ptab_sub {
  struct ptab_sub *next;  /* in proc->subs */
  ptab *t;
  ptab_ev *head, *tail;
  size_t bytes;
  bool done;              /* END/ERROR queued: nothing more will come */
  pthread_cond_t cv;
  struct proc *proc;      /* NULL while pending or after the end */
};
typedef struct ptab_sub ptab_sub;

typedef struct proc {
  struct proc *next;
  int32_t pid;
  char *tag;
  json_t *config;
  bool pty;
  int out_fd, err_fd, in_fd, pty_fd;
  bool exited;
  int status;
  int64_t deadline;       /* monotonic ms; 0 = none */
  bool deadline_hit;
  ptab_sub *subs;
  bool traced;            /* the table's first process, under SANDBOXD_TRACE_CREATE */
  struct timespec t_sent, t_spawned, t_exited;
  char init_times[64];    /* SPAWNED's text: when the init got the request, its µs to fork, to exec'd */
} proc;

typedef struct pending {
  struct pending *next;
  uint32_t seq;
  ptab_sub *sub;
  json_t *config;
  char *tag;
  bool pty;
  int64_t deadline;
  bool traced;
  struct timespec t_sent;
} pending;

struct ptab {
  pthread_mutex_t mu;
  pthread_mutex_t send_mu;
  pthread_cond_t idle;
  int ctl, wake;
  bool ctl_eof, shut, pump_started;
  pthread_t pump;
  proc *procs;
  pending *pend;
  uint32_t seq;
  int active;             /* subscriptions: ptab_shutdown waits for them */
  char *trace;            /* the sandbox's id while its first command is to be traced, else NULL */
  ptab_ev *pool[PTAB_EV_POOL];   /* free PTAB_PIPE_CHUNK data events */
  int npool;
  char **envs;
  size_t nenvs;
  ptab_observer observer;
  void *observer_cls;
};

void ptab_observe(ptab *t, ptab_observer fn, void *cls) {
  pthread_mutex_lock(&t->mu);
  t->observer = fn;
  t->observer_cls = cls;
  pthread_mutex_unlock(&t->mu);
}

static void wake_pump(ptab *t) {
  uint64_t one = 1;
  if (write(t->wake, &one, sizeof one) < 0) { /* counter saturated: the pump is awake anyway */ }
}

/* ---- queues ---- */
static ptab_ev *ev_new(int kind, size_t len) {
  ptab_ev *e = malloc(sizeof *e + len + 1);   /* not calloc: a data event's bytes are read over it */
  if (!e) return NULL;
  memset(e, 0, sizeof *e);
  e->kind = kind;
  e->len = e->cap = len;
  e->data[len] = 0;
  return e;
}

/* A full-size data event, from the pool when it has one (t->mu held). */
static ptab_ev *ev_chunk(ptab *t, size_t len) {
  if (len != PTAB_PIPE_CHUNK || t->npool == 0) return ev_new(PTAB_DATA, len);
  ptab_ev *e = t->pool[--t->npool];
  memset(e, 0, sizeof *e);
  e->kind = PTAB_DATA;
  e->len = e->cap = len;
  return e;
}

static void ev_release(ptab *t, ptab_ev *e) {   /* t->mu held */
  if (e && e->cap == PTAB_PIPE_CHUNK && t->npool < PTAB_EV_POOL) t->pool[t->npool++] = e;
  else free(e);
}

static void sub_push(ptab_sub *s, ptab_ev *e) {   /* t->mu held */
  if (!e) return;
  e->next = NULL;
  if (s->tail) s->tail->next = e;
  else s->head = e;
  s->tail = e;
  s->bytes += e->len;
  pthread_cond_signal(&s->cv);
}

static ptab_ev *ev_error(const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ptab_ev *e = ev_new(PTAB_ERROR, strlen(msg));
  if (e) { e->code = code; memcpy(e->data, msg, e->len); e->len = 0; }
  return e;
}

static bool throttled(const proc *p) {
  for (const ptab_sub *s = p->subs; s; s = s->next)
    if (s->bytes >= PTAB_SUB_QUEUE_MAX) return true;
  return false;
}

static void proc_free(proc *p) {
  if (p->out_fd >= 0) close(p->out_fd);
  if (p->err_fd >= 0) close(p->err_fd);
  if (p->in_fd >= 0) close(p->in_fd);
  if (p->pty_fd >= 0) close(p->pty_fd);
  json_decref(p->config);
  free(p->tag);
  free(p);
}

/* ---- pump ---- */
/* ---- pump ---- */
/* A chunk read into `first` (len bytes, or NULL with the bytes in buf) to every subscriber: the
 * first one takes `first` itself, the others copies. */
static void dispatch(ptab *t, proc *p, int stream, ptab_ev *first, const char *buf, size_t n) {   /* t->mu held */
  if (first) {
    if (n < first->cap / 2) {   /* a short read: give back what it did not use */
      ptab_ev *small = realloc(first, sizeof *first + n + 1);
      if (small) { first = small; first->cap = n; }
    }
    first->len = n;
    first->data[n] = 0;
    first->stream = stream;
    buf = first->data;
  }
  for (ptab_sub *s = p->subs; s; s = s->next) {
    ptab_ev *e = first;
    first = NULL;
    if (!e && (e = ev_new(PTAB_DATA, n))) {
      e->stream = stream;
      memcpy(e->data, buf, n);
    }
    if (e) sub_push(s, e);   /* out of memory: this subscriber misses a chunk rather than the daemon dying */
  }
  ev_release(t, first);   /* nobody subscribed after all */
}

static long us_between(struct timespec a, struct timespec b) {
  return (long)((b.tv_sec - a.tv_sec) * 1000000 + (b.tv_nsec - a.tv_nsec) / 1000);
}

/* SANDBOXD_TRACE_CREATE: where the first command's time went, from its request to the init to
 * its end (after this, its stream's `end` event goes out). */
static void trace_first(ptab *t, const proc *p) {
  struct timespec got = {0, 0}, now;
  long prep = -1, exec = -1;
  long long sec = 0;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (sscanf(p->init_times, "%lld.%ld %ld %ld", &sec, &got.tv_nsec, &prep, &exec) == 4) got.tv_sec = (time_t)sec;
  else got = p->t_sent;
  fprintf(stderr, "sandboxd: sandbox %s first command ended in %.2f ms (to the init %ldus, init spawn %ldus, fork+exec %ldus, "
          "SPAWNED %ldus, run+exit %ldus, output end %ldus)\n", t->trace, (double)us_between(p->t_sent, now) / 1e3,
          us_between(p->t_sent, got), prep, exec, us_between(got, p->t_spawned) - prep - exec,
          us_between(p->t_spawned, p->t_exited), us_between(p->t_exited, now));
  free(t->trace);
  t->trace = NULL;
}

static void finish(ptab *t, proc *p) {   /* t->mu held; p exited and its output is drained */
  if (p->traced && t->trace) trace_first(t, p);
  for (ptab_sub *s = p->subs, *nx; s; s = nx) {
    nx = s->next;
    ptab_ev *e = ev_new(PTAB_END, 0);
    if (e) { e->status = p->status; e->pid = p->pid; }
    sub_push(s, e);
    s->done = true;
    s->proc = NULL;
    s->next = NULL;
  }
  p->subs = NULL;
  for (proc **pp = &t->procs; *pp; pp = &(*pp)->next)
    if (*pp == p) { *pp = p->next; break; }
  proc_free(p);
}

static void handle_msg(ptab *t, const init_msg *m, int *fds, int nfds) {   /* t->mu held */
  if (m->type == INIT_MSG_SPAWNED) {
    pending **pp = &t->pend, *pd = NULL;
    for (; *pp; pp = &(*pp)->next)
      if ((*pp)->seq == m->seq) { pd = *pp; *pp = pd->next; break; }
    if (!pd) { for (int i = 0; i < nfds; i++) close(fds[i]); return; }
    int want = pd->pty ? 1 : 2;
    if (m->code != INIT_OK || nfds < want) {
      char text[sizeof m->text + 1];
      memcpy(text, m->text, sizeof m->text);
      text[sizeof m->text] = 0;
      if (t->observer) t->observer(t->observer_cls, PTAB_ERROR, 0, pd->config, 0, text[0] ? text : "spawn failed");
      if (pd->sub) {
        sub_push(pd->sub, m->code == INIT_EINVAL ? ev_error("invalid_argument", "%s", text)
                                                 : ev_error("internal", "%s", text[0] ? text : "spawn failed"));
        pd->sub->done = true;
      }
      for (int i = 0; i < nfds; i++) close(fds[i]);
      json_decref(pd->config);
      free(pd->tag);
      free(pd);
      return;
    }
    proc *p = calloc(1, sizeof *p);
    if (!p) {   /* cannot track it: kill it, the exit report will find nothing */
      for (int i = 0; i < nfds; i++) close(fds[i]);
      if (pd->sub) { sub_push(pd->sub, ev_error("internal", "out of memory")); pd->sub->done = true; }
      json_decref(pd->config); free(pd->tag); free(pd);
      return;
    }
    p->pid = m->pid;
    if ((p->traced = pd->traced)) {
      p->t_sent = pd->t_sent;
      clock_gettime(CLOCK_MONOTONIC, &p->t_spawned);
      memcpy(p->init_times, m->text, sizeof p->init_times - 1);
    }
    p->tag = pd->tag;
    p->config = pd->config;
    p->pty = pd->pty;
    p->deadline = pd->deadline;
    p->out_fd = p->err_fd = p->in_fd = p->pty_fd = -1;
    if (p->pty) p->pty_fd = fds[0];
    else { p->out_fd = fds[0]; p->err_fd = fds[1]; if (nfds > 2) p->in_fd = fds[2]; }
    for (int i = p->pty ? 1 : 3; i < nfds; i++) close(fds[i]);
    int rfds[2] = {p->pty ? p->pty_fd : p->out_fd, p->err_fd};
    for (int i = 0; i < 2; i++)
      if (rfds[i] >= 0) {
        fcntl(rfds[i], F_SETFL, fcntl(rfds[i], F_GETFL) | O_NONBLOCK);
        /* A bigger pipe: fewer, larger reads (a host limit, pipe-max-size, may refuse it). */
        if (!p->pty) (void)fcntl(rfds[i], F_SETPIPE_SZ, (int)PTAB_PIPE_SIZE);
      }
    p->next = t->procs;
    t->procs = p;
    if (t->observer) t->observer(t->observer_cls, PTAB_START, p->pid, p->config, 0, NULL);
    if (pd->sub) {
      ptab_ev *e = ev_new(PTAB_START, 0);
      if (e) e->pid = p->pid;
      sub_push(pd->sub, e);
      pd->sub->proc = p;
      pd->sub->next = NULL;
      p->subs = pd->sub;
    }
    free(pd);
  } else {
    for (int i = 0; i < nfds; i++) close(fds[i]);
    if (m->type == INIT_MSG_EXITED)
      for (proc *p = t->procs; p; p = p->next)
        if (p->pid == m->pid && !p->exited) {
          p->exited = true;
          p->status = m->status;
          if (p->traced) clock_gettime(CLOCK_MONOTONIC, &p->t_exited);
          if (t->observer) t->observer(t->observer_cls, PTAB_END, p->pid, p->config, p->status, NULL);
          break;
        }
  }
}

static void read_ctl(ptab *t) {   /* t->mu held */
  init_msg m;
  int fds[3], nfds;
  bool trunc;
  ssize_t n = fdpass_recv(t->ctl, &m, sizeof m, MSG_DONTWAIT, fds, 3, &nfds, &trunc);
  if (n < 0 && errno == EAGAIN) return;
  if (n <= 0) {
    /* Init is gone and took its pid namespace along: every process was SIGKILLed. */
    for (int i = 0; i < nfds; i++) close(fds[i]);
    t->ctl_eof = true;
    for (proc *p = t->procs; p; p = p->next)
      if (!p->exited) { p->exited = true; p->status = SIGKILL; }
    for (pending *pd = t->pend, *nx; pd; pd = nx) {
      nx = pd->next;
      if (pd->sub) { sub_push(pd->sub, ev_error("unavailable", "sandbox is being destroyed")); pd->sub->done = true; }
      json_decref(pd->config); free(pd->tag); free(pd);
    }
    t->pend = NULL;
    return;
  }
  if ((size_t)n != sizeof m || trunc) {
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return;
  }
  handle_msg(t, &m, fds, nfds);
}

static int send_req_flags(ptab *t, const void *buf, size_t len, int flags) {
  pthread_mutex_lock(&t->send_mu);
  ssize_t w;
  do w = send(t->ctl, buf, len, MSG_NOSIGNAL | flags); while (w < 0 && errno == EINTR);
  int e = errno;
  pthread_mutex_unlock(&t->send_mu);
  if (w != (ssize_t)len) { errno = w < 0 ? e : EMSGSIZE; return -1; }
  return 0;
}

static int send_req(ptab *t, const void *buf, size_t len) { return send_req_flags(t, buf, len, 0); }

/* Returns -1 with EAGAIN when nonblocking and the channel is full (a frozen init). */
static int send_kill(ptab *t, int32_t pid, int sig, bool nonblocking) {
  init_req rq;
  memset(&rq, 0, sizeof rq);
  rq.type = pid > 0 ? INIT_REQ_KILL : INIT_REQ_KILLALL;
  rq.pid = pid;
  rq.sig = sig;
  if (send_req_flags(t, &rq, sizeof rq, nonblocking ? MSG_DONTWAIT : 0) == 0) return 0;
  return errno == EAGAIN ? -1 : 0;   /* any other failure: init is gone, and the process with it */
}

static void *pump_main(void *arg) {
  ptab *t = arg;
  struct pollfd *pf = NULL;
  proc **owner = NULL;
  int *which = NULL;
  size_t cap = 0;
  char *buf = malloc(PTAB_PIPE_CHUNK);
  pthread_mutex_lock(&t->mu);
  while (buf) {
    size_t nprocs = 0;
    for (proc *p = t->procs; p; p = p->next) nprocs++;
    if (t->ctl_eof && nprocs == 0) break;
    size_t need = 2 + 2 * nprocs;
    if (need > cap) {
      size_t nc = need * 2;
      struct pollfd *npf = realloc(pf, nc * sizeof *pf);
      if (npf) pf = npf;
      proc **no = npf ? realloc(owner, nc * sizeof *owner) : NULL;
      if (no) owner = no;
      int *nw = no ? realloc(which, nc * sizeof *which) : NULL;
      if (nw) which = nw;
      if (!nw) { pthread_mutex_unlock(&t->mu); struct timespec ts = {0, 10000000}; nanosleep(&ts, NULL); pthread_mutex_lock(&t->mu); continue; }
      cap = nc;
    }
    size_t n = 0;
    pf[n++] = (struct pollfd){t->wake, POLLIN, 0};
    pf[n++] = (struct pollfd){t->ctl_eof ? -1 : t->ctl, POLLIN, 0};
    int64_t now = mono_ms(), next = -1;
    for (proc *p = t->procs; p; p = p->next) {
      if (p->deadline && !p->deadline_hit) {
        /* Never block here with the table locked: retry shortly if the channel is full. */
        if (p->deadline <= now) {
          if (send_kill(t, p->pid, SIGKILL, true) == 0) p->deadline_hit = true;
          else if (next < 0 || now + 10 < next) next = now + 10;
        } else if (next < 0 || p->deadline < next) next = p->deadline;
      }
      if (!t->shut && throttled(p)) continue;   /* at shutdown output is dropped, never waited for */
      int fs[2] = {p->pty ? p->pty_fd : p->out_fd, p->err_fd};
      for (int i = 0; i < 2; i++)
        if (fs[i] >= 0) { owner[n] = p; which[n] = i; pf[n++] = (struct pollfd){fs[i], POLLIN, 0}; }
    }
    int timeout = next < 0 ? -1 : (int)(next - now > 60000 ? 60000 : next - now);
    pthread_mutex_unlock(&t->mu);
    int r = poll(pf, (nfds_t)n, timeout);
    pthread_mutex_lock(&t->mu);
    if (r < 0) continue;
    if (pf[0].revents) { uint64_t v; if (read(t->wake, &v, sizeof v) < 0) {} }
    if (pf[1].revents) read_ctl(t);
    for (size_t i = 2; i < n; i++) {
      if (!pf[i].revents) continue;
      proc *p = owner[i];
      bool alive = false;   /* the proc may have been finished by an earlier fd of this round */
      for (proc *q = t->procs; q; q = q->next) if (q == p) { alive = true; break; }
      if (!alive) continue;
      int *fdp = which[i] == 1 ? &p->err_fd : p->pty ? &p->pty_fd : &p->out_fd;
      if (*fdp != pf[i].fd) continue;
      size_t chunk = p->pty ? PTAB_PTY_CHUNK : PTAB_PIPE_CHUNK;
      /* Read straight into the event a subscriber gets, and without the table's lock: only
       * this thread closes output fds or frees processes. */
      ptab_ev *e = p->subs && !t->shut ? ev_chunk(t, chunk) : NULL;
      int fd = *fdp;
      pthread_mutex_unlock(&t->mu);
      ssize_t got = read(fd, e ? e->data : buf, chunk);
      int rerr = errno;
      pthread_mutex_lock(&t->mu);
      if (got > 0 && p->subs && !t->shut) {
        dispatch(t, p, p->pty ? PTAB_PTY : which[i] == 1 ? PTAB_STDERR : PTAB_STDOUT, e, buf, (size_t)got);
        e = NULL;
      }
      ev_release(t, e);
      errno = rerr;
      if (got > 0) {
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(*fdp);   /* EOF, or EIO once every pty slave is closed */
        *fdp = -1;
      }
    }
    /* A process ends when it has exited and its output reached EOF (as envd: late writers
     * that inherited stdout keep the stream open). */
    for (proc *p = t->procs, *nx; p; p = nx) {
      nx = p->next;
      if (p->exited && p->out_fd < 0 && p->err_fd < 0 && p->pty_fd < 0) finish(t, p);
    }
  }
  t->ctl_eof = true;
  pthread_cond_broadcast(&t->idle);
  pthread_mutex_unlock(&t->mu);
  free(pf);
  free(owner);
  free(which);
  free(buf);
  return NULL;
}

const char *const *ptab_envs(ptab *t) { return (const char *const *)t->envs; }

ptab *ptab_create(int ctl_fd, const char *const *envs, const char *trace, char *err, size_t errlen) {
  ptab *t = calloc(1, sizeof *t);
  if (!t) { snprintf(err, errlen, "out of memory"); close(ctl_fd); return NULL; }
  t->ctl = ctl_fd;
  t->trace = trace ? strdup(trace) : NULL;
  t->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  pthread_mutex_init(&t->mu, NULL);
  pthread_mutex_init(&t->send_mu, NULL);
  pthread_cond_init(&t->idle, NULL);
  size_t n = 0;
  while (envs && envs[n]) n++;
  if (n > PTAB_MAX_ENVS) { snprintf(err, errlen, "too many envVars (%zu, max %d)", n, PTAB_MAX_ENVS); goto fail; }
  t->envs = calloc(n + 1, sizeof *t->envs);
  if (!t->envs || t->wake < 0) { snprintf(err, errlen, "sandbox process table: %s", strerror(errno ? errno : ENOMEM)); goto fail; }
  for (; t->nenvs < n; t->nenvs++) {
    if (!strchr(envs[t->nenvs], '=')) { snprintf(err, errlen, "envVars entry without '='"); goto fail; }
    if (!(t->envs[t->nenvs] = strdup(envs[t->nenvs]))) { snprintf(err, errlen, "out of memory"); goto fail; }
  }
  int rc = pthread_create(&t->pump, NULL, pump_main, t);
  if (rc != 0) { snprintf(err, errlen, "pump thread: %s", strerror(rc)); goto fail; }
  t->pump_started = true;
  return t;
fail:
  ptab_free(t);
  return NULL;
}

int ptab_killall(ptab *t, int sig) {
  init_req rq;
  memset(&rq, 0, sizeof rq);
  rq.type = INIT_REQ_KILLALL;
  rq.sig = sig;
  return send_req(t, &rq, sizeof rq);
}

void ptab_shutdown(ptab *t) {
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  t->shut = true;
  pthread_mutex_unlock(&t->mu);
  wake_pump(t);
  if (t->pump_started) { pthread_join(t->pump, NULL); t->pump_started = false; }
  pthread_mutex_lock(&t->mu);
  while (t->active > 0) pthread_cond_wait(&t->idle, &t->mu);
  pthread_mutex_unlock(&t->mu);
}

void ptab_free(ptab *t) {
  if (!t) return;
  if (t->pump_started) {   /* only on a failed create: nothing can be subscribed yet */
    shutdown(t->ctl, SHUT_RDWR);
    pthread_join(t->pump, NULL);
  }
  for (proc *p = t->procs, *nx; p; p = nx) { nx = p->next; proc_free(p); }
  while (t->npool > 0) free(t->pool[--t->npool]);
  for (pending *pd = t->pend, *nx; pd; pd = nx) { nx = pd->next; json_decref(pd->config); free(pd->tag); free(pd); }
  for (size_t i = 0; i < t->nenvs; i++) free(t->envs[i]);
  free(t->envs);
  free(t->trace);
  if (t->ctl >= 0) close(t->ctl);
  if (t->wake >= 0) close(t->wake);
  pthread_mutex_destroy(&t->mu);
  pthread_mutex_destroy(&t->send_mu);
  pthread_cond_destroy(&t->idle);
  free(t);
}

void ptab_status_string(int st, char *out, size_t cap) {
  if (WIFEXITED(st)) { snprintf(out, cap, "exit status %d", WEXITSTATUS(st)); return; }
  static const struct { int sig; const char *name; } names[] = {
      {SIGHUP, "hangup"}, {SIGINT, "interrupt"}, {SIGQUIT, "quit"}, {SIGILL, "illegal instruction"},
      {SIGTRAP, "trace/breakpoint trap"}, {SIGABRT, "aborted"}, {SIGBUS, "bus error"},
      {SIGFPE, "floating point exception"}, {SIGKILL, "killed"}, {SIGUSR1, "user defined signal 1"},
      {SIGSEGV, "segmentation fault"}, {SIGUSR2, "user defined signal 2"}, {SIGPIPE, "broken pipe"},
      {SIGALRM, "alarm clock"}, {SIGTERM, "terminated"}, {SIGXCPU, "CPU time limit exceeded"},
      {SIGXFSZ, "file size limit exceeded"}, {SIGSYS, "bad system call"}};
  int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  const char *nm = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].sig == sig) nm = names[i].name;
  if (nm) snprintf(out, cap, "signal: %s%s", nm, WCOREDUMP(st) ? " (core dumped)" : "");
  else snprintf(out, cap, "signal: signal %d%s", sig, WCOREDUMP(st) ? " (core dumped)" : "");
}
typedef struct { char *p; size_t len, cap; bool over; } buf_t;
static void buf_add(buf_t *b, const char *s, size_t n) {
  if (b->over) return;
  if (b->len + n + 1 > sizeof(init_req) + INIT_REQ_MAX) { b->over = true; return; }
  if (b->len + n + 1 > b->cap) {
    size_t nc = (b->len + n + 1) * 2;
    char *np = realloc(b->p, nc);
    if (!np) { b->over = true; return; }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len++] = 0;
}

static ptab_sub *sub_new(ptab *t) {
  ptab_sub *s = calloc(1, sizeof *s);
  if (s) { s->t = t; pthread_cond_init(&s->cv, NULL); }
  return s;
}

ptab_sub *ptab_start(ptab *t, const ptab_spawn *sp, const char **code, char *err, size_t errlen) {
  *code = "invalid_argument";
  if (sp->nargs > PTAB_MAX_ARGS || sp->nenvs > PTAB_MAX_ENVS) { snprintf(err, errlen, "too many arguments or envs"); return NULL; }
  init_req rq;
  memset(&rq, 0, sizeof rq);
  rq.type = INIT_REQ_SPAWN;
  rq.uid = sp->uid;
  rq.gid = sp->gid;
  if (sp->pty) {
    rq.flags |= INIT_F_PTY;
    rq.rows = sp->rows;
    rq.cols = sp->cols;
  } else if (sp->stdin_pipe) {
    rq.flags |= INIT_F_STDIN;
  }
  /* Strings: cwd, argv, env (PATH HOME USER LOGNAME, the table's envs, the request's; later wins). */
  size_t nall = 4 + t->nenvs + sp->nenvs;
  char **env = calloc(nall, sizeof *env);
  buf_t b = {0};
  ptab_sub *sb = NULL;
  pending *pd = NULL;
  char *tagc = NULL;
  if (!env) { *code = "internal"; snprintf(err, errlen, "out of memory"); return NULL; }
  size_t ne = 0;
  bool bad = false;
  char tmp[512];
  snprintf(tmp, sizeof tmp, "PATH=%s", PTAB_PATH); env[ne++] = strdup(tmp);
  snprintf(tmp, sizeof tmp, "HOME=%s", sp->home); env[ne++] = strdup(tmp);
  snprintf(tmp, sizeof tmp, "USER=%s", sp->user); env[ne++] = strdup(tmp);
  snprintf(tmp, sizeof tmp, "LOGNAME=%s", sp->user); env[ne++] = strdup(tmp);
  for (size_t i = 0; i < t->nenvs; i++) env[ne++] = strdup(t->envs[i]);
  for (size_t i = 0; i < sp->nenvs; i++) env[ne++] = strdup(sp->envs[i]);
  for (size_t i = 0; i < ne; i++)
    if (!env[i] || !strchr(env[i], '=') || env[i][0] == '=') {
      bad = true;
      if (!env[i]) { *code = "internal"; snprintf(err, errlen, "out of memory"); }
      else snprintf(err, errlen, "invalid env '%.100s': NAME=VALUE with a name is expected", env[i]);
      break;
    }
  buf_add(&b, (const char *)&rq, sizeof rq - 1);   /* header; buf_add appends a NUL we trim below */
  if (!b.over) b.len = sizeof rq;
  buf_add(&b, sp->cwd, strlen(sp->cwd));
  buf_add(&b, sp->cmd, strlen(sp->cmd));
  for (size_t i = 0; i < sp->nargs; i++) buf_add(&b, sp->args[i], strlen(sp->args[i]));
  size_t envc = 0;
  for (size_t i = 0; !bad && i < ne; i++) {
    size_t klen = (size_t)(strchr(env[i], '=') - env[i]);
    bool overridden = false;
    for (size_t j = i + 1; j < ne && !overridden; j++) overridden = !strncmp(env[j], env[i], klen + 1);
    if (overridden) continue;
    buf_add(&b, env[i], strlen(env[i]));
    envc++;
  }
  for (size_t i = 0; i < ne; i++) free(env[i]);
  free(env);
  if (bad) goto fail;
  if (b.over) { snprintf(err, errlen, "command, arguments and environment exceed %u bytes", INIT_REQ_MAX); goto fail; }
  rq.argc = (uint32_t)(1 + sp->nargs);
  rq.envc = (uint32_t)envc;
  sb = sub_new(t);
  pd = calloc(1, sizeof *pd);
  tagc = sp->tag ? strdup(sp->tag) : NULL;
  if (!sb || !pd || (sp->tag && !tagc)) { *code = "internal"; snprintf(err, errlen, "out of memory"); goto fail; }
  pthread_mutex_lock(&t->mu);
  if (t->ctl_eof || t->shut) {
    pthread_mutex_unlock(&t->mu);
    *code = "unavailable";
    snprintf(err, errlen, "sandbox is being destroyed");
    goto fail;
  }
  pd->seq = ++t->seq;
  pd->sub = sb;
  pd->config = json_incref(sp->config);
  pd->tag = tagc;
  pd->pty = sp->pty;
  pd->deadline = sp->lifetime_ms ? mono_ms() + sp->lifetime_ms : 0;
  pd->traced = t->trace && t->seq == 1;
  if (pd->traced) clock_gettime(CLOCK_MONOTONIC, &pd->t_sent);
  tagc = NULL;
  pd->next = t->pend;
  t->pend = pd;
  rq.seq = pd->seq;
  memcpy(b.p, &rq, sizeof rq);
  t->active++;
  pthread_mutex_unlock(&t->mu);
  if (send_req(t, b.p, b.len) != 0) {
    int e = errno;
    pthread_mutex_lock(&t->mu);
    for (pending **pp = &t->pend; *pp; pp = &(*pp)->next)
      if (*pp == pd) { *pp = pd->next; json_decref(pd->config); free(pd->tag); free(pd); break; }
    const char *c = e == EMSGSIZE ? "invalid_argument" : "unavailable";
    if (e == EMSGSIZE) snprintf(err, errlen, "command, arguments and environment are too large (%zu bytes)", b.len);
    else snprintf(err, errlen, "sandbox init is gone (%s)", strerror(e));
    sub_push(sb, ev_error(c, "%s", err));   /* the subscriber learns it as its first event */
    sb->done = true;
    pthread_mutex_unlock(&t->mu);
  }
  free(b.p);
  return sb;
fail:
  free(b.p);
  free(pd);
  free(tagc);
  if (sb) { pthread_cond_destroy(&sb->cv); free(sb); }
  return NULL;
}

/* uint32 as protobuf-JSON allows it is the caller's business; here a selector is resolved. */
static proc *find(ptab *t, const ptab_sel *sel, const char **code, char *err, size_t errlen) {   /* t->mu held */
  for (proc *p = t->procs; p; p = p->next)
    if (sel->by_pid ? (uint32_t)p->pid == sel->pid : (p->tag && sel->tag && !strcmp(p->tag, sel->tag))) return p;
  *code = "not_found";
  if (sel->by_pid) snprintf(err, errlen, "process with pid %u not found", sel->pid);
  else snprintf(err, errlen, "process with tag %.200s not found", sel->tag ? sel->tag : "");
  return NULL;
}

ptab_sub *ptab_attach(ptab *t, const ptab_sel *sel, const char **code, char *err, size_t errlen) {
  ptab_sub *sb = sub_new(t);
  if (!sb) { *code = "internal"; snprintf(err, errlen, "out of memory"); return NULL; }
  pthread_mutex_lock(&t->mu);
  proc *p = find(t, sel, code, err, errlen);
  if (p && t->shut) { *code = "unavailable"; snprintf(err, errlen, "sandbox is being destroyed"); p = NULL; }
  if (!p) {
    pthread_mutex_unlock(&t->mu);
    pthread_cond_destroy(&sb->cv);
    free(sb);
    return NULL;
  }
  ptab_ev *e = ev_new(PTAB_START, 0);
  if (e) e->pid = p->pid;
  sub_push(sb, e);
  sb->proc = p;
  sb->next = p->subs;
  p->subs = sb;
  t->active++;
  pthread_mutex_unlock(&t->mu);
  return sb;
}

ptab_ev *ptab_next(ptab_sub *sb, int64_t wait_ms) {
  ptab *t = sb->t;
  pthread_mutex_lock(&t->mu);
  if (!sb->head && wait_ms > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += wait_ms / 1000;
    ts.tv_nsec += (wait_ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    while (!sb->head && pthread_cond_timedwait(&sb->cv, &t->mu, &ts) == 0) {}
  }
  ptab_ev *e = sb->head;
  if (e) {
    bool was_full = sb->bytes >= PTAB_SUB_QUEUE_MAX;
    sb->head = e->next;
    if (!sb->head) sb->tail = NULL;
    sb->bytes -= e->len;
    if (was_full && sb->bytes < PTAB_SUB_QUEUE_MAX) wake_pump(t);   /* the pump may read that process again */
    e->next = NULL;
  }
  pthread_mutex_unlock(&t->mu);
  return e;
}

void ptab_ev_free(ptab_sub *sb, ptab_ev *e) {
  if (!e) return;
  pthread_mutex_lock(&sb->t->mu);
  ev_release(sb->t, e);
  pthread_mutex_unlock(&sb->t->mu);
}

void ptab_unsubscribe(ptab_sub *sb) {
  ptab *t = sb->t;
  pthread_mutex_lock(&t->mu);
  if (sb->proc) {
    for (ptab_sub **pp = &sb->proc->subs; *pp; pp = &(*pp)->next)
      if (*pp == sb) { *pp = sb->next; break; }
  }
  for (pending *pd = t->pend; pd; pd = pd->next)
    if (pd->sub == sb) pd->sub = NULL;
  for (ptab_ev *e = sb->head, *nx; e; e = nx) { nx = e->next; ev_release(t, e); }
  t->active--;
  pthread_cond_broadcast(&t->idle);
  pthread_mutex_unlock(&t->mu);
  pthread_cond_destroy(&sb->cv);
  free(sb);
  wake_pump(t);   /* a throttling subscriber may be gone */
}

ptab_info *ptab_list(ptab *t, size_t *n) {
  pthread_mutex_lock(&t->mu);
  size_t k = 0;
  for (proc *p = t->procs; p; p = p->next) k++;
  ptab_info *v = calloc(k ? k : 1, sizeof *v);
  size_t i = 0;
  for (proc *p = t->procs; v && p; p = p->next, i++) {
    v[i].pid = p->pid;
    v[i].tag = p->tag ? strdup(p->tag) : NULL;
    v[i].config = json_incref(p->config);
  }
  pthread_mutex_unlock(&t->mu);
  *n = v ? k : 0;
  return v;
}

void ptab_list_free(ptab_info *v, size_t n) {
  for (size_t i = 0; i < n; i++) { free(v[i].tag); json_decref(v[i].config); }
  free(v);
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  int rc = 0;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {   /* the pty master is non-blocking for the pump */
      struct pollfd pf = {fd, POLLOUT, 0};
      if (poll(&pf, 1, -1) < 0 && errno != EINTR) { rc = -1; break; }
      continue;
    }
    if (w < 0) { rc = -1; break; }
    p += w;
    n -= (size_t)w;
  }
  int e = errno;
  if (rc != 0 && e == EPIPE) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) == SIGPIPE) {}
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = e;
  return rc;
}

const char *ptab_input(ptab *t, const ptab_sel *sel, bool pty, const void *data, size_t len, char *err, size_t errlen) {
  const char *code = NULL;
  pthread_mutex_lock(&t->mu);
  proc *p = find(t, sel, &code, err, errlen);
  int fd = -1;
  if (p && !pty && p->pty) { code = "internal"; snprintf(err, errlen, "cannot send stdin to a PTY process, use pty input"); }
  else if (p && pty && !p->pty) { code = "internal"; snprintf(err, errlen, "cannot send pty input to a process without a PTY"); }
  else if (p) {
    int src = p->pty ? p->pty_fd : p->in_fd;
    if (src < 0) {
      code = "internal";
      snprintf(err, errlen, "%s", p->pty ? "error writing to pty: pty is closed" : "error writing to stdin: stdin not enabled or closed");
    } else if ((fd = fcntl(src, F_DUPFD_CLOEXEC, 0)) < 0) {
      code = "internal";
      snprintf(err, errlen, "dup failed: %s", strerror(errno));
    }
  }
  pthread_mutex_unlock(&t->mu);
  if (code) return code;
  /* Written without the lock: a process that does not read blocks only this request. */
  int rc = write_all(fd, data, len);
  int e = errno;
  close(fd);
  if (rc != 0) { snprintf(err, errlen, "error writing to process input: %s", strerror(e)); return "internal"; }
  return NULL;
}

const char *ptab_close_stdin(ptab *t, const ptab_sel *sel, char *err, size_t errlen) {
  const char *code = NULL;
  pthread_mutex_lock(&t->mu);
  proc *p = find(t, sel, &code, err, errlen);
  if (p && p->pty) { code = "unknown"; snprintf(err, errlen, "cannot close stdin of a PTY process, send EOT (Ctrl-D) instead"); }
  else if (p && p->in_fd >= 0) { close(p->in_fd); p->in_fd = -1; }
  pthread_mutex_unlock(&t->mu);
  return code;
}

const char *ptab_signal(ptab *t, const ptab_sel *sel, int sig, char *err, size_t errlen) {
  const char *code = NULL;
  pthread_mutex_lock(&t->mu);
  proc *p = find(t, sel, &code, err, errlen);
  int32_t pid = p ? p->pid : 0;
  pthread_mutex_unlock(&t->mu);
  if (!p) return code;
  send_kill(t, pid, sig, false);   /* also when the leader exited but its group still holds the output */
  return NULL;
}

const char *ptab_resize(ptab *t, const ptab_sel *sel, bool resize, uint16_t rows, uint16_t cols, char *err, size_t errlen) {
  const char *code = NULL;
  pthread_mutex_lock(&t->mu);
  proc *p = find(t, sel, &code, err, errlen);
  if (p && !p->pty) { code = "internal"; snprintf(err, errlen, "process is not a PTY, cannot resize"); }
  else if (p && resize) {
    struct winsize ws = {.ws_row = rows, .ws_col = cols};
    if (p->pty_fd < 0 || ioctl(p->pty_fd, TIOCSWINSZ, &ws) != 0) { code = "internal"; snprintf(err, errlen, "error resizing pty: pty is closed"); }
  }
  pthread_mutex_unlock(&t->mu);
  return code;
}
