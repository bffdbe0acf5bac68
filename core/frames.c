/* frames.c — mbwrap stdio frames: decoder and encoder. */
#include "frames.h"
#include "b64.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB_FRAME_B64_MAX 32768 /* base64 length of MB_FRAME_DATA_MAX bytes */

static const char *const mb_frame_names[] = {
  NULL, "stdout", "stderr", "pgid", "exit", "signal", "spawn_error", "empty", "done",
};

const char *mb_frame_kind_name(int kind) {
  return kind >= MB_FRAME_STDOUT && kind <= MB_FRAME_DONE ? mb_frame_names[kind] : NULL;
}

struct mb_frame_decoder {
  size_t max_line;
  char *line;             /* a line spanning pushes, up to max_line bytes */
  size_t line_have, line_cap;
  unsigned char *out;     /* decoded base64 */
  size_t out_cap;
  unsigned long nframes;  /* frames accepted so far */
  int pgid, spawn, exit_, signal_, empty, done;
  int in_push;
  mb_frame_reserve_cb reserve; /* decode data frames into the consumer's memory */
  void *reserve_ud;
  struct mb_error err;
};

void mb_frame_decoder_set_reserve(struct mb_frame_decoder *d, mb_frame_reserve_cb reserve, void *ud) {
  d->reserve = reserve;
  d->reserve_ud = ud;
}

struct mb_frame_decoder *mb_frame_decoder_new(size_t max_line) {
  struct mb_frame_decoder *d = calloc(1, sizeof *d);
  if (d) d->max_line = max_line;
  return d;
}

void mb_frame_decoder_free(struct mb_frame_decoder *d) {
  if (!d) return;
  free(d->line);
  free(d->out);
  free(d);
}

#define MB_FAIL(d, code, ...) mb_error_set(&(d)->err, (code), __VA_ARGS__)

/* Strict decimal: no sign, no leading zeros, value <= max. -1 if malformed or out of range. */
static long mb_parse_dec(const char *s, size_t n, long max) {
  if (n == 0 || n > 10 || (n > 1 && s[0] == '0')) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v <= max ? v : -1;
}

/* Decodes canonical base64 into d->out (grown as needed; bounded by max_line). */
static int mb_frame_b64(struct mb_frame_decoder *d, const char *s, size_t n, size_t *len,
                        const char *what) {
  size_t need = n / 4 * 3;
  if (d->out_cap < need) {
    unsigned char *nb = realloc(d->out, need);
    if (!nb) return MB_FAIL(d, MB_E_NOMEM, "frame %lu: out of memory", d->nframes + 1);
    d->out = nb;
    d->out_cap = need;
  }
  const char *why = NULL;
  if (mb_b64_decode(s, n, d->out, d->out_cap, len, &why))
    return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s: %s", d->nframes + 1, what, why);
  return MB_OK;
}

