/* Monotonic microseconds, for counters and traces. */
#ifndef DT_CORE_CLOCK_H
#define DT_CORE_CLOCK_H

#include <time.h>

static inline double dt_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

#endif
