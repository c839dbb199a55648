/* The contract both norm backward kernels (CPU and CUDA) check before they run: float dtypes,
 * grad and gx of x's shape and dtype, weight, gw and gb rows of x's last dim; gives the row
 * length H and the row count. Header-only, host code. */
#ifndef DT_OPS_CPU_NORM_BACKWARD_H
#define DT_OPS_CPU_NORM_BACKWARD_H

#include "core/check.h"
#include "ops/kernels.h"

static inline int dt_norm_bwd_same(const dt_local *t, const dt_local *x) {
    if (t->ndim != x->ndim || t->dtype != x->dtype) return 0;
    for (int d = 0; d < x->ndim; d++)
        if (t->shape[d] != x->shape[d]) return 0;
    return 1;
}

static inline int dt_norm_bwd_row(const dt_local *t, int64_t H, dt_dtype dt) {
    return !t || (t->ndim == 1 && t->shape[0] == H && t->dtype == dt);
}

static inline dt_status dt_norm_bwd_check(const char *fn, const dt_local *x, const dt_local *weight,
                                          const dt_local *grad, const dt_local *gx,
                                          const dt_local *gw, const dt_local *gb, int64_t *H,
                                          int64_t *rows) {
    dt_dtype dt = x->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(dt));
    if (x->ndim < 1) return dt_error(DT_ERR_SHAPE, "%s: x must have at least one dim", fn);
    if (!dt_norm_bwd_same(grad, x) || !dt_norm_bwd_same(gx, x))
        return dt_error(DT_ERR_SHAPE, "%s: grad and gx must have x's shape and dtype %s", fn,
                        dt_dtype_name(dt));
    *H = x->shape[x->ndim - 1], *rows = 1;
    for (int d = 0; d < x->ndim - 1; d++)
        *rows *= x->shape[d];
    if (!dt_norm_bwd_row(weight, *H, dt) || !dt_norm_bwd_row(gw, *H, dt) ||
        !dt_norm_bwd_row(gb, *H, dt))
        return dt_error(DT_ERR_SHAPE, "%s: weight, gw and gb must be (%lld) of x's dtype %s", fn,
                        (long long)*H, dt_dtype_name(dt));
    return DT_OK;
}

#endif
