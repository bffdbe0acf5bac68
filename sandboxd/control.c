/* control.c — POST/GET/DELETE /sandboxes…, /v2/sandboxes, lease and pause (reference §2). */
#include "control.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "api_body.h"
#include "clocks.h"
#include "layers.h"
#include "net.h"
#include "network_opts.h"
#include "registry.h"
#include "sandbox.h"
#include "sbxlog.h"
#include "snapshots.h"
#include "template_build.h"
#include "volumes.h"

static char g_state_dir[4096] = ".";

static char g_domain[256];   /* E2B's domain in edge mode (what sandboxes report as theirs), "" else */
static int64_t g_started_ms;   /* when sandboxd started: the base template's dates */

void control_init(const char *state_dir, const char *domain) {
  g_started_ms = wall_ms();
  snprintf(g_state_dir, sizeof g_state_dir, "%s", state_dir);
  snprintf(g_domain, sizeof g_domain, "%s", domain ? domain : "");
}
static json_t *domain_json(void) { return g_domain[0] ? json_string(g_domain) : json_null(); }

bool control_is_base(const char *ref) { return !strcmp(ref, SANDBOXD_TEMPLATE) || !strcmp(ref, SANDBOXD_TEMPLATE ":" SNAP_DEFAULT_TAG); }

int64_t control_started_ms(void) { return g_started_ms; }

json_t *control_rfc3339(int64_t ms) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[64];
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
  return json_string(buf);
}

json_t *control_sandbox_json(const reg_info *in) {
  json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:o}", "sandboxID", in->id, "templateID", in->template_id,
                        "alias", in->template_alias, "clientID", "6532622b", "envdVersion", SANDBOXD_ENVD_VERSION,
                        "trafficAccessToken", in->traffic_token[0] ? json_string(in->traffic_token) : json_null(),
                        "domain", domain_json());
  if (j && in->secure) json_object_set_new(j, "envdAccessToken", json_string(in->token));
  return j;
}

/* CPUs and memory: the sandbox's limits where the host enforces them (sandbox.h sbx_limits), else
 * the host's; disk is not carved per sandbox, so it is the state dir's file system. */
void control_host_sizes(json_t *j) {
  int cpus;
  long mem;
  sbx_limits(&cpus, &mem);
  struct statvfs vf;
  json_int_t disk = statvfs(g_state_dir, &vf) == 0 ? (json_int_t)((uint64_t)vf.f_blocks * vf.f_frsize >> 20) : 0;
  json_object_set_new(j, "cpuCount", json_integer(cpus));
  json_object_set_new(j, "memoryMB", json_integer(mem));
  json_object_set_new(j, "diskSizeMB", json_integer(disk));
}

static json_t *listed_json(const reg_info *in) {
  json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:O,s:s,s:s,s:o}", "templateID", in->template_id,
                        "alias", in->template_alias, "sandboxID", in->id, "clientID", "6532622b",
                        "startedAt", control_rfc3339(in->started_ms), "endAt", control_rfc3339(in->end_ms),
                        "metadata", in->metadata, "state", in->paused ? "paused" : "running",
                        "envdVersion", SANDBOXD_ENVD_VERSION, "volumeMounts", reg_volume_mounts(in->id));
  if (j) control_host_sizes(j);
  return j;
}

static json_t *detail_json(const reg_info *in) {
  json_t *j = listed_json(in);
  if (!j) return NULL;
  json_object_set_new(j, "allowInternetAccess", json_boolean(in->internet));
  if (in->network) json_object_set(j, "network", in->network);
  json_object_set_new(j, "lifecycle", json_pack("{s:s,s:b}", "onTimeout", in->auto_pause ? "pause" : "kill", "autoResume", in->auto_resume));
  json_object_set_new(j, "domain", domain_json());
  if (in->secure) json_object_set_new(j, "envdAccessToken", json_string(in->token));
  return j;
}

/* A mount point: absolute and clean (E2B's rules), not "/", not on a kernel file system. NULL if
 * fine, else why not. */
