/* CPU scatter_add: the adjoint of gather. Contributions are added in src's row-major order, so
 * each out element (fed by one column of src along dim) sums its terms in increasing order
 * along dim, as the CUDA kernel does. The intra-op pool shares out disjoint sets of out
 * elements (never src rows that may meet in one out element). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/kernels.h"
#include "ops/kernel_args.h"

static inline double load(dt_dtype t, const void *p, size_t i) {
    switch (t) {
    case DT_F32: return ((const float *)p)[i];
    case DT_F64: return ((const double *)p)[i];
    case DT_BF16: return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return dt_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

static inline int64_t index_at(const dt_local *ix, size_t i) {
    return ix->dtype == DT_I32 ? ((const int32_t *)ix->data)[i] : ((const int64_t *)ix->data)[i];
}

/* out[o] += v in the dtype's compute type (f32 for all but f64), rounded once to storage. */
static inline void add_at(dt_dtype t, void *p, size_t o, double v) {
    switch (t) {
    case DT_F32: ((float *)p)[o] += (float)v; break;
    case DT_F64: ((double *)p)[o] += v; break;
    case DT_BF16: {
        uint16_t *h = p;
        h[o] = dt_f32_to_bf16(dt_bf16_to_f32(h[o]) + (float)v);
        break;
    }
    default: {
        uint16_t *h = p;
        h[o] = dt_f32_to_f16(dt_f16_to_f32(h[o]) + (float)v);
    }
    }
}

/* out[o + k] += src[e + k] for k < len, each as add_at. */
static void add_row(dt_dtype t, void *out, size_t o, const void *src, size_t e, size_t len) {
    if (t == DT_F32) {
        float *y = (float *)out + o;
        const float *x = (const float *)src + e;
        for (size_t k = 0; k < len; k++) y[k] += x[k];
    } else if (t == DT_F64) {
        double *y = (double *)out + o;
        const double *x = (const double *)src + e;
        for (size_t k = 0; k < len; k++) y[k] += x[k];
    } else {
        for (size_t k = 0; k < len; k++) add_at(t, out, o + k, load(t, src, e + k));
    }
}

/* The pool's units: src is (outer, D, inner) around dim; a unit is one outer index and a piece
 * of the inner elements, over every position along dim in increasing order. Units write
 * disjoint out elements (dims other than dim map one to one), and each out element still sums
 * its terms in increasing order along dim: the bits of a serial run, with any thread count. */
typedef struct {
    const dt_local *src, *index, *out;
    const int64_t *shift;
    int64_t dim_offset, dim_size;
    int dim, nd, rows; /* rows: index broadcast over inner, nothing shifts there */
    int64_t os[DT_MAX_NDIM], is[DT_MAX_NDIM];
    int64_t D, inner, piece, pieces;
    _Atomic uint64_t bad; /* the smallest src element with an index out of range */
} scatter_job;

#define PIECE       8192 /* elements a pool chunk adds at least: smaller stays serial */
#define INNER_PIECE 4096 /* inner elements per unit at most */

static void note_bad(scatter_job *j, uint64_t e) {
    uint64_t cur = atomic_load(&j->bad);
    while (e < cur && !atomic_compare_exchange_weak(&j->bad, &cur, e)) {
    }
}

static void scatter_unit(scatter_job *j, int64_t u) {
    const dt_local *src = j->src, *out = j->out;
    const int nd = j->nd, dim = j->dim;
    int64_t o = u / j->pieces, k0 = u % j->pieces * j->piece;
    int64_t k1 = k0 + j->piece < j->inner ? k0 + j->piece : j->inner;
    int64_t i[DT_MAX_NDIM] = {0}, base_out = 0, base_ix = 0;
    int inside_outer = 1;
    for (int d = dim - 1; d >= 0; d--) { /* the outer coordinates of o */
        i[d] = o % src->shape[d];
        o /= src->shape[d];
        int64_t jd = i[d] + j->shift[d];
        inside_outer &= jd >= 0 && jd < out->shape[d];
        base_out += jd * j->os[d];
        base_ix += i[d] * j->is[d];
    }
    int64_t o_flat = u / j->pieces;
    for (int64_t t = 0; t < j->D; t++) {
        uint64_t e0 = (uint64_t)((o_flat * j->D + t) * j->inner);
        int64_t ix_t = base_ix + t * j->is[dim];
        if (j->rows) {
            int64_t v = index_at(j->index, (size_t)ix_t);
            if (v < 0 || v >= j->dim_size) {
                note_bad(j, e0 + (uint64_t)k0);
                return;
            }
            int64_t r = v - j->dim_offset;
            if (inside_outer && r >= 0 && r < out->shape[dim])
                add_row(src->dtype, out->data, (size_t)(base_out + r * j->os[dim] + k0),
                        src->data, (size_t)(e0 + (uint64_t)k0), (size_t)(k1 - k0));
            continue;
        }
        /* element by element: an odometer over the inner dims from k0 */
        int64_t rem = k0;
        for (int d = nd - 1; d > dim; d--) {
            i[d] = rem % src->shape[d];
            rem /= src->shape[d];
        }
        for (int64_t k = k0; k < k1; k++) {
            int64_t ie = ix_t, off = 0;
            int inside = inside_outer;
            for (int d = dim + 1; d < nd; d++) {
                ie += i[d] * j->is[d];
                int64_t jd = i[d] + j->shift[d];
                inside &= jd >= 0 && jd < out->shape[d];
                off += jd * j->os[d];
            }
            int64_t v = index_at(j->index, (size_t)ie);
            if (v < 0 || v >= j->dim_size) {
                note_bad(j, e0 + (uint64_t)k);
                return;
            }
            int64_t r = v - j->dim_offset;
            if (inside && r >= 0 && r < out->shape[dim]) {
                size_t at = (size_t)(base_out + off + r * j->os[dim]);
                add_at(src->dtype, out->data, at, load(src->dtype, src->data, e0 + (uint64_t)k));
            }
            for (int d = nd - 1; d > dim; d--) {
                if (++i[d] < src->shape[d]) break;
                i[d] = 0;
            }
        }
    }
}

