/* connect.c — Connect envelopes and error mapping (JSON via jansson). */
#include "connect.h"
#include "b64.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mb_envelope_header(unsigned char hdr[MB_ENVELOPE_HDR], uint8_t flags, size_t len) {
  if (len > UINT32_MAX) return MB_E_TOO_LARGE;
  hdr[0] = flags;
  hdr[1] = (unsigned char)(len >> 24);
  hdr[2] = (unsigned char)(len >> 16);
  hdr[3] = (unsigned char)(len >> 8);
  hdr[4] = (unsigned char)len;
  return MB_OK;
}

int mb_envelope_encode(uint8_t flags, const void *payload, size_t len, unsigned char *out,
                       size_t cap, size_t *out_len) {
  *out_len = 0;
  if (len > UINT32_MAX || cap < MB_ENVELOPE_HDR || cap - MB_ENVELOPE_HDR < len)
    return MB_E_TOO_LARGE;
  mb_envelope_header(out, flags, len);
  if (len) memcpy(out + MB_ENVELOPE_HDR, payload, len);
  *out_len = MB_ENVELOPE_HDR + len;
  return MB_OK;
}

/* ---- code tables ---- */

static const struct { const char *name; int http; } mb_codes[17] = {
  [1] = {"canceled", 499},          [2] = {"unknown", 500},
  [3] = {"invalid_argument", 400},  [4] = {"deadline_exceeded", 504},
  [5] = {"not_found", 404},         [6] = {"already_exists", 409},
  [7] = {"permission_denied", 403}, [8] = {"resource_exhausted", 429},
  [9] = {"failed_precondition", 400}, [10] = {"aborted", 409},
  [11] = {"out_of_range", 400},     [12] = {"unimplemented", 501},
  [13] = {"internal", 500},         [14] = {"unavailable", 503},
  [15] = {"data_loss", 500},        [16] = {"unauthenticated", 401},
};

int mb_connect_code_from_string(const char *s) {
  if (!s) return 0;
  for (int i = 1; i <= 16; i++)
    if (strcmp(s, mb_codes[i].name) == 0) return i;
  return 0;
}

const char *mb_connect_code_string(int code) {
  return code >= 1 && code <= 16 ? mb_codes[code].name : NULL;
}

int mb_connect_http_status(int code) {
  return code >= 1 && code <= 16 ? mb_codes[code].http : 500;
}

int mb_connect_code_for_http(int status) {
  switch (status) {
  case 400: return MB_CONNECT_INTERNAL;
  case 401: return MB_CONNECT_UNAUTHENTICATED;
  case 403: return MB_CONNECT_PERMISSION_DENIED;
  case 404: return MB_CONNECT_UNIMPLEMENTED;
  case 429: case 502: case 503: case 504: return MB_CONNECT_UNAVAILABLE;
  default: return MB_CONNECT_UNKNOWN;
  }
}

static void mb_set_message(struct mb_connect_error *e, const char *s, size_t len) {
  mb_copy_text(e->message, sizeof e->message, s, len);
}

void mb_connect_unary_error(int status, int is_json, const char *body, size_t len,
                            struct mb_connect_error *out) {
  out->code = mb_connect_code_for_http(status);
  json_t *root = is_json && body ? json_loadb(body, len, 0, NULL) : NULL;
  if (!json_is_object(root)) {
    char m[32];
    int k = snprintf(m, sizeof m, "HTTP %d", status);
    mb_set_message(out, m, (size_t)k);
    json_decref(root);
    return;
  }
  int code = mb_connect_code_from_string(json_string_value(json_object_get(root, "code")));
  if (code) out->code = code;
  json_t *msg = json_object_get(root, "message");
  if (json_is_string(msg)) mb_set_message(out, json_string_value(msg), json_string_length(msg));
  else out->message[0] = '\0';
  json_decref(root);
}

/* ---- end of stream ---- */

static int mb_metadata_ok(json_t *md) {
  if (!json_is_object(md)) return 0;
  const char *k;
  json_t *v;
  json_object_foreach(md, k, v) {
    if (!json_is_array(v)) return 0;
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) if (!json_is_string(s)) return 0;
  }
  return 1;
}

