/* Streaming copies (core/copy.h). x86-64: SSE2 non-temporal 16-byte stores, 64 bytes per step,
 * after a head that aligns the destination to a cache line; glibc's memcpy switches to them
 * only for blocks of hundreds of MiB. Elsewhere: memcpy. dt_copy_large shares a large block
 * out to the intra-op pool in fixed pieces, streamed only when it is larger than the caches. */
#include <stdint.h>
#include <string.h>

#include "core/copy.h"
#include "core/pool.h"

#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>

void dt_copy_stream_unfenced(void *dst, const void *src, size_t bytes) {
    char *d = dst;
    const char *s = src;
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (head > bytes) head = bytes;
    memcpy(d, s, head);
    d += head, s += head, bytes -= head;
    for (; bytes >= 64; d += 64, s += 64, bytes -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, bytes);
}

void dt_stream_fence(void) {
    _mm_sfence();
}
#else
void dt_copy_stream_unfenced(void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
}

void dt_stream_fence(void) {}
#endif

void dt_copy_stream(void *dst, const void *src, size_t bytes) {
    dt_copy_stream_unfenced(dst, src, bytes);
    dt_stream_fence();
}

/* A piece each thread streams, and fences: its stores are then seen before it says it is done.
 * A plain piece: a 768 KiB copy is six, three for each of two threads. */
#define STREAM_PIECE ((int64_t)512 << 10)
#define PLAIN_PIECE  ((int64_t)128 << 10)

typedef struct {
    void *dst;
    const void *src;
} copy_job;

static void stream_range(void *arg, int64_t begin, int64_t end) {
    const copy_job *j = arg;
    dt_copy_stream((char *)j->dst + begin, (const char *)j->src + begin, (size_t)(end - begin));
}

/* The pool's end of dt_parallel_for orders these stores before the caller goes on. */
static void plain_range(void *arg, int64_t begin, int64_t end) {
    const copy_job *j = arg;
    memcpy((char *)j->dst + begin, (const char *)j->src + begin, (size_t)(end - begin));
}

/* Thresholds measured with a copy followed by one read of the result (the consumer), median of
 * 61 interleaved runs each, 2 pool threads, on the shared 2-vCPU Xeon (busy; us, copy + read):
 *   256 KiB: memcpy 35, streamed 45, memcpy split 36;  768 KiB: 91, 114, 55;
 *   1 MiB: 121, 153, 71;  2 MiB: 252, 313, 154;  4 MiB: 643, 666, 683;  16 MiB: streaming
 *   copies alone 1.4x faster than memcpy. */
void dt_copy_large(void *dst, const void *src, size_t bytes) {
    copy_job j = {dst, src};
    if (bytes >= DT_COPY_STREAM_MIN_BYTES)
        dt_parallel_for((int64_t)bytes, STREAM_PIECE, stream_range, &j);
    else if (bytes >= DT_COPY_SPLIT_MIN_BYTES)
        dt_parallel_for((int64_t)bytes, PLAIN_PIECE, plain_range, &j);
    else
        memcpy(dst, src, bytes);
}
