/* `mbwrap run`: start one program in its own session under a child subreaper and report everything
 * about it in band on stdout (PROTOCOL.md). One thread, one poll loop over a signalfd, the program's
 * stdout/stderr pipes, the exec-status pipe and our own stdout. */
#include "mbwrap.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Room always kept free in the output buffer for control frames (a spawn error is the largest). */
#define CTL_RESERVE 4096
#define ERRMSG_MAX 1024
/* Re-scan interval while killing: new descendants forked between a scan and its kills are caught. */
#define KILL_RESCAN_MS 20

struct src {
  int fd; /* read end of the program's pipe; -1 once closed */
  char kind;
  const char *spill_path;
  uint64_t spill_max;
  int spill_fd;
  int has_keep;       /* -k: remove the spill at the end when the stream stayed <= keep_min */
  uint64_t keep_min;
  uint64_t total;
  size_t pre_exit; /* bytes still queued in the pipe when the leader was reaped */
};

struct run {
  struct src src[2];
  struct obuf ob;
  int sfd, errfd, gofd;
  pid_t leader;
  int reaped, status, exit_sent, spawn_failed, no_children, finished, out_dead;
  int term; /* 0 none, 1 TERM sent (waiting for the grace), 2 killing */
  int64_t kill_at, next_rescan;
  uint64_t grace_ms;
  int stdout_flags; /* restored at exit when we made stdout non-blocking */
  int in_fd;        /* write end of the program's stdin pipe (-i), -1 when none or finished */
  unsigned char *in_buf;
  size_t in_len, in_off;
  const char *env_missing; /* a -K name absent from our own environment */
};

static void usage(void) {
  fputs("usage: mbwrap run [-g GRACE_MS] [-o SPILL:MAX] [-e SPILL:MAX] [-k o|e:MIN]... [-i BASE64]\n"
        "                  [-E NAME=VALUE]... [-K NAME]..."
        "                  -- PROGRAM [ARG]...\n",
        stderr);
}

/* ---- output ---- */

static void ctl(struct run *r, const char *fmt, const char *a, long n) {
  if (r->out_dead) return;
  /* CTL_RESERVE guarantees room: data is only read while that much is free. */
  if (a)
    ob_ctl(&r->ob, fmt, n, a);
  else
    ob_ctl(&r->ob, fmt, n);
}

static void spawn_error(struct run *r, int err, const char *msg) {
  char enc[4 * ((ERRMSG_MAX + 2) / 3) + 1];
  size_t len = strlen(msg);
  if (len > ERRMSG_MAX) len = ERRMSG_MAX;
  enc[mb_b64_encode((const unsigned char *)msg, len, enc)] = 0;
  r->spawn_failed = 1;
  ctl(r, "!spawn-error %ld %s", enc, err);
}

/* ---- spill files ---- */

static void spill_drop(struct src *s, const char *why) {
  if (s->spill_fd < 0) return;
  /* Truncate first so a reader holding the path open sees no partial stream either. */
  if (ftruncate(s->spill_fd, 0) < 0) {
  }
  close(s->spill_fd);
  s->spill_fd = -1;
  unlink(s->spill_path);
  /* Raw diagnostic on the wrapper's own stderr (never the frame stream): see PROTOCOL.md. */
  fprintf(stderr, "mbwrap: %s spill removed: %s\n", s->kind == 'o' ? "stdout" : "stderr", why);
}

static void spill_write(struct src *s, const char *buf, size_t n) {
  if (s->spill_fd < 0) return;
  if (s->total > s->spill_max) {
    spill_drop(s, "stream exceeded its cap");
    return;
  }
  while (n) {
    ssize_t w = write(s->spill_fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      spill_drop(s, w < 0 ? strerror(errno) : "short write");
      return;
    }
    buf += w;
    n -= (size_t)w;
  }
}

