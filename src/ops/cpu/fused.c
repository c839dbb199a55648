/* CPU fused kernels: silu_mul (SwiGLU's silu(gate) * up) and its backward in one pass each, and
 * log_softmax_pick (cross entropy's target log-probability with each row's log-sum-exp) and its
 * backward, which writes onehot - softmax straight into the gradient. f32 rows run simd.h's
 * paths; other dtypes a plain loop. Rows are cut into fixed chunks (core/pool.h), so results do
 * not depend on the thread count. */
#include <math.h>
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h"
#include "ops/kernels.h"

#define ID(v) (v)
#define GRAIN 4096 /* elements per chunk of the elementwise loops */

static int64_t numel(const dt_local *x) {
    int64_t n = 1;
    for (int d = 0; d < x->ndim; d++)
        n *= x->shape[d];
    return n;
}

static int is_float(dt_dtype t) {
    return t == DT_F32 || t == DT_F64 || t == DT_BF16 || t == DT_F16;
}

/* ---- silu_mul ----------------------------------------------------------------------------- */

typedef struct ew_arg {
    dt_dtype dtype;
    const void *g, *u, *dy;
    void *out, *du;
} ew_arg;

#define DEFINE_SILU(SUF, T, CT, LOAD, STORE, EXP)                                                  \
    static void silu_fwd_##SUF(const ew_arg *a, int64_t b, int64_t e) {                            \
        const T *g = a->g, *u = a->u;                                                              \
        T *y = a->out;                                                                             \
        for (int64_t i = b; i < e; i++) {                                                          \
            CT x = LOAD(g[i]);                                                                     \
            y[i] = STORE((x / ((CT)1 + EXP(-x))) * LOAD(u[i]));                                    \
        }                                                                                          \
    }                                                                                              \
    static void silu_bwd_##SUF(const ew_arg *a, int64_t b, int64_t e) {                            \
        const T *g = a->g, *u = a->u, *dy = a->dy;                                                 \
        T *dg = a->out, *du = a->du;                                                               \
        for (int64_t i = b; i < e; i++) {                                                          \
            CT x = LOAD(g[i]), d = LOAD(dy[i]), up = LOAD(u[i]), ex = EXP(-x);                     \
            CT s = (CT)1 / ((CT)1 + ex);                                                           \
            du[i] = STORE(d * (x / ((CT)1 + ex)));                                                 \
            dg[i] = STORE((d * up) * (s * ((CT)1 + x * ((CT)1 - s))));                             \
        }                                                                                          \
    }

DEFINE_SILU(f64, double, double, ID, ID, exp)
DEFINE_SILU(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16, expf)
DEFINE_SILU(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16, expf)

static void silu_fwd_chunk(void *arg, int64_t b, int64_t e) {
    const ew_arg *a = arg;
    switch (a->dtype) {
    case DT_F32:
        dt_simd_silu_mul(e - b, (const float *)a->g + b, (const float *)a->u + b,
                         (float *)a->out + b);
        break;
    case DT_F64:
        silu_fwd_f64(a, b, e);
        break;
    case DT_BF16:
        silu_fwd_bf16(a, b, e);
        break;
    default:
        silu_fwd_f16(a, b, e);
        break;
    }
}

static void silu_bwd_chunk(void *arg, int64_t b, int64_t e) {
    const ew_arg *a = arg;
    switch (a->dtype) {
    case DT_F32:
        dt_simd_silu_mul_backward(e - b, (const float *)a->g + b, (const float *)a->u + b,
                                  (const float *)a->dy + b, (float *)a->out + b,
                                  (float *)a->du + b);
        break;
    case DT_F64:
        silu_bwd_f64(a, b, e);
        break;
    case DT_BF16:
        silu_bwd_bf16(a, b, e);
        break;
    default:
        silu_bwd_f16(a, b, e);
        break;
    }
}

