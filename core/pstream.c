/* pstream.c — a process stream decoded on the loop as it arrives (see pstream.h). */
#include "pstream.h"
#include "fdout.h"
#include <stdlib.h>
#include <string.h>

#define MB_PST_DEFAULT_HIGH_WATER (256 * 1024)
/* The facts an owner acts on at once; the rest (completion, envd's end, the end of the
 * Connect stream) come right before the close and are taken with it: fewer wake-ups. */
#define MB_PST_WAKING ((1u << MB_PS_START) | (1u << MB_PS_PGID) | (1u << MB_PS_SPAWN_ERROR) | \
                       (1u << MB_PS_EXIT) | (1u << MB_PS_SIGNAL) | (1u << MB_PS_EMPTY) |      \
                       (1u << MB_PS_STREAM_ERROR))
#define MB_PST_DEFAULT_ERROR_BODY (64 * 1024)

struct mb_pstream {
  mb_loop *loop;
  mb_http_req *req;
  struct mb_procstream *ps;
  struct mb_pst_sink sink[2];
  struct mb_fdout *fdo[2];
  int want[2];
  int sealed[2];           /* PIPE: no more bytes; what is held no longer counts as backlog */
  size_t high_water;
  mb_pending pend;         /* tells the owner */
  mb_pst_cb cb;
  void *ud;
  int http_done;           /* the transfer finished */
  int decoded;             /* ... and its body was decoded to the end (or failed) */
  int closed;
  struct mb_error err;     /* why it closed */
  char *ebody;             /* a non-200 answer's body */
  size_t elen, emax;
  struct mb_ps_fact own[2];/* sink errors (ours, not the decoder's) */
  size_t nown;
};

static void notify(struct mb_pstream *s) { mb_loop_defer(s->loop, &s->pend); }

static void fire(mb_pending *p) {
  struct mb_pstream *s = (struct mb_pstream *)((char *)p - offsetof(struct mb_pstream, pend));
  if (s->cb) s->cb(s, s->ud); /* last: the owner may free s */
}

static int queued(const struct mb_pst_sink *k) { return k->kind == MB_PST_PIPE || k->kind == MB_PST_FD; }

static size_t queue_len(const struct mb_pstream *s, int i) {
  size_t n;
  mb_procstream_peek(s->ps, i, &n);
  return n;
}

static size_t backlog(void *ud) {
  const struct mb_pstream *s = ud;
  size_t a = queued(&s->sink[0]) && !s->sealed[0] ? queue_len(s, 0) : 0;
  size_t b = queued(&s->sink[1]) && !s->sealed[1] ? queue_len(s, 1) : 0;
  return a > b ? a : b;
}

/* Closed once decoding is over and no FD queue still holds bytes to write out. */
static void try_close(struct mb_pstream *s) {
  if (s->closed || !s->decoded) return;
  for (int i = 0; i < 2; i++)
    if (s->sink[i].kind == MB_PST_FD && queue_len(s, i)) return;
  s->closed = 1;
  notify(s);
}

static void stop_output(struct mb_pstream *s, int i) {
  mb_procstream_discard(s->ps, i);
  s->sink[i].kind = MB_PST_DISCARD;
  mb_fdout_free(s->fdo[i]);
  s->fdo[i] = NULL;
}

static void sink_failed(struct mb_pstream *s, int i, int errnum) {
  stop_output(s, i);
  if (s->nown < 2) {
    struct mb_ps_fact *f = &s->own[s->nown++];
    memset(f, 0, sizeof *f);
    f->kind = MB_PS_SINK_ERROR;
    f->stream = i;
    f->value = errnum;
    const char *why = strerror(errnum);
    mb_copy_text(f->text, sizeof f->text, why, strlen(why));
  }
  notify(s);
}

/* Writes an FD queue out as far as the descriptor takes it. `outside`: not inside a libcurl
 * callback, so a paused transfer may be resumed here. */
static void flush(struct mb_pstream *s, int i, int outside) {
  while (s->sink[i].kind == MB_PST_FD) {
    size_t n;
    const unsigned char *p = mb_procstream_peek(s->ps, i, &n);
    if (n == 0) break;
    ssize_t w = mb_fdout_write(s->fdo[i], p, n);
    if (w == 0) return; /* armed: on_writable continues */
    if (w < 0) {
      sink_failed(s, i, (int)-w);
      break;
    }
    mb_procstream_consume(s->ps, i, (size_t)w);
  }
  if (outside && s->req && !s->http_done) mb_http_resume(s->req);
  try_close(s);
}