static const char *bad_mount_path(const char *p) {
  size_t n = strlen(p);
  if (!n) return "path cannot be empty";
  if (p[0] != '/') return "path must be absolute";
  if (strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../") || (n > 1 && p[n - 1] == '/') ||
      (n >= 2 && !strcmp(p + n - 2, "/.")) || (n >= 3 && !strcmp(p + n - 3, "/..")))
    return "path must not contain any '.' or '..' components";
  if (n == 1) return "a volume cannot be mounted over the root";
  static const char *const kernel[] = {"/proc", "/sys", "/dev"};
  for (size_t i = 0; i < 3; i++) {
    size_t k = strlen(kernel[i]);
    if (!strncmp(p, kernel[i], k) && (p[k] == 0 || p[k] == '/'))
      return "the path is on one of the sandbox's kernel file systems (/proc, /sys, /dev)";
  }
  if (n > SBX_MOUNT_PATH_MAX) return "path is too long";
  return NULL;
}

/* volumeMounts [{name, path}]: each volume held for a mount in mounts. What the control plane
 * reports of them, or NULL after replying 400. */
static json_t *volume_mounts(sd_request *r, json_t *vm, sbx_mount *mounts, size_t *n) {
  json_t *out = json_array();
  if (!vm || json_is_null(vm)) return out;
  const char *why = NULL, *field = NULL;
  char buf[300];
  size_t i = 0;
  if (!json_is_array(vm)) why = "must be an array of {name, path}";
  else if (json_array_size(vm) > SBX_MAX_MOUNTS) { snprintf(buf, sizeof buf, "at most %d volumes per sandbox", SBX_MAX_MOUNTS); why = buf; }
  json_t *m;
  if (!why) json_array_foreach(vm, i, m) {
    json_t *name = json_object_get(m, "name"), *path = json_object_get(m, "path");
    if (!json_is_object(m) || !json_is_string(name) || !json_is_string(path) || json_object_size(m) != 2) {
      why = "must be an object {name: string, path: string}";
      field = "";
      break;
    }
    field = "path";
    if ((why = bad_mount_path(json_string_value(path)))) break;
    for (size_t k = 0; k < *n && !why; k++)
      if (!strcmp(mounts[k].path, json_string_value(path))) {
        snprintf(buf, sizeof buf, "path '%.200s' is already used", json_string_value(path));
        why = buf;
      }
    if (why) break;
    int st;
    volume *v = vol_mount(json_string_value(name), &st, buf, sizeof buf);
    if (!v) { why = buf; field = "name"; break; }
    mounts[*n].volume = v;
    mounts[(*n)++].path = json_string_value(path);   /* borrowed from the body, which outlives the create */
    json_array_append_new(out, json_pack("{s:s,s:s}", "name", json_string_value(name), "path", json_string_value(path)));
  }
  if (!why) return out;
  if (!field) sd_reply_error(r, 400, "field 'volumeMounts' %s", why);
  else if (!field[0]) sd_reply_error(r, 400, "field 'volumeMounts[%zu]' %s", i, why);
  else sd_reply_error(r, 400, "field 'volumeMounts[%zu].%s': %s", i, field, why);
  for (size_t k = 0; k < *n; k++) vol_unmount(mounts[k].volume);
  *n = 0;
  json_decref(out);
  return NULL;
}

/* POST /sandboxes (SDK 2.29.1) and POST /v2/sandboxes (the current SDK: every sandbox secure, no
 * `secure` field). Fields that ask for nothing (an empty `network`, no `volumeMounts`,
 * `autoPauseMemory: true`, which a freezer pause always keeps) are taken; any other request
 * sandboxd cannot honour is refused, naming the field. */
/* A line in the sandbox's log (sbxlog.h) for what the control plane did to it: one field at most. */
static void log_event(const char *id, sbxlog_level level, const char *msg, const char *key, const char *value) {
  reg_entry *e = reg_get(id);
  if (!e) return;
  sbx_t *s = reg_sbx(e);
  if (s) sbxlog_add(sbx_log(s), level, msg, key, value, NULL);
  reg_put(e);
}

