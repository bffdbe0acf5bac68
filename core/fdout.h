/* fdout.h — writes to a descriptor this process does not own (its stdout, say) without ever
 * blocking the loop and without changing the descriptor's flags under anyone else's feet:
 *   - pipes, FIFOs and terminals are re-opened through /proc/self/fd, which gives a private
 *     open file description that alone is made non-blocking;
 *   - sockets are written with send(MSG_DONTWAIT);
 *   - regular files and other devices are written directly (such writes do not wait for a
 *     reader);
 *   - when a pipe or terminal cannot be re-opened, writes of at most PIPE_BUF bytes are made
 *     only once poll(2) reports the descriptor writable.
 * The owner keeps the bytes; mb_fdout_write takes what fits now and, when nothing fits, arms a
 * uv_poll that calls `writable` once the descriptor can take more. */
#ifndef MB_FDOUT_H
#define MB_FDOUT_H
#include "errors.h"
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

struct mb_fdout;
typedef void (*mb_fdout_cb)(void *ud);

/* fd stays the caller's (never closed); a private re-opened descriptor is closed with o. */
int mb_fdout_new(uv_loop_t *uv, int fd, mb_fdout_cb writable, void *ud, struct mb_fdout **out,
                 struct mb_error *err);
/* Frees (the poll handle is closed through the loop); no callback fires afterwards. */
void mb_fdout_free(struct mb_fdout *o);
/* → bytes written now (0: none fit; `writable` fires when more fit) | -errno on failure. */
ssize_t mb_fdout_write(struct mb_fdout *o, const void *p, size_t n);
#endif
