/* snapshot_api.c — snapshots and forks on the control plane (see snapshot_api.h). */
#include "snapshot_api.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_body.h"
#include "clocks.h"
#include "control.h"
#include "layers.h"
#include "net.h"
#include "ptab.h"
#include "registry.h"
#include "network_opts.h"
#include "sandbox.h"
#include "snapshots.h"
#include "template_build.h"
#include "volumes.h"

/* What a capture of a running sandbox yields: its new layer and, for forks, how it was made. */
typedef struct {
  layer *layer;
  reg_info src;            /* metadata referenced */
  char **envs;             /* NULL-terminated copy */
  char err[1024];
} capture;

static void capture_free(capture *c) {
  ly_release(c->layer);
  reg_info_free(&c->src);
  for (size_t i = 0; c->envs && c->envs[i]; i++) free(c->envs[i]);
  free(c->envs);
}

enum { CAPTURE_FAILED = -3, CAPTURE_NOMEM = -4 };

static int capture_cb(sbx_t *s, const reg_info *in, void *cls) {
  capture *c = cls;
  const char *const *envs = ptab_envs(sbx_ptab(s));
  size_t n = 0;
  while (envs && envs[n]) n++;
  if (!(c->envs = calloc(n + 1, sizeof *c->envs))) return CAPTURE_NOMEM;
  for (size_t i = 0; i < n; i++)
    if (!(c->envs[i] = strdup(envs[i]))) return CAPTURE_NOMEM;
  c->src = *in;
  json_incref(c->src.metadata);
  json_incref(c->src.network);
  return sbx_capture(s, &c->layer, c->err, sizeof c->err) == 0 ? 0 : CAPTURE_FAILED;
}

/* Captures sandbox id; on failure replies (404 unknown, 409 paused, 500) and returns -1. */
static int capture_running(sd_request *r, const char *id, const char *what, capture *c) {
  memset(c, 0, sizeof *c);
  switch (reg_with_running(id, capture_cb, c)) {
    case 0: return 0;
    case -1: sd_reply_error(r, 404, "sandbox '%s' not found", id); break;
    case -2: sd_reply_error(r, 409, "sandbox '%s' cannot be %s while it is paused: resume it (connect) first", id, what); break;
    case CAPTURE_NOMEM: sd_reply_error(r, 500, "out of memory"); break;
    default: sd_reply_error(r, 500, "sandbox '%s' could not be %s: %s", id, what, c->err); break;
  }
  capture_free(c);
  return -1;
}

static json_t *snapshot_json(const snap_info *s) {
  char sid[SNAP_NAME_MAX + 32];
  snprintf(sid, sizeof sid, "%s:%s", s->name[0] ? s->name : s->id, SNAP_DEFAULT_TAG);
  json_t *names = json_array();
  if (names && s->name[0]) json_array_append_new(names, json_string(s->name));
  return json_pack("{s:s,s:o}", "snapshotID", sid, "names", names ? names : json_array());
}

/* POST /sandboxes/{id}/snapshots {name?} */
static void create_snapshot(sd_request *r, const char *id) {
  json_t *body = api_body_object(r, true);
  if (!body) return;
  static const char *const fields[] = {"name", NULL};
  char name[SNAP_NAME_MAX + 1] = "", why[512];
  json_t *n = json_object_get(body, "name");
  if (api_only_fields(r, body, fields) != 0) goto out;
  if (n && !json_is_null(n)) {
    if (!json_is_string(n)) { sd_reply_error(r, 400, "field 'name' must be a string"); goto out; }
    if (snap_parse_name(json_string_value(n), name, sizeof name, why, sizeof why) != 0) {
      sd_reply_error(r, 400, "field 'name': %s", why);
      goto out;
    }
  }
  capture c;
  if (capture_running(r, id, "snapshotted", &c) != 0) goto out;
  snap_info info;
  int rc = snap_add(name[0] ? name : NULL, c.layer, id, wall_ms(), &info, why, sizeof why);
  if (rc == -2) sd_reply_error(r, 409, "field 'name': %s", why);
  else if (rc != 0) sd_reply_error(r, 500, "the snapshot of sandbox '%s' could not be recorded: %s", id, why);
  else sd_reply_json(r, 201, snapshot_json(&info));
  capture_free(&c);
out:
  json_decref(body);
}

