/* CUDA reductions over a dim mask (sum, mean, max, min, prod) and arg max/min along one dim.
 * The host plans x as runs of kept and reduced dims exactly as the CPU does; floats accumulate
 * in double and integers in wrapping int64, as there, so only the summation order differs. */
#include <math.h>

#include "core/cuda/memory.h"
#include "ops/cuda/cuda_common.cuh"

/* ---- plan (the CPU's plan_reduce) ------------------------------------------------------- */

typedef struct rplan {
    int inner_reduced;
    dt_cu_dims kd, rd; /* kept and reduced runs, sizes and strides in elements */
    uint64_t nout, count; /* output elements; elements reduced into each */
} rplan;

static void plan_reduce(unsigned mask, const dt_local *x, rplan *p) {
    int64_t stride[DT_MAX_NDIM];
    for (int d = x->ndim - 1; d >= 0; d--)
        stride[d] = d == x->ndim - 1 ? 1 : stride[d + 1] * x->shape[d + 1];
    dt_cu_dims *k = &p->kd, *r = &p->rd;
    k->n = r->n = 0;
    int last = -1; /* class of the previous run: 0 kept, 1 reduced */
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue; /* size-1 dims neither move nor reduce anything */
        int red = (mask >> d) & 1u;
        dt_cu_dims *c = red ? r : k;
        if (last == red) {
            c->size[c->n - 1] *= x->shape[d];
        } else {
            c->size[c->n] = x->shape[d];
            c->n++;
        }
        c->stride[c->n - 1] = stride[d];
        last = red;
    }
    p->inner_reduced = last == 1;
    if (!p->inner_reduced && k->n == 0) { /* nothing left: one output, one element */
        k->size[0] = k->stride[0] = 1;
        k->n = 1;
    }
    p->nout = p->count = 1;
    for (int i = 0; i < k->n; i++) p->nout *= (uint64_t)k->size[i];
    for (int i = 0; i < r->n; i++) p->count *= (uint64_t)r->size[i];
}

/* ---- accumulation ----------------------------------------------------------------------- */

template <typename T> struct acc_of { typedef double A; };
template <> struct acc_of<int32_t> { typedef int64_t A; };
template <> struct acc_of<int64_t> { typedef int64_t A; };

struct c_add {
    __device__ double operator()(double a, double v) const { return a + v; }
    __device__ int64_t operator()(int64_t a, int64_t v) const {
        return (int64_t)((uint64_t)a + (uint64_t)v);
    }
};
struct c_mul {
    __device__ double operator()(double a, double v) const { return a * v; }
    __device__ int64_t operator()(int64_t a, int64_t v) const {
        return (int64_t)((uint64_t)a * (uint64_t)v);
    }
};
typedef dt_cu_max c_max;
struct c_min {
    template <typename A> __device__ A operator()(A a, A v) const {
        return (v < a || v != v) ? v : a;
    }
};

template <typename T> __device__ __forceinline__ typename acc_of<T>::A init_of(int op) {
    typedef typename acc_of<T>::A A;
    A lo, hi;
    if constexpr (std::is_same<T, int32_t>::value) lo = INT32_MIN, hi = INT32_MAX;
    else if constexpr (std::is_same<T, int64_t>::value) lo = INT64_MIN, hi = INT64_MAX;
    else lo = -INFINITY, hi = INFINITY;
    return op == DT_REDUCE_PROD ? (A)1 : op == DT_REDUCE_MAX ? lo : op == DT_REDUCE_MIN ? hi : (A)0;
}

/* Mean and the store as on the CPU: f64 -> f32 -> bf16/f16, integers truncate. */
static __device__ double fin(int op, double a, uint64_t n) {
    return op == DT_REDUCE_AVG ? a / (double)n : a;
}
static __device__ int64_t fin(int op, int64_t a, uint64_t n) {
    return op == DT_REDUCE_AVG ? (n ? a / (int64_t)n : 0) : a;
}
template <typename T> __device__ T store(typename acc_of<T>::A a) {
    return dt_cu_t<T>::st((typename dt_cu_t<T>::C)a);
}

