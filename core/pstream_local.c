/* pstream_local.c — process streams whose source is on this host (see pstream.h): a process
 * started with uv_spawn whose stdout is an mbwrap frame stream (the host providers run the
 * same wrapper as the sandbox, so one decoder and one semantics serve both), or a program on
 * a new PTY. Flow control stops reading while the stream's queues are behind (the process then
 * blocks on its own writes), exactly as the HTTP source pauses its transfer. */
#include "pstream.h"
#include "pstream_source.h"
#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MB_LOCAL_READ 65536

struct mb_pst_local;

/* One write to the stdin pipe; lives until libuv is done with it, even past the stream. */
struct mb_local_write {
  uv_write_t req;
  struct mb_pst_local *owner;  /* NULL once the stream let go */
  struct mb_local_write *next, *prev;
  size_t len;
  unsigned char data[];
};

/* One pipe we read (stdout, stderr) or write (stdin); the struct outlives the stream until its
 * close callback. */
struct mb_local_pipe {
  uv_pipe_t pipe;
  struct mb_pst_local *owner; /* NULL once the stream let go */
  int open, reading;
};

struct mb_pst_local {
  struct mb_pstream *s;
  uv_process_t *proc;        /* freed by its close callback after the exit */
  int pid, exited, done;
  int64_t exit_status;
  int term_signal;
  struct mb_local_pipe *out, *err, *in;
  int out_eof, err_eof;
  int paused;
  /* PTY */
  int pty, master;
  uv_poll_t *mpoll;
  int master_eof;
  /* input to the PTY master: bytes not yet written */
  unsigned char *wbuf;
  size_t woff, wlen, wcap;
  /* input to the stdin pipe: uv_write requests in flight, each with its own copy */
  struct mb_local_write *writes;
  size_t inflight;
  int want_write;
  char rbuf[MB_LOCAL_READ];
};

static const struct mb_pst_source local_source;
static struct mb_pst_local *local_of(const struct mb_pstream *s) { return mb_pst_source_ud(s); }
static int is_local(const struct mb_pstream *s) { return mb_pst_source_of(s) == &local_source; }

static void free_pipe(uv_handle_t *h) { free(h); }
static void free_handle(uv_handle_t *h) { free(h); }

static void pipe_close(struct mb_local_pipe *p) {
  if (!p || !p->open) return;
  p->open = 0;
  p->owner = NULL;
  uv_close((uv_handle_t *)&p->pipe, free_pipe);
}

/* Go's ProcessState.String() words, which the Lua side already reads from envd. */
static const char *signal_words(int sig) {
  switch (sig) {
  case SIGHUP: return "hangup";
  case SIGINT: return "interrupt";
  case SIGQUIT: return "quit";
  case SIGABRT: return "aborted";
  case SIGKILL: return "killed";
  case SIGSEGV: return "segmentation fault";
  case SIGPIPE: return "broken pipe";
  case SIGTERM: return "terminated";
  default: return NULL;
  }
}

/* Ended once the process exited and its output was read to the end. */
static void maybe_end(struct mb_pst_local *l) {
  if (l->done || !l->exited) return;
  if (l->pty ? !l->master_eof : !(l->out_eof && l->err_eof)) return;
  l->done = 1;
  struct mb_ps_fact f;
  memset(&f, 0, sizeof f);
  f.kind = MB_PS_END;
  if (l->term_signal) {
    f.value = -1;
    const char *w = signal_words(l->term_signal);
    if (w) snprintf(f.text, sizeof f.text, "signal: %s", w);
    else snprintf(f.text, sizeof f.text, "signal: %d", l->term_signal);
  } else {
    f.value = l->exit_status;
    f.flag = 1;
    snprintf(f.text, sizeof f.text, "exit status %lld", (long long)l->exit_status);
  }
  mb_pst_fact(l->s, &f);
  mb_pst_ended(l->s, NULL);
}

