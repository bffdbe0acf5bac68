/* template_api.c — template builds on the control plane (see template_api.h). */
#include "template_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "clocks.h"
#include "control.h"
#include "sandbox.h"
#include "snapshots.h"
#include "template_build.h"
#include "template_spec.h"

/* The path's segment after "/templates/<ref>/<what>/" ("" when there is none). */
static const char *rest_of(sd_request *r, const rt_decision *d, const char *prefix, const char *what) {
  const char *p = sd_path(r);
  size_t pl = strlen(prefix), rl = strlen(d->ref), wl = strlen(what);
  if (strlen(p) < pl + rl + wl + 3) return "";
  return p + pl + 1 + rl + 1 + wl + 1;
}

/* A limit of the template's sandboxes: absent (0: sandboxd's), or an integer in [min, what
 * sandboxd gives a sandbox (--cpu-count, --memory-mb)]. */
static int limit_field(sd_request *r, json_t *body, const char *field, long min, long max, long *out) {
  json_t *v = json_object_get(body, field);
  *out = 0;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
    sd_reply_error(r, 400, "field '%s' must be an integer between %ld and %ld (this sandboxd's limit)", field, min, max);
    return -1;
  }
  *out = (long)json_integer_value(v);
  return 0;
}

typedef char tag_t[SNAP_TAG_MAX + 1];

/* Adds the tag `raw` (field `field`, for the message) to tags[*n] unless it is there already.
 * 0, or -1 after replying 400. */
static int add_tag(sd_request *r, const char *field, const char *raw, tag_t *tags, size_t *n) {
  char tag[SNAP_TAG_MAX + 1], why[512];
  if (snap_parse_tag(raw, tag, sizeof tag, why, sizeof why) != 0) { sd_reply_error(r, 400, "field '%s': %s", field, why); return -1; }
  for (size_t i = 0; i < *n; i++)
    if (!strcmp(tags[i], tag)) return 0;
  if (*n == SNAP_TAGS_PER_REQUEST) {
    sd_reply_error(r, 400, "field '%s': at most %d tags a request (sandboxd's bound)", field, SNAP_TAGS_PER_REQUEST);
    return -1;
  }
  snprintf(tags[(*n)++], sizeof tags[0], "%s", tag);
  return 0;
}

/* Field `field` (an array of tag strings; absent or null: none unless required) added to tags[*n]
 * as add_tag does. 0, or -1 after replying 400. */
static int tag_list(sd_request *r, json_t *body, const char *field, bool required, tag_t *tags, size_t *n) {
  json_t *v = json_object_get(body, field), *t;
  if (!v || json_is_null(v)) {
    if (!required) return 0;
    sd_reply_error(r, 400, "field '%s' is required: an array of 1 to %d tags", field, SNAP_TAGS_PER_REQUEST);
    return -1;
  }
  if (!json_is_array(v) || (required && json_array_size(v) == 0)) {
    sd_reply_error(r, 400, "field '%s' must be an array of %s tag strings", field, required ? "1 or more" : "");
    return -1;
  }
  if (json_array_size(v) > SNAP_TAGS_PER_REQUEST) {
    sd_reply_error(r, 400, "field '%s': at most %d tags a request (sandboxd's bound)", field, SNAP_TAGS_PER_REQUEST);
    return -1;
  }
  size_t i;
  json_array_foreach(v, i, t) {
    char f[64];
    snprintf(f, sizeof f, "%s[%zu]", field, i);
    if (!json_is_string(t)) { sd_reply_error(r, 400, "field '%s' must be a string", f); return -1; }
    if (add_tag(r, f, json_string_value(t), tags, n) != 0) return -1;
  }
  return 0;
}

static json_t *tags_json(const tag_t *tags, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_string(tags[i]));
  if (a && n == 0) json_array_append_new(a, json_string(SNAP_DEFAULT_TAG));
  return a;
}

