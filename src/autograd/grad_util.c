/* Helpers the backward rules share. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"

dt_status dt_grad_sum_to(dt_tensor *g, int ndim, const int64_t *shape, dt_tensor **out) {
    int lead = g->ndim - ndim, dims[DT_MAX_NDIM], nd = 0;
    DT_ARG(lead >= 0, "backward: a gradient of %d dims cannot sum to %d", g->ndim, ndim);
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && g->shape[d] != 1)) dims[nd++] = d;
    if (!nd) {
        DT_CHECK(dt_tensor_retain(g));
        *out = g;
        return DT_OK;
    }
    dt_tensor *s;
    DT_CHECK(dt_sum(g, dims, nd, 1, &s));
    if (!lead) {
        *out = s;
        return DT_OK;
    }
    dt_status st = dt_view(s, ndim, shape, out);
    dt_tensor_release(s);
    return st;
}
