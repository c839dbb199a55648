/* CUDA fused kernels with the CPU's contracts (ops/kernels.h, ops/cpu/fused.c): silu_mul and
 * its backward a thread per element, log_softmax_pick and its backward a thread per row (the
 * row's max, sum in double, pick, stats; or onehot g - softmax g written in one pass). Math in f32 (f64 for
 * f64) with the device's expf, so results match the CPU within a stated tolerance, not bits;
 * rms_norm_residual a thread per row. */
#include <math.h>

#include "ops/cuda/cuda_common.cuh"

static __device__ __forceinline__ float fx(float v) { return expf(v); }
static __device__ __forceinline__ double fx(double v) { return exp(v); }

template <typename T> __global__ void silu_mul_k(size_t n, const T *g, const T *u, T *y) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(i, n) {
        C x = D::ld(g[i]);
        y[i] = D::st((x / ((C)1 + fx(-x))) * D::ld(u[i]));
    }
}

template <typename T>
__global__ void silu_mul_bwd_k(size_t n, const T *g, const T *u, const T *dy, T *dg, T *du) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(i, n) {
        C x = D::ld(g[i]), d = D::ld(dy[i]), up = D::ld(u[i]), ex = fx(-x);
        C s = (C)1 / ((C)1 + ex);
        du[i] = D::st(d * (x / ((C)1 + ex)));
        dg[i] = D::st((d * up) * (s * ((C)1 + x * ((C)1 - s))));
    }
}

static dt_status silu_check(const char *fn, const dt_local *gate) {
    dt_dtype t = gate->dtype;
    if (t != DT_F32 && t != DT_F64 && t != DT_BF16 && t != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: gate must be a float dtype, got %s", fn,
                        dt_dtype_name(t));
    return DT_OK;
}

extern "C" dt_status dt_cuda_silu_mul(const dt_local *gate, const dt_local *up, dt_local *out) {
    DT_CHECK(silu_check("dt_cuda_silu_mul", gate));
    DT_CU_RANK(r, "dt_cuda_silu_mul");
    size_t n = dt_cu_numel(gate);
    if (!n) return DT_OK;
    return dt_cu_visit<false>(gate->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        silu_mul_k<T><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            n, (const T *)gate->data, (const T *)up->data, (T *)out->data);
        return DT_CUDA_LAUNCH_CHECK("dt_cuda_silu_mul");
    });
}

extern "C" dt_status dt_cuda_silu_mul_backward(const dt_local *gate, const dt_local *up,
                                               const dt_local *grad, dt_local *dgate,
                                               dt_local *dup) {
    DT_CHECK(silu_check("dt_cuda_silu_mul_backward", gate));
    DT_CU_RANK(r, "dt_cuda_silu_mul_backward");
    size_t n = dt_cu_numel(gate);
    if (!n) return DT_OK;
    return dt_cu_visit<false>(gate->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        silu_mul_bwd_k<T><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            n, (const T *)gate->data, (const T *)up->data, (const T *)grad->data,
            (T *)dgate->data, (T *)dup->data);
        return DT_CUDA_LAUNCH_CHECK("dt_cuda_silu_mul_backward");
    });
}

/* ---- log_softmax_pick: logits (N, C, I), per-row tensors (N, I) ----------------------------- */

template <typename I64>
static __device__ __forceinline__ int64_t target_at(const void *t, int wide, size_t r) {
    return wide ? ((const I64 *)t)[r] : ((const int32_t *)t)[r];
}

template <typename T>
__global__ void xent_fwd_k(size_t rows, int64_t C, int64_t I, const T *x, const void *tg,
                           int wide, T *out, T *stats) {
    DT_CU_FOR(r, rows) {
        int64_t n = (int64_t)r / I, i = (int64_t)r % I;
        const T *xr = x + n * C * I + i;
        T mx = -INFINITY;
        for (int64_t c = 0; c < C; c++) {
            T v = xr[c * I];
            if (v > mx || v != v) mx = v;
        }
        double s = 0;
        for (int64_t c = 0; c < C; c++) s += (double)fx(xr[c * I] - mx);
        T ls = (T)log(s);
        int64_t t = target_at<int64_t>(tg, wide, r);
        out[r] = t >= 0 && t < C ? (xr[t * I] - mx) - ls : (T)0;
        if (stats) stats[2 * r] = mx, stats[2 * r + 1] = (T)(1.0 / s);
    }
}

