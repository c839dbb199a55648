/* Rotary position embedding (torchtitan's interleaved pairs) as one op: x (B, T, H, D) and the
 * caller's cos and sin tables (T, D/2). Each output element needs its own x pair and its
 * position's table row, so batch and heads shard with the tables replicated, the sequence
 * shards with the tables sharded alike, and a Partial x stays Partial (linear in x). The
 * feature dim stays whole (pairs). */
#include "core/check.h"
#include "ops/op_impl.h"

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)op, (void)a;
    if (n != 3) return dt_error(DT_ERR_ARG, "rope: takes x, cos and sin, got %d inputs", n);
    const op_input *x = &in[0];
    if (x->ndim != 4)
        return dt_error(DT_ERR_SHAPE, "rope: x must be 4-D (B, T, H, D), got %d-D", x->ndim);
    int64_t T = x->shape[1], D = x->shape[3];
    if (D % 2)
        return dt_error(DT_ERR_SHAPE, "rope: x's head size D = %lld must be even", (long long)D);
    for (int i = 1; i < 3; i++)
        if (in[i].ndim != 2 || in[i].shape[0] != T || in[i].shape[1] != D / 2)
            return dt_error(DT_ERR_SHAPE, "rope: %s must be (T, D/2) = (%lld, %lld)",
                            i == 1 ? "cos" : "sin", (long long)T, (long long)(D / 2));
    if (x->dtype == DT_I32 || x->dtype == DT_I64 || in[1].dtype != x->dtype ||
        in[2].dtype != x->dtype)
        return dt_error(DT_ERR_DTYPE, "rope: x, cos and sin must share a float dtype (x is %s)",
                        dt_dtype_name(x->dtype));
    out->ndim = 4;
    for (int d = 0; d < 4; d++) out->shape[d] = x->shape[d];
    out->dtype = x->dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)in, (void)n, (void)a, (void)mesh_size, (void)mesh_total;
    int k = 0;
    rows[k++] = (rule_row){.in = {RP, RP, RP}, .out = RP};
    rows[k++] = (rule_row){.in = {SP(0), RP, RP}, .out = SP(0)};       /* batch */
    rows[k++] = (rule_row){.in = {SP(1), SP(0), SP(0)}, .out = SP(1)}; /* sequence */
    rows[k++] = (rule_row){.in = {SP(2), RP, RP}, .out = SP(2)};       /* heads */
    rows[k++] = (rule_row){.in = {PP(DT_REDUCE_SUM), RP, RP}, .out = PP(DT_REDUCE_SUM)};
    return k;
}

static dt_status compute(local_call *c) {
    return c->k->rope(&c->in[0], &c->in[1], &c->in[2], &c->out);
}

const op_family dt_family_rope = {
    .infer = infer, .rules = rules, .compute = compute,
};
