/* clocks.c — the clocks sandboxd reads, in milliseconds (see clocks.h). */
#include "clocks.h"

static int64_t ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mono_ms(void) { return ms(CLOCK_MONOTONIC); }
int64_t wall_ms(void) { return ms(CLOCK_REALTIME); }

double ms_since(struct timespec t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
}
