/* Scaled dot-product attention on (batch..., heads, T, D) inputs: batch and head dims shard
 * (tensor-parallel attention with heads sharded); the sequence and feature dims stay whole. */
#include <math.h>

#include "core/check.h"
#include "ops/op_impl.h"

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)op, (void)a;
    if (n != 3) return dt_error(DT_ERR_ARG, "scaled_dot_product_attention: takes q, k, v");
    const op_input *q = &in[0], *k = &in[1], *v = &in[2];
    int nd = q->ndim;
    if (nd < 2 || k->ndim != nd || v->ndim != nd)
        return dt_error(DT_ERR_SHAPE, "scaled_dot_product_attention: q, k, v must have the same "
                                      "number of dims (at least 2)");
    for (int d = 0; d < nd - 2; d++)
        if (k->shape[d] != q->shape[d] || v->shape[d] != q->shape[d])
            return dt_error(DT_ERR_SHAPE, "scaled_dot_product_attention: batch dim %d differs", d);
    if (k->shape[nd - 1] != q->shape[nd - 1] || v->shape[nd - 2] != k->shape[nd - 2])
        return dt_error(DT_ERR_SHAPE, "scaled_dot_product_attention: q/k feature sizes or k/v "
                                      "lengths differ");
    if (q->dtype != k->dtype || q->dtype != v->dtype || q->dtype == DT_I32 || q->dtype == DT_I64)
        return dt_error(DT_ERR_DTYPE, "scaled_dot_product_attention: q, k, v must share a float "
                                      "dtype");
    out->ndim = nd;
    for (int d = 0; d < nd - 1; d++) out->shape[d] = q->shape[d];
    out->shape[nd - 1] = v->shape[nd - 1];
    out->dtype = q->dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)n, (void)a, (void)mesh_size, (void)mesh_total;
    int k = 0;
    rows[k++] = (rule_row){.in = {RP, RP, RP}, .out = RP};
    for (int d = 0; d < in[0].ndim - 2; d++)
        rows[k++] = (rule_row){.in = {SP(d), SP(d), SP(d)}, .out = SP(d)};
    return k;
}

static dt_status compute(local_call *c) {
    double scale = c->args->scalar;
    if (scale == 0) scale = 1.0 / sqrt((double)c->global[0].shape[c->global[0].ndim - 1]);
    return c->k->sdpa(&c->in[0], &c->in[1], &c->in[2], c->args->causal, scale, &c->out);
}

const op_family dt_family_attention = {
    .infer = infer, .rules = rules, .compute = compute,
};
