/* runtime.c — the embedding API (include/moonbox.h): a Lua state with moonbox loaded on a
 * libuv loop, the composition it opens, and calls into it as tasks. The Lua half is
 * lua/moonbox/runtime.lua; this file moves arguments and outcomes across, keeps the loop fed
 * (an idle handle runs ready tasks while the embedder runs its loop) and fires done callbacks
 * only outside every Lua frame. */
#include "moonbox.h"
#include "lua_moonbox.h"
#include <dlfcn.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the Lua modules are relative to the directory libmoonbox (or the program it is linked
 * into) lives in, and absolutely under the install prefix; CMake sets both. */
#ifndef MB_LIB_TO_LMOD
#define MB_LIB_TO_LMOD "../share/lua/5.4"
#endif
#ifndef MB_INSTALLED_LMOD_DIR
#define MB_INSTALLED_LMOD_DIR "/usr/local/share/lua/5.4"
#endif

#define MB_RT_CODE_MAX 64
#define MB_RT_MSG_MAX 4096

struct mb_task {
  mb_runtime *rt;
  lua_Integer id;
  mb_task_cb done;
  void *user;
  int finished, status;
  int pinned, free_pending;        /* mb_runtime_run waits on it: freeing is deferred */
  char code[MB_RT_CODE_MAX];
  char *message;                   /* bounded copy, NULL when none */
  mb_task *next, *prev;
};

struct mb_runtime {
  lua_State *L;
  uv_loop_t *uv;
  uv_idle_t *pump;                 /* malloc'ed: closing it may outlive the runtime */
  int mod_ref;                     /* moonbox.runtime */
  int ready;                       /* mb_runtime_new succeeded */
  int driving;                     /* inside mb_runtime_run/step's Lua call */
  int in_callback;                 /* firing done callbacks, or pumping from the loop */
  int free_pending;                /* mb_runtime_free was called from a callback */
  mb_task *tasks;
  char code[MB_RT_CODE_MAX];
  char message[MB_RT_MSG_MAX];
  char loop_code[MB_RT_CODE_MAX];  /* a failure inside the pump, reported by the next call */
  char loop_message[MB_RT_MSG_MAX];
};

const char *mb_version(void) { return MOONBOX_VERSION; }

static int set_error(mb_runtime *rt, int rc, const char *code, const char *msg) {
  mb_copy_text(rt->code, sizeof rt->code, code, strlen(code));
  mb_copy_text(rt->message, sizeof rt->message, msg, strlen(msg));
  return rc;
}

/* The error value at the top of L (popped) → rc; code and message copied out. */
static int take_error(lua_State *L, char *code, size_t ccap, char *msg, size_t mcap) {
  int rc = MB_E_LUA;
  const char *c = "MB_LUA", *m;
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "code");
    lua_getfield(L, -2, "message");
    if (lua_type(L, -2) == LUA_TSTRING) { c = lua_tostring(L, -2); rc = MB_E_FAILED; }
    m = luaL_tolstring(L, -1, NULL);
    mb_copy_text(code, ccap, c, strlen(c));
    mb_copy_text(msg, mcap, m, strlen(m));
    lua_pop(L, 4);
    return rc;
  }
  m = luaL_tolstring(L, -1, NULL);
  mb_copy_text(code, ccap, c, strlen(c));
  mb_copy_text(msg, mcap, m, strlen(m));
  lua_pop(L, 2);
  return rc;
}

static int traceback(lua_State *L) {
  if (lua_istable(L, 1)) return 1;              /* a moonbox error: kept as it is */
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* moonbox.runtime[fn](the nargs values on top) in protected mode; → MB_OK with nres results
 * on the stack, or the error (recorded in rt) with nothing left. */
static int mod_call(mb_runtime *rt, const char *fn, int nargs, int nres) {
  lua_State *L = rt->L;
  if (!lua_checkstack(L, 4)) { lua_pop(L, nargs); return set_error(rt, MB_E_NOMEM, "E2B_NOMEM", "Lua stack overflow"); }
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->mod_ref);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_rotate(L, base + 1, 2);                  /* handler, fn, args... */
  int rc = lua_pcall(L, nargs, nres, base + 1);
  lua_remove(L, base + 1);
  if (rc == LUA_OK) return MB_OK;
  if (rc == LUA_ERRMEM) { lua_pop(L, 1); return set_error(rt, MB_E_NOMEM, "E2B_NOMEM", "out of memory in Lua"); }
  return take_error(L, rt->code, sizeof rt->code, rt->message, sizeof rt->message);
}

