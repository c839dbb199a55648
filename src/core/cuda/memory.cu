/* Device forms of core/box.h and core/reduce.h: N-D box copies (memcpy forms where the box is
 * one or two contiguous runs, a kernel otherwise) and the n-way reductions behind all_reduce
 * and Partial, with core/reduce.c's arithmetic: same accumulator types, same source order. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "core/check.h"
#include "core/cuda/cuda_rt.h"
#include "core/cuda/memory.h"
#include "core/half.h"
extern "C" {
#include "core/reduce.h"
}

#define THREADS 256
#define MAX_SRCS 32 /* source pointers per launch, passed by value */

#define FOR_EACH(i, n)                                                                             \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);                \
         i += (size_t)gridDim.x * blockDim.x)

#define RANK(r, fn)                                                                                \
    dt_cuda_rank *r = dt_cuda_current();                                                           \
    if (!r) return dt_error(DT_ERR_DEVICE, "%s: no CUDA device bound to this thread", fn)

/* ---- box copy --------------------------------------------------------------------------- */

/* The box in units of U bytes: dims (last fastest) with dst and src strides in units. */
typedef struct box_dims {
    int n;
    int64_t size[DT_MAX_NDIM + 1], ds[DT_MAX_NDIM + 1], ss[DT_MAX_NDIM + 1];
} box_dims;

template <typename U>
__global__ void box_kernel(box_dims b, U *dst, const U *src, size_t total) {
    FOR_EACH(i, total) {
        uint64_t j = i;
        int64_t od = 0, os = 0;
        for (int k = b.n - 1; k > 0; k--) {
            uint64_t s = (uint64_t)b.size[k], x = j % s;
            j /= s;
            od += (int64_t)x * b.ds[k];
            os += (int64_t)x * b.ss[k];
        }
        dst[od + (int64_t)j * b.ds[0]] = src[os + (int64_t)j * b.ss[0]];
    }
}

