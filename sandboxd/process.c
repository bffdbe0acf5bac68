/* process.c — envd's process.Process service for one sandbox (wire reference §5.3), on top of
 * the init channel (init.h). See process.h for the threading and backpressure model. */
#include "process.h"
#include "b64.h"

#include "init.h"
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define PT_DEFAULT_KEEPALIVE_S 90
#define PT_CLOSED_CHECK_MS 1000   /* how often an idle stream notices its client left */
#define PT_MAX_ENVS 4096
#define PT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

enum { EV_START = 1, EV_DATA, EV_END, EV_ERROR };
enum { ST_STDOUT, ST_STDERR, ST_PTY };

typedef struct ev {
  struct ev *next;
  int kind, stream;
  int32_t pid;
  int status;             /* EV_END: wait status */
  const char *code;       /* EV_ERROR: Connect code */
  size_t len;
  char data[];            /* EV_DATA bytes; EV_ERROR message */
} ev;

typedef struct sub {
  struct sub *next;       /* in proc->subs */
  ev *head, *tail;
  size_t bytes;
  bool done;              /* END/ERROR queued: nothing more will come */
  pthread_cond_t cv;
  struct proc *proc;      /* NULL while pending or after the end */
} sub;

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
  sub *subs;
} proc;

typedef struct pending {
  struct pending *next;
  uint32_t seq;
  sub *sub;
  json_t *config;
  char *tag;
  bool pty;
  int64_t deadline;
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
  int active;             /* RPC handlers using this table */
  char **envs;
  size_t nenvs;
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void wake_pump(ptab *t) {
  uint64_t one = 1;
  if (write(t->wake, &one, sizeof one) < 0) { /* counter saturated: the pump is awake anyway */ }
}

/* ---- base64 in: standard or URL-safe, padded or not, any trailing '=' (encoding is core's
 * mb_b64_encode) ---- */
static int b64_val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

/* Returns a malloc'd buffer (NUL-terminated for convenience) or NULL on invalid input. */
static unsigned char *b64_decode(const char *in, size_t len, size_t *olen) {
  while (len > 0 && in[len - 1] == '=') len--;
  if (len % 4 == 1) return NULL;
  unsigned char *o = malloc(len / 4 * 3 + 3), *q = o;
  if (!o) return NULL;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < len; i++) {
    int v = b64_val((unsigned char)in[i]);
    if (v < 0) { free(o); return NULL; }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) { bits -= 8; *q++ = (unsigned char)(acc >> bits); acc &= (1u << bits) - 1; }
  }
  *q = 0;
  *olen = (size_t)(q - o);
  return o;
}

/* ---- queues ---- */
static ev *ev_new(int kind, size_t len) {
  ev *e = calloc(1, sizeof *e + len + 1);
  if (e) { e->kind = kind; e->len = len; }
  return e;
}

static void sub_push(sub *s, ev *e) {   /* t->mu held */
  if (!e) return;
  e->next = NULL;
  if (s->tail) s->tail->next = e;
  else s->head = e;
  s->tail = e;
  s->bytes += e->len;
  pthread_cond_signal(&s->cv);
}

static ev *ev_error(const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ev *e = ev_new(EV_ERROR, strlen(msg));
  if (e) { e->code = code; memcpy(e->data, msg, e->len); e->len = 0; }
  return e;
}