static void fail(struct mb_pst_local *l, const struct mb_error *e) {
  if (l->done) return;
  l->done = 1;
  mb_pst_ended(l->s, e);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)hint;
  struct mb_local_pipe *p = (struct mb_local_pipe *)h;
  struct mb_pst_local *l = p->owner;
  static char sink[MB_LOCAL_READ]; /* a closed owner's late read: never used after return */
  *b = uv_buf_init(l ? l->rbuf : sink, MB_LOCAL_READ);
}

static void master_events(struct mb_pst_local *l);

static void pause_if_behind(struct mb_pst_local *l) {
  if (mb_pst_backlog(l->s) < mb_pst_high_water(l->s) || l->paused) return;
  l->paused = 1;
  if (l->out && l->out->reading) {
    uv_read_stop((uv_stream_t *)&l->out->pipe);
    l->out->reading = 0;
  }
  if (l->mpoll) master_events(l);
}

static void on_out(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  struct mb_local_pipe *p = (struct mb_local_pipe *)st;
  struct mb_pst_local *l = p->owner;
  if (!l || n == 0) return;
  if (n < 0) { /* EOF (or an error: the wrapper's output is over either way) */
    l->out_eof = 1;
    uv_read_stop(st);
    p->reading = 0;
    maybe_end(l);
    return;
  }
  struct mb_error e;
  if (mb_pst_input(l->s, b->base, (size_t)n, &e) != MB_OK) {
    uv_read_stop(st);
    p->reading = 0;
    l->out_eof = 1;
    fail(l, &e);
    return;
  }
  pause_if_behind(l);
}

static void on_err(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  struct mb_local_pipe *p = (struct mb_local_pipe *)st;
  struct mb_pst_local *l = p->owner;
  if (!l || n == 0) return;
  if (n < 0) {
    l->err_eof = 1;
    uv_read_stop(st);
    p->reading = 0;
    maybe_end(l);
    return;
  }
  mb_pst_diag(l->s, b->base, (size_t)n);
}

/* ---- the PTY master: read and write by hand (it is our own descriptor, non-blocking) ---- */

static void master_write(struct mb_pst_local *l) {
  while (l->woff < l->wlen) {
    ssize_t w = write(l->master, l->wbuf + l->woff, l->wlen - l->woff);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) l->woff = l->wlen; /* gone: drop the input */
      break;
    }
    l->woff += (size_t)w;
  }
  if (l->woff == l->wlen) {
    l->woff = l->wlen = 0;
    if (l->want_write) {
      l->want_write = 0;
      mb_pst_notify(l->s);
    }
  }
}

static void master_read(struct mb_pst_local *l) {
  for (;;) {
    ssize_t r = read(l->master, l->rbuf, sizeof l->rbuf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) { /* EIO: no slave left open */
      l->master_eof = 1;
      return;
    }
    struct mb_error e;
    if (mb_pst_input(l->s, l->rbuf, (size_t)r, &e) != MB_OK) {
      l->master_eof = 1;
      fail(l, &e);
      return;
    }
    if (mb_pst_backlog(l->s) >= mb_pst_high_water(l->s)) {
      l->paused = 1;
      return;
    }
  }
}

static void on_master(uv_poll_t *h, int status, int events) {
  struct mb_pst_local *l = h->data;
  if (status < 0) events = UV_READABLE; /* the read says what went wrong */
  if (events & UV_WRITABLE) master_write(l);
  if ((events & UV_READABLE) && !l->paused && !l->master_eof) master_read(l);
  master_events(l);
  maybe_end(l);
}

static void master_events(struct mb_pst_local *l) {
  if (!l->mpoll) return;
  int ev = 0;
  if (!l->paused && !l->master_eof) ev |= UV_READABLE;
  if (l->wlen > l->woff && !l->master_eof) ev |= UV_WRITABLE;
  if (ev) uv_poll_start(l->mpoll, ev, on_master);
  else uv_poll_stop(l->mpoll);
}

/* ---- the process ---- */