dt_status dt_cuda_box_copy(void *dst, const int64_t *dst_shape, const int64_t *dst_off,
                           const void *src, const int64_t *src_shape, const int64_t *src_off,
                           const int64_t *box, int ndim, size_t elem_size) {
    const char *fn = "dt_cuda_box_copy";
    if (ndim < 0 || ndim > DT_MAX_NDIM || elem_size == 0)
        return dt_error(DT_ERR_ARG, "%s: ndim %d, element size %zu", fn, ndim, elem_size);
    RANK(r, fn);
    for (int d = 0; d < ndim; d++)
        if (box[d] == 0) return DT_OK;
    /* Byte strides of both arrays, plus a last dim of elem_size bytes at stride 1, so the
     * innermost collapsed dim is always one contiguous run. */
    int64_t es = (int64_t)elem_size, dstr = es, sstr = es, doff = 0, soff = 0;
    int64_t size[DT_MAX_NDIM + 1], ds[DT_MAX_NDIM + 1], ss[DT_MAX_NDIM + 1];
    for (int d = ndim - 1; d >= 0; d--) {
        size[d] = box[d];
        ds[d] = dstr;
        ss[d] = sstr;
        doff += (dst_off ? dst_off[d] : 0) * dstr;
        soff += (src_off ? src_off[d] : 0) * sstr;
        dstr *= dst_shape[d];
        sstr *= src_shape[d];
    }
    size[ndim] = es;
    ds[ndim] = ss[ndim] = 1;
    /* Drop size-1 dims; merge a dim into the next inner one when both arrays step evenly. */
    box_dims b;
    b.n = 0;
    for (int d = ndim; d >= 0; d--) {
        if (size[d] == 1 && d != ndim) continue;
        int p = b.n - 1;
        if (p >= 0 && ds[d] == b.ds[p] * b.size[p] && ss[d] == b.ss[p] * b.size[p]) {
            b.size[p] *= size[d];
        } else {
            b.size[b.n] = size[d];
            b.ds[b.n] = ds[d];
            b.ss[b.n] = ss[d];
            b.n++;
        }
    }
    for (int i = 0; i < b.n / 2; i++) { /* built inner to outer: put the last dim last */
        int j = b.n - 1 - i;
        int64_t t0 = b.size[i], t1 = b.ds[i], t2 = b.ss[i];
        b.size[i] = b.size[j], b.ds[i] = b.ds[j], b.ss[i] = b.ss[j];
        b.size[j] = t0, b.ds[j] = t1, b.ss[j] = t2;
    }
    char *d0 = (char *)dst + doff;
    const char *s0 = (const char *)src + soff;
    int64_t w = b.size[b.n - 1]; /* bytes of one contiguous run */
    /* Copy-engine forms take cudaMemcpyDefault, so a peer device's pointers work too. */
    if (b.n == 1)
        return dt_cuda_status(cudaMemcpyAsync(d0, s0, (size_t)w, cudaMemcpyDefault, r->compute),
                              fn);
    if (b.n == 2 && b.ds[0] < INT32_MAX && b.ss[0] < INT32_MAX)
        return dt_cuda_status(cudaMemcpy2DAsync(d0, (size_t)b.ds[0], s0, (size_t)b.ss[0],
                                                (size_t)w, (size_t)b.size[0], cudaMemcpyDefault,
                                                r->compute),
                              fn);
    /* The widest unit dividing the run, every stride and both base addresses. */
    uint64_t all = (uint64_t)w | (uintptr_t)d0 | (uintptr_t)s0;
    for (int i = 0; i < b.n - 1; i++) all |= (uint64_t)b.ds[i] | (uint64_t)b.ss[i];
    int64_t u = (all & 7) == 0 ? 8 : (all & 3) == 0 ? 4 : (all & 1) == 0 ? 2 : 1;
    size_t total = 1;
    for (int i = 0; i < b.n - 1; i++) {
        b.ds[i] /= u;
        b.ss[i] /= u;
        total *= (size_t)b.size[i];
    }
    b.size[b.n - 1] = w / u;
    total *= (size_t)(w / u);
    unsigned grid = dt_cuda_blocks(total, THREADS);
#define BOX_CASE(N, U)                                                                             \
    case N:                                                                                        \
        box_kernel<<<grid, THREADS, 0, r->compute>>>(b, (U *)d0, (const U *)s0, total);            \
        break;
    switch (u) {
        BOX_CASE(8, uint64_t)
        BOX_CASE(4, uint32_t)
        BOX_CASE(2, uint16_t)
        BOX_CASE(1, uint8_t)
    default: break;
    }
#undef BOX_CASE
    return DT_CUDA_LAUNCH_CHECK(fn);
}

/* ---- n-way reduction -------------------------------------------------------------------- */

/* Storage type T and accumulator A of each dtype, as core/reduce.c declares them. */
template <int DT> struct rtype;
#define RTYPE(DT, TT, AA, LD, ST)                                                                  \
    template <> struct rtype<DT> {                                                                 \
        typedef TT T;                                                                              \
        typedef AA A;                                                                              \
        static __device__ __forceinline__ AA ld(TT x) { return LD(x); }                            \
        static __device__ __forceinline__ TT st(AA x) { return ST(x); }                            \
    };
#define ID(x) (x)
RTYPE(DT_F32, float, float, ID, ID)
RTYPE(DT_F64, double, double, ID, ID)
RTYPE(DT_BF16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16)
RTYPE(DT_F16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16)
RTYPE(DT_I32, int32_t, int32_t, ID, ID)
RTYPE(DT_I64, int64_t, int64_t, ID, ID)

/* Integer sums and products wrap (core/reduce.c relies on the same two's-complement wrap). */
template <typename A> __device__ __forceinline__ A add(A a, A v) { return a + v; }
template <typename A> __device__ __forceinline__ A mul(A a, A v) { return a * v; }
template <> __device__ __forceinline__ int32_t add(int32_t a, int32_t v) {
    return (int32_t)((uint32_t)a + (uint32_t)v);
}
template <> __device__ __forceinline__ int64_t add(int64_t a, int64_t v) {
    return (int64_t)((uint64_t)a + (uint64_t)v);
}
template <> __device__ __forceinline__ int32_t mul(int32_t a, int32_t v) {
    return (int32_t)((uint32_t)a * (uint32_t)v);
}
template <> __device__ __forceinline__ int64_t mul(int64_t a, int64_t v) {
    return (int64_t)((uint64_t)a * (uint64_t)v);
}