/* Elements e0, e0 + step, ... < e1 of the reduced runs, from x + base. */
template <typename T, typename Cb, typename A = typename acc_of<T>::A>
__device__ A fold(const T *x, int64_t base, const dt_cu_dims &rd, uint64_t e0, uint64_t e1,
                  uint64_t step, A acc, Cb cb) {
    for (uint64_t e = e0; e < e1; e += step)
        acc = cb(acc, (A)dt_cu_t<T>::ld(x[base + dt_cu_offset(rd, e)]));
    return acc;
}

/* Calls body(cb) with the combine of op, so each loop is compiled for one op. */
#define OP_SWITCH(op, body)                                                                        \
    switch (op) {                                                                                  \
    case DT_REDUCE_PROD: body(c_mul()); break;                                                     \
    case DT_REDUCE_MAX: body(c_max()); break;                                                      \
    case DT_REDUCE_MIN: body(c_min()); break;                                                      \
    default: body(c_add()); break;                                                                 \
    }

/* ---- kernels ---------------------------------------------------------------------------- */

/* Innermost run reduced: G threads (a warp, or the whole block) per output; gridDim.y slices
 * of the reduced elements write partials when splits > 1. */
template <typename T, int G>
__global__ void __launch_bounds__(G == 32 ? DT_CU_THREADS : G)
    reduce_rows(int op, rplan p, const T *x, T *out, typename acc_of<T>::A *part) {
    typedef typename acc_of<T>::A A;
    __shared__ A smem[32];
    int per = blockDim.x / G, t = threadIdx.x % G, splits = gridDim.y;
    uint64_t chunk = (p.count + splits - 1) / splits, e0 = blockIdx.y * chunk;
    uint64_t e1 = e0 + chunk < p.count ? e0 + chunk : p.count;
    for (uint64_t o = (uint64_t)blockIdx.x * per + threadIdx.x / G; o < p.nout;
         o += (uint64_t)gridDim.x * per) {
        int64_t koff = dt_cu_offset(p.kd, o);
        A acc = init_of<T>(op);
#define ROWS_BODY(cb)                                                                              \
    acc = fold<T>(x, koff, p.rd, e0 + t, e1, G, acc, cb);                                          \
    if constexpr (G == 32) acc = dt_cu_warp_reduce(acc, cb);                                       \
    else acc = dt_cu_block_reduce(acc, cb, smem);
        OP_SWITCH(op, ROWS_BODY)
#undef ROWS_BODY
        if (t == 0) {
            if (part) part[o * splits + blockIdx.y] = acc;
            else out[o] = store<T>(fin(op, acc, p.count));
        }
    }
}

/* Innermost run kept: threadIdx.x walks 32 adjacent outputs (coalesced), threadIdx.y splits
 * the reduced elements 8 ways, and gridDim.y slices them further into partials. */
template <typename T>
__global__ void reduce_cols(int op, rplan p, const T *x, T *out, typename acc_of<T>::A *part) {
    typedef typename acc_of<T>::A A;
    __shared__ A sm[8][33];
    int tx = threadIdx.x, ty = threadIdx.y, splits = gridDim.y;
    uint64_t chunk = (p.count + splits - 1) / splits, e0 = blockIdx.y * chunk;
    uint64_t e1 = e0 + chunk < p.count ? e0 + chunk : p.count;
    for (uint64_t ob = (uint64_t)blockIdx.x * 32; ob < p.nout; ob += (uint64_t)gridDim.x * 32) {
        uint64_t o = ob + tx;
        A acc = init_of<T>(op);
        if (o < p.nout) {
            int64_t koff = dt_cu_offset(p.kd, o);
#define COLS_BODY(cb) acc = fold<T>(x, koff, p.rd, e0 + ty, e1, 8, acc, cb);
            OP_SWITCH(op, COLS_BODY)
#undef COLS_BODY
        }
        sm[ty][tx] = acc;
        __syncthreads();
        if (ty == 0 && o < p.nout) {
#define MERGE_BODY(cb) for (int y = 1; y < 8; y++) acc = cb(acc, sm[y][tx]);
            OP_SWITCH(op, MERGE_BODY)
#undef MERGE_BODY
            if (part) part[o * splits + blockIdx.y] = acc;
            else out[o] = store<T>(fin(op, acc, p.count));
        }
        __syncthreads();
    }
}

