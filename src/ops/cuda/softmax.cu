/* CUDA softmax and log_softmax along one dim, numerically stable like the CPU's: exp(x - max)
 * / sum and x - max - log(sum), math in f32 (f64 for f64) and the sum in double. Contiguous
 * rows get a warp or a block each; a strided dim gets a thread per column. */
#include <math.h>

#include "ops/cuda/cuda_common.cuh"

static __device__ __forceinline__ float ex(float v) { return expf(v); }
static __device__ __forceinline__ double ex(double v) { return exp(v); }

/* inner == 1: G threads per contiguous row of n. out may alias x: each thread writes only
 * the elements it reads, after the row's max and sum are complete. */
template <typename T, int G>
__global__ void __launch_bounds__(G == 32 ? DT_CU_THREADS : G)
    softmax_rows(int lg, int64_t rows, int64_t n, const T *x, T *y) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    __shared__ C smax[32];
    __shared__ double ssum[32];
    int per = blockDim.x / G, t = threadIdx.x % G;
    for (int64_t r = (int64_t)blockIdx.x * per + threadIdx.x / G; r < rows;
         r += (int64_t)gridDim.x * per) {
        const T *xr = x + r * n;
        T *yr = y + r * n;
        C mx = -INFINITY;
        for (int64_t j = t; j < n; j += G) mx = dt_cu_max()(mx, D::ld(xr[j]));
        mx = dt_cu_group_reduce<G>(mx, dt_cu_max(), smax);
        double sum = 0.0;
        for (int64_t j = t; j < n; j += G) sum += (double)ex(D::ld(xr[j]) - mx);
        sum = dt_cu_group_reduce<G>(sum, dt_cu_sum(), ssum);
        if (lg) { /* (x - max) first: exact for x near max, then the small log(sum) */
            C ls = (C)log(sum);
            for (int64_t j = t; j < n; j += G) yr[j] = D::st((D::ld(xr[j]) - mx) - ls);
        } else {
            C inv = (C)(1.0 / sum);
            for (int64_t j = t; j < n; j += G) yr[j] = D::st(ex(D::ld(xr[j]) - mx) * inv);
        }
    }
}

/* inner > 1: a thread per (outer, inner) column walking n with stride inner, three passes as
 * on the CPU; adjacent threads read adjacent columns. */
template <typename T>
__global__ void softmax_cols(int lg, int64_t outer, int64_t n, int64_t inner, const T *x, T *y) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(c, (uint64_t)(outer * inner)) {
        int64_t o = (int64_t)c / inner, j = (int64_t)c % inner;
        const T *xb = x + o * n * inner + j;
        T *yb = y + o * n * inner + j;
        C mx = -INFINITY;
        for (int64_t t = 0; t < n; t++) mx = dt_cu_max()(mx, D::ld(xb[t * inner]));
        double sum = 0.0;
        for (int64_t t = 0; t < n; t++) sum += (double)ex(D::ld(xb[t * inner]) - mx);
        sum = lg ? log(sum) : 1.0 / sum; /* log(sum) or 1 / sum */
        for (int64_t t = 0; t < n; t++) {
            C v = D::ld(xb[t * inner]);
            yb[t * inner] = D::st(lg ? (v - mx) - (C)sum : ex(v - mx) * (C)sum);
        }
    }
}

template <typename T>
static void rows_launch(cudaStream_t s, int lg, int64_t rows, int64_t n, const T *x, T *y) {
    switch (dt_cu_row_threads(n)) {
    case 32:
        softmax_rows<T, 32><<<dt_cuda_blocks((size_t)rows, DT_CU_THREADS / 32), DT_CU_THREADS, 0,
                              s>>>(lg, rows, n, x, y);
        break;
    case 256:
        softmax_rows<T, 256><<<dt_cuda_blocks((size_t)rows, 1), 256, 0, s>>>(lg, rows, n, x, y);
        break;
    default:
        softmax_rows<T, 1024><<<dt_cuda_blocks((size_t)rows, 1), 1024, 0, s>>>(lg, rows, n, x, y);
        break;
    }
}

dt_status dt_cuda_softmax(int log, int dim, const dt_local *x, dt_local *out) {
    if (dim < 0 || dim >= x->ndim)
        return dt_error(DT_ERR_ARG, "dt_cuda_softmax: dim %d out of range for %d dims", dim,
                        x->ndim);
    int lg = log != 0;
    dt_dtype dt = x->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "dt_cuda_%s: dtype %s not supported (float dtypes only)",
                        lg ? "log_softmax" : "softmax", dt_dtype_name(dt));
    DT_CU_RANK(r, "dt_cuda_softmax");
    int64_t outer = 1, inner = 1, n = x->shape[dim];
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    if (outer * inner == 0 || n == 0) return DT_OK;
    return dt_cu_visit<false>(dt, [&](auto tag) {
        typedef decltype(tag) T;
        if (inner == 1)
            rows_launch<T>(r->compute, lg, outer, n, (const T *)x->data, (T *)out->data);
        else
            softmax_cols<T><<<dt_cuda_blocks((size_t)(outer * inner), DT_CU_THREADS),
                              DT_CU_THREADS, 0, r->compute>>>(lg, outer, n, inner,
                                                              (const T *)x->data, (T *)out->data);
        return DT_CUDA_LAUNCH_CHECK(lg ? "dt_cuda_log_softmax" : "dt_cuda_softmax");
    });
}
