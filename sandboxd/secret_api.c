/* secret_api.c — /secrets (see secret_api.h). */
#include "secret_api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_body.h"
#include "registry.h"
#include "secrets.h"

static json_t *rfc3339(int64_t ms) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[64];
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
           tm.tm_min, tm.tm_sec, (int)(ms % 1000));
  return json_string(buf);
}

/* E2B's Secret: metadata, never the value. */
static json_t *secret_json(const secret_info *in) {
  return json_pack("{s:s,s:s,s:I,s:O,s:o,s:o}", "secretID", in->id, "name", in->name, "currentVersion", (json_int_t)in->version,
                   "metadata", in->metadata, "createdAt", rfc3339(in->created_ms), "updatedAt", rfc3339(in->updated_ms));
}

/* The body as an object, or NULL after a 400 that gives where it is malformed but not what is
 * there (jansson's text quotes the input, which may be a value). */
static json_t *body_object(sd_request *r) {
  size_t len;
  const uint8_t *b = sd_body(r, &len);
  if (len == 0) { sd_reply_error(r, 400, "request body is required (a JSON object)"); return NULL; }
  json_error_t je;
  json_t *j = json_loadb((const char *)b, len, JSON_REJECT_DUPLICATES, &je);
  if (!j) {
    sd_reply_error(r, 400, "malformed JSON body at line %d, column %d: not JSON, a field given twice, or \\u0000 in a string "
                   "(the text there is not repeated: it may be a value)", je.line, je.column);
    return NULL;
  }
  if (!json_is_object(j)) { json_decref(j); sd_reply_error(r, 400, "request body must be a JSON object"); return NULL; }
  return j;
}

/* `value`: a string, required. 0 with it, or -1 after replying. */
static int value_field(sd_request *r, json_t *body, const char **v, size_t *len) {
  json_t *x = json_object_get(body, "value");
  if (!json_is_string(x)) { sd_reply_error(r, 400, "field 'value' is required and must be a string"); return -1; }
  *v = json_string_value(x);
  *len = json_string_length(x);
  return 0;
}

static void reply(sd_request *r, int st, int ok, secret_info *in, const char *msg) {
  if (st) { sd_reply_error(r, st, "%s", msg); return; }
  sd_reply_json(r, ok, secret_json(in));
  secret_info_free(in);
}

static void create_secret(sd_request *r) {
  json_t *body = body_object(r);
  if (!body) return;
  static const char *const fields[] = {"name", "value", "metadata", NULL};
  json_t *name = json_object_get(body, "name"), *md = json_object_get(body, "metadata");
  const char *value;
  size_t vlen;
  reg_entry *scoped = NULL;
  char msg[600];
  if (api_only_fields(r, body, fields) != 0) goto out;
  if (!json_is_string(name)) { sd_reply_error(r, 400, "field 'name' is required and must be a string"); goto out; }
  if (value_field(r, body, &value, &vlen) != 0) goto out;
  int st = secrets_check_metadata(md, msg, sizeof msg);
  if (st) { sd_reply_error(r, st, "%s", msg); goto out; }
  const char *sid = json_is_object(md) ? json_string_value(json_object_get(md, SECRETS_SCOPE_KEY)) : NULL;
  /* A scoped secret's sandbox is held while the secret is made: were it killed meanwhile, its
   * death hook (which deletes its secrets) runs only after this one is stored. */
  if (sid && (!reg_valid_id(sid) || !(scoped = reg_get(sid)))) {
    sd_reply_error(r, 400, "field 'metadata." SECRETS_SCOPE_KEY "': sandbox '%s' not found (a scoped secret names a sandbox "
                   "that runs, and goes with it)", sid);
    goto out;
  }
  secret_info in;
  st = secrets_create(json_string_value(name), value, vlen, md, &in, msg, sizeof msg);
  reg_put(scoped);
  reply(r, st, 201, &in, msg);
out:
  json_decref(body);
}

static void update_secret(sd_request *r, const char *ref) {
  json_t *body = body_object(r);
  if (!body) return;
  static const char *const fields[] = {"value", "metadata", NULL};
  const char *value;
  size_t vlen;
  if (api_only_fields(r, body, fields) == 0 && value_field(r, body, &value, &vlen) == 0) {
    secret_info in;
    char msg[600];
    int st = secrets_update(ref, value, vlen, json_object_get(body, "metadata"), &in, msg, sizeof msg);
    reply(r, st, 200, &in, msg);
  }
  json_decref(body);
}

/* GET /secrets ?limit (1..100) &nextToken: newest first, X-Next-Token when there are more. */
static void list_secrets(sd_request *r) {
  static const char *const known[] = {"limit", "nextToken", NULL};
  if (api_query_only(r, known)) return;
  long limit = SECRET_API_LIST_MAX;
  const char *ls = sd_query(r, "limit");
  if (ls) {
    char *end;
    errno = 0;
    limit = strtol(ls, &end, 10);
    if (!*ls || *end || errno || limit < 1 || limit > SECRET_API_LIST_MAX) {
      sd_reply_error(r, 400, "query parameter 'limit' must be an integer between 1 and %d", SECRET_API_LIST_MAX);
      return;
    }
  }
  uint64_t before = 0;
  const char *nt = sd_query(r, "nextToken");
  if (nt && *nt) {
    char *end;
    errno = 0;
    before = strtoull(nt, &end, 10);
    if (*end || errno || before == 0 || nt[0] == '-' || nt[0] == '+') {
      sd_reply_error(r, 400, "query parameter 'nextToken' is not a token sandboxd issued");
      return;
    }
  }
  size_t n;
  uint64_t next;
  secret_info *all = secrets_list(before, (size_t)limit, &n, &next);
  if (!all) { sd_reply_error(r, 500, "out of memory"); return; }
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(out, secret_json(&all[i]));
  secrets_list_free(all, n);
  if (next) {
    char tok[32];
    snprintf(tok, sizeof tok, "%" PRIu64, next);
    sd_reply_header(r, "X-Next-Token", tok);
  }
  sd_reply_json(r, 200, out);
}

void secret_api_handle(sd_request *r, const rt_decision *d) {
  char msg[600];
  secret_info in;
  int st;
  switch (d->route) {
    case RT_SECRET_CREATE: create_secret(r); break;
    case RT_SECRET_LIST: list_secrets(r); break;
    case RT_SECRET_GET:
      st = secrets_get(d->ref, &in, msg, sizeof msg);
      reply(r, st, 200, &in, msg);
      break;
    case RT_SECRET_UPDATE: update_secret(r, d->ref); break;
    case RT_SECRET_DELETE:
      if ((st = secrets_delete(d->ref, msg, sizeof msg)) != 0) sd_reply_error(r, st, "%s", msg);
      else sd_reply_bytes(r, 204, NULL, NULL, 0);
      break;
    default: sd_reply_error(r, 500, "internal error: route %d is not a secret route", (int)d->route); break;
  }
}
