/* procstream.c — one mbwrap process stream decoded in C into sinks (see procstream.h). */
#include "procstream.h"
#include "b64.h"
#include "connect.h"
#include "frames.h"
#include "rpc_json.h"
#include "envd/process.pb-c.h"
#include <stdlib.h>
#include <string.h>

struct mb_ps_ring {
  unsigned char *buf;
  size_t cap, max, head, held; /* cap grows up to max; head = index of the oldest byte */
};

struct mb_ps_out {
  struct mb_ps_sink sink;
  uint64_t total;
  struct mb_ps_ring ring;     /* TAIL */
  unsigned char *qbuf;        /* QUEUE: [qoff, qlen) not consumed yet */
  size_t qoff, qlen, qcap;
  int sealed;                 /* QUEUE: takes no more bytes (they are counted and dropped) */
};

struct mb_procstream {
  size_t max_message;
  int raw; /* raw mode: data.pty/stdout raw to out[0], data.stderr raw to out[1] */
  int direct; /* the input is the content itself (a local wrapper's stdout, a PTY) */
  int proto;  /* envelopes hold protobuf StartResponse messages */
  struct mb_arena arena; /* proto: one decoded message at a time (reset per envelope), made on
                            first use and grown to the largest message seen (≤ max_message) */
  struct mb_envelope_decoder *env;
  struct mb_frame_decoder *frames;
  unsigned char *scratch; /* decoded event.data.* bytes of one message */
  size_t scratch_cap;
  struct mb_ps_out out[2];
  unsigned char *res_ptr; /* a data frame's room reserved in a sink (frames decode straight in) */
  int res_stream;
  struct mb_ps_fact facts[MB_PS_FACTS_MAX];
  size_t nfacts;
  int seen_start, seen_end;
  char diag[MB_PS_DIAG_MAX];
  size_t diag_len;
  struct mb_error err; /* sticky */
};

static int mb_ps_sink_ok(const struct mb_ps_sink *s) {
  if (s->kind < MB_PS_DISCARD || s->kind > MB_PS_TAIL) return 0;
  return s->kind != MB_PS_QUEUE || s->max > 0;
}

static unsigned char *mb_ps_reserve(void *ud, int kind, size_t n);

struct mb_procstream *mb_procstream_new(const struct mb_ps_config *cfg) {
  if (!cfg || !cfg->max_message || !cfg->max_line || !mb_ps_sink_ok(&cfg->sink[0]) ||
      !mb_ps_sink_ok(&cfg->sink[1]))
    return NULL;
  struct mb_procstream *ps = calloc(1, sizeof *ps);
  if (!ps) return NULL;
  ps->max_message = cfg->max_message;
  ps->raw = cfg->raw != 0;
  ps->direct = cfg->direct != 0;
  ps->proto = cfg->proto != 0;
  ps->env = mb_envelope_decoder_new(cfg->max_message);
  ps->frames = mb_frame_decoder_new(cfg->max_line);
  if (!ps->env || !ps->frames) {
    mb_procstream_free(ps);
    return NULL;
  }
  mb_frame_decoder_set_reserve(ps->frames, mb_ps_reserve, ps);
  for (int i = 0; i < 2; i++) {
    ps->out[i].sink = cfg->sink[i];
    ps->out[i].ring.max = cfg->sink[i].kind == MB_PS_TAIL ? cfg->sink[i].max : 0;
  }
  return ps;
}

void mb_procstream_free(struct mb_procstream *ps) {
  if (!ps) return;
  mb_envelope_decoder_free(ps->env);
  mb_frame_decoder_free(ps->frames);
  mb_arena_free(&ps->arena);
  free(ps->scratch);
  for (int i = 0; i < 2; i++) {
    free(ps->out[i].ring.buf);
    free(ps->out[i].qbuf);
  }
  free(ps);
}

/* ---- facts ---- */

static struct mb_ps_fact *mb_ps_fact(struct mb_procstream *ps, int kind) {
  if (ps->nfacts == MB_PS_FACTS_MAX) {
    mb_error_set(&ps->err, MB_E_PROTOCOL, "process stream: too many control facts");
    return NULL;
  }
  struct mb_ps_fact *f = &ps->facts[ps->nfacts++];
  memset(f, 0, offsetof(struct mb_ps_fact, text) + 1);
  f->kind = kind;
  return f;
}

/* ---- sinks ---- */

