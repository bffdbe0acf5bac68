/* process_rpc.c — envd's process.Process service (wire reference §5.3) over a sandbox's process
 * table (ptab.h): Start and Connect stream a process's events, List, SendInput, CloseStdin,
 * SendSignal and Update are unary. */
#pragma GCC diagnostic ignored "-Wmissing-braces" /* protoc-c's *__INIT macros of oneof unions */
#include "process_rpc.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "b64.h"
#include "clocks.h"
#include "connect.h"
#include "envd/process.pb-c.h"
#include "errors.h"
#include "ptab.h"
#include "rpc.h"
#include "sandbox.h"
#include "users.h"

#define PR_DEFAULT_KEEPALIVE_S 90
#define PR_CLOSED_CHECK_MS 1000   /* how often an idle stream notices its client left */

/* ProcessSelector: {"pid": N} or {"tag": "..."}; -1 with err when malformed. */
static int get_selector(const Process__ProcessSelector *s, ptab_sel *sel, char *err, size_t errlen) {
  memset(sel, 0, sizeof *sel);
  if (!s) { snprintf(err, errlen, "process selector is required"); return -1; }
  if (s->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR_PID) {
    sel->by_pid = true;
    sel->pid = s->pid;
    return 0;
  }
  if (s->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR_TAG && s->tag) { sel->tag = s->tag; return 0; }
  snprintf(err, errlen, "process selector needs a pid or a tag");
  return -1;
}

