/* rpc_json.c — protobuf-c messages ⇄ the Connect JSON codec's objects (see rpc_json.h). */
#include "rpc_json.h"
#include "b64.h"
#include "gen/envd/filesystem.pb-c.h"
#include "gen/envd/process.pb-c.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the arena ---- */

static void *arena_alloc_cb(void *ud, size_t n) { return mb_arena_alloc(ud, n); }
static void arena_free_cb(void *ud, void *p) { (void)ud; (void)p; }

int mb_arena_init(struct mb_arena *ar, size_t cap) {
  memset(ar, 0, sizeof *ar);
  ar->a.alloc = arena_alloc_cb;
  ar->a.free = arena_free_cb;
  ar->a.allocator_data = ar;
  if (cap && !(ar->buf = malloc(cap))) return MB_E_NOMEM;
  ar->cap = cap;
  return MB_OK;
}

void mb_arena_free(struct mb_arena *ar) {
  free(ar->buf);
  ar->buf = NULL;
  ar->used = ar->cap = 0;
}

void *mb_arena_alloc(struct mb_arena *ar, size_t n) {
  size_t at = (ar->used + 15) & ~(size_t)15;
  if (at < ar->used || n > ar->cap || at > ar->cap - n) {
    ar->exhausted = 1;
    return NULL;
  }
  ar->used = at + n;
  return ar->buf + at;
}

/* ---- the messages moonbox knows ---- */

static const ProtobufCMessageDescriptor *const MESSAGES[] = {
  &process__pty__descriptor, &process__process_config__descriptor, &process__process_selector__descriptor,
  &process__list_request__descriptor, &process__process_info__descriptor, &process__list_response__descriptor,
  &process__start_request__descriptor, &process__update_request__descriptor, &process__update_response__descriptor,
  &process__process_event__descriptor, &process__start_response__descriptor, &process__connect_request__descriptor,
  &process__connect_response__descriptor, &process__process_input__descriptor, &process__send_input_request__descriptor,
  &process__send_input_response__descriptor, &process__send_signal_request__descriptor,
  &process__send_signal_response__descriptor, &process__close_stdin_request__descriptor,
  &process__close_stdin_response__descriptor,
  &filesystem__entry_info__descriptor, &filesystem__stat_request__descriptor, &filesystem__stat_response__descriptor,
  &filesystem__make_dir_request__descriptor, &filesystem__make_dir_response__descriptor,
  &filesystem__move_request__descriptor, &filesystem__move_response__descriptor,
  &filesystem__list_dir_request__descriptor, &filesystem__list_dir_response__descriptor,
  &filesystem__remove_request__descriptor, &filesystem__remove_response__descriptor,
  &filesystem__filesystem_event__descriptor, &filesystem__watch_dir_request__descriptor,
  &filesystem__watch_dir_response__descriptor,
};

const ProtobufCMessageDescriptor *mb_rpc_message(const char *name) {
  for (size_t i = 0; i < sizeof MESSAGES / sizeof MESSAGES[0]; i++)
    if (strcmp(MESSAGES[i]->name, name) == 0) return MESSAGES[i];
  return NULL;
}

static const struct { const char *path; const ProtobufCMessageDescriptor *in, *out; } METHODS[] = {
  {"process.Process/List", &process__list_request__descriptor, &process__list_response__descriptor},
  {"process.Process/Start", &process__start_request__descriptor, &process__start_response__descriptor},
  {"process.Process/Connect", &process__connect_request__descriptor, &process__connect_response__descriptor},
  {"process.Process/Update", &process__update_request__descriptor, &process__update_response__descriptor},
  {"process.Process/SendInput", &process__send_input_request__descriptor, &process__send_input_response__descriptor},
  {"process.Process/SendSignal", &process__send_signal_request__descriptor, &process__send_signal_response__descriptor},
  {"process.Process/CloseStdin", &process__close_stdin_request__descriptor, &process__close_stdin_response__descriptor},
  {"filesystem.Filesystem/Stat", &filesystem__stat_request__descriptor, &filesystem__stat_response__descriptor},
  {"filesystem.Filesystem/MakeDir", &filesystem__make_dir_request__descriptor, &filesystem__make_dir_response__descriptor},
  {"filesystem.Filesystem/Move", &filesystem__move_request__descriptor, &filesystem__move_response__descriptor},
  {"filesystem.Filesystem/ListDir", &filesystem__list_dir_request__descriptor, &filesystem__list_dir_response__descriptor},
  {"filesystem.Filesystem/Remove", &filesystem__remove_request__descriptor, &filesystem__remove_response__descriptor},
  {"filesystem.Filesystem/WatchDir", &filesystem__watch_dir_request__descriptor, &filesystem__watch_dir_response__descriptor},
};

