/* lua_host.c — facts about the host process:
 *   core.getpid() → pid;  core.exe_path() → the running executable | nil;  core.rss_bytes()
 *   core.environ() → the host's environment (name → value)
 *   core.isatty(fd) → is descriptor fd a terminal (progress bars)
 *   core.loop_info() → { handles = libuv handles, active = active ones, idle_timers = stopped
 *       timers (kept in a pool for reuse) }
 * Its classes have files of their own: lock files and secret pipes (lua_fd.c), signal watches
 * (lua_signal.c), the host's resolver (lua_resolve.c). */
#include "lua_moonbox.h"
#include "moonbox.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int l_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

extern char **environ;

/* The host's environment as a table (name → value). */
static int l_environ(lua_State *L) {
  lua_newtable(L);
  for (char **e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq || eq == *e) continue;
    lua_pushlstring(L, *e, (size_t)(eq - *e));
    lua_pushstring(L, eq + 1);
    lua_rawset(L, -3);
  }
  return 1;
}

static int l_exe_path(lua_State *L) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf);
  if (n <= 0 || (size_t)n >= sizeof buf) return 0;
  lua_pushlstring(L, buf, (size_t)n);
  return 1;
}

/* Resident set size from /proc/self/statm (pages × page size). */
static int l_rss_bytes(lua_State *L) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long size = 0, rss = 0;
  int ok = f && fscanf(f, "%lld %lld", &size, &rss) == 2;
  if (f) fclose(f);
  if (!ok) return 0;
  lua_pushinteger(L, (lua_Integer)(rss * sysconf(_SC_PAGESIZE)));
  return 1;
}

/* [0] all, [1] active, [2] idle timers (a pool keeps stopped timers for reuse) */
static void count_handle(uv_handle_t *hd, void *arg) {
  long long *c = arg;
  c[0]++;
  if (uv_is_active(hd)) c[1]++;
  else if (hd->type == UV_TIMER) c[2]++;
}

static int l_isatty(lua_State *L) {
  lua_Integer fd = luaL_checkinteger(L, 1);
  lua_pushboolean(L, fd >= 0 && fd <= INT_MAX && isatty((int)fd));
  return 1;
}

static int l_loop_info(lua_State *L) {
  long long c[3] = {0, 0, 0};
  uv_walk(mb_loop_uv(mb_lua_host_loop(mb_lua_host_of(L))), count_handle, c);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)c[0]);
  lua_setfield(L, -2, "handles");
  lua_pushinteger(L, (lua_Integer)c[1]);
  lua_setfield(L, -2, "active");
  lua_pushinteger(L, (lua_Integer)c[2]);
  lua_setfield(L, -2, "idle_timers");
  return 1;
}

void mb_lua_open_host(lua_State *L) {
  static const luaL_Reg f[] = {{"getpid", l_getpid}, {"exe_path", l_exe_path}, {"environ", l_environ},
                               {"rss_bytes", l_rss_bytes}, {"loop_info", l_loop_info}, {"isatty", l_isatty},
                               {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