static int mb_ps_ring_add(struct mb_ps_ring *r, const unsigned char *p, size_t n,
                          struct mb_error *err) {
  if (r->max == 0 || n == 0) return MB_OK;
  if (n >= r->max) { /* only the last max bytes can survive */
    p += n - r->max;
    n = r->max;
  }
  if (r->cap < r->max && r->held + n > r->cap) {
    /* Not wrapped yet (head == 0 until the ring is full): grow with the data received. */
    size_t want = r->cap > r->max / 2 ? r->max : r->cap * 2;
    if (want < r->held + n) want = r->held + n;
    if (want > r->max) want = r->max;
    unsigned char *nb = realloc(r->buf, want);
    if (!nb) return mb_error_set(err, MB_E_NOMEM, "cannot grow an output tail to %zu bytes", want);
    r->buf = nb;
    r->cap = want;
  }
  if (r->held + n > r->cap) { /* full: drop the oldest bytes */
    size_t drop = r->held + n - r->cap;
    r->head = (r->head + drop) % r->cap;
    r->held -= drop;
  }
  size_t pos = (r->head + r->held) % r->cap;
  size_t first = r->cap - pos < n ? r->cap - pos : n;
  memcpy(r->buf + pos, p, first);
  if (n > first) memcpy(r->buf, p + first, n - first);
  r->held += n;
  return MB_OK;
}

/* Room for n bytes at the ring's write position, contiguous, made by dropping the oldest bytes
 * first (so a frame that then fails to decode leaves a shorter tail, never garbage); NULL when
 * that room would wrap around the end or the ring cannot grow (the copying path then). */
static unsigned char *mb_ps_ring_reserve(struct mb_ps_ring *r, size_t n, int *nomem) {
  if (r->max == 0 || n == 0 || n >= r->max) return NULL;
  if (r->cap < r->max && r->held + n > r->cap) { /* not wrapped yet: grow as mb_ps_ring_add does */
    size_t want = r->cap > r->max / 2 ? r->max : r->cap * 2;
    if (want < r->held + n) want = r->held + n;
    if (want > r->max) want = r->max;
    unsigned char *nb = realloc(r->buf, want);
    if (!nb) { *nomem = 1; return NULL; }
    r->buf = nb;
    r->cap = want;
  }
  size_t pos = (r->head + r->held) % r->cap;
  if (pos + n > r->cap) return NULL;
  if (r->held + n > r->cap) { /* full: the oldest bytes go now */
    size_t drop = r->held + n - r->cap;
    r->head = (r->head + drop) % r->cap;
    r->held -= drop;
  }
  return r->buf + pos;
}

/* Room for n more bytes at the queue's end (within its max), or NULL. */
static unsigned char *mb_ps_queue_reserve(struct mb_ps_out *o, size_t n, int *nomem) {
  size_t held = o->qlen - o->qoff;
  if (n > o->sink.max - held) return NULL; /* the copying path reports it */
  if (o->qcap - o->qlen < n && o->qoff) { /* slide the unread bytes down before growing */
    memmove(o->qbuf, o->qbuf + o->qoff, held);
    o->qlen = held;
    o->qoff = 0;
  }
  if (o->qcap - o->qlen < n) {
    size_t want = o->qcap ? o->qcap : 16384;
    while (want - o->qlen < n) want = want > o->sink.max / 2 ? o->sink.max : want * 2;
    unsigned char *nb = realloc(o->qbuf, want);
    if (!nb) { *nomem = 1; return NULL; }
    o->qbuf = nb;
    o->qcap = want;
  }
  return o->qbuf + o->qlen;
}

static unsigned char *mb_ps_reserve(void *ud, int kind, size_t n) {
  struct mb_procstream *ps = ud;
  int stream = kind == MB_FRAME_STDERR ? MB_PS_STDERR : MB_PS_STDOUT;
  struct mb_ps_out *o = &ps->out[stream];
  unsigned char *p = NULL;
  int nomem = 0;
  if (o->sink.kind == MB_PS_TAIL) p = mb_ps_ring_reserve(&o->ring, n, &nomem);
  else if (o->sink.kind == MB_PS_QUEUE && !o->sealed) p = mb_ps_queue_reserve(o, n, &nomem);
  if (nomem && !ps->err.code) mb_error_set(&ps->err, MB_E_NOMEM, "cannot grow an output sink by %zu bytes", n);
  ps->res_ptr = p;
  ps->res_stream = stream;
  return p;
}