int mb_rpc_method(const char *path, const ProtobufCMessageDescriptor **in, const ProtobufCMessageDescriptor **out) {
  for (size_t i = 0; i < sizeof METHODS / sizeof METHODS[0]; i++)
    if (strcmp(METHODS[i].path, path) == 0) {
      if (in) *in = METHODS[i].in;
      if (out) *out = METHODS[i].out;
      return 1;
    }
  return 0;
}

/* ---- field helpers ---- */

#define AT(m, off) ((void *)((char *)(m) + (off)))

static int is_timestamp(const ProtobufCMessageDescriptor *d) { return strcmp(d->name, "filesystem.Timestamp") == 0; }

/* A `repeated XEntry` of exactly key = 1 and value = 2: a map<string, string> in JSON. */
static int is_map_entry(const ProtobufCMessageDescriptor *d) {
  size_t n = strlen(d->short_name);
  return d->n_fields == 2 && n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0 &&
         d->fields[0].id == 1 && strcmp(d->fields[0].name, "key") == 0 && d->fields[0].type == PROTOBUF_C_TYPE_STRING &&
         d->fields[1].id == 2 && strcmp(d->fields[1].name, "value") == 0 && d->fields[1].type == PROTOBUF_C_TYPE_STRING;
}

/* snake_case → lowerCamelCase, the JSON codec's field names. */
static void json_name(const char *name, char *out, size_t cap) {
  size_t o = 0;
  int up = 0;
  for (const char *c = name; *c && o + 1 < cap; c++) {
    if (*c == '_') { up = 1; continue; }
    out[o++] = up && *c >= 'a' && *c <= 'z' ? (char)(*c - 'a' + 'A') : *c;
    up = 0;
  }
  out[o] = '\0';
}

static size_t value_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_ENUM: return 4;
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: return 8;
  case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
  case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
  }
  return 0;
}

static int present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  if (f->label == PROTOBUF_C_LABEL_REPEATED) return *(const size_t *)AT(m, f->quantifier_offset) > 0;
  if (f->label == PROTOBUF_C_LABEL_REQUIRED) return 1;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) return *(const uint32_t *)AT(m, f->quantifier_offset) == f->id;
  if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE)
    return *(void *const *)AT(m, f->offset) != NULL;
  return *(const protobuf_c_boolean *)AT(m, f->quantifier_offset);
}

static void mark_present(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  if (f->label == PROTOBUF_C_LABEL_REPEATED || f->label == PROTOBUF_C_LABEL_REQUIRED) return;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) *(uint32_t *)AT(m, f->quantifier_offset) = f->id;
  else if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
    *(protobuf_c_boolean *)AT(m, f->quantifier_offset) = 1;
}

/* ---- message → JSON ---- */

/* A JSON string of possibly invalid UTF-8: invalid bytes become U+FFFD (as Go's protojson). */
static json_t *utf8_string(const char *s, size_t n) {
  json_t *j = json_stringn(s, n);
  if (j) return j;
  size_t cap = n * 3 + 1, o = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    json_t *probe = len && i + len <= n ? json_stringn(s + i, len) : NULL;
    if (probe) {
      json_decref(probe);
      memcpy(buf + o, s + i, len);
      o += len;
      i += len;
    } else {
      memcpy(buf + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
    }
  }
  j = json_stringn(buf, o);
  free(buf);
  return j;
}

static json_t *timestamp_json(const ProtobufCMessage *m) {
  const Filesystem__Timestamp *t = (const Filesystem__Timestamp *)m;
  time_t secs = (time_t)t->seconds;
  struct tm tm;
  if (!gmtime_r(&secs, &tm)) return json_string("1970-01-01T00:00:00Z");
  char buf[64], frac[16] = "";
  int32_t ns = t->nanos;
  if (ns > 0 && ns < 1000000000) {          /* 3, 6 or 9 digits, as protobuf's JSON prints */
    if (ns % 1000000 == 0) snprintf(frac, sizeof frac, ".%03d", ns / 1000000);
    else if (ns % 1000 == 0) snprintf(frac, sizeof frac, ".%06d", ns / 1000);
    else snprintf(frac, sizeof frac, ".%09d", ns);
  }
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d%sZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return json_string(buf);
}

