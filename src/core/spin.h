/* The pause a busy-wait loop takes between polls of a flag (x86 PAUSE, Arm YIELD). */
#ifndef DT_CORE_SPIN_H
#define DT_CORE_SPIN_H

static inline void dt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

#endif
