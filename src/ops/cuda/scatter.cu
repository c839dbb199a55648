/* CUDA scatter_add, the adjoint of gather: one thread per column of src (all coordinates but
 * dim), adding its elements in order along dim. A column feeds only its own out column, so no
 * two threads write one element (no atomics) and each element sums its terms in the CPU's
 * order with the CPU's rounding: results equal the CPU's bit for bit. Index values out of range
 * are skipped (checking them would need a host sync). */
#include "ops/cuda/cuda_common.cuh"
#include "ops/kernel_args.h"

struct scatter_geom {
    int nd, dim;
    int64_t shape[DT_MAX_NDIM];                          /* src's */
    int64_t sstride[DT_MAX_NDIM], ostride[DT_MAX_NDIM];  /* src's, out's */
    int64_t istride[DT_MAX_NDIM];                        /* index's, 0 where broadcast */
    int64_t oshape[DT_MAX_NDIM], shift[DT_MAX_NDIM];
    int64_t dim_offset, dim_size;
};

template <typename T>
__global__ void scatter_add_kernel(scatter_geom g, const T *src, const void *ix, int is32, T *out,
                                   uint64_t columns) {
    typedef dt_cu_t<T> D;
    DT_CU_FOR(c, columns) {
        uint64_t rest = c;
        int64_t soff = 0, ooff = 0, ioff = 0;
        bool inside = true;
        for (int d = g.nd - 1; d >= 0; d--) {
            if (d == g.dim) continue;
            int64_t i = (int64_t)(rest % (uint64_t)g.shape[d]), j = i + g.shift[d];
            rest /= (uint64_t)g.shape[d];
            inside = inside && j >= 0 && j < g.oshape[d];
            soff += i * g.sstride[d];
            ioff += i * g.istride[d];
            ooff += j * g.ostride[d];
        }
        if (!inside) continue;
        for (int64_t r = 0; r < g.shape[g.dim]; r++) {
            int64_t s = soff + r * g.sstride[g.dim];
            int64_t xi = ioff + r * g.istride[g.dim];
            int64_t v = is32 ? ((const int32_t *)ix)[xi] : ((const int64_t *)ix)[xi];
            int64_t j = v - g.dim_offset;
            if (v < 0 || v >= g.dim_size || j < 0 || j >= g.oshape[g.dim]) continue;
            T *o = &out[ooff + j * g.ostride[g.dim]];
            *o = D::st(D::ld(*o) + D::ld(src[s]));
        }
    }
}

dt_status dt_cuda_scatter_add(const dt_local *src, int dim, const int64_t *shift,
                              int64_t dim_offset, int64_t dim_size, const dt_local *index,
                              dt_local *out) {
    const char *fn = "dt_cuda_scatter_add";
    DT_CHECK(dt_scatter_check(fn, src, dim, index, out));
    dt_dtype dt = src->dtype;
    int nd = src->ndim;
    DT_CU_RANK(r, fn);
    size_t on = dt_cu_numel(out), n = dt_cu_numel(src);
    if (on == 0) return DT_OK;
    DT_CHECK(dt_cuda_status(cudaMemsetAsync(out->data, 0, on * dt_dtype_size(dt), r->compute),
                            fn));
    if (n == 0) return DT_OK;
    scatter_geom g = {};
    g.nd = nd, g.dim = dim, g.dim_offset = dim_offset, g.dim_size = dim_size;
    int64_t step = 1;
    for (int d = nd - 1; d >= 0; d--) {
        g.istride[d] = index->shape[d] == 1 && src->shape[d] != 1 ? 0 : step;
        step *= index->shape[d];
        g.shape[d] = src->shape[d];
        g.oshape[d] = out->shape[d];
        g.sstride[d] = d == nd - 1 ? 1 : g.sstride[d + 1] * src->shape[d + 1];
        g.ostride[d] = d == nd - 1 ? 1 : g.ostride[d + 1] * out->shape[d + 1];
        g.shift[d] = d == dim ? 0 : shift[d];
    }
    uint64_t columns = n / (uint64_t)src->shape[dim];
    int is32 = index->dtype == DT_I32;
    return dt_cu_visit<false>(dt, [&](auto tag) {
        typedef decltype(tag) T;
        scatter_add_kernel<T><<<dt_cuda_blocks(columns, DT_CU_THREADS), DT_CU_THREADS, 0,
                                r->compute>>>(g, (const T *)src->data, index->data, is32,
                                              (T *)out->data, columns);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