static int spill_open(struct src *s) {
  if (!s->spill_path) return 0;
  s->spill_fd = open(s->spill_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (s->spill_fd < 0 && errno == ENOENT) {
    /* The spill's own directory (one level, mode 0700) is made on first use: the host keeps its
     * spills in one directory it can sweep with a single request. */
    char *slash = strrchr(s->spill_path, '/');
    if (slash && slash != s->spill_path) {
      *slash = 0;
      int rc = mkdir(s->spill_path, 0700);
      *slash = '/';
      if (rc < 0 && errno != EEXIST) {
        errno = ENOENT;
        return -1;
      }
      s->spill_fd = open(s->spill_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
  }
  if (s->spill_fd < 0) return -1;
  if (fchmod(s->spill_fd, 0600) < 0) return -1; /* an existing file keeps its mode otherwise */
  return 0;
}

/* The stream is complete: a spill nobody needs (the program never ran, or the stream stayed
 * within -k's MIN, i.e. the host's in-memory tail holds it whole) is removed quietly. */
static void spill_finish(struct run *r, struct src *s) {
  if (s->spill_fd < 0) return;
  if (!r->spawn_failed && !(s->has_keep && s->total <= s->keep_min)) return;
  close(s->spill_fd);
  s->spill_fd = -1;
  unlink(s->spill_path);
}

/* ---- program pipes ---- */

static void src_close(struct src *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->pre_exit = 0;
}

/* The stream's pipe holds at least a whole frame's worth of bytes. */
static int src_holds_frame(const struct src *s) {
  int avail = 0;
  return ioctl(s->fd, FIONREAD, &avail) == 0 && avail >= MB_FRAME_RAW;
}

/* Reads what the pipe holds, up to one whole frame (several reads when the program writes in
 * small pieces), and frames it: a busy stream travels in frames of MB_FRAME_RAW bytes, a quiet
 * one as soon as its bytes are there. */
static void src_read(struct run *r, struct src *s) {
  char buf[MB_FRAME_RAW];
  size_t have = 0;
  while (have < sizeof buf) {
    ssize_t n = read(s->fd, buf + have, sizeof buf - have);
    if (n > 0) {
      have += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      /* With no child left, a still-open write end is held outside the tree: do not wait for it. */
      if (r->no_children && have == 0) src_close(s);
      break;
    }
    src_close(s);   /* EOF or an error: what was read is still framed below */
    break;
  }
  if (have == 0) return;
  s->total += (uint64_t)have;
  s->pre_exit = s->pre_exit > have ? s->pre_exit - have : 0;
  spill_write(s, buf, have);
  if (!r->out_dead) ob_frame(&r->ob, s->kind, buf, have);
}

/* ---- stdin (-i) ---- */

static void in_close(struct run *r) {
  if (r->in_fd >= 0) close(r->in_fd);
  r->in_fd = -1;
}

static void in_write(struct run *r) {
  while (r->in_off < r->in_len) {
    ssize_t w = write(r->in_fd, r->in_buf + r->in_off, r->in_len - r->in_off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (w <= 0) break; /* EPIPE: the program closed its stdin; the rest is not wanted */
    r->in_off += (size_t)w;
  }
  in_close(r); /* all written (or unwritable): the program sees EOF */
}

/* ---- the tree ---- */

static void kill_tree(struct run *r, int sig) {
  /* The group while its id is pinned by the unreaped leader, then every descendant we can see:
   * double-forked processes that left the group or session are still below the subreaper. */
  if (r->leader > 0 && !r->reaped) kill(-r->leader, sig);
  pid_t *d;
  size_t n = proc_descendants(getpid(), &d);
  for (size_t i = 0; i < n; i++) kill(d[i], sig);
  free(d);
}

static void start_terminate(struct run *r) {
  if (r->term || r->no_children) return;
  r->term = 1;
  kill_tree(r, SIGTERM);
  kill_tree(r, SIGCONT); /* a stopped process acts on TERM only once continued */
  r->kill_at = mb_now_ms() + (int64_t)r->grace_ms;
}

static void resolve_errpipe(struct run *r) {
  char buf[sizeof(int) + ERRMSG_MAX + 1];
  ssize_t n;
  do n = read(r->errfd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  close(r->errfd);
  r->errfd = -1;
  if (n <= 0) return; /* EOF: execve succeeded (the pipe is close-on-exec) */
  int err = EIO;
  const char *msg = "spawn failed";
  if ((size_t)n >= sizeof err) {
    memcpy(&err, buf, sizeof err);
    buf[n] = 0;
    if ((size_t)n > sizeof err) msg = buf + sizeof err;
  }
  spawn_error(r, err, msg);
}

static void on_leader_reaped(struct run *r, int st) {
  r->reaped = 1;
  r->status = st;
  /* The child is dead, so the exec-status pipe has its answer now (data or EOF): never blocks. */
  if (r->errfd >= 0) resolve_errpipe(r);
  for (int i = 0; i < 2; i++) {
    int avail = 0;
    if (r->src[i].fd >= 0 && ioctl(r->src[i].fd, FIONREAD, &avail) == 0 && avail > 0)
      r->src[i].pre_exit = (size_t)avail;
  }
}

static void reap(struct run *r) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      if (p == r->leader) on_leader_reaped(r, st);
      continue;
    }
    if (p < 0 && errno == EINTR) continue;
    if (p < 0 && errno == ECHILD) r->no_children = 1;
    return;
  }
}

static void on_signals(struct run *r) {
  struct signalfd_siginfo si;
  for (;;) {
    ssize_t n = read(r->sfd, &si, sizeof si);
    if (n < 0 && errno == EINTR) continue;
    if (n != (ssize_t)sizeof si) break;
    if (si.ssi_signo == SIGCHLD)
      reap(r);
    else
      start_terminate(r);
  }
  reap(r); /* SIGCHLD coalesces; reaping is idempotent */
}

/* ---- the child ---- */

static void child_fail(int errw, int err, const char *what, const char *prog) {
  if (errw < 0) { /* `mbwrap exec`: no frames, the message goes to the terminal */
    fprintf(stderr, "mbwrap: %s '%s': %s\n", what, prog, strerror(err));
    _exit(127);
  }
  char buf[sizeof(int) + ERRMSG_MAX];
  memcpy(buf, &err, sizeof err);
  int n = snprintf(buf + sizeof err, ERRMSG_MAX, "%s '%s': %s", what, prog, strerror(err));
  size_t len = sizeof err + (n < 0 ? 0 : n >= ERRMSG_MAX ? ERRMSG_MAX - 1 : (size_t)n);
  /* One write below PIPE_BUF is atomic: the parent sees the whole message or nothing. */
  if (write(errw, buf, len) < 0) {
  }
  _exit(127);
}

static const char *env_get(char **envp, const char *name) {
  size_t k = strlen(name);
  for (; *envp; envp++)
    if (strncmp(*envp, name, k) == 0 && (*envp)[k] == '=') return *envp + k + 1;
  return NULL;
}

/* argv[0] with a '/' is used as is; a bare name is searched on the PATH of the *given* environment
 * (no PATH: not found). No shell fallback for ENOEXEC: that is reported as a spawn error (on
 * errw, or on stderr with exit status 127 when errw < 0). */
void exec_program(char **argv, char **envp, int errw) {
  const char *prog = argv[0];
  if (!*prog) child_fail(errw, ENOENT, "cannot execute", prog);
  if (strchr(prog, '/')) {
    execve(prog, argv, envp);
    child_fail(errw, errno, "cannot execute", prog);
  }
  const char *path = env_get(envp, "PATH");
  int err = ENOENT, seen_eacces = 0;
  size_t plen = strlen(prog);
  for (const char *p = path; p;) {
    const char *colon = strchr(p, ':');
    size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
    char full[4096];
    if (dlen + 1 + plen < sizeof full) {
      if (dlen == 0) {
        memcpy(full, prog, plen + 1); /* an empty entry is the current directory */
      } else {
        memcpy(full, p, dlen);
        full[dlen] = '/';
        memcpy(full + dlen + 1, prog, plen + 1);
      }
      execve(full, argv, envp);
      switch (errno) {
      case EACCES: seen_eacces = 1; break;
      case ENOENT: case ENOTDIR: case ENAMETOOLONG: case ELOOP: case ESTALE: case ENODEV: case ETIMEDOUT: break;
      default: child_fail(errw, errno, "cannot execute", full);
      }
    }
    p = colon ? colon + 1 : NULL;
  }
  if (seen_eacces) err = EACCES;
  child_fail(errw, err, "cannot find", prog);
}

static void child_main(char **argv, char **envp, int inr, int outw, int errw_fd, int readyw, int gor, int gow,
                       int errw) {
  close(gow); /* so that the wrapper's death reads as EOF below */
  mb_default_signals();
  if (setsid() < 0) child_fail(errw, errno, "setsid for", argv[0]);
  if (write(readyw, "r", 1) != 1) _exit(126);
  close(readyw);
  char c = 0;
  ssize_t k;
  do k = read(gor, &c, 1);
  while (k < 0 && errno == EINTR);
  if (k != 1 || c != 'g') _exit(126); /* the wrapper vanished before publishing the group id */
  close(gor);
  if ((inr >= 0 && dup2(inr, 0) < 0) || dup2(outw, 1) < 0 || dup2(errw_fd, 2) < 0)
    child_fail(errw, errno, "cannot redirect stdio of", argv[0]);
  /* Nothing else the wrapper holds (or inherited) reaches the program; errw is close-on-exec. */
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  exec_program(argv, envp, errw);
}

/* ---- main loop ---- */

static void progress(struct run *r) {
  if (r->reaped && !r->spawn_failed && !r->exit_sent && r->errfd < 0 && r->src[0].pre_exit == 0 &&
      r->src[1].pre_exit == 0) {
    if (WIFSIGNALED(r->status))
      ctl(r, "!signal %ld", NULL, WTERMSIG(r->status));
    else
      ctl(r, "!exit %ld", NULL, WEXITSTATUS(r->status));
    r->exit_sent = 1;
  }
  if (!r->finished && r->no_children && (r->exit_sent || r->spawn_failed) && r->src[0].fd < 0 &&
      r->src[1].fd < 0) {
    for (int i = 0; i < 2; i++) spill_finish(r, &r->src[i]);
    ctl(r, "!empty", NULL, 0);
    ctl(r, "!done", NULL, 0);
    r->finished = 1;
  }
}

static int loop(struct run *r) {
  for (;;) {
    progress(r);
    if (r->finished && (r->out_dead || ob_len(&r->ob) == 0)) break;
    if (r->gofd >= 0 && ob_len(&r->ob) == 0) {
      /* !pgid is on stdout: let the program run (unless nobody reads us any more, in which case
       * the closed pipe makes it exit unstarted). A failed write means it is already dead. */
      if (!r->out_dead && write(r->gofd, "g", 1) < 0) {
      }
      close(r->gofd);
      r->gofd = -1;
    }
    /* Nobody is left to read the program's stdin: stop feeding it. */
    if (r->in_fd >= 0 && r->no_children) in_close(r);
    struct pollfd p[6];
    int np = 0, isig = -1, iout = -1, ierr = -1, iin = -1, isrc[2] = {-1, -1};
    p[isig = np++] = (struct pollfd){.fd = r->sfd, .events = POLLIN};
    if (!r->out_dead && ob_len(&r->ob)) p[iout = np++] = (struct pollfd){.fd = 1, .events = POLLOUT};
    if (r->errfd >= 0) p[ierr = np++] = (struct pollfd){.fd = r->errfd, .events = POLLIN};
    if (r->in_fd >= 0 && r->gofd < 0) p[iin = np++] = (struct pollfd){.fd = r->in_fd, .events = POLLOUT};
    /* Backpressure: program output is read only while a whole frame plus control frames fits.
     * Large frames: while frames already wait for the reader, a stream is read only once it
     * holds a whole frame's worth; the rest waits in its pipe until stdout drains (then it is
     * read at once), so a busy stream travels in full frames and a quiet one without delay. */
    int room = r->out_dead || ob_space(&r->ob) >= MB_FRAME_LINE + CTL_RESERVE;
    int any_src = 0;
    for (int i = 0; i < 2; i++)
      if (r->src[i].fd >= 0 && room && (r->out_dead || r->no_children || ob_len(&r->ob) == 0 || src_holds_frame(&r->src[i]))) {
        p[isrc[i] = np++] = (struct pollfd){.fd = r->src[i].fd, .events = POLLIN};
        any_src = 1;
      }
    int timeout = -1;
    if (r->no_children && any_src)
      timeout = 0; /* draining what the dead tree left: read until EOF or empty */
    else if (r->term == 1) {
      int64_t left = r->kill_at - mb_now_ms();
      timeout = left <= 0 ? 0 : left > 60000 ? 60000 : (int)left;
    } else if (r->term == 2)
      timeout = KILL_RESCAN_MS;
    int n = poll(p, (nfds_t)np, timeout);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "mbwrap: poll: %s\n", strerror(errno));
      start_terminate(r);
      mb_sleep_ms(KILL_RESCAN_MS);
      continue;
    }
    if (n > 0 && p[isig].revents) on_signals(r);
    if (iout >= 0 && p[iout].revents) {
      if (ob_flush_some(&r->ob, 1) < 0) {
        /* The reader vanished: nobody can see frames any more; end the tree and leave. */
        r->out_dead = 1;
        r->ob.head = r->ob.tail = 0;
        start_terminate(r);
      }
    }
    if (ierr >= 0 && p[ierr].revents && r->errfd >= 0) resolve_errpipe(r);
    if (iin >= 0 && p[iin].revents && r->in_fd >= 0) in_write(r);
    for (int i = 0; i < 2; i++)
      if (isrc[i] >= 0 && r->src[i].fd >= 0 && (p[isrc[i]].revents || r->no_children)) src_read(r, &r->src[i]);
    if (r->term == 1 && mb_now_ms() >= r->kill_at) r->term = 2;
    if (r->term == 2) {
      if (r->no_children) {
        r->term = 3; /* done killing */
      } else if (mb_now_ms() >= r->next_rescan) {
        kill_tree(r, SIGKILL);
        r->next_rescan = mb_now_ms() + KILL_RESCAN_MS;
      }
    }
  }
  return r->out_dead ? 1 : 0;
}

