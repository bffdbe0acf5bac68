/* main.c — the moonbox program: a runtime (runtime.c) on a loop of its own, handing argv to
 * the Lua command line (lua/moonbox/cli.lua). Two things are answered here, without Lua:
 * `moonbox sandboxd [--options...]` execs the sandboxd next to this program (sandboxd takes
 * options only: a word after `sandboxd` — start, stop, status — and --help are the Lua command
 * line's, for the background sandboxd), and `moonbox --version`.
 * The Lua modules are found, in order: $MOONBOX_HOME (a checkout, or an install prefix),
 * <this program's directory>/MB_BIN_TO_LMOD (an installed tree), then the source tree this
 * binary was built from. */
#include "moonbox.h"
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MB_SOURCE_DIR
#define MB_SOURCE_DIR "."
#endif
#ifndef MB_BIN_TO_LMOD
#define MB_BIN_TO_LMOD "../share/lua/5.4"
#endif

/* The directory of this program, with a trailing '/'; "" when unknown. */
static void self_dir(char *buf, size_t cap) {
  buf[0] = '\0';
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (!slash) return;
  slash[1] = '\0';
  snprintf(buf, cap, "%s", self);
}

static int exec_sandboxd(char **argv) {
  char dir[PATH_MAX], path[PATH_MAX + 16];
  self_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%ssandboxd", dir[0] ? dir : "./");
  argv[0] = path;
  execv(path, argv);
  fprintf(stderr, "moonbox: cannot run %s: %s\n", path, strerror(errno));
  return 127;
}

static int has_modules(const char *dir) {
  char p[PATH_MAX + 32];
  if (snprintf(p, sizeof p, "%s/moonbox/init.lua", dir) >= (int)sizeof p) return 0;
  return access(p, R_OK) == 0;
}

/* → 0 and the Lua module directory in buf, or -1 after printing why. */
static int lua_dir(char *buf, size_t cap) {
  const char *home = getenv("MOONBOX_HOME");
  if (home && *home) {
    const char *layouts[] = {"lua", "share/lua/5.4"};
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
      snprintf(buf, cap, "%s/%s", home, layouts[i]);
      if (has_modules(buf)) return 0;
    }
    fprintf(stderr, "moonbox: MOONBOX_HOME=%s holds no moonbox Lua modules (lua/moonbox or share/lua/5.4/moonbox)\n", home);
    return -1;
  }
  char dir[PATH_MAX];
  self_dir(dir, sizeof dir);
  if (dir[0]) {
    snprintf(buf, cap, "%s%s", dir, MB_BIN_TO_LMOD);
    if (has_modules(buf)) return 0;
  }
  snprintf(buf, cap, "%s/lua", MB_SOURCE_DIR);
  if (has_modules(buf)) return 0;
  fprintf(stderr, "moonbox: cannot find its Lua modules (looked in %s%s and %s/lua; set MOONBOX_HOME)\n",
          dir, MB_BIN_TO_LMOD, MB_SOURCE_DIR);
  return -1;
}

/* require("moonbox.cli").main(argv, { lua_dir = dir }) → exit status */
static int cli(lua_State *L, int argc, char **argv, const char *dir) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "moonbox.cli");
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    fprintf(stderr, "moonbox: cannot load moonbox.cli from %s: %s\n", dir, lua_tostring(L, -1));
    return 1;
  }
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc, 0);
  for (int i = 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_createtable(L, 0, 1);
  lua_pushstring(L, dir);
  lua_setfield(L, -2, "lua_dir");
  /* cli.main reports every failure itself; an error here is a bug in the command line. */
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    fprintf(stderr, "moonbox: %s\n", luaL_tolstring(L, -1, NULL));
    return 1;
  }
  return (int)lua_tointeger(L, -1);
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "sandboxd") == 0 &&
      (argc == 2 || (argv[2][0] == '-' && strcmp(argv[2], "--help") != 0 && strcmp(argv[2], "-h") != 0)))
    return exec_sandboxd(argv + 1);
  if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
    printf("moonbox %s\n", mb_version());
    return 0;
  }
  char dir[PATH_MAX + 32];
  if (lua_dir(dir, sizeof dir) != 0) return 1;
  mb_runtime_opts o = MB_RUNTIME_OPTS_INIT;
  o.lua_dir = dir;
  mb_runtime *rt;
  if (mb_runtime_new(&o, &rt) != MB_OK) {
    fprintf(stderr, "moonbox: %s\n", mb_runtime_errmsg(rt));
    mb_runtime_free(rt);
    return 1;
  }
  int rc = cli(mb_runtime_lua(rt), argc, argv, dir);
  mb_runtime_free(rt);
  return rc;
}
