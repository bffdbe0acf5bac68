/* mbwrap exec: start a program with exactly the named variables of our own environment and
 * nothing else — how a terminal gets its environment. The host sends the values in the Start
 * request's `envs` (never on a command line, where /proc/<pid>/cmdline shows them to every
 * process of the sandbox) and names them with -K; whatever else envd put in is dropped. No
 * frames: a terminal's bytes are the program's own. Failures (bad usage: exit 2; a -K name
 * missing, a program that cannot be executed: exit 127) are reported on stderr.
 * --ctty: fd 0 is a terminal and we lead a new session (the host's own terminals: libuv made
 * the session, it cannot take the controlling terminal for us): make it ours, so the program
 * has job control and the terminal knows its foreground group. The program starts with the
 * default signal dispositions whatever envd left ignored (Ctrl-C must interrupt). */
#include "mbwrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define EXEC_MAX_ENV 4096

int exec_main(int argc, char **argv) {
  static char *envp[EXEC_MAX_ENV + 1];
  size_t nenv = 0;
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) { i++; break; }
    if (strcmp(argv[i], "--ctty") == 0) {
      if (ioctl(0, TIOCSCTTY, 0) != 0) {
        perror("mbwrap exec: --ctty");
        return 127;
      }
      continue;
    }
    if (strcmp(argv[i], "-K") != 0 || i + 1 >= argc) {
      fprintf(stderr, "usage: mbwrap exec [--ctty] [-K NAME]... -- PROGRAM [ARG]...\n");
      return 2;
    }
    const char *name = argv[++i];
    size_t nl = strlen(name);
    if (!nl || strchr(name, '=') || nenv == EXEC_MAX_ENV) {
      fprintf(stderr, "mbwrap exec: bad -K name '%s'\n", name);
      return 2;
    }
    char *entry = NULL;
    for (char **e = environ; e && *e; e++)
      if (strncmp(*e, name, nl) == 0 && (*e)[nl] == '=') entry = *e;
    if (!entry) {
      fprintf(stderr, "mbwrap exec: environment variable '%s' (-K) is not in the wrapper's environment\n", name);
      return 127;
    }
    for (size_t k = 0; k < nenv; k++)
      if (strncmp(envp[k], entry, nl + 1) == 0) {
        fprintf(stderr, "mbwrap exec: duplicate environment name '%s'\n", name);
        return 2;
      }
    envp[nenv++] = entry;
  }
  if (i >= argc) {
    fprintf(stderr, "usage: mbwrap exec [--ctty] [-K NAME]... -- PROGRAM [ARG]...\n");
    return 2;
  }
  envp[nenv] = NULL;
  mb_default_signals();
  exec_program(argv + i, envp, -1);
  return 127; /* not reached */
}
