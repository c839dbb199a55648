/* CUDA layer norm and RMS norm backward over the last dim (ops/kernels.h's contract): a warp per
 * row for gx (a block's reductions inside one row would not run on cudasim, whose shuffles count
 * as block-wide barriers, so the block path could not be checked there), then the weight's and
 * bias's row sums per block of DT_NORM_BWD_BLOCK rows and the blocks in order, as the CPU adds
 * them. Every product rounds as on the CPU (no FMA contraction); the row statistics' summation
 * order differs. */
#include <math.h>

#include "ops/cpu/norm_backward.h"
#include "ops/cuda/cuda_common.cuh"

/* Products round on their own, so nvcc cannot contract them into an FMA with the sum or
 * difference around them: the CPU's arithmetic, step by step. */
static __device__ __forceinline__ float mul_rn(float a, float b) {
    return __fmul_rn(a, b);
}
static __device__ __forceinline__ double mul_rn(double a, double b) {
    return __dmul_rn(a, b);
}

/* A warp per row: gx, and each row's mean and rstd into st (2 per row, compute type) for
 * the sums that follow. w nullable. */
template <typename T>
__global__ void __launch_bounds__(DT_CU_THREADS)
    bwd_rows(int rms, double eps, int64_t rows, int64_t H, const T *x, const T *w, const T *g,
             T *gx, typename dt_cu_t<T>::C *st) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    const int G = 32, per = blockDim.x / G, t = threadIdx.x % G;
    for (int64_t r = (int64_t)blockIdx.x * per + threadIdx.x / G; r < rows;
         r += (int64_t)gridDim.x * per) {
        const T *xr = x + r * H, *gr = g + r * H;
        T *yr = gx + r * H;
        double mean = 0.0, var = 0.0, s1 = 0.0, s2 = 0.0;
        if (!rms) {
            for (int64_t j = t; j < H; j += G)
                mean += (double)D::ld(xr[j]);
            mean = dt_cu_warp_reduce(mean, dt_cu_sum()) / (double)H;
        }
        for (int64_t j = t; j < H; j += G) {
            double d = (double)D::ld(xr[j]) - mean;
            var += d * d;
        }
        var = dt_cu_warp_reduce(var, dt_cu_sum()) / (double)H;
        C m = (C)mean, rstd = (C)(1.0 / sqrt(var + eps));
        for (int64_t j = t; j < H; j += G) {
            C xh = mul_rn(D::ld(xr[j]) - m, rstd), h = D::ld(gr[j]);
            if (w) h = mul_rn(h, D::ld(w[j]));
            s1 += (double)h;
            s2 += (double)mul_rn(h, xh);
        }
        s1 = dt_cu_warp_reduce(s1, dt_cu_sum());
        s2 = dt_cu_warp_reduce(s2, dt_cu_sum());
        C c1 = rms ? (C)0 : (C)(s1 / (double)H), c2 = (C)(s2 / (double)H);
        for (int64_t j = t; j < H; j += G) {
            C xh = mul_rn(D::ld(xr[j]) - m, rstd), h = D::ld(gr[j]);
            if (w) h = mul_rn(h, D::ld(w[j]));
            yr[j] = D::st(mul_rn(rstd, (h - mul_rn(xh, c2)) - c1));
        }
        if (t == 0 && st) st[2 * r] = m, st[2 * r + 1] = rstd;
    }
}

/* One thread per (block of rows k, column c): part[k][c] = the block's sum of g xhat and
 * part[k][H + c] that of g, in row order, in double. */
template <typename T>
__global__ void bwd_block_sums(int64_t rows, int64_t H, int64_t nblk, const T *x, const T *g,
                               const typename dt_cu_t<T>::C *st, double *part) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(i, (size_t)(nblk * H)) {
        int64_t k = (int64_t)i / H, c = (int64_t)i % H;
        int64_t r1 = (k + 1) * DT_NORM_BWD_BLOCK < rows ? (k + 1) * DT_NORM_BWD_BLOCK : rows;
        double sw = 0.0, sb = 0.0;
        for (int64_t r = k * DT_NORM_BWD_BLOCK; r < r1; r++) {
            C gv = D::ld(g[r * H + c]);
            C xh = mul_rn(D::ld(x[r * H + c]) - st[2 * r], st[2 * r + 1]);
            sw += (double)mul_rn(gv, xh);
            sb += (double)gv;
        }
        part[k * 2 * H + c] = sw;
        part[k * 2 * H + H + c] = sb;
    }
}

