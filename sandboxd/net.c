/* net.c — a sandbox's namespaces and link: a veth pair to the gateway (root), pasta (rootless). */
#include "net.h"
#include "clocks.h"
#include "egress.h"
#include "fdpass.h"
#include "gateway.h"
#include "init.h"
#include "netns.h"
#include "procfile.h"
#include "pidfile.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>
#include <arpa/inet.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

static struct {
  bool ready, privileged, gateway;
  char pasta[256];
  char recdir[4200];              /* <state>/net: records of running pastas */
  char why[512];
} g;

/* name in $PATH or the usual system directories (sandboxd may run with a user's PATH). */
static bool find_program(const char *name, char *out, size_t cap) {
  static const char *const extra = "/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/sbin:/usr/local/bin";
  const char *envp = getenv("PATH");
  char path[4096];
  snprintf(path, sizeof path, "%s:%s", envp && *envp ? envp : "", extra);
  char *save = NULL;
  for (char *d = strtok_r(path, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    if (d[0] != '/') continue;                /* never a relative PATH entry */
    if (snprintf(out, cap, "%s/%s", d, name) >= (int)cap) continue;
    if (access(out, X_OK) == 0) return true;
  }
  out[0] = 0;
  return false;
}

void net_cleanup_stale(const char *state_dir) {
  char recdir[4200];
  if (snprintf(recdir, sizeof recdir, "%s/net", state_dir) >= (int)sizeof recdir) return;
  DIR *d = opendir(recdir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, "pasta-", 6) != 0) continue;
    char rec[4500];
    snprintf(rec, sizeof rec, "%s/%s", recdir, de->d_name);
    pidfile_kill(rec);
    unlink(rec);
  }
  closedir(d);
}

bool net_init(const char *state_dir, const egress_config *egress, char *why, size_t whylen) {
  memset(&g, 0, sizeof g);
  g.ready = true;
  g.privileged = geteuid() == 0;
  if (snprintf(g.recdir, sizeof g.recdir, "%s/net", state_dir) >= (int)sizeof g.recdir) g.recdir[0] = 0;
  net_cleanup_stale(state_dir);
  struct stat st;
  if (g.privileged) {
    char err[480];
    if (!gateway_init(state_dir, err, sizeof err)) snprintf(g.why, sizeof g.why, "%s", err);
    else if (egress_start(egress, err, sizeof err) != 0) snprintf(g.why, sizeof g.why, "%s", err);
    else g.gateway = true;
  } else if (!g.recdir[0] || (mkdir(g.recdir, 0700) != 0 && errno != EEXIST))
    snprintf(g.why, sizeof g.why, "cannot make %.300s: %s", g.recdir, strerror(errno ? errno : ENAMETOOLONG));
  else if (!find_program("pasta", g.pasta, sizeof g.pasta))
    snprintf(g.why, sizeof g.why, "pasta not found (Debian package passt)");
  else if (stat("/dev/net/tun", &st) != 0 || !S_ISCHR(st.st_mode))
    snprintf(g.why, sizeof g.why, "no /dev/net/tun (tun module)");
  else if (access("/dev/net/tun", R_OK | W_OK) != 0)
    snprintf(g.why, sizeof g.why, "/dev/net/tun is not accessible to uid %u", (unsigned)geteuid());
  if (why && whylen) snprintf(why, whylen, "%.*s", (int)(whylen - 1), g.why);
  return g.why[0] == 0;
}

bool net_available(char *why, size_t whylen) {
  if (!g.ready) { if (why && whylen) snprintf(why, whylen, "networking not initialised"); return false; }
  if (why && whylen) snprintf(why, whylen, "%.*s", (int)(whylen - 1), g.why);
  return g.why[0] == 0;
}

bool net_guarded(void) { return g.gateway; }
bool net_wants_link(bool internet) { return g.gateway || internet; }

void net_shutdown(void) {
  if (!g.gateway) return;
  egress_stop();
  gateway_shutdown();
  g.gateway = false;
}

/* ---- pairs ---- */

struct net_pair {
  int userns, netns;
  int index;                      /* its veth's gateway index, 0 when none */
  pid_t pasta;
  pid_t starter;                  /* its starter (init.h) until reaped, then 0 */
  bool booting;                   /* it was sent its BOOT request */
  int st;                         /* our end of the starter's socket, -1 then */
  char record[4300];              /* <state>/net/pasta-<pid>, "" when none */
};

