/* net.c — pasta per sandbox and the host guard (see net.h). */
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

static struct {
  bool ready, privileged, guard;
  char pasta[256], nft[256];
  char resolver[64];              /* the host's first IPv4 nameserver, "" if none */
  char table[64];                 /* nftables table of this state dir */
  char why[512];
} g;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

/* The first IPv4 "nameserver" of the host's resolv.conf: the one pasta forwards the sandbox's DNS
 * queries to (it reads the file itself; this version ignores --dns-forward when given --dns). */
static void read_resolver(void) {
  g.resolver[0] = 0;
  FILE *f = fopen("/etc/resolv.conf", "re");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char addr[64];
    unsigned char buf[4];
    if (strncmp(line, "nameserver ", 11) != 0 || sscanf(line + 11, "%63s", addr) != 1) continue;
    if (inet_pton(AF_INET, addr, buf) != 1) continue;
    snprintf(g.resolver, sizeof g.resolver, "%s", addr);
    break;
  }
  fclose(f);
}

/* Runs `nft -f -` with script on its stdin; 0, or -1 with nft's own words in err. */
static int run_nft(const char *script, char *err, size_t errlen) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) { snprintf(err, errlen, "pipe: %s", strerror(errno)); return -1; }
  if (pipe2(out, O_CLOEXEC) != 0) { close(in[0]); close(in[1]); snprintf(err, errlen, "pipe: %s", strerror(errno)); return -1; }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  char *argv[] = {"nft", "-f", "-", NULL};
  char *envp[] = {NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, g.nft, &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]); close(out[0]);
    snprintf(err, errlen, "cannot run %s: %s", g.nft, strerror(rc));
    return -1;
  }
  size_t len = strlen(script);
  bool wrote = write(in[1], script, len) == (ssize_t)len;
  close(in[1]);
  char msg[512];
  size_t n = 0;
  ssize_t k;
  while ((k = read(out[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)k;
  msg[n] = 0;
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (wrote && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  msg[strcspn(msg, "\n")] = 0;
  snprintf(err, errlen, "nft: %.200s", msg[0] ? msg : "failed");
  return -1;
}

/* One table per state dir (parallel sandboxds each own theirs): replaced atomically at start, so
 * a crashed run's table is simply overwritten. */
static int install_guard(char *err, size_t errlen) {
  char dns[256] = "";
  if (g.resolver[0])
    snprintf(dns, sizeof dns, "    meta skuid %u udp dport 53 ip daddr %s accept\n", NET_UID, g.resolver);
  char script[1024];
  snprintf(script, sizeof script,
           "add table inet %s\n"
           "delete table inet %s\n"
           "table inet %s {\n"
           "  chain output {\n"
           "    type filter hook output priority 0; policy accept;\n"
           "%s"
           "    meta skuid %u fib daddr type local reject\n"
           "  }\n"
           "}\n",
           g.table, g.table, g.table, dns, NET_UID);
  return run_nft(script, err, errlen);
}

bool net_init(const char *state_dir, char *why, size_t whylen) {
  memset(&g, 0, sizeof g);
  g.ready = true;
  g.privileged = geteuid() == 0;
  uint64_t h = 1469598103934665603ull;           /* the same name the cgroups use */
  for (const char *p = state_dir; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  snprintf(g.table, sizeof g.table, "sandboxd_%016llx", (unsigned long long)h);
  read_resolver();
  struct stat st;
  if (!find_program("pasta", g.pasta, sizeof g.pasta))
    snprintf(g.why, sizeof g.why, "pasta not found (Debian package passt)");
  else if (stat("/dev/net/tun", &st) != 0 || !S_ISCHR(st.st_mode))
    snprintf(g.why, sizeof g.why, "no /dev/net/tun (tun module)");
  else if (!g.privileged && access("/dev/net/tun", R_OK | W_OK) != 0)
    snprintf(g.why, sizeof g.why, "/dev/net/tun is not accessible to uid %u", (unsigned)geteuid());
  else if (g.privileged && getpwuid(NET_UID) != NULL)
    snprintf(g.why, sizeof g.why, "uid %u, pasta's own, belongs to an account on this host", NET_UID);
  else if (g.privileged && !find_program("nft", g.nft, sizeof g.nft))
    snprintf(g.why, sizeof g.why, "nft not found (Debian package nftables): no guard for the host's addresses");
  else if (g.privileged) {
    char err[400];
    if (install_guard(err, sizeof err) != 0) snprintf(g.why, sizeof g.why, "host guard: %.400s", err);
    else g.guard = true;
  }
  if (why && whylen) snprintf(why, whylen, "%.*s", (int)(whylen - 1), g.why);
  return g.why[0] == 0;
}

bool net_available(char *why, size_t whylen) {
  if (!g.ready) { if (why && whylen) snprintf(why, whylen, "networking not initialised"); return false; }
  if (why && whylen) snprintf(why, whylen, "%.*s", (int)(whylen - 1), g.why);
  return g.why[0] == 0;
}

bool net_guarded(void) { return g.guard; }

void net_shutdown(void) {
  if (!g.guard) return;
  char script[128], err[256];
  snprintf(script, sizeof script, "delete table inet %s\n", g.table);
  if (run_nft(script, err, sizeof err) != 0) fprintf(stderr, "sandboxd: removing the host guard: %s\n", err);
  g.guard = false;
}

int net_start(pid_t init_pid, const char *logdir, net_proc *np, char *err, size_t errlen) {
  *np = NET_PROC_NONE;
  char why[256];
  if (!net_available(why, sizeof why)) { snprintf(err, errlen, "internet access is unavailable: %s", why); return -1; }
  char p[64], logfile[4200], runas[32];
  /* Descriptors pasta gets as 3..6: user namespace, network namespace, readiness pipe, log. */
  int fds[4] = {-1, -1, -1, -1}, hi[4] = {-1, -1, -1, -1}, ready[2] = {-1, -1};
  snprintf(p, sizeof p, "/proc/%d/ns/user", (int)init_pid);
  fds[0] = open(p, O_RDONLY | O_CLOEXEC);
  snprintf(p, sizeof p, "/proc/%d/ns/net", (int)init_pid);
  fds[1] = open(p, O_RDONLY | O_CLOEXEC);
  if (fds[0] < 0 || fds[1] < 0 || pipe2(ready, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pasta: namespaces of %d: %s", (int)init_pid, strerror(errno));
    goto fail;
  }
  fds[2] = ready[1];
  ready[1] = -1;
  if (snprintf(logfile, sizeof logfile, "%s/pasta.log", logdir) >= (int)sizeof logfile) {
    snprintf(err, errlen, "pasta: log path too long");
    goto fail;
  }
  fds[3] = open(logfile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fds[3] < 0) { snprintf(err, errlen, "pasta: %s: %s", logfile, strerror(errno)); goto fail; }
  /* pasta opens its log (/proc/self/fd/6) as root without CAP_DAC_OVERRIDE: root's file; its pid
   * file, our readiness pipe (/proc/self/fd/5), once it dropped to NET_UID: NET_UID's. */
  if (g.privileged && fchown(fds[2], NET_UID, NET_UID) != 0) {
    snprintf(err, errlen, "pasta: chown: %s", strerror(errno));
    goto fail;
  }
  /* Out of the way of 0..6, where the child puts stdio and the descriptors pasta names. */
  for (int i = 0; i < 4; i++)
    if ((hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0) { snprintf(err, errlen, "pasta: dup: %s", strerror(errno)); goto fail; }
  snprintf(runas, sizeof runas, "%u:%u", NET_UID, NET_UID);
  /* Everything the child needs is built here: after clone it makes raw system calls only. */
  char *argv[40];
  int a = 0;
  argv[a++] = "pasta";
  argv[a++] = "--quiet";
  argv[a++] = "--foreground";
  if (g.privileged) { argv[a++] = "--runas"; argv[a++] = runas; }
  argv[a++] = "--config-net";
  /* Nothing of the host mapped in, nothing of the sandbox mapped out. */
  argv[a++] = "-t"; argv[a++] = "none";
  argv[a++] = "-u"; argv[a++] = "none";
  argv[a++] = "-T"; argv[a++] = "none";
  argv[a++] = "-U"; argv[a++] = "none";
  argv[a++] = "--no-map-gw";
  argv[a++] = "--dns-forward"; argv[a++] = NET_DNS_FORWARDER;
  argv[a++] = "--log-file"; argv[a++] = "/proc/self/fd/6";
  argv[a++] = "--log-size"; argv[a++] = "65536";
  argv[a++] = "--pid"; argv[a++] = "/proc/self/fd/5";
  argv[a++] = "--userns"; argv[a++] = "/proc/self/fd/3";
  argv[a++] = "--netns"; argv[a++] = "/proc/self/fd/4";
  argv[a++] = "--no-netns-quit";
  argv[a] = NULL;
  char *envp[] = {NULL};
  const char *path = g.pasta;
  /* sandboxd ignores SIGPIPE (inherited over exec) and the creating thread may block signals:
   * pasta gets neither (this version even refuses to start with SIGPIPE already ignored). */
  struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; } dfl = {0};
  uint64_t nomask = 0;
  bool priv = g.privileged;
  /* As root pasta gets a tun device node of its own (NET_UID's) in a private mount namespace:
   * the host's /dev/net/tun may be root's alone, and it stays as it is. */
  long pid = syscall(SYS_clone, (unsigned long)(priv ? CLONE_NEWNS : 0) | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) {
    if (priv) {
      if (syscall(SYS_mount, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
          syscall(SYS_mount, "tmpfs", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=4k") != 0 ||
          syscall(SYS_mknodat, AT_FDCWD, "/dev/net/tun", S_IFCHR | 0600, makedev(10, 200)) != 0 ||
          syscall(SYS_fchownat, AT_FDCWD, "/dev/net/tun", NET_UID, NET_UID, 0) != 0)
        syscall(SYS_exit_group, 120);
    }
    if (syscall(SYS_rt_sigaction, SIGPIPE, &dfl, NULL, sizeof dfl.mask) != 0 ||
        syscall(SYS_rt_sigprocmask, SIG_SETMASK, &nomask, NULL, sizeof nomask) != 0)
      syscall(SYS_exit_group, 123);
    long nul = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR);
    if (nul < 0) syscall(SYS_exit_group, 121);
    for (int i = 0; i < 3; i++) syscall(SYS_dup3, nul, i, 0);
    for (int i = 0; i < 4; i++)
      if (syscall(SYS_dup3, hi[i], 3 + i, 0) < 0) syscall(SYS_exit_group, 122);
    syscall(SYS_close_range, 7, ~0U, CLOSE_RANGE_CLOEXEC);
    syscall(SYS_execve, path, argv, envp);
    syscall(SYS_exit_group, 127);
  }
  if (pid < 0) { snprintf(err, errlen, "pasta: clone: %s", strerror(errno)); goto fail; }
  np->pid = (pid_t)pid;
  np->ready_fd = ready[0];
  ready[0] = -1;
  for (int i = 0; i < 4; i++) { close(fds[i]); close(hi[i]); }
  return 0;
fail:
  for (int i = 0; i < 4; i++) {
    if (fds[i] >= 0) close(fds[i]);
    if (hi[i] >= 0) close(hi[i]);
  }
  for (int i = 0; i < 2; i++) if (ready[i] >= 0) close(ready[i]);
  return -1;
}

/* The last line pasta logged, for an error message. */
static void log_tail(const char *logdir, char *out, size_t cap) {
  out[0] = 0;
  char path[4200];
  snprintf(path, sizeof path, "%s/pasta.log", logdir);
  FILE *f = fopen(path, "re");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (line[0]) snprintf(out, cap, "%.*s", (int)(cap > 1 ? cap - 1 : 0), line);
  }
  fclose(f);
}

int net_wait(net_proc *np, const char *logdir, int timeout_ms, char *err, size_t errlen) {
  if (np->ready_fd < 0) return 0;
  /* pasta writes its pid to the pipe once the namespace's interface, addresses and routes are up. */
  char buf[32];
  size_t n = 0;
  int64_t until = mono_ms() + timeout_ms;
  bool line = false, eof = false;
  while (!line && !eof) {
    int64_t left = until - mono_ms();
    if (left <= 0) break;
    struct pollfd pf = {np->ready_fd, POLLIN, 0};
    int pr = poll(&pf, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) break;
    ssize_t k = read(np->ready_fd, buf + n, sizeof buf - 1 - n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) { eof = true; break; }
    n += (size_t)k;
    buf[n] = 0;
    line = memchr(buf, '\n', n) != NULL || n == sizeof buf - 1;
  }
  close(np->ready_fd);
  np->ready_fd = -1;
  if (line) return 0;
  char tail[300];
  log_tail(logdir, tail, sizeof tail);
  int status = 0;
  if (eof && waitpid(np->pid, &status, 0) == np->pid) {
    np->pid = 0;
    if (WIFEXITED(status))
      snprintf(err, errlen, "pasta exited with status %d before the network was up%s%s", WEXITSTATUS(status),
               tail[0] ? ": " : "", tail);
    else
      snprintf(err, errlen, "pasta died of signal %d before the network was up%s%s", WTERMSIG(status),
               tail[0] ? ": " : "", tail);
  } else {
    snprintf(err, errlen, "pasta did not bring the network up within %d ms%s%s", timeout_ms, tail[0] ? ": " : "", tail);
  }
  net_stop(np);
  return -1;
}

void net_stop(net_proc *np) {
  if (np->ready_fd >= 0) { close(np->ready_fd); np->ready_fd = -1; }
  if (np->pid <= 0) return;
  kill(np->pid, SIGKILL);
  while (waitpid(np->pid, NULL, 0) < 0 && errno == EINTR) {}
  np->pid = 0;
}