static void create_sandbox(sd_request *r, bool v2) {
  struct timespec t0;   /* SANDBOXD_TRACE_CREATE: the whole request, its body in, as sandboxd handled it */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  json_t *body = api_body_object(r, false);
  if (!body) return;
  char **envs = NULL;
  size_t nenv = 0;
  net_opts net = {0};
  layer *from = NULL;   /* a snapshot's layer, held until the sandbox holds its own */
  tb_template_defaults tdef = {0};   /* a built template's envs and workdir */
  snap_info snap;
  sbx_mount mounts[SBX_MAX_MOUNTS];   /* their volumes held until the sandbox holds its own */
  size_t nmounts = 0;
  json_t *reported = NULL;
  const char *k;
  json_t *v;
  /* Refuse what sandboxd cannot enforce instead of silently accepting it. */
  json_object_foreach(body, k, v) {
    if (json_is_null(v)) continue;
    if (!strcmp(k, "templateID") || !strcmp(k, "timeout") || !strcmp(k, "metadata") || !strcmp(k, "envVars") ||
        !strcmp(k, "allow_internet_access") || !strcmp(k, "autoPause") || !strcmp(k, "autoResume"))
      continue;
    if (!strcmp(k, "secure") && (!v2 || json_is_true(v))) continue;
    if (!strcmp(k, "network")) continue;
    if (!strcmp(k, "volumeMounts")) continue;
    if (!strcmp(k, "autoPauseMemory") && json_is_true(v)) continue;
    if (!strcmp(k, "secure"))
      sd_reply_error(r, 400, "field 'secure': /v2/sandboxes creates secure sandboxes only (the field is not part of it)");
    else if (!strcmp(k, "mcp"))
      sd_reply_error(r, 400, "field 'mcp' is not supported by sandboxd (no MCP gateway in the base template)");
    else if (!strcmp(k, "iam"))
      sd_reply_error(r, 400, "field 'iam' (IAM tokens for the sandbox's egress) is not supported by sandboxd");
    else if (!strcmp(k, "autoPauseMemory"))
      sd_reply_error(r, 400, json_is_boolean(v) ? "field 'autoPauseMemory': false (a filesystem-only auto-pause, "
                     "lifecycle.onTimeout.keepMemory: false) is not supported by sandboxd: a paused sandbox keeps its memory"
                     : "field 'autoPauseMemory' must be a boolean");
    else
      sd_reply_error(r, 400, "field '%s' is not supported by sandboxd", k);
    goto out;
  }
  reg_create_opts o = { 0 };
  json_t *tpl = json_object_get(body, "templateID");
  if (!json_is_string(tpl)) { sd_reply_error(r, 400, "field 'templateID' is required and must be a string"); goto out; }
  if (!control_is_base(json_string_value(tpl))) {
    /* a snapshot, by id or name: the sandbox starts from its layers */
    int status;
    char why[512];
    if (!(from = snap_resolve(json_string_value(tpl), &snap, &status, why, sizeof why))) {
      if (status == 404)
        sd_reply_error(r, 404, "%s (sandboxd has the template '%s', the templates and snapshots GET /templates lists, and their tags)",
                       why, SANDBOXD_TEMPLATE);
      else sd_reply_error(r, status, "field 'templateID': %s", why);
      goto out;
    }
    o.layer = from;
    o.template_id = snap.id;
    o.template_alias = snap.name[0] ? snap.name : snap.id;
    if (tb_defaults(snap.build_id, &tdef) == 0) {   /* a built template's (the tag's build) */
      if (tdef.workdir[0]) o.workdir = tdef.workdir;
      o.cpu_count = tdef.cpu_count;
      o.memory_mb = tdef.memory_mb;
    }
  }
  json_t *ar = json_object_get(body, "autoResume");
  if (ar && !json_is_null(ar)) {
    json_t *en = json_is_object(ar) ? json_object_get(ar, "enabled") : NULL;
    if (!json_is_object(ar) || (en && !json_is_boolean(en)) || json_object_size(ar) > (en ? 1u : 0u)) {
      sd_reply_error(r, 400, "field 'autoResume' must be an object {\"enabled\": boolean}");
      goto out;
    }
    o.auto_resume = json_is_true(en);
  }
  if (api_timeout(r, body, 300, &o.timeout_s)) goto out;
  if (!(reported = volume_mounts(r, json_object_get(body, "volumeMounts"), mounts, &nmounts))) goto out;
  o.mounts = mounts;
  o.nmounts = nmounts;
  o.volume_mounts = reported;
  json_t *md = json_object_get(body, "metadata");
  if (md && !json_is_null(md)) {
    if (api_string_map(r, md, "metadata", false)) goto out;
    o.metadata = md;
  }
  json_t *ev = json_object_get(body, "envVars");
  size_t ntdef = 0;
  while (tdef.envs && tdef.envs[ntdef]) ntdef++;
  if (ev && !json_is_null(ev) && api_string_map(r, ev, "envVars", true)) goto out;
  if ((ev && !json_is_null(ev)) || ntdef) {
    /* a built template's envs first: the request's, later, win */
    envs = calloc((ev ? json_object_size(ev) : 0) + ntdef + 1, sizeof *envs);
    if (!envs) { sd_reply_error(r, 500, "out of memory"); goto out; }
    for (size_t i = 0; i < ntdef; i++) envs[nenv++] = tdef.envs[i];
    for (size_t i = 0; i < ntdef; i++) tdef.envs[i] = NULL;
    if (ev) json_object_foreach(ev, k, v) {
      size_t n = strlen(k) + strlen(json_string_value(v)) + 2;
      envs[nenv] = malloc(n);
      if (!envs[nenv]) { sd_reply_error(r, 500, "out of memory"); goto out; }
      snprintf(envs[nenv++], n, "%s=%s", k, json_string_value(v));
    }
  }
  o.envs = (const char *const *)envs;
  if (api_bool(r, body, "secure", v2, &o.secure) || api_bool(r, body, "allow_internet_access", true, &o.internet) ||
      api_bool(r, body, "autoPause", false, &o.auto_pause))
    goto out;
  char why[512];
  if (o.internet && !net_available(why, sizeof why)) {
    sd_reply_error(r, 501, "field 'allow_internet_access': true is not available on this host (%s); create the "
                   "sandbox with allowInternetAccess: false", why);
    goto out;
  }
  if (net_opts_create(r, json_object_get(body, "network"), o.internet, &net) != 0) goto out;
  if (net.private_ports && !o.secure) {
    /* As E2B: the traffic access token comes with a secure sandbox's envd token. */
    sd_reply_error(r, 400, "field 'network.allowPublicTraffic': false needs a secure sandbox (secure: true)");
    goto out;
  }
  o.traffic_token = net.private_ports;
  o.network = net.reported;
  o.egress = &net.rules;
  reg_info in;
  char err[512];
  if (reg_create(&o, &in, err, sizeof err) != 0) {
    sd_reply_error(r, 500, "cannot create the sandbox: %s", err);
    goto out;
  }
  log_event(in.id, SBXLOG_INFO, "sandbox created", "template", in.template_id[0] ? in.template_id : "base");
  if (tdef.start_cmd) {   /* a built template's start command, ready before the sandbox is answered */
    reg_entry *se = reg_get(in.id);
    char serr[1024];
    if (se && tb_run_start_cmd(reg_sbx(se), &tdef, serr, sizeof serr) != 0)
      sbxlog_add(sbx_log(reg_sbx(se)), SBXLOG_ERROR, "the template's start command failed", "error", serr, NULL);
    reg_put(se);
  }
  sd_reply_json(r, 201, control_sandbox_json(&in));
  if (getenv("SANDBOXD_TRACE_CREATE")) fprintf(stderr, "sandboxd: sandbox %s create request handled in %.2f ms\n", in.id, ms_since(t0));
  reg_info_free(&in);
out:
  net_opts_free(&net);
  for (size_t i = 0; i < nenv; i++) free(envs[i]);
  free(envs);
  tb_defaults_free(&tdef);
  ly_release(from);
  for (size_t i = 0; i < nmounts; i++) vol_unmount(mounts[i].volume);
  json_decref(reported);
  json_decref(body);
}

