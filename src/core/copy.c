/* Streaming copies (core/copy.h). x86-64: SSE2 non-temporal 16-byte stores, 64 bytes per step,
 * after a head that aligns the destination to a cache line; glibc's memcpy switches to them
 * only for blocks of hundreds of MiB. Elsewhere: memcpy. dt_copy_large shares a large block
 * out to the intra-op pool in fixed pieces. */
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

/* A piece each thread streams, and fences: its stores are then seen before it says it is done. */
#define COPY_PIECE ((int64_t)512 << 10)

typedef struct {
    void *dst;
    const void *src;
} copy_job;

static void copy_range(void *arg, int64_t begin, int64_t end) {
    const copy_job *j = arg;
    dt_copy_stream((char *)j->dst + begin, (const char *)j->src + begin, (size_t)(end - begin));
}

void dt_copy_large(void *dst, const void *src, size_t bytes) {
    if (bytes >= 2 * (size_t)COPY_PIECE) {
        copy_job j = {dst, src};
        dt_parallel_for((int64_t)bytes, COPY_PIECE, copy_range, &j);
    } else if (bytes >= DT_STREAM_MIN_BYTES) {
        dt_copy_stream(dst, src, bytes);
    } else {
        memcpy(dst, src, bytes);
    }
}