int mb_connect_parse_end_stream(const void *data, size_t len, struct mb_envelope *env,
                                struct mb_error *err) {
  env->end_stream = 1;
  env->has_error = 0;
  env->metadata = NULL;
  env->error.code = 0;
  env->error.message[0] = '\0';
  json_error_t je;
  json_t *root = json_loadb(data, len, 0, &je);
  if (!root)
    return mb_error_set(err, MB_E_PROTOCOL, "end-of-stream: invalid JSON: %s (offset %d)",
                        je.text, je.position);
  int rc = MB_OK;
  if (!json_is_object(root)) {
    rc = mb_error_set(err, MB_E_PROTOCOL, "end-of-stream: payload is not a JSON object");
    goto out;
  }
  json_t *md = json_object_get(root, "metadata");
  if (md && !json_is_null(md)) {
    if (!mb_metadata_ok(md)) {
      rc = mb_error_set(err, MB_E_PROTOCOL,
                        "end-of-stream: metadata must map names to arrays of strings");
      goto out;
    }
    env->metadata = json_incref(md);
  }
  json_t *e = json_object_get(root, "error");
  if (e && !json_is_null(e)) {
    if (!json_is_object(e)) {
      rc = mb_error_set(err, MB_E_PROTOCOL, "end-of-stream: error is not a JSON object");
      goto out;
    }
    env->has_error = 1;
    /* An unrecognised code still ends the stream in error: report it as unknown. */
    int code = mb_connect_code_from_string(json_string_value(json_object_get(e, "code")));
    env->error.code = code ? code : MB_CONNECT_UNKNOWN;
    json_t *msg = json_object_get(e, "message");
    if (json_is_string(msg))
      mb_set_message(&env->error, json_string_value(msg), json_string_length(msg));
  }
out:
  if (rc) {
    json_decref(env->metadata);
    env->metadata = NULL;
    env->has_error = 0;
  }
  json_decref(root);
  return rc;
}

/* ---- incremental decoder ---- */

struct mb_envelope_decoder {
  size_t max;
  unsigned char hdr[MB_ENVELOPE_HDR];
  size_t hdr_have;     /* header bytes buffered (0..5) */
  int in_body;         /* header complete, payload pending */
  uint8_t flags;
  size_t need, have;   /* payload length and bytes buffered */
  unsigned char *buf;  /* payload spanning pushes; grows up to max */
  size_t buf_cap;
  int ended;           /* end-of-stream seen */
  int in_push;         /* set during push: still set afterwards means a callback escaped */
  struct mb_error err; /* sticky failure when err.code != 0 */
};

struct mb_envelope_decoder *mb_envelope_decoder_new(size_t max_message) {
  struct mb_envelope_decoder *d = calloc(1, sizeof *d);
  if (d) d->max = max_message;
  return d;
}

void mb_envelope_decoder_free(struct mb_envelope_decoder *d) {
  if (!d) return;
  free(d->buf);
  free(d);
}

/* The decoder's sticky failure, copied to err; a push whose callback never returned (a Lua error
 * that escaped it) leaves in_push set and the buffers in an unknown state, so that fails too. */
static int mb_env_sticky(struct mb_envelope_decoder *d, struct mb_error *err) {
  if (d->in_push && !d->err.code)
    mb_error_set(&d->err, MB_E_INVALID, "envelope decoder unusable: a callback did not return");
  if (d->err.code && err) *err = d->err;
  return d->err.code;
}

static int mb_env_deliver(struct mb_envelope_decoder *d, const unsigned char *p, mb_envelope_cb cb,
                          void *ud) {
  struct mb_envelope env;
  env.flags = d->flags;
  env.data = p;
  env.len = d->need;
  env.end_stream = 0;
  env.has_error = 0;
  env.error.code = 0;
  env.error.message[0] = '\0';
  env.metadata = NULL;
  d->in_body = 0;
  d->hdr_have = 0;
  d->have = 0;
  if (d->flags & MB_ENVELOPE_END_STREAM) {
    /* parse errors land in d->err */
    if (mb_connect_parse_end_stream(p, d->need, &env, &d->err)) return d->err.code;
    d->ended = 1;
  }
  int rc = cb ? cb(ud, &env) : 0;
  json_decref(env.metadata);
  if (rc) mb_error_set(&d->err, rc, "envelope consumer stopped the stream: %s", mb_strerror(rc));
  return rc;
}