static dt_status silu_check(const char *fn, const dt_local *gate, const dt_local *up,
                            const dt_local *grad) {
    if (!is_float(gate->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: gate must be a float dtype, got %s", fn,
                        dt_dtype_name(gate->dtype));
    const dt_local *other[2] = {up, grad};
    for (int i = 0; i < 2; i++) {
        if (!other[i]) continue;
        int same = other[i]->dtype == gate->dtype && other[i]->ndim == gate->ndim;
        for (int d = 0; same && d < gate->ndim; d++)
            same = other[i]->shape[d] == gate->shape[d];
        if (!same)
            return dt_error(DT_ERR_SHAPE, "%s: %s must have gate's shape and dtype %s", fn,
                            i ? "grad" : "up", dt_dtype_name(gate->dtype));
    }
    return DT_OK;
}

dt_status dt_cpu_silu_mul(const dt_local *gate, const dt_local *up, dt_local *out) {
    DT_CHECK(silu_check("dt_cpu_silu_mul", gate, up, NULL));
    ew_arg a = {.dtype = gate->dtype, .g = gate->data, .u = up->data, .out = out->data};
    dt_parallel_for(numel(gate), GRAIN, silu_fwd_chunk, &a);
    return DT_OK;
}

dt_status dt_cpu_silu_mul_backward(const dt_local *gate, const dt_local *up, const dt_local *grad,
                                   dt_local *dgate, dt_local *dup) {
    DT_CHECK(silu_check("dt_cpu_silu_mul_backward", gate, up, grad));
    ew_arg a = {.dtype = gate->dtype,
                .g = gate->data,
                .u = up->data,
                .dy = grad->data,
                .out = dgate->data,
                .du = dup->data};
    dt_parallel_for(numel(gate), GRAIN, silu_bwd_chunk, &a);
    return DT_OK;
}

/* ---- log_softmax_pick ----------------------------------------------------------------------
 * logits (N, C, inner...) viewed as (N, C, I); target, out, grad (N, I); stats (N, I, 2). A row
 * is the C logits of one (n, i). The arithmetic is log_softmax's and softmax's
 * (ops/cpu/softmax.c), so the loss and its gradient are the bits of the unfused ops: rows of
 * f32 on simd.h's paths, the rest one element at a time with the same exp. */

typedef struct xent_arg {
    int64_t C, I;
    dt_dtype dtype, tdtype;
    const void *x, *t, *stats_in, *g;
    void *out, *stats;
} xent_arg;

static int64_t target_of(const xent_arg *a, int64_t r) {
    return a->tdtype == DT_I64 ? ((const int64_t *)a->t)[r] : ((const int32_t *)a->t)[r];
}

#define MAXOF(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))

#define DEFINE_XENT(SUF, T, EXP)                                                                   \
    static void xent_fwd_##SUF(void *arg, int64_t b, int64_t e) {                                  \
        const xent_arg *a = arg;                                                                   \
        T *out = a->out, *st = a->stats;                                                           \
        for (int64_t r = b; r < e; r++) {                                                          \
            int64_t n = r / a->I, i = r % a->I, C = a->C, I = a->I;                                \
            const T *xr = (const T *)a->x + n * C * I + i;                                         \
            T mx = -INFINITY;                                                                      \
            double chunked = 0, whole;                                                             \
            if (sizeof(T) == sizeof(float) && I == 1) {                                            \
                mx = (T)dt_simd_row_max((const float *)xr, C);                                     \
                dt_simd_row_exp_sums((const float *)xr, C, (float)mx, &chunked, &whole);           \
            } else {                                                                               \
                for (int64_t c = 0; c < C; c++)                                                    \
                    mx = MAXOF(mx, xr[c * I]);                                                     \
                for (int64_t c = 0; c < C; c++)                                                    \
                    chunked += (double)EXP(xr[c * I] - mx);                                        \
                whole = chunked;                                                                   \
            }                                                                                      \
            T ls = (T)log(chunked);                                                                \
            int64_t t = target_of(a, r);                                                           \
            /* as log_softmax: (x - max) first, then the small log sum */                          \
            out[r] = t >= 0 && t < C ? (xr[t * I] - mx) - ls : (T)0;                               \
            if (st) st[2 * r] = mx, st[2 * r + 1] = (T)(1.0 / whole);                              \
        }                                                                                          \
    }                                                                                              \
    static void xent_bwd_##SUF(void *arg, int64_t b, int64_t e) {                                  \
        const xent_arg *a = arg;                                                                   \
        const T *st = a->stats_in, *g = a->g;                                                      \
        for (int64_t r = b; r < e; r++) {                                                          \
            int64_t n = r / a->I, i = r % a->I, C = a->C, I = a->I;                                \
            const T *xr = (const T *)a->x + n * C * I + i;                                         \
            T *yr = (T *)a->out + n * C * I + i, mx = st[2 * r], inv = st[2 * r + 1];              \
            int64_t t = target_of(a, r);                                                           \
            int in = t >= 0 && t < C;                                                              \
            T gr = in ? g[r] : (T)0; /* an ignored row gets no gradient */                         \
            if (sizeof(T) == sizeof(float) && I == 1) {                                            \
                dt_simd_softmax_grad(C, (const float *)xr, (float)mx, (float)inv, (float)gr,       \
                                     in ? t : -1, (float *)yr);                                    \
                continue;                                                                          \
            }                                                                                      \
            /* log_softmax's rule: onehot g - softmax (sum of onehot g = g) */                     \
            for (int64_t c = 0; c < C; c++)                                                        \
                yr[c * I] = (c == t ? gr : (T)0) - (EXP(xr[c * I] - mx) * inv) * gr;               \
        }                                                                                          \
    }