static int mb_ps_queue_add(struct mb_ps_out *o, const unsigned char *p, size_t n,
                           struct mb_error *err) {
  if (n == 0) return MB_OK;
  if (n > o->sink.max - (o->qlen - o->qoff))
    return mb_error_set(err, MB_E_TOO_LARGE, "output queue over its limit of %zu bytes", o->sink.max);
  int nomem = 0;
  unsigned char *dst = mb_ps_queue_reserve(o, n, &nomem);
  if (!dst) return mb_error_set(err, MB_E_NOMEM, "cannot queue %zu output bytes", n);
  memcpy(dst, p, n);
  o->qlen += n;
  return MB_OK;
}

static int mb_ps_sink_data(struct mb_procstream *ps, int stream, const unsigned char *p,
                           size_t n) {
  struct mb_ps_out *o = &ps->out[stream];
  o->total += n;
  switch (o->sink.kind) {
  case MB_PS_TAIL: return mb_ps_ring_add(&o->ring, p, n, &ps->err);
  case MB_PS_QUEUE: return o->sealed ? MB_OK : mb_ps_queue_add(o, p, n, &ps->err);
  default: return MB_OK;
  }
}

/* ---- frames ---- */

static int mb_ps_on_frame(void *ud, const struct mb_frame *fr) {
  struct mb_procstream *ps = ud;
  if (ps->err.code) return ps->err.code; /* a sink could not grow (mb_ps_reserve) */
  if (fr->data && fr->data == ps->res_ptr) { /* decoded in place: only count it */
    struct mb_ps_out *o = &ps->out[ps->res_stream];
    ps->res_ptr = NULL;
    o->total += fr->len;
    if (o->sink.kind == MB_PS_TAIL) o->ring.held += fr->len;
    else o->qlen += fr->len;
    return MB_OK;
  }
  switch (fr->kind) {
  case MB_FRAME_STDOUT: return mb_ps_sink_data(ps, MB_PS_STDOUT, fr->data, fr->len);
  case MB_FRAME_STDERR: return mb_ps_sink_data(ps, MB_PS_STDERR, fr->data, fr->len);
  default: break;
  }
  static const int map[] = {[MB_FRAME_PGID] = MB_PS_PGID, [MB_FRAME_EXIT] = MB_PS_EXIT,
                            [MB_FRAME_SIGNAL] = MB_PS_SIGNAL,
                            [MB_FRAME_SPAWN_ERROR] = MB_PS_SPAWN_ERROR,
                            [MB_FRAME_EMPTY] = MB_PS_EMPTY, [MB_FRAME_DONE] = MB_PS_DONE};
  if (fr->kind < MB_FRAME_PGID || fr->kind > MB_FRAME_DONE) return MB_E_PROTOCOL;
  struct mb_ps_fact *f = mb_ps_fact(ps, map[fr->kind]);
  if (!f) return ps->err.code;
  f->value = fr->value;
  if (fr->kind == MB_FRAME_SPAWN_ERROR)
    mb_copy_text(f->text, sizeof f->text, (const char *)fr->data, fr->len);
  return MB_OK;
}

/* ---- events ---- */

static void mb_ps_diag_add(struct mb_procstream *ps, const unsigned char *p, size_t n) {
  size_t room = MB_PS_DIAG_MAX - ps->diag_len;
  if (n > room) n = room;
  if (n == 0) return;
  memcpy(ps->diag + ps->diag_len, p, n);
  ps->diag_len += n;
}

/* The output bytes of one data event, by stream (0 stdout, 1 stderr, 2 pty). */
static int mb_ps_data(struct mb_procstream *ps, int leaf, const unsigned char *p, size_t n) {
  if (ps->raw) /* raw bytes: no frames inside */
    return mb_ps_sink_data(ps, leaf == 1 ? MB_PS_STDERR : MB_PS_STDOUT, p, n);
  if (leaf == 0) {
    struct mb_error ferr;
    if (mb_frame_decoder_push(ps->frames, p, n, mb_ps_on_frame, ps, &ferr)) {
      if (!ps->err.code) ps->err = ferr;
      return ps->err.code;
    }
    return MB_OK;
  }
  if (leaf == 1) {
    mb_ps_diag_add(ps, p, n);
    return MB_OK;
  }
  /* PTY bytes of a framed stream: never wrapper output */
  return mb_error_set(&ps->err, MB_E_PROTOCOL, "process event: terminal output in a wrapper stream");
}

