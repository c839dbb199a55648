/* CUDA indexing kernels: embedding lookup and target pick with a shard's offset (ids outside
 * the shard give zeros), box slice and permute. Pure data movement by element size, as on the
 * CPU; permute collapses dims the same way and transposes through shared-memory tiles. */
#include "core/cuda/memory.h"
#include "ops/cuda/cuda_common.cuh"

static dt_status check_index_dtype(const char *fn, const dt_local *ix) {
    if (ix->dtype != DT_I32 && ix->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: indices must be i32 or i64, not %s", fn,
                        dt_dtype_name(ix->dtype));
    return DT_OK;
}

static __device__ __forceinline__ int64_t index_at(const void *ix, int is32, uint64_t i) {
    return is32 ? ((const int32_t *)ix)[i] : ((const int64_t *)ix)[i];
}

/* A block per output row: threads stride the row, so no per-element division. */
template <typename U>
__global__ void embedding_kernel(const U *table, int64_t V, int64_t H, int64_t row_offset,
                                 const void *ix, int is32, U *out, uint64_t n) {
    for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
        int64_t r = index_at(ix, is32, i) - row_offset;
        U *dst = out + i * (uint64_t)H;
        const U *src = table + (r >= 0 && r < V ? r : 0) * H;
        bool hit = r >= 0 && r < V;
        for (int64_t h = threadIdx.x; h < H; h += blockDim.x) dst[h] = hit ? src[h] : (U)0;
    }
}

