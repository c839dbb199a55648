/* softmax, log_softmax, layer_norm, rms_norm: each row along the normalised dim must be whole
 * on one rank, so only the other dims may stay sharded; nothing here is linear. */
#include "core/check.h"
#include "ops/op_impl.h"

static int norm_dim(dt_op op, const op_input *x, const dt_op_args *a) {
    if (op == DT_OP_LAYER_NORM || op == DT_OP_RMS_NORM) return x->ndim - 1;
    return dt_norm_dim(a->dim, x->ndim);
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    int maxin = op == DT_OP_LAYER_NORM ? 3 : op == DT_OP_RMS_NORM ? 2 : 1;
    if (n < 1 || n > maxin)
        return dt_error(DT_ERR_ARG, "%s: takes 1 to %d inputs, got %d", dt_op_name(op), maxin, n);
    const op_input *x = &in[0];
    int d = norm_dim(op, x, a);
    if (x->ndim < 1 || d < 0)
        return dt_error(DT_ERR_ARG, "%s: dim = %d is out of range for a %d-D tensor",
                        dt_op_name(op), a->dim, x->ndim);
    if (x->dtype == DT_I32 || x->dtype == DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: needs a float input, got %s", dt_op_name(op),
                        dt_dtype_name(x->dtype));
    for (int i = 1; i < n; i++) {
        if (in[i].ndim < 0) continue;
        if (in[i].ndim != 1 || in[i].shape[0] != x->shape[x->ndim - 1] || in[i].dtype != x->dtype)
            return dt_error(DT_ERR_SHAPE, "%s: %s must be 1-D of size %lld and %s", dt_op_name(op),
                            i == 1 ? "weight" : "bias", (long long)x->shape[x->ndim - 1],
                            dt_dtype_name(x->dtype));
    }
    out->ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) out->shape[i] = x->shape[i];
    out->dtype = x->dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)mesh_size, (void)mesh_total;
    int k = 0, nd = norm_dim(op, &in[0], a);
    rows[k] = (rule_row){.out = RP};
    for (int i = 0; i < n; i++) rows[k].in[i] = RP;
    k++;
    for (int d = 0; d < in[0].ndim; d++) {
        if (d == nd) continue;
        rows[k] = (rule_row){.out = SP(d)};
        rows[k].in[0] = SP(d);
        for (int i = 1; i < n; i++) rows[k].in[i] = RP;
        k++;
    }
    return k;
}

static dt_status compute(local_call *c) {
    if (c->op == DT_OP_SOFTMAX || c->op == DT_OP_LOG_SOFTMAX)
        return c->k->softmax(c->op == DT_OP_LOG_SOFTMAX, dt_norm_dim(c->args->dim, c->in[0].ndim),
                              &c->in[0], &c->out);
    double eps = c->args->scalar > 0 ? c->args->scalar : 1e-5;
    const dt_local *w = c->ninputs > 1 && c->in[1].data ? &c->in[1] : NULL;
    const dt_local *b = c->ninputs > 2 && c->in[2].data ? &c->in[2] : NULL;
    return c->k->layer_norm(c->op == DT_OP_RMS_NORM, eps, &c->in[0], w, b, &c->out);
}

const op_family dt_family_softmax = {
    .infer = infer, .rules = rules, .compute = compute,
};

const op_family dt_family_norm = {
    .optional = 6u, /* weight and bias */
    .infer = infer, .rules = rules, .compute = compute,
};
