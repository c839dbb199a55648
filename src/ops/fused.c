/* Fused ops: silu_mul (SwiGLU's silu(gate) * up), log_softmax_pick (cross entropy's target
 * log-probability with each row's softmax stats) and rms_norm_residual (x + residual and its RMS
 * norm), their sharding rules, their backward ops and the backward rules that call them. Every one
 * is elementwise or row-wise with the class dim whole, so each shards on the other dims alike and
 * needs no communication of its own. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_xent(dt_op op) {
    return op == DT_OP_LOG_SOFTMAX_PICK || op == DT_OP_LOG_SOFTMAX_PICK_BACKWARD;
}

static op_out spec_of(const op_input *x, dt_dtype dtype) {
    op_out o = {.ndim = x->ndim, .dtype = dtype};
    for (int d = 0; d < x->ndim; d++)
        o.shape[d] = x->shape[d];
    return o;
}

static int same_shape(const op_input *a, const op_input *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static const char *const silu_names[] = {"gate", "up", "grad"};
static const char *const rms_names[] = {"x", "residual", "weight"};
static const char *const xent_names[] = {"logits", "target", "stats", "grad"};

static dt_status infer_silu(dt_op op, const op_input *in, int n, op_out *out) {
    const char *name = dt_op_name(op);
    dt_dtype t = in[0].dtype;
    if (t != DT_F32 && t != DT_F64 && t != DT_BF16 && t != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: %s must be a float dtype, got %s", name,
                        op == DT_OP_RMS_NORM_RESIDUAL ? "x" : "gate", dt_dtype_name(t));
    int rms = op == DT_OP_RMS_NORM_RESIDUAL;
    for (int i = 1; i < n; i++)
        if (!same_shape(&in[i], &in[0]) || in[i].dtype != t)
            return dt_error(DT_ERR_SHAPE, "%s: %s must have %s's shape and dtype %s%s", name,
                            rms ? rms_names[i] : silu_names[i], rms ? "x" : "gate",
                            dt_dtype_name(t), rms ? "" : " (use dt_swiglu to broadcast)");
    *out = spec_of(&in[0], t);
    return DT_OK;
}

/* Each row's max and 1 / sum exp(x - max): target's shape plus a trailing 2. */
static op_out stats_spec(const op_input *x, const op_input *t) {
    op_out o = spec_of(t, x->dtype);
    o.shape[o.ndim++] = 2;
    return o;
}

static dt_status infer_xent(dt_op op, const op_input *in, int n, op_out *out) {
    const char *name = dt_op_name(op);
    const op_input *x = &in[0], *t = &in[1];
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "%s: logits must be f32 or f64, got %s", name,
                        dt_dtype_name(x->dtype));
    if (t->dtype != DT_I32 && t->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: target must be i32 or i64 class ids, got %s", name,
                        dt_dtype_name(t->dtype));
    int ok = x->ndim >= 2 && t->ndim == x->ndim - 1 && t->shape[0] == x->shape[0];
    for (int d = 2; ok && d < x->ndim; d++)
        ok = t->shape[d - 1] == x->shape[d];
    if (!ok)
        return dt_error(DT_ERR_SHAPE,
                        "%s: logits (N, C, ...) and target (N, ...) expected, got "
                        "%d-D logits and a %d-D target that do not match",
                        name, x->ndim, t->ndim);
    op_out stats = stats_spec(x, t);
    for (int i = 2; i < n; i++) {
        int ok = i == 3 ? same_shape(&in[i], t) : in[i].ndim == stats.ndim;
        for (int d = 0; i == 2 && ok && d < stats.ndim; d++)
            ok = in[i].shape[d] == stats.shape[d];
        if (!ok || in[i].dtype != x->dtype)
            return dt_error(DT_ERR_SHAPE, "%s: %s must be %s of the logits' dtype %s", name,
                            xent_names[i], i == 2 ? "(target's shape..., 2)" : "target's shape",
                            dt_dtype_name(x->dtype));
    }
    *out = op == DT_OP_LOG_SOFTMAX_PICK ? spec_of(t, x->dtype) : spec_of(x, x->dtype);
    return DT_OK;
}

