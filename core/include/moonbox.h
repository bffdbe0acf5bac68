/* moonbox.h — embedding moonbox in a C program: libmoonbox (`pkg-config --cflags --libs moonbox`).
 * Self-contained: it compiles alone (-std=c11, nothing else included first); only pointers to
 * Lua's state and libuv's loop cross it, so include lua.h and uv.h yourself to use them.
 *
 * A runtime is one Lua state with moonbox loaded, on one libuv loop: yours, or one of its own.
 * On yours, moonbox adds its handles to the loop and runs its tasks from them while you run
 * the loop (uv_run) as you always do; on its own, drive it with mb_runtime_run (blocking) or
 * mb_runtime_step (never blocks). Everything happens on the loop's thread.
 *
 *   mb_runtime_opts o = MB_RUNTIME_OPTS_INIT;          // defaults: moonbox's own loop
 *   o.loop = my_loop;
 *   mb_runtime *rt;
 *   if (mb_runtime_new(&o, &rt) != MB_OK) { fprintf(stderr, "%s\n", mb_runtime_errmsg(rt)); ... }
 *   if (mb_runtime_open(rt, "compose.lua", NULL) != MB_OK) ...   // checked now; starts on the loop
 *   mb_runtime_load_file(rt, "harness.lua");          // pushes the file's function
 *   mb_task *t;
 *   mb_runtime_call(rt, 0, on_done, NULL, &t);         // harness(ctx) as a task
 *   uv_run(my_loop, UV_RUN_DEFAULT);                   // on_done(t) fires when it ends
 *   ...
 *   mb_runtime_close(rt, on_closed, NULL, &c);         // disposes the composition (a task too)
 *   mb_runtime_free(rt);                               // then let your loop run once more
 *
 * Errors: every int function returns MB_OK or an enum mb_err code (moonbox_errors.h). For
 * MB_E_FAILED the moonbox error's own code ("COMPOSE_INVALID", "POLICY_INVALID",
 * "E2B_SANDBOXD", ...) and its one-line message are in mb_runtime_errcode/errmsg (kept until the
 * next failing call); MB_E_LUA means Lua code raised, and the message holds the traceback. */
#ifndef MOONBOX_H
#define MOONBOX_H
#include <stddef.h>
#include "moonbox_errors.h"

/* lua.h's and uv.h's names for them (a typedef may be repeated): uv.h itself does not compile
 * under -std=c11 without POSIX feature macros, and nothing here needs more than the pointer. */
typedef struct lua_State lua_State;
typedef struct uv_loop_s uv_loop_t;

#define MOONBOX_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0": the version of the library (MOONBOX_VERSION is the header's). */
const char *mb_version(void);

typedef struct mb_runtime mb_runtime;
typedef struct mb_task mb_task;

/* The options of mb_runtime_new, versioned by their size: start from MB_RUNTIME_OPTS_INIT (or
 * mb_runtime_opts_init), which sets .size to the size of the struct this header declares and
 * every other field to its default, then set the fields you want. A library built with a later
 * moonbox.h, whose struct has more fields, reads those beyond your .size as their defaults. A
 * .size of 0 (a struct zeroed instead of initialized), one smaller than the size field or larger
 * than the library's own struct (a header newer than the library) is refused: MB_E_INVALID,
 * E2B_INVALID, the message saying which size. New fields are only ever added at the end. */
typedef struct mb_runtime_opts {
  /* sizeof(mb_runtime_opts) as the caller compiled it (MB_RUNTIME_OPTS_INIT sets it). */
  size_t size;
  /* The embedder's loop (borrowed: never run by moonbox except in mb_runtime_run/step and
   * mb_runtime_free, never closed), or NULL for a loop of moonbox's own. */
  uv_loop_t *loop;
  /* A directory holding moonbox/init.lua (an installed share/lua/5.4, or a checkout's lua/).
   * NULL: next to libmoonbox.so (<prefix>/share/lua/5.4), then libmoonbox's install prefix,
   * then the Lua path as LUA_PATH sets it. */
  const char *lua_dir;
} mb_runtime_opts;

/* Every field at its default, .size this header's: `mb_runtime_opts o = MB_RUNTIME_OPTS_INIT;`
 * (C and C++). A macro, not a library function: the size must be the caller's. */
#define MB_RUNTIME_OPTS_INIT { sizeof(mb_runtime_opts), NULL, NULL }

/* The same for an existing struct (one on the heap, say); inline, compiled into the caller. */
static inline void mb_runtime_opts_init(mb_runtime_opts *o) {
  const mb_runtime_opts d = MB_RUNTIME_OPTS_INIT;
  *o = d;
}

/* Makes a runtime. `opts`: NULL for every default, or options started from MB_RUNTIME_OPTS_INIT
 * (a bad opts->size is MB_E_INVALID). *out is set whenever memory could be allocated, even on
 * failure (then it holds the error: read it with mb_runtime_errmsg, then mb_runtime_free it). */
