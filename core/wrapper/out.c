/* Frame output for mbwrap.
 *
 * The wrapper carries its own tiny base64 encoder (and a strict decoder for `run -i`): it is linked statically against musl, which has
 * no OpenSSL, and it must need nothing else inside the sandbox. This is the one justified exception
 * to "use a real library"; the host decodes (strictly, canonically) with OpenSSL in core/frames.c. */
#include "mbwrap.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t mb_b64_len(size_t n) { return 4 * ((n + 2) / 3); }

/* Two characters per 12 bits: three input bytes are two table lookups (8 KiB, built once). */
static char PAIRS[4096][2];
static int pairs_ready;

static void pairs_init(void) {
  for (int i = 0; i < 4096; i++) {
    PAIRS[i][0] = B64[i >> 6];
    PAIRS[i][1] = B64[i & 63];
  }
  pairs_ready = 1;
}

size_t mb_b64_encode(const unsigned char *in, size_t n, char *out) {
  if (!pairs_ready) pairs_init();   /* mbwrap has one thread */
  size_t i = 0, o = 0;
  for (; i + 12 <= n; i += 12, o += 16) {   /* four quanta per round */
    for (int k = 0; k < 4; k++) {
      const unsigned char *p = in + i + 3 * k;
      uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
      memcpy(out + o + 4 * k, PAIRS[v >> 12], 2);
      memcpy(out + o + 4 * k + 2, PAIRS[v & 0xfff], 2);
    }
  }
  for (; i + 2 < n; i += 3, o += 4) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    memcpy(out + o, PAIRS[v >> 12], 2);
    memcpy(out + o + 2, PAIRS[v & 0xfff], 2);
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)in[i] << 16;
    out[o++] = B64[v >> 18 & 63];
    out[o++] = B64[v >> 12 & 63];
    out[o++] = '=';
    out[o++] = '=';
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
    out[o++] = B64[v >> 18 & 63];
    out[o++] = B64[v >> 12 & 63];
    out[o++] = B64[v >> 6 & 63];
    out[o++] = '=';
  }
  return o;
}

static int b64_val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Strict, canonical: standard alphabet, length a multiple of 4, '=' only as final padding, unused
 * bits zero. out holds at least 3 * n / 4 bytes. Returns the decoded length, or -1. */
long mb_b64_decode(const char *in, size_t n, unsigned char *out) {
  if (n % 4) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int pad = in[i + 3] == '=' ? (in[i + 2] == '=' ? 2 : 1) : 0;
    if (pad && i + 4 != n) return -1;
    int v[4];
    for (int k = 0; k < 4 - pad; k++)
      if ((v[k] = b64_val((unsigned char)in[i + k])) < 0) return -1;
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12;
    if (pad < 2) w |= (uint32_t)v[2] << 6;
    if (pad < 1) w |= (uint32_t)v[3];
    if ((pad == 2 && (w & 0xffff)) || (pad == 1 && (w & 0xff))) return -1;
    out[o++] = (unsigned char)(w >> 16);
    if (pad < 2) out[o++] = (unsigned char)(w >> 8);
    if (pad < 1) out[o++] = (unsigned char)w;
  }
  return (long)o;
}

int ob_init(struct obuf *ob, size_t cap) {
  ob->buf = malloc(cap);
  ob->cap = cap;
  ob->head = ob->tail = 0;
  return ob->buf ? 0 : -1;
}

size_t ob_len(const struct obuf *ob) { return ob->tail - ob->head; }

/* Free bytes after compaction (memmove happens only when an append would not fit otherwise). */
size_t ob_space(struct obuf *ob) { return ob->cap - ob_len(ob); }

static char *ob_reserve(struct obuf *ob, size_t need) {
  if (ob->head == ob->tail) ob->head = ob->tail = 0;
  if (ob->cap - ob->tail < need) {
    if (ob_space(ob) < need) return NULL;
    memmove(ob->buf, ob->buf + ob->head, ob_len(ob));
    ob->tail -= ob->head;
    ob->head = 0;
  }
  return ob->buf + ob->tail;
}

int ob_frame(struct obuf *ob, char kind, const void *data, size_t n) {
  if (n == 0 || n > MB_FRAME_RAW) return -1;
  size_t need = 1 + mb_b64_len(n) + 1;
  char *p = ob_reserve(ob, need);
  if (!p) return -1;
  p[0] = kind;
  size_t e = mb_b64_encode(data, n, p + 1);
  p[1 + e] = '\n';
  ob->tail += need;
  return 0;
}