/* POST /v3/templates */
static void request_build(sd_request *r) {
  json_t *body = api_body_object(r, false);
  if (!body) return;
  static const char *const fields[] = {"name", "alias", "tags", "cpuCount", "memoryMB", "minFreeDiskMb", "teamID", NULL};
  int cpu;
  long mem;
  sbx_limits(&cpu, &mem);
  long want_cpu, want_mem;
  if (api_only_fields(r, body, fields) != 0 || limit_field(r, body, "cpuCount", 1, cpu, &want_cpu) != 0 ||
      limit_field(r, body, "memoryMB", 128, mem, &want_mem) != 0)
    goto out;
  json_t *n = json_object_get(body, "name"), *a = json_object_get(body, "alias");
  json_t *disk = json_object_get(body, "minFreeDiskMb");
  if (disk && !json_is_null(disk)) {
    sd_reply_error(r, 400, "field 'minFreeDiskMb' is not supported by sandboxd (a sandbox's disk is the state dir's file system)");
    goto out;
  }
  if (n && json_is_null(n)) n = NULL;
  if (a && json_is_null(a)) a = NULL;
  if ((n && !json_is_string(n)) || (a && !json_is_string(a))) { sd_reply_error(r, 400, "fields 'name' and 'alias' must be strings"); goto out; }
  if (!n && !a) { sd_reply_error(r, 400, "field 'name' is required"); goto out; }
  if (n && a && strcmp(json_string_value(n), json_string_value(a)) != 0) { sd_reply_error(r, 400, "fields 'name' and 'alias' differ: give 'name' only"); goto out; }
  char name[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1], why[512], tid[TB_ID_LEN + 1], bid[TB_ID_LEN + 1];
  tag_t want[SNAP_TAGS_PER_REQUEST];
  size_t nwant = 0;
  if (snap_parse_ref(json_string_value(n ? n : a), name, sizeof name, tag, sizeof tag, why, sizeof why) != 0) {
    sd_reply_error(r, 400, "field '%s': %s", n ? "name" : "alias", why);
    goto out;
  }
  /* "name:tag" counts as that tag in 'tags' (E2B) */
  if ((tag[0] && add_tag(r, n ? "name" : "alias", tag, want, &nwant) != 0) || tag_list(r, body, "tags", false, want, &nwant) != 0) goto out;
  int st = tb_request(name, (const tag_t *)want, nwant, (int)want_cpu, want_mem, tid, bid, why, sizeof why);
  if (st) { sd_reply_error(r, st, "%s", why); goto out; }
  sd_reply_json(r, 202, json_pack("{s:s,s:s,s:[s],s:[s],s:o,s:b}", "templateID", tid, "buildID", bid, "names", name, "aliases",
                                  name, "tags", tags_json((const tag_t *)want, nwant), "public", 0));
out:
  json_decref(body);
}

/* GET /templates/{templateID}/files/{hash} */
static void file_link(sd_request *r, const rt_decision *d) {
  const char *hash = rest_of(r, d, "/templates", "files");
  bool present = false;
  char token[TB_TOKEN_LEN + 1], why[512];
  int st = tb_file_link(d->ref, hash, &present, token, sizeof token, why, sizeof why);
  if (st) { sd_reply_error(r, st, "%s", why); return; }
  if (present) { sd_reply_json(r, 201, json_pack("{s:b}", "present", 1)); return; }
  const char *host = sd_header(r, "Host");
  if (!host || !*host || strpbrk(host, "/?#@ ")) { sd_reply_error(r, 400, "the request has no Host to build the upload URL from"); return; }
  /* The URL is the capability, as E2B's signed storage URLs are: SDK 2.29.1 sends no headers. */
  char url[1024];
  snprintf(url, sizeof url, "%s://%s/templates/%s/files/%s?" TEMPLATE_UPLOAD_TOKEN_PARAM "=%s", sd_tls(r) ? "https" : "http", host,
           d->ref, hash, token);
  sd_reply_json(r, 201, json_pack("{s:b,s:s}", "present", 0, "url", url));
}

