/* mbwrap: the static in-sandbox process-group wrapper (see PROTOCOL.md). Internal interfaces. */
#ifndef MBWRAP_H
#define MBWRAP_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Largest raw payload of one o/e frame, and its encoded line length ('o' + base64 + '\n'). */
#include "../include/moonbox_protocol.h"
#include "../include/moonbox_signals.h"
#define MB_FRAME_RAW MB_FRAME_DATA_MAX
#define MB_FRAME_LINE (MB_FRAME_LINE_MIN_LIMIT + 1) /* with its '\n' */

/* ---- out.c: base64 encoder and frame output buffer ---- */
size_t mb_b64_len(size_t n);
size_t mb_b64_encode(const unsigned char *in, size_t n, char *out);
long mb_b64_decode(const char *in, size_t n, unsigned char *out); /* strict; -1 if invalid */

/* A FIFO of bytes to write to stdout; whole frames are appended, partial writes are fine. */
struct obuf {
  char *buf;
  size_t cap, head, tail;
};
int ob_init(struct obuf *ob, size_t cap);
size_t ob_len(const struct obuf *ob);
size_t ob_space(struct obuf *ob);
int ob_frame(struct obuf *ob, char kind, const void *data, size_t n); /* n <= MB_FRAME_RAW */
int ob_ctl(struct obuf *ob, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ob_flush_some(struct obuf *ob, int fd);  /* 0 ok (maybe partial), -1 errno (EAGAIN is ok) */
int ob_flush_all(struct obuf *ob, int fd);   /* waits for POLLOUT; -1 errno on failure */

/* Tool mode: blocking output on fd 1. */
void tool_init(void);
void tool_data(const void *data, size_t n);
void tool_error_data(const void *data, size_t n); /* stderr (e) frames: cat's failure line */
void tool_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tool_flush(void);      /* everything buffered out now (a long-running tool: watch) */
int tool_finish(int code); /* emits !exit code, !empty, !done; returns the process exit status */
int tool_fail(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "err CODE detail\n" into buf (cap bytes; newlines in the detail made spaces) → its length. */
size_t tool_err_line(char *buf, size_t cap, const char *code, const char *fmt, va_list ap);

/* ---- proc.c: /proc inspection, names ---- */
struct pstat {
  pid_t pid, ppid, pgrp, sid, tpgid;
  int tty_nr;
  char state;
};
int proc_stat(pid_t pid, struct pstat *ps);          /* 0, or -1 with errno */
int proc_list(struct pstat **out, size_t *n);        /* every process; caller frees */
size_t proc_descendants(pid_t root, pid_t **out);    /* live (non-zombie) descendants; caller frees */
int signal_from_name(const char *s);                  /* "TERM", "SIGTERM" or "15"; -1 if unknown */
const char *errno_name(int e);                        /* "ENOENT"..., or "EUNKNOWN" */
int parse_u64(const char *s, uint64_t *out);          /* strict decimal */
int mkdir_parents(const char *path);                  /* mkdir -p of path's directory part; 0 or -1 errno */
void block_run_signals(sigset_t *set);                /* SIGCHLD TERM INT HUP blocked, for a signalfd (run) */
void mb_sleep_ms(long ms);
int64_t mb_now_ms(void);                              /* CLOCK_MONOTONIC */

/* ---- entry points ---- */
int run_main(int argc, char **argv);
int exec_main(int argc, char **argv);
void exec_program(char **argv, char **envp, int errw); /* never returns (run.c) */
int tool_read(int argc, char **argv);
int tool_list(int argc, char **argv);
int tool_cat(int argc, char **argv);
int tool_realpath(int argc, char **argv);
int tool_stat(int argc, char **argv);
int tool_publish(int argc, char **argv);
int tool_remove(int argc, char **argv);
int tool_mkdir(int argc, char **argv);
int tool_rename(int argc, char **argv);
int tool_which(int argc, char **argv);
int tool_fg(int argc, char **argv);
int tool_killsession(int argc, char **argv);
int tool_signal(int argc, char **argv);
int tool_unpack(int argc, char **argv);   /* sync.c */
int tool_manifest(int argc, char **argv);
int tool_pack(int argc, char **argv);
int tool_watch(int argc, char **argv);    /* watch.c */

#endif