static int mb_env_header(struct mb_envelope_decoder *d, const unsigned char *h) {
  uint8_t flags = h[0];
  size_t len = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
  if (flags & MB_ENVELOPE_COMPRESSED)
    return mb_error_set(&d->err, MB_E_PROTOCOL,
                        "compressed envelope (flags 0x%02x) but no compression was negotiated",
                        flags);
  if (flags & ~(MB_ENVELOPE_COMPRESSED | MB_ENVELOPE_END_STREAM))
    return mb_error_set(&d->err, MB_E_PROTOCOL, "unknown envelope flags 0x%02x", flags);
  if (len > d->max)
    return mb_error_set(&d->err, MB_E_TOO_LARGE,
                        "envelope payload of %zu bytes exceeds the limit of %zu bytes", len,
                        d->max);
  d->flags = flags;
  d->need = len;
  d->have = 0;
  d->in_body = 1;
  return MB_OK;
}

int mb_envelope_decoder_push(struct mb_envelope_decoder *d, const void *data, size_t len,
                             mb_envelope_cb cb, void *ud, struct mb_error *err) {
  if (mb_env_sticky(d, err)) return d->err.code;
  d->in_push = 1;
  const unsigned char *p = data;
  while (len > 0) {
    if (d->ended) {
      mb_error_set(&d->err, MB_E_PROTOCOL, "data after the end-of-stream envelope");
      break;
    }
    if (!d->in_body) {
      if (d->hdr_have == 0 && len >= MB_ENVELOPE_HDR) { /* fast path: header in this chunk */
        if (mb_env_header(d, p)) break;
        p += MB_ENVELOPE_HDR;
        len -= MB_ENVELOPE_HDR;
      } else {
        size_t k = MB_ENVELOPE_HDR - d->hdr_have;
        if (k > len) k = len;
        memcpy(d->hdr + d->hdr_have, p, k);
        d->hdr_have += k;
        p += k;
        len -= k;
        if (d->hdr_have < MB_ENVELOPE_HDR) break;
        if (mb_env_header(d, d->hdr)) break;
      }
    }
    if (d->have == 0 && len >= d->need) { /* fast path: whole payload here, no copy */
      size_t n = d->need;
      if (mb_env_deliver(d, p, cb, ud)) break;
      p += n;
      len -= n;
      continue;
    }
    if (len == 0) break;
    size_t k = d->need - d->have;
    if (k > len) k = len;
    if (d->buf_cap < d->have + k) {
      /* Grow with the bytes actually received (doubling, capped at the payload length), so a
       * header that merely claims a large payload costs no memory. */
      size_t want = d->buf_cap * 2 > d->have + k ? d->buf_cap * 2 : d->have + k;
      if (want > d->need) want = d->need;
      unsigned char *nb = realloc(d->buf, want);
      if (!nb) {
        mb_error_set(&d->err, MB_E_NOMEM, "cannot buffer an envelope of %zu bytes", d->need);
        break;
      }
      d->buf = nb;
      d->buf_cap = want;
    }
    memcpy(d->buf + d->have, p, k);
    d->have += k;
    p += k;
    len -= k;
    if (d->have == d->need && mb_env_deliver(d, d->buf, cb, ud)) break;
  }
  d->in_push = 0;
  return mb_env_sticky(d, err);
}

int mb_envelope_decoder_finish(struct mb_envelope_decoder *d, struct mb_error *err) {
  if (mb_env_sticky(d, err)) return d->err.code;
  if (d->in_body)
    return mb_error_set(err, MB_E_TRUNCATED, "truncated envelope: %zu of %zu payload bytes",
                        d->have, d->need);
  if (d->hdr_have)
    return mb_error_set(err, MB_E_TRUNCATED, "truncated envelope header: %zu of %d bytes",
                        d->hdr_have, MB_ENVELOPE_HDR);
  if (!d->ended)
    return mb_error_set(err, MB_E_PROTOCOL, "missing EndStreamResponse (stream ended early)");
  return MB_OK;
}