/* GET /snapshots ?sandboxID= &name= &limit= &nextToken= — newest first. */
static void list_snapshots(sd_request *r) {
  static const char *const known[] = {"sandboxID", "name", "limit", "nextToken", NULL};
  if (api_query_only(r, known)) return;
  const char *sid = sd_query(r, "sandboxID"), *nq = sd_query(r, "name");
  if (sid && *sid && !reg_valid_id(sid)) { sd_reply_error(r, 400, "query parameter 'sandboxID': '%s' is not a sandbox id", sid); return; }
  char key[SNAP_NAME_MAX + 1] = "", why[512];
  if (nq && *nq && snap_parse_name(nq, key, sizeof key, why, sizeof why) != 0) {
    sd_reply_error(r, 400, "query parameter 'name': %s", why);
    return;
  }
  long limit = 100;
  const char *ls = sd_query(r, "limit");
  if (ls) {
    char *end;
    limit = strtol(ls, &end, 10);
    if (!*ls || *end || limit < 1 || limit > 100) { sd_reply_error(r, 400, "query parameter 'limit' must be an integer between 1 and 100"); return; }
  }
  uint64_t token = 0;   /* the seq of the last snapshot listed: the next page starts below it */
  const char *nt = sd_query(r, "nextToken");
  if (nt && *nt) {
    char *end;
    token = strtoull(nt, &end, 10);
    if (*end || token == 0) { sd_reply_error(r, 400, "query parameter 'nextToken' is not a token sandboxd issued"); return; }
  }
  size_t n;
  snap_info *all = snap_list(&n);
  if (!all) { sd_reply_error(r, 500, "out of memory"); return; }
  json_t *out = json_array();
  uint64_t last = 0;
  bool more = false;
  for (size_t i = 0; i < n; i++) {
    const snap_info *s = &all[i];
    if (token && s->seq >= token) continue;
    if (sid && *sid && strcmp(s->sandbox_id, sid) != 0) continue;
    if (key[0] && strcmp(s->id, key) != 0 && strcmp(s->name, key) != 0) continue;
    if ((long)json_array_size(out) == limit) { more = true; break; }
    json_array_append_new(out, snapshot_json(s));
    last = s->seq;
  }
  free(all);
  if (more) {
    char tok[32];
    snprintf(tok, sizeof tok, "%" PRIu64, last);
    sd_reply_header(r, "X-Next-Token", tok);
  }
  sd_reply_json(r, 200, out);
}

/* A template as E2B's GET /templates lists it: base (sandboxd's own, public) or a snapshot (E2B
 * lists snapshots as templates: its name is its alias), once whatever its tags: buildID its newest
 * build, buildCount the builds its tags keep. Always ready. */
static json_t *template_json(const char *id, const char *build_id, const char *name, int64_t created_ms, size_t builds, bool public) {
  json_t *names = json_array();
  if (names && name[0]) json_array_append_new(names, json_string(name));
  json_t *j = json_pack("{s:s,s:s,s:O,s:O,s:o,s:o,s:n,s:n,s:i,s:i,s:s,s:s,s:b}", "templateID", id, "buildID", build_id,
                        "aliases", names ? names : json_array(), "names", names ? names : json_array(),
                        "createdAt", control_rfc3339(created_ms), "updatedAt", control_rfc3339(created_ms),
                        "createdBy", "lastSpawnedAt", "spawnCount", 0, "buildCount", (int)builds, "envdVersion",
                        SANDBOXD_ENVD_VERSION, "buildStatus", "ready", "public", public);
  json_decref(names);
  if (j) control_host_sizes(j);
  if (j && !public) {   /* a built template's own limits, when its request set them */
    tb_template_defaults d;
    if (tb_defaults(build_id, &d) == 0) {
      if (d.cpu_count) json_object_set_new(j, "cpuCount", json_integer(d.cpu_count));
      if (d.memory_mb) json_object_set_new(j, "memoryMB", json_integer(d.memory_mb));
    }
    tb_defaults_free(&d);
  }
  return j;
}

