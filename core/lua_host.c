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
 *       the process receives SIGTERM, SIGINT, SIGHUP or SIGWINCH (the terminal's size changed:
 *       core.tty_size); while any watch is open the signal no longer kills the process.
 *   core.isatty(fd) → is descriptor fd a terminal (progress bars)
 *   core.loop_info() → { handles = libuv handles, active = active ones, idle_timers = stopped
 *       timers (kept in a pool for reuse) }
 *   core.getaddrinfo(name, fn) → req: the host's resolver (uv_getaddrinfo, off the loop's
 *       thread); fn() runs (protected, on the loop) when it is done; req:result() → list of
 *       address strings (each once, in the resolver's order) | nil, err (E2B_DNS); req:cancel().
 *       A request collected before it is done is abandoned safely.                         */
#include "lua_moonbox.h"
#include "moonbox.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define MB_FD_MT "moonbox.fd"
#define MB_SIGNAL_MT "moonbox.signal"
#define MB_RESOLVE_MT "moonbox.resolve"

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
    return mb_lua_push_error(L, e == ENOENT ? "MB_NOT_FOUND" : "MB_IO",
                             lua_pushfstring(L, "lock %s: %s", path, strerror(e)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    return mb_lua_push_error(L, e == EWOULDBLOCK ? "MB_BUSY" : "MB_IO",
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
    return mb_lua_push_error(L, "MB_IO", lua_pushfstring(L, "secret_pipe: %s", strerror(e)));
  }
  ssize_t w;
  do w = n ? write(p[1], data, n) : 0; while (w < 0 && errno == EINTR);
  int e = errno;
  close(p[1]);   /* the reader sees the end right after the data */
  if (w != (ssize_t)n) {
    close(p[0]);
    return mb_lua_push_error(L, "MB_IO", lua_pushfstring(L, "secret_pipe: %s", w < 0 ? strerror(e) : "short write"));
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
  static const char *const names[] = {"SIGTERM", "SIGINT", "SIGHUP", "SIGWINCH", NULL};
  static const int nums[] = {SIGTERM, SIGINT, SIGHUP, SIGWINCH};
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

/* ---- the host's resolver ---- */

/* The libuv request outlives its userdata when the userdata is collected first: `ud` is then
 * NULL and the completion frees it. */
typedef struct lresolve_req {
  uv_getaddrinfo_t req;
  struct lresolve *ud;
  mb_lua_host *h;
  int ref;                         /* the Lua callback (unreferenced by the userdata) */
  int done, status;
  struct addrinfo *res;
} lresolve_req;

typedef struct lresolve {
  lresolve_req *r;
} lresolve;

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  lresolve_req *r = req->data;
  r->done = 1;
  r->status = status;
  r->res = res;
  if (!r->ud) { /* abandoned */
    if (res) uv_freeaddrinfo(res);
    free(r);
    return;
  }
  mb_lua_host_call(r->h, r->ref); /* last: the callback may collect the userdata */
}

static int l_getaddrinfo(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  mb_lua_host *h = mb_lua_host_of(L);
  lresolve *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->r = NULL;
  luaL_setmetatable(L, MB_RESOLVE_MT);
  lresolve_req *r = calloc(1, sizeof *r);
  if (!r) return luaL_error(L, "out of memory");
  r->h = h;
  r->ud = u;
  r->ref = LUA_NOREF;
  r->req.data = r;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = uv_getaddrinfo(mb_loop_uv(mb_lua_host_loop(h)), &r->req, on_resolved, name, NULL, &hints);
  if (rc != 0) {
    free(r);
    return mb_lua_push_error(L, "E2B_DNS", lua_pushfstring(L, "resolve %s: %s", name, uv_strerror(rc)));
  }
  u->r = r;
  lua_pushvalue(L, 2);
  r->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 1;
}

static int rs_result(lua_State *L) {
  lresolve *u = luaL_checkudata(L, 1, MB_RESOLVE_MT);
  if (!u->r || !u->r->done) return luaL_error(L, "resolve: not done (wait for its callback)");
  lresolve_req *r = u->r;
  if (r->status != 0) return mb_lua_push_error(L, "E2B_DNS", uv_strerror(r->status));
  lua_newtable(L);
  lua_Integer n = 0;
  for (struct addrinfo *a = r->res; a; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN];
    const void *src = a->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                    : a->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr : NULL;
    if (!src || !inet_ntop(a->ai_family, src, buf, sizeof buf)) continue;
    int seen = 0;
    for (lua_Integer i = 1; i <= n && !seen; i++) {
      lua_rawgeti(L, -1, i);
      seen = !strcmp(lua_tostring(L, -1), buf);
      lua_pop(L, 1);
    }
    if (seen) continue;
    lua_pushstring(L, buf);
    lua_rawseti(L, -2, ++n);
  }
  return 1;
}

/* Abandons the request (or frees a finished one); the callback is not called after it. */
static int rs_cancel(lua_State *L) {
  lresolve *u = luaL_checkudata(L, 1, MB_RESOLVE_MT);
  lresolve_req *r = u->r;
  if (!r) return 0;
  u->r = NULL;
  luaL_unref(L, LUA_REGISTRYINDEX, r->ref);
  r->ref = LUA_NOREF;
  if (r->done) {
    if (r->res) uv_freeaddrinfo(r->res);
    free(r);
  } else {
    r->ud = NULL;                        /* on_resolved frees it */
    uv_cancel((uv_req_t *)&r->req);
  }
  return 0;
}

void mb_lua_open_host(lua_State *L) {
  static const luaL_Reg fdm[] = {{"fd", fd_get}, {"close", fd_close}, {"release", fd_close}, {NULL, NULL}};
  static const luaL_Reg fd_meta[] = {{"__gc", fd_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_FD_MT, fdm, fd_meta);
  static const luaL_Reg sg[] = {{"close", sg_close}, {NULL, NULL}};
  static const luaL_Reg sg_meta[] = {{"__gc", sg_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_SIGNAL_MT, sg, sg_meta);
  static const luaL_Reg rs[] = {{"result", rs_result}, {"cancel", rs_cancel}, {NULL, NULL}};
  static const luaL_Reg rs_meta[] = {{"__gc", rs_cancel}, {NULL, NULL}};
  mb_lua_new_class(L, MB_RESOLVE_MT, rs, rs_meta);
  static const luaL_Reg f[] = {{"getpid", l_getpid}, {"exe_path", l_exe_path}, {"environ", l_environ},
                               {"rss_bytes", l_rss_bytes}, {"lock_file", l_lock_file}, {"secret_pipe", l_secret_pipe},
                               {"signal", l_signal}, {"loop_info", l_loop_info}, {"isatty", l_isatty},
                               {"getaddrinfo", l_getaddrinfo},
                               {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