/* ---- bytes fields ---- */

static const char *mb_json_ws(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* Matches `{ "key" :` and returns the position after the colon and whitespace, or NULL. */
static const char *mb_json_open_key(const char *p, const char *e, const char *key) {
  p = mb_json_ws(p, e);
  if (p == e || *p != '{') return NULL;
  p = mb_json_ws(p + 1, e);
  size_t kl = strlen(key);
  if ((size_t)(e - p) < kl + 2 || p[0] != '"' || memcmp(p + 1, key, kl) != 0 || p[kl + 1] != '"')
    return NULL;
  p = mb_json_ws(p + kl + 2, e);
  if (p == e || *p != ':') return NULL;
  return mb_json_ws(p + 1, e);
}

/* The shortcut: nested single-key objects down to a string; points s at its raw bytes. */
static int mb_json_shape(const char *p, const char *e, const char *const *path, size_t depth,
                         const char *const *leaves, size_t nleaves, const char **s, size_t *sl) {
  for (size_t i = 0; i < depth; i++)
    if (!(p = mb_json_open_key(p, e, path[i]))) return -1;
  const char *q = NULL;
  int which = -1;
  for (size_t i = 0; i < nleaves && !q; i++)
    if ((q = mb_json_open_key(p, e, leaves[i]))) which = (int)i;
  if (!q || q == e || *q != '"') return -1;
  const char *end = memchr(q + 1, '"', (size_t)(e - q - 1));
  if (!end) return -1;
  p = end + 1;
  for (size_t i = 0; i <= depth; i++) {
    p = mb_json_ws(p, e);
    if (p == e || *p != '}') return -1;
    p++;
  }
  if (mb_json_ws(p, e) != e) return -1;
  *s = q + 1;
  *sl = (size_t)(end - q - 1);
  return which;
}

int mb_connect_json_bytes(const void *json, size_t len, const char *const *path, size_t depth,
                          const char *const *leaves, size_t nleaves, unsigned opts, void *dst,
                          size_t cap, size_t *out_len, int *leaf, json_t **root,
                          struct mb_error *err) {
  *out_len = 0;
  *leaf = -1;
  *root = NULL;
  const char *s;
  size_t sl;
  if (!(opts & MB_CONNECT_JSON_SLOW)) {
    int w = mb_json_shape(json, (const char *)json + len, path, depth, leaves, nleaves, &s, &sl);
    if (w >= 0) {
      int rc = mb_b64_decode_tolerant(s, sl, dst, cap, out_len, NULL);
      if (rc == MB_OK) {
        *leaf = w;
        return MB_OK;
      }
      /* escapes (the raw string is then longer than its value) or invalid JSON: let jansson
       * decide */
    }
  }
  json_error_t je;
  json_t *r = json_loadb(json, len, 0, &je);
  if (!r) return mb_error_set(err, MB_E_PROTOCOL, "invalid JSON message: %s", je.text);
  json_t *o = r;
  for (size_t i = 0; i < depth && o; i++) o = json_object_get(o, path[i]);
  for (size_t i = 0; i < nleaves && o; i++) {
    json_t *v = json_object_get(o, leaves[i]);
    if (!json_is_string(v)) continue;
    const char *why = NULL;
    int rc = mb_b64_decode_tolerant(json_string_value(v), json_string_length(v), dst, cap,
                                    out_len, &why);
    json_decref(r);
    if (rc == MB_E_TOO_LARGE)
      return mb_error_set(err, rc, "%s: more than %zu bytes", leaves[i], cap);
    if (rc) return mb_error_set(err, MB_E_PROTOCOL, "%s: %s", leaves[i], why);
    *leaf = (int)i;
    return MB_OK;
  }
  *root = r;
  return MB_OK;
}
