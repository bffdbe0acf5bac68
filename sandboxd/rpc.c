/* rpc.c — see rpc.h. */
#include "rpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connect.h"
#include "errors.h"

static atomic_bool serve_json = true, serve_proto = true;

void rpc_set_codecs(bool json, bool proto) {
  atomic_store(&serve_json, json);
  atomic_store(&serve_proto, proto);
}

creq_type rpc_type(const sd_request *r) {
  creq_type t = {false, false};
  if (creq_content_type(sd_header(r, "Content-Type"), &t) != 0) t = (creq_type){false, false};
  return t;
}

bool rpc_accept(sd_request *r, bool streaming) {
  creq_type t;
  const char *ct = sd_header(r, "Content-Type");
  if (creq_content_type(ct, &t) == 0 && t.streaming == streaming && (t.proto ? atomic_load(&serve_proto) : atomic_load(&serve_json)))
    return true;
  bool j = atomic_load(&serve_json), p = atomic_load(&serve_proto);
  char accept[128];
  snprintf(accept, sizeof accept, "%s%s%s", j ? (streaming ? "application/connect+json" : "application/json") : "",
           j && p ? ", " : "", p ? (streaming ? "application/connect+proto" : "application/proto") : "");
  sd_reply_header(r, "Accept-Post", accept);
  char shown[101];   /* what the client sent, as printable ASCII */
  size_t k = 0;
  for (const char *c = ct ? ct : ""; *c && k < sizeof shown - 1; c++) shown[k++] = *c >= 0x20 && *c <= 0x7e ? *c : '?';
  shown[k] = 0;
  char msg[400];
  snprintf(msg, sizeof msg, "unsupported content type '%s': this procedure takes %s", shown, accept);
  json_t *body = json_pack("{s:s,s:s}", "code", "unknown", "message", msg);
  sd_reply_json(r, 415, body);
  return false;
}

ProtobufCMessage *rpc_request(sd_request *r, const ProtobufCMessageDescriptor *d, struct mb_arena *ar) {
  size_t len;
  const uint8_t *b = sd_body(r, &len);
  char err[512];
  if (mb_arena_init(ar, CREQ_ARENA(len)) != MB_OK) {
    rpc_reply_error(r, "resource_exhausted", "out of memory for a %zu-byte request", len);
    return NULL;
  }
  ProtobufCMessage *m = creq_parse(b, len, rpc_type(r), d, ar, err, sizeof err);
  if (!m) {
    mb_arena_free(ar);
    rpc_reply_error(r, "invalid_argument", "%s", err);
  }
  return m;
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
  if (rpc_type(r).streaming) {
    /* Connect streaming: errors travel in the end-stream frame of a 200 response. */
    rpc_stream rs;
    if (!rpc_stream_open(r, NULL, &rs)) { json_decref(m); return -1; }
    rpc_end(&rs, code, json_string_value(m));
    json_decref(m);
    return 0;
  }
  /* Unary errors are Connect's JSON error body in either codec (connect-go does the same). */
  int status = mb_connect_http_status(mb_connect_code_from_string(code));
  return sd_reply_json(r, status, json_pack("{s:s,s:o}", "code", code, "message", m));
}

/* A message in the JSON shape → protobuf (packed into a malloc'ed buffer). */
static uint8_t *pack_json(const ProtobufCMessageDescriptor *d, json_t *msg, size_t *len, char *err, size_t errlen) {
  struct mb_arena ar;
  char *text = json_dumps(msg, JSON_COMPACT);   /* bounds the arena by the message's size */
  size_t tl = text ? strlen(text) : 0;
  free(text);
  if (mb_arena_init(&ar, MB_RPC_ARENA_FOR(tl)) != MB_OK) { snprintf(err, errlen, "out of memory"); return NULL; }
  ProtobufCMessage *m;
  struct mb_error e;
  uint8_t *out = NULL;
  if (mb_rpc_from_json(d, msg, &ar, &m, &e) != MB_OK) snprintf(err, errlen, "cannot encode %.60s: %.150s", d->name, e.message);
  else {
    *len = protobuf_c_message_get_packed_size(m);
    out = malloc(*len ? *len : 1);
    if (out) protobuf_c_message_pack(m, out);
    else snprintf(err, errlen, "out of memory");
  }
  mb_arena_free(&ar);
  return out;
}

