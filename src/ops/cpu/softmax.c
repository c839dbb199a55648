/* CPU softmax and log_softmax along one dim, numerically stable: exp(x - max) / sum, and
 * x - max - log(sum). x is viewed as (outer, n, inner). Math in f32 for f32/bf16/f16 (f64 for
 * f64), sums in double. out may alias x: every pass re-reads x and only the last one writes.
 * The intra-op pool shares out whole rows (or, along a middle dim, whole outer slices), so the
 * bits do not depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/cpu/vexp.h"
#include "ops/kernels.h"

#define BLOCK 256
#define PIECE 8192 /* elements a pool chunk holds at least: smaller stays serial */
#define ID(v) (v)
#define MAXOF(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))

#define DEFINE_SOFTMAX(SUF, T, CT, LOAD, STORE, EXP, EXP_ROW, MAX_ROW, SUM_ROW)                  \
    /* inner == 1: contiguous rows of n */                                                         \
    static void softmax_rows_##SUF(int lg, int64_t rows, int64_t n, const T *x, T *y) {            \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T *xr = x + r * n;                                                               \
            T *yr = y + r * n;                                                                     \
            CT mx = -INFINITY;                                                                     \
            MAX_ROW(mx, xr, n);                                                                    \
            double sum = 0.0;                                                                      \
            if (!lg && sizeof(T) == sizeof(CT)) { /* exp once, into y (x[t] is read first) */     \
                EXP_ROW(yr, xr, n, mx);                                                            \
                SUM_ROW(sum, yr, n);                                                               \
                CT inv = (CT)(1.0 / sum);                                                          \
                for (int64_t t = 0; t < n; t++) yr[t] = (T)(yr[t] * inv);                          \
                continue;                                                                          \
            }                                                                                      \
            if (sizeof(T) == sizeof(CT)) { /* log: exp in chunks beside x (y may be x) */        \
                T e[BLOCK];                                                                        \
                for (int64_t t0 = 0; t0 < n; t0 += BLOCK) {                                        \
                    int64_t m = n - t0 < BLOCK ? n - t0 : BLOCK;                                   \
                    EXP_ROW(e, xr + t0, m, mx);                                                    \
                    SUM_ROW(sum, e, m);                                                            \
                }                                                                                  \
            } else {                                                                               \
                for (int64_t t = 0; t < n; t++) sum += (double)EXP(LOAD(xr[t]) - mx);              \
            }                                                                                      \
            if (lg) { /* (x - max) first: exact for x near max, then the small log(sum) */         \
                CT ls = (CT)log(sum);                                                              \
                for (int64_t t = 0; t < n; t++) yr[t] = STORE((LOAD(xr[t]) - mx) - ls);            \
            } else {                                                                               \
                CT inv = (CT)(1.0 / sum);                                                          \
                for (int64_t t = 0; t < n; t++) yr[t] = STORE(EXP(LOAD(xr[t]) - mx) * inv);        \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* inner > 1: BLOCK columns at a time, each pass walking n rows of contiguous columns */       \
    static void softmax_cols_##SUF(int lg, int64_t outer, int64_t n, int64_t inner, const T *x,    \
                                   T *y) {                                                         \
        for (int64_t o = 0; o < outer; o++) {                                                      \
            for (int64_t j0 = 0; j0 < inner; j0 += BLOCK) {                                        \
                int64_t m = inner - j0 < BLOCK ? inner - j0 : BLOCK;                               \
                const T *xb = x + o * n * inner + j0;                                              \
                T *yb = y + o * n * inner + j0;                                                    \
                CT mx[BLOCK];                                                                      \
                double sum[BLOCK];                                                                 \
                for (int64_t j = 0; j < m; j++) {                                                  \
                    mx[j] = -INFINITY;                                                             \
                    sum[j] = 0.0;                                                                  \
                }                                                                                  \
                for (int64_t t = 0; t < n; t++)                                                    \
                    for (int64_t j = 0; j < m; j++) mx[j] = MAXOF(mx[j], LOAD(xb[t * inner + j])); \
                for (int64_t t = 0; t < n; t++)                                                    \
                    for (int64_t j = 0; j < m; j++)                                                \
                        sum[j] += (double)EXP(LOAD(xb[t * inner + j]) - mx[j]);                    \
                for (int64_t j = 0; j < m; j++) /* sum becomes log(sum) or 1 / sum */              \
                    sum[j] = lg ? log(sum[j]) : 1.0 / sum[j];                                      \
                for (int64_t t = 0; t < n; t++) {                                                  \
                    for (int64_t j = 0; j < m; j++) {                                              \
                        CT v = LOAD(xb[t * inner + j]);                                            \
                        yb[t * inner + j] =                                                        \
                            STORE(lg ? (v - mx[j]) - (CT)sum[j] : EXP(v - mx[j]) * (CT)sum[j]);    \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* y[t] = exp(x[t] - mx) over a row: SIMD for f32 */
#define ROW_F32(y, x, n, mx) dt_vexpf_affine((float *)(y), (const float *)(x), n, 1.0f, -(mx))
#define ROW_F64(y, x, n, mx)                                                                       \
    for (int64_t t = 0; t < n; t++) (y)[t] = exp((x)[t] - (mx))
#define ROW_NONE(y, x, n, mx) (void)0 /* bf16/f16 never take the exp-once path */

/* Row max (NaN wins) and row sum in double: one element at a time, or four lanes at a time
 * for f32 (the lanes added last, so the sum differs from the sequential one only in double's
 * last bits). */
#define MAX_SCALAR(mx, x, n, LOAD)                                                                 \
    for (int64_t t = 0; t < n; t++) mx = MAXOF(mx, LOAD((x)[t]))
#define MAX_ONE(mx, x, n) MAX_SCALAR(mx, x, n, ID)
#define MAX_BF16(mx, x, n) MAX_SCALAR(mx, x, n, dt_bf16_to_f32)
#define MAX_F16(mx, x, n) MAX_SCALAR(mx, x, n, dt_f16_to_f32)
#define SUM_ONE(sum, x, n)                                                                         \
    for (int64_t t = 0; t < n; t++) sum += (double)(x)[t]
#define MAX_F32(mx, x, n) mx = row_max_f32(x, n)
#define SUM_F32(sum, x, n) sum += row_sum_f32(x, n)

typedef double v4d __attribute__((vector_size(32)));

static float row_max_f32(const float *x, int64_t n) {
    dt_v4f m = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        dt_v4f v;
        memcpy(&v, x + t, sizeof v);
        m = dt_v4_select((v > m) | (v != v), v, m);
    }
    float mx = -INFINITY;
    for (int l = 0; l < 4; l++) mx = MAXOF(mx, m[l]);
    for (; t < n; t++) mx = MAXOF(mx, x[t]);
    return mx;
}

static double row_sum_f32(const float *x, int64_t n) {
    v4d acc = {0, 0, 0, 0};
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        dt_v4f v;
        memcpy(&v, x + t, sizeof v);
        acc += __builtin_convertvector(v, v4d);
    }
    double sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (; t < n; t++) sum += (double)x[t];
    return sum;
}

DEFINE_SOFTMAX(f32, float, float, ID, ID, dt_vexpf, ROW_F32, MAX_F32, SUM_F32)
DEFINE_SOFTMAX(f64, double, double, ID, ID, exp, ROW_F64, MAX_ONE, SUM_ONE)
DEFINE_SOFTMAX(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16, expf, ROW_NONE, MAX_BF16,
               SUM_ONE)
DEFINE_SOFTMAX(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16, expf, ROW_NONE, MAX_F16,
               SUM_ONE)

typedef struct {
    int lg;
    int64_t n, inner;
    dt_dtype dtype;
    const void *x;
    void *y;
} softmax_job;

/* Outer indices [begin, end). */
static void softmax_range(void *arg, int64_t begin, int64_t end) {
    const softmax_job *j = arg;
    size_t off = (size_t)(begin * j->n * j->inner) * dt_dtype_size(j->dtype);
    const void *x = (const char *)j->x + off;
    void *y = (char *)j->y + off;
    int64_t outer = end - begin;
#define SOFTMAX_CASE(DT, SUF)                                                                      \
    case DT:                                                                                       \
        if (j->inner == 1)                                                                         \
            softmax_rows_##SUF(j->lg, outer, j->n, x, y);                                          \
        else                                                                                       \
            softmax_cols_##SUF(j->lg, outer, j->n, j->inner, x, y);                                \
        break;
    switch (j->dtype) {
        SOFTMAX_CASE(DT_F32, f32)
        SOFTMAX_CASE(DT_F64, f64)
        SOFTMAX_CASE(DT_BF16, bf16)
        SOFTMAX_CASE(DT_F16, f16)
    default: break;
    }
#undef SOFTMAX_CASE
}

dt_status dt_cpu_softmax(int log, int dim, const dt_local *x, dt_local *out) {
    if (dim < 0 || dim >= x->ndim)
        return dt_error(DT_ERR_ARG, "dt_cpu_softmax: dim %d out of range for %d dims", dim,
                        x->ndim);
    int64_t outer = 1, inner = 1, n = x->shape[dim];
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    int lg = log != 0;
    switch (x->dtype) {
    case DT_F32:
    case DT_F64:
    case DT_BF16:
    case DT_F16: break;
    default:
        return dt_error(DT_ERR_DTYPE, "dt_cpu_%s: dtype %s not supported (float dtypes only)",
                        lg ? "log_softmax" : "softmax", dt_dtype_name(x->dtype));
    }
    if (n == 0 || inner == 0) return DT_OK;
    softmax_job j = {.lg = lg, .n = n, .inner = inner, .dtype = x->dtype, .x = x->data,
                     .y = out->data};
    int64_t slice = n * inner; /* elements of one outer index */
    dt_parallel_for(outer, slice >= PIECE ? 1 : PIECE / slice, softmax_range, &j);
    return DT_OK;
}
