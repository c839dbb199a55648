/* dt_vexpf_affine: 16 lanes at a time with AVX-512F, 8 with AVX2, else 4, as dt_simd_level
 * allows. Every lane count runs the same per-lane arithmetic (DT_VEXPF_DEFINE, no fused
 * multiply-add), so the result does not depend on the machine. */
#include "ops/cpu/vexp.h"
#include "ops/cpu/simd.h"

/* y[i] = EXP(a x[i] + b) over n, L lanes at a time, the tail through a zero-padded vector. */
#define AFFINE_LOOP(VF, L, EXP)                                                                    \
    int64_t i = 0;                                                                                 \
    for (; i + L <= n; i += L) {                                                                   \
        VF v;                                                                                      \
        memcpy(&v, x + i, sizeof v);                                                               \
        v = EXP(v * a + b);                                                                        \
        memcpy(y + i, &v, sizeof v);                                                               \
    }                                                                                              \
    if (i < n) {                                                                                   \
        VF v = {0};                                                                                \
        memcpy(&v, x + i, sizeof(float) * (size_t)(n - i));                                        \
        v = EXP(v * a + b);                                                                        \
        memcpy(y + i, &v, sizeof(float) * (size_t)(n - i));                                        \
    }

static void affine4(float *y, const float *x, int64_t n, float a, float b) {
    AFFINE_LOOP(dt_v4f, 4, dt_vexpf4)
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define AVX2 __attribute__((target("avx2")))

DT_VEXPF_DEFINE(vexpf8, v8f, v8i, AVX2)

static AVX2 void affine8(float *y, const float *x, int64_t n, float a, float b) {
    AFFINE_LOOP(v8f, 8, vexpf8)
}

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define AVX512 __attribute__((target("avx512f")))

DT_VEXPF_DEFINE(vexpf16, v16f, v16i, AVX512)

static AVX512 void affine16(float *y, const float *x, int64_t n, float a, float b) {
    AFFINE_LOOP(v16f, 16, vexpf16)
}

void dt_vexpf_affine(float *y, const float *x, int64_t n, float a, float b) {
    dt_simd s = dt_simd_level();
    if (s == DT_SIMD_AVX512)
        affine16(y, x, n, a, b);
    else if (s == DT_SIMD_AVX2)
        affine8(y, x, n, a, b);
    else
        affine4(y, x, n, a, b);
}
#else
void dt_vexpf_affine(float *y, const float *x, int64_t n, float a, float b) {
    affine4(y, x, n, a, b);
}
#endif
