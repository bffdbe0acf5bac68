/* loop.c — libcurl's multi socket interface on a libuv loop.
 * libcurl tells us which sockets to watch (on_socket) and when to wake it (on_curl_timer); we
 * translate to uv_poll / uv_timer and call curl_multi_socket_action back. Finished transfers
 * are collected with curl_multi_info_read after each action. */
#include "loop.h"
#include "errors.h"
#include <stdlib.h>
#include <string.h>

typedef struct mb_sock {
  uv_poll_t poll;
  mb_loop *loop;
  curl_socket_t fd;
  struct mb_sock *next, *prev;
} mb_sock;

struct mb_loop {
  uv_loop_t *uv;
  uv_loop_t own;          /* used when no loop was handed over */
  int owns_uv;
  CURLM *multi;
  uv_timer_t timer;       /* curl's timeout */
  uv_idle_t idle;         /* flushes notifications queued outside a curl action */
  mb_sock *socks;
  mb_xfer *unwatched;     /* transfers to fail with CURLE_OUT_OF_MEMORY after the action */
  mb_pending *head, *tail;
  int open_handles;       /* our uv handles not yet closed; freed when it reaches 0 */
  int freeing;
  mb_loop_stats stats;
  CURL *pool[MB_LOOP_EASY_POOL];  /* reset easy handles kept for reuse (saves init/cleanup) */
  int npool;
};

static void maybe_release(mb_loop *l) {
  if (l->freeing && l->open_handles == 0) free(l);
}

static void on_handle_closed(uv_handle_t *h) {
  mb_loop *l = h->data;
  l->open_handles--;
  maybe_release(l);
}

static void on_sock_closed(uv_handle_t *h) {
  mb_sock *s = (mb_sock *)h;
  mb_loop *l = s->loop;
  free(s);
  l->open_handles--;
  maybe_release(l);
}

static void sock_close(mb_sock *s) {
  mb_loop *l = s->loop;
  if (s->prev) s->prev->next = s->next; else l->socks = s->next;
  if (s->next) s->next->prev = s->prev;
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

/* Delivers completions: the easy handle leaves the multi before its owner hears about it, so
 * the owner may free it from the callback. */
static void check_done(mb_loop *l) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(l->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL *easy = m->easy_handle;
    CURLcode rc = m->data.result;
    mb_xfer *x = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    long nconn = 0;
    if (curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &nconn) == CURLE_OK && nconn > 0)
      l->stats.connects += (uint64_t)nconn;
    curl_multi_remove_handle(l->multi, easy);
    if (l->stats.active) l->stats.active--;
    if (x) {
      x->added = 0;
      if (x->done) x->done(x, rc);
    }
  }
}

/* Fails the transfers whose socket could not be watched (on_socket ran out of memory); they
 * would otherwise wait for events that never come. Runs outside libcurl calls. */
static void fail_unwatched(mb_loop *l) {
  while (l->unwatched) {
    mb_xfer *x = l->unwatched;
    l->unwatched = x->unwatched_next;
    x->unwatched = 0;
    x->unwatched_next = NULL;
    if (!x->added) continue;
    mb_loop_remove(l, x);
    if (x->done) x->done(x, CURLE_OUT_OF_MEMORY);
  }
}

static void after_action(mb_loop *l) {
  check_done(l);
  fail_unwatched(l);
  mb_loop_flush(l);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  mb_sock *s = (mb_sock *)h;
  mb_loop *l = s->loop;
  int flags = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
  else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  int running;
  curl_multi_socket_action(l->multi, s->fd, flags, &running);
  after_action(l);
}

static void on_idle(uv_idle_t *h);

static void on_timer(uv_timer_t *t) {
  mb_loop *l = t->data;
  int running;
  curl_multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  after_action(l);
}

/* A socket of easy cannot be watched: fail that transfer once the current libcurl call has
 * returned. Returning -1 instead would make libcurl abort every transfer of the multi handle,
 * for good. */
static int sock_unwatched(mb_loop *l, CURL *easy) {
  mb_xfer *x = NULL;
  if (easy) curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
  if (!x) return -1;
  if (!x->unwatched) {
    x->unwatched = 1;
    x->unwatched_next = l->unwatched;
    l->unwatched = x;
    uv_idle_start(&l->idle, on_idle); /* in case no action follows */
  }
  return 0;
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  mb_loop *l = userp;
  mb_sock *s = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (s) {
      curl_multi_assign(l->multi, fd, NULL);
      sock_close(s);
    }
    return 0;
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return sock_unwatched(l, easy);
    if (uv_poll_init_socket(l->uv, &s->poll, fd) != 0) { free(s); return sock_unwatched(l, easy); }
    s->loop = l;
    s->fd = fd;
    s->next = l->socks;
    if (l->socks) l->socks->prev = s;
    l->socks = s;
    l->open_handles++;
    curl_multi_assign(l->multi, fd, s);
  }
  int ev = 0;
  if (what & CURL_POLL_IN) ev |= UV_READABLE;
  if (what & CURL_POLL_OUT) ev |= UV_WRITABLE;
  return uv_poll_start(&s->poll, ev, on_poll) == 0 ? 0 : -1;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
  (void)multi;
  mb_loop *l = userp;
  if (timeout_ms < 0) uv_timer_stop(&l->timer);
  /* Even 0 goes through the timer: libcurl forbids calling socket_action from here. */
  else uv_timer_start(&l->timer, on_timer, (uint64_t)timeout_ms, 0);
  return 0;
}

