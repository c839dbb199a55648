/* CPU layer norm and RMS norm over the last dim, with optional weight and bias. Statistics in
 * double (two passes for the variance, so no cancellation), the normalisation in f32 for
 * f32/bf16/f16 and f64 for f64. out may alias x. Rows are shared out by the intra-op pool; each
 * row is one thread's whole, so the bits do not depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"

#define ID(v) (v)

#define DEFINE_NORM(SUF, T, CT, LOAD, STORE)                                                       \
    static void norm_##SUF(int rms, double eps, int64_t rows, int64_t H, const T *x, const T *w,   \
                           const T *b, T *y) {                                                     \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *xr = x + r * H;                                                               \
            T *yr = y + r * H;                                                                     \
            double mean = 0.0, var = 0.0;                                                          \
            if (!rms) {                                                                            \
                for (int64_t j = 0; j < H; j++) mean += (double)LOAD(xr[j]);                       \
                mean /= (double)H;                                                                 \
            }                                                                                      \
            for (int64_t j = 0; j < H; j++) {                                                      \
                double d = (double)LOAD(xr[j]) - mean;                                             \
                var += d * d;                                                                      \
            }                                                                                      \
            var /= (double)H;                                                                      \
            CT m = (CT)mean, rstd = (CT)(1.0 / sqrt(var + eps));                                   \
            for (int64_t j = 0; j < H; j++) {                                                      \
                CT v = (LOAD(xr[j]) - m) * rstd;                                                   \
                if (w) v *= LOAD(w[j]);                                                            \
                if (b) v += LOAD(b[j]);                                                            \
                yr[j] = STORE(v);                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_NORM(f64, double, double, ID, ID)
DEFINE_NORM(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_NORM(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16)

/* ---- f32 rows ------------------------------------------------------------------------------
 * The statistics add in double on F32_LANES fixed lanes (element i of each whole group of
 * F32_LANES into lane i, the tail into lanes 0.., then the lanes in order), on every SIMD path
 * alike: sixteen independent chains instead of one H long (the single chain's add latency was
 * most of the norm's time), the same bits on every path, and the order in which the AVX-512
 * norm backward recomputes rstd (norm_backward.c). The normalisation is the plain loop's
 * per-element arithmetic, ((x - m) rstd) w + b, rounded in f32 at each step (no fused
 * multiply-add). */
enum { F32_LANES = 16 };

static double lanes_total(const double *acc) {
    double s = 0;
    for (int l = 0; l < F32_LANES; l++)
        s += acc[l];
    return s;
}

/* mean (0 for rms) and the mean of (x - mean)^2 of one row */
static void stats_f32(int rms, int64_t H, const float *x, double *mean, double *var) {
    int64_t Hv = H / F32_LANES * F32_LANES;
    double acc[F32_LANES] = {0}, m = 0;
    if (!rms) {
        for (int64_t i = 0; i < Hv; i += F32_LANES)
            for (int l = 0; l < F32_LANES; l++)
                acc[l] += (double)x[i + l];
        for (int64_t i = Hv; i < H; i++)
            acc[i - Hv] += (double)x[i];
        m = lanes_total(acc) / (double)H;
        memset(acc, 0, sizeof acc);
    }
    for (int64_t i = 0; i < Hv; i += F32_LANES)
        for (int l = 0; l < F32_LANES; l++) {
            double d = (double)x[i + l] - m;
            acc[l] += d * d;
        }
    for (int64_t i = Hv; i < H; i++) {
        double d = (double)x[i] - m;
        acc[i - Hv] += d * d;
    }
    *mean = m, *var = lanes_total(acc) / (double)H;
}

