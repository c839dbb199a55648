/* CPU rotary embedding (interleaved pairs), computed in f32 (f64 for f64) with each product
 * and sum rounded: the order the CUDA kernel repeats. out may alias x. The intra-op pool
 * shares out (batch, position) rows; each element is computed alone, so the bits do not depend
 * on the thread count. */
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/kernels.h"

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
    for (int64_t u = begin; u < end; u++) {
        size_t xo = (size_t)(u * j->H * 2 * j->P) * es, co = (size_t)(u % j->S * j->P) * es;
        const void *x = (const char *)j->x + xo, *c = (const char *)j->cs + co,
                   *s = (const char *)j->sn + co;
        void *y = (char *)j->y + xo;
        switch (j->dtype) {
        case DT_F32: rope_f32(1, 1, j->H, j->P, x, c, s, y); break;
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
