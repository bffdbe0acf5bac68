/* connect_request.c — see connect_request.h. */
#include "connect_request.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "connect.h"

static bool type_is(const char *ct, const char *want) {
  size_t n = strlen(want);
  return strncasecmp(ct, want, n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

int creq_content_type(const char *ct, creq_type *t) {
  static const struct { const char *name; bool streaming, proto; } TYPES[] = {
    {"application/json", false, false}, {"application/proto", false, true},
    {"application/connect+json", true, false}, {"application/connect+proto", true, true},
  };
  if (!ct) return -1;
  while (*ct == ' ' || *ct == '\t') ct++;
  for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
    if (type_is(ct, TYPES[i].name)) {
      t->streaming = TYPES[i].streaming;
      t->proto = TYPES[i].proto;
      return 0;
    }
  return -1;
}

/* Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_ok(const unsigned char *s) {
  while (*s) {
    unsigned c = *s;
    if (c < 0x80) { s++; continue; }
    int n = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : -1;
    if (n < 0 || c > 0xf4) return false;
    unsigned cp = c & (0x3f >> n);
    for (int i = 1; i <= n; i++) {
      if ((s[i] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
      return false;
    s += n + 1;
  }
  return true;
}

/* What Go's protobuf parser refuses and protobuf-c lets through: a string that is not UTF-8, a
 * field number outside 1..2^29-1 (kept as an unknown field). Every field of m, nested messages and
 * map entries included: the name of the first bad field, or NULL. */
static const char *bad_string(const ProtobufCMessage *m, int depth) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  if (depth > 32) return "(nesting)";
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag < 1 || m->unknown_fields[i].tag > 536870911u) return "(field number out of range)";
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    const char *base = (const char *)m + f->offset;
    size_t n = 1;
    const void *const *items = (const void *const *)(const void *)base;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      n = *(const size_t *)(const void *)((const char *)m + f->quantifier_offset);
      items = *(const void *const *const *)(const void *)base;
    } else if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
               *(const uint32_t *)(const void *)((const char *)m + f->quantifier_offset) != f->id) {
      continue;
    }
    for (size_t k = 0; k < n; k++) {
      if (!items[k]) continue;
      if (f->type == PROTOBUF_C_TYPE_STRING) {
        if (!utf8_ok(items[k])) return f->name;
      } else {
        const char *sub = bad_string(items[k], depth + 1);
        if (sub) return sub;
      }
    }
  }
  return NULL;
}

ProtobufCMessage *creq_parse(const uint8_t *b, size_t len, creq_type t, const ProtobufCMessageDescriptor *d,
                             struct mb_arena *ar, char *err, size_t errlen) {
  if (len > CREQ_MAX) { snprintf(err, errlen, "request is larger than %u bytes", CREQ_MAX); return NULL; }
  if (t.streaming) {
    if (len < MB_ENVELOPE_HDR) { snprintf(err, errlen, "request envelope is truncated (%zu bytes)", len); return NULL; }
    if (b[0] & MB_ENVELOPE_COMPRESSED) { snprintf(err, errlen, "compressed envelopes are not supported"); return NULL; }
    if (b[0] != 0) { snprintf(err, errlen, "request envelope has flags 0x%02x: it must be one data envelope", b[0]); return NULL; }
    uint32_t n = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (n != len - MB_ENVELOPE_HDR) {
      snprintf(err, errlen, "request must be exactly one data envelope (length %u, %zu bytes follow)", n, len - MB_ENVELOPE_HDR);
      return NULL;
    }
    b += MB_ENVELOPE_HDR;
    len = n;
  }
  ProtobufCMessage *m = NULL;
  struct mb_error e = {0};
  if (t.proto) {
    if (mb_rpc_unpack(d, len ? b : (const uint8_t *)"", len, ar, &m, &e) != MB_OK) {
      snprintf(err, errlen, "malformed protobuf request: %s", e.message);
      return NULL;
    }
    const char *bad = bad_string(m, 0);
    if (bad && bad[0] == '(') { snprintf(err, errlen, "malformed protobuf request: %s: %s", d->short_name, bad + 1); err[strlen(err) - 1] = 0; return NULL; }
    if (bad) { snprintf(err, errlen, "%s: field '%s' holds a string that is not UTF-8", d->short_name, bad); return NULL; }
    return m;
  }
  json_t *j;
  if (len == 0) j = json_object();
  else {
    json_error_t je;
    j = json_loadb((const char *)b, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) { snprintf(err, errlen, "malformed JSON request: %s (line %d, column %d)", je.text, je.line, je.column); return NULL; }
  }
  if (!json_is_object(j)) { json_decref(j); snprintf(err, errlen, "request message must be a JSON object"); return NULL; }
  int rc = mb_rpc_from_json_opts(d, j, MB_RPC_OPEN_ENUMS, ar, &m, &e);
  json_decref(j);
  if (rc != MB_OK) {
    snprintf(err, errlen, "%s: %s", d->short_name, e.message);
    return NULL;
  }
  return m;
}
