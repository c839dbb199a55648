/* dt_vexpf_affine: 8 lanes at a time with AVX2 where the CPU has it (checked once), else 4.
 * Both lane counts run the same per-lane arithmetic (DT_VEXPF_DEFINE, no fused multiply-add),
 * so the result does not depend on the machine. */
#include "ops/cpu/vexp.h"

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

void dt_vexpf_affine(float *y, const float *x, int64_t n, float a, float b) {
    static int avx2 = -1; /* a benign race: every thread finds the same */
    if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") != 0;
    if (avx2)
        affine8(y, x, n, a, b);
    else
        affine4(y, x, n, a, b);
}
#else
void dt_vexpf_affine(float *y, const float *x, int64_t n, float a, float b) {
    affine4(y, x, n, a, b);
}
#endif