dt_status dt_cuda_embedding(const dt_local *table, int64_t row_offset, const dt_local *indices,
                            dt_local *out) {
    const char *fn = "dt_cuda_embedding";
    DT_CHECK(check_index_dtype(fn, indices));
    size_t es = dt_dtype_size(table->dtype);
    if (es == 0)
        return dt_error(DT_ERR_DTYPE, "%s: unknown table dtype %d", fn, (int)table->dtype);
    if (table->ndim != 2)
        return dt_error(DT_ERR_SHAPE, "%s: table must be (V, H), has %d dims", fn, table->ndim);
    DT_CU_RANK(r, fn);
    int64_t V = table->shape[0], H = table->shape[1];
    size_t n = dt_cu_numel(indices);
    if (H == 0 || n == 0) return DT_OK; /* an empty shard of the hidden dim */
    unsigned threads = H < DT_CU_THREADS ? (unsigned)((H + 31) / 32 * 32) : DT_CU_THREADS;
    int is32 = indices->dtype == DT_I32;
    return dt_cu_visit_size(es, [&](auto tag) {
        typedef decltype(tag) U;
        embedding_kernel<U><<<dt_cuda_blocks(n, 1), threads, 0, r->compute>>>(
            (const U *)table->data, V, H, row_offset, indices->data, is32, (U *)out->data, n);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}

template <typename U>
__global__ void pick_kernel(const U *logits, int64_t C, int64_t class_offset, const void *ix,
                            int is32, U *out, uint64_t n) {
    DT_CU_FOR(i, n) {
        int64_t c = index_at(ix, is32, i) - class_offset;
        out[i] = c >= 0 && c < C ? logits[(uint64_t)C * i + (uint64_t)c] : (U)0;
    }
}

dt_status dt_cuda_pick(const dt_local *logits, int64_t class_offset, const dt_local *target,
                       dt_local *out) {
    const char *fn = "dt_cuda_pick";
    DT_CHECK(check_index_dtype(fn, target));
    size_t es = dt_dtype_size(logits->dtype);
    if (es == 0)
        return dt_error(DT_ERR_DTYPE, "%s: unknown logits dtype %d", fn, (int)logits->dtype);
    if (logits->ndim < 1) return dt_error(DT_ERR_SHAPE, "%s: logits must have a class dim", fn);
    DT_CU_RANK(r, fn);
    int64_t C = logits->shape[logits->ndim - 1];
    size_t n = dt_cu_numel(target);
    if (n == 0) return DT_OK;
    int is32 = target->dtype == DT_I32;
    return dt_cu_visit_size(es, [&](auto tag) {
        typedef decltype(tag) U;
        pick_kernel<U><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            (const U *)logits->data, C, class_offset, target->data, is32, (U *)out->data, n);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}

dt_status dt_cuda_slice(const dt_local *x, const int64_t *start, dt_local *out) {
    size_t es = dt_dtype_size(x->dtype);
    if (es == 0) return dt_error(DT_ERR_DTYPE, "dt_cuda_slice: unknown dtype %d", (int)x->dtype);
    for (int d = 0; d < x->ndim; d++)
        if (start[d] < 0 || out->shape[d] < 0 || start[d] + out->shape[d] > x->shape[d])
            return dt_error(DT_ERR_SHAPE,
                            "dt_cuda_slice: dim %d: box [%lld, %lld) outside size %lld", d,
                            (long long)start[d], (long long)(start[d] + out->shape[d]),
                            (long long)x->shape[d]);
    return dt_cuda_box_copy(out->data, out->shape, NULL, x->data, x->shape, start, out->shape,
                            x->ndim, es);
}

/* ---- permute ---------------------------------------------------------------------------- */

/* out[i] = x[offset of i over out's collapsed dims, strides in x]. */
template <typename U>
__global__ void permute_kernel(dt_cu_dims d, const U *x, U *out, uint64_t total) {
    DT_CU_FOR(i, total) out[i] = x[dt_cu_offset(d, i)];
}

/* Batches of out (R, C) with out[r][c] = x[r + c * is]: 32x32 tiles read along r and written
 * along c, both coalesced. outer: the batch dims with their strides in x. */
template <typename U>
__global__ void transpose_kernel(dt_cu_dims outer, uint64_t batches, int64_t R, int64_t C,
                                 int64_t is, const U *x, U *out) {
    __shared__ U tile[32][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    for (uint64_t b = blockIdx.z; b < batches; b += gridDim.z) {
        const U *s = x + dt_cu_offset(outer, b);
        U *o = out + b * (uint64_t)(R * C);
        for (int64_t r0 = (int64_t)blockIdx.y * 32; r0 < R; r0 += (int64_t)gridDim.y * 32) {
            for (int64_t c0 = (int64_t)blockIdx.x * 32; c0 < C; c0 += (int64_t)gridDim.x * 32) {
                for (int j = ty; j < 32; j += 8)
                    if (r0 + tx < R && c0 + j < C) tile[j][tx] = s[r0 + tx + (c0 + j) * is];
                __syncthreads();
                for (int j = ty; j < 32; j += 8)
                    if (r0 + j < R && c0 + tx < C) o[(r0 + j) * C + c0 + tx] = tile[tx][j];
                __syncthreads();
            }
        }
    }
}

dt_status dt_cuda_permute(const dt_local *x, const int *perm, dt_local *out) {
    const char *fn = "dt_cuda_permute";
    size_t es = dt_dtype_size(x->dtype);
    if (es == 0) return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)x->dtype);
    int nd = x->ndim, seen = 0;
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || (seen >> perm[i]) & 1)
            return dt_error(DT_ERR_ARG, "%s: perm[%d] = %d is not a permutation of 0..%d", fn, i,
                            perm[i], nd - 1);
        seen |= 1 << perm[i];
    }
    DT_CU_RANK(r, fn);
    size_t total = dt_cu_numel(x);
    if (total == 0) return DT_OK;
    int64_t xs[DT_MAX_NDIM];
    for (int d = nd - 1; d >= 0; d--) xs[d] = d == nd - 1 ? 1 : xs[d + 1] * x->shape[d + 1];
    /* out's dims in order with their strides in x; size-1 dims dropped and out dims that stay
     * adjacent in x merged, so an identity permute is one memcpy (as on the CPU). */
    dt_cu_dims d;
    int k = 0;
    for (int i = 0; i < nd; i++) {
        int64_t sz = x->shape[perm[i]], s = xs[perm[i]];
        if (sz == 1) continue;
        if (k > 0 && d.stride[k - 1] == s * sz) {
            d.size[k - 1] *= sz;
            d.stride[k - 1] = s;
        } else {
            d.size[k] = sz;
            d.stride[k] = s;
            k++;
        }
    }
    d.n = k;
    if (k == 0 || (k == 1 && d.stride[0] == 1))
        return dt_cuda_status(cudaMemcpyAsync(out->data, x->data, total * es, cudaMemcpyDefault,
                                              r->compute), fn);
    /* x's innermost dim as out's second-to-last: the last two out dims are a transpose. */
    int tiled = k >= 2 && d.stride[k - 2] == 1;
    return dt_cu_visit_size(es, [&](auto tag) {
        typedef decltype(tag) U;
        if (tiled) {
            int64_t R = d.size[k - 2], C = d.size[k - 1];
            dt_cu_dims outer = d;
            outer.n = k - 2;
            uint64_t batches = total / (uint64_t)(R * C);
            dim3 grid((unsigned)((C + 31) / 32 < 65535 ? (C + 31) / 32 : 65535),
                      (unsigned)((R + 31) / 32 < 65535 ? (R + 31) / 32 : 65535),
                      (unsigned)(batches < 65535 ? batches : 65535));
            transpose_kernel<U><<<grid, dim3(32, 8), 0, r->compute>>>(
                outer, batches, R, C, d.stride[k - 1], (const U *)x->data, (U *)out->data);
        } else {
            permute_kernel<U><<<dt_cuda_blocks(total, DT_CU_THREADS), DT_CU_THREADS, 0,
                                r->compute>>>(d, (const U *)x->data, (U *)out->data, total);
        }
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
