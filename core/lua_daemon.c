/* lua_daemon.c — what managing a long-lived background program from Lua needs (the per-user
 * background sandboxd, lua/moonbox/e2b/background.lua):
 *   core.daemon{ argv = { path, args... }, log = path, fds = { fd... }, env = { NAME = value } }
 *       → pid | nil, err: starts argv[1] (an absolute path) detached: a double fork (it is not
 *       this process's child, and nothing here has to reap it), in a session of its own, stdin
 *       /dev/null, stdout and stderr appended to `log` (created 0600), fds[k] as its descriptor
 *       2 + k, nothing else open, every signal at its default and unblocked, the environment
 *       `env` (default: this process's). The pid is the program's own once exec succeeded; a
 *       failed exec is SPAWN_FAILED with its errno.
 *   core.getuid() → the real user id
 *   core.lstat(path) → { uid, mode (permission bits), type = "dir"|"file"|"link"|"other" }
 *       | nil, err (MB_NOT_FOUND, E2B_IO)
 *   core.mkdir(path, mode) → true | nil, err (MB_EXISTS when something is there already)
 *   core.write_private(path, data) → true | nil, err: a new file (never an existing one, never
 *       through a symbolic link) of mode 0600 holding data
 *   core.kill(pid, signal name) → true | nil, err (MB_NOT_FOUND: no such process)
 *   core.readlink(path) → target | nil, err                                                */
#include "lua_moonbox.h"
#include "moonbox.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>


extern char **environ;

static int push_errno(lua_State *L, const char *what, const char *path, int e) {
  const char *code = e == ENOENT || e == ESRCH ? "MB_NOT_FOUND" : e == EEXIST ? "MB_EXISTS" : "MB_IO";
  return mb_lua_push_error(L, code, lua_pushfstring(L, "%s %s: %s", what, path, strerror(e)));
}

/* Closes every descriptor from `lo` up, but `keep`. Only async-signal-safe calls. */
static void close_from(int lo, int keep) {
  if (keep >= lo) {
    if (keep > lo && syscall(SYS_close_range, (unsigned)lo, (unsigned)keep - 1, 0u) != 0)
      for (int fd = lo; fd < keep; fd++) close(fd);
    lo = keep + 1;
  }
  if (syscall(SYS_close_range, (unsigned)lo, ~0u, 0u) == 0) return;
  struct rlimit rl;
  int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
  for (int fd = lo; fd < max; fd++) close(fd);
}

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    c += w;
    n -= (size_t)w;
  }
}

/* The grandchild: its descriptors in place, then exec. Never returns. */
static void become(char *const *argv, char *const *envp, int nullfd, int logfd, const int *fds, int nfds, int report) {
  int base = 3 + nfds;
  /* everything moved above the slots first, so that placing one never clobbers another */
  int rp = fcntl(report, F_DUPFD_CLOEXEC, base);
  int hn = fcntl(nullfd, F_DUPFD_CLOEXEC, base), hl = fcntl(logfd, F_DUPFD_CLOEXEC, base);
  int hf[MB_LUA_MAX_FDS];
  int bad = rp < 0 || hn < 0 || hl < 0;
  for (int i = 0; i < nfds && !bad; i++) bad = (hf[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, base)) < 0;
  if (!bad) bad = dup2(hn, 0) < 0 || dup2(hl, 1) < 0 || dup2(hl, 2) < 0;
  for (int i = 0; i < nfds && !bad; i++) bad = dup2(hf[i], 3 + i) < 0;
  int e = errno;
  if (bad) {
    write_all(rp >= 0 ? rp : report, &e, sizeof e);
    _exit(127);
  }
  close_from(base, rp);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++) sigaction(s, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(argv[0], argv, envp);
  e = errno;
  write_all(rp, &e, sizeof e);
  _exit(127);
}

