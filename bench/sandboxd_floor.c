/* sandboxd_floor — the floor under sandboxd's create→ready time: what the kernel alone charges
 * for a sandbox-shaped process, measured on this machine in the same run as the sandboxd figures.
 *
 * One iteration (all of it timed):
 *   mkdir <dir>/<i>/{upper,work,merged}, chowned to the sandbox's host root (100000 as root);
 *   clone(CLONE_NEWUSER|NEWNS|NEWPID|NEWUTS|NEWIPC); the parent writes uid_map/gid_map
 *   ("0 100000 65536" as root, else "0 <uid> 1" with setgroups=deny) and releases the child;
 *   the child opens its layer directory (O_PATH, still the host owner), becomes root inside
 *   (setresgid/setresuid 0), makes its mounts private, mounts an overlay through
 *   /proc/self/fd/N (lower = host /usr, upper/work its own, userxattr,volatile — as sandboxd's
 *   init does) and execs <merged>/bin/true through it; the parent waits for exit status 0.
 * Removal of the layer directories is not timed (sandboxd's create→ready does not include it).
 *
 * Usage: sandboxd_floor [-n N] [-d DIR] [-g GAP_MS]   (N default 50; DIR default $TMPDIR or /tmp; the
 * layers go in a fresh subdirectory of DIR, removed at the end; put DIR on the file system of
 * sandboxd's state dir to compare like with like).
 * Two figures per iteration: "exec" = until `true` has been exec'd (the CLOEXEC end of a pipe
 * closes); "exit" = until the parent has reaped it (also charges the namespace teardown on the
 * child's exit path). bench/sandboxd_create.mjs uses "exit": its own series ends when a first
 * command has run and exited. -g GAP_MS sleeps between iterations (untimed).
 * Prints one JSON line: {"n":N,"exec":{"median_ms":..,"min_ms":..,"p90_ms":..,"max_ms":..},"exit":{...}}.
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror bench/sandboxd_floor.c */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define UID_BASE 100000u
#define UID_COUNT 65536u

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int write_file(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = strlen(s);
  ssize_t w = write(fd, s, len);
  close(fd);
  return w == (ssize_t)len ? 0 : -1;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st; (void)f;
  if (flag == FTW_DP) return rmdir(p) != 0 && errno != ENOENT ? -1 : 0;
  return unlink(p) != 0 && errno != ENOENT ? -1 : 0;
}

