/* mbwrap: the process-group wrapper and its one-shot tools. Frame protocol: PROTOCOL.md. */
#include "mbwrap.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static const char HELP[] =
    "mbwrap: moonbox's in-sandbox process-group wrapper (frames on stdout; see PROTOCOL.md)\n"
    "  mbwrap run [-g GRACE_MS] [-o SPILL:MAX] [-e SPILL:MAX] [-i BASE64] [-E NAME=VALUE]... [-K NAME]...\n"
    "             -- PROGRAM [ARG]...\n"
    "  mbwrap exec [--ctty] [-K NAME]... -- PROGRAM [ARG]...\n"
    "  mbwrap realpath PATH [CWD]\n"
    "  mbwrap stat [-L] PATH\n"
    "  mbwrap read PATH MAX\n"
    "  mbwrap list DIR\n"
    "  mbwrap cat PATH\n"
    "  mbwrap publish [--create-only | --expect VERSION] [--mode OCTAL | --keep-mode] [--before MAX]\n"
    "                 [--stdin] STAGING_FILE TARGET\n"
    "  mbwrap remove [-r] PATH\n"
    "  mbwrap mkdir [-p] PATH\n"
    "  mbwrap rename [--no-replace] FROM TO\n"
    "  mbwrap watch [-r] DIR\n"
    "  mbwrap which NAME PATHLIST\n"
    "  mbwrap fg PID\n"
    "  mbwrap killsession SID GRACE_MS\n"
    "  mbwrap signal PGID SIGNAME\n"
    "  mbwrap unpack [--max-files N] [--max-bytes N] [--max-meta N] [--tar PROG] STAGE TARGET\n"
    "  mbwrap manifest [--max-files N] [--max-bytes N] [--max-meta N] [--gitignore] [--exclude BASE64]\n"
    "                  [--sha256sum PROG] DIR\n"
    "  mbwrap pack [--max-bytes N] [--tar PROG] DIR LIST_BASE64\n";

int main(int argc, char **argv) {
  /* A TERM that comes while `run` is still parsing its arguments must wait for the signalfd
   * (it terminates the tree like any other), not kill the wrapper before it said anything. */
  if (argc >= 2 && strcmp(argv[1], "run") == 0) {
    sigset_t set;
    block_run_signals(&set);
  }
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fputs(HELP, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  static const struct {
    const char *name;
    int (*fn)(int, char **);
  } cmds[] = {
      {"run", run_main},        {"exec", exec_main},         {"realpath", tool_realpath},
      {"stat", tool_stat},      {"read", tool_read},         {"list", tool_list},
      {"cat", tool_cat},
      {"publish", tool_publish}, {"which", tool_which},       {"fg", tool_fg},
      {"remove", tool_remove},  {"mkdir", tool_mkdir},       {"rename", tool_rename},
      {"killsession", tool_killsession}, {"signal", tool_signal},
      {"unpack", tool_unpack},  {"manifest", tool_manifest},  {"pack", tool_pack},
      {"watch", tool_watch},
  };
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (strcmp(argv[1], cmds[i].name) == 0) {
      if (cmds[i].fn != run_main && cmds[i].fn != exec_main) tool_init();
      return cmds[i].fn(argc - 1, argv + 1);
    }
  fprintf(stderr, "mbwrap: unknown command '%s'\n%s", argv[1], HELP);
  return 2;
}