static bool throttled(const proc *p) {
  for (const sub *s = p->subs; s; s = s->next)
    if (s->bytes >= PT_SUB_QUEUE_MAX) return true;
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
static void dispatch(proc *p, int stream, const char *buf, size_t n) {   /* t->mu held */
  for (sub *s = p->subs; s; s = s->next) {
    ev *e = ev_new(EV_DATA, n);
    if (!e) continue;   /* out of memory: this subscriber misses a chunk rather than the daemon dying */
    e->stream = stream;
    memcpy(e->data, buf, n);
    sub_push(s, e);
  }
}

static void finish(ptab *t, proc *p) {   /* t->mu held; p exited and its output is drained */
  for (sub *s = p->subs, *nx; s; s = nx) {
    nx = s->next;
    ev *e = ev_new(EV_END, 0);
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
      if (rfds[i] >= 0) fcntl(rfds[i], F_SETFL, fcntl(rfds[i], F_GETFL) | O_NONBLOCK);
    p->next = t->procs;
    t->procs = p;
    if (pd->sub) {
      ev *e = ev_new(EV_START, 0);
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
        if (p->pid == m->pid && !p->exited) { p->exited = true; p->status = m->status; break; }
  }
}

static void read_ctl(ptab *t) {   /* t->mu held */
  init_msg m;
  union { char buf[CMSG_SPACE(sizeof(int) * 3)]; struct cmsghdr align; } u;
  struct iovec iov = {&m, sizeof m};
  struct msghdr mh = {0};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.buf;
  mh.msg_controllen = sizeof u.buf;
  ssize_t n = recvmsg(t->ctl, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  int fds[3], nfds = 0;
  for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (nfds < 3) fds[nfds++] = fd;
        else close(fd);
      }
    }
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
  if ((size_t)n != sizeof m || (mh.msg_flags & MSG_CTRUNC)) {
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
  char *buf = malloc(PT_PIPE_CHUNK);
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
    int64_t now = now_ms(), next = -1;
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
      size_t chunk = p->pty ? PT_PTY_CHUNK : PT_PIPE_CHUNK;
      ssize_t got = read(*fdp, buf, chunk);
      if (got > 0) {
        if (p->subs && !t->shut) dispatch(p, p->pty ? ST_PTY : which[i] == 1 ? ST_STDERR : ST_STDOUT, buf, (size_t)got);
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

ptab *ptab_create(int ctl_fd, const char *const *envs, char *err, size_t errlen) {
  ptab *t = calloc(1, sizeof *t);
  if (!t) { snprintf(err, errlen, "out of memory"); close(ctl_fd); return NULL; }
  t->ctl = ctl_fd;
  t->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  pthread_mutex_init(&t->mu, NULL);
  pthread_mutex_init(&t->send_mu, NULL);
  pthread_cond_init(&t->idle, NULL);
  size_t n = 0;
  while (envs && envs[n]) n++;
  if (n > PT_MAX_ENVS) { snprintf(err, errlen, "too many envVars (%zu, max %d)", n, PT_MAX_ENVS); goto fail; }
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
  for (pending *pd = t->pend, *nx; pd; pd = nx) { nx = pd->next; json_decref(pd->config); free(pd->tag); free(pd); }
  for (size_t i = 0; i < t->nenvs; i++) free(t->envs[i]);
  free(t->envs);
  if (t->ctl >= 0) close(t->ctl);
  if (t->wake >= 0) close(t->wake);
  pthread_mutex_destroy(&t->mu);
  pthread_mutex_destroy(&t->send_mu);
  pthread_cond_destroy(&t->idle);
  free(t);
}

void process_kill_all(sbx_t *s) {
  sbx_kill_init(s);
  ptab_shutdown(sbx_ptab(s));
}

/* ---- request helpers ---- */
static json_t *parse_body(sd_request *r, bool stream, char *err, size_t errlen) {
  size_t len;
  const uint8_t *b = sd_body(r, &len);
  if (stream) {   /* one Connect envelope: flags, big-endian length, JSON */
    if (!b || len < 5) { snprintf(err, errlen, "missing request envelope"); return NULL; }
    if (b[0] != 0) { snprintf(err, errlen, "unsupported envelope flags 0x%02x (compression is not supported)", b[0]); return NULL; }
    uint32_t n = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (n != len - 5) { snprintf(err, errlen, "envelope length %" PRIu32 " does not match body (%zu bytes)", n, len - 5); return NULL; }
    b += 5;
    len -= 5;
  }
  json_error_t je;
  json_t *j = len ? json_loadb((const char *)b, len, 0, &je) : json_object();
  if (!j) { snprintf(err, errlen, "invalid JSON: %s", je.text); return NULL; }
  if (!json_is_object(j)) { json_decref(j); snprintf(err, errlen, "request must be a JSON object"); return NULL; }
  return j;
}

static json_t *getk(json_t *o, const char *camel, const char *snake) {
  json_t *v = json_object_get(o, camel);
  if (!v && snake) v = json_object_get(o, snake);
  return json_is_null(v) ? NULL : v;
}

/* uint32 as protobuf-JSON allows: number or numeric string. */
static int get_u32(json_t *v, uint32_t *out) {
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > UINT32_MAX) return -1;
    *out = (uint32_t)x;
    return 0;
  }
  if (json_is_string(v)) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(json_string_value(v), &end, 10);
    if (errno || *end || end == json_string_value(v) || x > UINT32_MAX) return -1;
    *out = (uint32_t)x;
    return 0;
  }
  return -1;
}

/* ProcessSelector: {"pid":N} or {"tag":"..."}; returns the live proc (t->mu held) or NULL. */
static proc *select_proc(ptab *t, json_t *sel, char *err, size_t errlen, const char **code) {
  json_t *pid = getk(sel, "pid", NULL), *tag = getk(sel, "tag", NULL);
  uint32_t n;
  *code = "invalid_argument";
  if (pid) {
    if (get_u32(pid, &n) != 0) { snprintf(err, errlen, "invalid pid"); return NULL; }
    for (proc *p = t->procs; p; p = p->next)
      if ((uint32_t)p->pid == n) return p;
    *code = "not_found";
    snprintf(err, errlen, "process with pid %" PRIu32 " not found", n);
    return NULL;
  }
  if (json_is_string(tag)) {
    for (proc *p = t->procs; p; p = p->next)
      if (p->tag && !strcmp(p->tag, json_string_value(tag))) return p;
    *code = "not_found";
    snprintf(err, errlen, "process with tag %s not found", json_string_value(tag));
    return NULL;
  }
  snprintf(err, errlen, "process selector needs a pid or a tag");
  return NULL;
}

static int64_t header_ms(sd_request *r, const char *name, int64_t dflt, int64_t max) {
  const char *h = sd_header(r, name);
  if (!h || !*h) return dflt;
  char *end;
  errno = 0;
  long long v = strtoll(h, &end, 10);
  if (errno || *end || v < 0) return dflt;
  return v > max ? max : v;
}

/* "exit status 1" / "signal: killed" exactly as Go's os.ProcessState.String(). */
static void status_string(int st, char *out, size_t cap) {
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

static json_t *event_json(const ev *e) {
  json_t *inner = NULL;
  if (e->kind == EV_START) {
    inner = json_pack("{s:{s:I}}", "start", "pid", (json_int_t)e->pid);
  } else if (e->kind == EV_DATA) {
    char *b = malloc(mb_b64_encoded_len(e->len) + 1);
    if (!b) return NULL;
    mb_b64_encode(e->data, e->len, b);
    inner = json_pack("{s:{s:s}}", "data", e->stream == ST_PTY ? "pty" : e->stream == ST_STDERR ? "stderr" : "stdout", b);
    free(b);
  } else if (e->kind == EV_END) {
    char st[96];
    status_string(e->status, st, sizeof st);
    json_t *end = json_object();
    bool exited = WIFEXITED(e->status);
    int code = exited ? WEXITSTATUS(e->status) : -1;
    if (code) json_object_set_new(end, "exitCode", json_integer(code));
    if (exited) json_object_set_new(end, "exited", json_true());
    json_object_set_new(end, "status", json_string(st));
    if (code) json_object_set_new(end, "error", json_string(st));
    inner = json_pack("{s:o}", "end", end);
  }
  return inner ? json_pack("{s:o}", "event", inner) : NULL;
}

/* Serve one subscription until its end; consumes `sb` (unsubscribes and frees it). */
static void serve_stream(ptab *t, sub *sb, sd_stream *st, int64_t deadline, int64_t keepalive_ms, bool started) {
  int64_t last = now_ms();
  for (;;) {
    pthread_mutex_lock(&t->mu);
    ev *e = NULL;
    bool timed_out = false, ka = false, gone = false;
    while (!(e = sb->head)) {
      int64_t now = now_ms();
      if (deadline && now >= deadline) { timed_out = true; break; }
      if (started && now - last >= keepalive_ms) { ka = true; break; }
      if (sd_stream_closed(st)) { gone = true; break; }
      int64_t until = now + PT_CLOSED_CHECK_MS;
      if (started && last + keepalive_ms < until) until = last + keepalive_ms;
      if (deadline && deadline < until) until = deadline;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      int64_t add = until - now;
      ts.tv_sec += add / 1000;
      ts.tv_nsec += (add % 1000) * 1000000;
      if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
      pthread_cond_timedwait(&sb->cv, &t->mu, &ts);
    }
    if (e) {
      bool was_full = sb->bytes >= PT_SUB_QUEUE_MAX;
      sb->head = e->next;
      if (!sb->head) sb->tail = NULL;
      sb->bytes -= e->len;
      if (was_full && sb->bytes < PT_SUB_QUEUE_MAX) wake_pump(t);
    }
    pthread_mutex_unlock(&t->mu);
    int rc = 0;
    if (timed_out) {
      sd_stream_end_connect(st, "deadline_exceeded", "the operation timed out");
      break;
    }
    if (gone) { sd_stream_end(st); break; }
    if (ka) {
      rc = sd_stream_send_message(st, json_pack("{s:{s:{}}}", "event", "keepalive"));
    } else if (e->kind == EV_ERROR) {
      sd_stream_end_connect(st, e->code, e->data);
      free(e);
      break;
    } else {
      json_t *j = event_json(e);
      int kind = e->kind;
      if (kind == EV_START) started = true;
      free(e);
      rc = j ? sd_stream_send_message(st, j) : -1;
      if (rc == 0 && kind == EV_END) { sd_stream_end_connect(st, NULL, NULL); break; }
    }
    if (rc != 0) { sd_stream_end(st); break; }   /* client gone: the process keeps running */
    last = now_ms();
  }
  /* Unsubscribe. */
  pthread_mutex_lock(&t->mu);
  if (sb->proc) {
    for (sub **pp = &sb->proc->subs; *pp; pp = &(*pp)->next)
      if (*pp == sb) { *pp = sb->next; break; }
  }
  for (pending *pd = t->pend; pd; pd = pd->next)
    if (pd->sub == sb) pd->sub = NULL;
  for (ev *e = sb->head, *nx; e; e = nx) { nx = e->next; free(e); }
  pthread_mutex_unlock(&t->mu);
  pthread_cond_destroy(&sb->cv);
  free(sb);
  wake_pump(t);   /* a throttling subscriber may be gone */
}

static sub *sub_new(void) {
  sub *s = calloc(1, sizeof *s);
  if (s) pthread_cond_init(&s->cv, NULL);
  return s;
}

/* Basic-auth user, else the default user "user". */
static int resolve_user(sd_request *r, uid_t *uid, gid_t *gid, const char **home, char *err, size_t errlen) {
  const char *h = sd_header(r, "Authorization");
  char name[256] = "user";
  if (h && *h) {
    if (strncasecmp(h, "Basic ", 6) != 0) { snprintf(err, errlen, "invalid authorization header"); return -1; }
    size_t n;
    unsigned char *d = b64_decode(h + 6, strlen(h + 6), &n);
    if (!d) { snprintf(err, errlen, "invalid authorization header"); return -1; }
    char *colon = memchr(d, ':', n);
    size_t ulen = colon ? (size_t)(colon - (char *)d) : n;
    if (ulen >= sizeof name) ulen = sizeof name - 1;
    memcpy(name, d, ulen);
    name[ulen] = 0;
    free(d);
  }
  if (sbx_lookup_user(name, uid, gid, home) != 0) {
    snprintf(err, errlen, "invalid username: '%s'", name);
    return -1;
  }
  return 0;
}

/* envd's ExpandAndResolve: "~" and relative paths are relative to home; result is cleaned. */
static int resolve_cwd(const char *cwd, const char *home, char *out, size_t cap) {
  char tmp[8192];
  if (!cwd || !*cwd) snprintf(tmp, sizeof tmp, "%s", home);
  else if (cwd[0] == '~' && (cwd[1] == 0 || cwd[1] == '/')) snprintf(tmp, sizeof tmp, "%s%s", home, cwd + 1);
  else if (cwd[0] != '/') snprintf(tmp, sizeof tmp, "%s/%s", home, cwd);
  else snprintf(tmp, sizeof tmp, "%s", cwd);
  if (strlen(tmp) >= cap - 1) return -1;
  size_t o = 0;
  out[o++] = '/';
  for (char *save = NULL, *seg = strtok_r(tmp, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
    if (!strcmp(seg, ".")) continue;
    if (!strcmp(seg, "..")) {
      while (o > 1 && out[o - 1] != '/') o--;
      if (o > 1) o--;
      continue;
    }
    if (o > 1) out[o++] = '/';
    size_t l = strlen(seg);
    memcpy(out + o, seg, l);
    o += l;
  }
  out[o] = 0;
  return 0;
}

/* Growable request buffer, bounded by INIT_REQ_MAX. */
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

static void rpc_start(sd_request *r, sbx_t *sx, ptab *t) {
  sd_stream *st = sd_stream_open(r, "application/connect+json");
  if (!st) return;
  char err[512];
  const char *code = "invalid_argument";
  json_t *req = parse_body(r, true, err, sizeof err);
  buf_t b = {0};
  json_t *config = NULL;
  sub *sb = NULL;
  if (!req) goto fail;
  json_t *proc_j = getk(req, "process", NULL);
  json_t *cmd = proc_j ? getk(proc_j, "cmd", NULL) : NULL;
  if (!json_is_object(proc_j) || !json_is_string(cmd) || !json_string_value(cmd)[0]) {
    snprintf(err, sizeof err, "process.cmd is required");
    goto fail;
  }
  json_t *args = getk(proc_j, "args", NULL), *envs = getk(proc_j, "envs", NULL), *cwd_j = getk(proc_j, "cwd", NULL);
  json_t *pty = getk(req, "pty", NULL), *tag = getk(req, "tag", NULL), *stdin_j = getk(req, "stdin", NULL);
  if ((args && !json_is_array(args)) || (envs && !json_is_object(envs)) || (cwd_j && !json_is_string(cwd_j)) ||
      (tag && !json_is_string(tag)) || (stdin_j && !json_is_boolean(stdin_j)) || (pty && !json_is_object(pty))) {
    snprintf(err, sizeof err, "malformed StartRequest");
    goto fail;
  }
  uid_t uid;
  gid_t gid;
  const char *home;
  if (resolve_user(r, &uid, &gid, &home, err, sizeof err) != 0) { code = "unauthenticated"; goto fail; }
  const char *name = uid == 0 ? "root" : "user";
  /* Unprivileged sandboxd maps a single id: every command runs as root inside (which is the
   * sandboxd user outside, exactly what `user` would be), with the user's home and name. */
  if (sbx_host_uid(sx, uid) == (uid_t)-1) uid = gid = 0;
  char cwd[4096];
  if (resolve_cwd(cwd_j ? json_string_value(cwd_j) : NULL, home, cwd, sizeof cwd) != 0) {
    snprintf(err, sizeof err, "cwd too long");
    goto fail;
  }
  init_req rq;
  memset(&rq, 0, sizeof rq);
  rq.type = INIT_REQ_SPAWN;
  rq.uid = uid;
  rq.gid = gid;
  if (pty) {
    rq.flags |= INIT_F_PTY;
    json_t *size = getk(pty, "size", NULL);
    uint32_t c = 0, rw = 0;
    if (size && ((getk(size, "cols", NULL) && get_u32(getk(size, "cols", NULL), &c) != 0) ||
                 (getk(size, "rows", NULL) && get_u32(getk(size, "rows", NULL), &rw) != 0))) {
      snprintf(err, sizeof err, "invalid pty size");
      goto fail;
    }
    rq.cols = (uint16_t)(c > 65535 ? 65535 : c);
    rq.rows = (uint16_t)(rw > 65535 ? 65535 : rw);
  } else if (!stdin_j || json_is_true(stdin_j)) {
    rq.flags |= INIT_F_STDIN;   /* absent means a pipe (older clients) */
  }
  /* Strings: cwd, argv, env (PATH HOME USER LOGNAME, sandbox envVars, request envs; later wins). */
  size_t nargs = args ? json_array_size(args) : 0, nreq = envs ? json_object_size(envs) : 0;
  if (nargs > 65536 || nreq > PT_MAX_ENVS) { snprintf(err, sizeof err, "too many arguments or envs"); goto fail; }
  size_t nall = 4 + t->nenvs + nreq;
  char **env = calloc(nall, sizeof *env);
  if (!env) { code = "internal"; snprintf(err, sizeof err, "out of memory"); goto fail; }
  size_t ne = 0;
  bool oom = false;
  char tmp[512];
  snprintf(tmp, sizeof tmp, "PATH=%s", PT_PATH); env[ne++] = strdup(tmp);
  snprintf(tmp, sizeof tmp, "HOME=%s", home); env[ne++] = strdup(tmp);
  snprintf(tmp, sizeof tmp, "USER=%s", name); env[ne++] = strdup(tmp);
  snprintf(tmp, sizeof tmp, "LOGNAME=%s", name); env[ne++] = strdup(tmp);
  for (size_t i = 0; i < t->nenvs; i++) env[ne++] = strdup(t->envs[i]);
  const char *k;
  json_t *v;
  json_object_foreach(envs, k, v) {
    if (!json_is_string(v) || !*k || strchr(k, '=')) { snprintf(err, sizeof err, "invalid env %s", k); oom = true; break; }
    size_t l = strlen(k) + json_string_length(v) + 2;
    char *e = malloc(l);
    if (e) snprintf(e, l, "%s=%s", k, json_string_value(v));
    env[ne++] = e;
  }
  for (size_t i = 0; i < ne; i++) if (!env[i]) { oom = true; snprintf(err, sizeof err, "out of memory"); }
  buf_add(&b, (const char *)&rq, sizeof rq - 1);   /* header; buf_add appends a NUL we trim below */
  if (!b.over) b.len = sizeof rq;
  buf_add(&b, cwd, strlen(cwd));
  buf_add(&b, json_string_value(cmd), json_string_length(cmd));
  size_t argc = 1;
  for (size_t i = 0; !oom && i < nargs; i++) {
    json_t *a = json_array_get(args, i);
    if (!json_is_string(a)) { snprintf(err, sizeof err, "process.args must be strings"); oom = true; break; }
    buf_add(&b, json_string_value(a), json_string_length(a));
    argc++;
  }
  size_t envc = 0;
  for (size_t i = 0; !oom && i < ne; i++) {
    size_t klen = (size_t)(strchr(env[i], '=') - env[i]);
    bool overridden = false;
    for (size_t j = i + 1; j < ne && !overridden; j++)
      overridden = !strncmp(env[j], env[i], klen + 1);
    if (overridden) continue;
    buf_add(&b, env[i], strlen(env[i]));
    envc++;
  }
  for (size_t i = 0; i < ne; i++) free(env[i]);
  free(env);
  if (oom) goto fail;
  if (b.over) { snprintf(err, sizeof err, "command, arguments and environment exceed %u bytes", INIT_REQ_MAX); goto fail; }
  rq.argc = (uint32_t)argc;
  rq.envc = (uint32_t)envc;
  config = json_object();
  json_object_set(config, "cmd", cmd);
  json_object_set_new(config, "args", args ? json_deep_copy(args) : json_array());
  json_object_set_new(config, "envs", envs ? json_deep_copy(envs) : json_object());
  if (cwd_j) json_object_set(config, "cwd", cwd_j);
  int64_t lifetime = header_ms(r, "Connect-Timeout-Ms", 0, (int64_t)1 << 40);
  int64_t deadline = lifetime ? now_ms() + lifetime : 0;
  int64_t ka = header_ms(r, "Keepalive-Ping-Interval", PT_DEFAULT_KEEPALIVE_S, 3600);
  if (ka < 1) ka = 1;
  sb = sub_new();
  pending *pd = calloc(1, sizeof *pd);
  char *tagc = tag ? strdup(json_string_value(tag)) : NULL;
  if (!sb || !pd || (tag && !tagc)) { free(pd); free(tagc); code = "internal"; snprintf(err, sizeof err, "out of memory"); goto fail; }
  pthread_mutex_lock(&t->mu);
  if (t->ctl_eof || t->shut) {
    pthread_mutex_unlock(&t->mu);
    free(pd); free(tagc);
    code = "unavailable";
    snprintf(err, sizeof err, "sandbox is being destroyed");
    goto fail;
  }
  pd->seq = ++t->seq;
  pd->sub = sb;
  pd->config = config;
  pd->tag = tagc;
  pd->pty = pty != NULL;
  pd->deadline = deadline;
  config = NULL;
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
    pthread_mutex_unlock(&t->mu);
    code = e == EMSGSIZE ? "invalid_argument" : "unavailable";
    if (e == EMSGSIZE) snprintf(err, sizeof err, "command, arguments and environment are too large (%zu bytes)", b.len);
    else snprintf(err, sizeof err, "sandbox init is gone (%s)", strerror(e));
    sub_push(sb, ev_error(code, "%s", err));
  }
  free(b.p);
  json_decref(req);
  serve_stream(t, sb, st, deadline, ka * 1000, false);
  pthread_mutex_lock(&t->mu);
  t->active--;
  pthread_cond_broadcast(&t->idle);
  pthread_mutex_unlock(&t->mu);
  return;
fail:
  if (sb) { pthread_cond_destroy(&sb->cv); free(sb); }
  json_decref(config);
  free(b.p);
  json_decref(req);
  sd_stream_end_connect(st, code, err);
}

static void rpc_connect(sd_request *r, ptab *t) {
  sd_stream *st = sd_stream_open(r, "application/connect+json");
  if (!st) return;
  char err[512];
  const char *code = "invalid_argument";
  json_t *req = parse_body(r, true, err, sizeof err);
  if (!req) { sd_stream_end_connect(st, code, err); return; }
  json_t *sel = getk(req, "process", NULL);
  sub *sb = sub_new();
  if (!sb) { json_decref(req); sd_stream_end_connect(st, "internal", "out of memory"); return; }
  pthread_mutex_lock(&t->mu);
  proc *p = json_is_object(sel) ? select_proc(t, sel, err, sizeof err, &code) : NULL;
  if (!json_is_object(sel)) snprintf(err, sizeof err, "process selector is required");
  if (!p || t->shut) {
    pthread_mutex_unlock(&t->mu);
    json_decref(req);
    pthread_cond_destroy(&sb->cv);
    free(sb);
    sd_stream_end_connect(st, p ? "unavailable" : code, p ? "sandbox is being destroyed" : err);
    return;
  }
  ev *e = ev_new(EV_START, 0);
  if (e) e->pid = p->pid;
  sub_push(sb, e);
  sb->proc = p;
  sb->next = p->subs;
  p->subs = sb;
  t->active++;
  pthread_mutex_unlock(&t->mu);
  json_decref(req);
  int64_t lifetime = header_ms(r, "Connect-Timeout-Ms", 0, (int64_t)1 << 40);
  int64_t ka = header_ms(r, "Keepalive-Ping-Interval", PT_DEFAULT_KEEPALIVE_S, 3600);
  serve_stream(t, sb, st, lifetime ? now_ms() + lifetime : 0, (ka < 1 ? 1 : ka) * 1000, false);
  pthread_mutex_lock(&t->mu);
  t->active--;
  pthread_cond_broadcast(&t->idle);
  pthread_mutex_unlock(&t->mu);
}

/* SIGPIPE is blocked for the write and a pending one consumed: a process that closed its stdin
 * must give the caller EPIPE, not kill sandboxd. */
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

static void rpc_unary(sd_request *r, ptab *t, const char *method) {
  char err[512];
  json_t *req = parse_body(r, false, err, sizeof err);
  if (!req) { sd_reply_connect_error(r, "invalid_argument", "%s", err); return; }
  if (!strcmp(method, "List")) {
    json_t *list = json_array();
    pthread_mutex_lock(&t->mu);
    for (proc *p = t->procs; p; p = p->next) {
      json_t *o = json_pack("{s:O,s:I}", "config", p->config, "pid", (json_int_t)p->pid);
      if (o && p->tag) json_object_set_new(o, "tag", json_string(p->tag));
      if (o) json_array_append_new(list, o);
    }
    pthread_mutex_unlock(&t->mu);
    json_decref(req);
    sd_reply_json(r, 200, json_pack("{s:o}", "processes", list));
    return;
  }
  json_t *sel = getk(req, "process", NULL);
  if (!json_is_object(sel)) {
    json_decref(req);
    sd_reply_connect_error(r, "invalid_argument", "process selector is required");
    return;
  }
  const char *code;
  pthread_mutex_lock(&t->mu);
  proc *p = select_proc(t, sel, err, sizeof err, &code);
  if (!p) {
    pthread_mutex_unlock(&t->mu);
    json_decref(req);
    sd_reply_connect_error(r, code, "%s", err);
    return;
  }
  if (!strcmp(method, "SendInput")) {
    json_t *in = getk(req, "input", NULL);
    json_t *sin = in ? getk(in, "stdin", NULL) : NULL, *spty = in ? getk(in, "pty", NULL) : NULL;
    const char *ecode = NULL, *emsg = NULL;
    int fd = -1;
    if (!json_is_string(sin) && !json_is_string(spty)) { ecode = "invalid_argument"; emsg = "input.stdin or input.pty is required"; }
    else if (json_is_string(sin) && p->pty) { ecode = "internal"; emsg = "cannot send stdin to a PTY process, use pty input"; }
    else if (json_is_string(spty) && !p->pty) { ecode = "internal"; emsg = "cannot send pty input to a process without a PTY"; }
    else {
      int src = p->pty ? p->pty_fd : p->in_fd;
      if (src < 0) { ecode = "internal"; emsg = p->pty ? "error writing to pty: pty is closed" : "error writing to stdin: stdin not enabled or closed"; }
      else if ((fd = fcntl(src, F_DUPFD_CLOEXEC, 0)) < 0) { ecode = "internal"; emsg = "dup failed"; }
    }
    pthread_mutex_unlock(&t->mu);
    if (ecode) { json_decref(req); sd_reply_connect_error(r, ecode, "%s", emsg); return; }
    json_t *data = json_is_string(sin) ? sin : spty;
    size_t n;
    unsigned char *bytes = b64_decode(json_string_value(data), json_string_length(data), &n);
    json_decref(req);
    if (!bytes) { close(fd); sd_reply_connect_error(r, "invalid_argument", "input is not valid base64"); return; }
    /* Written without the lock: a process that does not read blocks only this request. */
    int rc = write_all(fd, bytes, n);
    int e = errno;
    free(bytes);
    close(fd);
    if (rc != 0) { sd_reply_connect_error(r, "internal", "error writing to process input: %s", strerror(e)); return; }
    sd_reply_json(r, 200, json_object());
    return;
  }
  if (!strcmp(method, "CloseStdin")) {
    bool is_pty = p->pty;
    if (!is_pty && p->in_fd >= 0) { close(p->in_fd); p->in_fd = -1; }
    pthread_mutex_unlock(&t->mu);
    json_decref(req);
    if (is_pty) sd_reply_connect_error(r, "unknown", "cannot close stdin of a PTY process, send EOT (Ctrl-D) instead");
    else sd_reply_json(r, 200, json_object());
    return;
  }
  if (!strcmp(method, "SendSignal")) {
    json_t *sg = getk(req, "signal", NULL);
    int sig = 0;
    if (json_is_string(sg)) {
      const char *s = json_string_value(sg);
      sig = !strcmp(s, "SIGNAL_SIGKILL") ? SIGKILL : !strcmp(s, "SIGNAL_SIGTERM") ? SIGTERM : 0;
    } else if (json_is_integer(sg)) {
      json_int_t v = json_integer_value(sg);
      sig = v == SIGKILL || v == SIGTERM ? (int)v : 0;
    }
    int32_t pid = p->pid;
    pthread_mutex_unlock(&t->mu);
    json_decref(req);
    if (!sig) { sd_reply_connect_error(r, "unimplemented", "invalid signal: only SIGNAL_SIGTERM and SIGNAL_SIGKILL are supported"); return; }
    send_kill(t, pid, sig, false);   /* also when the leader exited but its group still holds the output */
    sd_reply_json(r, 200, json_object());
    return;
  }
  if (!strcmp(method, "Update")) {
    json_t *pty = getk(req, "pty", NULL), *size = pty ? getk(pty, "size", NULL) : NULL;
    const char *ecode = NULL, *emsg = NULL;
    uint32_t c = 0, rw = 0;
    if (!p->pty) { ecode = "internal"; emsg = "process is not a PTY, cannot resize"; }
    else if (size && ((getk(size, "cols", NULL) && get_u32(getk(size, "cols", NULL), &c) != 0) ||
                      (getk(size, "rows", NULL) && get_u32(getk(size, "rows", NULL), &rw) != 0))) {
      ecode = "invalid_argument"; emsg = "invalid pty size";
    } else if (size) {
      struct winsize ws = {.ws_row = (unsigned short)(rw > 65535 ? 65535 : rw), .ws_col = (unsigned short)(c > 65535 ? 65535 : c)};
      if (p->pty_fd < 0 || ioctl(p->pty_fd, TIOCSWINSZ, &ws) != 0) { ecode = "internal"; emsg = "error resizing pty: pty is closed"; }
    }
    pthread_mutex_unlock(&t->mu);
    json_decref(req);
    if (ecode) sd_reply_connect_error(r, ecode, "%s", emsg);
    else sd_reply_json(r, 200, json_object());
    return;
  }
  pthread_mutex_unlock(&t->mu);
  json_decref(req);
  sd_reply_connect_error(r, "unimplemented", "process.Process/%s is not implemented", method);
}

void process_rpc(struct sd_request *r, sbx_t *s, const char *method) {
  ptab *t = sbx_ptab(s);
  if (!strcmp(method, "Start")) rpc_start(r, s, t);
  else if (!strcmp(method, "Connect")) rpc_connect(r, t);
  else if (!strcmp(method, "StreamInput")) sd_reply_connect_error(r, "unimplemented", "process.Process/StreamInput (client streaming) is not implemented");
  else if (!strcmp(method, "List") || !strcmp(method, "SendInput") || !strcmp(method, "CloseStdin") ||
           !strcmp(method, "SendSignal") || !strcmp(method, "Update"))
    rpc_unary(r, t, method);
  else sd_reply_connect_error(r, "unimplemented", "process.Process/%s is not implemented", method);
}