static int l_daemon(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  char **argv = mb_lua_argv(L, 1, "daemon");
  if (argv[0][0] != '/') return luaL_error(L, "daemon: argv[1] must be an absolute path");
  int fds[MB_LUA_MAX_FDS];
  int nfds = (int)mb_lua_opt_fds(L, 1, "daemon", "fds", fds);
  char **envp = mb_lua_env(L, 1, "daemon"); /* NAME=value strings; default ours */
  if (!envp) envp = environ;
  const char *log = mb_lua_opt_str(L, 1, "daemon", "log", NULL);
  if (!log) return luaL_error(L, "daemon: log is required");
  int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (logfd < 0) return push_errno(L, "log", log, errno);
  int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nullfd < 0) {
    int e = errno;
    close(logfd);
    return push_errno(L, "open", "/dev/null", e);
  }
  int rep[2];
  if (pipe2(rep, O_CLOEXEC) != 0) {
    int e = errno;
    close(logfd);
    close(nullfd);
    return push_errno(L, "pipe", "", e);
  }
  pid_t first = fork();
  if (first == 0) {
    close(rep[0]);
    if (setsid() < 0) _exit(126);
    pid_t second = fork();
    if (second == 0) become(argv, envp, nullfd, logfd, fds, nfds, rep[1]);
    write_all(rep[1], &second, sizeof second);
    _exit(second < 0 ? 126 : 0);
  }
  int e = errno;
  close(rep[1]);
  close(logfd);
  close(nullfd);
  if (first < 0) {
    close(rep[0]);
    return push_errno(L, "fork", argv[0], e);
  }
  int st;
  while (waitpid(first, &st, 0) < 0 && errno == EINTR) {}
  pid_t pid = -1;
  int child_errno = 0;
  ssize_t r;
  do r = read(rep[0], &pid, sizeof pid); while (r < 0 && errno == EINTR);
  if (r != (ssize_t)sizeof pid || pid < 0) {
    close(rep[0]);
    return mb_lua_push_error(L, "SPAWN_FAILED", lua_pushfstring(L, "%s: cannot fork", argv[0]));
  }
  /* the exec's outcome: the pipe closes on success, carries errno on failure */
  do r = read(rep[0], &child_errno, sizeof child_errno); while (r < 0 && errno == EINTR);
  close(rep[0]);
  if (r == (ssize_t)sizeof child_errno) {
    return mb_lua_push_error(L, "SPAWN_FAILED", lua_pushfstring(L, "%s: %s", argv[0], strerror(child_errno)));
  }
  lua_pushinteger(L, (lua_Integer)pid);
  return 1;
}

static int l_getuid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getuid());
  return 1;
}

static int l_lstat(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (lstat(path, &st) != 0) return push_errno(L, "stat", path, errno);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)st.st_uid);
  lua_setfield(L, -2, "uid");
  lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  lua_pushstring(L, S_ISDIR(st.st_mode) ? "dir" : S_ISREG(st.st_mode) ? "file" : S_ISLNK(st.st_mode) ? "link" : "other");
  lua_setfield(L, -2, "type");
  return 1;
}

static int l_mkdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer mode = luaL_checkinteger(L, 2);
  if (mkdir(path, (mode_t)(mode & 07777)) != 0) return push_errno(L, "mkdir", path, errno);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_write_private(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t n;
  const char *data = luaL_checklstring(L, 2, &n);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return push_errno(L, "create", path, errno);
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, data + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      close(fd);
      unlink(path);
      return push_errno(L, "write", path, e);
    }
    off += (size_t)w;
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(path);
    return push_errno(L, "write", path, e);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_kill(lua_State *L) {
  static const char *const names[] = {"SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "0", NULL};
  static const int nums[] = {SIGTERM, SIGKILL, SIGINT, SIGHUP, 0};
  lua_Integer pid = mb_lua_check_int(L, 1, "kill", "pid", 1, INT_MAX);
  int s = luaL_checkoption(L, 2, NULL, names);
  if (kill((pid_t)pid, nums[s]) != 0) {
    int e = errno;
    return mb_lua_push_error(L, e == ESRCH ? "MB_NOT_FOUND" : "MB_IO",
                             lua_pushfstring(L, "kill %d: %s", (int)pid, strerror(e)));
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_readlink(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  char buf[PATH_MAX];
  ssize_t n = readlink(path, buf, sizeof buf);
  if (n < 0) return push_errno(L, "readlink", path, errno);
  if ((size_t)n >= sizeof buf) return push_errno(L, "readlink", path, ENAMETOOLONG);
  lua_pushlstring(L, buf, (size_t)n);
  return 1;
}

void mb_lua_open_daemon(lua_State *L) {
  static const luaL_Reg f[] = {{"daemon", l_daemon}, {"getuid", l_getuid}, {"lstat", l_lstat}, {"mkdir", l_mkdir},
                               {"write_private", l_write_private}, {"kill", l_kill}, {"readlink", l_readlink},
                               {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