int ob_ctl(struct obuf *ob, const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof line - 1) return -1;
  line[n++] = '\n';
  char *p = ob_reserve(ob, (size_t)n);
  if (!p) return -1;
  memcpy(p, line, (size_t)n);
  ob->tail += (size_t)n;
  return 0;
}

int ob_flush_some(struct obuf *ob, int fd) {
  while (ob->head < ob->tail) {
    ssize_t w = write(fd, ob->buf + ob->head, ob->tail - ob->head);
    if (w > 0) {
      ob->head += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (w == 0) errno = EIO;
    return -1;
  }
  ob->head = ob->tail = 0;
  return 0;
}

int ob_flush_all(struct obuf *ob, int fd) {
  while (ob_len(ob)) {
    if (ob_flush_some(ob, fd) < 0) return -1;
    if (!ob_len(ob)) break;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
  }
  return 0;
}

/* ---- tool mode ---- */
static struct obuf tool_ob;

static void tool_die_output(void) {
  /* The reader is gone (EPIPE) or stdout is broken: nothing more can be reported. */
  _exit(1);
}

void tool_init(void) {
  if (ob_init(&tool_ob, 4 * MB_FRAME_LINE) < 0) {
    fputs("mbwrap: out of memory\n", stderr);
    _exit(1);
  }
}

void tool_data(const void *data, size_t n) {
  const unsigned char *p = data;
  while (n) {
    size_t k = n < MB_FRAME_RAW ? n : MB_FRAME_RAW;
    if (ob_space(&tool_ob) < MB_FRAME_LINE && ob_flush_all(&tool_ob, 1) < 0) tool_die_output();
    if (ob_frame(&tool_ob, 'o', p, k) < 0) tool_die_output();
    p += k;
    n -= k;
  }
}

void tool_error_data(const void *data, size_t n) {
  const unsigned char *p = data;
  while (n) {
    size_t k = n < MB_FRAME_RAW ? n : MB_FRAME_RAW;
    if (ob_space(&tool_ob) < MB_FRAME_LINE && ob_flush_all(&tool_ob, 1) < 0) tool_die_output();
    if (ob_frame(&tool_ob, 'e', p, k) < 0) tool_die_output();
    p += k;
    n -= k;
  }
}

void tool_printf(const char *fmt, ...) {
  char line[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) n = (int)sizeof line - 1; /* details are bounded; truncate them */
  tool_data(line, (size_t)n);
}

void tool_flush(void) {
  if (ob_flush_all(&tool_ob, 1) < 0) tool_die_output();
}

int tool_finish(int code) {
  if (ob_space(&tool_ob) < 64 && ob_flush_all(&tool_ob, 1) < 0) tool_die_output();
  if (ob_ctl(&tool_ob, "!exit %d", code) < 0 || ob_ctl(&tool_ob, "!empty") < 0 ||
      ob_ctl(&tool_ob, "!done") < 0 || ob_flush_all(&tool_ob, 1) < 0)
    tool_die_output();
  return 0;
}

size_t tool_err_line(char *buf, size_t cap, const char *code, const char *fmt, va_list ap) {
  int h = snprintf(buf, cap, "err %s ", code);
  size_t used = h < 0 ? 0 : (size_t)h;
  if (used > cap - 2) used = cap - 2;                /* room for the newline and the NUL */
  int n = vsnprintf(buf + used, cap - used - 1, fmt, ap);
  size_t dl = n < 0 ? 0 : (size_t)n;
  if (dl > cap - used - 2) dl = cap - used - 2;      /* what vsnprintf could keep */
  size_t len = used + dl;
  /* Details are single-line by construction: replace any newline a path may carry. */
  for (size_t i = used; i < len; i++)
    if (buf[i] == '\n') buf[i] = ' ';
  buf[len++] = '\n';
  buf[len] = 0;
  return len;
}

int tool_fail(const char *code, const char *fmt, ...) {
  char line[4200];
  va_list ap;
  va_start(ap, fmt);
  tool_err_line(line, sizeof line, code, fmt, ap);
  va_end(ap);
  tool_printf("%s", line);
  return tool_finish(1);
}
