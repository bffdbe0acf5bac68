/* pidfile.c — see pidfile.h. */
#include "pidfile.h"
#include "procfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

long long pidfile_starttime(pid_t pid) {
  char p[64], buf[1024];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  if (procfile_read(p, buf, sizeof buf) != 0) return -1;
  char *q = strrchr(buf, ')');   /* comm may contain spaces */
  if (!q) return -1;
  int field = 2;
  for (q++; *q && field < 22; q++)
    if (*q == ' ') field++;
  return field == 22 ? strtoll(q, NULL, 10) : -1;
}

int pidfile_write(const char *path, pid_t pid) {
  char info[64];
  snprintf(info, sizeof info, "%d %lld\n", (int)pid, pidfile_starttime(pid));
  return procfile_put(path, O_WRONLY | O_CREAT | O_EXCL, 0600, info);
}

void pidfile_kill(const char *path) {
  char buf[64];
  long pid = 0;
  long long start = -1;
  if (procfile_read(path, buf, sizeof buf) != 0 || sscanf(buf, "%ld %lld", &pid, &start) != 2 || pid <= 1 ||
      pidfile_starttime((pid_t)pid) != start)
    return;
  kill((pid_t)pid, SIGKILL);
  for (int i = 0; i < 1000 && pidfile_starttime((pid_t)pid) == start; i++) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}
