/* f32 sums (and averages) of n sources in one pass: each vector of the result folds every
 * source in registers, left to right as the blocked loop of reduce.c does (so the same bits),
 * and leaves straight for dst, with streaming stores when asked; no accumulator block is
 * written and read back and no staging buffer is copied out. AVX2 where the CPU has it (the
 * build targets baseline x86-64), SSE2 otherwise. */
#include <stdint.h>

#include "core/reduce_sum_f32.h"

/* The scalar form, for heads and tails: the same adds in the same order. */
static inline float sum_at(const float *const *srcs, int n, size_t i, float div) {
    float acc = srcs[0][i];
    for (int k = 1; k < n; k++)
        acc += srcs[k][i];
    return div != 0.0f ? acc / div : acc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

/* Four vectors of 8 a step: independent chains, so the adds' latency overlaps. */
static AVX2 size_t sum8(float *dst, const float *const *srcs, int n, size_t i, size_t count,
                        float div, int stream) {
    const __m256 d = _mm256_set1_ps(div);
    for (; i + 32 <= count; i += 32) {
        const float *s = srcs[0] + i;
        __m256 a = _mm256_loadu_ps(s), b = _mm256_loadu_ps(s + 8);
        __m256 c = _mm256_loadu_ps(s + 16), e = _mm256_loadu_ps(s + 24);
        for (int k = 1; k < n; k++) {
            s = srcs[k] + i;
            a = _mm256_add_ps(a, _mm256_loadu_ps(s));
            b = _mm256_add_ps(b, _mm256_loadu_ps(s + 8));
            c = _mm256_add_ps(c, _mm256_loadu_ps(s + 16));
            e = _mm256_add_ps(e, _mm256_loadu_ps(s + 24));
        }
        if (div != 0.0f) {
            a = _mm256_div_ps(a, d), b = _mm256_div_ps(b, d);
            c = _mm256_div_ps(c, d), e = _mm256_div_ps(e, d);
        }
        if (stream) {
            _mm256_stream_ps(dst + i, a), _mm256_stream_ps(dst + i + 8, b);
            _mm256_stream_ps(dst + i + 16, c), _mm256_stream_ps(dst + i + 24, e);
        } else {
            _mm256_storeu_ps(dst + i, a), _mm256_storeu_ps(dst + i + 8, b);
            _mm256_storeu_ps(dst + i + 16, c), _mm256_storeu_ps(dst + i + 24, e);
        }
    }
    return i;
}

static size_t sum4(float *dst, const float *const *srcs, int n, size_t i, size_t count, float div,
                   int stream) {
    const __m128 d = _mm_set1_ps(div);
    for (; i + 16 <= count; i += 16) {
        const float *s = srcs[0] + i;
        __m128 a = _mm_loadu_ps(s), b = _mm_loadu_ps(s + 4);
        __m128 c = _mm_loadu_ps(s + 8), e = _mm_loadu_ps(s + 12);
        for (int k = 1; k < n; k++) {
            s = srcs[k] + i;
            a = _mm_add_ps(a, _mm_loadu_ps(s));
            b = _mm_add_ps(b, _mm_loadu_ps(s + 4));
            c = _mm_add_ps(c, _mm_loadu_ps(s + 8));
            e = _mm_add_ps(e, _mm_loadu_ps(s + 12));
        }
        if (div != 0.0f) {
            a = _mm_div_ps(a, d), b = _mm_div_ps(b, d);
            c = _mm_div_ps(c, d), e = _mm_div_ps(e, d);
        }
        if (stream) {
            _mm_stream_ps(dst + i, a), _mm_stream_ps(dst + i + 4, b);
            _mm_stream_ps(dst + i + 8, c), _mm_stream_ps(dst + i + 12, e);
        } else {
            _mm_storeu_ps(dst + i, a), _mm_storeu_ps(dst + i + 4, b);
            _mm_storeu_ps(dst + i + 8, c), _mm_storeu_ps(dst + i + 12, e);
        }
    }
    return i;
}

static int avx2 = -1; /* a benign race: every thread finds the same */

static int has_avx2(void) {
    if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") != 0;
    return avx2;
}

void dt_sum_f32_use_avx2(int on) {
    avx2 = on && __builtin_cpu_supports("avx2");
}

int dt_sum_f32(float *dst, const float *const *srcs, int n, size_t count, int avg, int stream) {
    if ((uintptr_t)dst & 3) return 0;
    const float div = avg ? (float)n : 0.0f;
    const int avx2 = has_avx2();
    /* Streaming stores need an aligned destination: a scalar head reaches it. */
    const uintptr_t align = avx2 ? 32 : 16;
    size_t i = 0;
    if (stream)
        for (; i < count && ((uintptr_t)(dst + i) & (align - 1)); i++)
            dst[i] = sum_at(srcs, n, i, div);
    i = avx2 ? sum8(dst, srcs, n, i, count, div, stream)
             : sum4(dst, srcs, n, i, count, div, stream);
    for (; i < count; i++)
        dst[i] = sum_at(srcs, n, i, div);
    return 1;
}
#else
int dt_sum_f32(float *dst, const float *const *srcs, int n, size_t count, int avg, int stream) {
    (void)dst, (void)srcs, (void)n, (void)count, (void)avg, (void)stream;
    return 0;
}

void dt_sum_f32_use_avx2(int on) {
    (void)on;
}
#endif
