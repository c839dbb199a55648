/* A caching allocator over any raw allocator (cudaMalloc/cudaFree on a GPU): freed blocks are
 * kept by size class and stream and handed out again to the same stream, as PyTorch's CUDA
 * caching allocator does, so that steady-state ops never reach the raw allocator. Reuse on
 * the stream a block was last used on is safe without events: stream order puts the new
 * user's work after the old one's. Thread-safe. Knows nothing of CUDA. */
#ifndef DT_CORE_CACHE_ALLOC_H
#define DT_CORE_CACHE_ALLOC_H

#include <stddef.h>

#include "dtensor/device.h"

typedef struct dt_cache_backend {
    void *(*raw_alloc)(void *user, size_t bytes); /* NULL when out of memory */
    void (*raw_free)(void *user, void *p);
    void *user;
} dt_cache_backend;

typedef struct dt_cache_alloc dt_cache_alloc;

/* NULL when out of host memory. */
dt_cache_alloc *dt_cache_alloc_create(dt_cache_backend backend);
/* Gives every block, cached or still in use, back to the raw allocator. */
void dt_cache_alloc_destroy(dt_cache_alloc *a);

/* A block of at least bytes for stream (any token; NULL is a stream too). When the raw
 * allocator fails, the cache is emptied and the allocation tried once more; NULL then. */
void *dt_cache_alloc_get(dt_cache_alloc *a, size_t bytes, void *stream);
/* Returns p to the cache; 0, or -1 when p did not come from a (nothing changes then). */
int dt_cache_alloc_put(dt_cache_alloc *a, void *p);

/* Gives the cached (free) blocks back to the raw allocator. */
void dt_cache_alloc_empty(dt_cache_alloc *a);
void dt_cache_alloc_stats(dt_cache_alloc *a, dt_memory_stats *stats_out);

/* The size a request of bytes is rounded to: multiples of 512 bytes below 1 MiB, then four
 * classes per power of two (at most 25% more than asked). */
size_t dt_cache_alloc_round(size_t bytes);

#endif
