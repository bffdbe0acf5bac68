/* process_rpc.c — envd's process.Process service (wire reference §5.3) over a sandbox's process
 * table (ptab.h): Start and Connect stream a process's events, List, SendInput, CloseStdin,
 * SendSignal and Update are unary. */
#include "process_rpc.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "b64.h"
#include "errors.h"
#include "ptab.h"
#include "rpc.h"
#include "sandbox.h"
#include "users.h"

#define PR_DEFAULT_KEEPALIVE_S 90
#define PR_CLOSED_CHECK_MS 1000   /* how often an idle stream notices its client left */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* protobuf JSON: the camelCase name, or the proto name; null is absent. */
static json_t *getk(json_t *o, const char *camel, const char *snake) {
  json_t *v = json_object_get(o, camel);
  if (!v && snake) v = json_object_get(o, snake);
  return json_is_null(v) ? NULL : v;
}

/* uint32 as protobuf JSON allows it: a number or a numeric string. */
static int get_u32(json_t *v, uint32_t *out) {
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > UINT32_MAX) return -1;
    *out = (uint32_t)x;
    return 0;
  }
  if (json_is_string(v)) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(json_string_value(v), &end, 10);
    if (errno || *end || end == json_string_value(v) || x > UINT32_MAX) return -1;
    *out = (uint32_t)x;
    return 0;
  }
  return -1;
}

/* ProcessSelector: {"pid": N} or {"tag": "..."}; -1 with err when malformed. */
static int get_selector(json_t *req, ptab_sel *sel, char *err, size_t errlen) {
  json_t *s = getk(req, "process", NULL);
  if (!json_is_object(s)) { snprintf(err, errlen, "process selector is required"); return -1; }
  json_t *pid = getk(s, "pid", NULL), *tag = getk(s, "tag", NULL);
  memset(sel, 0, sizeof *sel);
  if (pid) {
    if (get_u32(pid, &sel->pid) != 0) { snprintf(err, errlen, "invalid pid"); return -1; }
    sel->by_pid = true;
    return 0;
  }
  if (json_is_string(tag)) { sel->tag = json_string_value(tag); return 0; }
  snprintf(err, errlen, "process selector needs a pid or a tag");
  return -1;
}

/* A pty size {cols, rows}: absent fields are 0; -1 when malformed. */
static int get_size(json_t *size, uint16_t *rows, uint16_t *cols) {
  uint32_t c = 0, r = 0;
  json_t *cj = getk(size, "cols", NULL), *rj = getk(size, "rows", NULL);
  if ((cj && get_u32(cj, &c) != 0) || (rj && get_u32(rj, &r) != 0)) return -1;
  *cols = (uint16_t)(c > 65535 ? 65535 : c);
  *rows = (uint16_t)(r > 65535 ? 65535 : r);
  return 0;
}

