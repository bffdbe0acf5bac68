/* lua_tty.c — the host's terminal, for an interactive session (`moonbox sandbox connect`):
 *   core.tty_raw(fd) → tty | nil, err: descriptor fd (a terminal) in raw mode — no line editing,
 *       no echo, no signal characters (^C is a byte like any other), no output processing,
 *       8-bit, a read returns as soon as one byte is there — with its settings before kept in
 *       the object. tty:restore() → true | nil, err puts them back (once: later calls do
 *       nothing and return true); the collector and a to-be-closed variable restore too.
 *       tty:fd() → the descriptor; tty:restored() → whether it was put back.
 *   core.tty_size(fd) → rows, cols | nil, err: the terminal's size (TIOCGWINSZ); 0 when the
 *       terminal has none set.
 *   core.tty_modes(fd) → { icanon =, echo =, isig =, opost = } | nil, err: the local modes
 *       that raw mode turns off (what a caller checks to tell raw from cooked).
 *   Not a terminal: E2B_INVALID naming the descriptor; other failures: E2B_IO with errno's
 *   words. isatty itself is core.isatty (lua_host.c); SIGWINCH is core.signal's. */
#include "lua_moonbox.h"
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#define MB_TTY_MT "moonbox.tty"

typedef struct {
  int fd;             /* -1 once restored */
  struct termios saved;
} ltty;

static int check_fd(lua_State *L, int idx) {
  return (int)mb_lua_check_int(L, idx, "tty", "fd", 0, INT_MAX);
}

/* nil, err for errno e of operation `what` on fd */
static int push_errno(lua_State *L, const char *what, int fd, int e) {
  if (e == ENOTTY || e == EINVAL)
    return mb_lua_push_error(L, "MB_INVALID", lua_pushfstring(L, "%s: descriptor %d is not a terminal", what, fd));
  return mb_lua_push_error(L, "MB_IO", lua_pushfstring(L, "%s: descriptor %d: %s", what, fd, strerror(e)));
}

static int get_attr(int fd, struct termios *t) {
  int rc;
  do rc = tcgetattr(fd, t); while (rc != 0 && errno == EINTR);
  return rc;
}

/* TCSADRAIN: what was written goes out under the old settings first. */
static int set_attr(int fd, const struct termios *t) {
  int rc;
  do rc = tcsetattr(fd, TCSADRAIN, t); while (rc != 0 && errno == EINTR);
  return rc;
}

static void make_raw(struct termios *t) {
  t->c_iflag &= ~(tcflag_t)(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
  t->c_oflag &= ~(tcflag_t)OPOST;
  t->c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
  t->c_cflag &= ~(tcflag_t)(CSIZE | PARENB);
  t->c_cflag |= CS8;
  t->c_cc[VMIN] = 1;
  t->c_cc[VTIME] = 0;
}

static int l_tty_raw(lua_State *L) {
  int fd = check_fd(L, 1);
  struct termios t;
  if (get_attr(fd, &t) != 0) return push_errno(L, "tty_raw", fd, errno);
  ltty *u = mb_lua_new_object(L, sizeof *u, 0, MB_TTY_MT);
  u->fd = -1;
  u->saved = t;
  make_raw(&t);
  if (set_attr(fd, &t) != 0) {
    int e = errno;
    (void)set_attr(fd, &u->saved); /* a partial change must not stay */
    return push_errno(L, "tty_raw", fd, e);
  }
  u->fd = fd;
  return 1;
}

static int tty_restore(lua_State *L) {
  ltty *u = luaL_checkudata(L, 1, MB_TTY_MT);
  if (u->fd < 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  int fd = u->fd;
  u->fd = -1;                    /* once, whatever happens: a closed terminal stays closed */
  if (set_attr(fd, &u->saved) != 0) return push_errno(L, "tty restore", fd, errno);
  lua_pushboolean(L, 1);
  return 1;
}

static int tty_gc(lua_State *L) {
  ltty *u = luaL_checkudata(L, 1, MB_TTY_MT);
  if (u->fd >= 0) {
    (void)set_attr(u->fd, &u->saved);
    u->fd = -1;
  }
  return 0;
}

static int tty_fd(lua_State *L) {
  ltty *u = luaL_checkudata(L, 1, MB_TTY_MT);
  if (u->fd < 0) return luaL_error(L, "tty: already restored");
  lua_pushinteger(L, u->fd);
  return 1;
}

static int tty_restored(lua_State *L) {
  ltty *u = luaL_checkudata(L, 1, MB_TTY_MT);
  lua_pushboolean(L, u->fd < 0);
  return 1;
}

static int l_tty_size(lua_State *L) {
  int fd = check_fd(L, 1);
  struct winsize ws;
  memset(&ws, 0, sizeof ws);
  int rc;
  do rc = ioctl(fd, TIOCGWINSZ, &ws); while (rc != 0 && errno == EINTR);
  if (rc != 0) return push_errno(L, "tty_size", fd, errno);
  lua_pushinteger(L, ws.ws_row);
  lua_pushinteger(L, ws.ws_col);
  return 2;
}

static int l_tty_modes(lua_State *L) {
  int fd = check_fd(L, 1);
  struct termios t;
  if (get_attr(fd, &t) != 0) return push_errno(L, "tty_modes", fd, errno);
  lua_createtable(L, 0, 4);
  lua_pushboolean(L, (t.c_lflag & ICANON) != 0);
  lua_setfield(L, -2, "icanon");
  lua_pushboolean(L, (t.c_lflag & ECHO) != 0);
  lua_setfield(L, -2, "echo");
  lua_pushboolean(L, (t.c_lflag & ISIG) != 0);
  lua_setfield(L, -2, "isig");
  lua_pushboolean(L, (t.c_oflag & OPOST) != 0);
  lua_setfield(L, -2, "opost");
  return 1;
}

void mb_lua_open_tty(lua_State *L) {
  static const luaL_Reg m[] = {{"restore", tty_restore}, {"fd", tty_fd}, {"restored", tty_restored}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", tty_gc}, {"__close", tty_gc}, {NULL, NULL}};
  mb_lua_new_class(L, MB_TTY_MT, m, meta);
  static const luaL_Reg f[] = {{"tty_raw", l_tty_raw}, {"tty_size", l_tty_size}, {"tty_modes", l_tty_modes}, {NULL, NULL}};
  luaL_setfuncs(L, f, 0);
}
