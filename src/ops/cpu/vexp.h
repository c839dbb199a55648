/* exp over f32 arrays in SIMD (glibc's expf is a call per element): each input split as
 * n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor polynomial to degree 7 (truncation below
 * 6e-9 relative), times 2^n built in the exponent bits; four lanes at a time with GCC/Clang
 * vector extensions (SSE2 on x86-64, NEON on arm64). Within 2 ulp of exp; exp(-inf) = 0,
 * exp(inf) = inf, NaN stays NaN; results below 2^-126 flush to 0 (as SIMD exps do). CPU
 * kernels only. */
#ifndef DT_OPS_CPU_VEXP_H
#define DT_OPS_CPU_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float dt_v4f __attribute__((vector_size(16)));
typedef int32_t dt_v4i __attribute__((vector_size(16)));

/* m ? a : b per lane (m all ones or all zeros). */
static inline dt_v4f dt_v4_select(dt_v4i m, dt_v4f a, dt_v4f b) {
    return (dt_v4f)((m & (dt_v4i)a) | (~m & (dt_v4i)b));
}

static inline dt_v4f dt_vexpf4(dt_v4f x) {
    const float lo = -87.33654f, hi = 88.72283f, round = 12582912.0f; /* 1.5 * 2^23 */
    dt_v4i below = x < lo, above = x > hi, nan = x != x;
    dt_v4f xc = dt_v4_select(below, (dt_v4f){lo, lo, lo, lo},
                             dt_v4_select(above, (dt_v4f){hi, hi, hi, hi}, x));
    dt_v4f n = (xc * 1.44269504088896341f + round) - round; /* nearest integer to x / ln2 */
    dt_v4f r = (xc - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
    dt_v4f p = r * (1.0f / 5040) + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n in the exponent bits; n = 128 (x within ln2 / 2 of the top) is 2^127 times 2 */
    dt_v4i e = __builtin_convertvector(n, dt_v4i), big = e > 127;
    e = (big & 127) | (~big & e);
    dt_v4f y = p * dt_v4_select(big, (dt_v4f){2, 2, 2, 2}, (dt_v4f){1, 1, 1, 1}) *
               (dt_v4f)((e + 127) << 23);
    y = dt_v4_select(below, (dt_v4f){0, 0, 0, 0}, y);
    y = dt_v4_select(above, (dt_v4f){INFINITY, INFINITY, INFINITY, INFINITY}, y);
    return dt_v4_select(nan, x, y);
}

/* y[i] = exp(a x[i] + b), i < n (y may be x). */
static inline void dt_vexpf_affine(float *y, const float *x, int64_t n, float a, float b) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        dt_v4f v;
        memcpy(&v, x + i, sizeof v);
        v = dt_vexpf4(v * a + b);
        memcpy(y + i, &v, sizeof v);
    }
    if (i < n) {
        dt_v4f v = {0, 0, 0, 0};
        memcpy(&v, x + i, sizeof(float) * (size_t)(n - i));
        v = dt_vexpf4(v * a + b);
        memcpy(y + i, &v, sizeof(float) * (size_t)(n - i));
    }
}

/* One value (the same arithmetic, lane 0). */
static inline float dt_vexpf(float x) { return dt_vexpf4((dt_v4f){x, x, x, x})[0]; }

#endif
