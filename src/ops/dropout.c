/* dropout(x, p) with a Philox mask keyed on each element's global flat index: the mask is the
 * same whatever the placements, so every placement maps to itself (S(d) -> S(d), R -> R) and
 * a Partial sum stays one (each part is masked and scaled alike: linear). The seed and offset
 * reach the kernel only; the strategy never depends on them. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)op;
    if (n != 1) return dt_error(DT_ERR_ARG, "dropout: takes 1 input, got %d", n);
    double p = a->scalar;
    if (!(p >= 0 && p <= 1))
        return dt_error(DT_ERR_ARG, "dropout: argument p = %g is not in [0, 1]", p);
    if (in[0].dtype == DT_I32 || in[0].dtype == DT_I64)
        return dt_error(DT_ERR_DTYPE, "dropout: needs a float input, got %s",
                        dt_dtype_name(in[0].dtype));
    out->ndim = in[0].ndim;
    for (int d = 0; d < in[0].ndim; d++) out->shape[d] = in[0].shape[d];
    out->dtype = in[0].dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)n, (void)a, (void)mesh_size, (void)mesh_total;
    int k = 0;
    rows[k++] = (rule_row){.in = {RP}, .out = RP};
    for (int d = 0; d < in[0].ndim; d++) rows[k++] = (rule_row){.in = {SP(d)}, .out = SP(d)};
    rows[k++] = (rule_row){.in = {PP(DT_REDUCE_SUM)}, .out = PP(DT_REDUCE_SUM)};
    return k;
}

static dt_status compute(local_call *c) {
    return c->k->dropout(c->args->scalar, c->args->seed, c->args->offset, c->global[0].shape,
                         c->in_offset[0], &c->in[0], &c->out);
}

const op_family dt_family_dropout = {
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* The mask depends only on the generator state and each element's global index, so the same
 * op with the same arguments on g keeps the same elements and scales them alike. */
dt_status dt_grad_dropout(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *g = c->grad;
    return dt_op_call(DT_OP_DROPOUT, &g, 1, c->args, &gin[0]);
}
