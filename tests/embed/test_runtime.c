/* test_runtime.c — the embedding API: errors as codes with messages, calls as tasks, the
 * runtime on its own loop (run, step) and on the embedder's loop (the embedder runs uv_run). */
#include "moonbox.h"
#include "mbtest.h"
#include <lauxlib.h>
#include <uv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];
static char path_buf[512];

static const char *write_file(const char *name, const char *text) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", tmpdir, name);
  FILE *f = fopen(path_buf, "w");
  if (!f) { perror(path_buf); exit(2); }
  fputs(text, f);
  fclose(f);
  return path_buf;
}

static mb_runtime *new_rt(uv_loop_t *loop) {
  mb_runtime_opts o = MB_RUNTIME_OPTS_INIT;
  o.loop = loop;
  o.lua_dir = MB_SOURCE_DIR "/lua";
  mb_runtime *rt = NULL;
  int rc = mb_runtime_new(&o, &rt);
  CHECK_INT(rc, MB_OK);
  if (rc != MB_OK) fprintf(stderr, "     %s\n", mb_runtime_errmsg(rt));
  return rt;
}

/* Pushes a Lua function from source. */
static void push_fn(mb_runtime *rt, const char *src) {
  lua_State *L = mb_runtime_lua(rt);
  if (luaL_loadstring(L, src) != LUA_OK) { fprintf(stderr, "%s\n", lua_tostring(L, -1)); exit(2); }
}

static int done_calls;
static void on_done(mb_task *t, void *user) {
  (void)user;
  CHECK(mb_task_done(t));
  done_calls++;
}

static void test_missing_modules(void) {
  mb_runtime_opts o;
  mb_runtime_opts_init(&o);
  o.lua_dir = "/nonexistent";
  mb_runtime *rt = NULL;
  CHECK_INT(mb_runtime_new(&o, &rt), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "MB_NOT_FOUND");
  CHECK_HAS(mb_runtime_errmsg(rt), "cannot load moonbox's Lua modules (from /nonexistent)");
  CHECK_INT(mb_runtime_open(rt, "x.lua", NULL), MB_E_INVALID);   /* a failed runtime refuses */
  mb_runtime_free(rt);
  mb_runtime_free(NULL);
  CHECK_INT(mb_runtime_new(&o, NULL), MB_E_INVALID);
}

static void test_bad_compositions(void) {
  mb_runtime *rt = new_rt(NULL);
  CHECK_STR(mb_runtime_errcode(rt), "OK");
  CHECK_INT(mb_runtime_open(rt, "/nonexistent/compose.lua", NULL), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "COMPOSE_INVALID");
  CHECK_HAS(mb_runtime_errmsg(rt), "composition /nonexistent/compose.lua: No such file or directory");
  const char *c = write_file("bad.lua", "plugin \"e2b\" {}\nplugin \"nope\" {}\n");
  CHECK_INT(mb_runtime_open(rt, c, NULL), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "COMPOSE_INVALID");
  CHECK_HAS(mb_runtime_errmsg(rt), "bad.lua:2: unknown plugin \"nope\"");
  c = write_file("ok.lua", "plugin \"fake\" {}\n");
  const char *unknown[] = {"envv=x.lua", NULL};
  CHECK_INT(mb_runtime_open(rt, c, unknown), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "POLICY_INVALID");
  CHECK_HAS(mb_runtime_errmsg(rt), "unknown concern \"envv\"");
  const char *p = write_file("t.lua", "return {\n  request_ms = \"soon\" }\n");
  char arg[600];
  snprintf(arg, sizeof arg, "timeouts=%s", p);
  const char *bad_policy[] = {arg, NULL};
  CHECK_INT(mb_runtime_open(rt, write_file("ok.lua", "plugin \"fake\" {}\n"), bad_policy), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "POLICY_INVALID");
  CHECK_HAS(mb_runtime_errmsg(rt), "t.lua:2: timeouts policy: field request_ms: expected a positive number");
  CHECK_INT(mb_runtime_reload_policies(rt), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "MB_CLOSED");
  CHECK_INT(mb_runtime_open(rt, NULL, NULL), MB_E_INVALID);
  mb_runtime_free(rt);
}