/* GET /templates ?teamID= — base, then the snapshots, newest first. */
static void list_templates(sd_request *r) {
  static const char *const known[] = {"teamID", NULL};   /* one team: any value names it */
  if (api_query_only(r, known)) return;
  size_t n;
  snap_info *all = snap_list(&n);
  if (!all) { sd_reply_error(r, 500, "out of memory"); return; }
  json_t *out = json_array();
  json_array_append_new(out, template_json(SANDBOXD_TEMPLATE, SANDBOXD_TEMPLATE, SANDBOXD_TEMPLATE, control_started_ms(), 1, true));
  for (size_t i = 0; i < n; i++)
    json_array_append_new(out, template_json(all[i].id, all[i].build_id, all[i].name, all[i].created_ms, all[i].nbuilds, false));
  free(all);
  sd_reply_json(r, 200, out);
}

/* GET /templates/aliases/{alias} → { templateID, public } (the SDK's Template.exists), 404 when no
 * template has that name. */
static void template_alias(sd_request *r, const char *alias) {
  if (control_is_base(alias)) {
    sd_reply_json(r, 200, json_pack("{s:s,s:b}", "templateID", SANDBOXD_TEMPLATE, "public", true));
    return;
  }
  size_t n;
  snap_info *all = snap_list(&n);
  if (!all) { sd_reply_error(r, 500, "out of memory"); return; }
  size_t i = 0;
  while (i < n && !(all[i].name[0] && !strcmp(all[i].name, alias))) i++;
  if (i < n) sd_reply_json(r, 200, json_pack("{s:s,s:b}", "templateID", all[i].id, "public", false));
  else sd_reply_error(r, 404, "template alias '%s' not found", alias);
  free(all);
}

/* How many sandboxes (running or paused, builds' included) were created from template id. */
static size_t sandboxes_of(const char *id) {
  size_t n, users = 0;
  reg_info *v = reg_list(&n);
  for (size_t i = 0; v && i < n; i++) users += !v[i].dying && !strcmp(v[i].template_id, id);
  reg_list_free(v, n);
  return users;
}

/* DELETE /templates/{ref}: a snapshot or a built template, by id or name. A built template that
 * sandboxes were created from and still run is refused (409). */
static void delete_template(sd_request *r, const char *ref) {
  if (control_is_base(ref)) { sd_reply_error(r, 400, "the template 'base' is sandboxd's own: it cannot be deleted"); return; }
  char why[512];
  snap_info si;
  char key[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1];
  bool known = snap_parse_ref(ref, key, sizeof key, tag, sizeof tag, why, sizeof why) == 0 && snap_find(key, &si) == 0;
  /* a sandbox of any of its builds counts */
  size_t users = known && tb_is_built(si.id) ? sandboxes_of(si.id) : 0;
  if (users > 0) {   /* a built template in use stays (a snapshot goes, its layers kept for its sandboxes) */
    sd_reply_error(r, 409, "template '%s' is used by %zu sandbox%s: kill %s first", si.name[0] ? si.name : si.id, users,
                   users == 1 ? "" : "es", users == 1 ? "it" : "them");
    return;
  }
  int st = snap_delete(ref, why, sizeof why);
  if (st == 0 && known) tb_forget(si.id);   /* a built template's uploads, cache entries (its builds' defaults went with them) */
  if (st == 0) sd_reply_bytes(r, 204, NULL, NULL, 0);
  else if (st == 404) sd_reply_error(r, 404, "template '%s' not found", ref);
  else sd_reply_error(r, st, "%s", why);
}

/* POST /sandboxes/{id}/fork {timeout?, count?}: one capture, `count` sandboxes on it; each entry
 * of the answer is {"sandbox": ...} or {"error": {code, message}}. */
