/* rpc.c — see rpc.h. */
#include "rpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connect.h"
#include "errors.h"
#include "connect_request.h"

bool rpc_is_streaming(const sd_request *r) { return creq_is_streaming(sd_header(r, "Content-Type")); }

json_t *rpc_request(sd_request *r) {
  size_t len;
  const uint8_t *b = sd_body(r, &len);
  char err[512];
  json_t *j = creq_parse(b, len, rpc_is_streaming(r), err, sizeof err);
  if (!j) rpc_reply_error(r, "invalid_argument", "%s", err);
  return j;
}

static json_t *vmessage(const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  json_t *j = json_string(msg);
  return j ? j : json_string("(message is not valid UTF-8)");
}

int rpc_reply_error(sd_request *r, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *m = vmessage(fmt, ap);
  va_end(ap);
  if (rpc_is_streaming(r)) {
    /* Connect streaming: errors travel in the end-stream frame of a 200 response. */
    sd_stream *s = rpc_stream_open(r);
    if (!s) { json_decref(m); return -1; }
    rpc_end(s, code, json_string_value(m));
    json_decref(m);
    return 0;
  }
  int status = mb_connect_http_status(mb_connect_code_from_string(code));
  return sd_reply_json(r, status, json_pack("{s:s,s:o}", "code", code, "message", m));
}

sd_stream *rpc_stream_open(sd_request *r) { return sd_stream_open(r, "application/connect+json"); }

/* One contiguous write, so that an envelope is never split across reader wake-ups needlessly. */
static int send_envelope(sd_stream *s, unsigned flags, const char *js) {
  size_t n = strlen(js);
  unsigned char hdr[MB_ENVELOPE_HDR];
  if (mb_envelope_header(hdr, flags, n) != MB_OK) return -1;
  uint8_t *buf = malloc(n + MB_ENVELOPE_HDR);
  if (!buf) return -1;
  memcpy(buf, hdr, MB_ENVELOPE_HDR);
  memcpy(buf + MB_ENVELOPE_HDR, js, n);
  int rc = sd_stream_send(s, buf, n + MB_ENVELOPE_HDR);
  free(buf);
  return rc;
}

int rpc_send(sd_stream *s, json_t *msg) {
  char *js = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
  json_decref(msg);
  if (!js) return -1;
  int rc = send_envelope(s, 0, js);
  free(js);
  return rc;
}

void rpc_end(sd_stream *s, const char *code, const char *message) {
  json_t *end = code ? json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message ? message : "")
                     : json_object();
  char *js = end ? json_dumps(end, JSON_COMPACT) : NULL;
  json_decref(end);
  if (js) send_envelope(s, MB_ENVELOPE_END_STREAM, js);
  else send_envelope(s, MB_ENVELOPE_END_STREAM, "{}");
  free(js);
  sd_stream_end(s);
}

int64_t rpc_header_int(sd_request *r, const char *name, int64_t dflt, int64_t max) {
  const char *h = sd_header(r, name);
  if (!h || !*h) return dflt;
  char *end;
  errno = 0;
  long long v = strtoll(h, &end, 10);
  if (errno || *end || v < 0) return dflt;
  return v > max ? max : v;
}