/* PUT /sandboxes/{id}/network: every egress rule replaced at once; open connections the new
 * rules deny are reset before the answer (egress.h). A paused sandbox ⇒ 409, as on E2B. */
typedef struct { sd_request *r; json_t *body; } net_update;
static int apply_network(sbx_t *s, const reg_info *in, void *cls) {
  net_update *u = cls;
  net_opts n;
  if (net_opts_update(u->r, u->body, in->network, &n) != 0) return -3;   /* replied */
  char err[512];
  int rc = sbx_set_egress(s, &n.rules, err, sizeof err);
  if (rc == 0) reg_set_network(in->id, n.internet, n.reported);
  else sd_reply_error(u->r, 500, "cannot change the sandbox's network: %s", err);
  net_opts_free(&n);
  return rc == 0 ? 0 : -3;
}

static void set_network(sd_request *r, const char *id) {
  net_update u = {r, api_body_object(r, true)};
  if (!u.body) return;
  switch (reg_with_running(id, apply_network, &u)) {
  case 0: log_event(id, SBXLOG_INFO, "network rules replaced", NULL, NULL); sd_reply_bytes(r, 204, NULL, NULL, 0); break;
  case -1: sd_reply_error(r, 404, "sandbox '%s' not found", id); break;
  case -2: sd_reply_error(r, 409, "sandbox '%s' is paused: resume it to change its network", id); break;
  default: break;                        /* replied */
  }
  json_decref(u.body);
}