int mb_runtime_new(const mb_runtime_opts *opts, mb_runtime **out);

/* Loads a composition: the file, its plugins' config and every policy are checked now (an
 * error is MB_E_FAILED with COMPOSE_INVALID or POLICY_INVALID, one line naming file:line);
 * the plugins then start on the loop. `policies`: NULL or a NULL-terminated list of
 * "CONCERN=FILE" (as `moonbox run --policy`), applied over the composition's own.
 * MB_E_BUSY while a composition is open. */
int mb_runtime_open(mb_runtime *rt, const char *composition, const char *const *policies);

/* Re-reads the open composition's policy files; the next spawn or terminal uses the new values.
 * A set that fails validation is refused (MB_E_FAILED, POLICY_INVALID) and the old one kept. */
int mb_runtime_reload_policies(mb_runtime *rt);

/* Pushes the function of a Lua file (its chunk) onto the runtime's Lua stack. A missing or
 * unreadable file, or a syntax error: MB_E_FAILED, nothing pushed. */
int mb_runtime_load_file(mb_runtime *rt, const char *path);

/* Called on the loop's thread, outside every Lua frame, once `task` has finished. */
typedef void (*mb_task_cb)(mb_task *task, void *user);

/* Pops a function and `nargs` arguments above it from the runtime's Lua stack and starts
 * fn(ctx, args...) as a task; ctx is the open composition's (the task waits until it has
 * started; without a composition, ctx is nil). A function that returns nil, err fails.
 * done (may be NULL) fires when the task ends; free the task with mb_task_free. */
int mb_runtime_call(mb_runtime *rt, int nargs, mb_task_cb done, void *user, mb_task **out);

/* Disposes the open composition as a task: unfinished calls are canceled (their next
 * yielding call returns MB_CANCELED), given the timeouts policy's signal_grace_ms, then the
 * plugins are disposed in reverse order (the sandbox deleted, a local sandboxd stopped). */
int mb_runtime_close(mb_runtime *rt, mb_task_cb done, void *user, mb_task **out);

/* Drives the loop until `task` has finished, firing the done callbacks of every task that
 * ends meanwhile; → mb_task_status(task). MB_E_BUSY from inside a done callback (the loop is
 * already running). A task that nothing can wake: MB_E_FAILED. */
int mb_runtime_run(mb_runtime *rt, mb_task *task);

/* Runs the tasks that are ready and one turn of the loop without blocking, and fires done
 * callbacks. → MB_OK, MB_E_BUSY (inside a callback), or MB_E_LUA / MB_E_FAILED when one of
 * moonbox's loop callbacks failed (a bug). */
int mb_runtime_step(mb_runtime *rt);

/* The runtime's Lua state (push functions and arguments for mb_runtime_call) and its loop. */
lua_State *mb_runtime_lua(mb_runtime *rt);
uv_loop_t *mb_runtime_loop(mb_runtime *rt);

/* The last failure: the moonbox error code ("OK" when none) and a message ("" when none). */
const char *mb_runtime_errcode(const mb_runtime *rt);
const char *mb_runtime_errmsg(const mb_runtime *rt);

/* Disposes what is still open (driving the loop; skipped, and the sandbox left to its lease,
 * when called from inside a done callback), closes the Lua state and every handle moonbox has.
 * On a borrowed loop the handles finish closing the next time the embedder runs it; unfreed
 * tasks become invalid. NULL is ignored. */
void mb_runtime_free(mb_runtime *rt);

/* 1 once the task has finished. */
int mb_task_done(const mb_task *task);
/* MB_OK (returned), MB_E_FAILED (a moonbox error: mb_task_errcode tells which, e.g.
 * MB_CANCELED), MB_E_LUA (raised: the message is the traceback), MB_E_BUSY (still running). */
int mb_task_status(const mb_task *task);
/* A finished task's failure: the moonbox error code ("OK" when it succeeded or still runs)
 * and its message ("" when none; the traceback for MB_E_LUA). */
const char *mb_task_errcode(const mb_task *task);
const char *mb_task_errmsg(const mb_task *task);
/* Pushes a finished task's results onto the runtime's Lua stack; → how many (0 otherwise). */
int mb_task_push_results(mb_task *task);
/* Cancels the task: its next yielding call returns MB_CANCELED. MB_OK, or MB_E_INVALID when
 * it has finished. */
int mb_task_cancel(mb_task *task);
/* Releases the task (a running one goes on, its callback no longer fires). NULL is ignored. */
void mb_task_free(mb_task *task);

/* Bringing your own lua_State instead of a runtime: call mb_lua_use_loop (optional, before the
 * first require) and preload luaopen_moonbox_core as "moonbox.core"; then require "moonbox"
 * with the Lua modules on package.path, and drive tasks with require("moonbox").run. */
int mb_lua_use_loop(lua_State *L, uv_loop_t *uv);
int luaopen_moonbox_core(lua_State *L);

#ifdef __cplusplus
}
#endif
#endif
