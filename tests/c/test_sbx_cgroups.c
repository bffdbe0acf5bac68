/* test_sbx_cgroups.c — a cgroup v1 set made ahead and renamed (sandboxd/cgroups.c cg_rename,
 * for a network pair stocked with its cgroups): a task that joined it before the rename is in
 * the renamed set, every hierarchy's directory moves (controllers mounted together once), a
 * name that is taken is refused naming the file, and nothing is left. Root on a cgroup v1 host
 * only (tests/vm covers v2, where a set is never renamed); elsewhere it says so and passes. */
#include "mbtest.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroups.h"

static char state[64] = "/tmp/mb-cgroups-XXXXXX", msg[700];

static bool is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The line of /proc/PID/cgroup for the hierarchy that has `ctl`, its path. */
static bool cgroup_of(pid_t pid, const char *ctl, char *out, size_t n) {
  char p[64], line[1024];
  snprintf(p, sizeof p, "/proc/%d/cgroup", (int)pid);
  FILE *f = fopen(p, "r");
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) {
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!b) continue;
    *b = 0;
    for (char *save = NULL, *c = strtok_r(a + 1, ",", &save); c && !found; c = strtok_r(NULL, ",", &save))
      if (!strcmp(c, ctl)) {
        snprintf(out, n, "%s", b + 1);
        out[strcspn(out, "\n")] = 0;
        found = true;
      }
  }
  if (f) fclose(f);
  return found;
}

static void test_rename(void) {
  cg_limits lim = {64, 256, 1};
  cg_set a, taken;
  CHECK_INT(cg_create(&a, state, "kit1", &lim, msg, sizeof msg), 0);
  CHECK_INT(cg_create(&taken, state, "taken", &lim, msg, sizeof msg), 0);
  /* A task joins before the rename, as a stocked pair's starter does (its own "0" per tasks file). */
  int fds[8], n = cg_boot_fds(&a, fds, 8, msg, sizeof msg);
  CHECK(n > 0);
  int go[2];
  CHECK_INT(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    for (int i = 0; i < n; i++)
      if (write(fds[i], "0", 1) != 1) _exit(1);
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) < 0) _exit(2);   /* until the parent has looked */
    _exit(0);
  }
  close(go[0]);
  for (int i = 0; i < n; i++) close(fds[i]);
  char before[CG_N][512];
  for (int c = 0; c < CG_N; c++) memcpy(before[c], a.path[c], sizeof before[c]);
  /* the child is in kit1 once its writes are done: poll its cgroup file */
  char where[1024] = "";
  for (int i = 0; i < 500 && !(cgroup_of(child, "pids", where, sizeof where) && strstr(where, "/kit1")); i++) usleep(2000);
  CHECK_HAS(where, "/kit1");

  CHECK_INT(cg_rename(&a, "sbx-renamed", msg, sizeof msg), 0);
  for (int c = 0; c < CG_N; c++) {
    if (!before[c][0]) continue;
    CHECK(!is_dir(before[c]));
    CHECK(is_dir(a.path[c]));
    CHECK_HAS(a.path[c], "/sbx-renamed");
  }
  /* cpu and cpuacct, where mounted together, still share one directory */
  if (a.path[CG_CPU][0] && a.path[CG_CPUACCT][0] && !strcmp(before[CG_CPU], before[CG_CPUACCT]))
    CHECK_STR(a.path[CG_CPU], a.path[CG_CPUACCT]);
  CHECK(cgroup_of(child, "pids", where, sizeof where));
  CHECK_HAS(where, "/sbx-renamed");
  if (cgroup_of(child, "memory", where, sizeof where)) CHECK_HAS(where, "/sbx-renamed");

  /* a taken name: refused, naming what failed; the set keeps working paths */
  CHECK_INT(cg_rename(&a, "taken", msg, sizeof msg), -1);
  CHECK_HAS(msg, "rename");
  CHECK_HAS(msg, "taken");
  for (int c = 0; c < CG_N; c++)
    if (a.path[c][0]) CHECK(is_dir(a.path[c]));

  close(go[1]);
  int status;
  CHECK_INT(waitpid(child, &status, 0), child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char keep[CG_N][512];
  for (int c = 0; c < CG_N; c++) memcpy(keep[c], a.path[c], sizeof keep[c]);
  cg_remove(&a, "sbx-renamed");
  cg_remove(&taken, "taken");
  for (int c = 0; c < CG_N; c++)
    if (keep[c][0]) CHECK(!is_dir(keep[c]));
}

int main(void) {
  if (geteuid() != 0 || access("/sys/fs/cgroup/pids/tasks", W_OK) != 0) {
    printf("# skipped: needs root on a cgroup v1 host with the pids controller\n");
    return 0;
  }
  if (!mkdtemp(state)) { perror("mkdtemp"); return 1; }
  if (cg_init(state, NULL, msg, sizeof msg) != 0) { fprintf(stderr, "%s\n", msg); return 1; }
  cg_caps caps;
  char why[600] = "", desc[600] = "";
  cg_probe(&caps, why, sizeof why, desc, sizeof desc);
  if (!strstr(desc, "v1")) {
    printf("# skipped: not a cgroup v1 host (%s)\n", desc);
    return 0;
  }
  MBT_RUN(test_rename);
  cg_shutdown();
  rmdir(state);
  return mbt_report();
}
