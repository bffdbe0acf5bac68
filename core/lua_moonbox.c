/* lua_moonbox.c — luaopen_moonbox_core: the `moonbox.core` table, filled by each lua_*.c. */
#include "lua_moonbox.h"
#include "moonbox.h"
#include <signal.h>

int luaopen_moonbox_core(lua_State *L) {
  /* A reader that went away (a child's stdin, a socket) must be an EPIPE error, never a
   * signal that kills the host: libuv leaves SIGPIPE to the application. Only a default
   * disposition is changed (an embedder's own choice stands); children get the default back
   * (libuv resets dispositions in every child, mbwrap in every program it runs). */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  lua_newtable(L);
  mb_lua_open_codec(L);
  mb_lua_open_loop(L);
  mb_lua_open_http(L);
  mb_lua_open_proc(L);
  mb_lua_open_procstream(L);
  mb_lua_open_host(L);
  return 1;
}

#include <lualib.h>
#include <stdio.h>

void mb_lua_setup(lua_State *L, const char *home) {
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s/?.lua;", home, home, home);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_moonbox_core);
  lua_setfield(L, -2, "moonbox.core");
  lua_pop(L, 2);
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Runs as `require("moonbox").run(chunk, ...)` under a traceback handler. */
static int run_main(lua_State *L) {
  int nargs = lua_gettop(L) - 1; /* chunk, args... */
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moonbox");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "run");
  lua_remove(L, -2);
  lua_insert(L, 1);
  lua_call(L, nargs + 1, 0);
  return 0;
}

int mb_run_file(lua_State *L, const char *path, int argc, char **argv) {
  int base = lua_gettop(L);
  lua_createtable(L, argc, 1);
  lua_pushstring(L, path);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, run_main);
  if (luaL_loadfile(L, path) != LUA_OK) {
    fprintf(stderr, "moonbox: %s\n", lua_tostring(L, -1));
    lua_settop(L, base);
    return 1;
  }
  for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
  int rc = lua_pcall(L, argc + 1, 0, base + 1);
  if (rc != LUA_OK) fprintf(stderr, "moonbox: %s\n", lua_tostring(L, -1));
  lua_settop(L, base);
  return rc == LUA_OK ? 0 : 1;
}
