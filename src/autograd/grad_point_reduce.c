/* Backward rules of amax, amin, max, min, cumsum and vector_norm, built from the library's
 * ops. The extrema recompute the reduced value in keepdim form and compare x with it: ties
 * share the gradient evenly, as torch.amax's (max and min here return values like amax and
 * amin, so they take the same rule, not torch.max(dim)'s gradient to the selected index). */
#include <math.h>

#include "autograd/grad_chain.h"

#define IN(i) (c->in[(i)])

/* x reduced by op over the call's dims, kept (keepdim form). */
static dt_tensor *reduce_kept(chain *ch, const dt_grad_call *c, dt_op op, dt_tensor *x) {
    dt_tensor *o = NULL;
    if (ch->st != DT_OK) return NULL;
    dt_status st = dt_reduce(op, x, c->args->dims, c->args->ndims, 1, &o);
    return chain_keep(ch, st, o);
}

/* The output's gradient in keepdim form: reduced dims of x as 1 (every dim when ndims is 0). */
static dt_tensor *grad_kept(chain *ch, const dt_grad_call *c) {
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
static dt_tensor *split_among(chain *ch, const dt_grad_call *c, dt_tensor *hit, dt_tensor *sign) {
    dt_tensor *count = reduce_kept(ch, c, DT_OP_SUM, hit);
    dt_tensor *share = chain2(ch, dt_div, grad_kept(ch, c), count);
    if (sign) hit = chain2(ch, dt_mul, hit, sign);
    return chain2(ch, dt_mul, hit, share);
}

static dt_status extremum(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *x = IN(0);
    dt_tensor *hit = chain2(&ch, dt_eq, x, reduce_kept(&ch, c, c->op, x));
    return chain_end1(&ch, split_among(&ch, c, hit, NULL), gin);
}

dt_status dt_grad_amax(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}
dt_status dt_grad_amin(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}
dt_status dt_grad_max(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}
dt_status dt_grad_min(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}

/* out[i] = sum_{j <= i} x[j] along dim, so gx[j] = sum_{i >= j} g[i]: the reverse cumulative
 * sum, sum(g) - cumsum(g) + g. */
dt_status dt_grad_cumsum(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    int dim = c->args->dim;
    dt_tensor *g = c->grad, *total = NULL, *run = NULL;
    dt_status st = dt_sum(g, &dim, 1, 1, &total);
    chain_keep(&ch, st, total);
    if (ch.st == DT_OK) st = dt_cumsum(g, dim, &run), chain_keep(&ch, st, run);
    dt_tensor *rest = chain2(&ch, dt_sub, total, run);
    return chain_end1(&ch, chain2(&ch, dt_add, rest, g), gin);
}

/* ||x||_p over dims, kept. */
static dt_tensor *norm_kept(chain *ch, const dt_grad_call *c, dt_tensor *x) {
    dt_tensor *o = NULL;
    if (ch->st != DT_OK) return NULL;
    dt_status st = dt_vector_norm(x, c->args->scalar, c->args->dims, c->args->ndims, 1, &o);
    return chain_keep(ch, st, o);
}

/* d ||x||_p / dx = sign(x) |x|^(p-1) / ||x||^(p-1) for finite p != 0, written as torch's
 * norm_backward: the numerator is 0 where x is 0 (also for p < 1, where |x|^(p-1) is inf) and
 * the whole is 0 where the norm is 0. p = +-inf: the gradient goes to the elements whose |x|
 * is the max (min) |x|, evenly among ties, with x's sign. p = 0 (a count): zero. */
dt_status dt_grad_vector_norm(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *x = IN(0);
    double p = c->args->scalar;
    if (p == 0) return chain_end1(&ch, chain1(&ch, dt_tensor_zeros_like, x), gin);
    dt_tensor *sign = chain1(&ch, dt_sign, x), *ax = chain1(&ch, dt_abs, x);
    dt_tensor *n = norm_kept(&ch, c, x);
    if (isinf(p)) {
        dt_tensor *hit = chain2(&ch, dt_eq, ax, n);
        return chain_end1(&ch, split_among(&ch, c, hit, sign), gin);
    }
    dt_tensor *num = p == 2   ? x
                     : p == 1 ? sign
                              : chain2(&ch, dt_mul, sign, chains(&ch, dt_pow_scalar, ax, p - 1));
    if (p < 1) num = chain_where(&ch, x, num, chain1(&ch, dt_tensor_zeros_like, x));
    dt_tensor *scale = chain2(&ch, dt_div, grad_kept(&ch, c), chains(&ch, dt_pow_scalar, n, p - 1));
    scale = chain_where(&ch, n, scale, chain1(&ch, dt_tensor_zeros_like, scale));
    return chain_end1(&ch, chain2(&ch, dt_mul, num, scale), gin);
}
