/* volume_api.c — /volumes and /volumecontent (see volume_api.h). */
#include "volume_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_body.h"
#include "volumes.h"

static json_t *volume_json(const vol_info *in, bool token) {
  json_t *j = json_pack("{s:s,s:s}", "volumeID", in->id, "name", in->name);
  if (j && token) json_object_set_new(j, "token", json_string(in->token));
  return j;
}

/* ---- control plane ---- */

static void create_volume(sd_request *r) {
  json_t *body = api_body_object(r, false);
  if (!body) return;
  static const char *const fields[] = {"name", NULL};
  json_t *n = json_object_get(body, "name");
  if (api_only_fields(r, body, fields) == 0) {
    if (!json_is_string(n)) sd_reply_error(r, 400, "field 'name' is required and must be a string");
    else {
      vol_info in;
      char msg[300];
      int st = vol_create(json_string_value(n), &in, msg, sizeof msg);
      if (st) sd_reply_error(r, st, "%s", msg);
      else sd_reply_json(r, 201, volume_json(&in, true));
    }
  }
  json_decref(body);
}

static void list_volumes(sd_request *r) {
  size_t n;
  vol_info *all = vol_list(&n);
  if (!all) { sd_reply_error(r, 500, "out of memory"); return; }
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(out, volume_json(&all[i], false));
  free(all);
  sd_reply_json(r, 200, out);
}

/* ---- content ---- */

static int content_error(sd_request *r, int status, const char *msg) {
  const char *code = status == 400 ? "invalid_request" : status == 401 ? "unauthorized" : status == 404 ? "path_not_found"
                   : status == 409 ? "path_already_exists" : status == 413 ? "too_large" : status == 507 ? "no_space" : "internal";
  json_t *m = json_string(msg);
  return sd_reply_json(r, status, json_pack("{s:s,s:o}", "code", code, "message", m ? m : json_string("(not UTF-8)")));
}

/* ?name=<unsigned integer> into *out; has stays false when absent. -1 after replying 400. */
static int query_uint(sd_request *r, const char *name, uint32_t max, bool *has, uint32_t *out) {
  const char *v = sd_query(r, name);
  *has = false;
  if (!v) return 0;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (!*v || *end || v[0] == '-' || errno || x > max) {
    char msg[200];
    snprintf(msg, sizeof msg, "query parameter '%s' must be an integer between 0 and %u (got '%.40s')", name, max, v);
    content_error(r, 400, msg);
    return -1;
  }
  *has = true;
  *out = (uint32_t)x;
  return 0;
}

static int query_bool(sd_request *r, const char *name, bool *out) {
  const char *v = sd_query(r, name);
  *out = false;
  if (!v || !strcmp(v, "false")) return 0;
  if (!strcmp(v, "true")) { *out = true; return 0; }
  char msg[200];
  snprintf(msg, sizeof msg, "query parameter '%s' must be true or false (got '%.40s')", name, v);
  content_error(r, 400, msg);
  return -1;
}

/* uid, gid, mode (and force) of a create. */
static int query_attrs(sd_request *r, vol_attrs *a, bool *force) {
  memset(a, 0, sizeof *a);
  return query_uint(r, "uid", UINT32_MAX, &a->has_uid, &a->uid) || query_uint(r, "gid", UINT32_MAX, &a->has_gid, &a->gid) ||
         query_uint(r, "mode", UINT32_MAX, &a->has_mode, &a->mode) || query_bool(r, "force", force);
}

/* Only the route's query parameters: a misspelt one is refused, never ignored. */
static int only_params(sd_request *r, const char *const *known) {
  const char *bad = api_query_unknown(r, known);
  if (!bad) return 0;
  char msg[300];
  snprintf(msg, sizeof msg, "query parameter '%.60s' is not one of this route's", bad);
  content_error(r, 400, msg);
  return -1;
}

static void reply_result(sd_request *r, int st, int ok_status, json_t *out, const char *msg) {
  if (st) content_error(r, st, msg);
  else sd_reply_json(r, ok_status, out);
}

static void read_file(sd_request *r, volume *v) {
  int fd;
  uint64_t size;
  char msg[600];
  int st = vol_open_file(v, sd_query(r, "path"), &fd, &size, msg, sizeof msg);
  if (st) { content_error(r, st, msg); return; }
  if (size == 0) { sd_reply_bytes(r, 200, "application/octet-stream", NULL, 0); close(fd); return; }
  sd_stream_fd(r, "application/octet-stream", fd);
  close(fd);
}

