/* lua_proc.c — host child processes: core.spawn{argv=, env=, cwd=, max_buffer=, inherit_fds=}, on_change
 * → process object (:pid, :read(which), :exit_status, :kill(sig), :close) | nil, err.
 * stdout/stderr are pipes buffered up to max_buffer bytes each; past that, reading stops until
 * Lua drains (backpressure on the child). on_change() fires, outside libuv callbacks' critical
 * sections, whenever output arrives, a pipe ends or the child exits. */
#include "lua_moonbox.h"
#include "moonbox.h"
#include "errors.h"
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define MB_PROC_MT "moonbox.process"

typedef struct lproc lproc;

typedef struct {
  uv_pipe_t pipe;
  lproc *owner;   /* NULL once the Lua object is gone */
  char *buf;
  size_t len, cap, max;
  int eof, reading, open;
  char scratch[16384];
} lpipe;

struct lproc {
  mb_pending pend;
  mb_lua_host *h;
  uv_process_t *proc;
  lpipe *out[2];  /* stdout, stderr */
  int cb_ref;
  int pid;
  int exited;
  int64_t exit_code;
  int term_signal;
};

static void notify(lproc *p) { mb_loop_defer(mb_lua_host_loop(p->h), &p->pend); }

static void fire(mb_pending *pd) {
  lproc *p = (lproc *)pd;
  mb_lua_host_call(p->h, p->cb_ref);
}

static void free_handle(uv_handle_t *h) { free(h); }

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)hint;
  lpipe *pp = (lpipe *)h;
  *b = uv_buf_init(pp->scratch, sizeof pp->scratch);
}

static void pipe_close(lpipe *pp) {
  if (!pp || !pp->open) return;
  pp->open = 0;
  uv_close((uv_handle_t *)&pp->pipe, free_handle);
}

static void pipe_pause(lpipe *pp) {
  uv_read_stop((uv_stream_t *)&pp->pipe);
  pp->reading = 0;
}

/* Room for n more bytes in pp->buf; 0 when out of memory. */
static int pipe_reserve(lpipe *pp, size_t n) {
  if (pp->len + n <= pp->cap) return 1;
  size_t want = pp->cap ? pp->cap * 2 : 16384;
  while (want < pp->len + n) want *= 2;
  char *nb = realloc(pp->buf, want);
  if (!nb) return 0;
  pp->buf = nb;
  pp->cap = want;
  return 1;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  (void)b;
  lpipe *pp = (lpipe *)s;
  if (n == 0) return;
  /* EOF or error, or no memory (keep what we have): the stream is over either way. */
  if (n < 0 || !pipe_reserve(pp, (size_t)n)) {
    pp->eof = 1;
    pipe_pause(pp);
  } else {
    memcpy(pp->buf + pp->len, pp->scratch, (size_t)n);
    pp->len += (size_t)n;
    if (pp->len >= pp->max) pipe_pause(pp); /* backpressure until Lua drains */
  }
  if (pp->owner) notify(pp->owner);
}

static void on_proc_exit(uv_process_t *pr, int64_t status, int sig) {
  lproc *p = pr->data;
  uv_close((uv_handle_t *)pr, free_handle);
  if (!p) return;
  p->proc = NULL;
  p->exited = 1;
  p->exit_code = status;
  p->term_signal = sig;
  notify(p);
}

static lproc *check_proc(lua_State *L) { return luaL_checkudata(L, 1, MB_PROC_MT); }

/* A host process that could not start is SPAWN_FAILED; any other failed call on it, MB_IO. */
static int push_err(lua_State *L, int code, int uverr, const char *what) {
  return mb_lua_push_error(L, mb_code_name(code), lua_pushfstring(L, "%s: %s", what, uv_strerror(uverr)));
}

