/* CUDA dropout: one thread per element, the keep test of the CPU kernel (core/fill.h's draw for
 * the element's global index) and its scaling, so masks and values equal the CPU's bit for
 * bit. */
#include "core/fill.h"
#include "ops/cuda/cuda_common.cuh"

template <typename T>
__global__ void dropout_kernel(dt_fill f, double p, double scale, size_t n, const T *x, T *y) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(k, n) {
        uint64_t gi = dt_fill_index(&f, k);
        int keep = dt_fill_unit(f.dtype, gi, dt_fill_block(&f, gi)) >= p;
        y[k] = D::st(keep ? (C)(D::ld(x[k]) * (C)scale) : (C)0);
    }
}

dt_status dt_cuda_dropout(double p, uint64_t seed, uint64_t offset, const int64_t *global_shape,
                          const int64_t *box_offset, const dt_local *x, dt_local *out) {
    const char *fn = "dt_cuda_dropout";
    dt_dtype dt = x->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(dt));
    if (out->dtype != dt) return dt_error(DT_ERR_DTYPE, "%s: out dtype differs", fn);
    DT_CU_RANK(r, fn);
    dt_fill f = {};
    f.kind = DT_FILL_UNIFORM, f.dtype = dt, f.ndim = x->ndim, f.seed = seed, f.offset = offset;
    for (int d = 0; d < x->ndim; d++) {
        f.shape[d] = global_shape[d];
        f.local_shape[d] = x->shape[d];
        f.local_offset[d] = box_offset[d];
    }
    size_t n = dt_cu_numel(x);
    if (n == 0) return DT_OK;
    return dt_cu_visit<false>(dt, [&](auto tag) {
        typedef decltype(tag) T;
        dropout_kernel<T><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            f, p, 1.0 / (1.0 - p), n, (const T *)x->data, (T *)out->data);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