static json_t *value_json(const ProtobufCFieldDescriptor *f, const void *v) {
  char num[32];
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
    return json_integer(*(const int32_t *)v);
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: return json_integer(*(const uint32_t *)v);
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    snprintf(num, sizeof num, "%" PRId64, *(const int64_t *)v);
    return json_string(num);
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
    snprintf(num, sizeof num, "%" PRIu64, *(const uint64_t *)v);
    return json_string(num);
  case PROTOBUF_C_TYPE_FLOAT: return json_real(*(const float *)v);
  case PROTOBUF_C_TYPE_DOUBLE: return json_real(*(const double *)v);
  case PROTOBUF_C_TYPE_BOOL: return json_boolean(*(const protobuf_c_boolean *)v);
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)v);
    return ev ? json_string(ev->name) : json_integer(*(const int *)v);
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)v;
    return s ? utf8_string(s, strlen(s)) : json_string("");
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = v;
    size_t n = mb_b64_encoded_len(b->len);
    char *buf = malloc(n + 1);
    if (!buf) return NULL;
    mb_b64_encode(b->data, b->len, buf);
    json_t *j = json_stringn(buf, n);
    free(buf);
    return j;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *sub = *(ProtobufCMessage *const *)v;
    if (!sub) return json_object();
    if (is_timestamp(sub->descriptor)) return timestamp_json(sub);
    return mb_rpc_to_json(sub);
  }
  }
  return NULL;
}

json_t *mb_rpc_to_json(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  json_t *o = json_object();
  if (!o) return NULL;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (!present(m, f)) continue;
    char name[128];
    json_name(f->name, name, sizeof name);
    json_t *v = NULL;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)AT(m, f->quantifier_offset);
      const char *arr = *(char *const *)AT(m, f->offset);
      size_t sz = value_size(f->type);
      if (f->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(f->descriptor)) {
        v = json_object();
        for (size_t k = 0; v && k < n; k++) {
          const ProtobufCMessageDescriptor *ed = f->descriptor;
          const ProtobufCMessage *e = ((ProtobufCMessage *const *)(const void *)arr)[k];
          const char *key = *(char *const *)AT(e, ed->fields[0].offset);
          const char *val = *(char *const *)AT(e, ed->fields[1].offset);
          json_t *jv = utf8_string(val ? val : "", val ? strlen(val) : 0);
          if (!jv || json_object_set_new(v, key ? key : "", jv)) { json_decref(v); v = NULL; }
        }
      } else {
        v = json_array();
        for (size_t k = 0; v && k < n; k++)
          if (json_array_append_new(v, value_json(f, arr + k * sz))) { json_decref(v); v = NULL; }
      }
    } else {
      v = value_json(f, AT(m, f->offset));
    }
    if (!v || json_object_set_new(o, name, v)) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* ---- JSON → message ---- */

static int bad(struct mb_error *err, const char *field, const char *expected) {
  return mb_error_set(err, MB_E_PROTOCOL, "field '%s': expected %s", field, expected);
}

static int int_of(const json_t *j, long long lo, unsigned long long hi, long long *out) {
  if (json_is_integer(j)) {
    json_int_t v = json_integer_value(j);
    if (v < lo || (v > 0 && (unsigned long long)v > hi)) return -1;
    *out = v;
    return 0;
  }
  if (json_is_string(j)) {                  /* proto3 JSON writes 64-bit integers as strings */
    const char *s = json_string_value(j);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || (v > 0 && (unsigned long long)v > hi)) return -1;
    *out = v;
    return 0;
  }
  return -1;
}

static int timestamp_from(const json_t *j, struct mb_arena *ar, ProtobufCMessage **out) {
  if (!json_is_string(j)) return -1;
  const char *s = json_string_value(j);
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  int used = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
             &tm.tm_sec, &used) != 6)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const char *p = s + used;
  int32_t ns = 0;
  if (*p == '.') {
    int digits = 0;
    for (p++; *p >= '0' && *p <= '9'; p++, digits++)
      if (digits < 9) ns = ns * 10 + (*p - '0');
    if (!digits) return -1;
    for (; digits < 9; digits++) ns *= 10;
  }
  long offset = 0;
  if (*p == 'Z') p++;
  else if (*p == '+' || *p == '-') {
    int hh, mm;
    if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2) return -1;
    offset = (hh * 3600L + mm * 60L) * (*p == '+' ? 1 : -1);
    p += 6;
  } else return -1;
  if (*p) return -1;
  Filesystem__Timestamp *t = mb_arena_alloc(ar, sizeof *t);
  if (!t) return -2;
  filesystem__timestamp__init(t);
  t->has_seconds = t->has_nanos = 1;
  t->seconds = (int64_t)timegm(&tm) - offset;
  t->nanos = ns;
  *out = &t->base;
  return 0;
}

