/* moonbox_signals.h — the signal state a program is started with, shared by mbwrap (run, exec)
 * and sandboxd's init: an empty mask and the default disposition of every signal. Nothing its
 * parent blocked or ignored may leak in — an ignored SIGINT makes a terminal's Ctrl-C do
 * nothing, an ignored SIGPIPE makes `yes | head` report a broken pipe. Call between fork and
 * exec (async-signal-safe). */
#ifndef MOONBOX_SIGNALS_H
#define MOONBOX_SIGNALS_H

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline void mb_default_signals(void) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < 65; s++) {
    if (s == SIGKILL || s == SIGSTOP || sigaction(s, &dfl, NULL) == 0 || errno != EINVAL) continue;
    /* The C library refuses the signals it reserves (32-34), yet a parent may have left them
     * ignored and an ignored disposition survives execve: reset those through the raw syscall
     * (the kernel's layout — handler, flags, restorer, mask — is the same on x86_64 and arm64). */
    struct { void (*handler)(int); unsigned long flags; void (*restorer)(void); unsigned long mask; } ka;
    memset(&ka, 0, sizeof ka);
    ka.handler = SIG_DFL;
    syscall(SYS_rt_sigaction, s, &ka, NULL, sizeof ka.mask);
  }
}

#endif
