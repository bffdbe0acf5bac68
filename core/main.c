/* main.c — the moonbox program.
 *   moonbox script.lua [args...]          run a script as the main task
 *   moonbox run compose.lua script.lua ...  require("moonbox.compose").run(compose, script, ...)
 *   moonbox dump-config compose.lua       require("moonbox.compose").dump(compose)
 *   moonbox sandboxd [args...]            exec the sandboxd binary next to this program */
#include "moonbox.h"
#include <lauxlib.h>
#include <errno.h>
#include <limits.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MB_SOURCE_DIR
#define MB_SOURCE_DIR "."
#endif

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: moonbox script.lua [args...]\n"
          "       moonbox run compose.lua script.lua [args...]\n"
          "       moonbox dump-config compose.lua\n"
          "       moonbox sandboxd [args...]\n"
          "MOONBOX_HOME overrides where Lua modules are found (default %s)\n",
          MB_SOURCE_DIR);
  return rc;
}

static int exec_sandboxd(int argc, char **argv) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n < 0) { perror("moonbox: /proc/self/exe"); return 127; }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) slash[1] = '\0';
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%ssandboxd", slash ? self : "./");
  argv[0] = path;
  (void)argc;
  execv(path, argv);
  fprintf(stderr, "moonbox: cannot run %s: %s\n", path, strerror(errno));
  return 127;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* require(module)[fn](args...) at top level; compose drives the loop itself (mb.run).
 * A raise or a `nil, err` result is reported and gives exit status 1. */
static int call_compose(lua_State *L, const char *fn, int argc, char **argv) {
  lua_pushcfunction(L, traceback);
  int h = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moonbox.compose");
  if (lua_pcall(L, 1, 1, h) != LUA_OK) {
    fprintf(stderr, "moonbox: %s\n", lua_tostring(L, -1));
    return 1;
  }
  lua_getfield(L, -1, fn);
  if (!lua_isfunction(L, -1)) {
    fprintf(stderr, "moonbox: moonbox.compose has no function %s\n", fn);
    return 1;
  }
  for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
  if (lua_pcall(L, argc, 2, h) != LUA_OK) {
    fprintf(stderr, "moonbox: %s\n", lua_tostring(L, -1));
    return 1;
  }
  if (lua_isnil(L, -2) && !lua_isnil(L, -1)) {
    fprintf(stderr, "moonbox: %s\n", luaL_tolstring(L, -1, NULL));
    return 1;
  }
  if (lua_type(L, -2) == LUA_TNUMBER) return (int)lua_tointeger(L, -2);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr, 2);
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) return usage(stdout, 0);
  if (strcmp(cmd, "sandboxd") == 0) return exec_sandboxd(argc - 1, argv + 1);
  const char *home = getenv("MOONBOX_HOME");
  if (!home || !*home) home = MB_SOURCE_DIR;

  lua_State *L = luaL_newstate();
  if (!L) { fprintf(stderr, "moonbox: out of memory\n"); return 1; }
  luaL_openlibs(L);
  mb_lua_setup(L, home);
  int rc;
  if (strcmp(cmd, "run") == 0) {
    if (argc < 4) { lua_close(L); return usage(stderr, 2); }
    rc = call_compose(L, "run", argc - 2, argv + 2);
  } else if (strcmp(cmd, "dump-config") == 0) {
    if (argc != 3) { lua_close(L); return usage(stderr, 2); }
    rc = call_compose(L, "dump", 1, argv + 2);
  } else {
    rc = mb_run_file(L, cmd, argc - 2, argv + 2);
  }
  lua_close(L);
  return rc;
}