/* envd's ExpandAndResolve: "~" and relative paths are relative to home; the result is clean. */
static int resolve_cwd(const char *cwd, const char *home, char *out, size_t cap) {
  char tmp[8192];
  if (!cwd || !*cwd) snprintf(tmp, sizeof tmp, "%s", home);
  else if (cwd[0] == '~' && (cwd[1] == 0 || cwd[1] == '/')) snprintf(tmp, sizeof tmp, "%s%s", home, cwd + 1);
  else if (cwd[0] != '/') snprintf(tmp, sizeof tmp, "%s/%s", home, cwd);
  else snprintf(tmp, sizeof tmp, "%s", cwd);
  if (strlen(tmp) >= cap - 1) return -1;
  size_t o = 0;
  out[o++] = '/';
  for (char *save = NULL, *seg = strtok_r(tmp, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
    if (!strcmp(seg, ".")) continue;
    if (!strcmp(seg, "..")) {
      while (o > 1 && out[o - 1] != '/') o--;
      if (o > 1) o--;
      continue;
    }
    if (o > 1) out[o++] = '/';
    size_t l = strlen(seg);
    memcpy(out + o, seg, l);
    o += l;
  }
  out[o] = 0;
  return 0;
}

static json_t *event_json(const ptab_ev *e) {
  json_t *inner = NULL;
  if (e->kind == PTAB_START) {
    inner = json_pack("{s:{s:I}}", "start", "pid", (json_int_t)e->pid);
  } else if (e->kind == PTAB_DATA) {
    char *b = malloc(mb_b64_encoded_len(e->len) + 1);
    if (!b) return NULL;
    mb_b64_encode(e->data, e->len, b);
    inner = json_pack("{s:{s:s}}", "data", e->stream == PTAB_PTY ? "pty" : e->stream == PTAB_STDERR ? "stderr" : "stdout", b);
    free(b);
  } else if (e->kind == PTAB_END) {
    char st[96];
    ptab_status_string(e->status, st, sizeof st);
    json_t *end = json_object();
    bool exited = WIFEXITED(e->status);
    int code = exited ? WEXITSTATUS(e->status) : -1;
    if (code) json_object_set_new(end, "exitCode", json_integer(code));
    if (exited) json_object_set_new(end, "exited", json_true());
    json_object_set_new(end, "status", json_string(st));
    if (code) json_object_set_new(end, "error", json_string(st));
    inner = json_pack("{s:o}", "end", end);
  }
  return inner ? json_pack("{s:o}", "event", inner) : NULL;
}

/* Serves one subscription until its end (deadline: the process's own lifetime, which the table
 * enforces too; keepalives once START went out); consumes sb. */
static void serve(sd_request *r, sd_stream *st, ptab_sub *sb) {
  int64_t lifetime = rpc_header_int(r, "Connect-Timeout-Ms", 0, (int64_t)1 << 40);
  int64_t deadline = lifetime ? now_ms() + lifetime : 0;
  int64_t ka = rpc_header_int(r, "Keepalive-Ping-Interval", PR_DEFAULT_KEEPALIVE_S, 3600);
  int64_t keep_ms = (ka < 1 ? 1 : ka) * 1000, last = now_ms();
  bool started = false;
  for (;;) {
    int64_t now = now_ms(), wait = PR_CLOSED_CHECK_MS;
    if (started && last + keep_ms - now < wait) wait = last + keep_ms - now;
    if (deadline && deadline - now < wait) wait = deadline - now;
    ptab_ev *e = ptab_next(sb, wait > 0 ? wait : 0);
    now = now_ms();
    int rc = 0;
    if (!e) {
      if (deadline && now >= deadline) { rpc_end(st, "deadline_exceeded", "the operation timed out"); break; }
      if (sd_stream_closed(st)) { sd_stream_end(st); break; }   /* the client is gone: the process goes on */
      if (!started || now - last < keep_ms) continue;
      rc = rpc_send(st, json_pack("{s:{s:{}}}", "event", "keepalive"));
    } else if (e->kind == PTAB_ERROR) {
      rpc_end(st, e->code, e->data);
      free(e);
      break;
    } else {
      int kind = e->kind;
      if (kind == PTAB_START) started = true;
      rc = rpc_send(st, event_json(e));
      free(e);
      if (rc == 0 && kind == PTAB_END) { rpc_end(st, NULL, NULL); break; }
    }
    if (rc != 0) { sd_stream_end(st); break; }   /* client gone: the process keeps running */
    last = now_ms();
  }
  ptab_unsubscribe(sb);
}

static void rpc_start(sd_request *r, const rt_decision *d, sbx_t *sx, ptab *t) {
  char err[512] = "";
  const char *code = "invalid_argument";
  json_t *req = rpc_request(r);
  if (!req) return;
  const char **args = NULL, **envs = NULL;
  char **envbuf = NULL;
  size_t nargs = 0, nenvs = 0;
  json_t *config = NULL;
  ptab_sub *sb = NULL;
  json_t *proc_j = getk(req, "process", NULL);
  json_t *cmd = proc_j ? getk(proc_j, "cmd", NULL) : NULL;
  if (!json_is_object(proc_j) || !json_is_string(cmd) || !json_string_value(cmd)[0]) {
    snprintf(err, sizeof err, "process.cmd is required");
    goto fail;
  }
  json_t *args_j = getk(proc_j, "args", NULL), *envs_j = getk(proc_j, "envs", NULL), *cwd_j = getk(proc_j, "cwd", NULL);
  json_t *pty = getk(req, "pty", NULL), *tag = getk(req, "tag", NULL), *stdin_j = getk(req, "stdin", NULL);
  if ((args_j && !json_is_array(args_j)) || (envs_j && !json_is_object(envs_j)) || (cwd_j && !json_is_string(cwd_j)) ||
      (tag && !json_is_string(tag)) || (stdin_j && !json_is_boolean(stdin_j)) || (pty && !json_is_object(pty))) {
    snprintf(err, sizeof err, "malformed StartRequest");
    goto fail;
  }
  if (d->user_error) { code = "unauthenticated"; snprintf(err, sizeof err, "invalid Authorization header: %s", d->user_error); goto fail; }
  if (d->user_unknown) { code = "unauthenticated"; snprintf(err, sizeof err, "invalid username: '%s'", d->user); goto fail; }
  ptab_spawn sp = {0};
  if (users_lookup(d->user, &sp.uid, &sp.gid, &sp.home) != 0) { code = "unauthenticated"; snprintf(err, sizeof err, "invalid username: '%s'", d->user); goto fail; }
  sp.user = sp.uid == 0 ? "root" : "user";
  /* Unprivileged sandboxd maps a single id: every command runs as root inside (which is the
   * sandboxd user outside, exactly what `user` would be), with the user's home and name. */
  if (sbx_host_uid(sx, sp.uid) == (uid_t)-1) sp.uid = sp.gid = 0;
  char cwd[4096];
  if (resolve_cwd(cwd_j ? json_string_value(cwd_j) : NULL, sp.home, cwd, sizeof cwd) != 0) {
    snprintf(err, sizeof err, "cwd too long");
    goto fail;
  }
  sp.cwd = cwd;
  sp.cmd = json_string_value(cmd);
  if (pty) {
    sp.pty = true;
    json_t *size = getk(pty, "size", NULL);
    if (size && get_size(size, &sp.rows, &sp.cols) != 0) { snprintf(err, sizeof err, "invalid pty size"); goto fail; }
  } else {
    sp.stdin_pipe = !stdin_j || json_is_true(stdin_j);   /* absent means a pipe (older clients) */
  }
  nargs = args_j ? json_array_size(args_j) : 0;
  nenvs = envs_j ? json_object_size(envs_j) : 0;
  if (nargs > PTAB_MAX_ARGS || nenvs > PTAB_MAX_ENVS) { snprintf(err, sizeof err, "too many arguments or envs"); goto fail; }
  args = calloc(nargs + 1, sizeof *args);
  envs = calloc(nenvs + 1, sizeof *envs);
  envbuf = calloc(nenvs + 1, sizeof *envbuf);
  if (!args || !envs || !envbuf) { code = "internal"; snprintf(err, sizeof err, "out of memory"); goto fail; }
  for (size_t i = 0; i < nargs; i++) {
    json_t *a = json_array_get(args_j, i);
    if (!json_is_string(a)) { snprintf(err, sizeof err, "process.args must be strings"); goto fail; }
    args[i] = json_string_value(a);
  }
  const char *k;
  json_t *v;
  size_t ne = 0;
  json_object_foreach(envs_j, k, v) {
    if (!json_is_string(v) || !*k || strchr(k, '=')) { snprintf(err, sizeof err, "invalid env %.100s", k); goto fail; }
    size_t l = strlen(k) + json_string_length(v) + 2;
    if (!(envbuf[ne] = malloc(l))) { code = "internal"; snprintf(err, sizeof err, "out of memory"); goto fail; }
    snprintf(envbuf[ne], l, "%s=%s", k, json_string_value(v));
    envs[ne] = envbuf[ne];
    ne++;
  }
  sp.args = args;
  sp.nargs = nargs;
  sp.envs = envs;
  sp.nenvs = ne;
  sp.tag = tag ? json_string_value(tag) : NULL;
  sp.lifetime_ms = rpc_header_int(r, "Connect-Timeout-Ms", 0, (int64_t)1 << 40);
  config = json_object();
  json_object_set(config, "cmd", cmd);
  json_object_set_new(config, "args", args_j ? json_deep_copy(args_j) : json_array());
  json_object_set_new(config, "envs", envs_j ? json_deep_copy(envs_j) : json_object());
  if (cwd_j) json_object_set(config, "cwd", cwd_j);
  sp.config = config;
  sd_stream *st = rpc_stream_open(r);
  if (!st) goto out;
  sb = ptab_start(t, &sp, &code, err, sizeof err);
  if (!sb) rpc_end(st, code, err);
  else serve(r, st, sb);
  goto out;
fail:
  rpc_reply_error(r, code, "%s", err);
out:
  for (size_t i = 0; envbuf && i < nenvs; i++) free(envbuf[i]);
  free(envbuf);
  free(envs);
  free(args);
  json_decref(config);
  json_decref(req);
}

static void rpc_connect(sd_request *r, ptab *t) {
  json_t *req = rpc_request(r);
  if (!req) return;
  char err[512];
  const char *code = "invalid_argument";
  ptab_sel sel;
  ptab_sub *sb = get_selector(req, &sel, err, sizeof err) == 0 ? ptab_attach(t, &sel, &code, err, sizeof err) : NULL;
  if (!sb) { rpc_reply_error(r, code, "%s", err); json_decref(req); return; }
  json_decref(req);
  sd_stream *st = rpc_stream_open(r);
  if (!st) { ptab_unsubscribe(sb); return; }
  serve(r, st, sb);
}

static void rpc_list(sd_request *r, ptab *t) {
  size_t n;
  ptab_info *v = ptab_list(t, &n);
  json_t *list = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_pack("{s:O,s:I}", "config", v[i].config, "pid", (json_int_t)v[i].pid);
    if (o && v[i].tag) json_object_set_new(o, "tag", json_string(v[i].tag));
    if (o) json_array_append_new(list, o);
  }
  ptab_list_free(v, n);
  sd_reply_json(r, 200, json_pack("{s:o}", "processes", list));
}

