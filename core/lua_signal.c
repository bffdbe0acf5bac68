/* lua_signal.c — class `moonbox.signal`: a watch on a signal the host process receives.
 *   core.signal(name, fn) → watch (:close()): fn() runs (protected, on the loop) whenever
 *       the process receives SIGTERM, SIGINT, SIGHUP or SIGWINCH (the terminal's size changed:
 *       core.tty_size); while any watch is open the signal no longer kills the process. */
#include "lua_moonbox.h"
#include <signal.h>
#include <stdlib.h>

#define MB_SIGNAL_MT "moonbox.signal"

typedef struct {
  uv_signal_t *sig;
  mb_lua_host *h;
  int ref;
} lsignal;

static void free_handle(uv_handle_t *h) { free(h); }

static void on_signal(uv_signal_t *s, int signum) {
  (void)signum;
  lsignal *w = s->data;
  mb_lua_host_call(w->h, w->ref); /* last: the callback may close w */
}

static int l_signal(lua_State *L) {
  static const char *const names[] = {"SIGTERM", "SIGINT", "SIGHUP", "SIGWINCH", NULL};
  static const int nums[] = {SIGTERM, SIGINT, SIGHUP, SIGWINCH};
  int i = luaL_checkoption(L, 1, NULL, names);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  mb_lua_host *h = mb_lua_host_of(L);
  lsignal *w = mb_lua_new_object(L, sizeof *w, 0, MB_SIGNAL_MT);
  w->h = h;
  w->ref = LUA_NOREF;
  w->sig = malloc(sizeof *w->sig);
  if (!w->sig) return luaL_error(L, "out of memory");
  uv_signal_init(mb_loop_uv(mb_lua_host_loop(h)), w->sig);
  w->sig->data = w;
  int rc = uv_signal_start(w->sig, on_signal, nums[i]);
  if (rc != 0) {
    uv_close((uv_handle_t *)w->sig, free_handle);
    w->sig = NULL;
    return mb_lua_push_error(L, "MB_IO", uv_strerror(rc));
  }
  lua_pushvalue(L, 2);
  w->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

static int sg_close(lua_State *L) {
  lsignal *w = luaL_checkudata(L, 1, MB_SIGNAL_MT);
  if (w->sig) {
    uv_signal_stop(w->sig);
    uv_close((uv_handle_t *)w->sig, free_handle);
    w->sig = NULL;
  }
  if (w->ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, w->ref);
  w->ref = LUA_NOREF;
  return 0;
}

void mb_lua_open_signal(lua_State *L) {
  static const luaL_Reg m[] = {{"close", sg_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", sg_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_SIGNAL_MT, m, meta);
  lua_pushcfunction(L, l_signal);
  lua_setfield(L, -2, "signal");
}
