/* CPU selection kernels: gather along a dim (masked outside the block's rows), one_hot over a
 * class range, and topk indices. gather is data movement by element size; topk compares in
 * each dtype's own arithmetic (integers exactly), NaN above every number. gather's out
 * elements are shared out by the intra-op pool (each written once). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/kernels.h"
#include "ops/kernel_args.h"

static size_t numel(const dt_local *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static dt_status index_dtype(const char *fn, const dt_local *ix) {
    if (ix->dtype != DT_I32 && ix->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: index must be i32 or i64, not %s", fn,
                        dt_dtype_name(ix->dtype));
    return DT_OK;
}

static inline int64_t index_at(const dt_local *ix, size_t i) {
    return ix->dtype == DT_I32 ? ((const int32_t *)ix->data)[i] : ((const int64_t *)ix->data)[i];
}

#define PIECE 8192 /* elements a pool chunk moves at least: smaller stays serial */

typedef struct {
    const dt_local *x, *index, *out;
    int dim;
    int64_t dim_offset, dim_size;
    int64_t xs[DT_MAX_NDIM];
    int64_t base0; /* x's offset from the shifts on every dim but dim */
    _Atomic uint64_t bad; /* the smallest out element whose index is out of range */
} gather_job;

/* Out elements [begin, end): an odometer over index's shape from begin. */
static void gather_range(void *arg, int64_t begin, int64_t end) {
    gather_job *j = arg;
    const dt_local *x = j->x, *index = j->index;
    const int nd = x->ndim, dim = j->dim;
    size_t es = dt_dtype_size(x->dtype);
    int64_t idx[DT_MAX_NDIM], base = j->base0, rem = begin;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % index->shape[d];
        rem /= index->shape[d];
        if (d != dim) base += idx[d] * j->xs[d];
    }
    for (size_t i = (size_t)begin; i < (size_t)end; i++) {
        int64_t v = index_at(index, i), r = v - j->dim_offset;
        if (v < 0 || v >= j->dim_size) {
            uint64_t cur = atomic_load(&j->bad);
            while (i < cur && !atomic_compare_exchange_weak(&j->bad, &cur, i)) {
            }
            return;
        }
        char *dst = (char *)j->out->data + i * es;
        if (r >= 0 && r < x->shape[dim])
            memcpy(dst, (const char *)x->data + (size_t)(base + r * j->xs[dim]) * es, es);
        else
            memset(dst, 0, es);
        for (int d = nd - 1; d >= 0; d--) {
            if (d != dim) base += j->xs[d];
            if (++idx[d] < index->shape[d]) break;
            if (d != dim) base -= j->xs[d] * index->shape[d];
            idx[d] = 0;
        }
    }
}

dt_status dt_cpu_gather(const dt_local *x, int dim, const int64_t *shift, int64_t dim_offset,
                        int64_t dim_size, const dt_local *index, dt_local *out) {
    const char *fn = "dt_cpu_gather";
    DT_CHECK(index_dtype(fn, index));
    size_t es = dt_dtype_size(x->dtype), n = numel(index);
    if (es == 0) return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)x->dtype);
    if (dim < 0 || dim >= x->ndim || index->ndim != x->ndim)
        return dt_error(DT_ERR_SHAPE, "%s: dim %d, index %d-D, x %d-D", fn, dim, index->ndim,
                        x->ndim);
    int nd = x->ndim;
    gather_job j = {.x = x, .index = index, .out = out, .dim = dim, .dim_offset = dim_offset,
                    .dim_size = dim_size};
    atomic_init(&j.bad, UINT64_MAX);
    for (int d = nd - 1; d >= 0; d--) j.xs[d] = d == nd - 1 ? 1 : j.xs[d + 1] * x->shape[d + 1];
    for (int d = 0; d < nd; d++)
        if (d != dim) j.base0 += shift[d] * j.xs[d];
    dt_parallel_for((int64_t)n, PIECE, gather_range, &j);
    uint64_t bad = atomic_load(&j.bad);
    if (bad != UINT64_MAX) {
        int64_t idx[DT_MAX_NDIM], rem = (int64_t)bad;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = rem % index->shape[d];
            rem /= index->shape[d];
        }
        char at[128];
        size_t o = 0;
        for (int d = 0; d < nd; d++)
            o += (size_t)snprintf(at + o, sizeof at - o, d ? ",%lld" : "%lld", (long long)idx[d]);
        return dt_error(DT_ERR_ARG, "gather: index[%s] = %lld is outside [0, %lld) along dim %d",
                        at, (long long)index_at(index, (size_t)bad), (long long)dim_size, dim);
    }
    return DT_OK;
}

