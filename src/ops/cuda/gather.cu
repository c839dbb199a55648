/* CUDA selection kernels: gather along a dim (masked outside the block's rows), one_hot over
 * a class range and topk indices, with the CPU's contracts except that index values out of
 * range give 0 (a zero row for one_hot): checking them would need a host sync. topk runs one
 * thread per row with the CPU's insertion, so ties and NaN order alike. */
#include "ops/cuda/cuda_common.cuh"
#include "ops/kernel_args.h"

static dt_status index_dtype(const char *fn, const dt_local *ix) {
    if (ix->dtype != DT_I32 && ix->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: index must be i32 or i64, not %s", fn,
                        dt_dtype_name(ix->dtype));
    return DT_OK;
}

static __device__ __forceinline__ int64_t index_at(const void *ix, int is32, uint64_t i) {
    return is32 ? ((const int32_t *)ix)[i] : ((const int64_t *)ix)[i];
}

/* Out's shape with x's stride and the shift per dim. */
struct gather_geom {
    int nd, dim;
    int64_t shape[DT_MAX_NDIM], xstride[DT_MAX_NDIM], shift[DT_MAX_NDIM];
    int64_t dim_offset, dim_size, rows; /* rows: x's block size along dim */
};

template <typename U>
__global__ void gather_kernel(gather_geom g, const U *x, const void *ix, int is32, U *out,
                              uint64_t n) {
    DT_CU_FOR(i, n) {
        int64_t v = index_at(ix, is32, i), r = v - g.dim_offset, off = 0;
        uint64_t rest = i;
        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t c = (int64_t)(rest % (uint64_t)g.shape[d]);
            rest /= (uint64_t)g.shape[d];
            if (d != g.dim) off += (c + g.shift[d]) * g.xstride[d];
        }
        bool hit = v >= 0 && v < g.dim_size && r >= 0 && r < g.rows;
        out[i] = hit ? x[off + r * g.xstride[g.dim]] : (U)0;
    }
}

dt_status dt_cuda_gather(const dt_local *x, int dim, const int64_t *shift, int64_t dim_offset,
                         int64_t dim_size, const dt_local *index, dt_local *out) {
    const char *fn = "dt_cuda_gather";
    DT_CHECK(index_dtype(fn, index));
    size_t es = dt_dtype_size(x->dtype);
    if (es == 0) return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)x->dtype);
    if (dim < 0 || dim >= x->ndim || index->ndim != x->ndim)
        return dt_error(DT_ERR_SHAPE, "%s: dim %d, index %d-D, x %d-D", fn, dim, index->ndim,
                        x->ndim);
    DT_CU_RANK(r, fn);
    size_t n = dt_cu_numel(index);
    if (n == 0) return DT_OK;
    gather_geom g = {};
    g.nd = x->ndim, g.dim = dim, g.dim_offset = dim_offset, g.dim_size = dim_size;
    g.rows = x->shape[dim];
    for (int d = g.nd - 1; d >= 0; d--) {
        g.shape[d] = index->shape[d];
        g.xstride[d] = d == g.nd - 1 ? 1 : g.xstride[d + 1] * x->shape[d + 1];
        g.shift[d] = d == dim ? 0 : shift[d];
    }
    int is32 = index->dtype == DT_I32;
    return dt_cu_visit_size(es, [&](auto tag) {
        typedef decltype(tag) U;
        gather_kernel<U><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            g, (const U *)x->data, index->data, is32, (U *)out->data, n);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}

__global__ void one_hot_kernel(const void *ix, int is32, int64_t num_classes, int64_t offset,
                               int64_t C, int64_t *out, uint64_t n) {
    DT_CU_FOR(e, n) {
        int64_t v = index_at(ix, is32, e / (uint64_t)C), c = (int64_t)(e % (uint64_t)C);
        out[e] = v >= 0 && v < num_classes && v == offset + c;
    }
}

dt_status dt_cuda_one_hot(const dt_local *index, const int64_t *index_offset, int64_t num_classes,
                          int64_t class_offset, dt_local *out) {
    (void)index_offset; /* out-of-range values are not reported here (no host sync) */
    const char *fn = "dt_cuda_one_hot";
    DT_CHECK(index_dtype(fn, index));
    DT_CU_RANK(r, fn);
    int64_t C = out->shape[out->ndim - 1];
    size_t n = dt_cu_numel(out);
    if (n == 0) return DT_OK;
    one_hot_kernel<<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
        index->data, index->dtype == DT_I32, num_classes, class_offset, C,
        (int64_t *)out->data, n);
    return DT_CUDA_LAUNCH_CHECK(fn);
}

/* 1 when a sorts above b: NaN above every number, equal values neither (the CPU's rule). */
template <typename C> __device__ __forceinline__ bool above(C a, C b) {
    return a != a ? b == b : a > b;
}

template <typename T>
__global__ void topk_kernel(const T *x, int64_t L, int64_t inner, int64_t k, int smallest,
                            int64_t *out, uint64_t rows) {
    typedef dt_cu_t<T> S;
    DT_CU_FOR(row, rows) {
        int64_t b = (int64_t)(row / (uint64_t)inner), j = (int64_t)(row % (uint64_t)inner);
        const T *s = x + b * L * inner + j;
        int64_t *o = out + b * k * inner + j, have = 0;
        for (int64_t t = 0; t < L && k > 0; t++) {
            typename S::C v = S::ld(s[t * inner]);
            int64_t p = have;
            while (p > 0) {
                typename S::C w = S::ld(s[o[(p - 1) * inner] * inner]);
                if (!(smallest ? above(w, v) : above(v, w))) break;
                p--;
            }
            if (p >= k) continue;
            for (int64_t q = have < k ? have : k - 1; q > p; q--) o[q * inner] = o[(q - 1) * inner];
            o[p * inner] = t;
            if (have < k) have++;
        }
    }
}

dt_status dt_cuda_topk(const dt_local *x, int64_t k, int dim, int smallest, dt_local *out) {
    const char *fn = "dt_cuda_topk";
    int64_t L, inner, outer;
    DT_CHECK(dt_topk_check(fn, x, k, dim, &outer, &L, &inner));
    DT_CU_RANK(r, fn);
    uint64_t rows = (uint64_t)(outer * inner);
    if (rows == 0 || k == 0) return DT_OK;
    return dt_cu_visit<true>(x->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        topk_kernel<T><<<dt_cuda_blocks(rows, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            (const T *)x->data, L, inner, k, smallest, (int64_t *)out->data, rows);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