static int message_from(const ProtobufCMessageDescriptor *d, const json_t *j, unsigned opts, struct mb_arena *ar,
                        ProtobufCMessage **out, const char *path, struct mb_error *err);

#define MB_RPC_UNSET 1 /* value_from: the value is to be ignored (an unknown enum name) */

static int value_from(const ProtobufCFieldDescriptor *f, const json_t *j, unsigned opts, struct mb_arena *ar,
                      void *dst, const char *path, struct mb_error *err) {
  long long v;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
    if (int_of(j, INT32_MIN, INT32_MAX, &v)) return bad(err, path, "a 32-bit integer");
    *(int32_t *)dst = (int32_t)v;
    return MB_OK;
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
    if (int_of(j, 0, UINT32_MAX, &v)) return bad(err, path, "an unsigned 32-bit integer");
    *(uint32_t *)dst = (uint32_t)v;
    return MB_OK;
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    if (int_of(j, LLONG_MIN, LLONG_MAX, &v)) return bad(err, path, "a 64-bit integer (number or string)");
    *(int64_t *)dst = v;
    return MB_OK;
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
    if (int_of(j, 0, LLONG_MAX, &v)) return bad(err, path, "an unsigned 64-bit integer (number or string)");
    *(uint64_t *)dst = (uint64_t)v;
    return MB_OK;
  case PROTOBUF_C_TYPE_FLOAT:
    if (!json_is_number(j)) return bad(err, path, "a number");
    *(float *)dst = (float)json_number_value(j);
    return MB_OK;
  case PROTOBUF_C_TYPE_DOUBLE:
    if (!json_is_number(j)) return bad(err, path, "a number");
    *(double *)dst = json_number_value(j);
    return MB_OK;
  case PROTOBUF_C_TYPE_BOOL:
    if (!json_is_boolean(j)) return bad(err, path, "true or false");
    *(protobuf_c_boolean *)dst = json_is_true(j);
    return MB_OK;
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumValue *ev = NULL;
    if (json_is_string(j)) ev = protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, json_string_value(j));
    else if (json_is_integer(j) && json_integer_value(j) >= INT_MIN && json_integer_value(j) <= INT_MAX)
      ev = protobuf_c_enum_descriptor_get_value(f->descriptor, (int)json_integer_value(j));
    if (!ev && (opts & MB_RPC_OPEN_ENUMS)) {
      if (json_is_string(j)) return -MB_RPC_UNSET;
      if (json_is_integer(j) && json_integer_value(j) >= INT_MIN && json_integer_value(j) <= INT_MAX) {
        *(int *)dst = (int)json_integer_value(j);
        return MB_OK;
      }
    }
    if (!ev) return bad(err, path, "one of the enum's names");
    *(int *)dst = ev->value;
    return MB_OK;
  }
  case PROTOBUF_C_TYPE_STRING: {
    if (!json_is_string(j)) return bad(err, path, "a string");
    size_t n = json_string_length(j);
    char *s = mb_arena_alloc(ar, n + 1);
    if (!s) return mb_error_set(err, MB_E_TOO_LARGE, "message too large to decode (at '%s')", path);
    memcpy(s, json_string_value(j), n);
    s[n] = '\0';
    *(char **)dst = s;
    return MB_OK;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    if (!json_is_string(j)) return bad(err, path, "base64 bytes");
    size_t n = json_string_length(j), cap = mb_b64_decoded_max(n), got = 0;
    unsigned char *b = mb_arena_alloc(ar, cap ? cap : 1);
    if (!b) return mb_error_set(err, MB_E_TOO_LARGE, "message too large to decode (at '%s')", path);
    if (mb_b64_decode_tolerant(json_string_value(j), n, b, cap, &got, NULL) != MB_OK)
      return bad(err, path, "base64 bytes");
    ((ProtobufCBinaryData *)dst)->data = b;
    ((ProtobufCBinaryData *)dst)->len = got;
    return MB_OK;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessageDescriptor *sd = f->descriptor;
    if (is_timestamp(sd)) {
      int rc = timestamp_from(j, ar, (ProtobufCMessage **)dst);
      if (rc == -2) return mb_error_set(err, MB_E_TOO_LARGE, "message too large to decode (at '%s')", path);
      return rc ? bad(err, path, "an RFC 3339 timestamp") : MB_OK;
    }
    return message_from(sd, j, opts, ar, (ProtobufCMessage **)dst, path, err);
  }
  }
  return bad(err, path, "a supported type");
}