static int mb_frame_control(struct mb_frame_decoder *d, const char *s, size_t n,
                            struct mb_frame *f) {
  unsigned long no = d->nframes + 1;
  const char *sp = memchr(s, ' ', n);
  size_t wl = sp ? (size_t)(sp - s) : n;
  const char *arg = sp ? sp + 1 : s + n;
  size_t al = sp ? n - wl - 1 : 0;
#define KW(w) (wl == sizeof(w) - 1 && memcmp(s, w, wl) == 0)
  if (KW("pgid")) {
    if (d->pgid) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: duplicate !pgid", no);
    if (d->nframes) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: !pgid must be the first frame", no);
    long v = mb_parse_dec(arg, al, 2147483647L);
    if (!sp || v <= 1)
      return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: !pgid needs a decimal id > 1", no);
    d->pgid = 1;
    f->kind = MB_FRAME_PGID;
    f->value = (int)v;
  } else if (KW("spawn-error")) {
    if (d->spawn) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: duplicate !spawn-error", no);
    if (d->nframes > (unsigned long)d->pgid)
      return MB_FAIL(d, MB_E_PROTOCOL,
                     "frame %lu: !spawn-error must come first or right after !pgid", no);
    const char *sp2 = sp ? memchr(arg, ' ', al) : NULL;
    long v = sp2 ? mb_parse_dec(arg, (size_t)(sp2 - arg), 4095) : -1;
    if (v < 1)
      return MB_FAIL(d, MB_E_PROTOCOL,
                     "frame %lu: !spawn-error needs '<errno 1..4095> <base64 message>'", no);
    size_t ml = 0;
    if (mb_frame_b64(d, sp2 + 1, al - (size_t)(sp2 + 1 - arg), &ml, "!spawn-error message"))
      return d->err.code;
    d->spawn = 1;
    f->kind = MB_FRAME_SPAWN_ERROR;
    f->value = (int)v;
    f->data = d->out;
    f->len = ml;
  } else if (KW("exit") || KW("signal")) {
    int is_exit = s[0] == 'e';
    const char *name = is_exit ? "!exit" : "!signal";
    if (is_exit ? d->exit_ : d->signal_)
      return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: duplicate %s", no, name);
    if (is_exit ? d->signal_ : d->exit_)
      return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: !exit together with !signal", no);
    if (d->spawn) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s after !spawn-error", no, name);
    if (d->empty) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s after !empty", no, name);
    long v = sp ? mb_parse_dec(arg, al, is_exit ? 255 : 64) : -1;
    if (v < (is_exit ? 0 : 1))
      return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s needs a decimal %s", no, name,
                     is_exit ? "code 0..255" : "signal 1..64");
    if (is_exit) d->exit_ = 1;
    else d->signal_ = 1;
    f->kind = is_exit ? MB_FRAME_EXIT : MB_FRAME_SIGNAL;
    f->value = (int)v;
  } else if (KW("empty") || KW("done")) {
    int is_empty = s[0] == 'e';
    const char *name = is_empty ? "!empty" : "!done";
    if (sp) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s takes no argument", no, name);
    if (is_empty && d->empty) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: duplicate !empty", no);
    if (!d->exit_ && !d->signal_ && !d->spawn)
      return MB_FAIL(d, MB_E_PROTOCOL,
                     "frame %lu: %s before !exit, !signal or !spawn-error", no, name);
    if (is_empty) d->empty = 1;
    else d->done = 1;
    f->kind = is_empty ? MB_FRAME_EMPTY : MB_FRAME_DONE;
  } else {
    return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: unknown control frame '!%.*s'", no,
                   (int)(wl > 32 ? 32 : wl), s);
  }
#undef KW
  return MB_OK;
}

/* One complete line (without '\n'). */
static int mb_frame_line(struct mb_frame_decoder *d, const char *s, size_t n, mb_frame_cb cb,
                         void *ud) {
  unsigned long no = d->nframes + 1;
  struct mb_frame f = {0, NULL, 0, 0};
  if (n == 0) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: empty line", no);
  if (s[0] == 'o' || s[0] == 'e') {
    const char *what = s[0] == 'o' ? "'o' frame" : "'e' frame";
    if (n == 1) return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s without data", no, what);
    if (n - 1 > MB_FRAME_B64_MAX)
      return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s carries more than %d bytes", no, what,
                     MB_FRAME_DATA_MAX);
    f.kind = s[0] == 'o' ? MB_FRAME_STDOUT : MB_FRAME_STDERR;
    /* the exact decoded length (a malformed line goes the other way and is refused there) */
    size_t b64 = n - 1, pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    size_t need = b64 % 4 == 0 && b64 >= 4 ? b64 / 4 * 3 - pad : 0;
    unsigned char *dst = d->reserve && need ? d->reserve(d->reserve_ud, f.kind, need) : NULL;
    if (dst) { /* straight into the consumer's sink */
      const char *why = NULL;
      if (mb_b64_decode(s + 1, n - 1, dst, need, &f.len, &why))
        return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: %s: %s", no, what, why);
      f.data = dst;
    } else {
      if (mb_frame_b64(d, s + 1, n - 1, &f.len, what)) return d->err.code;
      f.data = d->out;
    }
  } else if (s[0] == '!') {
    if (mb_frame_control(d, s + 1, n - 1, &f)) return d->err.code;
  } else {
    return MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: unknown frame kind 0x%02x", no,
                   (unsigned char)s[0]);
  }
  d->nframes++;
  int rc = cb ? cb(ud, &f) : 0;
  if (rc) MB_FAIL(d, rc, "frame consumer stopped the stream: %s", mb_strerror(rc));
  return rc;
}