static void scatter_range(void *arg, int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; u++) scatter_unit(arg, u);
}

typedef struct {
    char *p;
} zero_job;

static void zero_range(void *arg, int64_t begin, int64_t end) {
    memset(((zero_job *)arg)->p + begin, 0, (size_t)(end - begin));
}

dt_status dt_cpu_scatter_add(const dt_local *src, int dim, const int64_t *shift,
                             int64_t dim_offset, int64_t dim_size, const dt_local *index,
                             dt_local *out) {
    const char *fn = "dt_cpu_scatter_add";
    DT_CHECK(dt_scatter_check(fn, src, dim, index, out));
    dt_dtype t = src->dtype;
    int nd = src->ndim;
    size_t n = 1, on = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)src->shape[d], on *= (size_t)out->shape[d];
    zero_job z = {out->data};
    dt_parallel_for((int64_t)(on * dt_dtype_size(t)), 4 * PIECE, zero_range, &z);
    if (n == 0) return DT_OK;
    scatter_job *j = &(scatter_job){.src = src, .index = index, .out = out, .shift = shift,
                                    .dim_offset = dim_offset, .dim_size = dim_size, .dim = dim,
                                    .nd = nd, .D = src->shape[dim], .inner = 1};
    atomic_init(&j->bad, UINT64_MAX);
    /* out's strides, and index's (0 where it is broadcast) */
    int64_t step = 1, outer = 1;
    for (int d = nd - 1; d >= 0; d--) {
        j->os[d] = d == nd - 1 ? 1 : j->os[d + 1] * out->shape[d + 1];
        j->is[d] = index->shape[d] == 1 && src->shape[d] != 1 ? 0 : step;
        step *= index->shape[d];
    }
    for (int d = 0; d < dim; d++) outer *= src->shape[d];
    /* Whole rows when index is broadcast over every dim after dim and nothing shifts there (an
     * embedding's gradient): one index read and one check per row, the same additions. */
    int rows_ok = 1;
    for (int d = dim + 1; d < nd; d++) {
        rows_ok &= j->is[d] == 0 && shift[d] == 0 && src->shape[d] == out->shape[d];
        j->inner *= src->shape[d];
    }
    j->rows = rows_ok && j->inner >= 8;
    j->piece = j->inner < INNER_PIECE ? j->inner : INNER_PIECE;
    j->pieces = (j->inner + j->piece - 1) / j->piece;
    int64_t per = j->D * j->piece; /* elements one unit adds */
    dt_parallel_for(outer * j->pieces, per >= PIECE ? 1 : PIECE / per, scatter_range, j);
    uint64_t bad = atomic_load(&j->bad);
    if (bad != UINT64_MAX) {
        int64_t i[DT_MAX_NDIM];
        size_t ie = 0;
        for (int d = nd - 1; d >= 0; d--) {
            i[d] = (int64_t)(bad % (uint64_t)src->shape[d]);
            bad /= (uint64_t)src->shape[d];
            ie += (size_t)(i[d] * j->is[d]);
        }
        char at[128];
        size_t o = 0;
        for (int d = 0; d < nd; d++)
            o += (size_t)snprintf(at + o, sizeof at - o, d ? ",%lld" : "%lld",
                                  (long long)(j->is[d] ? i[d] : 0));
        return dt_error(DT_ERR_ARG, "scatter_add: index[%s] = %lld is outside [0, %lld) "
                        "along dim %d", at, (long long)index_at(index, ie), (long long)dim_size,
                        dim);
    }
    return DT_OK;
}