static int message_from(const ProtobufCMessageDescriptor *d, const json_t *j, unsigned opts, struct mb_arena *ar,
                        ProtobufCMessage **out, const char *path, struct mb_error *err) {
  if (!json_is_object(j)) return bad(err, path, "an object");
  ProtobufCMessage *m = mb_arena_alloc(ar, d->sizeof_message);
  if (!m) return mb_error_set(err, MB_E_TOO_LARGE, "message too large to decode (at '%s')", path);
  protobuf_c_message_init(d, m);
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    char name[128], sub[512];
    json_name(f->name, name, sizeof name);
    const json_t *v = json_object_get(j, name);
    if (!v) v = json_object_get(j, f->name);   /* the proto name is accepted too */
    if (!v || json_is_null(v)) continue;
    snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", name);
    int rc;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t sz = value_size(f->type), n;
      int map = f->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(f->descriptor);
      if (map ? !json_is_object(v) : !json_is_array(v)) return bad(err, sub, map ? "an object" : "an array");
      n = map ? json_object_size(v) : json_array_size(v);
      char *arr = n ? mb_arena_alloc(ar, n * sz) : NULL;
      if (n && !arr) return mb_error_set(err, MB_E_TOO_LARGE, "message too large to decode (at '%s')", sub);
      if (map) {
        const char *key;
        const json_t *val;
        size_t k = 0;
        const ProtobufCMessageDescriptor *ed = f->descriptor;
        json_object_foreach((json_t *)v, key, val) {
          if (!json_is_string(val)) return bad(err, sub, "an object of strings");
          ProtobufCMessage *e = mb_arena_alloc(ar, ed->sizeof_message);
          size_t kl = strlen(key), vl = json_string_length(val);
          char *ks = mb_arena_alloc(ar, kl + 1), *vs = mb_arena_alloc(ar, vl + 1);
          if (!e || !ks || !vs) return mb_error_set(err, MB_E_TOO_LARGE, "message too large to decode (at '%s')", sub);
          protobuf_c_message_init(ed, e);
          memcpy(ks, key, kl + 1);
          memcpy(vs, json_string_value(val), vl + 1);
          *(char **)AT(e, ed->fields[0].offset) = ks;
          *(char **)AT(e, ed->fields[1].offset) = vs;
          ((ProtobufCMessage **)(void *)arr)[k++] = e;
        }
      } else {
        size_t kept = 0;
        for (size_t k = 0; k < n; k++) {
          rc = value_from(f, json_array_get(v, k), opts, ar, arr + kept * sz, sub, err);
          if (rc == -MB_RPC_UNSET) continue;   /* an unknown enum name in a list: dropped */
          if (rc != MB_OK) return rc;
          kept++;
        }
        n = kept;
      }
      *(size_t *)AT(m, f->quantifier_offset) = n;
      *(void **)AT(m, f->offset) = arr;
      continue;
    }
    rc = value_from(f, v, opts, ar, AT(m, f->offset), sub, err);
    if (rc == -MB_RPC_UNSET) continue;
    if (rc != MB_OK) return rc;
    mark_present(m, f);
  }
  *out = m;
  return MB_OK;
}

int mb_rpc_from_json_opts(const ProtobufCMessageDescriptor *d, const json_t *j, unsigned opts,
                          struct mb_arena *ar, ProtobufCMessage **out, struct mb_error *err) {
  *out = NULL;
  return message_from(d, j, opts, ar, out, "", err);
}

int mb_rpc_from_json(const ProtobufCMessageDescriptor *d, const json_t *j, struct mb_arena *ar,
                     ProtobufCMessage **out, struct mb_error *err) {
  return mb_rpc_from_json_opts(d, j, 0, ar, out, err);
}

int mb_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *data, size_t len, struct mb_arena *ar,
                  ProtobufCMessage **out, struct mb_error *err) {
  *out = protobuf_c_message_unpack(d, &ar->a, len, data);
  if (!*out) {
    if (ar->exhausted)
      return mb_error_set(err, MB_E_TOO_LARGE, "%s: a %zu-byte message needs more than %zu bytes to decode", d->name,
                          len, ar->cap);
    return mb_error_set(err, MB_E_PROTOCOL, "%s: invalid protobuf message", d->name);
  }
  return MB_OK;
}