int net_pair_userns(const net_pair *p) { return p->userns; }
int net_pair_netns(const net_pair *p) { return p->netns; }
pid_t net_pair_pasta(const net_pair *p) { return p->pasta; }
int net_pair_index(const net_pair *p) { return p->index; }

static int write_proc(pid_t pid, const char *file, const char *s) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
  return procfile_write(path, s);
}

/* The starter's next message (init.h), within NET_READY_TIMEOUT_MS. Its death is seen by
 * waitpid, not by EOF: children other threads clone meanwhile may hold copies of our end. */
static int starter_recv(net_pair *p, uint32_t type, init_msg *m, char *err, size_t errlen) {
  int64_t until = mono_ms() + NET_READY_TIMEOUT_MS;
  for (;;) {
    int64_t left = until - mono_ms();
    if (left <= 0) { snprintf(err, errlen, "the sandbox's starter did not answer within %d ms", NET_READY_TIMEOUT_MS); return -1; }
    struct pollfd pf = {p->st, POLLIN, 0};
    int pr = poll(&pf, 1, left > 20 ? 20 : (int)left);
    if (pr < 0 && errno != EINTR) { snprintf(err, errlen, "poll: %s", strerror(errno)); return -1; }
    if (pr > 0) {
      ssize_t n = recv(p->st, m, sizeof *m, MSG_DONTWAIT);
      if (n == (ssize_t)sizeof *m && m->type == type) return 0;
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      snprintf(err, errlen, "the sandbox's starter %s", n == 0 ? "exited" : "sent something unexpected");
      return -1;
    }
    int status;
    if (waitpid(p->starter, &status, WNOHANG) == p->starter) {
      p->starter = 0;
      /* It may have answered between that poll and its exit: the answer is still queued. */
      if (recv(p->st, m, sizeof *m, MSG_DONTWAIT) == (ssize_t)sizeof *m && m->type == type) return 0;
      snprintf(err, errlen, "the sandbox's starter exited (wait status %d)", status);
      return -1;
    }
  }
}

/* The pair's starter (init.h): the init's image, started here, makes the user and network
 * namespaces itself (a multi-threaded process may not enter a user namespace); their
 * descriptors keep them whatever becomes of it. posix_spawn: the child shares our memory until
 * it execs, instead of copying sandboxd's page tables. */
static int make_namespaces(const net_idmap *map, int exe_fd, net_pair *p, char *err, size_t errlen) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) { snprintf(err, errlen, "socketpair: %s", strerror(errno)); return -1; }
  p->st = sv[0];
  /* The starter's socket becomes its fd 3: the image must be reached through another number. */
  int exe = exe_fd == 3 ? fcntl(exe_fd, F_DUPFD_CLOEXEC, 4) : exe_fd;
  char path[32];
  snprintf(path, sizeof path, "/proc/self/fd/%d", exe);
  char *argv[] = {SBX_INIT_ARGV0, "3", NULL}, *envp[] = {NULL};
  posix_spawn_file_actions_t fa;
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  pid_t pid = 0;
  if (rc == 0 && exe >= 0) rc = posix_spawn(&pid, path, &fa, NULL, argv, envp);
  else if (rc == 0) rc = errno;
  posix_spawn_file_actions_destroy(&fa);
  if (exe != exe_fd && exe >= 0) close(exe);
  close(sv[1]);
  if (rc != 0) { snprintf(err, errlen, "start the sandbox's starter: %s", strerror(rc)); return -1; }
  p->starter = pid;
  init_msg m;
  if (starter_recv(p, INIT_MSG_UNSHARED, &m, err, errlen) != 0) return -1;
  if (m.code) { snprintf(err, errlen, "unshare (user+net namespaces): %s", strerror(m.code)); return -1; }
  if ((map->deny_setgroups && write_proc(pid, "setgroups", "deny") != 0) ||
      write_proc(pid, "uid_map", map->uid_map) != 0 || write_proc(pid, "gid_map", map->gid_map) != 0) {
    snprintf(err, errlen, "id maps: %s", strerror(errno));
    return -1;
  }
  char ns[64];
  snprintf(ns, sizeof ns, "/proc/%d/ns/user", (int)pid);
  p->userns = open(ns, O_RDONLY | O_CLOEXEC);
  snprintf(ns, sizeof ns, "/proc/%d/ns/net", (int)pid);
  p->netns = open(ns, O_RDONLY | O_CLOEXEC);
  if (p->userns < 0 || p->netns < 0) { snprintf(err, errlen, "open namespaces: %s", strerror(errno)); return -1; }
  return 0;
}

