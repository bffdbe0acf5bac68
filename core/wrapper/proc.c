/* /proc inspection and small helpers for mbwrap. Descendants are found by scanning every
 * /proc/<pid>/stat for its parent: /proc/<pid>/task/<tid>/children needs CONFIG_PROC_CHILDREN,
 * which some kernels (including the ones this project is tested on) lack. */
#include "mbwrap.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int proc_stat(pid_t pid, struct pstat *ps) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
    if (r == 0 || (len += (size_t)r) == sizeof buf - 1) break;
  }
  close(fd);
  buf[len] = 0;
  /* comm may contain spaces and parentheses: the fields start after the last ')'. */
  char *rp = strrchr(buf, ')');
  if (!rp) {
    errno = EINVAL;
    return -1;
  }
  char state;
  int ppid, pgrp, sid, tty, tpgid;
  if (sscanf(rp + 1, " %c %d %d %d %d %d", &state, &ppid, &pgrp, &sid, &tty, &tpgid) != 6) {
    errno = EINVAL;
    return -1;
  }
  ps->pid = pid;
  ps->state = state;
  ps->ppid = ppid;
  ps->pgrp = pgrp;
  ps->sid = sid;
  ps->tty_nr = tty;
  ps->tpgid = tpgid;
  return 0;
}

int proc_list(struct pstat **out, size_t *n) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  size_t cap = 256, cnt = 0;
  struct pstat *v = malloc(cap * sizeof *v);
  if (!v) {
    closedir(d);
    errno = ENOMEM;
    return -1;
  }
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!isdigit((unsigned char)de->d_name[0])) continue;
    long pid = strtol(de->d_name, NULL, 10);
    if (pid <= 0) continue;
    struct pstat ps;
    if (proc_stat((pid_t)pid, &ps) < 0) continue; /* exited meanwhile */
    if (cnt == cap) {
      struct pstat *nv = realloc(v, 2 * cap * sizeof *v);
      if (!nv) {
        free(v);
        closedir(d);
        errno = ENOMEM;
        return -1;
      }
      v = nv;
      cap *= 2;
    }
    v[cnt++] = ps;
  }
  closedir(d);
  *out = v;
  *n = cnt;
  return 0;
}

static int cmp_pid(const void *a, const void *b) {
  pid_t x = ((const struct pstat *)a)->pid, y = ((const struct pstat *)b)->pid;
  return (x > y) - (x < y);
}

size_t proc_descendants(pid_t root, pid_t **out) {
  struct pstat *all;
  size_t n;
  *out = NULL;
  if (proc_list(&all, &n) < 0) return 0;
  char *in = calloc(n ? n : 1, 1);
  pid_t *res = malloc((n ? n : 1) * sizeof *res);
  size_t cnt = 0;
  if (!in || !res) {
    free(in);
    free(res);
    free(all);
    return 0;
  }
  /* Fixed point over the parent relation (sorted by pid so a parent is found by bisection). */
  qsort(all, n, sizeof *all, cmp_pid);
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t i = 0; i < n; i++) {
      if (in[i]) continue;
      int parent_in = all[i].ppid == root;
      if (!parent_in) {
        struct pstat key = {.pid = all[i].ppid};
        struct pstat *par = bsearch(&key, all, n, sizeof *all, cmp_pid);
        parent_in = par && in[par - all];
      }
      if (parent_in) {
        in[i] = 1;
        changed = 1;
      }
    }
  }
  for (size_t i = 0; i < n; i++)
    if (in[i] && all[i].state != 'Z' && all[i].state != 'X') res[cnt++] = all[i].pid;
  free(in);
  free(all);
  *out = res;
  return cnt;
}

static const struct {
  const char *name;
  int sig;
} SIGS[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"ILL", SIGILL},     {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT}, {"BUS", SIGBUS},       {"FPE", SIGFPE},   {"KILL", SIGKILL},   {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},     {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},   {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU}, {"URG", SIGURG},       {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},   {"VTALRM", SIGVTALRM},
    {"PROF", SIGPROF}, {"WINCH", SIGWINCH},   {"IO", SIGIO},     {"PWR", SIGPWR},     {"SYS", SIGSYS},
};

int signal_from_name(const char *s) {
  uint64_t v;
  if (parse_u64(s, &v) == 0) return v >= 1 && v <= 64 ? (int)v : -1;
  if (strncmp(s, "SIG", 3) == 0) s += 3;
  for (size_t i = 0; i < sizeof SIGS / sizeof SIGS[0]; i++)
    if (strcmp(s, SIGS[i].name) == 0) return SIGS[i].sig;
  return -1;
}

const char *errno_name(int e) {
  switch (e) {
  case EPERM: return "EPERM";
  case ENOENT: return "ENOENT";
  case ESRCH: return "ESRCH";
  case EIO: return "EIO";
  case E2BIG: return "E2BIG";
  case ENOEXEC: return "ENOEXEC";
  case ENOMEM: return "ENOMEM";
  case EACCES: return "EACCES";
  case EBUSY: return "EBUSY";
  case EEXIST: return "EEXIST";
  case EXDEV: return "EXDEV";
  case ENOTDIR: return "ENOTDIR";
  case EISDIR: return "EISDIR";
  case EINVAL: return "EINVAL";
  case ETXTBSY: return "ETXTBSY";
  case EFBIG: return "EFBIG";
  case ENOSPC: return "ENOSPC";
  case EROFS: return "EROFS";
  case EMLINK: return "EMLINK";
  case ENAMETOOLONG: return "ENAMETOOLONG";
  case ENOTEMPTY: return "ENOTEMPTY";
  case ELOOP: return "ELOOP";
  case EDQUOT: return "EDQUOT";
  default: return "EUNKNOWN";
  }
}

int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  uint64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

void mb_sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

int64_t mb_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