static void get_sandbox(sd_request *r, const char *id) {
  reg_info in = {0};
  /* A sandbox being killed is gone for a client that asks about it (as after E2B's DELETE): a
   * request that failed because of the kill learns so at once, not after the clean-up. */
  if (reg_lookup_info(id, &in) != 0 || in.dying) {
    if (in.dying) reg_info_free(&in);
    sd_reply_error(r, 404, "sandbox '%s' not found", id);
    return;
  }
  sd_reply_json(r, 200, detail_json(&in));
  reg_info_free(&in);
}

static void set_timeout(sd_request *r, const char *id) {
  json_t *body = api_body_object(r, false);
  if (!body) return;
  int64_t t;
  if (!json_object_get(body, "timeout")) sd_reply_error(r, 400, "field 'timeout' is required");
  else if (api_timeout(r, body, 0, &t) == 0) {
    if (reg_set_timeout(id, t) != 0) sd_reply_error(r, 404, "sandbox '%s' not found", id);
    else {
      char secs[32];
      snprintf(secs, sizeof secs, "%lld", (long long)t);
      log_event(id, SBXLOG_INFO, "timeout set", "seconds", secs);
      sd_reply_bytes(r, 204, NULL, NULL, 0);
    }
  }
  json_decref(body);
}

/* `memory` (connect, pause: the current SDK): a freezer pause always keeps the memory, so only
 * true (or absent) can be honoured. */
static int memory_field(sd_request *r, json_t *body, const char *what) {
  json_t *m = json_object_get(body, "memory");
  if (!m || json_is_null(m) || json_is_true(m)) return 0;
  if (!json_is_boolean(m)) sd_reply_error(r, 400, "field 'memory' must be a boolean");
  else sd_reply_error(r, 400, "field 'memory': false (%s) is not supported by sandboxd: a paused sandbox keeps its memory", what);
  return -1;
}

static void connect_sandbox(sd_request *r, const char *id) {
  json_t *body = api_body_object(r, true);
  if (!body) return;
  int64_t t;
  static const char *const fields[] = {"timeout", "memory", NULL};
  if (api_only_fields(r, body, fields) == 0 && memory_field(r, body, "resume by rebooting from the file system, onResume: 'reboot'") == 0 &&
      api_timeout(r, body, 300, &t) == 0) {
    bool resumed;
    reg_info in;
    int rc = reg_connect(id, t, &resumed, &in);
    if (rc == -1) sd_reply_error(r, 404, "sandbox '%s' not found", id);
    else {
      if (rc == -2) {
        log_event(id, SBXLOG_ERROR, "resume failed", NULL, NULL);
        sd_reply_error(r, 500, "sandbox '%s' could not be resumed", id);
      } else {
        if (resumed) {
          char secs[32];
          snprintf(secs, sizeof secs, "%lld", (long long)t);
          log_event(id, SBXLOG_INFO, "sandbox resumed", "seconds", secs);
        }
        sd_reply_json(r, resumed ? 201 : 200, control_sandbox_json(&in));
      }
      reg_info_free(&in);
    }
  }
  json_decref(body);
}

static void pause_sandbox(sd_request *r, const char *id) {
  json_t *body = api_body_object(r, true);
  if (!body) return;
  static const char *const fields[] = {"memory", NULL};
  int bad = api_only_fields(r, body, fields) || memory_field(r, body, "a filesystem-only pause, keepMemory: false");
  json_decref(body);
  if (bad) return;
  switch (reg_pause(id)) {
  case 0: log_event(id, SBXLOG_INFO, "sandbox paused", NULL, NULL); sd_reply_bytes(r, 204, NULL, NULL, 0); break;
  case -1: sd_reply_error(r, 404, "sandbox '%s' not found", id); break;
  case -2: sd_reply_error(r, 409, "sandbox '%s' is already paused", id); break;
  default: sd_reply_error(r, 500, "sandbox '%s' could not be paused (no freezer on this host?)", id); break;
  }
}

/* %XX decoding (and '+' as space when form is set); -1 on a malformed escape. */
static int pct_decode(char *s, bool form) {
  char *w = s;
  for (char *p = s; *p; p++) {
    if (*p == '%') {
      if (!isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2])) return -1;
      char hex[3] = { p[1], p[2], 0 };
      *w++ = (char)strtol(hex, NULL, 16);
      p += 2;
    } else {
      *w++ = form && *p == '+' ? ' ' : *p;
    }
  }
  *w = '\0';
  return 0;
}