/* For functions returning true | nil, err. */
static int mod_call_ok(mb_runtime *rt, const char *fn, int nargs) {
  int rc = mod_call(rt, fn, nargs, 2);
  if (rc != MB_OK) return rc;
  if (lua_isnil(rt->L, -2) && !lua_isnil(rt->L, -1)) {
    lua_remove(rt->L, -2);
    return take_error(rt->L, rt->code, sizeof rt->code, rt->message, sizeof rt->message);
  }
  lua_pop(rt->L, 2);
  return MB_OK;
}

static int loop_failed(mb_runtime *rt) {
  if (!rt->loop_code[0]) return MB_OK;
  int rc = strcmp(rt->loop_code, "MB_LUA") == 0 ? MB_E_LUA : MB_E_FAILED;
  set_error(rt, rc, rt->loop_code, rt->loop_message);
  rt->loop_code[0] = rt->loop_message[0] = '\0';
  return rc;
}

static mb_task *find_task(mb_runtime *rt, lua_Integer id) {
  for (mb_task *t = rt->tasks; t; t = t->next)
    if (t->id == id) return t;
  return NULL;
}

static void release_task(mb_task *t) {
  mb_runtime *rt = t->rt;
  if (t->prev) t->prev->next = t->next; else rt->tasks = t->next;
  if (t->next) t->next->prev = t->prev;
  lua_pushinteger(rt->L, t->id);
  if (mod_call(rt, "release", 1, 0) != MB_OK) { /* nothing to undo: the id is gone either way */ }
  free(t->message);
  free(t);
}

static void free_now(mb_runtime *rt);

/* Fires the done callbacks of the calls that ended (outside every Lua frame). */
static void drain(mb_runtime *rt) {
  lua_State *L = rt->L;
  if (mod_call(rt, "take_finished", 0, 1) != MB_OK) return;
  int list = lua_gettop(L);
  lua_Integer n = luaL_len(L, list);
  rt->in_callback++;
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, list, i);
    lua_Integer id = lua_tointeger(L, -1);
    lua_pop(L, 1);
    mb_task *t = find_task(rt, id);
    if (!t || t->finished) continue;
    lua_pushinteger(L, id);
    if (mod_call(rt, "result", 1, 3) != MB_OK) continue;
    const char *status = lua_tostring(L, -3);
    t->status = !status || strcmp(status, "ok") == 0 ? MB_OK : strcmp(status, "lua") == 0 ? MB_E_LUA : MB_E_FAILED;
    const char *code = lua_tostring(L, -2), *msg = lua_tostring(L, -1);
    if (!code) code = "OK";
    mb_copy_text(t->code, sizeof t->code, code, strlen(code));
    if (msg) {
      size_t len = strlen(msg) < MB_RT_MSG_MAX ? strlen(msg) + 1 : MB_RT_MSG_MAX;
      t->message = malloc(len);
      if (t->message) mb_copy_text(t->message, len, msg, strlen(msg));
    }
    lua_pop(L, 3);
    t->finished = 1;
    if (t->done) t->done(t, t->user);
    if (rt->free_pending) break;
  }
  rt->in_callback--;
  lua_settop(L, list - 1);
}

/* After a callback of ours: a free asked for from inside it happens now. */
static void after_callback(mb_runtime *rt) {
  if (rt->in_callback == 0 && rt->free_pending) free_now(rt);
}

static void on_pump(uv_idle_t *h) {
  mb_runtime *rt = h->data;
  uv_idle_stop(h);
  if (!rt || rt->driving || !rt->ready) return;   /* a step runs the tasks itself */
  rt->in_callback++;
  if (mod_call(rt, "pump", 0, 0) != MB_OK && !rt->loop_code[0]) {
    memcpy(rt->loop_code, rt->code, sizeof rt->code);
    memcpy(rt->loop_message, rt->message, sizeof rt->message);
  }
  rt->in_callback--;
  drain(rt);
  after_callback(rt);
}

/* sched.on_ready: a task became ready while the embedder runs the loop. */
static int l_pump_arm(lua_State *L) {
  mb_runtime *rt = lua_touserdata(L, lua_upvalueindex(1));
  if (rt->pump && !uv_is_closing((uv_handle_t *)rt->pump)) uv_idle_start(rt->pump, on_pump);
  return 0;
}

static int file_exists(const char *dir, const char *rel) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s/%s", dir, rel) >= (int)sizeof p) return 0;
  return access(p, R_OK) == 0;
}

