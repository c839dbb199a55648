/* CPU layer norm and RMS norm over the last dim, with optional weight and bias. Statistics in
 * double (two passes for the variance, so no cancellation), the normalisation in f32 for
 * f32/bf16/f16 and f64 for f64. out may alias x. Rows are shared out by the intra-op pool; each
 * row is one thread's whole, so the bits do not depend on the thread count. */
#include <math.h>
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
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

DEFINE_NORM(f32, float, float, ID, ID)
DEFINE_NORM(f64, double, double, ID, ID)
DEFINE_NORM(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_NORM(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16)

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
