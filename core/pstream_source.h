/* pstream_source.h — private: what a process stream's input source (pstream.c: an envd stream
 * over HTTP; pstream_local.c: a local wrapper process, a local PTY) and the stream's core tell
 * each other. A source feeds bytes, reports its end, and is asked to pause and resume by the
 * stream's backlog (PIPE/FD queues at or above the high water). */
#ifndef MB_PSTREAM_SOURCE_H
#define MB_PSTREAM_SOURCE_H
#include "pstream.h"

struct mb_pst_source {
  void (*resume)(struct mb_pstream *s);  /* the backlog went down: continue if paused */
  void (*cancel)(struct mb_pstream *s);  /* stop: the source ends with MB_E_CANCELED */
  void (*free)(struct mb_pstream *s);    /* release everything (no callbacks afterwards) */
  void (*info)(const struct mb_pstream *s, mb_http_info *i);
};

/* The core, for sources. mb_pst_new makes a stream with no source yet. */
int mb_pst_new(mb_loop *l, const struct mb_pst_config *cfg, mb_pst_cb cb, void *ud,
               struct mb_pstream **out, struct mb_error *err);
void mb_pst_set_source(struct mb_pstream *s, const struct mb_pst_source *src, void *ud);
void *mb_pst_source_ud(const struct mb_pstream *s);
const struct mb_pst_source *mb_pst_source_of(const struct mb_pstream *s);
mb_loop *mb_pst_loop(const struct mb_pstream *s);
/* Input bytes (decoded into the sinks); → MB_OK or the decoding error (the source then stops). */
int mb_pst_input(struct mb_pstream *s, const void *p, size_t n, struct mb_error *err);
/* The source ended: err NULL or MB_OK when its input was complete. */
void mb_pst_ended(struct mb_pstream *s, const struct mb_error *err);
size_t mb_pst_backlog(const struct mb_pstream *s);
size_t mb_pst_high_water(const struct mb_pstream *s);
/* A fact or diagnostic from the source itself (a local process's start and end, its stderr). */
void mb_pst_fact(struct mb_pstream *s, const struct mb_ps_fact *f);
void mb_pst_diag(struct mb_pstream *s, const void *p, size_t n);
/* Tell the owner something changed (e.g. a write queue drained). */
void mb_pst_notify(struct mb_pstream *s);
#endif