static void test_load_file_errors(void) {
  mb_runtime *rt = new_rt(NULL);
  lua_State *L = mb_runtime_lua(rt);
  int top = lua_gettop(L);
  CHECK_INT(mb_runtime_load_file(rt, "/nonexistent/script.lua"), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "MB_NOT_FOUND");
  CHECK_HAS(mb_runtime_errmsg(rt), "/nonexistent/script.lua");
  CHECK_INT(mb_runtime_load_file(rt, write_file("syntax.lua", "return (\n")), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "MB_SCRIPT");
  CHECK_HAS(mb_runtime_errmsg(rt), "syntax.lua:2:");
  CHECK_INT(lua_gettop(L), top);
  CHECK_INT(mb_runtime_load_file(rt, write_file("fine.lua", "return 40 + 2\n")), MB_OK);
  CHECK_INT(lua_gettop(L), top + 1);
  mb_task *t = NULL;
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_run(rt, t), MB_OK);
  CHECK_INT(mb_task_push_results(t), 1);
  CHECK_INT(lua_tointeger(L, -1), 42);
  lua_settop(L, top);
  mb_task_free(t);
  /* nothing callable on the stack */
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &t), MB_E_INVALID);
  CHECK(t == NULL);
  lua_pushinteger(L, 1);
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &t), MB_E_INVALID);
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, NULL), MB_E_INVALID);
  lua_settop(L, top);
  mb_runtime_free(rt);
}

static void test_call_outcomes(void) {
  mb_runtime *rt = new_rt(NULL);
  lua_State *L = mb_runtime_lua(rt);
  mb_task *t;
  done_calls = 0;
  /* arguments come after ctx (nil without a composition); results come back */
  push_fn(rt, "local ctx, a, b = ... assert(ctx == nil) require('moonbox').sleep(1) return a + b, 'x'");
  lua_pushinteger(L, 2);
  lua_pushinteger(L, 3);
  CHECK_INT(mb_runtime_call(rt, 2, on_done, NULL, &t), MB_OK);
  CHECK(!mb_task_done(t));
  CHECK_INT(mb_task_status(t), MB_E_BUSY);
  CHECK_INT(mb_task_push_results(t), 0);
  CHECK_INT(mb_runtime_run(rt, t), MB_OK);
  CHECK_INT(done_calls, 1);
  CHECK_INT(mb_task_push_results(t), 2);
  CHECK_INT(lua_tointeger(L, -2), 5);
  CHECK_STR(lua_tostring(L, -1), "x");
  lua_pop(L, 2);
  CHECK_INT(mb_task_cancel(t), MB_E_INVALID);                   /* finished */
  mb_task_free(t);
  /* raised: MB_E_LUA with the traceback */
  push_fn(rt, "error('the harness broke')");
  CHECK_INT(mb_runtime_call(rt, 0, on_done, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_run(rt, t), MB_E_LUA);
  CHECK_STR(mb_task_errcode(t), "MB_LUA");
  CHECK_HAS(mb_task_errmsg(t), "the harness broke");
  CHECK_HAS(mb_task_errmsg(t), "stack traceback");
  mb_task_free(t);
  /* nil, err: MB_E_FAILED with the error's own code */
  push_fn(rt, "return nil, require('moonbox').error('FS_NOT_FOUND', 'no such file: /x')");
  CHECK_INT(mb_runtime_call(rt, 0, on_done, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_run(rt, t), MB_E_FAILED);
  CHECK_STR(mb_task_errcode(t), "FS_NOT_FOUND");
  CHECK_STR(mb_task_errmsg(t), "no such file: /x");
  mb_task_free(t);
  /* canceled while it waits */
  push_fn(rt, "return require('moonbox').sleep(60000)");
  CHECK_INT(mb_runtime_call(rt, 0, on_done, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_step(rt), MB_OK);                        /* it is now blocked in sleep */
  CHECK_INT(mb_task_cancel(t), MB_OK);
  CHECK_INT(mb_runtime_run(rt, t), MB_E_FAILED);
  CHECK_STR(mb_task_errcode(t), "MB_CANCELED");
  mb_task_free(t);
  /* blocked forever: nothing can wake it */
  push_fn(rt, "return require('moonbox').event():wait()");
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_run(rt, t), MB_E_FAILED);
  CHECK_HAS(mb_runtime_errmsg(rt), "blocked and nothing is pending");
  mb_task_free(t);                                                 /* still running: released */
  CHECK_INT(done_calls, 4);
  mb_runtime_free(rt);
}

/* Stepping never blocks: a task that waits on another task's event finishes after a few steps. */
static void test_step(void) {
  mb_runtime *rt = new_rt(NULL);
  mb_task *t;
  push_fn(rt, "local mb = require 'moonbox' local ev = mb.event()"
              " mb.spawn(function() mb.sleep(0) ev:set(7) end) return ev:wait()");
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &t), MB_OK);
  int steps = 0;
  while (!mb_task_done(t) && steps < 100000) {
    CHECK_INT(mb_runtime_step(rt), MB_OK);
    steps++;
  }
  CHECK(mb_task_done(t));
  CHECK_INT(mb_task_status(t), MB_OK);
  CHECK_INT(mb_task_push_results(t), 1);
  CHECK_INT(lua_tointeger(mb_runtime_lua(rt), -1), 7);
  lua_pop(mb_runtime_lua(rt), 1);
  mb_task_free(t);
  mb_runtime_free(rt);
}

