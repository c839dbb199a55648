/* The intra-op pool: a kernel splits its work into fixed chunks and the calling rank's threads
 * run them. Chunks depend only on the item count and the grain, never on how many threads
 * there are, so a kernel whose chunks write disjoint outputs (or that combines per-chunk
 * partials in chunk order) gives the same bits with any thread count. */
#ifndef DT_CORE_POOL_H
#define DT_CORE_POOL_H

#include <stdint.h>

#include "dtensor/status.h"

/* Runs items [begin, end) of a kernel's work. */
typedef void (*dt_range_fn)(void *arg, int64_t begin, int64_t end);

/* The chunks dt_parallel_for cuts [0, n) into: ceil(n / grain) of grain items (the last may be
 * shorter); grain < 1 counts as 1. Kernels size per-chunk partials with it. */
static inline int64_t dt_parallel_chunks(int64_t n, int64_t grain) {
    if (grain < 1) grain = 1;
    return n > 0 ? n / grain + (n % grain != 0) : 0; /* n + grain - 1 could overflow */
}

/* Runs fn on every chunk of [0, n) (each chunk exactly once, [c * grain, min(n, (c + 1) *
 * grain))) on the calling thread and its pool's workers; returns when all have run. fn must
 * not call dt_parallel_for itself (a nested call runs serially on the calling thread). */
void dt_parallel_for(int64_t n, int64_t grain, dt_range_fn fn, void *arg);

/* The threads dt_parallel_for may use on the calling thread (1: serial). */
int dt_parallel_threads(void);

/* ---- sizing: called by the runtimes that start ranks, and by tests --------------------- */

/* The most threads one pool may have. */
#define DT_POOL_MAX_THREADS 1024

/* Gives the calling thread a pool of n threads (itself and n - 1 workers), replacing the one it
 * had. Not collective; blocks while old workers exit and new ones start. n outside [1,
 * DT_POOL_MAX_THREADS]: DT_ERR_ARG; a thread that cannot start: DT_ERR_SYSTEM (the pool is then
 * serial). Without this call a thread's first dt_parallel_for sizes its pool by
 * dt_pool_share(the ranks running in this process). */
dt_status dt_pool_set_threads(int n);

/* Stops the calling thread's workers (a rank that ends). Its next dt_parallel_for starts a new
 * pool of the default size. A thread that exits without it has its workers stopped too. */
void dt_pool_release(void);

/* DT_NUM_THREADS: *threads = its value, or 0 when unset or empty. A value that is not a whole
 * number in [1, DT_POOL_MAX_THREADS]: DT_ERR_ARG naming the variable and value, *threads
 * untouched. */
dt_status dt_pool_env_threads(int *threads);

/* The threads each of `ranks` in-process ranks gets: DT_NUM_THREADS when set and valid, else
 * the usable cores (the affinity mask) divided among them, at least 1. */
int dt_pool_share(int ranks);

#endif
