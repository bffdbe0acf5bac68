/* pool.h — the warm pool: spare sandboxes booted ahead of need with the default shape, and
 * network pairs linked ahead (net.h), for one state dir. A thread refills both; what a spare or
 * a pair is (sandbox.c gives each pair a layer directory too) and how it is made and goes is the
 * caller's, through pool_ops.
 *
 * POOL_WARM_DEFAULT spares per internet flag (env SANDBOXD_WARM_POOL overrides; 0 disables),
 * POOL_NET_DEFAULT pairs (env SANDBOXD_NET_POOL), each at most POOL_MAX. A claimed spare or pair is
 * the claimer's; spares are used once (nothing returns to the pool). pool_start is idempotent;
 * pool_stop ends the refill thread and discards every spare and pair (it also runs at exit). */
#ifndef SANDBOXD_POOL_H
#define SANDBOXD_POOL_H
#include <stdbool.h>
#include <stddef.h>

#include "net.h"

#define POOL_WARM_DEFAULT 1
#define POOL_NET_DEFAULT 1
#define POOL_MAX 8

typedef struct {
  /* A spare (named by the caller) booted for state_dir with that internet flag; NULL with err.
   * NULL: no spares, only network pairs. */
  void *(*boot)(const char *state_dir, bool internet, char *err, size_t errlen);
  void (*discard)(void *spare);
  /* A network pair, linked, for state_dir (with whatever else the caller keeps with it); NULL
   * with err. */
  void *(*new_pair)(const char *state_dir, char *err, size_t errlen);
  void (*discard_pair)(void *pair);
} pool_ops;

void pool_start(const char *state_dir, const pool_ops *ops);
void pool_stop(void);
/* A spare of that internet flag for state_dir, or NULL (none ready, or another state dir). */
void *pool_claim(const char *state_dir, bool internet);
/* A network pair, or NULL (none stocked, or another state dir). */
void *pool_take_pair(const char *state_dir);
#endif
