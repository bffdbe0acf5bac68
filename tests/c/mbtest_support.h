/* mbtest_support.h — pieces several C tests share: the local HTTP test server
 * (spec/support/server.py) and a growable byte buffer for building response bodies. */
#ifndef MBTEST_SUPPORT_H
#define MBTEST_SUPPORT_H
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

extern char **environ;

/* Starts the test server; → its port (0 on failure), its pid in *pid. */
static inline int mbt_start_server(pid_t *pid) {
  int p[2];
  if (pipe(p) != 0) return 0;
  char *argv[] = {"python3", MB_SOURCE_DIR "/spec/support/server.py", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_addclose(&fa, p[0]);
  int rc = posix_spawnp(pid, "python3", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) { close(p[0]); return 0; }
  char line[64];
  size_t n = 0;
  while (n + 1 < sizeof line && read(p[0], line + n, 1) == 1 && line[n] != '\n') n++;
  line[n] = '\0';
  close(p[0]);
  int port = 0;
  return sscanf(line, "listening %d", &port) == 1 ? port : 0;
}

/* A growable, always NUL-terminated byte buffer (test inputs only: aborts on OOM). */
struct body { char *s; size_t n, cap; };

static inline void body_add(struct body *b, const void *p, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = (b->n + n + 1) * 2;
    char *ns = realloc(b->s, b->cap);
    if (!ns) abort();
    b->s = ns;
  }
  memcpy(b->s + b->n, p, n);
  b->n += n;
  b->s[b->n] = 0;
}
#endif
