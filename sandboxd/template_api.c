/* template_api.c — template builds on the control plane (see template_api.h). */
#include "template_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
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
  json_t *n = json_object_get(body, "name"), *a = json_object_get(body, "alias"), *tags = json_object_get(body, "tags");
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
  if (tags && !json_is_null(tags)) {
    size_t i;
    json_t *t;
    if (!json_is_array(tags)) { sd_reply_error(r, 400, "field 'tags' must be an array of strings"); goto out; }
    json_array_foreach(tags, i, t) {
      if (!json_is_string(t) || strcmp(json_string_value(t), SNAP_DEFAULT_TAG) != 0) {
        sd_reply_error(r, 400, "field 'tags[%zu]': sandboxd keeps one build per template, its tag is '%s'", i, SNAP_DEFAULT_TAG);
        goto out;
      }
    }
  }
  char name[SNAP_NAME_MAX + 1], why[512], tid[TB_ID_LEN + 1], bid[TB_ID_LEN + 1];
  if (snap_parse_name(json_string_value(n ? n : a), name, sizeof name, why, sizeof why) != 0) {
    sd_reply_error(r, 400, "field '%s': %s", n ? "name" : "alias", why);
    goto out;
  }
  int st = tb_request(name, (int)want_cpu, want_mem, tid, bid, why, sizeof why);
  if (st) { sd_reply_error(r, st, "%s", why); goto out; }
  sd_reply_json(r, 202, json_pack("{s:s,s:s,s:[s],s:[s],s:[s],s:b}", "templateID", tid, "buildID", bid, "names", name, "aliases",
                                  name, "tags", SNAP_DEFAULT_TAG, "public", 0));
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

void template_api_handle(sd_request *r, const rt_decision *d) {
  switch (d->route) {
    case RT_TEMPLATE_REQUEST: request_build(r); break;
    case RT_TEMPLATE_FILE: file_link(r, d); break;
    case RT_TEMPLATE_UPLOAD: file_upload(r, d); break;
    case RT_TEMPLATE_BUILD: start_build(r, d); break;
    case RT_TEMPLATE_BUILD_STATUS: build_status(r, d); break;
    default: sd_reply_error(r, 500, "internal error: route %d is not a template build route", (int)d->route); break;
  }
}