/* Folds each output's partials in slice order and stores it. */
template <typename T>
__global__ void reduce_finish(int op, uint64_t nout, uint64_t count, int splits,
                              const typename acc_of<T>::A *part, T *out) {
    typedef typename acc_of<T>::A A;
    DT_CU_FOR(o, nout) {
        const A *pp = part + o * splits;
        A acc = pp[0];
#define FINISH_BODY(cb) for (int s = 1; s < splits; s++) acc = cb(acc, pp[s]);
        OP_SWITCH(op, FINISH_BODY)
#undef FINISH_BODY
        out[o] = store<T>(fin(op, acc, count));
    }
}

template <typename T>
static dt_status reduce_launch(dt_cuda_rank *r, int op, const rplan &p, const T *x, T *out) {
    typedef typename acc_of<T>::A A;
    const char *fn = "dt_cuda_reduce";
    const uint64_t target = 512; /* blocks that keep every SM busy a few times over */
    unsigned gx;
    uint64_t splits = 1;
    if (p.inner_reduced && p.count <= 1024) { /* a warp per output */
        gx = dt_cuda_blocks(p.nout, DT_CU_THREADS / 32);
    } else if (p.inner_reduced) { /* a block per output */
        gx = dt_cuda_blocks(p.nout, 1);
        if (p.nout < target && p.count >= 65536) {
            splits = target / p.nout;
            if (splits > p.count / 16384) splits = p.count / 16384;
        }
    } else {
        gx = dt_cuda_blocks(p.nout, 32);
        if (gx < target && p.count >= 2048) {
            splits = target / gx;
            if (splits > p.count / 256) splits = p.count / 256;
        }
    }
    if (splits < 1) splits = 1;
    A *part = NULL;
    if (splits > 1 && !(part = (A *)dt_cuda_alloc(p.nout * splits * sizeof(A))))
        return DT_ERR_NOMEM;
    dim3 grid(gx, (unsigned)splits);
    if (p.inner_reduced && p.count <= 1024)
        reduce_rows<T, 32><<<grid, DT_CU_THREADS, 0, r->compute>>>(op, p, x, out, part);
    else if (p.inner_reduced)
        reduce_rows<T, DT_CU_THREADS><<<grid, DT_CU_THREADS, 0, r->compute>>>(op, p, x, out, part);
    else
        reduce_cols<T><<<grid, dim3(32, 8), 0, r->compute>>>(op, p, x, out, part);
    dt_status st = DT_CUDA_LAUNCH_CHECK(fn);
    if (st == DT_OK && part) {
        reduce_finish<T><<<dt_cuda_blocks(p.nout, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            op, p.nout, p.count, (int)splits, part, out);
        st = DT_CUDA_LAUNCH_CHECK(fn);
    }
    dt_cuda_free(part); /* stream-ordered: the kernels above still see it */
    return st;
}

dt_status dt_cuda_reduce(dt_reduce_op op, unsigned mask, const dt_local *x, dt_local *out) {
    if ((unsigned)op >= DT_REDUCE_COUNT)
        return dt_error(DT_ERR_ARG, "dt_cuda_reduce: unknown reduce op %d", (int)op);
    if (x->ndim < 32 && (mask >> x->ndim) != 0)
        return dt_error(DT_ERR_ARG, "dt_cuda_reduce: mask 0x%x names dims beyond ndim %d", mask,
                        x->ndim);
    if (dt_dtype_size(x->dtype) == 0)
        return dt_error(DT_ERR_DTYPE, "dt_cuda_reduce: unknown dtype %d", (int)x->dtype);
    DT_CU_RANK(r, "dt_cuda_reduce");
    rplan p;
    plan_reduce(mask, x, &p);
    if (p.nout == 0) return DT_OK;
    return dt_cu_visit<true>(x->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        return reduce_launch<T>(r, (int)op, p, (const T *)x->data, (T *)out->data);
    });
}

/* ---- arg max / min ---------------------------------------------------------------------- */

/* Whether candidate (v, i) beats (b, bi) among candidates from any order: a NaN wins (the
 * first one), then the larger (smaller) value, then the lower index: what the CPU's forward
 * scan picks. bi < 0 marks no candidate yet. */
template <typename C>
__device__ __forceinline__ bool arg_better(int is_max, C v, int64_t i, C b, int64_t bi) {
    if (i < 0) return false;
    if (bi < 0) return true;
    bool vn = v != v, bn = b != b;
    if (vn || bn) return vn && (!bn || i < bi);
    if (is_max ? v > b : v < b) return true;
    return v == b && i < bi;
}

