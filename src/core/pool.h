/* The intra-op pool: a kernel splits its work into fixed chunks and the calling rank's threads
 * run them. Chunks depend only on the item count and the grain, never on how many threads
 * there are, so a kernel whose chunks write disjoint outputs (or that combines per-chunk
 * partials in chunk order) gives the same bits with any thread count. */
#ifndef DT_CORE_POOL_H
#define DT_CORE_POOL_H

#include <stdint.h>

/* Runs items [begin, end) of a kernel's work. */
typedef void (*dt_range_fn)(void *arg, int64_t begin, int64_t end);

/* The chunks dt_parallel_for cuts [0, n) into: ceil(n / grain) of grain items (the last may be
 * shorter); grain < 1 counts as 1. Kernels size per-chunk partials with it. */
static inline int64_t dt_parallel_chunks(int64_t n, int64_t grain) {
    if (grain < 1) grain = 1;
    return n > 0 ? (n + grain - 1) / grain : 0;
}

/* Runs fn on every chunk of [0, n) (each chunk exactly once, [c * grain, min(n, (c + 1) *
 * grain))) on the calling thread and its pool's workers; returns when all have run. fn must
 * not call dt_parallel_for itself (a nested call runs serially on the calling thread). */
void dt_parallel_for(int64_t n, int64_t grain, dt_range_fn fn, void *arg);

/* The threads dt_parallel_for may use on the calling thread (1: serial). */
int dt_parallel_threads(void);

#endif