/* PUT /templates/{templateID}/files/{hash}: the upload (streamed), its token checked before any
 * body byte is taken. */
static void file_upload(sd_request *r, const rt_decision *d) {
  const char *hash = rest_of(r, d, "/templates", "files");
  char why[512], drain[4096];
  int st = 0;
  tb_upload *u = tb_upload_begin(d->ref, hash, sd_query(r, TEMPLATE_UPLOAD_TOKEN_PARAM), &st, why, sizeof why);
  if (!u) { while (sd_body_read(r, drain, sizeof drain) > 0) {} sd_reply_error(r, st, "%s", why); return; }
  char *buf = malloc(256 * 1024);
  if (!buf) { tb_upload_abort(u); sd_reply_error(r, 500, "out of memory"); return; }
  for (;;) {
    ssize_t n = sd_body_read(r, buf, 256 * 1024);
    if (n == 0) break;
    if (n < 0) {
      tb_upload_abort(u);
      free(buf);
      sd_reply_error(r, 413, "the upload was not completed (client gone, or over %zu bytes)", sd_upload_limit());
      return;
    }
    if ((st = tb_upload_write(u, buf, (size_t)n, why, sizeof why)) != 0) {
      tb_upload_abort(u);
      free(buf);
      while (sd_body_read(r, drain, sizeof drain) > 0) {}
      sd_reply_error(r, st, "%s", why);
      return;
    }
  }
  free(buf);
  st = tb_upload_finish(u, why, sizeof why);
  if (st) sd_reply_error(r, st, "%s", why);
  else sd_reply_bytes(r, 200, NULL, NULL, 0);
}

/* POST /v2/templates/{templateID}/builds/{buildID} */
static void start_build(sd_request *r, const rt_decision *d) {
  const char *bid = rest_of(r, d, "/v2/templates", "builds");
  if (!*bid || strchr(bid, '/')) { sd_reply_error(r, 404, "no endpoint POST %s", sd_path(r)); return; }
  json_t *body = api_body_object(r, false);
  if (!body) return;
  ts_spec spec;
  char why[1024];
  if (ts_parse(body, &spec, why, sizeof why) != 0) sd_reply_error(r, 400, "%s", why);
  else {
    int st = tb_start(d->ref, bid, &spec, why, sizeof why);
    if (st) sd_reply_error(r, st, "%s", why);
    else sd_reply_bytes(r, 202, NULL, NULL, 0);
    ts_free(&spec);   /* emptied when the build took it */
  }
  json_decref(body);
}

static int known_status_param(void *cls, const char *name, const char *value) {
  (void)value;
  if (!strcmp(name, "logsOffset")) return 0;
  *(const char **)cls = name;
  return 1;
}

/* GET /templates/{templateID}/builds/{buildID}/status ?logsOffset= */
static void build_status(sd_request *r, const rt_decision *d) {
  const char *rest = rest_of(r, d, "/templates", "builds"), *slash = strchr(rest, '/');
  if (!slash || strcmp(slash, "/status") != 0 || slash == rest || slash - rest > TB_ID_LEN) {
    sd_reply_error(r, 404, "no endpoint GET %s", sd_path(r));
    return;
  }
  char bid[TB_ID_LEN + 1];
  snprintf(bid, sizeof bid, "%.*s", (int)(slash - rest), rest);
  const char *unknown = NULL;
  if (sd_query_each(r, known_status_param, &unknown)) {
    sd_reply_error(r, 400, "query parameter '%s' is not supported by sandboxd (logsOffset is)", unknown);
    return;
  }
  size_t offset = 0;
  const char *os = sd_query(r, "logsOffset");
  if (os) {
    char *end;
    errno = 0;
    long long v = strtoll(os, &end, 10);
    if (!*os || *end || errno || v < 0) { sd_reply_error(r, 400, "query parameter 'logsOffset' must be an integer >= 0"); return; }
    offset = (size_t)v;
  }
  int st = 0;
  char why[512];
  json_t *j = tb_status(d->ref, bid, offset, &st, why, sizeof why);
  if (!j) sd_reply_error(r, st, "%s", why);
  else sd_reply_json(r, 200, j);
}