/* inner == 1: a warp per row of n contiguous elements. */
template <typename T>
__global__ void arg_rows(int is_max, int64_t rows, int64_t n, int64_t offset, const T *x,
                         int64_t *idx, T *val) {
    typedef typename dt_cu_t<T>::C C;
    int lane = threadIdx.x & 31, per = blockDim.x / 32;
    for (int64_t r = (int64_t)blockIdx.x * per + threadIdx.x / 32; r < rows;
         r += (int64_t)gridDim.x * per) {
        const T *row = x + r * n;
        C best = 0;
        int64_t bi = -1;
        for (int64_t j = lane; j < n; j += 32) {
            C v = dt_cu_t<T>::ld(row[j]);
            if (arg_better(is_max, v, j, best, bi)) {
                best = v;
                bi = j;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            C v = __shfl_xor_sync(0xffffffffu, best, o);
            int64_t i = __shfl_xor_sync(0xffffffffu, bi, o);
            if (arg_better(is_max, v, i, best, bi)) {
                best = v;
                bi = i;
            }
        }
        if (lane == 0) {
            idx[r] = bi + offset;
            if (val) val[r] = row[bi];
        }
    }
}

/* inner > 1: a thread per (outer, inner) column scanning n, coalesced across columns. */
template <typename T>
__global__ void arg_cols(int is_max, int64_t outer, int64_t n, int64_t inner, int64_t offset,
                         const T *x, int64_t *idx, T *val) {
    typedef typename dt_cu_t<T>::C C;
    DT_CU_FOR(c, (uint64_t)(outer * inner)) {
        int64_t o = (int64_t)c / inner, j = (int64_t)c % inner;
        const T *base = x + o * n * inner + j;
        C best = dt_cu_t<T>::ld(base[0]);
        int64_t bi = 0;
        for (int64_t t = 1; t < n; t++) {
            C v = dt_cu_t<T>::ld(base[t * inner]);
            if ((is_max ? v > best : v < best) || (v != v && best == best)) {
                best = v;
                bi = t;
            }
        }
        idx[c] = bi + offset;
        if (val) val[c] = base[bi * inner];
    }
}

__global__ void fill_i64(int64_t *p, uint64_t n, int64_t v) {
    DT_CU_FOR(i, n) p[i] = v;
}

dt_status dt_cuda_arg_reduce(int is_max, int dim, int64_t offset, const dt_local *x,
                             dt_local *out, dt_local *values) {
    const char *fn = "dt_cuda_arg_reduce";
    if (dim < 0 || dim >= x->ndim)
        return dt_error(DT_ERR_ARG, "dt_cuda_arg_reduce: dim %d out of range for %d dims", dim,
                        x->ndim);
    if (dt_dtype_size(x->dtype) == 0)
        return dt_error(DT_ERR_DTYPE, "dt_cuda_arg_reduce: unknown dtype %d", (int)x->dtype);
    DT_CU_RANK(r, fn);
    int64_t outer = 1, inner = 1, n = x->shape[dim];
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    int64_t *idx = (int64_t *)out->data, total = outer * inner;
    void *val = values ? values->data : NULL;
    if (total == 0) return DT_OK;
    if (n == 0) {
        /* An empty shard along dim: the op's identity at index offset (the shard's end), so
         * combining with other shards never picks it. */
        fill_i64<<<dt_cuda_blocks((size_t)total, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            idx, (uint64_t)total, offset);
        DT_CHECK(DT_CUDA_LAUNCH_CHECK(fn));
        return val ? dt_cuda_fill_identity(x->dtype, is_max ? DT_REDUCE_MAX : DT_REDUCE_MIN, val,
                                           (size_t)total)
                   : DT_OK;
    }
    return dt_cu_visit<true>(x->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        if (inner == 1)
            arg_rows<T><<<dt_cuda_blocks((size_t)outer, DT_CU_THREADS / 32), DT_CU_THREADS, 0,
                          r->compute>>>(is_max, outer, n, offset, (const T *)x->data, idx,
                                        (T *)val);
        else
            arg_cols<T><<<dt_cuda_blocks((size_t)total, DT_CU_THREADS), DT_CU_THREADS, 0,
                          r->compute>>>(is_max, outer, n, inner, offset, (const T *)x->data,
                                        idx, (T *)val);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