static void on_idle(uv_idle_t *h) {
  fail_unwatched(h->data);
  mb_loop_flush(h->data);
}

static uv_once_t curl_once = UV_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int mb_loop_new(uv_loop_t *uv, mb_loop **out) {
  *out = NULL;
  uv_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK) return MB_E_NOMEM;
  mb_loop *l = calloc(1, sizeof *l);
  if (!l) return MB_E_NOMEM;
  if (uv) l->uv = uv;
  else {
    if (uv_loop_init(&l->own) != 0) { free(l); return MB_E_IO; }
    l->uv = &l->own;
    l->owns_uv = 1;
  }
  l->multi = curl_multi_init();
  if (!l->multi) {
    if (l->owns_uv) uv_loop_close(&l->own);
    free(l);
    return MB_E_NOMEM;
  }
  curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
  curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
  uv_timer_init(l->uv, &l->timer);
  l->timer.data = l;
  uv_idle_init(l->uv, &l->idle);
  l->idle.data = l;
  l->open_handles = 2;
  *out = l;
  return MB_OK;
}

void mb_loop_free(mb_loop *l) {
  if (!l) return;
  /* Cleanup may report sockets through on_socket(REMOVE), which closes their polls. */
  curl_multi_cleanup(l->multi);
  l->multi = NULL;
  while (l->npool) curl_easy_cleanup(l->pool[--l->npool]);
  while (l->socks) sock_close(l->socks);
  l->head = l->tail = NULL;
  uv_close((uv_handle_t *)&l->timer, on_handle_closed);
  uv_close((uv_handle_t *)&l->idle, on_handle_closed);
  int owns = l->owns_uv;
  uv_loop_t *uv = l->uv;
  l->freeing = 1;
  if (owns) {
    /* Our private loop: the struct holding it must outlive uv_run, so hold one extra count. */
    l->open_handles++;
    uv_run(uv, UV_RUN_DEFAULT);
    uv_loop_close(uv);
    l->open_handles--;
    maybe_release(l);
  }
  /* A borrowed loop frees l from the last close callback when its owner runs it. */
}

uv_loop_t *mb_loop_uv(mb_loop *l) { return l->uv; }
CURLM *mb_loop_multi(mb_loop *l) { return l->multi; }
mb_loop_stats *mb_loop_stats_of(mb_loop *l) { return &l->stats; }

double mb_loop_now_ms(void) { return (double)uv_hrtime() / 1e6; }

int mb_loop_add(mb_loop *l, mb_xfer *x) {
  if (!l->multi || x->added) return MB_E_INVALID;
  curl_easy_setopt(x->easy, CURLOPT_PRIVATE, (char *)x);
  CURLMcode mc = curl_multi_add_handle(l->multi, x->easy);
  if (mc != CURLM_OK) return mc == CURLM_OUT_OF_MEMORY ? MB_E_NOMEM : MB_E_INVALID;
  x->added = 1;
  l->stats.requests++;
  l->stats.active++;
  return MB_OK;
}

void mb_loop_remove(mb_loop *l, mb_xfer *x) {
  if (x->unwatched) { /* unlink: its owner may free it now */
    mb_xfer **pp = &l->unwatched;
    while (*pp && *pp != x) pp = &(*pp)->unwatched_next;
    if (*pp) *pp = x->unwatched_next;
    x->unwatched = 0;
    x->unwatched_next = NULL;
  }
  if (!x->added) return;
  x->added = 0;
  if (l->multi) curl_multi_remove_handle(l->multi, x->easy);
  if (l->stats.active) l->stats.active--;
}

CURL *mb_loop_get_easy(mb_loop *l) {
  if (l->npool) return l->pool[--l->npool];
  return curl_easy_init();
}

void mb_loop_put_easy(mb_loop *l, CURL *easy) {
  if (!easy) return;
  if (l->freeing || l->npool == MB_LOOP_EASY_POOL) { curl_easy_cleanup(easy); return; }
  curl_easy_reset(easy);
  l->pool[l->npool++] = easy;
}

void mb_loop_defer(mb_loop *l, mb_pending *p) {
  if (p->queued || l->freeing) return;
  p->queued = 1;
  p->next = NULL;
  p->prev = l->tail;
  if (l->tail) l->tail->next = p; else l->head = p;
  l->tail = p;
  uv_idle_start(&l->idle, on_idle);
}

void mb_loop_undefer(mb_loop *l, mb_pending *p) {
  if (!p->queued) return;
  if (p->prev) p->prev->next = p->next; else l->head = p->next;
  if (p->next) p->next->prev = p->prev; else l->tail = p->prev;
  p->next = p->prev = NULL;
  p->queued = 0;
}

void mb_loop_flush(mb_loop *l) {
  /* fire() may queue more (including p itself) or free other entries: always pop the head. */
  while (l->head) {
    mb_pending *p = l->head;
    mb_loop_undefer(l, p);
    p->fire(p);
  }
  uv_idle_stop(&l->idle);
}
