/* CPU rotary embedding (interleaved pairs), computed in f32 (f64 for f64) with each product
 * and sum rounded: the order the CUDA kernel repeats, and the AVX-512 row loop's (f32). out may
 * alias x. The intra-op pool shares out (batch, position) rows; each element is computed
 * alone, so the bits do not depend on the thread count. */
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512 1
#else
#define HAVE_AVX512 0
#endif

#define ID(v) (v)

#define DEFINE_ROPE(SUF, T, CT, LOAD, STORE)                                                       \
    static void rope_##SUF(int64_t B, int64_t S, int64_t H, int64_t P, const T *x, const T *cs,    \
                           const T *sn, T *y) {                                                    \
        for (int64_t b = 0; b < B; b++)                                                            \
            for (int64_t t = 0; t < S; t++)                                                        \
                for (int64_t h = 0; h < H; h++) {                                                  \
                    int64_t row = ((b * S + t) * H + h) * 2 * P;                                   \
                    for (int64_t i = 0; i < P; i++) {                                              \
                        CT x0 = LOAD(x[row + 2 * i]), x1 = LOAD(x[row + 2 * i + 1]);               \
                        CT c = LOAD(cs[t * P + i]), s = LOAD(sn[t * P + i]);                       \
                        CT a = x0 * c, bb = x1 * s, e = x0 * s, f = x1 * c;                        \
                        y[row + 2 * i] = STORE(a - bb);                                            \
                        y[row + 2 * i + 1] = STORE(e + f);                                         \
                    }                                                                              \
                }                                                                                  \
    }

DEFINE_ROPE(f32, float, float, ID, ID)
DEFINE_ROPE(f64, double, double, ID, ID)
DEFINE_ROPE(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_ROPE(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16)

#if HAVE_AVX512
/* One position's H heads of f32 pairs, eight pairs a vector: with a = x (cos, cos) and b = the
 * pair swapped times (sin, sin), lane 2i is a - b = x0 c - x1 s and lane 2i + 1 is a + b =
 * x1 c + x0 s, the plain loop's products and sums (a sum's order does not change its bits), so
 * the same bits. */
__attribute__((target("avx512f"))) static void rope_row_f32_avx512(int64_t H, int64_t P,
                                                                   const float *x, const float *cs,
                                                                   const float *sn, float *y) {
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (int64_t i = 0; i < P; i += 8) {
        int left = P - i < 8 ? (int)(P - i) : 8;
        __mmask16 kt = (__mmask16)((1u << left) - 1), kx = (__mmask16)((1u << (2 * left)) - 1);
        __m512 c = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(kt, cs + i));
        __m512 sv = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(kt, sn + i));
        for (int64_t h = 0; h < H; h++) {
            int64_t o = h * 2 * P + 2 * i;
            __m512 v = _mm512_maskz_loadu_ps(kx, x + o);
            __m512 a = _mm512_mul_ps(v, c), b = _mm512_mul_ps(_mm512_permute_ps(v, 0xb1), sv);
            _mm512_mask_storeu_ps(y + o, kx, _mm512_mask_add_ps(_mm512_sub_ps(a, b), 0xaaaa, a, b));
        }
    }
}
#endif

#define PIECE 8192 /* elements a pool chunk holds at least: smaller stays serial */

typedef struct {
    int64_t S, H, P;
    dt_dtype dtype;
    const void *x, *cs, *sn;
    void *y;
} rope_job;

/* Rows u = b * S + t in [begin, end), one position's H heads each. */
static void rope_range(void *arg, int64_t begin, int64_t end) {
    const rope_job *j = arg;
    size_t es = dt_dtype_size(j->dtype);
#if HAVE_AVX512
    int wide = j->dtype == DT_F32 && dt_simd_level() >= DT_SIMD_AVX512;
#endif
    for (int64_t u = begin; u < end; u++) {
        size_t xo = (size_t)(u * j->H * 2 * j->P) * es, co = (size_t)(u % j->S * j->P) * es;
        const void *x = (const char *)j->x + xo, *c = (const char *)j->cs + co,
                   *s = (const char *)j->sn + co;
        void *y = (char *)j->y + xo;
        switch (j->dtype) {
        case DT_F32:
#if HAVE_AVX512
            if (wide) {
                rope_row_f32_avx512(j->H, j->P, x, c, s, y);
                break;
            }
#endif
            rope_f32(1, 1, j->H, j->P, x, c, s, y);
            break;
        case DT_F64: rope_f64(1, 1, j->H, j->P, x, c, s, y); break;
        case DT_BF16: rope_bf16(1, 1, j->H, j->P, x, c, s, y); break;
        case DT_F16: rope_f16(1, 1, j->H, j->P, x, c, s, y); break;
        default: break;
        }
    }
}

dt_status dt_cpu_rope(const dt_local *x, const dt_local *cos, const dt_local *sin,
                      dt_local *out) {
    const char *fn = "dt_cpu_rope";
    if (x->ndim != 4 || x->shape[3] % 2 || cos->ndim != 2 || sin->ndim != 2 ||
        cos->shape[0] != x->shape[1] || cos->shape[1] != x->shape[3] / 2 ||
        sin->shape[0] != x->shape[1] || sin->shape[1] != x->shape[3] / 2)
        return dt_error(DT_ERR_SHAPE, "%s: x must be (B, T, H, D) with D even and cos, sin "
                                      "(T, D/2)", fn);
    if (cos->dtype != x->dtype || sin->dtype != x->dtype || out->dtype != x->dtype)
        return dt_error(DT_ERR_DTYPE, "%s: x, cos, sin and out dtypes differ", fn);
    int64_t B = x->shape[0], S = x->shape[1], H = x->shape[2], P = x->shape[3] / 2;
    switch (x->dtype) {
    case DT_F32:
    case DT_F64:
    case DT_BF16:
    case DT_F16: break;
    default:
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(x->dtype));
    }
    if (H * P == 0) return DT_OK;
    rope_job j = {.S = S, .H = H, .P = P, .dtype = x->dtype, .x = x->data, .cs = cos->data,
                  .sn = sin->data, .y = out->data};
    int64_t per = 2 * H * P;
    dt_parallel_for(B * S, per >= PIECE ? 1 : PIECE / per, rope_range, &j);
    return DT_OK;
}
