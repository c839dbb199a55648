/* vector_norm (torch.linalg.vector_norm): the ord-norm over dims (all when none). A reduced dim
 * that is sharded leaves a pending norm, NormP(ord), that redistribute finishes with one
 * all_reduce (PyTorch's _NormPartial); kept dims keep their shards. A Partial input is
 * reduced first: the norm of a sum is not a combination of the parts' norms. */
#include <math.h>

#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_float(dt_dtype dt) {
    return dt == DT_F32 || dt == DT_F64 || dt == DT_BF16 || dt == DT_F16;
}

/* Bit d set when dim d is reduced. */
static dt_status reduced_mask(const op_input *x, const dt_op_args *a, unsigned *mask) {
    if (a->ndims < 0 || a->ndims > DT_MAX_NDIM)
        return dt_error(DT_ERR_ARG, "vector_norm: ndims = %d is not in [0, %d]", a->ndims,
                        DT_MAX_NDIM);
    if (a->ndims == 0) {
        *mask = (1u << x->ndim) - 1;
        return DT_OK;
    }
    *mask = 0;
    for (int i = 0; i < a->ndims; i++) {
        int d = dt_norm_dim(a->dims[i], x->ndim);
        if (d < 0)
            return dt_error(DT_ERR_ARG, "vector_norm: dims[%d] = %d is out of range for a %d-D "
                                        "tensor", i, a->dims[i], x->ndim);
        if (*mask & (1u << d))
            return dt_error(DT_ERR_ARG, "vector_norm: dims[%d] = %d repeats dim %d", i,
                            a->dims[i], d);
        *mask |= 1u << d;
    }
    return DT_OK;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)op;
    if (n != 1) return dt_error(DT_ERR_ARG, "vector_norm: takes 1 input, got %d", n);
    if (!is_float(in[0].dtype))
        return dt_error(DT_ERR_DTYPE, "vector_norm: input dtype %s is not a float dtype (torch "
                                      "needs a float input)", dt_dtype_name(in[0].dtype));
    if (isnan(a->scalar)) return dt_error(DT_ERR_ARG, "vector_norm: ord is NaN");
    unsigned mask;
    DT_CHECK(reduced_mask(&in[0], a, &mask));
    out->ndim = 0;
    for (int d = 0; d < in[0].ndim; d++) {
        if (!(mask & (1u << d))) out->shape[out->ndim++] = in[0].shape[d];
        else if (a->keepdim) out->shape[out->ndim++] = 1;
    }
    out->dtype = in[0].dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)n, (void)mesh_size, (void)mesh_total;
    unsigned mask;
    if (reduced_mask(&in[0], a, &mask) != DT_OK) return 0;
    int k = 0;
    rows[k++] = (rule_row){.in = {RP}, .out = RP};
    for (int d = 0, od = 0; d < in[0].ndim; d++) {
        int reduced = (mask >> d) & 1u;
        /* x S(d), d reduced: each rank's norm of its part, combined later */
        rows[k++] = (rule_row){.in = {SP(d)}, .out = reduced ? NP(a->scalar) : SP(od)};
        od += !reduced || a->keepdim;
    }
    return k;
}

static dt_status compute(local_call *c) {
    unsigned mask;
    DT_CHECK(reduced_mask(&c->global[0], c->args, &mask));
    /* The kernel writes the keepdim form; dropping size-1 dims does not move data. */
    dt_local out = {.data = c->out.data, .dtype = c->out.dtype, .ndim = c->in[0].ndim};
    for (int d = 0; d < out.ndim; d++) out.shape[d] = (mask & (1u << d)) ? 1 : c->in[0].shape[d];
    return c->k->vector_norm(c->args->scalar, mask, &c->in[0], &out);
}

const op_family dt_family_vector_norm = {
    .infer = infer, .rules = rules, .compute = compute,
};

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
        return chain_end1(&ch, dt_grad_split_among(&ch, c, hit, sign), gin);
    }
    dt_tensor *num = p == 2   ? x
                     : p == 1 ? sign
                              : chain2(&ch, dt_mul, sign, chains(&ch, dt_pow_scalar, ax, p - 1));
    if (p < 1) num = chain_where(&ch, x, num, chain1(&ch, dt_tensor_zeros_like, x));
    dt_tensor *scale =
        chain2(&ch, dt_div, dt_grad_kept(&ch, c), chains(&ch, dt_pow_scalar, n, p - 1));
    scale = chain_where(&ch, n, scale, chain1(&ch, dt_tensor_zeros_like, scale));
    return chain_end1(&ch, chain2(&ch, dt_mul, num, scale), gin);
}