static void on_writable0(void *ud) { flush(ud, 0, 1); }
static void on_writable1(void *ud) { flush(ud, 1, 1); }

/* The body as it arrives (inside libcurl's write callback). */
static int on_body(void *ud, mb_http_req *r, const char *p, size_t n, struct mb_error *err) {
  struct mb_pstream *s = ud;
  if (mb_http_status(r) != 200) { /* an error answer: keep its start for the owner */
    size_t k = s->emax - s->elen < n ? s->emax - s->elen : n;
    if (k) {
      if (!s->ebody && !(s->ebody = malloc(s->emax)))
        return mb_error_set(err, MB_E_NOMEM, "out of memory keeping an error body");
      memcpy(s->ebody + s->elen, p, k);
      s->elen += k;
    }
    return MB_OK;
  }
  size_t before = mb_procstream_pending_facts(s->ps);
  if (mb_procstream_push(s->ps, p, n, err)) return err->code;
  for (int i = 0; i < 2; i++) {
    if (s->sink[i].kind == MB_PST_FD) flush(s, i, 0);
    else if (s->want[i] && queue_len(s, i)) {
      s->want[i] = 0;
      notify(s);
    }
  }
  if (mb_procstream_pending_facts(s->ps) > before && (mb_procstream_pending_kinds(s->ps) & MB_PST_WAKING))
    notify(s);
  return MB_OK;
}

/* The transfer's own state changes: only its end matters here. */
static void on_http(mb_http_req *r, void *ud) {
  struct mb_pstream *s = ud;
  const struct mb_error *e;
  if (s->http_done || !mb_http_done(r, &e)) return;
  s->http_done = 1;
  long st = mb_http_status(r);
  if (e->code != MB_OK) {
    s->err = *e;
  } else if (st != 200) {
    mb_error_set(&s->err, MB_E_HTTP, "HTTP %ld", st);
  } else {
    size_t before = mb_procstream_pending_facts(s->ps);
    mb_procstream_finish(s->ps, &s->err);
    if (mb_procstream_pending_facts(s->ps) > before) notify(s);
  }
  s->decoded = 1;
  for (int i = 0; i < 2; i++)
    if (s->sink[i].kind == MB_PST_PIPE && s->want[i]) notify(s);
  if (s->err.code != MB_OK) { /* output that cannot complete is not worth writing out */
    for (int i = 0; i < 2; i++)
      if (s->sink[i].kind == MB_PST_FD) stop_output(s, i);
  }
  try_close(s);
  notify(s);
}

int mb_pstream_start(mb_loop *l, const mb_http_opts *http, const struct mb_pst_config *cfg,
                     mb_pst_cb cb, void *ud, struct mb_pstream **out, struct mb_error *err) {
  *out = NULL;
  struct mb_pstream *s = calloc(1, sizeof *s);
  if (!s) return mb_error_set(err, MB_E_NOMEM, "out of memory");
  s->loop = l;
  s->cb = cb;
  s->ud = ud;
  s->pend.fire = fire;
  s->high_water = cfg->high_water ? cfg->high_water : MB_PST_DEFAULT_HIGH_WATER;
  s->emax = cfg->error_body_max ? cfg->error_body_max : MB_PST_DEFAULT_ERROR_BODY;
  struct mb_ps_config pc = {.max_message = cfg->max_message, .max_line = cfg->max_line, .raw = cfg->raw};
  int rc = MB_OK;
  for (int i = 0; i < 2; i++) {
    const struct mb_pst_sink *k = &cfg->sink[i];
    s->sink[i] = *k;
    switch (k->kind) {
    case MB_PST_DISCARD: pc.sink[i].kind = MB_PS_DISCARD; break;
    case MB_PST_TAIL: pc.sink[i] = (struct mb_ps_sink){MB_PS_TAIL, k->max}; break;
    case MB_PST_PIPE:
    case MB_PST_FD:
      /* The queue may pass the high water by what one chunk of the body decodes to. */
      pc.sink[i] = (struct mb_ps_sink){MB_PS_QUEUE, s->high_water + cfg->max_message + (1 << 20)};
      break;
    default:
      rc = mb_error_set(err, MB_E_INVALID, "sink %d: unknown kind %d", i, k->kind);
      goto fail;
    }
    if (k->kind == MB_PST_FD &&
        (rc = mb_fdout_new(mb_loop_uv(l), k->fd, i ? on_writable1 : on_writable0, s, &s->fdo[i], err)))
      goto fail;
  }
  s->ps = mb_procstream_new(&pc);
  if (!s->ps) {
    rc = mb_error_set(err, cfg->max_message && cfg->max_line ? MB_E_NOMEM : MB_E_INVALID,
                      "cannot make the stream decoder (max_message and max_line must be > 0)");
    goto fail;
  }
  mb_http_opts o = *http;
  struct mb_http_sink hs = {.data = on_body, .backlog = backlog, .ud = s};
  o.stream = 1;
  o.sink = &hs;
  o.high_water = s->high_water;
  if ((rc = mb_http_start(l, &o, on_http, s, &s->req, err)) != MB_OK) goto fail;
  *out = s;
  return MB_OK;
fail:
  mb_pstream_free(s);
  return rc;
}