/* metadata filter: after the server's own decoding the value is "k=v&k2=v2" with each key and value
 * still encoded twice (reference §2.6). */
static json_t *parse_metadata_filter(sd_request *r, const char *q) {
  json_t *m = json_object();
  char *copy = strdup(q);
  if (!m || !copy) { json_decref(m); free(copy); sd_reply_error(r, 500, "out of memory"); return NULL; }
  char *save = NULL;
  for (char *pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
    char *eq = strchr(pair, '=');
    char *val = eq ? eq + 1 : pair + strlen(pair);   /* "" inside the writable copy */
    if (eq) *eq = '\0';
    if (pct_decode(pair, true) || pct_decode(pair, false) || pct_decode(val, true) || pct_decode(val, false) || !pair[0]) {
      sd_reply_error(r, 400, "query parameter 'metadata' is malformed: expected url-encoded key=value pairs");
      json_decref(m); free(copy);
      return NULL;
    }
    json_t *sv = json_string(val);
    if (!sv || json_object_set_new(m, pair, sv) != 0) {   /* set_new takes sv even on failure */
      sd_reply_error(r, 400, "query parameter 'metadata' is not valid UTF-8");
      json_decref(m); free(copy);
      return NULL;
    }
  }
  free(copy);
  return m;
}

/* RFC 3339 (what JavaScript's toISOString gives: 2026-12-01T17:05:39.123Z, or an offset) → ms
 * since the epoch; -1 when malformed. */
static int64_t parse_rfc3339(const char *s) {
  int y, mo, d, h, mi, sec, n = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 || n != 19) return -1;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return -1;
  const char *p = s + n;
  int64_t ms = 0;
  if (*p == '.') {
    int digits = 0;
    for (p++; *p >= '0' && *p <= '9'; p++, digits++)
      if (digits < 3) ms = ms * 10 + (*p - '0');
    if (!digits) return -1;
    for (; digits < 3; digits++) ms *= 10;
  }
  int64_t off = 0;
  if (*p == 'Z' || *p == 'z') p++;
  else if (*p == '+' || *p == '-') {
    int oh, om, k = 0;
    if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5 || oh > 23 || om > 59) return -1;
    off = (int64_t)(oh * 60 + om) * 60000 * (*p == '+' ? 1 : -1);
    p += 6;
  } else return -1;
  if (*p) return -1;
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = sec};
  time_t t = timegm(&tm);
  if (t == (time_t)-1) return -1;
  return (int64_t)t * 1000 + ms - off;
}

/* ?start= / ?end=: unix seconds; -1 after replying 400. */
static int query_seconds(sd_request *r, const char *name, int64_t dflt_ms, int64_t *out_ms) {
  const char *v = sd_query(r, name);
  *out_ms = dflt_ms;
  if (!v) return 0;
  char *end;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || x < 0 || x > 100000000000LL) {
    sd_reply_error(r, 400, "query parameter '%s' must be a Unix time in seconds (got '%.40s')", name, v);
    return -1;
  }
  *out_ms = (int64_t)x * 1000;
  return 0;
}

/* GET /sandboxes/{id}/metrics ?start= &end= (sandbox.h: a sample per request, at most one a second). */
static void sandbox_metrics(sd_request *r, const char *id) {
  static const char *const known[] = {"start", "end", NULL};
  if (api_query_only(r, known)) return;
  int64_t from, to;
  if (query_seconds(r, "start", 0, &from) || query_seconds(r, "end", INT64_MAX, &to)) return;
  if (to != INT64_MAX) to += 999;   /* the whole second named */
  reg_entry *e = reg_get(id);
  if (!e) { sd_reply_error(r, 404, "sandbox '%s' not found", id); return; }
  sbx_metric *v;
  size_t n;
  int rc = sbx_metrics(reg_sbx(e), from, to, &v, &n);
  reg_put(e);
  if (rc != 0) { sd_reply_error(r, 500, "out of memory"); return; }
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(out, json_pack("{s:o,s:I,s:i,s:f,s:I,s:I,s:I,s:I,s:I}", "timestamp", control_rfc3339(v[i].ts_ms), "timestampUnix",
                                         (json_int_t)(v[i].ts_ms / 1000), "cpuCount", v[i].cpu_count, "cpuUsedPct", v[i].cpu_pct,
                                         "memUsed", (json_int_t)v[i].mem_used, "memTotal", (json_int_t)v[i].mem_total, "memCache",
                                         (json_int_t)v[i].mem_cache, "diskUsed", (json_int_t)v[i].disk_used, "diskTotal",
                                         (json_int_t)v[i].disk_total));
  free(v);
  sd_reply_json(r, 200, out);
}