/* Next to libmoonbox (or the program it is linked into), then the install prefix. */
static const char *default_lua_dir(char *buf, size_t cap) {
  Dl_info info;
  if (dladdr((void *)mb_runtime_new, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
    const char *slash = strrchr(info.dli_fname, '/');
    int n = snprintf(buf, cap, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, MB_LIB_TO_LMOD);
    if (n > 0 && (size_t)n < cap && file_exists(buf, "moonbox/init.lua")) return buf;
  }
  if (file_exists(MB_INSTALLED_LMOD_DIR, "moonbox/init.lua")) return MB_INSTALLED_LMOD_DIR;
  return NULL;
}

/* In protected mode: the host on its loop, external; moonbox.runtime; sched.on_ready. */
static int setup(lua_State *L) {
  mb_runtime *rt = lua_touserdata(L, 1);
  rt->uv = mb_loop_uv(mb_lua_host_loop(mb_lua_host_of(L)));
  mb_lua_host_set_external(L, 1);
  uv_idle_init(rt->uv, rt->pump);
  rt->pump->data = rt;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moonbox.runtime");
  lua_call(L, 1, 1);
  rt->mod_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moonbox.sched");
  lua_call(L, 1, 1);
  lua_pushlightuserdata(L, rt);
  lua_pushcclosure(L, l_pump_arm, 1);
  lua_setfield(L, -2, "on_ready");
  return 0;
}

/* The caller's options in this library's struct: its first `size` bytes copied (bytes, as the
 * caller's struct may be an older, smaller one), the fields beyond them at their defaults.
 * → 0, or -1 after recording why the size is refused. */
static int read_opts(mb_runtime *rt, const mb_runtime_opts *opts, mb_runtime_opts *o) {
  const mb_runtime_opts defaults = MB_RUNTIME_OPTS_INIT;
  *o = defaults;
  if (!opts) return 0;
  size_t size;
  memcpy(&size, opts, sizeof size);
  if (size < sizeof size || size > sizeof *o) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "mb_runtime_new: opts->size is %zu, not between %zu and %zu (this library's "
             "mb_runtime_opts): start the options from MB_RUNTIME_OPTS_INIT%s",
             size, sizeof size, sizeof *o, size > sizeof *o ? ", with a moonbox.h no newer than the library" : "");
    set_error(rt, MB_E_INVALID, "E2B_INVALID", msg);
    return -1;
  }
  memcpy(o, opts, size);
  /* A field the caller's struct ends inside of is not the caller's: its default (one line per
   * field after size, each new field added here too). */
  if (size < offsetof(mb_runtime_opts, loop) + sizeof o->loop) o->loop = defaults.loop;
  if (size < offsetof(mb_runtime_opts, lua_dir) + sizeof o->lua_dir) o->lua_dir = defaults.lua_dir;
  return 0;
}

int mb_runtime_new(const mb_runtime_opts *user_opts, mb_runtime **out) {
  if (!out) return MB_E_INVALID;
  mb_runtime *rt = calloc(1, sizeof *rt);
  *out = rt;
  if (!rt) return MB_E_NOMEM;
  rt->mod_ref = LUA_NOREF;
  set_error(rt, MB_OK, "OK", "");
  mb_runtime_opts opts_buf, *opts = &opts_buf;
  if (read_opts(rt, user_opts, opts) != 0) return MB_E_INVALID;
  lua_State *L = luaL_newstate();
  if (!L) return set_error(rt, MB_E_NOMEM, "E2B_NOMEM", "cannot create a Lua state");
  rt->L = L;
  luaL_openlibs(L);
  if (opts->loop) mb_lua_use_loop(L, opts->loop);
  char buf[4096];
  const char *dir = opts->lua_dir ? opts->lua_dir : default_lua_dir(buf, sizeof buf);
  if (dir) {
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
  }
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_moonbox_core);
  lua_setfield(L, -2, "moonbox.core");
  lua_pop(L, 1);
  rt->pump = calloc(1, sizeof *rt->pump);
  if (!rt->pump) return set_error(rt, MB_E_NOMEM, "E2B_NOMEM", "out of memory");
  lua_pushcfunction(L, setup);
  lua_pushlightuserdata(L, rt);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    char code[MB_RT_CODE_MAX], msg[2048];
    take_error(L, code, sizeof code, msg, sizeof msg);
    char full[MB_RT_MSG_MAX];
    snprintf(full, sizeof full, "cannot load moonbox's Lua modules (from %.1024s): %s",
             dir ? dir : "LUA_PATH", msg);
    return set_error(rt, MB_E_FAILED, "MB_NOT_FOUND", full);
  }
  rt->ready = 1;
  return MB_OK;
}

