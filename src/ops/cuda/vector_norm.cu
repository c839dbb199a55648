/* vector_norm on CUDA: one thread per output element folds its reduced elements in the
 * CPU's order with the CPU's per-element math (ops/cpu/vector_norm.h), so results match
 * dt_cpu_vector_norm up to libm differences. Simple rather than fast: norms are small
 * reductions next to the matmuls around them. */
#include "ops/cpu/vector_norm.h"
#include "ops/cuda/cuda_common.cuh"

namespace {

struct vn_geom {
    int nk, nr;                                 /* kept and reduced dims (size > 1) */
    int64_t ks[DT_MAX_NDIM], kst[DT_MAX_NDIM];  /* kept: sizes, x strides (row-major) */
    int64_t rs[DT_MAX_NDIM], rst[DT_MAX_NDIM];  /* reduced: sizes, x strides */
    size_t count;                               /* elements folded into each output */
};

template <typename T>
__global__ void vn_kernel(const T *__restrict__ x, T *__restrict__ out, size_t nout, double ord,
                          vn_geom g) {
    typedef dt_cu_t<T> L;
    DT_CU_FOR(o, nout) {
        int64_t base = 0;
        size_t rest = o;
        for (int i = g.nk - 1; i >= 0; i--) {
            base += (int64_t)(rest % (size_t)g.ks[i]) * g.kst[i];
            rest /= (size_t)g.ks[i];
        }
        double acc = dt_vn_start(ord);
        for (size_t k = 0; k < g.count; k++) {
            int64_t off = base;
            size_t r = k;
            for (int i = g.nr - 1; i >= 0; i--) {
                off += (int64_t)(r % (size_t)g.rs[i]) * g.rst[i];
                r /= (size_t)g.rs[i];
            }
            acc = dt_vn_fold(ord, acc, (double)L::ld(x[off]));
        }
        out[o] = L::st((typename L::C)dt_vn_finish(ord, acc));
    }
}

} // namespace

extern "C" dt_status dt_cuda_vector_norm(double ord, unsigned mask, const dt_local *x,
                                         dt_local *out) {
    const char *fn = "dt_cuda_vector_norm";
    if (x->dtype != DT_F32 && x->dtype != DT_F64 && x->dtype != DT_BF16 && x->dtype != DT_F16)
        return dt_error(DT_ERR_DTYPE, "vector_norm: %s is not a float dtype (torch needs a float "
                                      "or complex input)", dt_dtype_name(x->dtype));
    if (ord != ord) return dt_error(DT_ERR_ARG, "vector_norm: ord is NaN");
    DT_CU_RANK(r, fn);
    vn_geom g = {};
    g.count = 1;
    size_t nout = 1;
    int64_t stride = 1, st[DT_MAX_NDIM];
    for (int d = x->ndim - 1; d >= 0; d--) st[d] = stride, stride *= x->shape[d];
    for (int d = 0; d < x->ndim; d++) {
        if ((mask >> d) & 1u) {
            g.rs[g.nr] = x->shape[d], g.rst[g.nr++] = st[d];
            g.count *= (size_t)x->shape[d];
        } else {
            g.ks[g.nk] = x->shape[d], g.kst[g.nk++] = st[d];
            nout *= (size_t)x->shape[d];
        }
    }
    if (nout == 0) return DT_OK;
    return dt_cu_visit<false>(x->dtype, [&](auto tag) -> dt_status {
        typedef decltype(tag) T;
        vn_kernel<T><<<dt_cuda_blocks(nout, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            (const T *)x->data, (T *)out->data, nout, ord, g);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