/* One thread per column: the blocks' sums in block order, rounded once (zeros for no rows). */
template <typename T>
__global__ void bwd_finish(int64_t H, int64_t nblk, const double *part, T *gw, T *gb) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(c, (size_t)H) {
        double sw = 0.0, sb = 0.0;
        for (int64_t k = 0; k < nblk; k++)
            sw += part[k * 2 * H + c], sb += part[k * 2 * H + H + c];
        if (gw) gw[c] = D::st((C)sw);
        if (gb) gb[c] = D::st((C)sb);
    }
}

template <typename T>
static dt_status bwd_launch(cudaStream_t s, const char *fn, int rms, double eps, int64_t rows,
                            int64_t H, const T *x, const T *w, const T *g, T *gx, T *gw, T *gb) {
    typedef typename dt_cu_t<T>::C C;
    int sums = gw || gb;
    int64_t nblk = (rows + DT_NORM_BWD_BLOCK - 1) / DT_NORM_BWD_BLOCK;
    C *st = NULL;
    double *part = NULL;
    if (sums && rows) {
        st = (C *)dt_cuda_alloc(sizeof(C) * 2 * (size_t)rows);
        part = st ? (double *)dt_cuda_alloc(sizeof(double) * 2 * (size_t)(H * nblk)) : NULL;
        if (!part) {
            dt_cuda_free(st);
            return dt_error(DT_ERR_NOMEM, "%s: out of device memory for the row sums", fn);
        }
    }
    dt_status rc = DT_OK;
    /* Grids: rows a warp each (8 to a block); (block, column) pairs; columns. */
    unsigned T0 = DT_CU_THREADS, grows = dt_cuda_blocks((size_t)rows, T0 / 32);
    unsigned gbk = dt_cuda_blocks((size_t)(nblk * H), T0), gcol = dt_cuda_blocks((size_t)H, T0);
    if (rows) {
        bwd_rows<T><<<grows, T0, 0, s>>>(rms, eps, rows, H, x, w, g, gx, st);
        rc = DT_CUDA_LAUNCH_CHECK(fn);
    }
    if (rc == DT_OK && sums && rows) {
        bwd_block_sums<T><<<gbk, T0, 0, s>>>(rows, H, nblk, x, g, st, part);
        rc = DT_CUDA_LAUNCH_CHECK(fn);
    }
    if (rc == DT_OK && sums) {
        bwd_finish<T><<<gcol, T0, 0, s>>>(H, rows ? nblk : 0, part, gw, gb);
        rc = DT_CUDA_LAUNCH_CHECK(fn);
    }
    dt_cuda_free(part); /* stream-ordered: the kernels above still see them */
    dt_cuda_free(st);
    return rc;
}

extern "C" dt_status dt_cuda_layer_norm_backward(int rms, double eps, const dt_local *x,
                                                 const dt_local *weight, const dt_local *grad,
                                                 dt_local *gx, dt_local *gw, dt_local *gb) {
    const char *fn = rms ? "dt_cuda_layer_norm_backward (rms)" : "dt_cuda_layer_norm_backward";
    dt_dtype dt = x->dtype;
    int64_t H = 0, rows = 0;
    DT_CHECK(dt_norm_bwd_check(fn, x, weight, grad, gx, gw, gb, &H, &rows));
    DT_CU_RANK(r, fn);
    if (H == 0) return DT_OK;
    if (rms) gb = NULL;
    return dt_cu_visit<false>(dt, [&](auto tag) {
        typedef decltype(tag) T;
        return bwd_launch<T>(r->compute, fn, rms != 0, eps, rows, H, (const T *)x->data,
                             weight ? (const T *)weight->data : NULL, (const T *)grad->data,
                             (T *)gx->data, gw ? (T *)gw->data : NULL, gb ? (T *)gb->data : NULL);
    });
}