void net_pair_reap(net_pair *p) {
  if (p && p->starter > 0 && p->booting && p->st < 0) {
    while (waitpid(p->starter, NULL, 0) < 0 && errno == EINTR) {}
    p->starter = 0;
  }
}

int net_pair_boot(net_pair *p, const void *req, size_t len, const int *fds, int nfds, char *err, size_t errlen) {
  if (p->starter <= 0 || p->st < 0 || p->booting || nfds < 1 || nfds > FDPASS_MAX) { snprintf(err, errlen, "this network pair cannot boot a sandbox"); return -1; }
  if (fdpass_send(p->st, req, len, fds, nfds) != 0) { snprintf(err, errlen, "the sandbox's starter: %s", strerror(errno)); return -1; }
  p->booting = true;
  return 0;
}

int net_pair_join(net_pair *p, const int *fds, int nfds, char *err, size_t errlen) {
  if (p->starter <= 0 || p->st < 0 || p->booting || nfds < 0 || nfds > FDPASS_MAX) { snprintf(err, errlen, "this network pair cannot join cgroups"); return -1; }
  init_req rq;
  memset(&rq, 0, sizeof rq);
  rq.type = INIT_REQ_CGROUPS;
  if (fdpass_send(p->st, &rq, sizeof rq, fds, nfds) != 0) { snprintf(err, errlen, "the sandbox's starter: %s", strerror(errno)); return -1; }
  init_msg m;
  if (starter_recv(p, INIT_MSG_JOINED, &m, err, errlen) != 0) return -1;
  if (m.code) { snprintf(err, errlen, "the starter's move into its cgroups: %s", strerror(m.code)); return -1; }
  return 0;
}

pid_t net_pair_booted(net_pair *p, bool *late, char *err, size_t errlen) {
  *late = false;
  if (!p->booting || p->st < 0) { snprintf(err, errlen, "this network pair is not booting a sandbox"); return -1; }
  init_msg m;
  if (starter_recv(p, INIT_MSG_BOOTED, &m, err, errlen) != 0) return -1;
  close(p->st);   /* its last act was that answer: it exits (net_pair_reap) */
  p->st = -1;
  if (m.code || m.pid <= 0) { snprintf(err, errlen, "clone of the init into its namespaces: %s", strerror(m.code ? m.code : EIO)); return -1; }
  *late = m.status != 0;
  return m.pid;
}

/* pasta for p's namespaces; returns once its network is up (it writes its pid to the readiness
 * pipe then), or -1 with its own words in err. */