DEFINE_XENT(f32, float, dt_vexpf)
DEFINE_XENT(f64, double, exp)

/* Checks the blocks and fills a's layout. lse: the (N, I) block to check against (NULL: none). */
static dt_status xent_setup(const char *fn, const dt_local *logits, const dt_local *target,
                            const dt_local *rows, xent_arg *a) {
    if (logits->dtype != DT_F32 && logits->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "%s: logits must be f32 or f64, got %s", fn,
                        dt_dtype_name(logits->dtype));
    if (target->dtype != DT_I32 && target->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: target must be i32 or i64, got %s", fn,
                        dt_dtype_name(target->dtype));
    int ok = logits->ndim >= 2 && target->ndim == logits->ndim - 1 &&
             target->shape[0] == logits->shape[0];
    for (int d = 2; ok && d < logits->ndim; d++)
        ok = target->shape[d - 1] == logits->shape[d];
    if (!ok)
        return dt_error(DT_ERR_SHAPE,
                        "%s: logits (N, C, ...) and target (N, ...) expected, got "
                        "%d-D and %d-D that do not match",
                        fn, logits->ndim, target->ndim);
    for (int i = 0; rows && i < 3; i++) { /* per-row tensors; i == 2: the stats, (..., 2) */
        const dt_local *r = &rows[i];
        if (!r->data && !r->ndim) continue;
        int extra = i == 2, same = r->ndim == target->ndim + extra && r->dtype == logits->dtype;
        for (int d = 0; same && d < target->ndim; d++)
            same = r->shape[d] == target->shape[d];
        if (same && extra) same = r->shape[target->ndim] == 2;
        if (!same)
            return dt_error(DT_ERR_SHAPE, "%s: %s must be target's shape%s of the logits' dtype %s",
                            fn, i == 2 ? "stats" : "out and grad", extra ? " plus (2)" : "",
                            dt_dtype_name(logits->dtype));
    }
    a->C = logits->shape[1];
    a->I = 1;
    for (int d = 2; d < logits->ndim; d++)
        a->I *= logits->shape[d];
    a->dtype = logits->dtype, a->tdtype = target->dtype;
    a->x = logits->data, a->t = target->data;
    return DT_OK;
}

dt_status dt_cpu_log_softmax_pick(const dt_local *logits, const dt_local *target, dt_local *out,
                                  dt_local *stats) {
    xent_arg a = {0};
    dt_local rows[3] = {*out, {0}, stats ? *stats : (dt_local){0}};
    DT_CHECK(xent_setup("dt_cpu_log_softmax_pick", logits, target, rows, &a));
    a.out = out->data, a.stats = stats ? stats->data : NULL;
    int64_t nrows = logits->shape[0] * a.I;
    /* no class: log of an empty sum (-inf), so log_softmax of nothing; nothing to pick */
    int64_t grain = 1 + 65536 / (a.C ? a.C : 1); /* rows per chunk: about 64k logits */
    dt_parallel_for(nrows, grain, a.dtype == DT_F32 ? xent_fwd_f32 : xent_fwd_f64, &a);
    return DT_OK;
}

dt_status dt_cpu_log_softmax_pick_backward(const dt_local *logits, const dt_local *target,
                                           const dt_local *stats, const dt_local *grad,
                                           dt_local *out) {
    xent_arg a = {0};
    dt_local rows[3] = {{0}, *grad, *stats};
    DT_CHECK(xent_setup("dt_cpu_log_softmax_pick_backward", logits, target, rows, &a));
    a.stats_in = stats->data, a.g = grad->data, a.out = out->data;
    int64_t nrows = logits->shape[0] * a.I;
    if (a.C == 0) return DT_OK;
    dt_parallel_for(nrows, 1 + 65536 / a.C, a.dtype == DT_F32 ? xent_bwd_f32 : xent_bwd_f64, &a);
    return DT_OK;
}

