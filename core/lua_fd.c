/* lua_fd.c — class `moonbox.fd`: one owned descriptor.
 *   core.lock_file(path [, create = true]) → lock (a descriptor: :fd(), :release()) | nil, err
 *       an exclusive flock(2) on path, taken without waiting: MB_BUSY while another open file
 *       holds it (its owner lives), MB_NOT_FOUND for a missing file when create is false
 *   core.secret_pipe(data) → pipe (a descriptor: :fd(), :close()) | nil, err: the read end of a
 *       pipe that already holds data (at most 4096 bytes) and whose write end is closed, for a
 *       child to inherit (spawn's inherit_fds) and read a secret from: never on a command line
 *       or in an environment, gone once read. Close it after the spawn.
 *   A descriptor (both of the above) is one owned fd: :fd() (raises once closed), :close() and
 *   :release() (the same; a lock's word), and the collector closes it too. */
#include "lua_moonbox.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define MB_FD_MT "moonbox.fd"

typedef struct { int fd; } lfd;

static lfd *new_fd(lua_State *L) {
  lfd *k = mb_lua_new_object(L, sizeof *k, 0, MB_FD_MT);
  k->fd = -1;
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

/* A secret handed to a child on a descriptor. */
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

void mb_lua_open_fd(lua_State *L) {
  static const luaL_Reg m[] = {{"fd", fd_get}, {"close", fd_close}, {"release", fd_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", fd_close}, {NULL, NULL}};
  mb_lua_new_class(L, MB_FD_MT, m, meta);
  static const luaL_Reg f[] = {{"lock_file", l_lock_file}, {"secret_pipe", l_secret_pipe}, {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
