/* api_body.c — control-plane request bodies (see api_body.h). */
#include "api_body.h"

#include <string.h>

/* The request body as a JSON object; replies 400 itself and returns NULL when it is not one. */
json_t *api_body_object(sd_request *r, bool optional) {
  size_t len;
  const uint8_t *b = sd_body(r, &len);
  if (len == 0) {
    if (optional) return json_object();
    sd_reply_error(r, 400, "request body is required (a JSON object)");
    return NULL;
  }
  json_error_t je;
  json_t *j = json_loadb((const char *)b, len, JSON_REJECT_DUPLICATES, &je);
  if (!j) { sd_reply_error(r, 400, "malformed JSON body: %s (line %d, column %d)", je.text, je.line, je.column); return NULL; }
  if (!json_is_object(j)) { json_decref(j); sd_reply_error(r, 400, "request body must be a JSON object"); return NULL; }
  return j;
}

/* timeout field: absent → dflt; else an integer in [0, max]. Replies 400 and returns -1 if bad. */
int api_timeout(sd_request *r, json_t *body, int64_t dflt, int64_t *out) {
  json_t *t = json_object_get(body, "timeout");
  if (!t || json_is_null(t)) { *out = dflt; return 0; }
  if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > API_MAX_TIMEOUT_S) {
    sd_reply_error(r, 400, "field 'timeout' must be an integer number of seconds between 0 and %d", API_MAX_TIMEOUT_S);
    return -1;
  }
  *out = json_integer_value(t);
  return 0;
}

int api_string_map(sd_request *r, json_t *v, const char *field, bool env_names) {
  if (!json_is_object(v)) { sd_reply_error(r, 400, "field '%s' must be an object of strings", field); return -1; }
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (!json_is_string(x)) { sd_reply_error(r, 400, "field '%s.%s' must be a string", field, k); return -1; }
    if (env_names && (!k[0] || strchr(k, '='))) {
      sd_reply_error(r, 400, "field '%s': '%s' is not a valid environment variable name", field, k);
      return -1;
    }
  }
  return 0;
}

int api_bool(sd_request *r, json_t *body, const char *field, bool dflt, bool *out) {
  json_t *v = json_object_get(body, field);
  if (!v || json_is_null(v)) { *out = dflt; return 0; }
  if (!json_is_boolean(v)) { sd_reply_error(r, 400, "field '%s' must be a boolean", field); return -1; }
  *out = json_is_true(v);
  return 0;
}

/* Fields of a body other than `allowed` (a NULL-terminated list): replies 400 naming the first. */
int api_only_fields(sd_request *r, json_t *body, const char *const *allowed) {
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v) {
    bool ok = false;
    for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(k, *a);
    if (!ok) { sd_reply_error(r, 400, "field '%s' is not supported by sandboxd here", k); return -1; }
  }
  return 0;
}

typedef struct { const char *const *known; const char *bad; } query_check;
static int query_unknown_cb(void *cls, const char *name, const char *value) {
  (void)value;
  query_check *c = cls;
  for (const char *const *k = c->known; *k; k++)
    if (!strcmp(*k, name)) return 0;
  c->bad = name;
  return 1;
}

const char *api_query_unknown(const sd_request *r, const char *const *known) {
  query_check c = {known, NULL};
  return sd_query_each(r, query_unknown_cb, &c) ? c.bad : NULL;
}

int api_query_only(sd_request *r, const char *const *known) {
  const char *bad = api_query_unknown(r, known);
  if (!bad) return 0;
  char list[256] = "";
  size_t n = 0, count = 0;
  for (const char *const *k = known; *k && n < sizeof list; k++, count++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", count ? ", " : "", *k);
  sd_reply_error(r, 400, "query parameter '%.60s' is not supported here (%s %s)", bad, list, count == 1 ? "is" : "are");
  return -1;
}