/* ---- rms_norm_residual ---------------------------------------------------------------------
 * Per row of H: h = x + r (stored, then read back rounded as the unfused add's output would
 * be), mean(h^2) in double, y = (h rstd) w: the arithmetic of add then rms_norm. */

typedef struct rms_arg {
    int64_t H;
    double eps;
    dt_dtype dtype;
    const void *x, *r, *w;
    void *h, *y;
} rms_arg;

#define DEFINE_RMS(SUF, T, CT, LOAD, STORE)                                                        \
    static void rms_rows_##SUF(void *arg, int64_t b, int64_t e) {                                  \
        const rms_arg *a = arg;                                                                    \
        int64_t H = a->H;                                                                          \
        const T *w = a->w;                                                                         \
        for (int64_t row = b; row < e; row++) {                                                    \
            const T *xr = (const T *)a->x + row * H, *rr = (const T *)a->r + row * H;              \
            T *hr = (T *)a->h + row * H, *yr = (T *)a->y + row * H;                                \
            double ss = 0;                                                                         \
            for (int64_t j = 0; j < H; j++) {                                                      \
                hr[j] = STORE(LOAD(xr[j]) + LOAD(rr[j]));                                          \
                double d = (double)LOAD(hr[j]);                                                    \
                ss += d * d;                                                                       \
            }                                                                                      \
            CT rstd = (CT)(1.0 / sqrt(ss / (double)H + a->eps));                                   \
            for (int64_t j = 0; j < H; j++)                                                        \
                yr[j] = STORE((LOAD(hr[j]) * rstd) * LOAD(w[j]));                                  \
        }                                                                                          \
    }

DEFINE_RMS(f64, double, double, ID, ID)
DEFINE_RMS(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_RMS(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16)

static void rms_rows_f32(void *arg, int64_t b, int64_t e) {
    const rms_arg *a = arg;
    int64_t H = a->H;
    for (int64_t row = b; row < e; row++) {
        const float *xr = (const float *)a->x + row * H, *rr = (const float *)a->r + row * H;
        float *hr = (float *)a->h + row * H, *yr = (float *)a->y + row * H;
        double ss = dt_simd_add_sumsq(H, xr, rr, hr);
        float rstd = (float)(1.0 / sqrt(ss / (double)H + a->eps));
        dt_simd_scale_mul(H, hr, rstd, a->w, yr);
    }
}

dt_status dt_cpu_rms_norm_residual(double eps, const dt_local *x, const dt_local *residual,
                                   const dt_local *weight, dt_local *out, dt_local *sum) {
    const char *fn = "dt_cpu_rms_norm_residual";
    if (!is_float(x->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: x must be a float dtype, got %s", fn,
                        dt_dtype_name(x->dtype));
    int same = x->ndim >= 1 && residual->ndim == x->ndim && residual->dtype == x->dtype;
    for (int d = 0; same && d < x->ndim; d++)
        same = residual->shape[d] == x->shape[d];
    if (!same) return dt_error(DT_ERR_SHAPE, "%s: residual must have x's shape and dtype", fn);
    int64_t H = x->shape[x->ndim - 1];
    if (weight->ndim != 1 || weight->shape[0] != H || weight->dtype != x->dtype)
        return dt_error(DT_ERR_SHAPE, "%s: weight must be (%lld) of x's dtype", fn, (long long)H);
    int64_t rows = H ? numel(x) / H : 0;
    rms_arg a = {.H = H,
                 .eps = eps,
                 .dtype = x->dtype,
                 .x = x->data,
                 .r = residual->data,
                 .w = weight->data,
                 .h = sum->data,
                 .y = out->data};
    if (!rows || !H) return DT_OK;
    dt_range_fn f = x->dtype == DT_F32    ? rms_rows_f32
                    : x->dtype == DT_F64  ? rms_rows_f64
                    : x->dtype == DT_BF16 ? rms_rows_bf16
                                          : rms_rows_f16;
    dt_parallel_for(rows, 1 + 65536 / H, f, &a);
    return DT_OK;
}