void mb_pstream_free(struct mb_pstream *s) {
  if (!s) return;
  mb_http_free(s->req);
  mb_loop_undefer(s->loop, &s->pend);
  for (int i = 0; i < 2; i++) mb_fdout_free(s->fdo[i]);
  mb_procstream_free(s->ps);
  free(s->ebody);
  free(s);
}

void mb_pstream_cancel(struct mb_pstream *s) {
  if (s->req && !s->http_done) mb_http_cancel(s->req);
}

int mb_pstream_closed(const struct mb_pstream *s, const struct mb_error **err) {
  if (err) *err = &s->err;
  return s->closed;
}

long mb_pstream_status(const struct mb_pstream *s) {
  return s->req && mb_http_headers_done(s->req) ? mb_http_status(s->req) : 0;
}

const char *mb_pstream_error_body(const struct mb_pstream *s, size_t *len) {
  *len = s->elen;
  return s->ebody ? s->ebody : "";
}

size_t mb_pstream_take_facts(struct mb_pstream *s, struct mb_ps_fact *out, size_t max) {
  size_t n = mb_procstream_take_facts(s->ps, out, max);
  while (s->nown && n < max) {
    out[n++] = s->own[0];
    s->own[0] = s->own[1];
    s->nown--;
  }
  return n;
}

const unsigned char *mb_pstream_peek(const struct mb_pstream *s, int stream, size_t *len) {
  if (s->sink[stream ? 1 : 0].kind != MB_PST_PIPE) {
    *len = 0;
    return (const unsigned char *)"";
  }
  return mb_procstream_peek(s->ps, stream, len);
}

void mb_pstream_consume(struct mb_pstream *s, int stream, size_t n) {
  if (s->sink[stream ? 1 : 0].kind != MB_PST_PIPE) return;
  mb_procstream_consume(s->ps, stream, n);
  if (s->req && !s->http_done) mb_http_resume(s->req);
}

int mb_pstream_eof(const struct mb_pstream *s, int stream) {
  size_t n;
  mb_pstream_peek(s, stream, &n);
  int i = stream ? 1 : 0;
  return n == 0 && (s->decoded || s->sealed[i] || s->sink[i].kind != MB_PST_PIPE);
}

void mb_pstream_want(struct mb_pstream *s, int stream) {
  int i = stream ? 1 : 0;
  if (mb_pstream_eof(s, i) || queue_len(s, i)) notify(s);
  else s->want[i] = 1;
}

void mb_pstream_discard(struct mb_pstream *s, int stream) {
  int i = stream ? 1 : 0;
  if (!queued(&s->sink[i])) return;
  stop_output(s, i);
  if (s->want[i]) notify(s);
  if (s->req && !s->http_done) mb_http_resume(s->req);
  try_close(s);
}

void mb_pstream_seal(struct mb_pstream *s, int stream) {
  int i = stream ? 1 : 0;
  if (s->sink[i].kind != MB_PST_PIPE || s->sealed[i]) return;
  s->sealed[i] = 1;
  mb_procstream_seal(s->ps, i);
  if (s->want[i]) notify(s);
  if (s->req && !s->http_done) mb_http_resume(s->req);
}

uint64_t mb_pstream_total(const struct mb_pstream *s, int stream) {
  return mb_procstream_total(s->ps, stream);
}

void mb_pstream_read_from(const struct mb_pstream *s, int stream, uint64_t from,
                          const unsigned char **a, size_t *al, const unsigned char **b,
                          size_t *bl, uint64_t *next, int *lossy) {
  mb_procstream_read_from(s->ps, stream, from, a, al, b, bl, next, lossy);
}

const char *mb_pstream_diag(const struct mb_pstream *s, size_t *len) {
  return mb_procstream_diag(s->ps, len);
}

void mb_pstream_info(const struct mb_pstream *s, mb_http_info *info) {
  if (s->req) mb_http_get_info(s->req, info);
  else memset(info, 0, sizeof *info);
}