static int mb_ps_start(struct mb_procstream *ps, long long pid) {
  if (ps->seen_start) return mb_error_set(&ps->err, MB_E_PROTOCOL, "process event: a second start event");
  ps->seen_start = 1;
  struct mb_ps_fact *f = mb_ps_fact(ps, MB_PS_START);
  if (!f) return ps->err.code;
  f->value = pid;
  return MB_OK;
}

static struct mb_ps_fact *mb_ps_end(struct mb_procstream *ps) {
  if (ps->seen_end) {
    mb_error_set(&ps->err, MB_E_PROTOCOL, "process event: a second end event");
    return NULL;
  }
  ps->seen_end = 1;
  return mb_ps_fact(ps, MB_PS_END);
}

static void mb_ps_json_text(json_t *o, const char *key, char *dst, size_t cap) {
  json_t *v = json_object_get(o, key);
  if (json_is_string(v)) mb_copy_text(dst, cap, json_string_value(v), json_string_length(v));
}

/* A message that is not the output shape: start, end, keepalive, anything else (ignored). */
static int mb_ps_event(struct mb_procstream *ps, json_t *root) {
  if (!json_is_object(root))
    return mb_error_set(&ps->err, MB_E_PROTOCOL, "process event: message is not a JSON object");
  json_t *ev = json_object_get(root, "event");
  if (!json_is_object(ev)) return MB_OK;
  json_t *st = json_object_get(ev, "start"), *end = json_object_get(ev, "end");
  if (json_is_object(st)) {
    json_t *pid = json_object_get(st, "pid");
    return mb_ps_start(ps, json_is_integer(pid) ? (long long)json_integer_value(pid) : 0);
  } else if (json_is_object(end)) {
    struct mb_ps_fact *f = mb_ps_end(ps);
    if (!f) return ps->err.code;
    json_t *code = json_object_get(end, "exitCode");
    f->value = json_is_integer(code) ? (long long)json_integer_value(code) : 0;
    f->flag = json_is_true(json_object_get(end, "exited"));
    mb_ps_json_text(end, "status", f->text, sizeof f->text);
    mb_ps_json_text(end, "error", f->code, sizeof f->code);
  }
  return MB_OK;
}

/* A base-128 varint at b[*off] (at most 10 bytes, as protobuf allows). */
static int mb_ps_varint(const unsigned char *b, size_t len, size_t *off, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < 10 && *off < len; i++) {
    unsigned char c = b[(*off)++];
    if (i == 9 && c > 1) return 0;
    x |= (uint64_t)(c & 0x7f) << (7 * i);
    if (!(c & 0x80)) {
      *v = x;
      return 1;
    }
  }
  return 0;
}

int mb_procstream_proto_data(const void *msg, size_t len, const unsigned char **data, size_t *n) {
  const unsigned char *b = msg;
  size_t off = 0;
  uint64_t l;
  /* field 1 (event), field 2 (data): each a length-delimited field that is all of its parent */
  static const unsigned char outer[2] = {0x0a, 0x12};
  for (int k = 0; k < 2; k++) {
    if (off >= len || b[off++] != outer[k] || !mb_ps_varint(b, len, &off, &l) || l != len - off) return -1;
  }
  if (off >= len) return -1;
  unsigned char tag = b[off++];
  int leaf = tag == 0x0a ? 0 : tag == 0x12 ? 1 : tag == 0x1a ? 2 : -1;
  if (leaf < 0 || !mb_ps_varint(b, len, &off, &l) || l != len - off) return -1;
  *data = b + off;
  *n = (size_t)l;
  return leaf;
}