static int rm_tree(const char *p) { return nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One sandbox-shaped process; returns its duration in ms or -1. */
static double one(const char *base, int i, int priv, uid_t ru, gid_t rg, double *exec_ms) {
  char dir[4096], upper[4200], work[4200], merged[4200];
  snprintf(dir, sizeof dir, "%s/%d", base, i);
  snprintf(upper, sizeof upper, "%s/upper", dir);
  snprintf(work, sizeof work, "%s/work", dir);
  snprintf(merged, sizeof merged, "%s/merged", dir);
  char *const argv[] = {"true", NULL}, *const envp[] = {NULL};
  int go[2], ex[2];
  double t0 = now_ms();
  const char *const sub[] = {dir, upper, work, merged};
  for (int k = 0; k < 4; k++)
    if (mkdir(sub[k], 0755) != 0 || chown(sub[k], ru, rg) != 0) { perror(sub[k]); return -1; }
  if (pipe2(go, O_CLOEXEC) != 0) { perror("pipe"); return -1; }
  if (pipe2(ex, O_CLOEXEC) != 0) { perror("pipe"); close(go[0]); close(go[1]); return -1; }
  long pid = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS |
                                                CLONE_NEWIPC | SIGCHLD), 0, 0, 0, 0);
  if (pid == 0) {
    char c, opts[512], exe[128];
    close(go[1]);
    close(ex[0]);
    if (read(go[0], &c, 1) != 1) _exit(120);
    /* Like sandboxd: open the layer directory while still the host owner of the state dir
     * (its ancestors may be 0700), in the new mount namespace; reach the layers through it. */
    int d = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) _exit(124);
    if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) _exit(121);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) _exit(122);
    snprintf(opts, sizeof opts,
             "lowerdir=/usr,upperdir=/proc/self/fd/%d/upper,workdir=/proc/self/fd/%d/work,userxattr,volatile", d, d);
    snprintf(exe, sizeof exe, "/proc/self/fd/%d/merged", d);
    if (mount("overlay", exe, "overlay", 0, opts) != 0) _exit(123);
    snprintf(exe, sizeof exe, "/proc/self/fd/%d/merged/bin/true", d);
    execve(exe, argv, envp);
    _exit(127);
  }
  close(go[0]);
  close(ex[1]);
  if (pid < 0) { perror("clone"); close(go[1]); close(ex[0]); return -1; }
  char path[64], map[64];
  int ok = 1;
  if (priv) {
    snprintf(map, sizeof map, "0 %u %u\n", UID_BASE, UID_COUNT);
  } else {
    snprintf(path, sizeof path, "/proc/%ld/setgroups", pid);
    ok = write_file(path, "deny") == 0;
    snprintf(map, sizeof map, "0 %u 1\n", (unsigned)getuid());
  }
  snprintf(path, sizeof path, "/proc/%ld/uid_map", pid);
  ok = ok && write_file(path, map) == 0;
  if (!priv) snprintf(map, sizeof map, "0 %u 1\n", (unsigned)getgid());
  snprintf(path, sizeof path, "/proc/%ld/gid_map", pid);
  ok = ok && write_file(path, map) == 0;
  if (!ok) perror("id maps");
  if (ok && write(go[1], "g", 1) != 1) ok = 0;
  close(go[1]);
  /* EOF on ex: the child's copy went with a successful exec (CLOEXEC), or with its exit. */
  char c;
  while (read(ex[0], &c, 1) < 0 && errno == EINTR) {}
  *exec_ms = now_ms() - t0;
  close(ex[0]);
  int status = 0;
  while (waitpid((pid_t)pid, &status, 0) < 0 && errno == EINTR) {}
  double t = now_ms() - t0;
  if (!ok) return -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "sandboxd_floor: child failed (exit status %d; 123 = overlay mount)\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return -1;
  }
  return t;
}

static void report(const char *name, double *t, int n, const char *sep) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  int p90 = (n * 9) / 10 < n ? (n * 9) / 10 : n - 1;
  printf("\"%s\":{\"median_ms\":%.3f,\"min_ms\":%.3f,\"p90_ms\":%.3f,\"max_ms\":%.3f}%s", name,
         n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, t[0], t[p90], t[n - 1], sep);
}

int main(int argc, char **argv) {
  int n = 50, gap_ms = 0;
  const char *parent = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-d") && i + 1 < argc) parent = argv[++i];
    else if (!strcmp(argv[i], "-g") && i + 1 < argc) gap_ms = atoi(argv[++i]);
    else { fprintf(stderr, "usage: %s [-n N] [-d DIR] [-g GAP_MS]\n", argv[0]); return 2; }
  }
  if (n < 1 || n > 100000 || gap_ms < 0 || gap_ms > 10000) { fprintf(stderr, "sandboxd_floor: bad -n or -g\n"); return 2; }
  char base[4096];
  snprintf(base, sizeof base, "%s/sandboxd-floor.XXXXXX", parent);
  if (!mkdtemp(base)) { perror(base); return 1; }
  if (chmod(base, 0711) != 0) { perror(base); return 1; }
  int priv = geteuid() == 0;
  uid_t ru = priv ? UID_BASE : getuid();
  gid_t rg = priv ? UID_BASE : getgid();
  double *t = calloc((size_t)n, sizeof *t), *te = calloc((size_t)n, sizeof *te), warm;
  int rc = 0;
  if (!t || !te) return 1;
  (void)one(base, -1, priv, ru, rg, &warm);   /* warm-up: page cache, dentries */
  for (int i = 0; i < n; i++) {
    if (gap_ms) {
      struct timespec ts = {gap_ms / 1000, (long)(gap_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
    t[i] = one(base, i, priv, ru, rg, &te[i]);
    if (t[i] < 0) { rc = 1; n = i; break; }
  }
  if (rm_tree(base) != 0) fprintf(stderr, "sandboxd_floor: removing %s: %s\n", base, strerror(errno));
  if (rc || n == 0) { free(t); free(te); return 1; }
  printf("{\"n\":%d,", n);
  report("exec", te, n, ",");
  report("exit", t, n, "}\n");
  free(t);
  free(te);
  return 0;
}
