/* Monotonic microseconds, for counters and traces, and nanoseconds, for deadlines. */
#ifndef DT_CORE_CLOCK_H
#define DT_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double dt_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static inline int64_t dt_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

#endif
