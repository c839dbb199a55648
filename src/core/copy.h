/* Host copies at memory speed: a copy with streaming (non-temporal) stores for blocks too large
 * to stay in the cache until they are read (a large collective's output, a peer's box), which
 * neither reads the destination into the cache first nor evicts the working set. Small blocks go
 * to memcpy. */
#ifndef DT_CORE_COPY_H
#define DT_CORE_COPY_H

#include <stddef.h>

/* From this size on, a collective's output, a peer's box and a reduction's result go out with
 * streaming stores. Below it they stay in the caches, where the next op finds them: a
 * sequence-parallel all_gather of 256 KiB feeds a GEMM at once, and with streaming stores that
 * GEMM read it back from memory (tp=4 training 1.09x faster with plain stores up to 1 MiB,
 * docs/bench-stores.md). A collective timed alone, whose output nobody reads, still gains from
 * streaming at 4 MiB, so larger blocks keep it. */
#define DT_STREAM_MIN_BYTES ((size_t)1 << 20)

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

/* From this size on, dt_copy_large splits a plain copy over the intra-op pool, and from the
 * second on it streams. A tensor copy (a view's, a contiguous one) is read by the next op at
 * once: plain stores leave it in the cache, where the consumer finds it. Measured on this Xeon
 * (2 threads, copy and then one read of the result; docs in copy.c): plain stores beat streaming
 * up to 4 MiB, and two threads' plain stores halve 768 KiB to 2 MiB copies. */
#define DT_COPY_SPLIT_MIN_BYTES  ((size_t)512 << 10)
#define DT_COPY_STREAM_MIN_BYTES ((size_t)8 << 20)

/* A copy for a result read soon: memcpy below DT_COPY_SPLIT_MIN_BYTES, memcpy pieces over the
 * calling thread's pool below DT_COPY_STREAM_MIN_BYTES, streamed pieces over the pool from there
 * on (a block that large leaves the cache anyway). Blocks must not overlap. */
void dt_copy_large(void *dst, const void *src, size_t bytes);

#endif
