/* pstream.h — a process stream on the loop: one streaming HTTP request (envd's
 * process.Process/Start or Connect) whose body is decoded in C as it arrives (procstream.h)
 * into a sink per output stream, with flow control back to the transfer:
 *
 *   DISCARD  bytes are counted and dropped
 *   TAIL     a bounded ring with whole-stream offsets (collect mode)
 *   PIPE     a byte queue a reader drains with peek/consume (pipe mode)
 *   FD       a byte queue drained into a borrowed descriptor by non-blocking writes (fdout.h)
 *
 * While a PIPE or FD queue holds high_water bytes or more, the transfer is paused; it resumes
 * once every queue is at most half of that. The loop never blocks on a slow reader or a slow
 * descriptor. The owner is told (cb, always outside libcurl callbacks) only when there is
 * something for it: new control facts, bytes or EOF for a stream whose reader asked
 * (mb_pstream_want), the end of the stream. So a command in collect or inherit mode costs its
 * owner a handful of wake-ups whatever it prints.
 *
 * The stream is closed once the transfer finished, its body was decoded to the end (or failed)
 * and every FD queue was written out (or its descriptor failed). A non-200 answer closes it
 * with MB_E_HTTP; its status and (bounded) body are kept for the owner's error. */
#ifndef MB_PSTREAM_H
#define MB_PSTREAM_H
#include "http.h"
#include "procstream.h"

enum mb_pst_kind { MB_PST_DISCARD = 0, MB_PST_TAIL, MB_PST_PIPE, MB_PST_FD };

struct mb_pst_sink {
  int kind;   /* enum mb_pst_kind */
  size_t max; /* TAIL: bytes kept */
  int fd;     /* FD: the descriptor (borrowed, never closed) */
};

struct mb_pst_config {
  size_t max_message;    /* largest Connect message */
  size_t max_line;       /* longest mbwrap frame line */
  int raw;               /* no mbwrap frames inside (a terminal, a plain program) */
  int direct;            /* set by mb_pstream_spawn: the input is not an envd stream */
  int proto;             /* envd's binary codec: protobuf events, raw data bytes */
  struct mb_pst_sink sink[2];
  size_t high_water;     /* PIPE/FD bytes held that pause the transfer (0: 256 KiB) */
  size_t error_body_max; /* bytes kept of a non-200 answer's body (0: 64 KiB) */
};

/* The fact a failed FD sink adds (after it the stream's output is discarded): stream, value =
 * errno, text = strerror. Numbered after procstream's facts. */
#define MB_PS_SINK_ERROR (MB_PS_STREAM_ERROR + 1)

struct mb_pstream;
typedef void (*mb_pst_cb)(struct mb_pstream *s, void *ud);

/* Starts the request (http->stream and http->sink are set here). */
int mb_pstream_start(mb_loop *l, const mb_http_opts *http, const struct mb_pst_config *cfg,
                     mb_pst_cb cb, void *ud, struct mb_pstream **out, struct mb_error *err);

/* A local source (pstream_local.c): a process on this host whose stdout is an mbwrap frame
 * stream (or, with cfg->raw, plain bytes), or a program on a new PTY (pty: its bytes, raw).
 * Its start and end are facts like envd's: START (pid), END (exit code, "exit status N" /
 * "signal: <name>"); its stderr is the diagnostic text. It ends once the process exited and
 * its output was read to the end (a PTY: what was buffered when the top level exited). */
struct mb_pst_spawn {
  const char *const *argv;   /* argv[0]: an absolute path */
  const char *const *env;    /* "NAME=VALUE" entries, NULL-terminated; NULL inherits ours */
  const char *cwd;           /* NULL: ours */
  int stdin_pipe;            /* stdin is a pipe written with mb_pstream_write; else /dev/null */
  int stdin_inherit;         /* (without stdin_pipe) stdin is this process's own fd 0 */
  int pty;                   /* run on a new PTY of rows × cols in a new session */
  unsigned short rows, cols;
};
int mb_pstream_spawn(mb_loop *l, const struct mb_pst_spawn *sp, const struct mb_pst_config *cfg,
                     mb_pst_cb cb, void *ud, struct mb_pstream **out, struct mb_error *err);
/* The local process's pid (0 for other sources). */
int mb_pstream_pid(const struct mb_pstream *s);
/* Signals the local process: MB_OK, MB_E_INVALID (not local), or MB_E_IO (it has exited). */
int mb_pstream_kill(struct mb_pstream *s, int sig, struct mb_error *err);
/* Input to the local process (its stdin pipe, or the PTY): copied and written as the process
 * reads; mb_pstream_write_pending says what is still queued, and the owner is notified once the
 * queue is empty again after mb_pstream_want_write. At most max_pending bytes may wait. */
int mb_pstream_write(struct mb_pstream *s, const void *p, size_t n, size_t max_pending,
                     struct mb_error *err);
size_t mb_pstream_write_pending(const struct mb_pstream *s);
void mb_pstream_want_write(struct mb_pstream *s);
/* EOF on the stdin pipe (a PTY has none: MB_E_INVALID). */
int mb_pstream_close_input(struct mb_pstream *s, struct mb_error *err);
int mb_pstream_resize(struct mb_pstream *s, unsigned rows, unsigned cols, struct mb_error *err);
/* Cancels what still runs and frees; no callback fires afterwards. */
void mb_pstream_free(struct mb_pstream *s);
/* Cancels the transfer: the stream closes with MB_E_CANCELED (unless it already closed). */
void mb_pstream_cancel(struct mb_pstream *s);

/* Closed? *err (may be NULL) then tells how: MB_OK when the body was complete and valid. */
int mb_pstream_closed(const struct mb_pstream *s, const struct mb_error **err);
long mb_pstream_status(const struct mb_pstream *s); /* 0 until the response headers are in */
const char *mb_pstream_error_body(const struct mb_pstream *s, size_t *len);

size_t mb_pstream_take_facts(struct mb_pstream *s, struct mb_ps_fact *out, size_t max);

/* PIPE streams. peek: the bytes not consumed yet; consume may resume the transfer (so call it
 * outside libcurl callbacks, and do not keep the peeked pointer across it). eof: nothing is
 * queued and nothing more will come. want: notify once bytes or EOF are there. */
const unsigned char *mb_pstream_peek(const struct mb_pstream *s, int stream, size_t *len);
void mb_pstream_consume(struct mb_pstream *s, int stream, size_t n);
int mb_pstream_eof(const struct mb_pstream *s, int stream);
void mb_pstream_want(struct mb_pstream *s, int stream);
/* A PIPE or FD stream's output is not wanted any more: what it holds is dropped, the rest is
 * counted and discarded (the transfer keeps flowing for the control facts). */
void mb_pstream_discard(struct mb_pstream *s, int stream);
/* A PIPE stream takes no more output (counted and dropped); what it holds stays readable (then
 * EOF) but no longer holds the transfer back. */
void mb_pstream_seal(struct mb_pstream *s, int stream);

/* The stream's decoder (procstream.h): its totals, tails (read_from) and diagnostics are the
 * stream's. Borrowed: it lives as long as s. */
const struct mb_procstream *mb_pstream_decoder(const struct mb_pstream *s);
/* Transfer counters (bytes received, pauses, peak held bytes). */
void mb_pstream_info(const struct mb_pstream *s, mb_http_info *info);
#endif