static int start_pasta(net_pair *p, char *err, size_t errlen) {
  int fds[3] = {p->userns, p->netns, -1}, hi[3] = {-1, -1, -1}, ready[2] = {-1, -1}, errp[2] = {-1, -1};
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pasta: pipe: %s", strerror(errno));
    goto fail;
  }
  fds[2] = ready[1];
  /* Out of the way of 0..5, where the child puts stdio and the descriptors pasta names. */
  for (int i = 0; i < 3; i++)
    if ((hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0) { snprintf(err, errlen, "pasta: dup: %s", strerror(errno)); goto fail; }
  /* Everything the child needs is built here: after clone it makes raw system calls only. */
  char *argv[40];
  int a = 0;
  argv[a++] = "pasta";
  argv[a++] = "--quiet";
  argv[a++] = "--foreground";
  argv[a++] = "--config-net";
  /* Nothing of the host mapped in, nothing of the sandbox mapped out. */
  argv[a++] = "-t"; argv[a++] = "none";
  argv[a++] = "-u"; argv[a++] = "none";
  argv[a++] = "-T"; argv[a++] = "none";
  argv[a++] = "-U"; argv[a++] = "none";
  argv[a++] = "--no-map-gw";
  argv[a++] = "--dns-forward"; argv[a++] = NET_DNS_FORWARDER;
  argv[a++] = "--pid"; argv[a++] = "/proc/self/fd/5";
  argv[a++] = "--userns"; argv[a++] = "/proc/self/fd/3";
  argv[a++] = "--netns"; argv[a++] = "/proc/self/fd/4";
  argv[a++] = "--no-netns-quit";
  argv[a] = NULL;
  char *envp[] = {NULL};
  const char *path = g.pasta;
  int errw = errp[1];
  /* sandboxd ignores SIGPIPE (inherited over exec) and the calling thread may block signals:
   * pasta gets neither (this version even refuses to start with SIGPIPE already ignored). */
  struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; } dfl = {0};
  uint64_t nomask = 0;
  long pid = syscall(SYS_clone, (unsigned long)SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) {
    if (syscall(SYS_rt_sigaction, SIGPIPE, &dfl, NULL, sizeof dfl.mask) != 0 ||
        syscall(SYS_rt_sigprocmask, SIG_SETMASK, &nomask, NULL, sizeof nomask) != 0)
      syscall(SYS_exit_group, 121);
    long nul = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR);
    if (nul < 0 || syscall(SYS_dup3, nul, 0, 0) < 0 || syscall(SYS_dup3, nul, 1, 0) < 0 ||
        syscall(SYS_dup3, errw, 2, 0) < 0)
      syscall(SYS_exit_group, 122);
    for (int i = 0; i < 3; i++)
      if (syscall(SYS_dup3, hi[i], 3 + i, 0) < 0) syscall(SYS_exit_group, 122);
    syscall(SYS_close_range, 6, ~0U, CLOSE_RANGE_CLOEXEC);
    syscall(SYS_execve, path, argv, envp);
    syscall(SYS_exit_group, 127);
  }
  if (pid < 0) { snprintf(err, errlen, "pasta: clone: %s", strerror(errno)); goto fail; }
  p->pasta = (pid_t)pid;
  for (int i = 0; i < 3; i++) { close(hi[i]); hi[i] = -1; }
  close(ready[1]);
  close(errp[1]);
  ready[1] = errp[1] = -1;
  /* The pid line arrives once the namespace's interface, addresses and routes are up; until then
   * whatever pasta says on stderr is kept for the error message. */
  /* Its exit is seen by waitpid, not by EOF: children other threads clone meanwhile may hold
   * copies of the pipes' write ends for a moment. */
  char line[32], text[512];
  size_t nl = 0, nt = 0;
  bool up = false, eof = false;
  int status = 0;
  int64_t until = mono_ms() + NET_READY_TIMEOUT_MS;
  while (!up && !eof) {
    int64_t left = until - mono_ms();
    if (left <= 0) break;
    struct pollfd pf[2] = {{ready[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
    int pr = poll(pf, errp[0] >= 0 ? 2 : 1, left > 20 ? 20 : (int)left);
    if (pr < 0 && errno != EINTR) break;
    if (pr <= 0) {
      if (waitpid(p->pasta, &status, WNOHANG) == p->pasta) { eof = true; p->pasta = -p->pasta; }
      continue;
    }
    if (pf[1].revents && errp[0] >= 0) {
      ssize_t k = read(errp[0], text + nt, sizeof text - 1 - nt);
      if (k > 0) nt += (size_t)k;
      else { close(errp[0]); errp[0] = -1; }
    }
    if (pf[0].revents) {
      ssize_t k = read(ready[0], line + nl, sizeof line - 1 - nl);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) eof = true;
      else nl += (size_t)k;
      up = memchr(line, '\n', nl) != NULL || nl == sizeof line - 1;
    }
  }
  if (!up && errp[0] >= 0) {   /* what it said on its way out, as far as it is there */
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    ssize_t k;
    while (nt < sizeof text - 1 && (k = read(errp[0], text + nt, sizeof text - 1 - nt)) > 0) nt += (size_t)k;
  }
  for (int i = 0; i < 2; i++) {
    if (ready[i] >= 0) close(ready[i]);
    if (errp[i] >= 0) close(errp[i]);
  }
  if (up) return 0;
  /* The last line that is not pasta's own complaint about a missing syslog. */
  text[nt] = 0;
  char *last = NULL;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
    if (!strstr(l, "to syslog")) last = l;
  if (p->pasta > 0) {           /* still running (timed out, or its pipe closed early): stop it */
    kill(p->pasta, SIGKILL);
    while (waitpid(p->pasta, &status, 0) < 0 && errno == EINTR) {}
  }
  p->pasta = 0;
  if (!eof)
    snprintf(err, errlen, "pasta did not bring the network up within %d ms%s%.200s", NET_READY_TIMEOUT_MS,
             last ? ": " : "", last ? last : "");
  else if (WIFEXITED(status))
    snprintf(err, errlen, "pasta exited with status %d before the network was up%s%.200s", WEXITSTATUS(status),
             last ? ": " : "", last ? last : "");
  else
    snprintf(err, errlen, "pasta died of signal %d before the network was up", WTERMSIG(status));
  return -1;
fail:
  for (int i = 0; i < 3; i++) if (hi[i] >= 0) close(hi[i]);
  for (int i = 0; i < 2; i++) {
    if (ready[i] >= 0) close(ready[i]);
    if (errp[i] >= 0) close(errp[i]);
  }
  return -1;
}

net_pair *net_pair_new(const net_idmap *map, int exe_fd, bool link, char *err, size_t errlen) {
  char why[256];
  if (link && !net_available(why, sizeof why)) {
    snprintf(err, errlen, "internet access is unavailable: %s", why);
    return NULL;
  }
  net_pair *p = calloc(1, sizeof *p);
  if (!p) { snprintf(err, errlen, "out of memory"); return NULL; }
  p->userns = p->netns = p->st = -1;
  if (make_namespaces(map, exe_fd, p, err, errlen) != 0) { net_pair_free(p); return NULL; }
  if (!link) return p;
  if (g.gateway) {
    if (gateway_attach(p->netns, &p->index, err, errlen) != 0) { net_pair_free(p); return NULL; }
    return p;
  }
  if (start_pasta(p, err, errlen) != 0) { net_pair_free(p); return NULL; }
  snprintf(p->record, sizeof p->record, "%s/pasta-%d", g.recdir, (int)p->pasta);
  if (pidfile_write(p->record, p->pasta) != 0) {
    snprintf(err, errlen, "write %s: %s", p->record, strerror(errno));
    p->record[0] = 0;
    net_pair_free(p);
    return NULL;
  }
  return p;
}

void net_pair_free(net_pair *p) {
  if (!p) return;
  if (p->index) {
    egress_detach(p->index);      /* its connections closed, its address refused again */
    gateway_detach(p->index);
  }
  if (p->pasta > 0) {
    kill(p->pasta, SIGKILL);
    while (waitpid(p->pasta, NULL, 0) < 0 && errno == EINTR) {}
  }
  if (p->starter > 0) {   /* it never booted a sandbox */
    kill(p->starter, SIGKILL);
    while (waitpid(p->starter, NULL, 0) < 0 && errno == EINTR) {}
  }
  if (p->st >= 0) close(p->st);
  if (p->record[0]) unlink(p->record);
  if (p->userns >= 0) close(p->userns);
  if (p->netns >= 0) close(p->netns);
  free(p);
}

/* ---- sockets in a pair's network namespace (the port proxy's connections) ----
 *
 * A socket belongs to the network namespace of the thread that made it, for good. As root a
 * short-lived thread joins the namespace, makes the socket and ends (the calling thread's own
 * namespaces never change). Without root a thread may not join it (that takes CAP_SYS_ADMIN in
 * sandboxd's own user namespace too), and a multithreaded process may not join a user namespace:
 * a forked child joins the pair's user namespace (its owner's uid has every capability there),
 * then the network namespace, makes the socket and passes it back over a socketpair. */

static int socket_by_child(const net_pair *p, int domain, int type) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  /* Everything the child needs is built here: after clone it makes raw system calls only. */
  int code = 0;
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = { &code, sizeof code };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  long pid = syscall(SYS_clone, (unsigned long)SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) {
    long fd = -1;
    if (syscall(SYS_setns, p->userns, CLONE_NEWUSER) != 0 || syscall(SYS_setns, p->netns, CLONE_NEWNET) != 0 ||
        (fd = syscall(SYS_socket, domain, type | SOCK_CLOEXEC, 0)) < 0) {
      code = errno;
      m.msg_control = NULL;
      m.msg_controllen = 0;
    } else {
      int ifd = (int)fd;
      memcpy(CMSG_DATA(cm), &ifd, sizeof ifd);
    }
    syscall(SYS_sendmsg, sv[1], &m, 0);
    syscall(SYS_exit_group, 0);
  }
  int e = errno;
  close(sv[1]);
  if (pid < 0) { close(sv[0]); errno = e; return -1; }
  while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR) {}
  /* The child sent its answer before it exited: it is queued now, or there is none. */
  memset(cbuf, 0, sizeof cbuf);
  m.msg_control = cbuf;
  m.msg_controllen = sizeof cbuf;
  code = 0;
  ssize_t n = recvmsg(sv[0], &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  close(sv[0]);
  cm = CMSG_FIRSTHDR(&m);
  if (n == (ssize_t)sizeof code && code == 0 && cm && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int))) {
    int fd;
    memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
  }
  errno = n == (ssize_t)sizeof code && code ? code : EIO;
  return -1;
}

int net_pair_socket(const net_pair *p, int domain, int type) {
  return g.privileged ? netns_socket(p->netns, domain, type, 0) : socket_by_child(p, domain, type);
}