static void on_exit_cb(uv_process_t *pr, int64_t status, int sig) {
  struct mb_pst_local *l = pr->data;
  uv_close((uv_handle_t *)pr, free_handle);
  if (!l) return;
  l->proc = NULL;
  l->exited = 1;
  l->exit_status = status;
  l->term_signal = sig;
  if (l->pty && !l->master_eof) {
    /* The top level is gone: what the PTY holds now is the end of its output (background
     * processes of its session may keep the slave open for good). */
    if (!l->paused) master_read(l);
    l->master_eof = 1;
    master_events(l);
  }
  maybe_end(l);
}

static void local_resume(struct mb_pstream *s) {
  struct mb_pst_local *l = local_of(s);
  if (!l->paused || mb_pst_backlog(s) > mb_pst_high_water(s) / 2) return;
  l->paused = 0;
  if (l->out && l->out->open && !l->out_eof && !l->out->reading &&
      uv_read_start((uv_stream_t *)&l->out->pipe, on_alloc, on_out) == 0)
    l->out->reading = 1;
  if (l->pty) {
    if (!l->master_eof) master_read(l);
    master_events(l);
    maybe_end(l);
  }
}

static void local_cancel(struct mb_pstream *s) {
  struct mb_pst_local *l = local_of(s);
  if (l->proc && !l->exited) uv_process_kill(l->proc, l->pty ? SIGKILL : SIGTERM);
  struct mb_error e;
  mb_error_set(&e, MB_E_CANCELED, "canceled by the caller");
  fail(l, &e);
}

static void local_info(const struct mb_pstream *s, mb_http_info *i) {
  i->paused = local_of(s)->paused;
}

static void local_free(struct mb_pstream *s) {
  struct mb_pst_local *l = local_of(s);
  if (!l) return;
  if (l->proc) {
    /* Still running and nobody wants it: TERM (a wrapper then ends its whole tree); the
     * handle stays open so that libuv reaps the child, and closes itself at the exit. */
    if (!l->exited) uv_process_kill(l->proc, SIGTERM);
    l->proc->data = NULL;
  }
  for (struct mb_local_write *w = l->writes; w; w = w->next) w->owner = NULL;
  pipe_close(l->out);
  pipe_close(l->err);
  pipe_close(l->in);
  if (l->mpoll) {
    uv_poll_stop(l->mpoll);
    uv_close((uv_handle_t *)l->mpoll, free_handle);
  }
  if (l->master >= 0) close(l->master);
  free(l->wbuf);
  free(l);
  mb_pst_set_source(s, NULL, NULL);
}

static const struct mb_pst_source local_source = {local_resume, local_cancel, local_free, local_info};


static struct mb_local_pipe *new_pipe(uv_loop_t *uv, struct mb_pst_local *l) {
  struct mb_local_pipe *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  uv_pipe_init(uv, &p->pipe, 0);
  p->owner = l;
  p->open = 1;
  return p;
}