#define CHECK_RT(rt)                                                          \
  do {                                                                        \
    if (!(rt) || !(rt)->ready) return MB_E_INVALID;                           \
  } while (0)

int mb_runtime_open(mb_runtime *rt, const char *composition, const char *const *policies) {
  CHECK_RT(rt);
  if (!composition) return set_error(rt, MB_E_INVALID, "E2B_INVALID", "mb_runtime_open: no composition file");
  lua_State *L = rt->L;
  lua_pushstring(L, composition);
  lua_newtable(L);
  for (int i = 0; policies && policies[i]; i++) {
    lua_pushstring(L, policies[i]);
    lua_rawseti(L, -2, i + 1);
  }
  int rc = mod_call_ok(rt, "open", 2);
  if (rc == MB_E_FAILED && strcmp(rt->code, "MB_BUSY") == 0) rc = MB_E_BUSY;
  return rc;
}

int mb_runtime_reload_policies(mb_runtime *rt) {
  CHECK_RT(rt);
  return mod_call_ok(rt, "reload_policies", 0);
}

int mb_runtime_load_file(mb_runtime *rt, const char *path) {
  CHECK_RT(rt);
  if (!path) return set_error(rt, MB_E_INVALID, "E2B_INVALID", "mb_runtime_load_file: no path");
  int rc = luaL_loadfilex(rt->L, path, "t");
  if (rc == LUA_OK) return MB_OK;
  const char *msg = lua_tostring(rt->L, -1);
  set_error(rt, MB_E_FAILED, rc == LUA_ERRFILE ? "MB_NOT_FOUND" : "MB_SCRIPT", msg ? msg : "cannot load the file");
  lua_pop(rt->L, 1);
  return MB_E_FAILED;
}

static int new_task(mb_runtime *rt, mb_task_cb done, void *user, mb_task **out) {
  lua_Integer id = lua_tointeger(rt->L, -1);
  lua_pop(rt->L, 1);
  mb_task *t = calloc(1, sizeof *t);
  if (!t) {
    lua_pushinteger(rt->L, id);
    if (mod_call(rt, "cancel", 1, 0) == MB_OK) { /* it goes on unobserved */ }
    return set_error(rt, MB_E_NOMEM, "E2B_NOMEM", "out of memory");
  }
  t->rt = rt;
  t->id = id;
  t->done = done;
  t->user = user;
  t->status = MB_E_BUSY;
  t->next = rt->tasks;
  if (rt->tasks) rt->tasks->prev = t;
  rt->tasks = t;
  *out = t;
  return MB_OK;
}

int mb_runtime_call(mb_runtime *rt, int nargs, mb_task_cb done, void *user, mb_task **out) {
  if (out) *out = NULL;
  CHECK_RT(rt);
  if (!out || nargs < 0) return set_error(rt, MB_E_INVALID, "E2B_INVALID", "mb_runtime_call: bad arguments");
  lua_State *L = rt->L;
  if (lua_gettop(L) < nargs + 1 || !lua_isfunction(L, -(nargs + 1)))
    return set_error(rt, MB_E_INVALID, "E2B_INVALID",
                     "mb_runtime_call: expected a function and its arguments on the Lua stack");
  int rc = mod_call(rt, "call", nargs + 1, 1);
  if (rc != MB_OK) return rc;
  return new_task(rt, done, user, out);
}

int mb_runtime_close(mb_runtime *rt, mb_task_cb done, void *user, mb_task **out) {
  if (out) *out = NULL;
  CHECK_RT(rt);
  if (!out) return set_error(rt, MB_E_INVALID, "E2B_INVALID", "mb_runtime_close: out is NULL");
  int rc = mod_call(rt, "close", 0, 1);
  if (rc != MB_OK) return rc;
  return new_task(rt, done, user, out);
}

/* One turn through Lua (runtime.step), then the done callbacks. */
static int turn(mb_runtime *rt, int block, mb_task *t) {
  lua_pushboolean(rt->L, block);
  if (t) lua_pushinteger(rt->L, t->id); else lua_pushnil(rt->L);
  rt->driving = 1;
  int rc = mod_call_ok(rt, "step", 2);
  rt->driving = 0;
  drain(rt);
  if (rc != MB_OK) return rc;
  return loop_failed(rt);
}

