/* procstream.h — the host side of one process stream, decoded in C from the raw HTTP body of a
 * process.Process/Start (or Connect) response straight into per-stream sinks:
 *
 *   body bytes → Connect envelopes → event JSON → base64 of event.data.stdout → mbwrap frames
 *   → base64 → program bytes → sink (stdout and stderr each choose one)
 *
 * Sinks: DISCARD; QUEUE (a byte queue the owner drains with peek/consume: a pipe reader, an fd
 * writer); TAIL (a bounded ring with whole-stream byte offsets: the last `max` bytes are kept,
 * readers ask "everything from offset N"). Control facts (envd start/end events, the wrapper's
 * control frames, the end of the Connect stream) accumulate until the owner takes them; each
 * kind occurs at most once per stream, so they are bounded. The wrapper's own stderr
 * (event.data.stderr) is kept as a bounded diagnostic text.
 *
 * Raw mode (cfg.raw): a stream with no mbwrap inside — a terminal's PTY, or a plain program.
 * The bytes of event.data.pty and data.stdout go to the STDOUT sink, data.stderr to the STDERR
 * sink. Facts: START, END, STREAM_END, STREAM_ERROR only; finish checks the envelopes only.
 *
 * Memory: every allocation is bounded by the configuration: the envelope decoder and the JSON
 * scratch by max_message, the frame decoder by max_line, each TAIL ring by its max, each QUEUE
 * by its max (exceeding it fails the stream: its owner must stop feeding — pause the transfer —
 * well before). No I/O. */
#ifndef MB_PROCSTREAM_H
#define MB_PROCSTREAM_H
#include "errors.h"
#include <stddef.h>
#include <stdint.h>

enum mb_ps_sink_kind { MB_PS_DISCARD = 0, MB_PS_QUEUE, MB_PS_TAIL };
enum mb_ps_stream { MB_PS_STDOUT = 0, MB_PS_STDERR = 1 };

struct mb_ps_sink {
  int kind;   /* enum mb_ps_sink_kind */
  size_t max; /* TAIL: bytes kept (0 keeps none but still counts); QUEUE: most bytes held (>= 1) */
};

struct mb_ps_config {
  size_t max_message;     /* largest Connect envelope payload (≥ 1) */
  size_t max_line;        /* longest mbwrap frame line (≥ MB_FRAME_LINE_MIN_LIMIT to admit all) */
  int raw;                /* raw mode: no mbwrap frames inside (a terminal, a plain program) */
  int direct;             /* the input is not an envd stream but its content itself: a local
                             wrapper's stdout (frames), or with raw, a PTY's bytes */
  int proto;              /* envd's binary codec (application/connect+proto): each envelope is
                             a StartResponse/ConnectResponse protobuf, data bytes are raw */
  struct mb_ps_sink sink[2];
};

enum mb_ps_fact_kind {
  MB_PS_START = 1,    /* envd start event: value = the wrapper's pid */
  MB_PS_PGID,         /* !pgid: value */
  MB_PS_SPAWN_ERROR,  /* !spawn-error: value = errno, text = message */
  MB_PS_EXIT,         /* !exit: value */
  MB_PS_SIGNAL,       /* !signal: value */
  MB_PS_EMPTY,        /* !empty */
  MB_PS_DONE,         /* !done */
  MB_PS_END,          /* envd end event: value = exitCode, flag = exited, text = status,
                         code = its error string (cut to fit) */
  MB_PS_STREAM_END,   /* end-of-stream envelope without error */
  MB_PS_STREAM_ERROR  /* end-of-stream envelope with an error: code = Connect code name, text */
};

#define MB_PS_TEXT_MAX 1100
#define MB_PS_CODE_MAX 64
#define MB_PS_FACTS_MAX 16 /* each kind occurs at most once per stream */
#define MB_PS_DIAG_MAX 4096

