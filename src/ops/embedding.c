/* embedding (table lookup) and pick (the target logit of each sample). A row-sharded table
 * answers only the indices it holds and zeros elsewhere: a Partial sum; a column-sharded
 * table shards the hidden dim; sharded indices shard the output alike. pick is the same
 * pattern along the class dim. */
#include "core/check.h"
#include "ops/op_impl.h"

static int is_int(dt_dtype d) { return d == DT_I32 || d == DT_I64; }

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)a;
    if (n != 2) return dt_error(DT_ERR_ARG, "%s: takes 2 inputs, got %d", dt_op_name(op), n);
    const op_input *src = &in[0], *idx = &in[1];
    if (!is_int(idx->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: indices must be i32 or i64, got %s", dt_op_name(op),
                        dt_dtype_name(idx->dtype));
    if (op == DT_OP_EMBEDDING) {
        if (src->ndim != 2 || idx->ndim + 1 > DT_MAX_NDIM)
            return dt_error(DT_ERR_SHAPE, "embedding: the table must be 2-D (got %d-D)", src->ndim);
        out->ndim = idx->ndim + 1;
        for (int d = 0; d < idx->ndim; d++) out->shape[d] = idx->shape[d];
        out->shape[idx->ndim] = src->shape[1];
    } else {
        if (src->ndim != idx->ndim + 1)
            return dt_error(DT_ERR_SHAPE, "pick: logits must have one dim more than target");
        for (int d = 0; d < idx->ndim; d++)
            if (src->shape[d] != idx->shape[d])
                return dt_error(DT_ERR_SHAPE, "pick: logits and target differ in dim %d", d);
        out->ndim = idx->ndim;
        for (int d = 0; d < idx->ndim; d++) out->shape[d] = idx->shape[d];
    }
    out->dtype = src->dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)n, (void)a, (void)mesh_size, (void)mesh_total;
    const op_input *src = &in[0], *idx = &in[1];
    int k = 0;
    rows[k++] = (rule_row){.in = {RP, RP}, .out = RP};
    for (int d = 0; d < idx->ndim; d++)
        rows[k++] = (rule_row){.in = {op == DT_OP_PICK ? SP(d) : RP, SP(d)}, .out = SP(d)};
    if (op == DT_OP_EMBEDDING) {
        rows[k++] = (rule_row){.in = {SP(1), RP}, .out = SP(idx->ndim)};
        rows[k++] = (rule_row){.in = {SP(0), RP}, .out = PP(DT_REDUCE_SUM)};
    } else {
        rows[k++] = (rule_row){.in = {SP(src->ndim - 1), RP}, .out = PP(DT_REDUCE_SUM)};
    }
    return k;
}

static dt_status compute(local_call *c) {
    if (c->op == DT_OP_EMBEDDING)
        return c->k->embedding(&c->in[0], c->in_offset[0][0], &c->in[1], &c->out);
    return c->k->pick(&c->in[0], c->in_offset[0][c->in[0].ndim - 1], &c->in[1], &c->out);
}

const op_family dt_family_embedding = {
    .infer = infer, .rules = rules, .compute = compute,
};

const op_family dt_family_pick = {
    .infer = infer, .rules = rules, .compute = compute,
};