/* ?name=: a whole number from 0 to max; -1 after replying 400. */
static int query_whole(sd_request *r, const char *name, int64_t dflt, int64_t max, int64_t *out) {
  const char *v = sd_query(r, name);
  *out = dflt;
  if (!v) return 0;
  char *end;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || x < 0 || x > max) {
    sd_reply_error(r, 400, "query parameter '%s' must be a whole number from 0 to %lld (got '%.40s')", name, (long long)max, v);
    return -1;
  }
  *out = x;
  return 0;
}

typedef struct { json_t *entries, *lines; } logs_out;
static void log_entry_json(void *cls, const sbxlog_entry *e) {
  logs_out *o = cls;
  json_t *fields = json_object();
  char line[SBXLOG_MSG_MAX + SBXLOG_FIELDS * (SBXLOG_VALUE_MAX + 40)];
  size_t n = (size_t)snprintf(line, sizeof line, "%s", e->msg);
  for (size_t i = 0; i < e->nfields; i++) {
    json_object_set_new(fields, e->key[i], json_string(e->value[i]));
    if (n < sizeof line) n += (size_t)snprintf(line + n, sizeof line - n, " %s=%s", e->key[i], e->value[i]);
  }
  json_array_append_new(o->entries, json_pack("{s:o,s:s,s:s,s:o}", "timestamp", control_rfc3339(e->ts_ms), "message", e->msg,
                                              "level", sbxlog_level_name(e->level), "fields", fields));
  if (o->lines) json_array_append_new(o->lines, json_pack("{s:o,s:s}", "timestamp", control_rfc3339(e->ts_ms), "line", line));
}

/* GET /sandboxes/{id}/logs ?start= &limit= (E2B's v1: logs as lines and as entries) and
 * GET /v2/sandboxes/{id}/logs ?cursor= &limit= &direction= (entries). Times are Unix ms. */
static void sandbox_logs(sd_request *r, const char *id, bool v2) {
  static const char *const v1_known[] = {"start", "limit", NULL}, *const v2_known[] = {"cursor", "limit", "direction", NULL};
  if (api_query_only(r, v2 ? v2_known : v1_known)) return;
  const char *dir = v2 ? sd_query(r, "direction") : NULL;
  if (dir && strcmp(dir, "forward") && strcmp(dir, "backward")) {
    sd_reply_error(r, 400, "query parameter 'direction' must be 'forward' or 'backward' (got '%.40s')", dir);
    return;
  }
  bool backward = dir && !strcmp(dir, "backward");
  int64_t from, limit;
  if (query_whole(r, v2 ? "cursor" : "start", backward ? INT64_MAX : 0, INT64_MAX, &from) ||
      query_whole(r, "limit", 1000, SBXLOG_MAX, &limit))
    return;
  reg_entry *e = reg_get(id);
  sbx_t *s = e ? reg_sbx(e) : NULL;
  if (!s) { if (e) reg_put(e); sd_reply_error(r, 404, "sandbox '%s' not found", id); return; }
  logs_out o = {json_array(), v2 ? NULL : json_array()};
  sbxlog_each(sbx_log(s), from, backward, (size_t)limit, log_entry_json, &o);
  reg_put(e);
  if (v2) sd_reply_json(r, 200, json_pack("{s:o}", "logs", o.entries));
  else sd_reply_json(r, 200, json_pack("{s:o,s:o}", "logs", o.lines, "logEntries", o.entries));
}

