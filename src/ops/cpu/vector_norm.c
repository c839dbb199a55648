/* CPU vector norm (torch.linalg.vector_norm) over a set of dims: one pass over x in memory
 * order, each element folded into its output's double accumulator. Knows nothing of shards;
 * the pending-norm placement that a sharded reduced dim leaves is the dispatch's business.
 * Few outputs over many elements (a gradient norm) fold fixed pieces of x on the intra-op pool
 * and combine the pieces' partials in piece order: the same bits with any thread count. */
#include <stdlib.h>

#include "core/alloc.h"
#include "core/pool.h"

#include "core/check.h"
#include "core/half.h"
#include "ops/cpu/vector_norm.h"
#include "ops/kernels.h"

static double load(dt_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case DT_F32: return ((const float *)p)[i];
    case DT_F64: return ((const double *)p)[i];
    case DT_BF16: return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return dt_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

static void store(dt_dtype dt, void *p, size_t i, double v) {
    switch (dt) {
    case DT_F32: ((float *)p)[i] = (float)v; break;
    case DT_F64: ((double *)p)[i] = v; break;
    case DT_BF16: ((uint16_t *)p)[i] = dt_f32_to_bf16((float)v); break;
    default: ((uint16_t *)p)[i] = dt_f32_to_f16((float)v); break;
    }
}

#define PIECE    65536 /* elements of x per piece of the split form */
#define MAX_OUTS 16    /* the split form keeps pieces x outputs partials: few outputs only */

/* Elements [begin, end) of x (flat) folded into acc[nout], o following x's index. */
typedef struct {
    double ord;
    const dt_local *x;
    const int64_t *ostride;
    size_t nout;
    double *part; /* per piece: nout partials */
} vn_job;

static void fold_range(const vn_job *j, size_t begin, size_t end, double *acc) {
    const dt_local *x = j->x;
    if (begin >= end) return; /* an empty x (a dim of 0) has nothing to fold */
    int64_t idx[DT_MAX_NDIM], o = 0;
    size_t rem = begin;
    for (int d = x->ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(rem % (size_t)x->shape[d]);
        rem /= (size_t)x->shape[d];
        o += idx[d] * j->ostride[d];
    }
    for (size_t i = begin; i < end; i++) {
        acc[o] = dt_vn_fold(j->ord, acc[o], load(x->dtype, x->data, i));
        for (int d = x->ndim - 1; d >= 0; d--) {
            o += j->ostride[d];
            if (++idx[d] < x->shape[d]) break;
            o -= j->ostride[d] * x->shape[d];
            idx[d] = 0;
        }
    }
}

static void piece_range(void *arg, int64_t begin, int64_t end) {
    const vn_job *j = arg;
    size_t nx = 1;
    for (int d = 0; d < j->x->ndim; d++) nx *= (size_t)j->x->shape[d];
    for (int64_t c = begin; c < end; c++) {
        double *acc = j->part + (size_t)c * j->nout;
        for (size_t o = 0; o < j->nout; o++) acc[o] = dt_vn_start(j->ord);
        size_t b = (size_t)c * PIECE, e = nx - b > PIECE ? b + PIECE : nx;
        fold_range(j, b, e, acc);
    }
}

/* Two partials of one output: the fold's combine (max, min or sum of the folded terms). */
static double combine(double ord, double a, double b) {
    if (ord == INFINITY) return (b > a || b != b) ? b : a;
    if (ord == -INFINITY) return (b < a || b != b) ? b : a;
    return a + b;
}

dt_status dt_cpu_vector_norm(double ord, unsigned mask, const dt_local *x, dt_local *out) {
    if (x->dtype != DT_F32 && x->dtype != DT_F64 && x->dtype != DT_BF16 && x->dtype != DT_F16)
        return dt_error(DT_ERR_DTYPE, "vector_norm: %s is not a float dtype (torch needs a float "
                                      "or complex input)", dt_dtype_name(x->dtype));
    if (ord != ord) return dt_error(DT_ERR_ARG, "vector_norm: ord is NaN");
    /* out's element for x's index: x's index with reduced dims at 0, in out's strides */
    int64_t ostride[DT_MAX_NDIM];
    size_t nout = 1, nx = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        int red = (mask >> d) & 1u;
        ostride[d] = red ? 0 : (int64_t)nout;
        if (!red) nout *= (size_t)x->shape[d];
        nx *= (size_t)x->shape[d];
    }
    if (nout == 0) return DT_OK;
    double *acc = dt_host_alloc(nout * sizeof *acc);
    if (!acc) return dt_error(DT_ERR_NOMEM, "vector_norm: out of memory for %zu outputs", nout);
    for (size_t o = 0; o < nout; o++) acc[o] = dt_vn_start(ord);
    vn_job j = {.ord = ord, .x = x, .ostride = ostride, .nout = nout};
    int64_t pieces = dt_parallel_chunks((int64_t)nx, PIECE);
    if (nout <= MAX_OUTS && pieces > 1) {
        j.part = dt_host_alloc((size_t)pieces * nout * sizeof *j.part);
        if (!j.part) {
            dt_host_free(acc);
            return dt_error(DT_ERR_NOMEM, "vector_norm: out of memory for %lld partials",
                            (long long)pieces * (long long)nout);
        }
        dt_parallel_for(pieces, 1, piece_range, &j);
        for (int64_t c = 0; c < pieces; c++)
            for (size_t k = 0; k < nout; k++)
                acc[k] = combine(ord, acc[k], j.part[(size_t)c * nout + k]);
        dt_host_free(j.part);
    } else {
        fold_range(&j, 0, nx, acc); /* many outputs: one pass in memory order */
    }
    for (size_t k = 0; k < nout; k++) store(out->dtype, out->data, k, dt_vn_finish(ord, acc[k]));
    dt_host_free(acc);
    return DT_OK;
}
