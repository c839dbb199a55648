/* CPU vector norm (torch.linalg.vector_norm) over a set of dims: one pass over x in memory
 * order, each element folded into its output's double accumulator. Knows nothing of shards;
 * the pending-norm placement that a sharded reduced dim leaves is the dispatch's business. */
#include <stdlib.h>

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

dt_status dt_cpu_vector_norm(double ord, unsigned mask, const dt_local *x, dt_local *out) {
    if (x->dtype != DT_F32 && x->dtype != DT_F64 && x->dtype != DT_BF16 && x->dtype != DT_F16)
        return dt_error(DT_ERR_DTYPE, "vector_norm: %s is not a float dtype (torch needs a float "
                                      "or complex input)", dt_dtype_name(x->dtype));
    if (ord != ord) return dt_error(DT_ERR_ARG, "vector_norm: ord is NaN");
    /* out's element for x's index: x's index with reduced dims at 0, in out's strides */
    int64_t ostride[DT_MAX_NDIM], idx[DT_MAX_NDIM] = {0};
    size_t nout = 1, nx = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        int red = (mask >> d) & 1u;
        ostride[d] = red ? 0 : (int64_t)nout;
        if (!red) nout *= (size_t)x->shape[d];
        nx *= (size_t)x->shape[d];
    }
    if (nout == 0) return DT_OK;
    double *acc = malloc(nout * sizeof *acc);
    if (!acc) return dt_error(DT_ERR_NOMEM, "vector_norm: out of memory for %zu outputs", nout);
    for (size_t o = 0; o < nout; o++) acc[o] = dt_vn_start(ord);
    int64_t o = 0;
    for (size_t i = 0; i < nx; i++) {
        acc[o] = dt_vn_fold(ord, acc[o], load(x->dtype, x->data, i));
        for (int d = x->ndim - 1; d >= 0; d--) { /* odometer over x, o follows */
            o += ostride[d];
            if (++idx[d] < x->shape[d]) break;
            o -= ostride[d] * x->shape[d];
            idx[d] = 0;
        }
    }
    for (size_t k = 0; k < nout; k++) store(out->dtype, out->data, k, dt_vn_finish(ord, acc[k]));
    free(acc);
    return DT_OK;
}
