/* fuzz_sbx_secrets.c — libFuzzer target for the secret store's own parsers (sandboxd/secrets.c):
 * the catalogue secrets.json as secrets_init reads it (secrets_parse_catalogue), and the checks of
 * a request's name, value and metadata. Input: [mode][data...]:
 *   0  the catalogue's text as it is;
 *   1  data cut at NUL bytes into up to 8 strings, put (JSON-escaped) into the fields of an
 *      otherwise valid one-secret catalogue: id, name, seq, version, metadata key and value,
 *      sealed value, key check — so that every field's checks are reached;
 *   2  data as a name, a value and a metadata object {data: data}.
 * Properties, independently of the parser: the same input gives the same answer twice; a
 * catalogue taken holds at most SECRETS_MAX secrets; a name taken is 1..SECRETS_NAME_MAX of
 * [a-z0-9._-], starts with a letter or digit, not with "sec_", and is the input lower-cased; a
 * value taken is 1..SECRETS_VALUE_MAX bytes with no control character but tab. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "secrets.h"

static void json_escape(const char *s, size_t n, char *out, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 7 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == '"' || c == '\\' || c >= 0x7f) k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
    else out[k++] = (char)c;
  }
  out[k] = '\0';
}

static void check_catalogue(const char *text, size_t len) {
  size_t n1 = 0, n2 = 0;
  char e1[600], e2[600];
  int r1 = secrets_parse_catalogue(text, len, &n1, e1, sizeof e1);
  int r2 = secrets_parse_catalogue(text, len, &n2, e2, sizeof e2);
  if (r1 != r2 || (r1 == 0 && n1 != n2) || (r1 != 0 && strcmp(e1, e2) != 0)) abort();
  if (r1 == 0 && n1 > SECRETS_MAX) abort();
}

static void check_fields(const char *s, size_t n) {
  char *z = malloc(n + 1), out[SECRETS_NAME_MAX + 1], msg[600];
  if (!z) return;
  memcpy(z, s, n);
  z[n] = '\0';
  if (secrets_check_name(z, out, msg, sizeof msg) == 0) {
    size_t len = strlen(out);
    if (len == 0 || len > SECRETS_NAME_MAX || len != strlen(z) || !strncmp(out, "sec_", 4)) abort();
    for (size_t i = 0; i < len; i++) {
      char c = out[i], lc = z[i] >= 'A' && z[i] <= 'Z' ? (char)(z[i] - 'A' + 'a') : z[i];
      bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
      if (c != lc || !(alnum || (i > 0 && (c == '_' || c == '-' || c == '.')))) abort();
    }
  }
  if (secrets_check_value(s, n, msg, sizeof msg) == 0) {
    if (n == 0 || n > SECRETS_VALUE_MAX) abort();
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)s[i];
      if ((c < 0x20 && c != '\t') || c == 0x7f) abort();
    }
  }
  json_t *md = json_object();
  json_t *v = json_stringn(s, n);                    /* NULL unless UTF-8 */
  if (md && v) {
    json_object_set_new(md, "data", v);
    if (n <= SECRETS_META_KEY_MAX) json_object_set_new(md, z, json_string("k"));   /* the data as a key too */
    int a = secrets_check_metadata(md, msg, sizeof msg), b = secrets_check_metadata(md, msg, sizeof msg);
    if (a != b) abort();
  } else {
    json_decref(v);
  }
  json_decref(md);
  free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  int mode = data[0] % 3;
  const char *d = (const char *)data + 1;
  size_t n = size - 1;
  if (mode == 0) {
    check_catalogue(d, n);
  } else if (mode == 1) {
    const char *dflt[8] = {"sec_aaaaaaaaaaaaaaaaaaaa", "one", "1", "1", "k", "v", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
                           "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="};
    char field[8][512];
    size_t at = 0;
    for (int f = 0; f < 8; f++) {
      if (at < n) {
        const char *end = memchr(d + at, '\0', n - at);
        size_t len = end ? (size_t)(end - (d + at)) : n - at;
        json_escape(d + at, len, field[f], sizeof field[f]);
        at += len + 1;
      } else {
        snprintf(field[f], sizeof field[f], "%s", dflt[f]);
      }
    }
    char *text = malloc(8192);
    if (!text) return 0;
    int len = snprintf(text, 8192,
                       "{\"version\":1,\"cipher\":\"aes-256-gcm\",\"nextSeq\":9,\"keyCheck\":\"%s\",\"secrets\":[{\"id\":\"%s\","
                       "\"name\":\"%s\",\"seq\":%.20s,\"version\":%.20s,\"createdMs\":1,\"updatedMs\":2,\"metadata\":{\"%s\":\"%s\"},"
                       "\"value\":\"%s\"}]}",
                       field[7], field[0], field[1], field[2][0] ? field[2] : "0", field[3][0] ? field[3] : "0", field[4], field[5],
                       field[6]);
    if (len > 0 && len < 8192) check_catalogue(text, (size_t)len);
    free(text);
  } else {
    check_fields(d, n);
  }
  return 0;
}