static int mb_frame_append(struct mb_frame_decoder *d, const char *p, size_t k) {
  if (d->line_cap < d->line_have + k) {
    size_t want = d->line_cap * 2 > d->line_have + k ? d->line_cap * 2 : d->line_have + k;
    if (want > d->max_line) want = d->max_line;
    char *nb = realloc(d->line, want);
    if (!nb) return MB_FAIL(d, MB_E_NOMEM, "cannot buffer a frame line of %zu bytes", want);
    d->line = nb;
    d->line_cap = want;
  }
  memcpy(d->line + d->line_have, p, k);
  d->line_have += k;
  return MB_OK;
}

static int mb_frame_sticky(struct mb_frame_decoder *d, struct mb_error *err) {
  if (d->in_push && !d->err.code)
    MB_FAIL(d, MB_E_INVALID, "frame decoder unusable: a callback did not return");
  if (d->err.code && err) *err = d->err;
  return d->err.code;
}

int mb_frame_decoder_push(struct mb_frame_decoder *d, const void *data, size_t len,
                          mb_frame_cb cb, void *ud, struct mb_error *err) {
  if (mb_frame_sticky(d, err)) return d->err.code;
  d->in_push = 1;
  const char *p = data;
  while (len > 0) {
    if (d->done) {
      MB_FAIL(d, MB_E_PROTOCOL, "frame %lu: data after !done", d->nframes + 1);
      break;
    }
    size_t room = d->max_line - d->line_have; /* content bytes the line may still take */
    size_t scan = len <= room ? len : room + 1; /* no overflow when max_line is SIZE_MAX */
    const char *nl = memchr(p, '\n', scan);
    if (!nl) {
      if (len > room) {
        MB_FAIL(d, MB_E_TOO_LARGE, "frame %lu: line exceeds %zu bytes", d->nframes + 1,
                d->max_line);
        break;
      }
      mb_frame_append(d, p, len);
      break;
    }
    size_t k = (size_t)(nl - p);
    if (d->line_have == 0) { /* whole line in this chunk: no copy */
      if (mb_frame_line(d, p, k, cb, ud)) break;
    } else {
      if (k && mb_frame_append(d, p, k)) break;
      size_t n = d->line_have;
      d->line_have = 0;
      if (mb_frame_line(d, d->line, n, cb, ud)) break;
    }
    p += k + 1;
    len -= k + 1;
  }
  d->in_push = 0;
  if (d->err.code && err) *err = d->err;
  return d->err.code;
}

int mb_frame_decoder_finish(struct mb_frame_decoder *d, struct mb_error *err) {
  if (mb_frame_sticky(d, err)) return d->err.code;
  if (d->line_have)
    return mb_error_set(err, MB_E_TRUNCATED,
                        "truncated: frame %lu has %zu bytes but no newline at end of stream",
                        d->nframes + 1, d->line_have);
  if (!d->done)
    return mb_error_set(err, MB_E_PROTOCOL, "incomplete: stream ended after %lu frames without !done",
                        d->nframes);
  return MB_OK;
}

/* ---- encoder ---- */

static size_t mb_dec_len(long v) {
  size_t n = 1;
  while (v >= 10) { v /= 10; n++; }
  return n;
}