static void rpc_unary(sd_request *r, ptab *t, const char *method) {
  json_t *req = rpc_request(r);
  if (!req) return;
  if (!strcmp(method, "List")) { json_decref(req); rpc_list(r, t); return; }
  char err[512];
  const char *code = NULL;
  ptab_sel sel;
  if (get_selector(req, &sel, err, sizeof err) != 0) code = "invalid_argument";
  else if (!strcmp(method, "SendInput")) {
    json_t *in = getk(req, "input", NULL);
    json_t *sin = in ? getk(in, "stdin", NULL) : NULL, *spty = in ? getk(in, "pty", NULL) : NULL;
    json_t *data = json_is_string(sin) ? sin : spty;
    if (!json_is_string(data)) { code = "invalid_argument"; snprintf(err, sizeof err, "input.stdin or input.pty is required"); }
    else {
      /* protobuf JSON bytes: standard or URL-safe base64, padded or not (OpenSSL, core/b64.c). */
      size_t cap = mb_b64_decoded_max(json_string_length(data)), n = 0;
      unsigned char *bytes = malloc(cap ? cap : 1);
      const char *why = NULL;
      if (!bytes) { code = "internal"; snprintf(err, sizeof err, "out of memory"); }
      else if (mb_b64_decode_tolerant(json_string_value(data), json_string_length(data), bytes, cap, &n, &why) != MB_OK) {
        code = "invalid_argument";
        snprintf(err, sizeof err, "input is not valid base64: %s", why ? why : "malformed");
      } else {
        code = ptab_input(t, &sel, data == spty, bytes, n, err, sizeof err);
      }
      free(bytes);
    }
  } else if (!strcmp(method, "CloseStdin")) {
    code = ptab_close_stdin(t, &sel, err, sizeof err);
  } else if (!strcmp(method, "SendSignal")) {
    json_t *sg = getk(req, "signal", NULL);
    int sig = 0;
    if (json_is_string(sg)) {
      const char *s = json_string_value(sg);
      sig = !strcmp(s, "SIGNAL_SIGKILL") ? SIGKILL : !strcmp(s, "SIGNAL_SIGTERM") ? SIGTERM : 0;
    } else if (json_is_integer(sg)) {
      json_int_t x = json_integer_value(sg);
      sig = x == SIGKILL || x == SIGTERM ? (int)x : 0;
    }
    if (!sig) { code = "unimplemented"; snprintf(err, sizeof err, "invalid signal: only SIGNAL_SIGTERM and SIGNAL_SIGKILL are supported"); }
    else code = ptab_signal(t, &sel, sig, err, sizeof err);
  } else if (!strcmp(method, "Update")) {
    json_t *pty = getk(req, "pty", NULL), *size = pty ? getk(pty, "size", NULL) : NULL;
    uint16_t rows = 0, cols = 0;
    if (size && get_size(size, &rows, &cols) != 0) { code = "invalid_argument"; snprintf(err, sizeof err, "invalid pty size"); }
    else code = ptab_resize(t, &sel, size != NULL, rows, cols, err, sizeof err);
  } else {
    code = "unimplemented";
    snprintf(err, sizeof err, "process.Process/%.60s is not implemented", method);
  }
  json_decref(req);
  if (code) rpc_reply_error(r, code, "%s", err);
  else sd_reply_json(r, 200, json_object());
}

void process_rpc(sd_request *r, const rt_decision *d) {
  sbx_t *s = reg_sbx(d->entry);
  ptab *t = sbx_ptab(s);
  const char *m = d->rpc;
  if (strcmp(sd_method(r), "POST") != 0) rpc_reply_error(r, "unimplemented", "RPC methods must be called with POST, not %s", sd_method(r));
  else if (!strcmp(m, "Start")) rpc_start(r, d, s, t);
  else if (!strcmp(m, "Connect")) rpc_connect(r, t);
  else if (!strcmp(m, "StreamInput")) rpc_reply_error(r, "unimplemented", "process.Process/StreamInput (client streaming) is not implemented");
  else if (!strcmp(m, "List") || !strcmp(m, "SendInput") || !strcmp(m, "CloseStdin") || !strcmp(m, "SendSignal") ||
           !strcmp(m, "Update"))
    rpc_unary(r, t, m);
  else rpc_reply_error(r, "unimplemented", "process.Process/%.60s is not implemented", m);
}