int rpc_reply(sd_request *r, const ProtobufCMessageDescriptor *d, json_t *msg) {
  if (!msg) return rpc_reply_error(r, "internal", "out of memory");
  if (!rpc_type(r).proto) return sd_reply_json(r, 200, msg);
  char err[256];
  size_t len = 0;
  uint8_t *out = pack_json(d, msg, &len, err, sizeof err);
  json_decref(msg);
  if (!out) return rpc_reply_error(r, "internal", "%s", err);
  int rc = sd_reply_bytes(r, 200, "application/proto", out, len);
  free(out);
  return rc;
}

bool rpc_stream_open(sd_request *r, const ProtobufCMessageDescriptor *out, rpc_stream *rs) {
  rs->proto = rpc_type(r).proto;
  rs->out = out;
  rs->s = sd_stream_open(r, rs->proto ? "application/connect+proto" : "application/connect+json");
  return rs->s != NULL;
}

uint8_t *rpc_envelope_begin(rpc_stream *rs, size_t payload_max) {
  if (payload_max > UINT32_MAX) return NULL;
  return sd_stream_reserve(rs->s, MB_ENVELOPE_HDR + payload_max);
}

int rpc_envelope_commit(rpc_stream *rs, size_t payload_len) {
  /* The header is written last, when the length is known; the reservation began with it. */
  return sd_stream_commit(rs->s, MB_ENVELOPE_HDR + payload_len);
}

/* One whole envelope written in place. */
static int send_envelope(sd_stream *s, unsigned flags, const void *payload, size_t n) {
  uint8_t *p = n <= UINT32_MAX ? sd_stream_reserve(s, MB_ENVELOPE_HDR + n) : NULL;
  if (!p) return -1;
  mb_envelope_header(p, (uint8_t)flags, n);
  if (n) memcpy(p + MB_ENVELOPE_HDR, payload, n);
  return sd_stream_commit(s, MB_ENVELOPE_HDR + n);
}

int rpc_send_msg(rpc_stream *rs, const ProtobufCMessage *m) {
  if (rs->proto) {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *p = rpc_envelope_begin(rs, n);
    if (!p) return -1;
    protobuf_c_message_pack(m, p + MB_ENVELOPE_HDR);
    mb_envelope_header(p, 0, n);
    return rpc_envelope_commit(rs, n);
  }
  json_t *j = mb_rpc_to_json(m);
  char *js = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!js) return -1;
  int rc = send_envelope(rs->s, 0, js, strlen(js));
  free(js);
  return rc;
}

int rpc_send(rpc_stream *rs, json_t *msg) {
  if (!msg) return -1;
  if (rs->proto) {
    char err[256];
    size_t len = 0;
    uint8_t *out = pack_json(rs->out, msg, &len, err, sizeof err);
    json_decref(msg);
    if (!out) return -1;
    int rc = send_envelope(rs->s, 0, out, len);
    free(out);
    return rc;
  }
  char *js = json_dumps(msg, JSON_COMPACT);
  json_decref(msg);
  if (!js) return -1;
  int rc = send_envelope(rs->s, 0, js, strlen(js));
  free(js);
  return rc;
}

void rpc_end(rpc_stream *rs, const char *code, const char *message) {
  /* The end-stream message is JSON in either codec. */
  json_t *end = code ? json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message ? message : "")
                     : json_object();
  char *js = end ? json_dumps(end, JSON_COMPACT) : NULL;
  json_decref(end);
  if (js) send_envelope(rs->s, MB_ENVELOPE_END_STREAM, js, strlen(js));
  else send_envelope(rs->s, MB_ENVELOPE_END_STREAM, "{}", 2);
  free(js);
  sd_stream_end(rs->s);
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