int mb_pstream_spawn(mb_loop *lp, const struct mb_pst_spawn *sp, const struct mb_pst_config *cfg,
                     mb_pst_cb cb, void *ud, struct mb_pstream **out, struct mb_error *err) {
  *out = NULL;
  if (!sp->argv || !sp->argv[0] || sp->argv[0][0] != '/')
    return mb_error_set(err, MB_E_INVALID, "spawn: argv[0] must be an absolute path");
  struct mb_pst_config c = *cfg;
  c.direct = 1;
  if (sp->pty) c.raw = 1;
  struct mb_pstream *s;
  int rc = mb_pst_new(lp, &c, cb, ud, &s, err);
  if (rc) return rc;
  struct mb_pst_local *l = calloc(1, sizeof *l);
  if (!l) {
    mb_pstream_free(s);
    return mb_error_set(err, MB_E_NOMEM, "out of memory");
  }
  l->s = s;
  l->master = -1;
  l->pty = sp->pty;
  mb_pst_set_source(s, &local_source, l);
  uv_loop_t *uv = mb_loop_uv(lp);
  uv_stdio_container_t stdio[3];
  int slave = -1;
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  if (sp->pty) {
    struct winsize ws = {.ws_row = sp->rows ? sp->rows : 24, .ws_col = sp->cols ? sp->cols : 80};
    if (openpty(&l->master, &slave, NULL, NULL, &ws) != 0) {
      rc = mb_error_set_named(err, MB_E_IO, MB_CODE_MB_IO, "openpty: %s", strerror(errno));
      goto fail;
    }
    fcntl(l->master, F_SETFD, FD_CLOEXEC);
    fcntl(l->master, F_SETFL, fcntl(l->master, F_GETFL) | O_NONBLOCK);
    for (int i = 0; i < 3; i++) {
      stdio[i].flags = UV_INHERIT_FD;
      stdio[i].data.fd = slave;
    }
    po.flags = UV_PROCESS_DETACHED; /* setsid(): the program leads a new session on the PTY */
  } else {
    if (sp->stdin_pipe) {
      if (!(l->in = new_pipe(uv, NULL))) goto nomem;
      stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
      stdio[0].data.stream = (uv_stream_t *)&l->in->pipe;
    } else if (sp->stdin_inherit) {
      stdio[0].flags = UV_INHERIT_FD;
      stdio[0].data.fd = 0;
    } else {
      stdio[0].flags = UV_IGNORE;
    }
    if (!(l->out = new_pipe(uv, l)) || !(l->err = new_pipe(uv, l))) goto nomem;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&l->out->pipe;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&l->err->pipe;
  }
  po.file = sp->argv[0];
  po.args = (char **)sp->argv;
  po.env = (char **)sp->env;
  po.cwd = sp->cwd;
  po.stdio = stdio;
  po.stdio_count = 3;
  po.exit_cb = on_exit_cb;
  if (!(l->proc = malloc(sizeof *l->proc))) goto nomem;
  int urc = uv_spawn(uv, l->proc, &po);
  if (slave >= 0) close(slave);
  if (urc != 0) {
    l->proc->data = NULL;
    uv_close((uv_handle_t *)l->proc, free_handle);
    l->proc = NULL;
    rc = mb_error_set_named(err, urc == UV_ENOENT ? MB_E_INVALID : MB_E_IO, MB_CODE_SPAWN_FAILED, "cannot start %s: %s", sp->argv[0],
                      uv_strerror(urc));
    goto fail;
  }
  l->proc->data = l;
  l->pid = l->proc->pid;
  if (sp->pty) {
    if (!(l->mpoll = malloc(sizeof *l->mpoll))) goto nomem_started;
    uv_poll_init(uv, l->mpoll, l->master);
    l->mpoll->data = l;
    master_events(l);
  } else {
    uv_read_start((uv_stream_t *)&l->out->pipe, on_alloc, on_out);
    l->out->reading = 1;
    uv_read_start((uv_stream_t *)&l->err->pipe, on_alloc, on_err);
    l->err->reading = 1;
  }
  struct mb_ps_fact f;
  memset(&f, 0, sizeof f);
  f.kind = MB_PS_START;
  f.value = l->pid;
  mb_pst_fact(s, &f);
  *out = s;
  return MB_OK;
nomem_started:
  rc = mb_error_set(err, MB_E_NOMEM, "out of memory");
  mb_pstream_free(s); /* TERMs the process */
  return rc;
nomem:
  rc = mb_error_set(err, MB_E_NOMEM, "out of memory");
  if (slave >= 0) close(slave);
fail:
  mb_pstream_free(s);
  return rc;
}

int mb_pstream_pid(const struct mb_pstream *s) {
  return is_local(s) ? local_of(s)->pid : 0;
}

int mb_pstream_kill(struct mb_pstream *s, int sig, struct mb_error *err) {
  if (!is_local(s)) return mb_error_set(err, MB_E_INVALID, "not a local process");
  struct mb_pst_local *l = local_of(s);
  if (!l->proc || l->exited) return mb_error_set_named(err, MB_E_IO, MB_CODE_MB_EXITED, "the process has exited");
  int rc = uv_process_kill(l->proc, sig);
  if (rc) return mb_error_set_named(err, MB_E_IO, MB_CODE_MB_IO, "kill: %s", uv_strerror(rc));
  return MB_OK;
}

