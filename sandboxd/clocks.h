/* clocks.h — the clocks sandboxd reads, in milliseconds. A leaf. */
#ifndef SANDBOXD_CLOCKS_H
#define SANDBOXD_CLOCKS_H
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC: for deadlines, timeouts and intervals (it never jumps). */
int64_t mono_ms(void);
/* CLOCK_REALTIME, since the epoch: for times reported or stored (created, last used, expiry). */
int64_t wall_ms(void);
/* Milliseconds (fractional) since t0, a CLOCK_MONOTONIC reading: for the create traces. */
double ms_since(struct timespec t0);
#endif
