/* lua_loop.c — the Lua host of the loop: core.now, core.run, core.stop, core.timer.
 * The host (one per Lua state, in the registry) owns the mb_loop and calls Lua callbacks in
 * protected mode on the thread that drives the loop; a callback error stops the loop and comes
 * back from core.run as nil, message — it never unwinds through libuv or libcurl. */
#include "lua_moonbox.h"
#include "moonbox.h"
#include "errors.h"
#include <stdlib.h>
#include <string.h>

struct mb_lua_host {
  mb_loop *loop;
  lua_State *L;      /* thread inside core.run, NULL otherwise */
  lua_State *main;   /* the state's main thread: callbacks run on it while an embedder runs
                        the loop itself (external) */
  int external;
  int err_ref;       /* first callback error of this run, or LUA_NOREF */
};

static const char host_key = 'h';
static const char uvloop_key = 'u';
#define MB_TIMER_MT "moonbox.timer"

static void free_handle(uv_handle_t *hd) { free(hd); }

/* Process handles of children still running when their Lua objects went away (lua_proc.c
 * leaves them open so the child is reaped); on our own loop they are closed at teardown. */
static void close_orphan(uv_handle_t *hd, void *arg) {
  (void)arg;
  if (hd->type == UV_PROCESS && hd->data == NULL && !uv_is_closing(hd)) uv_close(hd, free_handle);
}


static int host_gc(lua_State *L) {
  mb_lua_host *h = lua_touserdata(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &uvloop_key);
  int borrowed = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (h->loop && !borrowed) uv_walk(mb_loop_uv(h->loop), close_orphan, NULL);
  if (h->loop) mb_loop_free(h->loop);
  h->loop = NULL;
  return 0;
}

int mb_lua_use_loop(lua_State *L, uv_loop_t *uv) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &host_key);
  int exists = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (exists) return MB_E_INVALID;
  lua_pushlightuserdata(L, uv);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &uvloop_key);
  return MB_OK;
}

mb_lua_host *mb_lua_host_of(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &host_key);
  mb_lua_host *h = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (h) return h;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &uvloop_key);
  uv_loop_t *uv = lua_touserdata(L, -1);
  lua_pop(L, 1);
  h = lua_newuserdatauv(L, sizeof *h, 0);
  memset(h, 0, sizeof *h);
  h->err_ref = LUA_NOREF;
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  h->main = lua_tothread(L, -1);
  lua_pop(L, 1);
  int rc = mb_loop_new(uv, &h->loop);
  if (rc != MB_OK) luaL_error(L, "moonbox: cannot create the event loop: %s", mb_strerror(rc));
  lua_newtable(L);
  lua_pushcfunction(L, host_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &host_key);
  return h;
}

mb_loop *mb_lua_host_loop(mb_lua_host *h) { return h->loop; }

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

void mb_lua_host_set_external(lua_State *L, int on) { mb_lua_host_of(L)->external = on; }

void mb_lua_host_call(mb_lua_host *h, int ref) {
  lua_State *L = h->L ? h->L : h->external ? h->main : NULL;
  if (!L || ref == LUA_NOREF || ref == LUA_REFNIL) return;
  if (!lua_checkstack(L, 3)) return;
  int base = lua_gettop(L);
  lua_pushcfunction(L, traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  if (lua_pcall(L, 0, 0, base + 1) != LUA_OK) {
    if (h->err_ref == LUA_NOREF) h->err_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    uv_stop(mb_loop_uv(h->loop));
  }
  lua_settop(L, base);
}

static int l_now(lua_State *L) {
  lua_pushnumber(L, mb_loop_now_ms());
  return 1;
}

/* core.run([mode]) → true, alive | nil, error (a callback raised). mode: "default"|"once"|"nowait" */
static int l_run(lua_State *L) {
  static const char *const modes[] = {"default", "once", "nowait", NULL};
  static const uv_run_mode umodes[] = {UV_RUN_DEFAULT, UV_RUN_ONCE, UV_RUN_NOWAIT};
  int m = luaL_checkoption(L, 1, "once", modes);
  mb_lua_host *h = mb_lua_host_of(L);
  if (h->L) return luaL_error(L, "core.run: the loop is already running (nested run)");
  h->L = L;
  int alive = uv_run(mb_loop_uv(h->loop), umodes[m]);
  h->L = NULL;
  if (h->err_ref != LUA_NOREF) {
    lua_pushnil(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->err_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, h->err_ref);
    h->err_ref = LUA_NOREF;
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_pushboolean(L, alive != 0);
  return 2;
}

static int l_stop(lua_State *L) {
  uv_stop(mb_loop_uv(mb_lua_host_of(L)->loop));
  return 0;
}

/* Timers: the uv handle is malloc'ed so it can outlive the userdata until its close callback. */
typedef struct {
  uv_timer_t *t;
  mb_lua_host *h;
  int ref;
} ltimer;

static ltimer *check_timer(lua_State *L) {
  ltimer *t = luaL_checkudata(L, 1, MB_TIMER_MT);
  if (!t->t) luaL_error(L, "timer is closed");
  return t;
}

static void on_timer(uv_timer_t *ut) {
  ltimer *t = ut->data;
  mb_lua_host_call(t->h, t->ref); /* last: the callback may close and collect t */
}

static int l_timer(lua_State *L) {
  mb_lua_host *h = mb_lua_host_of(L);
  ltimer *t = lua_newuserdatauv(L, sizeof *t, 0);
  t->h = h;
  t->ref = LUA_NOREF;
  t->t = malloc(sizeof *t->t);
  if (!t->t) return luaL_error(L, "out of memory");
  uv_timer_init(mb_loop_uv(h->loop), t->t);
  t->t->data = t;
  luaL_setmetatable(L, MB_TIMER_MT);
  return 1;
}

/* timer:start(ms, fn): fn() runs once after ms (replaces a pending start). */
static int t_start(lua_State *L) {
  ltimer *t = check_timer(L);
  lua_Number ms = luaL_checknumber(L, 2);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  if (!(ms >= 0)) return luaL_argerror(L, 2, "must be >= 0");
  if (ms > 1e12) ms = 1e12;
  lua_pushvalue(L, 3);
  if (t->ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, t->ref);
  t->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  /* The loop's cached clock may lag behind; a timer must never fire early. */
  uv_update_time(t->t->loop);
  uv_timer_start(t->t, on_timer, (uint64_t)(ms + 0.999), 0);
  return 0;
}

static int t_stop(lua_State *L) {
  ltimer *t = check_timer(L);
  uv_timer_stop(t->t);
  if (t->ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, t->ref);
  t->ref = LUA_NOREF;
  return 0;
}

static int t_close(lua_State *L) {
  ltimer *t = luaL_checkudata(L, 1, MB_TIMER_MT);
  if (!t->t) return 0;
  uv_timer_stop(t->t);
  t->t->data = NULL;
  uv_close((uv_handle_t *)t->t, free_handle);
  t->t = NULL;
  if (t->ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, t->ref);
  t->ref = LUA_NOREF;
  return 0;
}

void mb_lua_open_loop(lua_State *L) {
  mb_lua_host_of(L);
  static const luaL_Reg m[] = {{"start", t_start}, {"stop", t_stop}, {"close", t_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", t_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_TIMER_MT, m, meta);
  static const luaL_Reg f[] = {{"now", l_now}, {"run", l_run}, {"stop", l_stop},
                               {"timer", l_timer}, {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
