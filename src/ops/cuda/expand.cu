/* expand on CUDA: out = x broadcast to out's shape, element for element, as dt_cpu_expand. A
 * broadcast dim gets stride 0 in x; the copy moves raw elements, so one kernel per element
 * size serves every dtype. */
#include "ops/cuda/cuda_common.cuh"

namespace {

struct expand_geom {
    int ndim;
    int64_t shape[DT_MAX_NDIM];  /* out's */
    int64_t stride[DT_MAX_NDIM]; /* x's, 0 where broadcast */
};

template <typename E>
__global__ void expand_kernel(const E *__restrict__ x, E *__restrict__ out, size_t n,
                              expand_geom g) {
    DT_CU_FOR(k, n) {
        size_t rest = k;
        int64_t off = 0;
        for (int i = g.ndim - 1; i >= 0; i--) {
            off += (int64_t)(rest % (size_t)g.shape[i]) * g.stride[i];
            rest /= (size_t)g.shape[i];
        }
        out[k] = x[off];
    }
}

template <typename E> dt_status launch(const dt_local *x, dt_local *out, size_t n,
                                       const expand_geom &g, cudaStream_t s) {
    expand_kernel<E><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, s>>>(
        (const E *)x->data, (E *)out->data, n, g);
    return DT_CUDA_LAUNCH_CHECK("dt_cuda_expand");
}

} // namespace

extern "C" dt_status dt_cuda_expand(const dt_local *x, dt_local *out) {
    DT_CU_RANK(r, "dt_cuda_expand");
    size_t n = 1;
    expand_geom g = {out->ndim, {0}, {0}};
    int64_t s = 1;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int xi = i - (out->ndim - x->ndim);
        int64_t size = xi >= 0 ? x->shape[xi] : 1;
        g.shape[i] = out->shape[i];
        g.stride[i] = size == out->shape[i] ? s : 0;
        s *= size;
        n *= (size_t)out->shape[i];
    }
    if (n == 0) return DT_OK;
    switch (dt_dtype_size(x->dtype)) {
    case 2: return launch<uint16_t>(x, out, n, g, r->compute);
    case 4: return launch<uint32_t>(x, out, n, g, r->compute);
    case 8: return launch<uint64_t>(x, out, n, g, r->compute);
    default: return dt_error(DT_ERR_DTYPE, "dt_cuda_expand: element size %zu", dt_dtype_size(x->dtype));
    }
}
