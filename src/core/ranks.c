/* The count behind core/ranks.h. */
#include <stdatomic.h>

#include "core/ranks.h"

static atomic_int running;

void dt_process_ranks_add(int delta) {
    atomic_fetch_add(&running, delta);
}

int dt_process_ranks(void) {
    return atomic_load_explicit(&running, memory_order_relaxed);
}
