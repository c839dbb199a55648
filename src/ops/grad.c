/* What every family's backward rules share (ops/grad.h), and the two grad tokens that are
 * not rules: none (no derivative) and through (composites, whose constituents record). */
#include "ops/grad.h"
#include "ops/op_impl.h"

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
    dt_status st = dt_view_consume(s, ndim, shape, out); /* s is ours alone: no copy */
    dt_tensor_release(s);
    return st;
}

dt_status dt_grad_none(const dt_grad_call *c, dt_tensor **gin) {
    (void)gin;
    return dt_error(DT_ERR_UNSUPPORTED,
                    "dt_backward: %s has no derivative (its output is an "
                    "index or a comparison); detach its input or leave it "
                    "out of the loss",
                    dt_op_name(c->op));
}

dt_status dt_grad_through(const dt_grad_call *c, dt_tensor **gin) {
    (void)gin;
    return dt_error(DT_ERR_UNSUPPORTED,
                    "dt_backward: %s is differentiated through the ops it "
                    "is built from; it records no node of its own",
                    dt_op_name(c->op));
}

/* ---- shared by the rules of the reductions and norms ---------------------------------- */

/* x reduced by op over the call's dims, kept (keepdim form). */
dt_tensor *dt_grad_reduce_kept(chain *ch, const dt_grad_call *c, dt_op op, dt_tensor *x) {
    dt_tensor *o = NULL;
    if (ch->st != DT_OK) return NULL;
    dt_status st = dt_reduce(op, x, c->args->dims, c->args->ndims, 1, &o);
    return chain_keep(ch, st, o);
}

/* The output's gradient in keepdim form: reduced dims of x as 1 (every dim when ndims is 0). */
dt_tensor *dt_grad_kept(chain *ch, const dt_grad_call *c) {
    dt_tensor *x = IN(0), *o = NULL;
    int64_t kept[DT_MAX_NDIM];
    unsigned mask = c->args->ndims ? 0 : ~0u;
    for (int i = 0; i < c->args->ndims; i++) {
        int d = c->args->dims[i];
        mask |= 1u << (d < 0 ? d + x->ndim : d);
    }
    for (int d = 0; d < x->ndim; d++)
        kept[d] = mask & (1u << d) ? 1 : x->shape[d];
    if (ch->st != DT_OK) return NULL;
    dt_status st = dt_view(c->grad, x->ndim, kept, &o);
    return chain_keep(ch, st, o);
}

/* g / count(hit) on the elements where hit is 1 (hit: 1/0 of x's shape, 1 somewhere in every
 * reduced group), times sign when given. */
dt_tensor *dt_grad_split_among(chain *ch, const dt_grad_call *c, dt_tensor *hit, dt_tensor *sign) {
    dt_tensor *count = dt_grad_reduce_kept(ch, c, DT_OP_SUM, hit);
    dt_tensor *share = chain2(ch, dt_div, dt_grad_kept(ch, c), count);
    if (sign) hit = chain2(ch, dt_mul, hit, sign);
    return chain2(ch, dt_mul, hit, share);
}