static int parse_spill(const char *arg, struct src *s) {
  const char *colon = strrchr(arg, ':'); /* the path may contain ':'; MAX may not */
  if (!colon || colon == arg || parse_u64(colon + 1, &s->spill_max) < 0) return -1;
  size_t len = (size_t)(colon - arg);
  char *path = malloc(len + 1);
  if (!path) return -1;
  memcpy(path, arg, len);
  path[len] = 0;
  s->spill_path = path;
  return 0;
}

static void ensure_std_fds(void) {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0) {
      int nfd = open("/dev/null", O_RDWR);
      if (nfd >= 0 && nfd != fd) close(nfd); /* open returns the lowest free fd: that is fd */
    }
}

static int run_with(struct run *rp, char **envp, int argc, char **argv) {
  size_t nenv = 0;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "mbwrap run: option %s needs a value\n", a);
      usage();
      return 2;
    }
    const char *v = argv[++i];
    if (strcmp(a, "-g") == 0) {
      if (parse_u64(v, &rp->grace_ms) < 0 || rp->grace_ms > 2147483647u) {
        fprintf(stderr, "mbwrap run: bad grace '%s'\n", v);
        return 2;
      }
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "-e") == 0) {
      if (parse_spill(v, &rp->src[a[1] == 'o' ? 0 : 1]) < 0) {
        fprintf(stderr, "mbwrap run: bad spill '%s' (want PATH:MAXBYTES)\n", v);
        return 2;
      }
    } else if (strcmp(a, "-k") == 0) {
      struct src *ks = (v[0] == 'o' || v[0] == 'e') && v[1] == ':' ? &rp->src[v[0] == 'o' ? 0 : 1] : NULL;
      if (!ks || parse_u64(v + 2, &ks->keep_min) < 0) {
        fprintf(stderr, "mbwrap run: bad -k '%s' (want o:MIN or e:MIN)\n", v);
        return 2;
      }
      ks->has_keep = 1;
    } else if (strcmp(a, "-i") == 0) {
      size_t n = strlen(v);
      free(rp->in_buf);
      rp->in_buf = malloc(n / 4 * 3 + 1);
      long k = rp->in_buf ? mb_b64_decode(v, n, rp->in_buf) : -1;
      if (k < 0) {
        fprintf(stderr, "mbwrap run: bad -i (want canonical base64)\n");
        return 2;
      }
      rp->in_len = (size_t)k;
      rp->in_off = 0;
      rp->in_fd = -2; /* requested: the pipe is made below */
    } else if (strcmp(a, "-E") == 0 || strcmp(a, "-K") == 0) {
      /* -K NAME keeps NAME=value from our own environment (the Start request's envs): values
       * need not appear on the command line. */
      const char *entry = v;
      size_t nl;
      if (a[1] == 'K') {
        nl = strlen(v);
        if (!nl || strchr(v, '=')) {
          fprintf(stderr, "mbwrap run: bad -K name\n");
          return 2;
        }
        entry = NULL;
        for (char **e = environ; e && *e; e++)
          if (strncmp(*e, v, nl) == 0 && (*e)[nl] == '=') entry = *e;
        if (!entry) {
          if (!rp->env_missing) rp->env_missing = v;
          continue;
        }
      } else {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v) {
          fprintf(stderr, "mbwrap run: bad environment entry (want NAME=VALUE)\n");
          return 2;
        }
        nl = (size_t)(eq - v);
      }
      for (size_t k = 0; k < nenv; k++)
        if (strncmp(envp[k], entry, nl + 1) == 0) {
          fprintf(stderr, "mbwrap run: duplicate environment name '%.*s'\n", (int)nl, entry);
          return 2;
        }
      envp[nenv++] = (char *)entry;
    } else {
      fprintf(stderr, "mbwrap run: unknown option '%s'\n", a);
      usage();
      return 2;
    }
  }
  if (i >= argc) {
    usage();
    return 2;
  }
  char **prog = argv + i;

  ensure_std_fds();
  /* Everything asynchronous arrives through the signalfd; EPIPE comes back from write(). */
  sigset_t set;
  block_run_signals(&set);
  signal(SIGPIPE, SIG_IGN);
  rp->sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (ob_init(&rp->ob, 4 * MB_FRAME_LINE + CTL_RESERVE) < 0 || rp->sfd < 0) {
    fprintf(stderr, "mbwrap run: setup: %s\n", strerror(errno));
    return 2;
  }
  /* Non-blocking stdout on a pipe or socket, so a stalled reader never stops signal handling. */
  struct stat so;
  rp->stdout_flags = -1;
  if (fstat(1, &so) == 0 && (S_ISFIFO(so.st_mode) || S_ISSOCK(so.st_mode))) {
    rp->stdout_flags = fcntl(1, F_GETFL);
    if (rp->stdout_flags >= 0) fcntl(1, F_SETFL, rp->stdout_flags | O_NONBLOCK);
  }

  int outp[2] = {-1, -1}, errp[2] = {-1, -1}, ready[2] = {-1, -1}, gop[2] = {-1, -1}, exp[2] = {-1, -1};
  int inp[2] = {-1, -1};
  char msg[ERRMSG_MAX];
  int serr = 0;
  if (rp->env_missing) {
    serr = EINVAL;
    snprintf(msg, sizeof msg, "environment variable '%.200s' (-K) is not in the wrapper's environment",
             rp->env_missing);
  } else if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
    serr = errno;
    snprintf(msg, sizeof msg, "cannot become a child subreaper: %s", strerror(serr));
  } else if (spill_open(&rp->src[0]) < 0 || spill_open(&rp->src[1]) < 0) {
    serr = errno;
    snprintf(msg, sizeof msg, "cannot open spill file: %s", strerror(serr));
  } else if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(ready, O_CLOEXEC) < 0 ||
             pipe2(gop, O_CLOEXEC) < 0 || pipe2(exp, O_CLOEXEC) < 0 ||
             (rp->in_fd == -2 && pipe2(inp, O_CLOEXEC) < 0)) {
    serr = errno;
    snprintf(msg, sizeof msg, "cannot create pipes: %s", strerror(serr));
  } else if ((rp->leader = fork()) < 0) {
    serr = errno;
    snprintf(msg, sizeof msg, "cannot fork: %s", strerror(serr));
  } else if (rp->leader == 0) {
    close(inp[1]);
    child_main(prog, envp, inp[0], outp[1], errp[1], ready[1], gop[0], gop[1], exp[1]);
  }
  if (inp[0] >= 0) close(inp[0]);
  rp->in_fd = -1;
  if (serr) {
    if (inp[1] >= 0) close(inp[1]);
    rp->leader = 0;
    rp->no_children = 1;
    spawn_error(rp, serr, msg);
  } else {
    close(outp[1]);
    close(errp[1]);
    close(ready[1]);
    close(gop[0]);
    close(exp[1]);
    rp->src[0].fd = outp[0];
    rp->src[1].fd = errp[0];
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    rp->errfd = exp[0];
    if (inp[1] >= 0) {
      rp->in_fd = inp[1];
      fcntl(inp[1], F_SETFL, O_NONBLOCK);
    }
    char c;
    ssize_t k;
    do k = read(ready[0], &c, 1);
    while (k < 0 && errno == EINTR);
    close(ready[0]);
    if (k == 1) {
      ctl(rp, "!pgid %ld", NULL, (long)rp->leader); /* setsid is done: pgid == sid == pid */
      rp->gofd = gop[1];
    } else {
      close(gop[1]);
      resolve_errpipe(rp); /* setsid failed: the child wrote why and is exiting */
      if (!rp->spawn_failed) spawn_error(rp, EIO, "the program's process exited before starting");
    }
  }
  int rc = loop(rp);
  if (rp->stdout_flags >= 0) fcntl(1, F_SETFL, rp->stdout_flags);
  return rc;
}

void block_run_signals(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGCHLD);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGHUP);
  sigprocmask(SIG_BLOCK, set, NULL);
}

int run_main(int argc, char **argv) {
  struct run r;
  memset(&r, 0, sizeof r);
  r.grace_ms = 2000;
  r.errfd = r.gofd = r.sfd = r.in_fd = -1;
  r.src[0] = (struct src){.fd = -1, .kind = 'o', .spill_fd = -1};
  r.src[1] = (struct src){.fd = -1, .kind = 'e', .spill_fd = -1};
  char **envp = calloc((size_t)argc + 1, sizeof *envp);
  if (!envp) return 2;
  int rc = run_with(&r, envp, argc, argv);
  for (int k = 0; k < 2; k++) {
    if (r.src[k].spill_fd >= 0) close(r.src[k].spill_fd);
    free((char *)r.src[k].spill_path);
  }
  free(r.ob.buf);
  free(r.in_buf);
  if (r.in_fd >= 0) close(r.in_fd);
  free(envp);
  return rc;
}