static dt_status infer_rms(const op_input *in, const dt_op_args *a, op_out *out) {
    const op_input *x = &in[0], *w = &in[2];
    op_out o;
    DT_CHECK(infer_silu(DT_OP_RMS_NORM_RESIDUAL, in, 2, &o));
    if (x->ndim < 1)
        return dt_error(DT_ERR_SHAPE, "rms_norm_residual: x must have at least one dim");
    if (w->ndim != 1 || w->shape[0] != x->shape[x->ndim - 1] || w->dtype != x->dtype)
        return dt_error(DT_ERR_SHAPE, "rms_norm_residual: weight must be (%lld) of x's dtype %s",
                        (long long)x->shape[x->ndim - 1], dt_dtype_name(x->dtype));
    if (!(a->scalar >= 0)) /* 0: the default 1e-5, as rms_norm's */
        return dt_error(DT_ERR_ARG, "rms_norm_residual: eps = %g must be > 0", a->scalar);
    *out = o;
    return DT_OK;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    if (op == DT_OP_RMS_NORM_RESIDUAL) {
        if (n != 3)
            return dt_error(DT_ERR_ARG,
                            "rms_norm_residual: takes x, residual, weight, got %d "
                            "inputs",
                            n);
        return infer_rms(in, a, out);
    }
    int want = op == DT_OP_SILU_MUL || op == DT_OP_LOG_SOFTMAX_PICK ? 2
               : op == DT_OP_SILU_MUL_BACKWARD                      ? 3
                                                                    : 4;
    if (n != want)
        return dt_error(DT_ERR_ARG, "%s: takes %d inputs, got %d", dt_op_name(op), want, n);
    return is_xent(op) ? infer_xent(op, in, n, out) : infer_silu(op, in, n, out);
}

/* silu_mul_backward's dup (up's spec), log_softmax_pick's stats (the output's spec plus a
 * trailing 2, never sharded) and rms_norm_residual's sum (x's spec). */
static int aux(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *o, int *for_grad) {
    (void)n, (void)a;
    if (op == DT_OP_SILU_MUL_BACKWARD) {
        o[0] = spec_of(&in[1], in[1].dtype);
        *for_grad = 0;
        return 1;
    }
    if (op == DT_OP_RMS_NORM_RESIDUAL) { /* the sum, always: it is the residual stream */
        o[0] = spec_of(&in[0], in[0].dtype);
        *for_grad = 0;
        return 1;
    }
    if (op == DT_OP_LOG_SOFTMAX_PICK) {
        o[0] = stats_spec(&in[0], &in[1]);
        *for_grad = 1;
        return 1;
    }
    return 0;
}

/* Replicated, or every input sharded on the same dim (the logits' dim d is the per-row
 * tensors' dim d - 1 past the class dim 1, which never shards). */
static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)a, (void)mesh_size, (void)mesh_total;
    int k = 0;
    rule_row r = {.out = RP};
    for (int i = 0; i < n; i++)
        r.in[i] = RP;
    rows[k++] = r;
    if (op == DT_OP_RMS_NORM_RESIDUAL) { /* rows whole: every dim but the last, weight R */
        for (int d = 0; d + 1 < in[0].ndim && k < DT_OP_MAX_ROWS; d++)
            rows[k++] = (rule_row){.in = {SP(d), SP(d), RP}, .out = SP(d)};
        return k;
    }
    for (int d = 0; d < in[0].ndim && k < DT_OP_MAX_ROWS; d++) {
        if (is_xent(op) && d == 1) continue;
        int dr = is_xent(op) && d > 1 ? d - 1 : d; /* the per-row tensors' dim */
        r.in[0] = SP(d);
        for (int i = 1; i < n; i++)
            r.in[i] = SP(is_xent(op) ? dr : d);
        r.out = SP(op == DT_OP_LOG_SOFTMAX_PICK ? dr : d);
        rows[k++] = r;
    }
    return k;
}

static dt_status compute(local_call *c) {
    const dt_local *in = c->in;
    switch (c->op) {
    case DT_OP_SILU_MUL:
        return c->k->silu_mul(&in[0], &in[1], &c->out);
    case DT_OP_SILU_MUL_BACKWARD:
        return c->k->silu_mul_backward(&in[0], &in[1], &in[2], &c->out, &c->aux[0]);
    case DT_OP_RMS_NORM_RESIDUAL:
        return c->k->rms_norm_residual(c->args->scalar > 0 ? c->args->scalar : 1e-5, &in[0], &in[1],
                                       &in[2], &c->out, &c->aux[0]);
    case DT_OP_LOG_SOFTMAX_PICK:
        return c->k->log_softmax_pick(&in[0], &in[1], &c->out, c->naux ? &c->aux[0] : NULL);
    default:
        return c->k->log_softmax_pick_backward(&in[0], &in[1], &in[2], &in[3], &c->out);
    }
}

