/* Busy-wait helpers: the pause a loop takes between polls of a flag (x86 PAUSE, Arm YIELD),
 * and the cores this process may run on (its affinity mask), which decides whether waits may
 * spin and yield (every rank has a core) or must sleep at once. */
#ifndef DT_CORE_SPIN_H
#define DT_CORE_SPIN_H

#include <sched.h>
#include <unistd.h>

static inline void dt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static inline int dt_usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

#endif
