/* clock.c -- the one clock of deadlines, timings and traces: microseconds
 * on CLOCK_MONOTONIC, which a change of the wall clock does not move. */
#include "base/base.h"

#include <time.h>

uint64_t clock_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