/* POST /templates/tags {target: "name[:tag]", tags} → 201 {buildID, tags} */
static void assign_tags(sd_request *r) {
  json_t *body = api_body_object(r, false);
  if (!body) return;
  static const char *const fields[] = {"target", "tags", NULL};
  tag_t tags[SNAP_TAGS_PER_REQUEST];
  size_t n = 0;
  json_t *target = json_object_get(body, "target");
  if (api_only_fields(r, body, fields) != 0) goto out;
  if (!json_is_string(target)) { sd_reply_error(r, 400, "field 'target' is required: the build to tag, as \"name:tag\""); goto out; }
  if (tag_list(r, body, "tags", true, tags, &n) != 0) goto out;
  char why[512], bid[LY_ID_LEN + 1];
  int st = snap_assign_tags(json_string_value(target), (const tag_t *)tags, n, wall_ms(), bid, why, sizeof why);
  if (st) { sd_reply_error(r, st, "%s%s", st == 400 ? "field 'target': " : "", why); goto out; }
  sd_reply_json(r, 201, json_pack("{s:s,s:o}", "buildID", bid, "tags", tags_json((const tag_t *)tags, n)));
out:
  json_decref(body);
}

/* DELETE /templates/tags {name, tags} → 204 */
static void remove_tags(sd_request *r) {
  json_t *body = api_body_object(r, false);
  if (!body) return;
  static const char *const fields[] = {"name", "tags", NULL};
  tag_t tags[SNAP_TAGS_PER_REQUEST];
  size_t n = 0;
  json_t *name = json_object_get(body, "name");
  if (api_only_fields(r, body, fields) != 0) goto out;
  if (!json_is_string(name)) { sd_reply_error(r, 400, "field 'name' is required: the template's name"); goto out; }
  if (tag_list(r, body, "tags", true, tags, &n) != 0) goto out;
  char why[512];
  int st = snap_remove_tags(json_string_value(name), (const tag_t *)tags, n, why, sizeof why);
  if (st) sd_reply_error(r, st, "%s", why);
  else sd_reply_bytes(r, 204, NULL, NULL, 0);
out:
  json_decref(body);
}

/* GET /templates/{templateID}/tags → [{tag, buildID, createdAt}] */
static void list_tags(sd_request *r, const rt_decision *d) {
  static const char *const known[] = {NULL};
  if (api_query_only(r, known)) return;
  snap_tag *v;
  size_t n;
  char why[512];
  int st = snap_tags(d->ref, &v, &n, why, sizeof why);
  if (st) { sd_reply_error(r, st, "%s", why); return; }
  json_t *out = json_array();
  for (size_t i = 0; out && i < n; i++)
    json_array_append_new(out, json_pack("{s:s,s:s,s:o}", "tag", v[i].tag, "buildID", v[i].build_id, "createdAt",
                                         control_rfc3339(v[i].created_ms)));
  free(v);
  if (!out) sd_reply_error(r, 500, "out of memory");
  else sd_reply_json(r, 200, out);
}

void template_api_handle(sd_request *r, const rt_decision *d) {
  switch (d->route) {
    case RT_TEMPLATE_REQUEST: request_build(r); break;
    case RT_TEMPLATE_FILE: file_link(r, d); break;
    case RT_TEMPLATE_UPLOAD: file_upload(r, d); break;
    case RT_TEMPLATE_BUILD: start_build(r, d); break;
    case RT_TEMPLATE_BUILD_STATUS: build_status(r, d); break;
    case RT_TEMPLATE_TAGS_ASSIGN: assign_tags(r); break;
    case RT_TEMPLATE_TAGS_REMOVE: remove_tags(r); break;
    case RT_TEMPLATE_TAGS: list_tags(r, d); break;
    default: sd_reply_error(r, 500, "internal error: route %d is not a template build route", (int)d->route); break;
  }
}
