/* clocks.h — the two clocks sandboxd reads, in milliseconds. A leaf. */
#ifndef SANDBOXD_CLOCKS_H
#define SANDBOXD_CLOCKS_H
#include <stdint.h>

/* CLOCK_MONOTONIC: for deadlines, timeouts and intervals (it never jumps). */
int64_t mono_ms(void);
/* CLOCK_REALTIME, since the epoch: for times reported or stored (created, last used, expiry). */
int64_t wall_ms(void);
#endif
