/* pstream.c — a process stream decoded on the loop as it arrives (see pstream.h): the core
 * (decoder, sinks, flow control, the owner's notifications) and its envd-over-HTTP source.
 * Local sources (a wrapper process, a PTY) are in pstream_local.c. */
#include "pstream.h"
#include "fdout.h"
#include "pstream_source.h"
#include <stdlib.h>
#include <string.h>

#define MB_PST_DEFAULT_HIGH_WATER (256 * 1024)
#define MB_PST_DEFAULT_ERROR_BODY (64 * 1024)
/* The facts an owner acts on at once; the rest (completion, envd's end, the end of the
 * Connect stream) come right before the close and are taken with it: fewer wake-ups. */
#define MB_PST_WAKING ((1u << MB_PS_START) | (1u << MB_PS_PGID) | (1u << MB_PS_SPAWN_ERROR) | \
                       (1u << MB_PS_EXIT) | (1u << MB_PS_SIGNAL) | (1u << MB_PS_EMPTY) |      \
                       (1u << MB_PS_STREAM_ERROR))

struct mb_pstream {
  mb_loop *loop;
  const struct mb_pst_source *src;
  void *src_ud;
  struct mb_procstream *ps;
  struct mb_pst_sink sink[2];
  struct mb_fdout *fdo[2];
  int want[2];
  int sealed[2];           /* PIPE: no more bytes; what is held no longer counts as backlog */
  size_t high_water;
  mb_pending pend;         /* tells the owner */
  mb_pst_cb cb;
  void *ud;
  int ended;               /* the source finished */
  int decoded;             /* ... and its input was decoded to the end (or failed) */
  int closed;
  struct mb_error err;     /* why it closed */
  size_t emax;
  struct mb_ps_fact own[2];/* sink errors (ours, not the decoder's) */
  size_t nown;
};

static void notify(struct mb_pstream *s) { mb_loop_defer(s->loop, &s->pend); }
void mb_pst_notify(struct mb_pstream *s) { notify(s); }

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

size_t mb_pst_backlog(const struct mb_pstream *s) {
  size_t a = queued(&s->sink[0]) && !s->sealed[0] ? queue_len(s, 0) : 0;
  size_t b = queued(&s->sink[1]) && !s->sealed[1] ? queue_len(s, 1) : 0;
  return a > b ? a : b;
}

size_t mb_pst_high_water(const struct mb_pstream *s) { return s->high_water; }
mb_loop *mb_pst_loop(const struct mb_pstream *s) { return s->loop; }
void *mb_pst_source_ud(const struct mb_pstream *s) { return s->src_ud; }
const struct mb_pst_source *mb_pst_source_of(const struct mb_pstream *s) { return s->src; }

void mb_pst_set_source(struct mb_pstream *s, const struct mb_pst_source *src, void *ud) {
  s->src = src;
  s->src_ud = ud;
}

static void resume(struct mb_pstream *s) {
  if (s->src && !s->ended) s->src->resume(s);
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

/* Writes an FD queue out as far as the descriptor takes it. `outside`: not inside the source's
 * own callback, so a paused source may be resumed here. */
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
  if (outside) resume(s);
  try_close(s);
}

static void on_writable0(void *ud) { flush(ud, 0, 1); }
static void on_writable1(void *ud) { flush(ud, 1, 1); }

