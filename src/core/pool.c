/* The intra-op pool's serial form: every chunk runs on the calling thread, in chunk order. */
#include "core/pool.h"

void dt_parallel_for(int64_t n, int64_t grain, dt_range_fn fn, void *arg) {
    if (grain < 1) grain = 1;
    for (int64_t b = 0; b < n; b += grain) fn(arg, b, b + grain < n ? b + grain : n);
}

int dt_parallel_threads(void) { return 1; }