/* One binary event (StartResponse and ConnectResponse are the same message on the wire). */
static int mb_ps_proto_event(struct mb_procstream *ps, const struct mb_envelope *e) {
  const unsigned char *data;
  size_t dn;
  int leaf = mb_procstream_proto_data(e->data, e->len, &data, &dn);
  if (leaf >= 0) return mb_ps_data(ps, leaf, data, dn); /* the common event, without a copy */
  /* a decoded message holds its bytes once plus a few small structs */
  size_t need = e->len + 4096;
  if (ps->arena.cap < need) {
    mb_arena_free(&ps->arena);
    if (mb_arena_init(&ps->arena, need < 65536 ? 65536 : need) != MB_OK)
      return mb_error_set(&ps->err, MB_E_NOMEM, "cannot decode a %zu-byte event", e->len);
  }
  ps->arena.used = 0;
  ps->arena.exhausted = 0;
  ProtobufCMessage *m;
  struct mb_error uerr;
  if (mb_rpc_unpack(&process__start_response__descriptor, e->data, e->len, &ps->arena, &m, &uerr)) {
    ps->err = uerr;
    return uerr.code;
  }
  const Process__ProcessEvent *ev = ((const Process__StartResponse *)m)->event;
  if (!ev) return MB_OK;
  switch (ev->event_case) {
  case PROCESS__PROCESS_EVENT__EVENT_START:
    return mb_ps_start(ps, ev->start ? (long long)ev->start->pid : 0);
  case PROCESS__PROCESS_EVENT__EVENT_DATA: {
    const Process__ProcessEvent__DataEvent *d = ev->data;
    if (!d) return MB_OK;
    if (d->output_case == PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT)
      return mb_ps_data(ps, 0, d->stdout.data, d->stdout.len);
    if (d->output_case == PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR)
      return mb_ps_data(ps, 1, d->stderr.data, d->stderr.len);
    if (d->output_case == PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY)
      return mb_ps_data(ps, 2, d->pty.data, d->pty.len);
    return MB_OK;
  }
  case PROCESS__PROCESS_EVENT__EVENT_END: {
    struct mb_ps_fact *f = mb_ps_end(ps);
    if (!f) return ps->err.code;
    const Process__ProcessEvent__EndEvent *x = ev->end;
    if (x) {
      f->value = x->exit_code;
      f->flag = x->exited;
      if (x->status) mb_copy_text(f->text, sizeof f->text, x->status, strlen(x->status));
      if (x->error) mb_copy_text(f->code, sizeof f->code, x->error, strlen(x->error));
    }
    return MB_OK;
  }
  default: /* keepalive */
    return MB_OK;
  }
}

static int mb_ps_on_envelope(void *ud, const struct mb_envelope *e) {
  struct mb_procstream *ps = ud;
  if (e->end_stream) {
    struct mb_ps_fact *f = mb_ps_fact(ps, e->has_error ? MB_PS_STREAM_ERROR : MB_PS_STREAM_END);
    if (!f) return ps->err.code;
    if (e->has_error) {
      const char *c = mb_connect_code_string(e->error.code);
      if (!c) c = "unknown";
      mb_copy_text(f->code, sizeof f->code, c, strlen(c));
      mb_copy_text(f->text, sizeof f->text, e->error.message, strlen(e->error.message));
    }
    return MB_OK;
  }
  if (ps->proto) return mb_ps_proto_event(ps, e);
  size_t need = mb_b64_decoded_max(e->len);
  if (ps->scratch_cap < need) {
    unsigned char *nb = realloc(ps->scratch, need);
    if (!nb) return mb_error_set(&ps->err, MB_E_NOMEM, "cannot decode a %zu-byte event", e->len);
    ps->scratch = nb;
    ps->scratch_cap = need;
  }
  static const char *const path[] = {"event", "data"};
  static const char *const leaves[] = {"stdout", "stderr", "pty"};
  size_t n = 0;
  int leaf = -1;
  json_t *root = NULL;
  struct mb_error jerr;
  if (mb_connect_json_bytes(e->data, e->len, path, 2, leaves, 3, 0, ps->scratch,
                            ps->scratch_cap, &n, &leaf, &root, &jerr)) {
    ps->err = jerr;
    return jerr.code;
  }
  if (leaf >= 0) return mb_ps_data(ps, leaf, ps->scratch, n);
  int rc = mb_ps_event(ps, root);
  json_decref(root);
  return rc;
}

/* ---- public ---- */

static int mb_ps_begin(struct mb_procstream *ps, struct mb_error *err) {
  if (ps->err.code && err) *err = ps->err;
  return ps->err.code;
}

/* Direct input: the wrapper's frames, or raw bytes for the stdout sink. */
static int mb_ps_push_direct(struct mb_procstream *ps, const void *data, size_t len) {
  if (ps->raw) return mb_ps_sink_data(ps, MB_PS_STDOUT, data, len);
  struct mb_error ferr;
  if (mb_frame_decoder_push(ps->frames, data, len, mb_ps_on_frame, ps, &ferr)) {
    if (!ps->err.code) ps->err = ferr;
    return ps->err.code;
  }
  return MB_OK;
}