size_t mb_frame_encoded_len(const struct mb_frame *f) {
  switch (f->kind) {
  case MB_FRAME_STDOUT: case MB_FRAME_STDERR:
    if (f->len < 1 || f->len > MB_FRAME_DATA_MAX) return 0;
    return 1 + mb_b64_encoded_len(f->len) + 1;
  case MB_FRAME_PGID:
    return f->value > 1 ? sizeof "!pgid " - 1 + mb_dec_len(f->value) + 1 : 0;
  case MB_FRAME_EXIT:
    return f->value >= 0 && f->value <= 255 ? sizeof "!exit " - 1 + mb_dec_len(f->value) + 1 : 0;
  case MB_FRAME_SIGNAL:
    return f->value >= 1 && f->value <= 64 ? sizeof "!signal " - 1 + mb_dec_len(f->value) + 1 : 0;
  case MB_FRAME_SPAWN_ERROR: {
    if (f->value < 1 || f->value > 4095) return 0;
    size_t b = mb_b64_encoded_len(f->len);
    if (f->len && !b) return 0;
    return sizeof "!spawn-error " - 1 + mb_dec_len(f->value) + 1 + b + 1;
  }
  case MB_FRAME_EMPTY: return sizeof "!empty\n" - 1;
  case MB_FRAME_DONE: return sizeof "!done\n" - 1;
  default: return 0;
  }
}

int mb_frame_encode(const struct mb_frame *f, char *out, size_t cap, size_t *out_len) {
  *out_len = 0;
  size_t need = mb_frame_encoded_len(f);
  if (!need) return MB_E_INVALID;
  if (need > cap) return MB_E_TOO_LARGE;
  size_t k = 0;
  char num[16];
  switch (f->kind) {
  case MB_FRAME_STDOUT: case MB_FRAME_STDERR:
    out[0] = f->kind == MB_FRAME_STDOUT ? 'o' : 'e';
    k = 1 + mb_b64_encode(f->data, f->len, out + 1); /* its NUL lands where '\n' goes */
    break;
  case MB_FRAME_SPAWN_ERROR:
    k = (size_t)snprintf(num, sizeof num, "%d ", f->value);
    memcpy(out, "!spawn-error ", 13);
    memcpy(out + 13, num, k);
    k += 13;
    k += f->len ? mb_b64_encode(f->data, f->len, out + k) : 0;
    break;
  case MB_FRAME_EMPTY: memcpy(out, "!empty", 6); k = 6; break;
  case MB_FRAME_DONE: memcpy(out, "!done", 5); k = 5; break;
  default: {
    const char *w = f->kind == MB_FRAME_PGID ? "!pgid " : f->kind == MB_FRAME_EXIT ? "!exit " : "!signal ";
    size_t wl = strlen(w);
    memcpy(out, w, wl);
    k = wl + (size_t)snprintf(num, sizeof num, "%d", f->value);
    memcpy(out + wl, num, k - wl);
  }
  }
  out[k++] = '\n';
  *out_len = k;
  return MB_OK;
}

size_t mb_frame_data_encoded_len(size_t len) {
  size_t full = len / MB_FRAME_DATA_MAX, rest = len % MB_FRAME_DATA_MAX;
  return full * (MB_FRAME_B64_MAX + 2) + (rest ? mb_b64_encoded_len(rest) + 2 : 0);
}

int mb_frame_encode_data(int kind, const void *data, size_t len, char *out, size_t cap,
                         size_t *out_len) {
  *out_len = 0;
  if ((kind != MB_FRAME_STDOUT && kind != MB_FRAME_STDERR) || len == 0) return MB_E_INVALID;
  if (mb_frame_data_encoded_len(len) > cap) return MB_E_TOO_LARGE;
  const unsigned char *p = data;
  size_t off = 0;
  while (len > 0) {
    struct mb_frame f = {kind, p, len < MB_FRAME_DATA_MAX ? len : MB_FRAME_DATA_MAX, 0};
    size_t k;
    mb_frame_encode(&f, out + off, cap - off, &k);
    off += k;
    p += f.len;
    len -= f.len;
  }
  *out_len = off;
  return MB_OK;
}