static void list_sandboxes(sd_request *r) {
  static const char *const known[] = {"state", "limit", "nextToken", "metadata", "startedAfter", "template", "order", NULL};
  if (api_query_only(r, known)) return;
  bool want_running = true, want_paused = true;
  const char *state = sd_query(r, "state");
  if (state && *state) {
    want_running = want_paused = false;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", state);
    char *save = NULL;
    for (char *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
      if (!strcmp(s, "running")) want_running = true;
      else if (!strcmp(s, "paused")) want_paused = true;
      else { sd_reply_error(r, 400, "query parameter 'state': '%s' is not one of running, paused", s); return; }
    }
  }
  long limit = 100;
  const char *ls = sd_query(r, "limit");
  if (ls) {
    char *end;
    limit = strtol(ls, &end, 10);
    if (!*ls || *end || limit < 1 || limit > 100) {
      sd_reply_error(r, 400, "query parameter 'limit' must be an integer between 1 and 100");
      return;
    }
  }
  bool asc = false;   /* newest first, by default */
  const char *ord = sd_query(r, "order");
  if (ord && *ord) {
    if (!strcmp(ord, "asc")) asc = true;
    else if (strcmp(ord, "desc") != 0) { sd_reply_error(r, 400, "query parameter 'order': '%s' is not one of asc, desc", ord); return; }
  }
  /* The token is the creation number of the last sandbox listed: the next page starts after it. */
  uint64_t token = 0;
  const char *nt = sd_query(r, "nextToken");
  if (nt && *nt) {
    char *end;
    token = strtoull(nt, &end, 10);
    if (*end || token == 0) { sd_reply_error(r, 400, "query parameter 'nextToken' is not a token sandboxd issued"); return; }
  }
  int64_t after_ms = INT64_MIN;
  const char *sa = sd_query(r, "startedAfter");
  if (sa && *sa && (after_ms = parse_rfc3339(sa)) < 0) {
    sd_reply_error(r, 400, "query parameter 'startedAfter': '%s' is not an RFC 3339 time (e.g. 2026-01-02T03:04:05Z)", sa);
    return;
  }
  const char *tq = sd_query(r, "template");   /* an id or alias, as the listing reports them */
  json_t *filter = NULL;
  const char *mq = sd_query(r, "metadata");
  if (mq && *mq && !(filter = parse_metadata_filter(r, mq))) return;

  size_t n;
  reg_info *all = reg_list(&n);
  json_t *out = json_array();
  uint64_t last = 0;
  bool more = false;
  for (size_t j = 0; j < n; j++) {   /* reg_list is newest first */
    reg_info *in = &all[asc ? n - 1 - j : j];
    if (tq && *tq && strcmp(tq, in->template_id) != 0 && strcmp(tq, in->template_alias) != 0) continue;
    if (token && (asc ? in->seq <= token : in->seq >= token)) continue;
    if (in->paused ? !want_paused : !want_running) continue;
    if (in->started_ms <= after_ms) continue;
    if (filter) {
      const char *k;
      json_t *v;
      bool ok = true;
      json_object_foreach(filter, k, v) {
        json_t *have = json_object_get(in->metadata, k);
        if (!have || !json_equal(have, v)) { ok = false; break; }
      }
      if (!ok) continue;
    }
    if ((long)json_array_size(out) == limit) { more = true; break; }
    json_array_append_new(out, listed_json(in));
    last = in->seq;
  }
  reg_list_free(all, n);
  json_decref(filter);
  if (more) {
    char tok[32];
    snprintf(tok, sizeof tok, "%" PRIu64, last);
    sd_reply_header(r, "X-Next-Token", tok);
  }
  sd_reply_json(r, 200, out);
}

void control_handle(sd_request *r, const rt_decision *d) {
  const char *id = d->id;
  switch (d->route) {
    case RT_CREATE: create_sandbox(r, false); break;
    case RT_CREATE_V2: create_sandbox(r, true); break;
    case RT_LIST: list_sandboxes(r); break;
    case RT_GET: get_sandbox(r, id); break;
    case RT_KILL:
      if (reg_kill(id) == 0) sd_reply_bytes(r, 204, NULL, NULL, 0);
      else sd_reply_error(r, 404, "sandbox '%s' not found", id);
      break;
    case RT_TIMEOUT: set_timeout(r, id); break;
    case RT_CONNECT: connect_sandbox(r, id); break;
    case RT_PAUSE: pause_sandbox(r, id); break;
    case RT_METRICS: sandbox_metrics(r, id); break;
    case RT_LOGS: sandbox_logs(r, id, false); break;
    case RT_LOGS_V2: sandbox_logs(r, id, true); break;
    case RT_NETWORK: set_network(r, id); break;
    case RT_UNIMPLEMENTED: sd_reply_error(r, 501, "%s", d->message ? d->message : "not implemented by sandboxd"); break;
    case RT_HEALTH: sd_reply_json(r, 200, json_pack("{s:s}", "message", "Health check successful")); break;
    default: sd_reply_error(r, 500, "internal error: route %d is not the control plane's", (int)d->route); break;
  }
}