typedef struct src_chunk {
    const void *p[MAX_SRCS];
    int n;
} src_chunk;

/* One chunk of sources folded into the running accumulator acc (NULL: start from source 0).
 * The last chunk divides for avg and stores dst; earlier ones store acc. dst may alias a
 * source: a thread reads all of element i before it writes it. */
template <int DT>
__global__ void reduce_n_kernel(int op, src_chunk c, typename rtype<DT>::A *acc, int first,
                                int last, int n_total, typename rtype<DT>::T *dst, size_t count) {
    typedef rtype<DT> R;
    typedef typename R::T T;
    typedef typename R::A A;
    FOR_EACH(i, count) {
        A a = first ? R::ld(((const T *)c.p[0])[i]) : acc[i];
        for (int k = first ? 1 : 0; k < c.n; k++) {
            A v = R::ld(((const T *)c.p[k])[i]);
            switch (op) {
            case DT_REDUCE_PROD: a = mul(a, v); break;
            case DT_REDUCE_MAX: a = (v > a || v != v) ? v : a; break;
            case DT_REDUCE_MIN: a = (v < a || v != v) ? v : a; break;
            default: a = add(a, v); break;
            }
        }
        if (!last) {
            acc[i] = a;
        } else {
            if (op == DT_REDUCE_AVG) a /= (A)n_total;
            dst[i] = R::st(a);
        }
    }
}

template <int DT>
static dt_status reduce_n_run(dt_cuda_rank *r, int op, void *dst, const void *const *srcs, int n,
                              size_t count) {
    typedef typename rtype<DT>::A A;
    /* Past MAX_SRCS sources the running result lives in a scratch buffer of A: neither
     * rounded to 16 bits between launches nor written over a source still to be read. */
    A *acc = NULL;
    if (n > MAX_SRCS && !(acc = (A *)dt_cuda_alloc(count * sizeof(A)))) return DT_ERR_NOMEM;
    dt_status st = DT_OK;
    for (int k0 = 0; k0 < n && st == DT_OK; k0 += MAX_SRCS) {
        src_chunk c;
        c.n = n - k0 < MAX_SRCS ? n - k0 : MAX_SRCS;
        for (int k = 0; k < c.n; k++) c.p[k] = srcs[k0 + k];
        reduce_n_kernel<DT><<<dt_cuda_blocks(count, THREADS), THREADS, 0, r->compute>>>(
            op, c, acc, k0 == 0, k0 + c.n == n, n, (typename rtype<DT>::T *)dst, count);
        st = DT_CUDA_LAUNCH_CHECK("dt_cuda_reduce_n");
    }
    dt_cuda_free(acc); /* stream-ordered: the launches above still see it */
    return st;
}

dt_status dt_cuda_reduce_n(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs,
                           int n, size_t count) {
    const char *fn = "dt_cuda_reduce_n";
    if ((unsigned)op >= DT_REDUCE_COUNT || n < 1)
        return dt_error(DT_ERR_ARG, "%s: op %d with %d sources", fn, (int)op, n);
    RANK(r, fn);
    if (count == 0) return DT_OK;
    switch (dtype) {
    case DT_F32: return reduce_n_run<DT_F32>(r, op, dst, srcs, n, count);
    case DT_F64: return reduce_n_run<DT_F64>(r, op, dst, srcs, n, count);
    case DT_BF16: return reduce_n_run<DT_BF16>(r, op, dst, srcs, n, count);
    case DT_F16: return reduce_n_run<DT_F16>(r, op, dst, srcs, n, count);
    case DT_I32: return reduce_n_run<DT_I32>(r, op, dst, srcs, n, count);
    case DT_I64: return reduce_n_run<DT_I64>(r, op, dst, srcs, n, count);
    default: return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    }
}

/* ---- identity fill and scale ------------------------------------------------------------ */

template <typename U> __global__ void fill_kernel(U *dst, U v, size_t count) {
    FOR_EACH(i, count) dst[i] = v;
}