int mb_pst_input(struct mb_pstream *s, const void *p, size_t n, struct mb_error *err) {
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

void mb_pst_fact(struct mb_pstream *s, const struct mb_ps_fact *f) {
  if (mb_procstream_add_fact(s->ps, f) == MB_OK && ((1u << f->kind) & MB_PST_WAKING)) notify(s);
}

void mb_pst_diag(struct mb_pstream *s, const void *p, size_t n) { mb_procstream_add_diag(s->ps, p, n); }

void mb_pst_ended(struct mb_pstream *s, const struct mb_error *e) {
  if (s->ended) return;
  s->ended = 1;
  if (e && e->code != MB_OK) {
    s->err = *e;
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

int mb_pst_new(mb_loop *l, const struct mb_pst_config *cfg, mb_pst_cb cb, void *ud,
               struct mb_pstream **out, struct mb_error *err) {
  *out = NULL;
  struct mb_pstream *s = calloc(1, sizeof *s);
  if (!s) return mb_error_set(err, MB_E_NOMEM, "out of memory");
  s->loop = l;
  s->cb = cb;
  s->ud = ud;
  s->pend.fire = fire;
  s->high_water = cfg->high_water ? cfg->high_water : MB_PST_DEFAULT_HIGH_WATER;
  s->emax = cfg->error_body_max ? cfg->error_body_max : MB_PST_DEFAULT_ERROR_BODY;
  struct mb_ps_config pc = {.max_message = cfg->max_message, .max_line = cfg->max_line,
                            .raw = cfg->raw, .direct = cfg->direct, .proto = cfg->proto};
  int rc = MB_OK;
  for (int i = 0; i < 2; i++) {
    const struct mb_pst_sink *k = &cfg->sink[i];
    s->sink[i] = *k;
    switch (k->kind) {
    case MB_PST_DISCARD: pc.sink[i].kind = MB_PS_DISCARD; break;
    case MB_PST_TAIL: pc.sink[i] = (struct mb_ps_sink){MB_PS_TAIL, k->max}; break;
    case MB_PST_PIPE:
    case MB_PST_FD:
      /* The queue may pass the high water by what one chunk of the input decodes to. */
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
  *out = s;
  return MB_OK;
fail:
  mb_pstream_free(s);
  return rc;
}

void mb_pstream_free(struct mb_pstream *s) {
  if (!s) return;
  if (s->src) s->src->free(s);
  mb_loop_undefer(s->loop, &s->pend);
  for (int i = 0; i < 2; i++) mb_fdout_free(s->fdo[i]);
  mb_procstream_free(s->ps);
  free(s);
}

void mb_pstream_cancel(struct mb_pstream *s) {
  if (s->src && !s->ended) s->src->cancel(s);
}

int mb_pstream_closed(const struct mb_pstream *s, const struct mb_error **err) {
  if (err) *err = &s->err;
  return s->closed;
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
  resume(s);
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
  resume(s);
  try_close(s);
}

void mb_pstream_seal(struct mb_pstream *s, int stream) {
  int i = stream ? 1 : 0;
  if (s->sink[i].kind != MB_PST_PIPE || s->sealed[i]) return;
  s->sealed[i] = 1;
  mb_procstream_seal(s->ps, i);
  if (s->want[i]) notify(s);
  resume(s);
}

const struct mb_procstream *mb_pstream_decoder(const struct mb_pstream *s) { return s->ps; }

void mb_pstream_info(const struct mb_pstream *s, mb_http_info *info) {
  memset(info, 0, sizeof *info);
  if (s->src && s->src->info) s->src->info(s, info);
}

/* ---------------------------------------------------------------- the envd (HTTP) source */

struct mb_pst_http {
  mb_http_req *req;
  char *ebody;             /* a non-200 answer's body */
  size_t elen;
};

static struct mb_pst_http *http_of(const struct mb_pstream *s) {
  return s->src_ud;
}

/* The body as it arrives (inside libcurl's write callback). */
static int on_body(void *ud, mb_http_req *r, const char *p, size_t n, struct mb_error *err) {
  struct mb_pstream *s = ud;
  struct mb_pst_http *h = http_of(s);
  if (mb_http_status(r) != 200) { /* an error answer: keep its start for the owner */
    size_t k = s->emax - h->elen < n ? s->emax - h->elen : n;
    if (k) {
      if (!h->ebody && !(h->ebody = malloc(s->emax)))
        return mb_error_set(err, MB_E_NOMEM, "out of memory keeping an error body");
      memcpy(h->ebody + h->elen, p, k);
      h->elen += k;
    }
    return MB_OK;
  }
  return mb_pst_input(s, p, n, err);
}

static size_t http_backlog(void *ud) { return mb_pst_backlog(ud); }

/* The transfer's own state changes: only its end matters here. */
static void on_http(mb_http_req *r, void *ud) {
  struct mb_pstream *s = ud;
  const struct mb_error *e;
  if (s->ended || !mb_http_done(r, &e)) return;
  long st = mb_http_status(r);
  if (e->code != MB_OK) {
    mb_pst_ended(s, e);
  } else if (st != 200) {
    struct mb_error he;
    mb_error_set(&he, MB_E_HTTP, "HTTP %ld", st);
    mb_pst_ended(s, &he);
  } else {
    mb_pst_ended(s, NULL);
  }
}

static void http_resume(struct mb_pstream *s) { mb_http_resume(http_of(s)->req); }
static void http_cancel(struct mb_pstream *s) { mb_http_cancel(http_of(s)->req); }
static void http_info(const struct mb_pstream *s, mb_http_info *i) { mb_http_get_info(http_of(s)->req, i); }

static void http_free(struct mb_pstream *s) {
  struct mb_pst_http *h = http_of(s);
  if (!h) return;
  mb_http_free(h->req);
  free(h->ebody);
  free(h);
  s->src_ud = NULL;
}

static const struct mb_pst_source http_source = {http_resume, http_cancel, http_free, http_info};

int mb_pstream_start(mb_loop *l, const mb_http_opts *http, const struct mb_pst_config *cfg,
                     mb_pst_cb cb, void *ud, struct mb_pstream **out, struct mb_error *err) {
  *out = NULL;
  struct mb_pstream *s;
  int rc = mb_pst_new(l, cfg, cb, ud, &s, err);
  if (rc) return rc;
  struct mb_pst_http *h = calloc(1, sizeof *h);
  if (!h) {
    mb_pstream_free(s);
    return mb_error_set(err, MB_E_NOMEM, "out of memory");
  }
  mb_pst_set_source(s, &http_source, h);
  mb_http_opts o = *http;
  struct mb_http_sink hs = {.data = on_body, .backlog = http_backlog, .ud = s};
  o.stream = 1;
  o.sink = &hs;
  o.high_water = s->high_water;
  if ((rc = mb_http_start(l, &o, on_http, s, &h->req, err)) != MB_OK) {
    mb_pstream_free(s);
    return rc;
  }
  *out = s;
  return MB_OK;
}

long mb_pstream_status(const struct mb_pstream *s) {
  if (s->src != &http_source || !s->src_ud) return 0;
  mb_http_req *r = http_of(s)->req;
  return r && mb_http_headers_done(r) ? mb_http_status(r) : 0;
}

const char *mb_pstream_error_body(const struct mb_pstream *s, size_t *len) {
  struct mb_pst_http *h = s->src == &http_source ? http_of(s) : NULL;
  *len = h ? h->elen : 0;
  return h && h->ebody ? h->ebody : "";
}
