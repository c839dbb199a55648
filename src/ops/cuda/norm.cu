/* CUDA layer norm and RMS norm over the last dim, a warp or a block per row. Statistics in
 * double with two passes (no cancellation), the normalisation in f32 (f64 for f64) with the
 * CPU's operation order: no FMA contraction, so only the summation order differs. */
#include <math.h>

#include "ops/cuda/cuda_common.cuh"

/* Round after each operation as the CPU does; nvcc would otherwise fuse v * w + b. */
static __device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
static __device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

/* G threads per row of H; w and b nullable. y may alias x: each thread writes only what it
 * read, after the row's statistics are complete. */
template <typename T, int G>
__global__ void __launch_bounds__(G == 32 ? DT_CU_THREADS : G)
    norm_rows(int rms, double eps, int64_t rows, int64_t H, const T *x, const T *w,
                          const T *b, T *y) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    __shared__ double smem[32];
    int per = blockDim.x / G, t = threadIdx.x % G;
    for (int64_t r = (int64_t)blockIdx.x * per + threadIdx.x / G; r < rows;
         r += (int64_t)gridDim.x * per) {
        const T *xr = x + r * H;
        T *yr = y + r * H;
        double mean = 0.0, var = 0.0;
        if (!rms) {
            for (int64_t j = t; j < H; j += G) mean += (double)D::ld(xr[j]);
            mean = dt_cu_group_reduce<G>(mean, dt_cu_sum(), smem) / (double)H;
        }
        for (int64_t j = t; j < H; j += G) {
            double d = (double)D::ld(xr[j]) - mean;
            var += d * d;
        }
        var = dt_cu_group_reduce<G>(var, dt_cu_sum(), smem) / (double)H;
        C m = (C)mean, rstd = (C)(1.0 / sqrt(var + eps));
        for (int64_t j = t; j < H; j += G) {
            C v = mul_rn(D::ld(xr[j]) - m, rstd);
            if (w) v = mul_rn(v, D::ld(w[j]));
            if (b) v = add_rn(v, D::ld(b[j]));
            yr[j] = D::st(v);
        }
    }
}

template <typename T>
static void norm_launch(cudaStream_t s, int rms, double eps, int64_t rows, int64_t H, const T *x,
                        const T *w, const T *b, T *y) {
    switch (dt_cu_row_threads(H)) {
    case 32:
        norm_rows<T, 32><<<dt_cuda_blocks((size_t)rows, DT_CU_THREADS / 32), DT_CU_THREADS, 0,
                           s>>>(rms, eps, rows, H, x, w, b, y);
        break;
    case 256:
        norm_rows<T, 256><<<dt_cuda_blocks((size_t)rows, 1), 256, 0, s>>>(rms, eps, rows, H, x,
                                                                         w, b, y);
        break;
    default:
        norm_rows<T, 1024><<<dt_cuda_blocks((size_t)rows, 1), 1024, 0, s>>>(rms, eps, rows, H, x,
                                                                           w, b, y);
        break;
    }
}

dt_status dt_cuda_layer_norm(int rms, double eps, const dt_local *x, const dt_local *weight,
                             const dt_local *bias, dt_local *out) {
    const char *fn = rms ? "dt_cuda_layer_norm (rms)" : "dt_cuda_layer_norm";
    if (x->ndim < 1) return dt_error(DT_ERR_SHAPE, "%s: x must have at least one dim", fn);
    if ((weight && weight->dtype != x->dtype) || (bias && bias->dtype != x->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: weight/bias dtype differs from x's %s", fn,
                        dt_dtype_name(x->dtype));
    dt_dtype dt = x->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(dt));
    DT_CU_RANK(r, fn);
    int64_t H = x->shape[x->ndim - 1], rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    if (H == 0 || rows == 0) return DT_OK;
    const void *w = weight ? weight->data : NULL;
    const void *b = bias && !rms ? bias->data : NULL;
    return dt_cu_visit<false>(dt, [&](auto tag) {
        typedef decltype(tag) T;
        norm_launch<T>(r->compute, rms != 0, eps, rows, H, (const T *)x->data, (const T *)w,
                       (const T *)b, (T *)out->data);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
