/* frames.h — the mbwrap stdio frame protocol (core/wrapper/PROTOCOL.md): an incremental decoder
 * that enforces every rule there, and an encoder. */
#ifndef MB_FRAMES_H
#define MB_FRAMES_H
#include "errors.h"
#include <stddef.h>

#include "moonbox_protocol.h" /* MB_FRAME_DATA_MAX, MB_FRAME_LINE_MIN_LIMIT */

enum mb_frame_kind {
  MB_FRAME_STDOUT = 1, /* o<base64>: data/len */
  MB_FRAME_STDERR,     /* e<base64>: data/len */
  MB_FRAME_PGID,       /* !pgid <n>: value */
  MB_FRAME_EXIT,       /* !exit <n>: value 0..255 */
  MB_FRAME_SIGNAL,     /* !signal <n>: value 1..64 */
  MB_FRAME_SPAWN_ERROR,/* !spawn-error <errno> <base64>: value = errno, data/len = message */
  MB_FRAME_EMPTY,      /* !empty */
  MB_FRAME_DONE        /* !done */
};

struct mb_frame {
  int kind;
  const unsigned char *data; /* valid during the callback only */
  size_t len;
  int value;
};

/* Name used in Lua: "stdout", "stderr", "pgid", "exit", "signal", "spawn_error", "empty",
 * "done"; NULL for other values. */
const char *mb_frame_kind_name(int kind);

/* Return 0 to continue; non-zero stops the push, which returns that value. */
typedef int (*mb_frame_cb)(void *ud, const struct mb_frame *f);

struct mb_frame_decoder;
/* max_line: longest accepted line, '\n' excluded (MB_E_TOO_LARGE beyond it). */
struct mb_frame_decoder *mb_frame_decoder_new(size_t max_line);
void mb_frame_decoder_free(struct mb_frame_decoder *d);
/* Feed any split of the stream; frames reach cb in order. Rejections are MB_E_PROTOCOL (or
 * MB_E_TOO_LARGE for a long line) and sticky. */
int mb_frame_decoder_push(struct mb_frame_decoder *d, const void *data, size_t len,
                          mb_frame_cb cb, void *ud, struct mb_error *err);
/* End of input: MB_E_TRUNCATED for a line without '\n', MB_E_PROTOCOL without !done. */
int mb_frame_decoder_finish(struct mb_frame_decoder *d, struct mb_error *err);
/* Where data frames are decoded (optional): before an o/e frame's base64 is decoded, reserve(ud,
 * kind, n) may return room for n bytes in the consumer's own memory (its sink), or NULL for the
 * decoder's buffer. The frame callback then gets f->data pointing there: the bytes are in place,
 * no copy. A line that does not decode leaves that room with unspecified contents. */
typedef unsigned char *(*mb_frame_reserve_cb)(void *ud, int kind, size_t n);
void mb_frame_decoder_set_reserve(struct mb_frame_decoder *d, mb_frame_reserve_cb reserve, void *ud);

/* Exact encoded size of f including '\n' (0 if f is not encodable). */
size_t mb_frame_encoded_len(const struct mb_frame *f);
/* Encodes one frame; data frames carry 1..MB_FRAME_DATA_MAX bytes. MB_E_INVALID for a frame the
 * protocol forbids, MB_E_TOO_LARGE if cap is too small. */
int mb_frame_encode(const struct mb_frame *f, char *out, size_t cap, size_t *out_len);
/* Size of `len` bytes of stream data as o/e frames of at most MB_FRAME_DATA_MAX bytes each. */
size_t mb_frame_data_encoded_len(size_t len);
/* Encodes len bytes (len > 0) as consecutive o (kind MB_FRAME_STDOUT) or e frames. */
int mb_frame_encode_data(int kind, const void *data, size_t len, char *out, size_t cap,
                         size_t *out_len);
#endif