static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  mb_lua_host *h = mb_lua_host_of(L);
  uv_loop_t *uv = mb_loop_uv(mb_lua_host_loop(h));

  char **args = mb_lua_argv(L, 1, "spawn");
  char **env = mb_lua_env(L, 1, "spawn");
  const char *cwd = mb_lua_opt_str(L, 1, "spawn", "cwd", NULL);
  size_t maxbuf = (size_t)mb_lua_opt_int(L, 1, "spawn", "max_buffer", 1 << 20, 1, LUA_MAXINTEGER);
  int fds[MB_LUA_MAX_FDS];
  size_t nfds = mb_lua_opt_fds(L, 1, "spawn", "inherit_fds", fds);

  lproc *p = mb_lua_new_object(L, sizeof *p, 0, MB_PROC_MT);
  p->h = h;
  p->cb_ref = LUA_NOREF;
  p->pend.fire = fire;
  int pidx = lua_gettop(L);

  /* inherit_fds = {fd, ...}: the child gets them as its descriptors 3, 4, ... */
  uv_stdio_container_t stdio[3 + MB_LUA_MAX_FDS];
  int nstdio = 3;
  for (size_t i = 0; i < nfds; i++) {
    stdio[nstdio].flags = UV_INHERIT_FD;
    stdio[nstdio].data.fd = fds[i];
    nstdio++;
  }
  stdio[0].flags = UV_IGNORE;
  for (int k = 0; k < 2; k++) {
    lpipe *pp = calloc(1, sizeof *pp);
    if (!pp) return luaL_error(L, "out of memory");
    uv_pipe_init(uv, &pp->pipe, 0);
    pp->open = 1;
    pp->owner = p;
    pp->max = maxbuf;
    p->out[k] = pp;
    stdio[k + 1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[k + 1].data.stream = (uv_stream_t *)&pp->pipe;
  }
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.file = args[0];
  po.args = args;
  po.env = env;
  po.cwd = cwd;
  po.stdio = stdio;
  po.stdio_count = nstdio;
  po.exit_cb = on_proc_exit;
  p->proc = malloc(sizeof *p->proc);
  if (!p->proc) return luaL_error(L, "out of memory");
  int rc = uv_spawn(uv, p->proc, &po);
  if (rc != 0) {
    /* A failed spawn still initialised the handle: close it like any other. */
    p->proc->data = NULL;
    uv_close((uv_handle_t *)p->proc, free_handle);
    p->proc = NULL;
    pipe_close(p->out[0]);
    pipe_close(p->out[1]);
    p->out[0] = p->out[1] = NULL;
    return push_err(L, MB_CODE_SPAWN_FAILED, rc, args[0]);
  }
  p->proc->data = p;
  p->pid = p->proc->pid;
  for (int k = 0; k < 2; k++) {
    uv_read_start((uv_stream_t *)&p->out[k]->pipe, on_alloc, on_read);
    p->out[k]->reading = 1;
  }
  lua_pushvalue(L, 2);
  p->cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, pidx);
  return 1;
}

static int p_pid(lua_State *L) {
  lua_pushinteger(L, check_proc(L)->pid);
  return 1;
}

/* p:read("stdout"|"stderr") → data | nil (end of the stream) | false (nothing yet) */
static int p_read(lua_State *L) {
  lproc *p = check_proc(L);
  int k = luaL_checkoption(L, 2, "stdout", (const char *const[]){"stdout", "stderr", NULL});
  lpipe *pp = p->out[k];
  if (!pp) { lua_pushnil(L); return 1; }
  if (pp->len) {
    lua_pushlstring(L, pp->buf, pp->len);
    pp->len = 0;
    if (!pp->reading && !pp->eof && pp->open) {
      if (uv_read_start((uv_stream_t *)&pp->pipe, on_alloc, on_read) == 0) pp->reading = 1;
    }
    return 1;
  }
  if (pp->eof) lua_pushnil(L);
  else lua_pushboolean(L, 0);
  return 1;
}

/* → nil (running) | exit_code, signal */
static int p_exit_status(lua_State *L) {
  lproc *p = check_proc(L);
  if (!p->exited) return 0;
  lua_pushinteger(L, (lua_Integer)p->exit_code);
  lua_pushinteger(L, p->term_signal);
  return 2;
}

static int signum(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return SIGTERM;
  if (lua_type(L, idx) == LUA_TNUMBER) return (int)luaL_checkinteger(L, idx);
  static const char *const names[] = {"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT", NULL};
  static const int nums[] = {SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP, SIGCONT};
  const char *s = luaL_checkstring(L, idx);
  if (strncmp(s, "SIG", 3) == 0) s += 3;
  for (int i = 0; names[i]; i++) if (strcmp(s, names[i]) == 0) return nums[i];
  return luaL_argerror(L, idx, "unknown signal name");
}

/* p:kill([sig]) → true | nil, err (MB_EXITED: already exited) */
static int p_kill(lua_State *L) {
  lproc *p = check_proc(L);
  int sig = signum(L, 2);
  if (!p->proc) return mb_lua_push_error(L, mb_code_name(MB_CODE_MB_EXITED), "process has exited");
  int rc = uv_process_kill(p->proc, sig);
  if (rc != 0) return push_err(L, MB_CODE_MB_IO, rc, "kill");
  lua_pushboolean(L, 1);
  return 1;
}

/* Releases handles; a running child keeps running (kill it first to stop it) and is still
 * reaped when it exits. */
static int p_close(lua_State *L) {
  lproc *p = check_proc(L);
  mb_loop_undefer(mb_lua_host_loop(p->h), &p->pend);
  for (int k = 0; k < 2; k++) {
    lpipe *pp = p->out[k];
    if (!pp) continue;
    free(pp->buf);
    pp->buf = NULL;
    pp->owner = NULL;
    pipe_close(pp);
    p->out[k] = NULL;
  }
  if (p->proc) {
    /* Still running: keep the handle so libuv reaps the child; on_proc_exit closes it. */
    p->proc->data = NULL;
    p->proc = NULL;
  }
  if (p->cb_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, p->cb_ref);
  p->cb_ref = LUA_NOREF;
  return 0;
}

void mb_lua_open_proc(lua_State *L) {
  static const luaL_Reg m[] = {{"pid", p_pid}, {"read", p_read}, {"exit_status", p_exit_status},
                               {"kill", p_kill}, {"close", p_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", p_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_PROC_MT, m, meta);
  lua_pushcfunction(L, l_spawn);
  lua_setfield(L, -2, "spawn");
}
