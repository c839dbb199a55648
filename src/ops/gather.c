/* gather, one_hot and topk: selection by index. gather keeps the shards index and x share
 * (and index's own with x whole); a dim-sharded x answers only the rows it holds and zeros
 * elsewhere, a Partial sum (the masked gather, like embedding's). one_hot writes each rank's
 * class range when the output's class dim is sharded. topk needs its dim whole and returns the
 * indices; dt_topk gathers the values with them. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_int(dt_dtype d) { return d == DT_I32 || d == DT_I64; }
static int is_float(dt_dtype d) { return !is_int(d); }

static dt_status need_dim(dt_op op, const op_input *x, int dim, int *d) {
    *d = dt_norm_dim(dim, x->ndim);
    if (*d < 0)
        return dt_error(DT_ERR_ARG, "%s: dim = %d is out of range for a %d-D tensor",
                        dt_op_name(op), dim, x->ndim);
    return DT_OK;
}

static dt_status infer_gather(const op_input *x, const op_input *ix, const dt_op_args *a,
                              op_out *out) {
    int dim;
    DT_CHECK(need_dim(DT_OP_GATHER, x, a->dim, &dim));
    if (!is_int(ix->dtype))
        return dt_error(DT_ERR_DTYPE, "gather: index must be i32 or i64, got %s",
                        dt_dtype_name(ix->dtype));
    if (ix->ndim != x->ndim)
        return dt_error(DT_ERR_SHAPE, "gather: index has %d dims, x has %d (they must match)",
                        ix->ndim, x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (d != dim && ix->shape[d] > x->shape[d])
            return dt_error(DT_ERR_SHAPE, "gather: index size %lld > x size %lld in dim %d "
                            "(only dim %d may be larger)", (long long)ix->shape[d],
                            (long long)x->shape[d], d, dim);
    out->ndim = ix->ndim;
    for (int d = 0; d < ix->ndim; d++) out->shape[d] = ix->shape[d];
    out->dtype = x->dtype;
    return DT_OK;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)n;
    if (op == DT_OP_GATHER) return infer_gather(&in[0], &in[1], a, out);
    const op_input *x = &in[0];
    if (op == DT_OP_ONE_HOT) {
        if (!is_int(x->dtype))
            return dt_error(DT_ERR_DTYPE, "one_hot: index must be i32 or i64, got %s",
                            dt_dtype_name(x->dtype));
        if (a->k <= 0)
            return dt_error(DT_ERR_ARG, "one_hot: num_classes = %lld must be > 0",
                            (long long)a->k);
        if (x->ndim + 1 > DT_MAX_NDIM)
            return dt_error(DT_ERR_SHAPE, "one_hot: index has %d dims, at most %d allowed",
                            x->ndim, DT_MAX_NDIM - 1);
        out->ndim = x->ndim + 1;
        for (int d = 0; d < x->ndim; d++) out->shape[d] = x->shape[d];
        out->shape[x->ndim] = a->k;
        out->dtype = DT_I64;
        return DT_OK;
    }
    int dim;
    DT_CHECK(need_dim(op, x, a->dim, &dim));
    if (a->k < 0 || a->k > x->shape[dim])
        return dt_error(DT_ERR_ARG, "topk: k = %lld is not in [0, %lld] (the size of dim %d)",
                        (long long)a->k, (long long)x->shape[dim], dim);
    out->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) out->shape[d] = d == dim ? a->k : x->shape[d];
    out->dtype = DT_I64;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)n, (void)mesh_size, (void)mesh_total;
    const op_input *x = &in[0];
    int k = 0;
    if (op == DT_OP_ONE_HOT) {
        /* A whole index gives each rank its class range first: the (..., C) output is the
         * large one, and ties go to the earlier row. */
        rows[k++] = (rule_row){.in = {RP}, .out = SP(x->ndim)};
        rows[k++] = (rule_row){.in = {RP}, .out = RP};
        for (int d = 0; d < x->ndim; d++) rows[k++] = (rule_row){.in = {SP(d)}, .out = SP(d)};
        return k;
    }
    int dim = dt_norm_dim(a->dim, x->ndim);
    if (dim < 0) return 0;
    if (op == DT_OP_TOPK) {
        rows[k++] = (rule_row){.in = {RP}, .out = RP};
        for (int d = 0; d < x->ndim; d++)
            if (d != dim) rows[k++] = (rule_row){.in = {SP(d)}, .out = SP(d)};
        return k;
    }
    const op_input *ix = &in[1];
    rows[k++] = (rule_row){.in = {RP, RP}, .out = RP};
    for (int d = 0; d < x->ndim; d++) {
        /* Equal sizes chunk alike, so each rank's index rows meet its x rows. Then x whole
         * with index sharded is left out: beside an S(d),S(d) row on an outer mesh dim it would
         * pair nested index chunks with x chunks they are not inside; x R -> S(d) is a local
         * chunk anyway. */
        if (d != dim && x->shape[d] == ix->shape[d])
            rows[k++] = (rule_row){.in = {SP(d), SP(d)}, .out = SP(d)};
        else
            rows[k++] = (rule_row){.in = {RP, SP(d)}, .out = SP(d)};
    }
    rows[k++] = (rule_row){.in = {SP(dim), RP}, .out = PP(DT_REDUCE_SUM)}; /* masked */
    /* a selection commutes with adding (and averaging) the parts */
    rows[k++] = (rule_row){.in = {PP(DT_REDUCE_SUM), RP}, .out = PP(DT_REDUCE_SUM)};
    if (is_float(x->dtype))
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_AVG), RP}, .out = PP(DT_REDUCE_AVG)};
    return k;
}

static dt_status compute(local_call *c) {
    const op_input *x = &c->global[0];
    if (c->op == DT_OP_ONE_HOT)
        return c->k->one_hot(&c->in[0], c->in_offset[0], c->args->k, c->out_offset[x->ndim],
                             &c->out);
    int dim = dt_norm_dim(c->args->dim, x->ndim);
    if (c->op == DT_OP_TOPK)
        return c->k->topk(&c->in[0], c->args->k, dim, c->args->smallest, &c->out);
    int64_t shift[DT_MAX_NDIM] = {0};
    for (int d = 0; d < x->ndim; d++)
        if (d != dim) shift[d] = c->in_offset[1][d] - c->in_offset[0][d];
    return c->k->gather(&c->in[0], dim, shift, c->in_offset[0][dim], x->shape[dim], &c->in[1],
                        &c->out);
}

const op_family dt_family_gather = {
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* gather(x, dim, index): gx = scatter_add(g, dim, index) into x's shape. */
dt_status dt_grad_gather(const dt_grad_call *c, dt_tensor **gin) {
    return dt_scatter_add(c->grad, c->args->dim, IN(1), IN(0)->ndim, IN(0)->shape, &gin[0]);
}
