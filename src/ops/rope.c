/* Rotary position embedding (torchtitan's interleaved pairs) as one op: x (B, T, H, D) and the
 * caller's cos and sin tables (T, D/2). Each output element needs its own x pair and its
 * position's table row, so batch and heads shard with the tables replicated, the sequence
 * shards with the tables sharded alike, and a Partial x stays Partial (linear in x). The
 * feature dim stays whole (pairs). */
#include "core/check.h"
#include "ops/grad.h"
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

/* Each pair is read before it is written (the kernels allow out == x): dt_rope_. */
const op_family dt_family_rope = {
    .infer = infer,
    .rules = rules,
    .compute = compute,
    .inplace = true,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* p (B, T, H, D) summed over b, h and each pair: (T, D/2). */
static dt_status sum_pairs(dt_tensor *p, dt_tensor **out) {
    int64_t shape[5] = {p->shape[0], p->shape[1], p->shape[2], p->shape[3] / 2, 2};
    int dims[3] = {0, 2, 4};
    dt_tensor *v;
    DT_CHECK(dt_view(p, 5, shape, &v));
    dt_status st = dt_sum(v, dims, 3, 0, out);
    dt_tensor_release(v);
    return st;
}

/* A rotation is orthogonal: gx = rope(g, cos, -sin). For the tables, with x0, x1 a pair and
 * g0, g1 its gradient: dcos = sum g0 x0 + g1 x1 = sum g x, and dsin = sum g1 x0 - g0 x1 =
 * sum g rope(x, 0, 1) (a quarter turn), both summed over b, h and the pair. */
dt_status dt_grad_rope(const dt_grad_call *c, dt_tensor **gin) {
    enum { NSIN, GX, ZERO, ONE, ROT, GR, N };
    dt_tensor *t[N] = {0};
    dt_status st = DT_OK;
    if (c->need[0]) {
        DO(dt_neg(IN(2), &t[NSIN]));
        DO(dt_rope(c->grad, IN(1), t[NSIN], &gin[0]));
    }
    if (c->need[1]) {
        DO(dt_mul(c->grad, IN(0), &t[GX]));
        DO(sum_pairs(t[GX], &gin[1]));
    }
    if (c->need[2]) {
        DO(dt_tensor_zeros_like(IN(1), &t[ZERO]));
        DO(dt_tensor_ones_like(IN(2), &t[ONE]));
        DO(dt_rope(IN(0), t[ZERO], t[ONE], &t[ROT]));
        DO(dt_mul(c->grad, t[ROT], &t[GR]));
        DO(sum_pairs(t[GR], &gin[2]));
    }
    dt_grad_release_all(t, N);
    return dt_grad_finish(c, gin, st);
}