/* "[3, 1]": the global position of element i of a block that starts at offset. */
static void global_at(const dt_local *x, const int64_t *offset, size_t i, char *buf, size_t cap) {
    int64_t idx[DT_MAX_NDIM];
    for (int d = x->ndim - 1; d >= 0; d--) {
        int64_t s = x->shape[d] ? x->shape[d] : 1;
        idx[d] = (int64_t)(i % (size_t)s) + offset[d];
        i /= (size_t)s;
    }
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < x->ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

dt_status dt_cpu_one_hot(const dt_local *index, const int64_t *index_offset, int64_t num_classes,
                         int64_t class_offset, dt_local *out) {
    DT_CHECK(index_dtype("dt_cpu_one_hot", index));
    int64_t C = out->shape[out->ndim - 1];
    size_t n = numel(index);
    int64_t *o = out->data;
    for (size_t i = 0; i < n; i++) {
        int64_t v = index_at(index, i);
        if (v < 0 || v >= num_classes) {
            char at[DT_MAX_NDIM * 22 + 4];
            global_at(index, index_offset, i, at, sizeof at);
            return dt_error(DT_ERR_ARG, "one_hot: index element at %s (global) = %lld is "
                            "outside [0, %lld)", at, (long long)v, (long long)num_classes);
        }
        for (int64_t c = 0; c < C; c++) o[i * (size_t)C + (size_t)c] = v == class_offset + c;
    }
    return DT_OK;
}

/* 1 when x[a] sorts above x[b]: NaN above every number, equal values neither. */
#define ABOVE(T, LD)                                                                               \
    static int above_##T(const void *p, size_t a, size_t b) {                                      \
        T u = LD(((const T *)p)[a]), v = LD(((const T *)p)[b]);                                    \
        return u != u ? v == v : u > v;                                                            \
    }
#define ID(x) (x)
typedef int32_t i32;
typedef int64_t i64;
typedef double f64;
typedef float f32;
static inline float bf(uint16_t h) { return dt_bf16_to_f32(h); }
static inline float hf(uint16_t h) { return dt_f16_to_f32(h); }
ABOVE(f32, ID)
ABOVE(f64, ID)
ABOVE(i32, ID)
ABOVE(i64, ID)
static int above_bf16(const void *p, size_t a, size_t b) {
    float u = bf(((const uint16_t *)p)[a]), v = bf(((const uint16_t *)p)[b]);
    return u != u ? v == v : u > v;
}
static int above_f16(const void *p, size_t a, size_t b) {
    float u = hf(((const uint16_t *)p)[a]), v = hf(((const uint16_t *)p)[b]);
    return u != u ? v == v : u > v;
}

dt_status dt_cpu_topk(const dt_local *x, int64_t k, int dim, int smallest, dt_local *out) {
    const char *fn = "dt_cpu_topk";
    int (*above)(const void *, size_t, size_t);
    switch (x->dtype) {
    case DT_F32: above = above_f32; break;
    case DT_F64: above = above_f64; break;
    case DT_BF16: above = above_bf16; break;
    case DT_F16: above = above_f16; break;
    case DT_I32: above = above_i32; break;
    case DT_I64: above = above_i64; break;
    default: return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)x->dtype);
    }
    int64_t L, inner, outer;
    DT_CHECK(dt_topk_check(fn, x, k, dim, &outer, &L, &inner));
    int64_t *o = out->data;
    for (int64_t b = 0; b < outer; b++)
        for (int64_t j = 0; j < inner; j++) {
            size_t xb = (size_t)(b * L * inner + j), ob = (size_t)(b * k * inner + j);
            /* insertion into the sorted best k so far; an equal value never passes an earlier
             * one, so ties keep the lower index */
            int64_t have = 0;
            for (int64_t t = 0; t < L && k > 0; t++) {
                size_t xt = xb + (size_t)(t * inner);
                int64_t p = have;
                while (p > 0) {
                    size_t xp = xb + (size_t)(o[ob + (size_t)((p - 1) * inner)] * inner);
                    if (!(smallest ? above(x->data, xp, xt) : above(x->data, xt, xp))) break;
                    p--;
                }
                if (p >= k) continue;
                for (int64_t q = (have < k ? have : k - 1); q > p; q--)
                    o[ob + (size_t)(q * inner)] = o[ob + (size_t)((q - 1) * inner)];
                o[ob + (size_t)(p * inner)] = t;
                if (have < k) have++;
            }
        }
    return DT_OK;
}