/* A composition: ctx reaches the call, policies reload, close disposes, open twice is busy. */
static void test_composition(void) {
  mb_runtime *rt = new_rt(NULL);
  lua_State *L = mb_runtime_lua(rt);
  write_file("fast.lua", "return { request_ms = 1111 }\n");
  write_file("registry.lua", "return { plugins = { fake = 'fake_plugin' } }\n");
  char c[512];
  snprintf(c, sizeof c, "%s", write_file("c.lua", "plugin \"fake\" { value = 9 }\n"
                                        "policies { timeouts = 'fast.lua', composition = 'registry.lua' }\n"));
  CHECK_INT(mb_runtime_open(rt, c, NULL), MB_OK);
  CHECK_INT(mb_runtime_open(rt, c, NULL), MB_E_BUSY);
  CHECK_STR(mb_runtime_errcode(rt), "MB_BUSY");
  mb_task *t;
  const char *probe = "local ctx = ... return ctx.fake.value, ctx.policies.timeouts.request_ms";
  push_fn(rt, probe);
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_run(rt, t), MB_OK);
  CHECK_INT(mb_task_push_results(t), 2);
  CHECK_INT(lua_tointeger(L, -2), 9);
  CHECK_INT(lua_tointeger(L, -1), 1111);
  lua_pop(L, 2);
  mb_task_free(t);
  /* an invalid edit is refused and the old value kept; a valid one is used by the next call */
  write_file("fast.lua", "return { request_ms = 0 }\n");
  CHECK_INT(mb_runtime_reload_policies(rt), MB_E_FAILED);
  CHECK_STR(mb_runtime_errcode(rt), "POLICY_INVALID");
  CHECK_HAS(mb_runtime_errmsg(rt), "fast.lua:1: timeouts policy: field request_ms");
  write_file("fast.lua", "return { request_ms = 2222 }\n");
  CHECK_INT(mb_runtime_reload_policies(rt), MB_OK);
  push_fn(rt, probe);
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_run(rt, t), MB_OK);
  CHECK_INT(mb_task_push_results(t), 2);
  CHECK_INT(lua_tointeger(L, -1), 2222);
  lua_pop(L, 2);
  mb_task_free(t);
  /* close cancels what still runs, then disposes */
  mb_task *sleeper, *closer;
  push_fn(rt, "return require('moonbox').sleep(60000)");
  CHECK_INT(mb_runtime_call(rt, 0, NULL, NULL, &sleeper), MB_OK);
  CHECK_INT(mb_runtime_close(rt, NULL, NULL, &closer), MB_OK);
  CHECK_INT(mb_runtime_run(rt, closer), MB_OK);
  CHECK(mb_task_done(sleeper));
  CHECK_STR(mb_task_errcode(sleeper), "MB_CANCELED");
  lua_getglobal(L, "fake_log");
  CHECK_STR(lua_tostring(L, -1), "new;dispose;");
  lua_pop(L, 1);
  mb_task_free(sleeper);
  mb_task_free(closer);
  /* closed: open again works; free disposes what is still open */
  CHECK_INT(mb_runtime_open(rt, c, NULL), MB_OK);
  mb_runtime_free(rt);
}