/* A pty size {cols, rows}: absent fields are 0. */
static void get_size(const Process__PTY__Size *size, uint16_t *rows, uint16_t *cols) {
  uint32_t c = size->has_cols ? size->cols : 0, r = size->has_rows ? size->rows : 0;
  *cols = (uint16_t)(c > 65535 ? 65535 : c);
  *rows = (uint16_t)(r > 65535 ? 65535 : r);
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

/* The data event's JSON codec shape, written around one base64 pass: prefix, base64, suffix. */
static const char *const DATA_PREFIX[] = {
  [PTAB_STDOUT] = "{\"event\":{\"data\":{\"stdout\":\"",
  [PTAB_STDERR] = "{\"event\":{\"data\":{\"stderr\":\"",
  [PTAB_PTY] = "{\"event\":{\"data\":{\"pty\":\"",
};
static const char DATA_SUFFIX[] = "\"}}}";

/* A StartResponse or a ConnectResponse (the same message on the wire and in JSON). */
static void event_response(rpc_stream *rs, Process__ProcessEvent *ev, Process__StartResponse *out) {
  process__start_response__init(out);
  if (rs->out) out->base.descriptor = rs->out;   /* ConnectResponse has StartResponse's layout */
  out->event = ev;
}

/* One output chunk straight into the stream's queue: the bytes as they are (binary codec), or
 * base64 in one pass between a fixed prefix and suffix (JSON): no JSON tree, no extra copy. */
static int send_data(rpc_stream *rs, int stream, const uint8_t *data, size_t len) {
  if (rs->proto) {
    Process__ProcessEvent__DataEvent de = PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
    ProtobufCBinaryData b = {len, (uint8_t *)(uintptr_t)data};
    if (stream == PTAB_PTY) { de.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY; de.pty = b; }
    else if (stream == PTAB_STDERR) { de.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR; de.stderr = b; }
    else { de.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT; de.stdout = b; }
    Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
    ev.data = &de;
    Process__StartResponse sr;
    event_response(rs, &ev, &sr);
    return rpc_send_msg(rs, &sr.base);
  }
  const char *pre = DATA_PREFIX[stream];
  size_t pl = strlen(pre), bl = mb_b64_encoded_len(len), n = pl + bl + sizeof DATA_SUFFIX - 1;
  if (len && !bl) return -1;
  uint8_t *p = rpc_envelope_begin(rs, n + 1);   /* + the NUL the encoder writes */
  if (!p) return -1;
  uint8_t *q = p + MB_ENVELOPE_HDR;
  memcpy(q, pre, pl);
  mb_b64_encode(data, len, (char *)q + pl);
  memcpy(q + pl + bl, DATA_SUFFIX, sizeof DATA_SUFFIX - 1);
  mb_envelope_header(p, 0, n);
  return rpc_envelope_commit(rs, n);
}

static int send_event(rpc_stream *rs, const ptab_ev *e) {
  Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
  Process__ProcessEvent__StartEvent st = PROCESS__PROCESS_EVENT__START_EVENT__INIT;
  Process__ProcessEvent__EndEvent end = PROCESS__PROCESS_EVENT__END_EVENT__INIT;
  Process__ProcessEvent__KeepAlive ka = PROCESS__PROCESS_EVENT__KEEP_ALIVE__INIT;
  char status[96];
  if (!e) {
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_KEEPALIVE;
    ev.keepalive = &ka;
  } else if (e->kind == PTAB_DATA) {
    return send_data(rs, e->stream, (const uint8_t *)e->data, e->len);
  } else if (e->kind == PTAB_START) {
    st.has_pid = 1;
    st.pid = (uint32_t)e->pid;
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_START;
    ev.start = &st;
  } else {
    /* As Go's envd: exitCode only when non-zero (-1 for a signal), exited only when true, error
     * (the status again) only for a failure. */
    ptab_status_string(e->status, status, sizeof status);
    bool exited = WIFEXITED(e->status);
    int code = exited ? WEXITSTATUS(e->status) : -1;
    end.has_exit_code = code != 0;
    end.exit_code = code;
    end.has_exited = exited;
    end.exited = exited;
    end.status = status;
    if (code) end.error = status;
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_END;
    ev.end = &end;
  }
  Process__StartResponse sr;
  event_response(rs, &ev, &sr);
  return rpc_send_msg(rs, &sr.base);
}

/* Serves one subscription until its end (deadline: the process's own lifetime, which the table
 * enforces too; keepalives once START went out); consumes sb. */
static void serve(sd_request *r, rpc_stream *st, ptab_sub *sb) {
  int64_t lifetime = rpc_header_int(r, "Connect-Timeout-Ms", 0, (int64_t)1 << 40);
  int64_t deadline = lifetime ? mono_ms() + lifetime : 0;
  int64_t ka = rpc_header_int(r, "Keepalive-Ping-Interval", PR_DEFAULT_KEEPALIVE_S, 3600);
  int64_t keep_ms = (ka < 1 ? 1 : ka) * 1000, last = mono_ms();
  bool started = false;
  for (;;) {
    int64_t now = mono_ms(), wait = PR_CLOSED_CHECK_MS;
    if (started && last + keep_ms - now < wait) wait = last + keep_ms - now;
    if (deadline && deadline - now < wait) wait = deadline - now;
    ptab_ev *e = ptab_next(sb, wait > 0 ? wait : 0);
    now = mono_ms();
    int rc = 0;
    if (!e) {
      if (deadline && now >= deadline) { rpc_end(st, "deadline_exceeded", "the operation timed out"); break; }
      if (sd_stream_closed(st->s)) { sd_stream_end(st->s); break; }   /* the client is gone: the process goes on */
      if (!started || now - last < keep_ms) continue;
      rc = send_event(st, NULL);
    } else if (e->kind == PTAB_ERROR) {
      rpc_end(st, e->code, e->data);
      ptab_ev_free(sb, e);
      break;
    } else {
      int kind = e->kind;
      if (kind == PTAB_START) started = true;
      rc = send_event(st, e);
      ptab_ev_free(sb, e);
      if (rc == 0 && kind == PTAB_END) { rpc_end(st, NULL, NULL); break; }
    }
    if (rc != 0) { sd_stream_end(st->s); break; }   /* client gone: the process keeps running */
    last = mono_ms();
  }
  ptab_unsubscribe(sb);
}

/* The process's config as List reports it (JSON shape: cmd, args, envs always, cwd if given);
 * NULL when a string is not UTF-8 (protobuf strings must be; the JSON codec's are). */
static json_t *config_json(const Process__ProcessConfig *pc) {
  json_t *args = json_array(), *envs = json_object(), *c = NULL;
  bool ok = args && envs;
  for (size_t i = 0; ok && i < pc->n_args; i++) ok = json_array_append_new(args, json_string(pc->args[i])) == 0;
  for (size_t i = 0; ok && i < pc->n_envs; i++)
    ok = json_object_set_new(envs, pc->envs[i]->key ? pc->envs[i]->key : "",
                             json_string(pc->envs[i]->value ? pc->envs[i]->value : "")) == 0;
  if (ok) c = json_pack("{s:s,s:O,s:O}", "cmd", pc->cmd, "args", args, "envs", envs);
  if (c && pc->cwd && json_object_set_new(c, "cwd", json_string(pc->cwd)) != 0) { json_decref(c); c = NULL; }
  json_decref(args);
  json_decref(envs);
  return c;
}

static void rpc_start(sd_request *r, const rt_decision *d, sbx_t *sx, ptab *t) {
  char err[512] = "";
  const char *code = "invalid_argument";
  struct mb_arena ar;
  const Process__StartRequest *req = (const Process__StartRequest *)rpc_request(r, &process__start_request__descriptor, &ar);
  if (!req) return;
  const char **args = NULL, **envs = NULL;
  char **envbuf = NULL;
  size_t nargs = 0, nenvs = 0;
  json_t *config = NULL;
  ptab_sub *sb = NULL;
  const Process__ProcessConfig *pc = req->process;
  if (!pc || !pc->cmd || !pc->cmd[0]) {
    snprintf(err, sizeof err, "process.cmd is required");
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
  const char *dflt = sbx_workdir(sx);   /* a template's WORKDIR */
  if (resolve_cwd(pc->cwd && *pc->cwd ? pc->cwd : dflt, sp.home, cwd, sizeof cwd) != 0) {
    snprintf(err, sizeof err, "cwd too long");
    goto fail;
  }
  sp.cwd = cwd;
  sp.cmd = pc->cmd;
  if (req->pty) {
    sp.pty = true;
    if (req->pty->size) get_size(req->pty->size, &sp.rows, &sp.cols);
  } else {
    sp.stdin_pipe = !req->has_stdin || req->stdin;   /* absent means a pipe (older clients) */
  }
  nargs = pc->n_args;
  nenvs = pc->n_envs;
  if (nargs > PTAB_MAX_ARGS || nenvs > PTAB_MAX_ENVS) { snprintf(err, sizeof err, "too many arguments or envs"); goto fail; }
  args = calloc(nargs + 1, sizeof *args);
  envs = calloc(nenvs + 1, sizeof *envs);
  envbuf = calloc(nenvs + 1, sizeof *envbuf);
  if (!args || !envs || !envbuf) { code = "internal"; snprintf(err, sizeof err, "out of memory"); goto fail; }
  for (size_t i = 0; i < nargs; i++) args[i] = pc->args[i] ? pc->args[i] : "";
  size_t ne = 0;
  for (size_t i = 0; i < nenvs; i++) {
    const char *k = pc->envs[i]->key ? pc->envs[i]->key : "", *v = pc->envs[i]->value ? pc->envs[i]->value : "";
    if (!*k || strchr(k, '=')) { snprintf(err, sizeof err, "invalid env %.100s", k); goto fail; }
    size_t l = strlen(k) + strlen(v) + 2;
    if (!(envbuf[ne] = malloc(l))) { code = "internal"; snprintf(err, sizeof err, "out of memory"); goto fail; }
    snprintf(envbuf[ne], l, "%s=%s", k, v);
    envs[ne] = envbuf[ne];
    ne++;
  }
  sp.args = args;
  sp.nargs = nargs;
  sp.envs = envs;
  sp.nenvs = ne;
  sp.tag = req->tag;
  sp.lifetime_ms = rpc_header_int(r, "Connect-Timeout-Ms", 0, (int64_t)1 << 40);
  if (!(config = config_json(pc))) { snprintf(err, sizeof err, "process config holds a string that is not UTF-8"); goto fail; }
  sp.config = config;
  rpc_stream st;
  if (!rpc_stream_open(r, &process__start_response__descriptor, &st)) goto out;
  sb = ptab_start(t, &sp, &code, err, sizeof err);
  if (!sb) rpc_end(&st, code, err);
  else serve(r, &st, sb);
  goto out;
fail:
  rpc_reply_error(r, code, "%s", err);
out:
  for (size_t i = 0; envbuf && i < nenvs; i++) free(envbuf[i]);
  free(envbuf);
  free(envs);
  free(args);
  json_decref(config);
  mb_arena_free(&ar);
}

static void rpc_connect(sd_request *r, ptab *t) {
  struct mb_arena ar;
  const Process__ConnectRequest *req = (const Process__ConnectRequest *)rpc_request(r, &process__connect_request__descriptor, &ar);
  if (!req) return;
  char err[512];
  const char *code = "invalid_argument";
  ptab_sel sel;
  ptab_sub *sb = get_selector(req->process, &sel, err, sizeof err) == 0 ? ptab_attach(t, &sel, &code, err, sizeof err) : NULL;
  mb_arena_free(&ar);
  if (!sb) { rpc_reply_error(r, code, "%s", err); return; }
  rpc_stream st;
  if (!rpc_stream_open(r, &process__connect_response__descriptor, &st)) { ptab_unsubscribe(sb); return; }
  serve(r, &st, sb);
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
  rpc_reply(r, &process__list_response__descriptor, json_pack("{s:o}", "processes", list));
}

static void rpc_unary(sd_request *r, ptab *t, const char *method) {
  static const struct { const char *name; const ProtobufCMessageDescriptor *in, *out; } M[] = {
    {"List", &process__list_request__descriptor, &process__list_response__descriptor},
    {"SendInput", &process__send_input_request__descriptor, &process__send_input_response__descriptor},
    {"CloseStdin", &process__close_stdin_request__descriptor, &process__close_stdin_response__descriptor},
    {"SendSignal", &process__send_signal_request__descriptor, &process__send_signal_response__descriptor},
    {"Update", &process__update_request__descriptor, &process__update_response__descriptor},
  };
  size_t i = 0;
  while (i < sizeof M / sizeof M[0] && strcmp(M[i].name, method) != 0) i++;
  struct mb_arena ar;
  const ProtobufCMessage *req = rpc_request(r, M[i].in, &ar);
  if (!req) return;
  if (i == 0) { mb_arena_free(&ar); rpc_list(r, t); return; }
  char err[512];
  const char *code = NULL;
  ptab_sel sel;
  const Process__ProcessSelector *ps = i == 1 ? ((const Process__SendInputRequest *)req)->process
                                      : i == 2 ? ((const Process__CloseStdinRequest *)req)->process
                                      : i == 3 ? ((const Process__SendSignalRequest *)req)->process
                                               : ((const Process__UpdateRequest *)req)->process;
  if (get_selector(ps, &sel, err, sizeof err) != 0) code = "invalid_argument";
  else if (i == 1) {
    const Process__ProcessInput *in = ((const Process__SendInputRequest *)req)->input;
    if (!in || (in->input_case != PROCESS__PROCESS_INPUT__INPUT_STDIN && in->input_case != PROCESS__PROCESS_INPUT__INPUT_PTY)) {
      code = "invalid_argument";
      snprintf(err, sizeof err, "input.stdin or input.pty is required");
    } else {
      bool pty = in->input_case == PROCESS__PROCESS_INPUT__INPUT_PTY;
      const ProtobufCBinaryData *b = pty ? &in->pty : &in->stdin;
      code = ptab_input(t, &sel, pty, b->data, b->len, err, sizeof err);
    }
  } else if (i == 2) {
    code = ptab_close_stdin(t, &sel, err, sizeof err);
  } else if (i == 3) {
    const Process__SendSignalRequest *q = (const Process__SendSignalRequest *)req;
    int sig = q->has_signal && q->signal == PROCESS__SIGNAL__SIGNAL_SIGKILL ? SIGKILL
              : q->has_signal && q->signal == PROCESS__SIGNAL__SIGNAL_SIGTERM ? SIGTERM : 0;
    if (!sig) { code = "unimplemented"; snprintf(err, sizeof err, "invalid signal: only SIGNAL_SIGTERM and SIGNAL_SIGKILL are supported"); }
    else code = ptab_signal(t, &sel, sig, err, sizeof err);
  } else {
    const Process__UpdateRequest *q = (const Process__UpdateRequest *)req;
    const Process__PTY__Size *size = q->pty ? q->pty->size : NULL;
    uint16_t rows = 0, cols = 0;
    if (size) get_size(size, &rows, &cols);
    code = ptab_resize(t, &sel, size != NULL, rows, cols, err, sizeof err);
  }
  mb_arena_free(&ar);
  if (code) rpc_reply_error(r, code, "%s", err);
  else rpc_reply(r, M[i].out, json_object());
}

void process_rpc(sd_request *r, const rt_decision *d) {
  sbx_t *s = reg_sbx(d->entry);
  ptab *t = sbx_ptab(s);
  const char *m = d->rpc;
  bool unary = !strcmp(m, "List") || !strcmp(m, "SendInput") || !strcmp(m, "CloseStdin") || !strcmp(m, "SendSignal") ||
               !strcmp(m, "Update");
  bool stream = !strcmp(m, "Start") || !strcmp(m, "Connect");
  if (strcmp(sd_method(r), "POST") != 0) rpc_reply_error(r, "unimplemented", "RPC methods must be called with POST, not %s", sd_method(r));
  else if (!strcmp(m, "StreamInput")) rpc_reply_error(r, "unimplemented", "process.Process/StreamInput (client streaming) is not implemented");
  else if (!unary && !stream) rpc_reply_error(r, "unimplemented", "process.Process/%.60s is not implemented", m);
  else if (!rpc_accept(r, stream)) return;
  else if (!strcmp(m, "Start")) rpc_start(r, d, s, t);
  else if (!strcmp(m, "Connect")) rpc_connect(r, t);
  else rpc_unary(r, t, m);
}