dt_status dt_cuda_fill_identity(dt_dtype dtype, dt_reduce_op op, void *dst, size_t count) {
    const char *fn = "dt_cuda_fill_identity";
    size_t es = dt_dtype_size(dtype);
    if (es == 0) return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    if ((unsigned)op >= DT_REDUCE_COUNT)
        return dt_error(DT_ERR_ARG, "%s: unknown reduce op %d", fn, (int)op);
    RANK(r, fn);
    if (count == 0) return DT_OK;
    union { uint16_t h; uint32_t w; uint64_t d; } v; /* the host's own identity element */
    dt_fill_identity(dtype, op, &v, 1);
    unsigned grid = dt_cuda_blocks(count, THREADS);
    switch (es) {
    case 2: fill_kernel<<<grid, THREADS, 0, r->compute>>>((uint16_t *)dst, v.h, count); break;
    case 4: fill_kernel<<<grid, THREADS, 0, r->compute>>>((uint32_t *)dst, v.w, count); break;
    default: fill_kernel<<<grid, THREADS, 0, r->compute>>>((uint64_t *)dst, v.d, count); break;
    }
    return DT_CUDA_LAUNCH_CHECK(fn);
}

/* buf[i] * mul / div left to right, as dt_scale: f32 math for bf16/f16, int64 for integers. */
template <int DT>
__global__ void scale_kernel(typename rtype<DT>::T *buf, size_t count, int64_t mul, int64_t div) {
    typedef rtype<DT> R;
    typedef typename R::A A;
    FOR_EACH(i, count) {
        if constexpr (DT == DT_I32 || DT == DT_I64)
            buf[i] = (typename R::T)((int64_t)((uint64_t)buf[i] * (uint64_t)mul) / div);
        else
            buf[i] = R::st(R::ld(buf[i]) * (A)mul / (A)div);
    }
}

dt_status dt_cuda_scale(dt_dtype dtype, void *buf, size_t count, int64_t mul, int64_t div) {
    const char *fn = "dt_cuda_scale";
    if ((dtype == DT_I32 || dtype == DT_I64) && div == 0)
        return dt_error(DT_ERR_ARG, "%s: integer division by zero", fn);
    RANK(r, fn);
    if (count == 0) return DT_OK;
    unsigned grid = dt_cuda_blocks(count, THREADS);
    switch (dtype) {
#define SCALE_CASE(DT)                                                                             \
    case DT:                                                                                       \
        scale_kernel<DT><<<grid, THREADS, 0, r->compute>>>((rtype<DT>::T *)buf, count, mul, div);  \
        break;
        SCALE_CASE(DT_F32)
        SCALE_CASE(DT_F64)
        SCALE_CASE(DT_BF16)
        SCALE_CASE(DT_F16)
        SCALE_CASE(DT_I32)
        SCALE_CASE(DT_I64)
#undef SCALE_CASE
    default: return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    }
    return DT_CUDA_LAUNCH_CHECK(fn);
}

/* buf[i] = |buf[i]| ** e, as dt_pow_abs: f64 math for f64, f32 for the others. */
template <int DT> __global__ void pow_abs_kernel(typename rtype<DT>::T *buf, size_t count, double e) {
    typedef rtype<DT> R;
    FOR_EACH(i, count) {
        if constexpr (DT == DT_F64)
            buf[i] = pow(fabs(buf[i]), e);
        else
            buf[i] = R::st(powf(fabsf((float)R::ld(buf[i])), (float)e));
    }
}

dt_status dt_cuda_pow_abs(dt_dtype dtype, void *buf, size_t count, double e) {
    const char *fn = "dt_cuda_pow_abs";
    if (dtype != DT_F32 && dtype != DT_F64 && dtype != DT_BF16 && dtype != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: %s is not a float dtype", fn, dt_dtype_name(dtype));
    RANK(r, fn);
    if (count == 0) return DT_OK;
    unsigned grid = dt_cuda_blocks(count, THREADS);
    switch (dtype) {
#define POW_CASE(DT)                                                                               \
    case DT:                                                                                       \
        pow_abs_kernel<DT><<<grid, THREADS, 0, r->compute>>>((rtype<DT>::T *)buf, count, e);       \
        break;
        POW_CASE(DT_F32)
        POW_CASE(DT_F64)
        POW_CASE(DT_BF16)
        POW_CASE(DT_F16)
#undef POW_CASE
    default: break;
    }
    return DT_CUDA_LAUNCH_CHECK(fn);
}