/* PUT file: the body as it arrives (streamed, up to sd_upload_limit()), then into place. */
static void write_file(sd_request *r, volume *v) {
  vol_attrs a;
  bool force;
  if (query_attrs(r, &a, &force)) return;
  int st = 0;
  char msg[600];
  vol_writer *w = vol_write_begin(v, sd_query(r, "path"), &a, force, &st, msg, sizeof msg);
  if (!w) { while (sd_body_read(r, msg, sizeof msg) > 0) {} content_error(r, st, msg); return; }
  char *buf = malloc(256 * 1024);
  if (!buf) { vol_write_abort(w); content_error(r, 500, "out of memory"); return; }
  for (;;) {
    ssize_t n = sd_body_read(r, buf, 256 * 1024);
    if (n == 0) break;
    if (n < 0) {   /* the client went away, or the body is over the limit (answered 413 already) */
      vol_write_abort(w);
      free(buf);
      snprintf(msg, sizeof msg, "the upload was not completed (client gone, or over %zu bytes)", sd_upload_limit());
      content_error(r, 413, msg);
      return;
    }
    if ((st = vol_write(w, buf, (size_t)n, msg, sizeof msg)) != 0) {
      vol_write_abort(w);
      free(buf);
      while (sd_body_read(r, msg, sizeof msg) > 0) {}
      content_error(r, st, msg);
      return;
    }
  }
  free(buf);
  json_t *out = NULL;
  st = vol_write_finish(w, &out, msg, sizeof msg);
  reply_result(r, st, 201, out, msg);
}

/* PATCH path: {uid?, gid?, mode?} */
static void update_path(sd_request *r, volume *v) {
  size_t len;
  const uint8_t *b = sd_body(r, &len);
  json_error_t je;
  json_t *body = len ? json_loadb((const char *)b, len, JSON_REJECT_DUPLICATES, &je) : json_object();
  char msg[600];
  if (!json_is_object(body)) {
    snprintf(msg, sizeof msg, "the body must be a JSON object {uid?, gid?, mode?}");
    json_decref(body);
    content_error(r, 400, msg);
    return;
  }
  vol_attrs a;
  memset(&a, 0, sizeof a);
  const char *k;
  json_t *x;
  json_object_foreach(body, k, x) {
    bool *has = !strcmp(k, "uid") ? &a.has_uid : !strcmp(k, "gid") ? &a.has_gid : !strcmp(k, "mode") ? &a.has_mode : NULL;
    uint32_t *val = !strcmp(k, "uid") ? &a.uid : !strcmp(k, "gid") ? &a.gid : &a.mode;
    if (json_is_null(x)) continue;
    if (!has || !json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > UINT32_MAX) {
      snprintf(msg, sizeof msg, has ? "field '%s' must be an unsigned 32-bit integer" : "field '%s' is not one of uid, gid, mode", k);
      json_decref(body);
      content_error(r, 400, msg);
      return;
    }
    *has = true;
    *val = (uint32_t)json_integer_value(x);
  }
  json_decref(body);
  json_t *out = NULL;
  int st = vol_update(v, sd_query(r, "path"), &a, &out, msg, sizeof msg);
  reply_result(r, st, 200, out, msg);
}

static void content(sd_request *r, const rt_decision *d) {
  volume *v = d->volume;
  const char *m = sd_method(r), *op = d->rpc;
  static const char *const path_only[] = {"path", NULL}, *const listing[] = {"path", "depth", NULL},
                           *const creating[] = {"path", "uid", "gid", "mode", "force", NULL};
  bool get = !strcmp(m, "GET");
  const char *const *known = !strcmp(op, "dir") ? (get ? listing : creating) : !strcmp(op, "file") ? (get ? path_only : creating) : path_only;
  if (only_params(r, known)) return;
  json_t *out = NULL;
  char msg[600];
  int st;
  if (!strcmp(op, "dir") && get) {
    bool has;
    uint32_t depth = 1;
    if (query_uint(r, "depth", 1000, &has, &depth)) return;
    st = vol_list_dir(v, sd_query(r, "path"), has ? (int)depth : 1, &out, msg, sizeof msg);
    reply_result(r, st, 200, out, msg);
  } else if (!strcmp(op, "dir")) {
    vol_attrs a;
    bool force;
    if (query_attrs(r, &a, &force)) return;
    st = vol_make_dir(v, sd_query(r, "path"), &a, force, &out, msg, sizeof msg);
    reply_result(r, st, 201, out, msg);
  } else if (!strcmp(op, "file") && get) read_file(r, v);
  else if (!strcmp(op, "file")) write_file(r, v);
  else if (get) {
    st = vol_stat(v, sd_query(r, "path"), &out, msg, sizeof msg);
    reply_result(r, st, 200, out, msg);
  } else if (!strcmp(m, "PATCH")) update_path(r, v);
  else {
    st = vol_remove(v, sd_query(r, "path"), msg, sizeof msg);
    if (st) content_error(r, st, msg);
    else sd_reply_bytes(r, 204, NULL, NULL, 0);
  }
}

void volume_api_handle(sd_request *r, const rt_decision *d) {
  char msg[300];
  vol_info in;
  int st;
  switch (d->route) {
    case RT_VOLUME_CREATE: create_volume(r); break;
    case RT_VOLUME_LIST: list_volumes(r); break;
    case RT_VOLUME_GET:
      if (vol_get(d->ref, &in) != 0) sd_reply_error(r, 404, "volume '%s' not found", d->ref);
      else sd_reply_json(r, 200, volume_json(&in, true));
      break;
    case RT_VOLUME_DELETE:
      if ((st = vol_delete(d->ref, msg, sizeof msg)) != 0) sd_reply_error(r, st, "%s", msg);
      else sd_reply_bytes(r, 204, NULL, NULL, 0);
      break;
    case RT_VOLUME_CONTENT: content(r, d); break;
    default: sd_reply_error(r, 500, "internal error: route %d is not a volume route", (int)d->route); break;
  }
}
