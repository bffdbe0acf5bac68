/* lua_host.c — facts about and hooks into the host process:
 *   core.getpid() → pid;  core.exe_path() → the running executable | nil;  core.rss_bytes()
 *   core.environ() → the host's environment (name → value)
 *   core.lock_file(path [, create = true]) → lock (a descriptor: :fd(), :release()) | nil, err
 *       an exclusive flock(2) on path, taken without waiting: MB_BUSY while another open file
 *       holds it (its owner lives), MB_NOT_FOUND for a missing file when create is false
 *   core.secret_pipe(data) → pipe (a descriptor: :fd(), :close()) | nil, err: the read end of a
 *       pipe that already holds data (at most 4096 bytes) and whose write end is closed, for a
 *       child to inherit (spawn's inherit_fds) and read a secret from: never on a command line
 *       or in an environment, gone once read. Close it after the spawn.
 *   A descriptor (both of the above) is one owned fd: :fd() (raises once closed), :close() and
 *   :release() (the same; a lock's word), and the collector closes it too.
 *   core.signal(name, fn) → watch (:close()): fn() runs (protected, on the loop) whenever
 *       the process receives SIGTERM, SIGINT or SIGHUP; while any watch is open the signal no
 *       longer kills the process.
 *   core.isatty(fd) → is descriptor fd a terminal (progress bars)
 *   core.loop_info() → { handles = libuv handles, active = active ones, idle_timers = stopped
 *       timers (kept in a pool for reuse) }                                               */
#include "lua_moonbox.h"
#include "moonbox.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define MB_FD_MT "moonbox.fd"
#define MB_SIGNAL_MT "moonbox.signal"

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

/* ---- owned descriptors: a lock, a secret's pipe ---- */

typedef struct { int fd; } lfd;

static lfd *new_fd(lua_State *L) {
  lfd *k = lua_newuserdatauv(L, sizeof *k, 0);
  k->fd = -1;
  luaL_setmetatable(L, MB_FD_MT);
  return k;
}

static int fd_get(lua_State *L) {
  lfd *k = luaL_checkudata(L, 1, MB_FD_MT);
  if (k->fd < 0) return luaL_error(L, "descriptor is closed");
  lua_pushinteger(L, k->fd);
  return 1;
}

static int fd_close(lua_State *L) {
  lfd *k = luaL_checkudata(L, 1, MB_FD_MT);
  if (k->fd >= 0) close(k->fd); /* a lock goes with the last descriptor of its open file */
  k->fd = -1;
  return 0;
}

static int l_lock_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int create = lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2);
  lfd *k = new_fd(L);
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
  if (fd < 0) {
    int e = errno;
    return mb_lua_push_error(L, e == ENOENT ? "MB_NOT_FOUND" : "E2B_IO",
                             lua_pushfstring(L, "lock %s: %s", path, strerror(e)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    return mb_lua_push_error(L, e == EWOULDBLOCK ? "MB_BUSY" : "E2B_IO",
                             lua_pushfstring(L, "lock %s: %s", path, e == EWOULDBLOCK ? "held by a live process" : strerror(e)));
  }
  k->fd = fd;
  return 1;
}

/* ---- a secret handed to a child on a descriptor ---- */

#define MB_SECRET_MAX 4096   /* a pipe holds at least a page: the write never blocks */

static int l_secret_pipe(lua_State *L) {
  size_t n;
  const char *data = luaL_checklstring(L, 1, &n);
  if (n > MB_SECRET_MAX) return luaL_error(L, "secret_pipe: at most %d bytes", MB_SECRET_MAX);
  lfd *k = new_fd(L);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    int e = errno;
    return mb_lua_push_error(L, "E2B_IO", lua_pushfstring(L, "secret_pipe: %s", strerror(e)));
  }
  ssize_t w;
  do w = n ? write(p[1], data, n) : 0; while (w < 0 && errno == EINTR);
  int e = errno;
  close(p[1]);   /* the reader sees the end right after the data */
  if (w != (ssize_t)n) {
    close(p[0]);
    return mb_lua_push_error(L, "E2B_IO", lua_pushfstring(L, "secret_pipe: %s", w < 0 ? strerror(e) : "short write"));
  }
  k->fd = p[0];
  return 1;
}

/* ---- signals ---- */

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
  static const char *const names[] = {"SIGTERM", "SIGINT", "SIGHUP", NULL};
  static const int nums[] = {SIGTERM, SIGINT, SIGHUP};
  int i = luaL_checkoption(L, 1, NULL, names);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  mb_lua_host *h = mb_lua_host_of(L);
  lsignal *w = lua_newuserdatauv(L, sizeof *w, 0);
  memset(w, 0, sizeof *w);
  w->h = h;
  w->ref = LUA_NOREF;
  luaL_setmetatable(L, MB_SIGNAL_MT);
  w->sig = malloc(sizeof *w->sig);
  if (!w->sig) return luaL_error(L, "out of memory");
  uv_signal_init(mb_loop_uv(mb_lua_host_loop(h)), w->sig);
  w->sig->data = w;
  int rc = uv_signal_start(w->sig, on_signal, nums[i]);
  if (rc != 0) {
    uv_close((uv_handle_t *)w->sig, free_handle);
    w->sig = NULL;
    return mb_lua_push_error(L, "E2B_IO", uv_strerror(rc));
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
  static const luaL_Reg fdm[] = {{"fd", fd_get}, {"close", fd_close}, {"release", fd_close}, {NULL, NULL}};
  static const luaL_Reg fd_meta[] = {{"__gc", fd_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_FD_MT, fdm, fd_meta);
  static const luaL_Reg sg[] = {{"close", sg_close}, {NULL, NULL}};
  static const luaL_Reg sg_meta[] = {{"__gc", sg_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_SIGNAL_MT, sg, sg_meta);
  static const luaL_Reg f[] = {{"getpid", l_getpid}, {"exe_path", l_exe_path}, {"environ", l_environ},
                               {"rss_bytes", l_rss_bytes}, {"lock_file", l_lock_file}, {"secret_pipe", l_secret_pipe},
                               {"signal", l_signal}, {"loop_info", l_loop_info}, {"isatty", l_isatty},
                               {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