/* rms_norm_residual records as sum = add(x, residual), then out = rms_norm(sum, weight): the
 * graph of the unfused ops, so the sum (the next residual) gets its own gradient. */
static int record_as(dt_op op, const dt_op_args *a, op_record_step *steps) {
    if (op != DT_OP_RMS_NORM_RESIDUAL) return 0;
    steps[0] = (op_record_step){.op = DT_OP_ADD, .n = 2, .in = {0, 1}, .out = 1};
    steps[1] = (op_record_step){
        .op = DT_OP_RMS_NORM, .n = 2, .in = {-2, 2}, .out = 0, .args = {.scalar = a->scalar}};
    return 2;
}

const op_family dt_family_fused = {
    .infer = infer,
    .rules = rules,
    .compute = compute,
    .aux = aux,
    .record_as = record_as,
};

/* ---- wrappers ----------------------------------------------------------------------------- */

dt_status dt_silu_mul(dt_tensor *gate, dt_tensor *up, dt_tensor **out) {
    dt_tensor *in[2] = {gate, up};
    return dt_op_call(DT_OP_SILU_MUL, in, 2, NULL, out);
}

dt_status dt_silu_mul_backward(dt_tensor *gate, dt_tensor *up, dt_tensor *grad, dt_tensor **dgate,
                               dt_tensor **dup) {
    DT_ARG_NOT_NULL(dup);
    dt_tensor *in[3] = {gate, up, grad};
    return dt_op_call_aux(DT_OP_SILU_MUL_BACKWARD, in, 3, NULL, dgate, dup, 1);
}

dt_status dt_log_softmax_pick(dt_tensor *logits, dt_tensor *target, dt_tensor **out,
                              dt_tensor **stats) {
    dt_tensor *in[2] = {logits, target};
    if (!stats) return dt_op_call(DT_OP_LOG_SOFTMAX_PICK, in, 2, NULL, out);
    return dt_op_call_aux(DT_OP_LOG_SOFTMAX_PICK, in, 2, NULL, out, stats, 1);
}

dt_status dt_log_softmax_pick_backward(dt_tensor *logits, dt_tensor *target, dt_tensor *stats,
                                       dt_tensor *grad, dt_tensor **out) {
    dt_tensor *in[4] = {logits, target, stats, grad};
    return dt_op_call(DT_OP_LOG_SOFTMAX_PICK_BACKWARD, in, 4, NULL, out);
}

dt_status dt_rms_norm_residual(dt_tensor *x, dt_tensor *residual, dt_tensor *weight, double eps,
                               dt_tensor **out, dt_tensor **sum) {
    DT_ARG_NOT_NULL(sum);
    DT_ARG(eps > 0, "dt_rms_norm_residual: eps = %g must be > 0", eps);
    dt_tensor *in[3] = {x, residual, weight};
    dt_op_args a = {.scalar = eps};
    return dt_op_call_aux(DT_OP_RMS_NORM_RESIDUAL, in, 3, &a, out, sum, 1);
}

/* ---- backward rules ----------------------------------------------------------------------- */

/* One silu_mul_backward call, sharded as the forward was: dgate and dup in one pass. */
dt_status dt_grad_silu_mul(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *g[2] = {0};
    DT_CHECK(dt_silu_mul_backward(IN(0), IN(1), c->grad, &g[0], &g[1]));
    for (int i = 0; i < 2; i++) {
        if (c->need[i])
            gin[i] = g[i];
        else
            dt_tensor_release(g[i]);
    }
    return DT_OK;
}

/* From the row stats the forward saved (max, 1 / sum exp): onehot - softmax, times the row's
 * gradient, written once into a logits-shaped gradient. Class ids get none. */
dt_status dt_grad_log_softmax_pick(const dt_grad_call *c, dt_tensor **gin) {
    if (c->nsaved < 1)
        return dt_error(DT_ERR_ARG, "dt_backward: log_softmax_pick saved no row stats");
    if (!c->need[0]) return DT_OK;
    return dt_log_softmax_pick_backward(IN(0), IN(1), c->saved[0], c->grad, &gin[0]);
}