int mb_runtime_run(mb_runtime *rt, mb_task *t) {
  CHECK_RT(rt);
  if (!t || t->rt != rt) return set_error(rt, MB_E_INVALID, "E2B_INVALID", "mb_runtime_run: not a task of this runtime");
  if (rt->in_callback || rt->driving)
    return set_error(rt, MB_E_BUSY, "MB_BUSY", "mb_runtime_run: the loop is already running (called from a callback)");
  t->pinned++;
  int rc = MB_OK;
  while (!t->finished && rc == MB_OK) rc = turn(rt, 1, t);
  t->pinned--;
  int status = t->finished ? t->status : rc;
  if (t->free_pending && !t->pinned) mb_task_free(t);
  if (rt->free_pending) free_now(rt);                   /* asked for from a callback meanwhile */
  return status;
}

int mb_runtime_step(mb_runtime *rt) {
  CHECK_RT(rt);
  if (rt->in_callback || rt->driving)
    return set_error(rt, MB_E_BUSY, "MB_BUSY", "mb_runtime_step: the loop is already running (called from a callback)");
  int rc = turn(rt, 0, NULL);
  if (rt->free_pending) free_now(rt);
  return rc;
}

lua_State *mb_runtime_lua(mb_runtime *rt) { return rt ? rt->L : NULL; }
uv_loop_t *mb_runtime_loop(mb_runtime *rt) { return rt ? rt->uv : NULL; }
const char *mb_runtime_errcode(const mb_runtime *rt) { return rt ? rt->code : "E2B_NOMEM"; }
const char *mb_runtime_errmsg(const mb_runtime *rt) { return rt ? rt->message : "out of memory"; }

static void free_handle(uv_handle_t *h) { free(h); }

static void free_now(mb_runtime *rt) {
  rt->free_pending = 0;
  if (rt->ready) {
    /* Still open: dispose of it, driving the loop (the sandbox is deleted, sandboxd stopped). */
    if (mod_call(rt, "is_open", 0, 1) == MB_OK) {
      int open = lua_toboolean(rt->L, -1);
      lua_pop(rt->L, 1);
      mb_task *c = NULL;
      if (open && mb_runtime_close(rt, NULL, NULL, &c) == MB_OK) {
        (void)mb_runtime_run(rt, c);
        mb_task_free(c);
      }
    }
  }
  while (rt->tasks) {
    mb_task *t = rt->tasks;
    rt->tasks = t->next;
    free(t->message);
    free(t);
  }
  if (rt->pump) {
    if (rt->pump->data) {                              /* initialized on the loop */
      uv_idle_stop(rt->pump);
      rt->pump->data = NULL;
      uv_close((uv_handle_t *)rt->pump, free_handle);  /* before the loop's own teardown runs it */
    } else {
      free(rt->pump);
    }
    rt->pump = NULL;
  }
  rt->ready = 0;
  if (rt->L) lua_close(rt->L);
  free(rt);
}

void mb_runtime_free(mb_runtime *rt) {
  if (!rt) return;
  if (rt->in_callback || rt->driving) { rt->free_pending = 1; return; }
  free_now(rt);
}

int mb_task_done(const mb_task *t) { return t && t->finished; }
int mb_task_status(const mb_task *t) { return !t ? MB_E_INVALID : t->finished ? t->status : MB_E_BUSY; }
const char *mb_task_errcode(const mb_task *t) { return t && t->finished ? t->code : "OK"; }
const char *mb_task_errmsg(const mb_task *t) { return t && t->message ? t->message : ""; }

int mb_task_push_results(mb_task *t) {
  if (!t || !t->finished || t->status != MB_OK) return 0;
  lua_State *L = t->rt->L;
  int top = lua_gettop(L);
  lua_pushinteger(L, t->id);
  if (mod_call(t->rt, "results", 1, LUA_MULTRET) != MB_OK) return 0;
  return lua_gettop(L) - top;
}

int mb_task_cancel(mb_task *t) {
  if (!t || t->finished) return MB_E_INVALID;
  lua_pushinteger(t->rt->L, t->id);
  if (mod_call(t->rt, "cancel", 1, 1) != MB_OK) return MB_E_INVALID;
  int ok = lua_toboolean(t->rt->L, -1);
  lua_pop(t->rt->L, 1);
  return ok ? MB_OK : MB_E_INVALID;
}

void mb_task_free(mb_task *t) {
  if (!t) return;
  if (t->pinned) { t->free_pending = 1; t->done = NULL; return; }
  release_task(t);
}
