/* Host copies at memory speed: a copy with streaming (non-temporal) stores for blocks that will
 * not be read again soon (a collective's output, a peer's box), which neither reads the
 * destination into the cache first nor evicts the working set. Small blocks go to memcpy. */
#ifndef DT_CORE_COPY_H
#define DT_CORE_COPY_H

#include <stddef.h>

/* From this size on, dt_copy_large streams (below it the destination would still be in the
 * cache when it is next read, and memcpy is as fast). */
#define DT_STREAM_MIN_BYTES ((size_t)256 << 10)

/* memcpy with streaming stores for the whole block, whatever its size, ending with a store
 * fence so that another thread that synchronizes with this one afterwards sees the bytes.
 * Blocks must not overlap. On targets without streaming stores: memcpy. */
void dt_copy_stream(void *dst, const void *src, size_t bytes);

/* dt_copy_stream without the fence, for a series of copies that ends with dt_stream_fence. */
void dt_copy_stream_unfenced(void *dst, const void *src, size_t bytes);
void dt_stream_fence(void);

/* Asks for bytes at p to be brought into the cache (a hint; no fault on bad addresses). */
static inline void dt_prefetch(const void *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 64)
        __builtin_prefetch((const char *)p + i);
}

/* dt_copy_stream from DT_STREAM_MIN_BYTES on, memcpy below. Blocks must not overlap. */
void dt_copy_large(void *dst, const void *src, size_t bytes);

#endif
