/* pidfile.h — "<pid> <start time>" records of the processes sandboxd starts outside its own
 * lifetime's reach (a sandbox's init, pasta), so that the next run can stop what a crashed one
 * left running. The start time (/proc/PID/stat field 22) makes a record unambiguous: a pid the
 * kernel reused for another process never matches. */
#ifndef SANDBOXD_PIDFILE_H
#define SANDBOXD_PIDFILE_H
#include <sys/types.h>

long long pidfile_starttime(pid_t pid);          /* -1 when the process is gone */
int  pidfile_write(const char *path, pid_t pid); /* a new file (O_EXCL); 0 or -1 with errno */
/* SIGKILL to the recorded process if it still runs, then waits (at most 2 s) until it is gone. */
void pidfile_kill(const char *path);
#endif