template <typename T>
__global__ void xent_bwd_k(size_t rows, int64_t C, int64_t I, const T *x, const void *tg,
                           int wide, const T *stats, const T *g, T *y) {
    DT_CU_FOR(r, rows) {
        int64_t n = (int64_t)r / I, i = (int64_t)r % I;
        const T *xr = x + n * C * I + i;
        T *yr = y + n * C * I + i, mx = stats[2 * r], inv = stats[2 * r + 1];
        int64_t t = target_at<int64_t>(tg, wide, r);
        T gr = t >= 0 && t < C ? g[r] : (T)0;
        for (int64_t c = 0; c < C; c++)
            yr[c * I] = (c == t ? gr : (T)0) - (fx(xr[c * I] - mx) * inv) * gr;
    }
}

static dt_status xent_check(const char *fn, const dt_local *x, const dt_local *t, int64_t *C,
                            int64_t *I, size_t *rows) {
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "%s: logits must be f32 or f64, got %s", fn,
                        dt_dtype_name(x->dtype));
    if ((t->dtype != DT_I32 && t->dtype != DT_I64) || x->ndim < 2 || t->ndim != x->ndim - 1)
        return dt_error(DT_ERR_SHAPE, "%s: logits (N, C, ...) and an i32/i64 target (N, ...) "
                                      "expected", fn);
    *C = x->shape[1];
    *I = 1;
    for (int d = 2; d < x->ndim; d++) *I *= x->shape[d];
    *rows = (size_t)(x->shape[0] * *I);
    return DT_OK;
}

extern "C" dt_status dt_cuda_log_softmax_pick(const dt_local *logits, const dt_local *target,
                                              dt_local *out, dt_local *stats) {
    const char *fn = "dt_cuda_log_softmax_pick";
    int64_t C, I;
    size_t rows;
    DT_CHECK(xent_check(fn, logits, target, &C, &I, &rows));
    DT_CU_RANK(r, fn);
    if (!rows) return DT_OK;
    int wide = target->dtype == DT_I64;
    auto run = [&](auto tag) {
        typedef decltype(tag) T;
        xent_fwd_k<T><<<dt_cuda_blocks(rows, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            rows, C, I, (const T *)logits->data, target->data, wide, (T *)out->data,
            stats ? (T *)stats->data : (T *)0);
        return DT_CUDA_LAUNCH_CHECK(fn);
    };
    return logits->dtype == DT_F32 ? run(float{}) : run(double{});
}

extern "C" dt_status dt_cuda_log_softmax_pick_backward(const dt_local *logits,
                                                       const dt_local *target,
                                                       const dt_local *stats,
                                                       const dt_local *grad, dt_local *out) {
    const char *fn = "dt_cuda_log_softmax_pick_backward";
    int64_t C, I;
    size_t rows;
    DT_CHECK(xent_check(fn, logits, target, &C, &I, &rows));
    DT_CU_RANK(r, fn);
    if (!rows || !C) return DT_OK;
    int wide = target->dtype == DT_I64;
    auto run = [&](auto tag) {
        typedef decltype(tag) T;
        xent_bwd_k<T><<<dt_cuda_blocks(rows, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            rows, C, I, (const T *)logits->data, target->data, wide, (const T *)stats->data,
            (const T *)grad->data, (T *)out->data);
        return DT_CUDA_LAUNCH_CHECK(fn);
    };
    return logits->dtype == DT_F32 ? run(float{}) : run(double{});
}

/* ---- rms_norm_residual: a thread per row (the add, the sum of squares in double, the scale) */

template <typename T>
__global__ void rms_res_k(size_t rows, int64_t H, double eps, const T *x, const T *res,
                          const T *w, T *y, T *h) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(r, rows) {
        const T *xr = x + r * H, *rr = res + r * H;
        T *hr = h + r * H, *yr = y + r * H;
        double ss = 0;
        for (int64_t j = 0; j < H; j++) {
            hr[j] = D::st(D::ld(xr[j]) + D::ld(rr[j]));
            double d = (double)D::ld(hr[j]);
            ss += d * d;
        }
        C rstd = (C)(1.0 / sqrt(ss / (double)H + eps));
        for (int64_t j = 0; j < H; j++) yr[j] = D::st((D::ld(hr[j]) * rstd) * D::ld(w[j]));
    }
}

extern "C" dt_status dt_cuda_rms_norm_residual(double eps, const dt_local *x,
                                               const dt_local *residual, const dt_local *weight,
                                               dt_local *out, dt_local *sum) {
    const char *fn = "dt_cuda_rms_norm_residual";
    DT_CHECK(silu_check(fn, x));
    DT_CU_RANK(r, fn);
    int64_t H = x->ndim ? x->shape[x->ndim - 1] : 0;
    size_t rows = H ? dt_cu_numel(x) / (size_t)H : 0;
    if (!rows) return DT_OK;
    return dt_cu_visit<false>(x->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        rms_res_k<T><<<dt_cuda_blocks(rows, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            rows, H, eps, (const T *)x->data, (const T *)residual->data,
            (const T *)weight->data, (T *)out->data, (T *)sum->data);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