struct mb_ps_fact {
  int kind;
  int stream;
  int flag;
  long long value;
  char code[MB_PS_CODE_MAX];
  char text[MB_PS_TEXT_MAX];
};

struct mb_procstream;

/* NULL on allocation failure or an invalid configuration (max_message or max_line 0, a sink
 * kind out of range, a QUEUE with max 0). */
struct mb_procstream *mb_procstream_new(const struct mb_ps_config *cfg);
void mb_procstream_free(struct mb_procstream *ps);

/* Feeds raw body bytes (any split). Errors (MB_E_PROTOCOL, MB_E_TOO_LARGE, MB_E_TRUNCATED,
 * MB_E_NOMEM) are sticky. Rejected: invalid envelopes, JSON or protobuf, a second start or end event,
 * anything the frame decoder rejects, a QUEUE over its max. */
int mb_procstream_push(struct mb_procstream *ps, const void *data, size_t len,
                       struct mb_error *err);
/* End of the body: the envelope decoder's and then the frame decoder's finish (a truncated or
 * missing end-of-stream, a frame stream without !done). */
int mb_procstream_finish(struct mb_procstream *ps, struct mb_error *err);

/* Facts not taken yet, in stream order; taking them empties the list. */
size_t mb_procstream_take_facts(struct mb_procstream *ps, struct mb_ps_fact *out, size_t max);
size_t mb_procstream_pending_facts(const struct mb_procstream *ps);
/* Facts and diagnostics a local source adds itself (its process's start and end, its stderr):
 * the same vocabulary as an envd stream's. */
int mb_procstream_add_fact(struct mb_procstream *ps, const struct mb_ps_fact *f);
void mb_procstream_add_diag(struct mb_procstream *ps, const void *p, size_t n);
/* The kinds among the facts not taken yet, as a bit mask (1 << kind). */
unsigned mb_procstream_pending_kinds(const struct mb_procstream *ps);
/* QUEUE: the bytes not consumed yet (len 0 if none or not a QUEUE), and consuming them. */
const unsigned char *mb_procstream_peek(const struct mb_procstream *ps, int stream, size_t *len);
void mb_procstream_consume(struct mb_procstream *ps, int stream, size_t n);
/* A QUEUE takes no more bytes (they are counted and dropped); what it holds stays readable. */
void mb_procstream_seal(struct mb_procstream *ps, int stream);
/* Replaces a stream's QUEUE by DISCARD, dropping what it holds (output nobody wants any more). */
void mb_procstream_discard(struct mb_procstream *ps, int stream);

/* Whole-stream byte count of a stream (every sink counts). */
uint64_t mb_procstream_total(const struct mb_procstream *ps, int stream);
/* TAIL read: everything from whole-stream offset `from`, as up to two segments of the ring
 * (a, al then b, bl). lossy = 1 when `from` is older than the oldest kept byte: the segments
 * then hold the whole tail. next = the total. An offset past the total reads nothing.
 * For other sinks: no bytes, lossy = (from < total). */
void mb_procstream_read_from(const struct mb_procstream *ps, int stream, uint64_t from,
                             const unsigned char **a, size_t *al, const unsigned char **b,
                             size_t *bl, uint64_t *next, int *lossy);
/* The binary codec's output event — StartResponse{event: ProcessEvent{data: DataEvent{stdout |
 * stderr | pty: bytes}}}, exactly those three nested fields each spanning its parent — recognised
 * without protobuf-c's unpack (which copies the bytes): → 0 stdout, 1 stderr, 2 pty with *data
 * pointing into msg, or -1 for any other message (which then goes through protobuf-c). Exact: a
 * message it recognises unpacks to the same event (a fuzzer compares both). */
int mb_procstream_proto_data(const void *msg, size_t len, const unsigned char **data, size_t *n);
/* The wrapper's own stderr (first MB_PS_DIAG_MAX bytes). */
const char *mb_procstream_diag(const struct mb_procstream *ps, size_t *len);
#endif