static void fork_sandbox(sd_request *r, const char *id) {
  json_t *body = api_body_object(r, true);
  if (!body) return;
  static const char *const fields[] = {"timeout", "count", NULL};
  int64_t timeout;
  if (api_only_fields(r, body, fields) != 0 || api_timeout(r, body, SNAPSHOT_FORK_TIMEOUT_S, &timeout) != 0) goto out;
  json_t *cj = json_object_get(body, "count");
  json_int_t count = 1;
  if (cj && !json_is_null(cj)) {
    if (!json_is_integer(cj) || json_integer_value(cj) < 1 || json_integer_value(cj) > SNAPSHOT_FORK_MAX) {
      sd_reply_error(r, 400, "field 'count' must be an integer between 1 and %d", SNAPSHOT_FORK_MAX);
      goto out;
    }
    count = json_integer_value(cj);
  }
  capture c;
  if (capture_running(r, id, "forked", &c) != 0) goto out;
  /* the source's volumes, mounted where it has them */
  json_t *vm = reg_volume_mounts(id);
  sbx_mount mounts[SBX_MAX_MOUNTS];
  size_t nmounts = 0;
  size_t vi;
  json_t *m;
  json_array_foreach(vm, vi, m) {
    int st;
    char vmsg[300];
    volume *v = nmounts < SBX_MAX_MOUNTS ? vol_mount(json_string_value(json_object_get(m, "name")), &st, vmsg, sizeof vmsg) : NULL;
    if (v) mounts[nmounts++] = (sbx_mount){v, json_string_value(json_object_get(m, "path"))};
  }
  json_t *results = json_array();
  char why[512];
  bool net_ok = !c.src.internet || net_available(why, sizeof why);
  for (json_int_t i = 0; i < count; i++) {
    reg_create_opts o = {.timeout_s = timeout, .metadata = c.src.metadata, .envs = (const char *const *)c.envs,
                         .secure = c.src.secure, .internet = c.src.internet, .template_id = c.src.template_id,
                         .template_alias = c.src.template_alias, .layer = c.layer, .mounts = mounts,
                         .nmounts = nmounts, .volume_mounts = vm};
    reg_info in;
    char err[512];
    json_t *entry;
    egress_rules rules;                  /* the source's, as in force */
    net_opts_rules(c.src.network, c.src.internet, &rules);
    o.network = c.src.network;
    o.egress = &rules;
    o.traffic_token = net_opts_private_ports(c.src.network);   /* its own token, the source's privacy */
    if (!net_ok) entry = json_pack("{s:{s:i,s:s+}}", "error", "code", 501, "message", "internet access is not available on this host: ", why);
    else if (reg_create(&o, &in, err, sizeof err) != 0) entry = json_pack("{s:{s:i,s:s+}}", "error", "code", 500, "message", "cannot create the fork: ", err);
    else {
      entry = json_pack("{s:o}", "sandbox", control_sandbox_json(&in));
      reg_info_free(&in);
    }
    egress_rules_free(&rules);
    if (entry) json_array_append_new(results, entry);
  }
  capture_free(&c);   /* the forks hold the layer now; without any it is removed */
  for (size_t i = 0; i < nmounts; i++) vol_unmount(mounts[i].volume);
  json_decref(vm);
  sd_reply_json(r, 201, results);
out:
  json_decref(body);
}

void snapshot_api_handle(sd_request *r, const rt_decision *d) {
  switch (d->route) {
    case RT_SNAPSHOT_CREATE: create_snapshot(r, d->id); break;
    case RT_SNAPSHOT_LIST: list_snapshots(r); break;
    case RT_TEMPLATE_DELETE: delete_template(r, d->ref); break;
    case RT_TEMPLATE_LIST: list_templates(r); break;
    case RT_TEMPLATE_ALIAS: template_alias(r, d->ref); break;
    case RT_FORK: fork_sandbox(r, d->id); break;
    default: sd_reply_error(r, 500, "internal error: route %d is not a snapshot route", (int)d->route); break;
  }
}
