/* The count behind core/ranks.h. */
#include <stdatomic.h>

#include "core/ranks.h"

static atomic_int running;
static void (*_Atomic watcher)(int running);

void dt_process_ranks_add(int delta) {
    int now = atomic_fetch_add(&running, delta) + delta;
    void (*fn)(int) = atomic_load(&watcher);
    if (fn) fn(now);
}

void dt_process_ranks_watch(void (*fn)(int running)) {
    atomic_store(&watcher, fn);
}

int dt_process_ranks(void) {
    return atomic_load_explicit(&running, memory_order_relaxed);
}
