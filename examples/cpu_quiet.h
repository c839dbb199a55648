/* Waiting for a process's own threads to go quiet after a threaded OpenBLAS call: OpenBLAS's
 * workers poll for more work (yielding) for about 2^28 cycles, a tenth of a second, before they
 * sleep, and meanwhile take cores from whatever runs next. make train and bench_train measure
 * the machine's sgemm peak that way just before they time steps. */
#ifndef DT_EXAMPLES_CPU_QUIET_H
#define DT_EXAMPLES_CPU_QUIET_H

#include <time.h>

static inline double cpu_quiet_now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Returns once the process has used at most a tenth of a core over 20 ms (its other threads
 * asleep), or after 1 s. */
static inline void cpu_quiet_wait(void) {
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    for (int i = 0; i < 50; i++) {
        double cpu0 = cpu_quiet_now(CLOCK_PROCESS_CPUTIME_ID), t0 = cpu_quiet_now(CLOCK_MONOTONIC);
        nanosleep(&tick, NULL);
        double used = cpu_quiet_now(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
        if (used <= 0.1 * (cpu_quiet_now(CLOCK_MONOTONIC) - t0)) return;
    }
}

#endif
