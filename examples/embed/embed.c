/* embed.c — moonbox embedded in a program that owns its libuv loop. The program's own timer
 * keeps firing while a command runs in the sandbox: the command waits for a line on its stdin,
 * and the third tick that finds it waiting feeds it one. Nothing here blocks; the program's
 * uv_run drives everything, and moonbox's done callbacks come from that loop.
 *
 *   usage: embed [DIR]      DIR holds compose.lua and harness.lua (default: .)
 * Built against an installed moonbox through pkg-config (see Makefile and README.md). Linked
 * with the shared libmoonbox, the Lua modules are found next to it; a static build names
 * them: -DEMBED_LUA_DIR="\"$(pkg-config --variable=lmoddir moonbox)\"". */
#include <lauxlib.h>
#include <moonbox.h>
#include <stdio.h>
#include <uv.h>

static mb_runtime *rt;
static uv_loop_t loop;
static uv_timer_t timer;
static int harness_ref = LUA_NOREF;
static int ticks, fed, feed_done, command_done, exit_code = 1;
static mb_task *command_task, *feed_task, *close_task;

static void push_harness(const char *fn) {
  lua_State *L = mb_runtime_lua(rt);
  lua_rawgeti(L, LUA_REGISTRYINDEX, harness_ref);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
}

static void fail(const char *what) {
  fprintf(stderr, "embed: %s: %s: %s\n", what, mb_runtime_errcode(rt), mb_runtime_errmsg(rt));
}

static void on_closed(mb_task *t, void *user) {
  (void)user;
  if (mb_task_status(t) == MB_OK) printf("embed: composition disposed (sandbox deleted)\n");
  else fprintf(stderr, "embed: disposal failed: %s: %s\n", mb_task_errcode(t), mb_task_errmsg(t));
  uv_stop(&loop);
}

/* Closing cancels the calls still running: close once the command and the feed (if it was
 * sent) have both answered. */
static void close_when_done(void) {
  if (!command_done || (fed && !feed_done) || close_task) return;
  if (mb_runtime_close(rt, on_closed, NULL, &close_task) != MB_OK) { fail("close"); uv_stop(&loop); }
}

static void on_command_done(mb_task *t, void *user) {
  (void)user;
  uv_timer_stop(&timer);
  command_done = 1;
  if (mb_task_status(t) == MB_OK && mb_task_push_results(t) == 1) {
    lua_State *L = mb_runtime_lua(rt);
    int code = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    printf("embed: command exited %d; the program's timer ticked %d times while it waited\n", code, ticks);
    if (code == 0 && ticks == 3) exit_code = 0;
  } else {
    fprintf(stderr, "embed: command failed: %s: %s\n", mb_task_errcode(t), mb_task_errmsg(t));
  }
  close_when_done();
}

static void on_fed(mb_task *t, void *user) {
  (void)user;
  if (mb_task_status(t) != MB_OK) fprintf(stderr, "embed: feed failed: %s: %s\n", mb_task_errcode(t), mb_task_errmsg(t));
  feed_done = 1;
  close_when_done();
}

/* The program's own work: a timer on its loop. It asks the harness (an ordinary Lua call: no
 * Lua runs while the loop is in the program's callbacks) whether the command waits. */
static void on_tick(uv_timer_t *h) {
  (void)h;
  if (fed) return;
  lua_State *L = mb_runtime_lua(rt);
  push_harness("waiting");
  if (lua_pcall(L, 0, 1, 0) != LUA_OK) { fprintf(stderr, "embed: %s\n", lua_tostring(L, -1)); lua_pop(L, 1); return; }
  int waiting = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (!waiting) return;
  ticks++;
  printf("embed: tick %d, the command is waiting%s\n", ticks, ticks == 3 ? ": feeding it a line" : "");
  fflush(stdout);
  if (ticks < 3) return;
  fed = 1;
  push_harness("feed");
  lua_pushstring(L, "hello from tick 3");
  if (mb_runtime_call(rt, 1, on_fed, NULL, &feed_task) != MB_OK) fail("feed");
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  char compose[4096], harness[4096];
  snprintf(compose, sizeof compose, "%s/compose.lua", dir);
  snprintf(harness, sizeof harness, "%s/harness.lua", dir);
  uv_loop_init(&loop);
  mb_runtime_opts o = MB_RUNTIME_OPTS_INIT;
  o.loop = &loop;
#ifdef EMBED_LUA_DIR
  o.lua_dir = EMBED_LUA_DIR;
#endif
  if (mb_runtime_new(&o, &rt) != MB_OK) { fail("runtime"); mb_runtime_free(rt); return 1; }
  printf("embed: moonbox %s on the program's own libuv loop\n", mb_version());
  if (mb_runtime_open(rt, compose, NULL) != MB_OK) { fail("open"); mb_runtime_free(rt); return 1; }
  lua_State *L = mb_runtime_lua(rt);
  if (mb_runtime_load_file(rt, harness) != MB_OK) { fail("harness"); mb_runtime_free(rt); return 1; }
  if (lua_pcall(L, 0, 1, 0) != LUA_OK) { fprintf(stderr, "embed: %s\n", lua_tostring(L, -1)); mb_runtime_free(rt); return 1; }
  harness_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  push_harness("command");
  if (mb_runtime_call(rt, 0, on_command_done, NULL, &command_task) != MB_OK) { fail("call"); mb_runtime_free(rt); return 1; }
  uv_timer_init(&loop, &timer);
  uv_timer_start(&timer, on_tick, 20, 20);
  uv_run(&loop, UV_RUN_DEFAULT);
  mb_task_free(command_task);
  mb_task_free(feed_task);
  mb_task_free(close_task);
  mb_runtime_free(rt);
  uv_close((uv_handle_t *)&timer, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);                   /* moonbox's handles finish closing */
  int closed = uv_loop_close(&loop);
  printf("embed: loop closed %s\n", closed == 0 ? "cleanly (no handle of moonbox left)" : "with handles left");
  return closed == 0 ? exit_code : 1;
}
