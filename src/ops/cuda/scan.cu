/* CUDA cumsum: one thread per row along the dim, accumulating as the CPU does (double for
 * floats, each output rounded once; i64 for integers), so results match it exactly. */
#include <type_traits>

#include "ops/cuda/cuda_common.cuh"

template <typename T>
__global__ void cumsum_kernel(const T *x, int64_t L, int64_t inner, T *out, uint64_t rows) {
    typedef dt_cu_t<T> S;
    typedef typename S::C C;
    typedef typename std::conditional<std::is_integral<C>::value, int64_t, double>::type Acc;
    DT_CU_FOR(row, rows) {
        int64_t b = (int64_t)(row / (uint64_t)inner), j = (int64_t)(row % (uint64_t)inner);
        const T *s = x + b * L * inner + j;
        T *o = out + b * L * inner + j;
        Acc acc = 0;
        for (int64_t t = 0; t < L; t++) {
            acc += (Acc)S::ld(s[t * inner]);
            o[t * inner] = S::st((C)acc);
        }
    }
}

dt_status dt_cuda_cumsum(const dt_local *x, int dim, dt_local *out) {
    const char *fn = "dt_cuda_cumsum";
    if (dt_dtype_size(x->dtype) == 0)
        return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)x->dtype);
    if (dim < 0 || dim >= x->ndim)
        return dt_error(DT_ERR_ARG, "%s: dim %d of a %d-D tensor", fn, dim, x->ndim);
    int64_t L = x->shape[dim], inner = 1, outer = 1;
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    DT_CU_RANK(r, fn);
    uint64_t rows = (uint64_t)(outer * inner);
    if (rows == 0 || L == 0) return DT_OK;
    return dt_cu_visit<true>(x->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        cumsum_kernel<T><<<dt_cuda_blocks(rows, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            (const T *)x->data, L, inner, (T *)out->data, rows);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