static void on_written(uv_write_t *req, int status) {
  struct mb_local_write *w = (struct mb_local_write *)req;
  struct mb_pst_local *l = w->owner;
  (void)status; /* a reader that went away: the input is lost, as with any pipe */
  if (l) {
    if (w->prev) w->prev->next = w->next; else l->writes = w->next;
    if (w->next) w->next->prev = w->prev;
    l->inflight -= w->len;
    if (l->inflight == 0 && l->want_write) {
      l->want_write = 0;
      mb_pst_notify(l->s);
    }
  }
  free(w);
}

int mb_pstream_write(struct mb_pstream *s, const void *p, size_t n, size_t max_pending,
                     struct mb_error *err) {
  if (!is_local(s)) return mb_error_set(err, MB_E_INVALID, "not a local process");
  struct mb_pst_local *l = local_of(s);
  if (n == 0) return MB_OK;
  size_t held = mb_pstream_write_pending(s);
  if (n > max_pending || held > max_pending - n)
    return mb_error_set(err, MB_E_TOO_LARGE, "more than %zu input bytes would be waiting", max_pending);
  if (l->pty) {
    if (l->woff) {
      memmove(l->wbuf, l->wbuf + l->woff, l->wlen - l->woff);
      l->wlen -= l->woff;
      l->woff = 0;
    }
    if (l->wcap - l->wlen < n) {
      unsigned char *nb = realloc(l->wbuf, l->wlen + n);
      if (!nb) return mb_error_set(err, MB_E_NOMEM, "out of memory queueing input");
      l->wbuf = nb;
      l->wcap = l->wlen + n;
    }
    memcpy(l->wbuf + l->wlen, p, n);
    l->wlen += n;
    master_write(l);
    master_events(l);
    return MB_OK;
  }
  if (!l->in || !l->in->open) return mb_error_set(err, MB_E_INVALID, "stdin is not a pipe, or it is closed");
  struct mb_local_write *w = malloc(sizeof *w + n);
  if (!w) return mb_error_set(err, MB_E_NOMEM, "out of memory queueing input");
  w->owner = l;
  w->len = n;
  memcpy(w->data, p, n);
  uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)n);
  int rc = uv_write(&w->req, (uv_stream_t *)&l->in->pipe, &b, 1, on_written);
  if (rc) {
    free(w);
    return mb_error_set_named(err, MB_E_IO, MB_CODE_MB_IO, "write to stdin: %s", uv_strerror(rc));
  }
  w->prev = NULL;
  w->next = l->writes;
  if (l->writes) l->writes->prev = w;
  l->writes = w;
  l->inflight += n;
  return MB_OK;
}

size_t mb_pstream_write_pending(const struct mb_pstream *s) {
  if (!is_local(s)) return 0;
  const struct mb_pst_local *l = local_of(s);
  return l->pty ? l->wlen - l->woff : l->inflight;
}

void mb_pstream_want_write(struct mb_pstream *s) {
  if (!is_local(s)) return;
  struct mb_pst_local *l = local_of(s);
  if (mb_pstream_write_pending(s) == 0) mb_pst_notify(s);
  else l->want_write = 1;
}

int mb_pstream_close_input(struct mb_pstream *s, struct mb_error *err) {
  if (!is_local(s) || local_of(s)->pty) return mb_error_set(err, MB_E_INVALID, "no stdin pipe to close");
  struct mb_pst_local *l = local_of(s);
  if (l->in && l->in->open) {
    /* writes still in flight complete (or fail) first: libuv flushes before the close */
    pipe_close(l->in);
    l->in = NULL;
  }
  return MB_OK;
}

int mb_pstream_resize(struct mb_pstream *s, unsigned rows, unsigned cols, struct mb_error *err) {
  if (!is_local(s) || !local_of(s)->pty) return mb_error_set(err, MB_E_INVALID, "not a terminal");
  struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
  if (ioctl(local_of(s)->master, TIOCSWINSZ, &ws) != 0) return mb_error_set_named(err, MB_E_IO, MB_CODE_MB_IO, "resize: %s", strerror(errno));
  return MB_OK;
}