static void norm_rows_f32(int rms, double eps, int64_t rows, int64_t H, const float *x,
                          const float *w, const float *b, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * H;
        float *yr = y + r * H;
        double mean, var;
        stats_f32(rms, H, xr, &mean, &var);
        float m = (float)mean, rstd = (float)(1.0 / sqrt(var + eps));
        for (int64_t j = 0; j < H; j++) {
            float v = (xr[j] - m) * rstd;
            if (w) v *= w[j];
            if (b) v += b[j];
            yr[j] = v;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512 1
#define AVX512      __attribute__((target("avx512f")))

/* stats_f32's sums, lanes 0-7 in a0 and 8-15 in a1 */
static AVX512 void stats_f32_avx512(int rms, int64_t H, const float *x, double *mean, double *var) {
    int64_t Hv = H / F32_LANES * F32_LANES;
    double acc[F32_LANES], m = 0;
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    if (!rms) {
        for (int64_t i = 0; i < Hv; i += F32_LANES) {
            __m512 v = _mm512_loadu_ps(x + i);
            a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
            a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(
                                       _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
        }
        _mm512_storeu_pd(acc, a0), _mm512_storeu_pd(acc + 8, a1);
        for (int64_t i = Hv; i < H; i++)
            acc[i - Hv] += (double)x[i];
        m = lanes_total(acc) / (double)H;
        a0 = a1 = _mm512_setzero_pd();
    }
    __m512d vm = _mm512_set1_pd(m);
    for (int64_t i = 0; i < Hv; i += F32_LANES) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), vm);
        __m512d d1 = _mm512_sub_pd(
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))), vm);
        a0 = _mm512_add_pd(a0, _mm512_mul_pd(d0, d0));
        a1 = _mm512_add_pd(a1, _mm512_mul_pd(d1, d1));
    }
    _mm512_storeu_pd(acc, a0), _mm512_storeu_pd(acc + 8, a1);
    for (int64_t i = Hv; i < H; i++) {
        double d = (double)x[i] - m;
        acc[i - Hv] += d * d;
    }
    *mean = m, *var = lanes_total(acc) / (double)H;
}

static AVX512 void norm_rows_f32_avx512(int rms, double eps, int64_t rows, int64_t H,
                                        const float *x, const float *w, const float *b, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * H;
        float *yr = y + r * H;
        double mean, var;
        stats_f32_avx512(rms, H, xr, &mean, &var);
        __m512 vm = _mm512_set1_ps((float)mean),
               vr = _mm512_set1_ps((float)(1.0 / sqrt(var + eps)));
        for (int64_t j = 0; j < H; j += 16) {
            __mmask16 k = H - j >= 16 ? 0xffff : (__mmask16)((1u << (H - j)) - 1);
            __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + j), vm), vr);
            if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + j));
            if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + j));
            _mm512_mask_storeu_ps(yr + j, k, v);
        }
    }
}
#else
#define HAVE_AVX512 0
#endif

static void norm_f32(int rms, double eps, int64_t rows, int64_t H, const float *x, const float *w,
                     const float *b, float *y) {
#if HAVE_AVX512
    if (dt_simd_level() >= DT_SIMD_AVX512) {
        norm_rows_f32_avx512(rms, eps, rows, H, x, w, b, y);
        return;
    }
#endif
    norm_rows_f32(rms, eps, rows, H, x, w, b, y);
}

#define PIECE 8192 /* elements a pool chunk holds at least: smaller stays serial */

typedef struct {
    int rms;
    double eps;
    int64_t H;
    dt_dtype dtype;
    const void *x, *w, *b;
    void *y;
} norm_job;

static void norm_range(void *arg, int64_t begin, int64_t end) {
    const norm_job *j = arg;
    size_t off = (size_t)(begin * j->H) * dt_dtype_size(j->dtype);
    const void *x = (const char *)j->x + off;
    void *y = (char *)j->y + off;
    int64_t rows = end - begin;
    switch (j->dtype) {
    case DT_F32: norm_f32(j->rms, j->eps, rows, j->H, x, j->w, j->b, y); break;
    case DT_F64: norm_f64(j->rms, j->eps, rows, j->H, x, j->w, j->b, y); break;
    case DT_BF16: norm_bf16(j->rms, j->eps, rows, j->H, x, j->w, j->b, y); break;
    case DT_F16: norm_f16(j->rms, j->eps, rows, j->H, x, j->w, j->b, y); break;
    default: break;
    }
}

dt_status dt_cpu_layer_norm(int rms, double eps, const dt_local *x, const dt_local *weight,
                            const dt_local *bias, dt_local *out) {
    const char *fn = rms ? "dt_cpu_layer_norm (rms)" : "dt_cpu_layer_norm";
    if (x->ndim < 1)
        return dt_error(DT_ERR_SHAPE, "%s: x must have at least one dim", fn);
    if ((weight && weight->dtype != x->dtype) || (bias && bias->dtype != x->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: weight/bias dtype differs from x's %s", fn,
                        dt_dtype_name(x->dtype));
    int64_t H = x->shape[x->ndim - 1], rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    if (H == 0 || rows == 0) return DT_OK;
    const void *w = weight ? weight->data : NULL;
    const void *b = bias && !rms ? bias->data : NULL;
    switch (x->dtype) {
    case DT_F32:
    case DT_F64:
    case DT_BF16:
    case DT_F16: break;
    default:
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(x->dtype));
    }
    norm_job j = {.rms = rms, .eps = eps, .H = H, .dtype = x->dtype, .x = x->data, .w = w,
                  .b = b, .y = out->data};
    dt_parallel_for(rows, H >= PIECE ? 1 : PIECE / H, norm_range, &j);
    return DT_OK;
}