/* The embedder's loop: nothing but the embedder's uv_run drives moonbox; callbacks come from it. */
static int ticks;
static uv_timer_t tick_timer;
static void on_tick(uv_timer_t *h) { (void)h; ticks++; }
static mb_runtime *loop_rt;
static int nested_rc;
static void on_loop_done(mb_task *t, void *user) {
  (void)user;
  nested_rc = mb_runtime_run(loop_rt, t);     /* the loop is running: refused */
  uv_timer_stop(&tick_timer);
  done_calls++;
}

static void test_embedder_loop(void) {
  uv_loop_t loop;
  CHECK_INT(uv_loop_init(&loop), 0);
  loop_rt = new_rt(&loop);
  CHECK(mb_runtime_loop(loop_rt) == &loop);
  uv_timer_init(&loop, &tick_timer);
  uv_timer_start(&tick_timer, on_tick, 1, 1);
  done_calls = 0;
  mb_task *t;
  push_fn(loop_rt, "local mb = require 'moonbox' for i = 1, 3 do mb.sleep(2) end return 'slept'");
  CHECK_INT(mb_runtime_call(loop_rt, 0, on_loop_done, NULL, &t), MB_OK);
  uv_run(&loop, UV_RUN_DEFAULT);             /* returns once the timer is stopped and moonbox idle */
  CHECK_INT(done_calls, 1);
  CHECK_INT(nested_rc, MB_E_BUSY);
  CHECK_INT(mb_task_status(t), MB_OK);
  CHECK_INT(mb_task_push_results(t), 1);
  CHECK_STR(lua_tostring(mb_runtime_lua(loop_rt), -1), "slept");
  lua_pop(mb_runtime_lua(loop_rt), 1);
  mb_task_free(t);
  mb_runtime_free(loop_rt);
  uv_close((uv_handle_t *)&tick_timer, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);             /* moonbox's handles finish closing */
  CHECK_INT(uv_loop_close(&loop), 0);
}

/* mb_runtime_free from inside a done callback happens once the callback has returned. */
static mb_runtime *self_rt;
static void free_from_callback(mb_task *t, void *user) {
  (void)t;
  (void)user;
  mb_runtime_free(self_rt);
  done_calls++;
}

static void test_free_from_callback(void) {
  self_rt = new_rt(NULL);
  mb_task *t;
  done_calls = 0;
  push_fn(self_rt, "return 1");
  CHECK_INT(mb_runtime_call(self_rt, 0, free_from_callback, NULL, &t), MB_OK);
  CHECK_INT(mb_runtime_run(self_rt, t), MB_OK);  /* returns with the runtime (and t) freed */
  CHECK_INT(done_calls, 1);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/moonbox-embed-test.XXXXXX");
  if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
  /* Only the source tree's modules and the fake plugin: nothing installed on this machine. */
  setenv("LUA_PATH", MB_SOURCE_DIR "/tests/embed/?.lua", 1);
  setenv("PWD", tmpdir, 1);
  MBT_RUN(test_missing_modules);
  MBT_RUN(test_bad_compositions);
  MBT_RUN(test_load_file_errors);
  MBT_RUN(test_call_outcomes);
  MBT_RUN(test_step);
  MBT_RUN(test_composition);
  MBT_RUN(test_embedder_loop);
  MBT_RUN(test_free_from_callback);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return mbt_report();
}
