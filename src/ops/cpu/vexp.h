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

/* Below this x the vector exp gives 0: exp(x) would be subnormal (under 2^-126). */
#define DT_VEXPF_LO (-87.33654f)

/* The exp of every lane of x, for a float vector type VF with its int32 vector type VI (any
 * lane count), as a function NAME with attributes ATTR: one text for the 4-lane form here and
 * the 8-lane AVX2 form in vexp.c, so both give the same bits lane for lane. */
#define DT_VEXPF_DEFINE(NAME, VF, VI, ATTR)                                                        \
    static inline ATTR VF NAME(VF x) {                                                             \
        const float lo = DT_VEXPF_LO, hi = 88.72283f, round = 12582912.0f; /* 1.5 * 2^23 */        \
        const VF zero = {0};                                                                       \
        VI below = x < lo, above = x > hi, nan = x != x;                                           \
        VF xc = DT_VSELECT(VF, VI, below, zero + lo, DT_VSELECT(VF, VI, above, zero + hi, x));     \
        VF n = (xc * 1.44269504088896341f + round) - round; /* nearest integer to x / ln2 */       \
        VF r = (xc - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;                      \
        VF p = r * (1.0f / 5040) + 1.0f / 720;                                                     \
        p = p * r + 1.0f / 120;                                                                    \
        p = p * r + 1.0f / 24;                                                                     \
        p = p * r + 1.0f / 6;                                                                      \
        p = p * r + 0.5f;                                                                          \
        p = p * r + 1.0f;                                                                          \
        p = p * r + 1.0f;                                                                          \
        /* 2^n in the exponent bits; n = 128 (x within ln2 / 2 of the top) is 2^127 times 2 */    \
        VI e = __builtin_convertvector(n, VI), big = e > 127;                                      \
        e = (big & 127) | (~big & e);                                                              \
        VF y = p * DT_VSELECT(VF, VI, big, zero + 2, zero + 1) * (VF)((e + 127) << 23);            \
        y = DT_VSELECT(VF, VI, below, zero, y);                                                    \
        y = DT_VSELECT(VF, VI, above, zero + INFINITY, y);                                         \
        return DT_VSELECT(VF, VI, nan, x, y);                                                      \
    }

/* m ? a : b per lane (m all ones or all zeros), for any float vector type. */
#define DT_VSELECT(VF, VI, m, a, b) ((VF)(((m) & (VI)(a)) | (~(m) & (VI)(b))))

DT_VEXPF_DEFINE(dt_vexpf4, dt_v4f, dt_v4i, )

/* y[i] = exp(a x[i] + b), i < n (y may be x): 8 lanes at a time with AVX2 where the CPU has
 * it (the same bits as dt_vexpf4), else 4 (vexp.c). */
void dt_vexpf_affine(float *y, const float *x, int64_t n, float a, float b);

/* One value (the same arithmetic, lane 0). */
static inline float dt_vexpf(float x) { return dt_vexpf4((dt_v4f){x, x, x, x})[0]; }

#endif
