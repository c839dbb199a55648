/* cumsum: an inclusive scan along one dim. The scanned dim must be whole; other dims keep
 * their shards, and a sum (or float average) of parts passes through, the scan being linear.
 * Integer P(avg) does not: truncating the average does not commute with the running sum. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)n;
    const op_input *x = &in[0];
    if (dt_norm_dim(a->dim, x->ndim) < 0)
        return dt_error(DT_ERR_ARG, "%s: dim = %d is out of range for a %d-D tensor",
                        dt_op_name(op), a->dim, x->ndim);
    out->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) out->shape[d] = x->shape[d];
    out->dtype = x->dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)n, (void)mesh_size, (void)mesh_total;
    const op_input *x = &in[0];
    int dim = dt_norm_dim(a->dim, x->ndim), k = 0;
    if (dim < 0) return 0;
    rows[k++] = (rule_row){.in = {RP}, .out = RP};
    for (int d = 0; d < x->ndim; d++)
        if (d != dim) rows[k++] = (rule_row){.in = {SP(d)}, .out = SP(d)};
    rows[k++] = (rule_row){.in = {PP(DT_REDUCE_SUM)}, .out = PP(DT_REDUCE_SUM)};
    if (x->dtype != DT_I32 && x->dtype != DT_I64)
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_AVG)}, .out = PP(DT_REDUCE_AVG)};
    return k;
}

static dt_status compute(local_call *c) {
    return c->k->cumsum(&c->in[0], dt_norm_dim(c->args->dim, c->global[0].ndim), &c->out);
}

const op_family dt_family_scan = {
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

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
