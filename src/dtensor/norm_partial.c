/* The arithmetic around a pending p-norm's collective (Partial(norm), dtensor/placement.h):
 * each part is raised to p, the parts are combined by a plain collective, the result is
 * raised to 1/p. Shared by redistribute, full_tensor and the total norm; no ranks here. */
#include <math.h>

#include "core/check.h"
#include "dtensor/tensor_impl.h"

dt_reduce_op dt_norm_partial_reduce_op(double ord) {
    return ord == INFINITY ? DT_REDUCE_MAX : ord == -INFINITY ? DT_REDUCE_MIN : DT_REDUCE_SUM;
}

/* p = 0 (a count of non-zeros) and p = 1 add the parts as they are; inf and -inf take the
 * max and min as they are. */
static int powers(double ord) {
    return isfinite(ord) && ord != 0 && ord != 1;
}

dt_status dt_norm_partial_pre(const dt_mem_ops *mem, dt_dtype dtype, void *buf, size_t count,
                              double ord) {
    return powers(ord) && count ? mem->pow_abs(dtype, buf, count, ord) : DT_OK;
}

dt_status dt_norm_partial_post(const dt_mem_ops *mem, dt_dtype dtype, void *buf, size_t count,
                               double ord) {
    return powers(ord) && count ? mem->pow_abs(dtype, buf, count, 1.0 / ord) : DT_OK;
}