int mb_procstream_push(struct mb_procstream *ps, const void *data, size_t len,
                       struct mb_error *err) {
  if (mb_ps_begin(ps, err)) return ps->err.code;
  if (ps->direct) {
    int rc = mb_ps_push_direct(ps, data, len);
    if (rc && err) *err = ps->err;
    return rc;
  }
  struct mb_error eerr;
  if (mb_envelope_decoder_push(ps->env, data, len, mb_ps_on_envelope, ps, &eerr)) {
    /* A callback failure is in ps->err with its own message; the decoder's wraps it. */
    if (!ps->err.code) ps->err = eerr;
    if (err) *err = ps->err;
    return ps->err.code;
  }
  return MB_OK;
}

int mb_procstream_finish(struct mb_procstream *ps, struct mb_error *err) {
  if (mb_ps_begin(ps, err)) return ps->err.code;
  int rc = ps->direct ? MB_OK : mb_envelope_decoder_finish(ps->env, err);
  if (!rc && !ps->raw) rc = mb_frame_decoder_finish(ps->frames, err);
  return rc;
}

size_t mb_procstream_take_facts(struct mb_procstream *ps, struct mb_ps_fact *out, size_t max) {
  size_t n = ps->nfacts < max ? ps->nfacts : max;
  memcpy(out, ps->facts, n * sizeof *out);
  memmove(ps->facts, ps->facts + n, (ps->nfacts - n) * sizeof *out);
  ps->nfacts -= n;
  return n;
}

size_t mb_procstream_pending_facts(const struct mb_procstream *ps) { return ps->nfacts; }

int mb_procstream_add_fact(struct mb_procstream *ps, const struct mb_ps_fact *f) {
  if (ps->err.code) return ps->err.code;
  struct mb_ps_fact *slot = mb_ps_fact(ps, f->kind);
  if (!slot) return ps->err.code;
  *slot = *f;
  return MB_OK;
}

void mb_procstream_add_diag(struct mb_procstream *ps, const void *p, size_t n) {
  mb_ps_diag_add(ps, p, n);
}

unsigned mb_procstream_pending_kinds(const struct mb_procstream *ps) {
  unsigned m = 0;
  for (size_t i = 0; i < ps->nfacts; i++) m |= 1u << ps->facts[i].kind;
  return m;
}

const unsigned char *mb_procstream_peek(const struct mb_procstream *ps, int stream, size_t *len) {
  const struct mb_ps_out *o = &ps->out[stream ? 1 : 0];
  *len = o->qlen - o->qoff;
  return o->qbuf ? o->qbuf + o->qoff : (const unsigned char *)"";
}

void mb_procstream_consume(struct mb_procstream *ps, int stream, size_t n) {
  struct mb_ps_out *o = &ps->out[stream ? 1 : 0];
  if (n > o->qlen - o->qoff) n = o->qlen - o->qoff;
  o->qoff += n;
  if (o->qoff == o->qlen) o->qoff = o->qlen = 0;
}

void mb_procstream_seal(struct mb_procstream *ps, int stream) {
  struct mb_ps_out *o = &ps->out[stream ? 1 : 0];
  if (o->sink.kind == MB_PS_QUEUE) o->sealed = 1;
}

void mb_procstream_discard(struct mb_procstream *ps, int stream) {
  struct mb_ps_out *o = &ps->out[stream ? 1 : 0];
  if (o->sink.kind != MB_PS_QUEUE) return;
  o->sink.kind = MB_PS_DISCARD;
  o->qoff = o->qlen = 0;
}

uint64_t mb_procstream_total(const struct mb_procstream *ps, int stream) {
  return ps->out[stream ? 1 : 0].total;
}

void mb_procstream_read_from(const struct mb_procstream *ps, int stream, uint64_t from,
                             const unsigned char **a, size_t *al, const unsigned char **b,
                             size_t *bl, uint64_t *next, int *lossy) {
  const struct mb_ps_out *o = &ps->out[stream ? 1 : 0];
  const struct mb_ps_ring *r = &o->ring;
  *a = *b = NULL;
  *al = *bl = 0;
  *next = o->total;
  uint64_t start = o->total - r->held;
  *lossy = from < start;
  if (o->sink.kind != MB_PS_TAIL || r->held == 0) return;
  size_t off = *lossy ? 0 : from - start >= r->held ? r->held : (size_t)(from - start);
  size_t n = r->held - off;
  if (n == 0) return;
  size_t pos = (r->head + off) % r->cap;
  size_t first = r->cap - pos < n ? r->cap - pos : n;
  *a = r->buf + pos;
  *al = first;
  if (n > first) {
    *b = r->buf;
    *bl = n - first;
  }
}

const char *mb_procstream_diag(const struct mb_procstream *ps, size_t *len) {
  *len = ps->diag_len;
  return ps->diag;
}
