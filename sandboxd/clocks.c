/* clocks.c — the two clocks sandboxd reads, in milliseconds (see clocks.h). */
#include "clocks.h"

#include <time.h>

static int64_t ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mono_ms(void) { return ms(CLOCK_MONOTONIC); }
int64_t wall_ms(void) { return ms(CLOCK_REALTIME); }
