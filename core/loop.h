/* loop.h — the one event loop: a libuv loop plus libcurl's multi *socket* interface driven by it
 * (uv_poll per socket, one uv_timer for curl's timeout). No I/O thread.
 *
 * Transfers finish through a per-transfer callback. Callbacks that may call back into the
 * loop's users (Lua) never run inside a libcurl callback: libcurl callbacks only record state
 * and mark the transfer pending; the loop delivers pending notifications after
 * curl_multi_socket_action() has returned (mb_loop_notify). */
#ifndef MB_LOOP_H
#define MB_LOOP_H
#include <stdint.h>
#include <curl/curl.h>
#include <uv.h>

typedef struct mb_loop mb_loop;

/* Something that wants to be told "your state changed" outside libcurl's callbacks. */
typedef struct mb_pending {
  struct mb_pending *next, *prev;
  int queued;
  void (*fire)(struct mb_pending *p);
} mb_pending;

/* A transfer on the loop; embed it in your request. done fires once, outside libcurl callbacks,
 * when libcurl reports the transfer complete (never after mb_loop_remove). */
typedef struct mb_xfer {
  CURL *easy;
  void (*done)(struct mb_xfer *x, CURLcode rc);
  int added;
  int unwatched;                 /* loop-internal: a socket of it could not be watched (OOM) */
  struct mb_xfer *unwatched_next;
} mb_xfer;

/* uv may be an embedder's loop (borrowed, never closed by us) or NULL (a private loop is made). */
int mb_loop_new(uv_loop_t *uv, mb_loop **out);
/* Closes every handle the loop owns, cleans libcurl up; transfers must have been removed. */
void mb_loop_free(mb_loop *l);
uv_loop_t *mb_loop_uv(mb_loop *l);
CURLM *mb_loop_multi(mb_loop *l);

/* Monotonic milliseconds (with sub-millisecond fraction). */
double mb_loop_now_ms(void);

/* Starts x->easy (configured by the caller); returns MB_OK or an mb_err. */
int mb_loop_add(mb_loop *l, mb_xfer *x);
/* Stops a transfer (cancellation); a no-op when it already completed. */
void mb_loop_remove(mb_loop *l, mb_xfer *x);

/* Queues p->fire to run after the current libcurl call returns (deduplicated). */
void mb_loop_defer(mb_loop *l, mb_pending *p);
/* Drops p from the queue (before freeing its owner). */
void mb_loop_undefer(mb_loop *l, mb_pending *p);
/* Runs queued notifications; the loop calls it after every libcurl call and from an idle
 * handle, so a notification queued from anywhere is delivered on the next loop turn. */
void mb_loop_flush(mb_loop *l);

/* A reset easy handle from the loop's small pool (or a new one); NULL when out of memory.
 * Give it back with mb_loop_put_easy (it is reset and kept, up to MB_LOOP_EASY_POOL handles). */
#define MB_LOOP_EASY_POOL 16
CURL *mb_loop_get_easy(mb_loop *l);
void mb_loop_put_easy(mb_loop *l, CURL *easy);

/* Counters for benchmarks and tests. */
typedef struct {
  uint64_t requests;      /* transfers started */
  uint64_t connects;      /* new connections opened (the rest reused keep-alive connections) */
  uint64_t active;        /* transfers in flight */
} mb_loop_stats;
mb_loop_stats *mb_loop_stats_of(mb_loop *l);
#endif
