/* moonbox.h — everything an embedder needs.
 *
 *   lua_State *L = luaL_newstate(); luaL_openlibs(L);
 *   mb_lua_use_loop(L, my_uv_loop);         // optional: hand over your libuv loop
 *   mb_lua_setup(L, "/path/to/moonbox");    // package.path + preload of moonbox.core
 *   int rc = mb_run_file(L, "script.lua", argc, argv);   // runs it as the main task
 *
 * moonbox drives the loop itself inside mb.run (uv_run ONCE at a time), so a handed-over loop
 * must not be run concurrently by the embedder while a script runs. */
#ifndef MOONBOX_H
#define MOONBOX_H
#include <lua.h>
#include <uv.h>
#include "loop.h"

typedef struct mb_lua_host mb_lua_host;

/* Uses uv (borrowed, never closed) for this Lua state; call before the first require. */
int mb_lua_use_loop(lua_State *L, uv_loop_t *uv);
/* The host of L (created on first use, closed with the state): its loop and callback plumbing. */
mb_lua_host *mb_lua_host_of(lua_State *L);
mb_loop *mb_lua_host_loop(mb_lua_host *h);
/* Calls the Lua function at registry ref (no arguments) in protected mode on the thread that
 * drives the loop. An error is recorded, stops the loop, and is returned by core.run. Does
 * nothing when no thread is driving the loop. */
void mb_lua_host_call(mb_lua_host *h, int ref);

/* Sets package.path to home/lua/?.lua;home/lua/?/init.lua;home/?.lua and preloads moonbox.core. */
void mb_lua_setup(lua_State *L, const char *home);
int luaopen_moonbox_core(lua_State *L);

/* Runs a Lua file as the main task (require("moonbox").run); argv becomes `arg` and `...`.
 * Returns 0, or 1 after printing the error and its traceback to stderr. */
int mb_run_file(lua_State *L, const char *path, int argc, char **argv);
#endif
