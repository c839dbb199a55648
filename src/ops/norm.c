/* softmax, log_softmax, layer_norm, rms_norm: each row along the normalised dims must be whole
 * on one rank, so only the other dims may stay sharded; nothing here is linear. The norms
 * normalise the last k dims (torch's normalized_shape): k is args.ndims (0: 1), or the
 * weight's (or bias's) ndim when one is given. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_norm(dt_op op) { return op == DT_OP_LAYER_NORM || op == DT_OP_RMS_NORM; }

/* The number of normalised trailing dims; 0 when args and the weight/bias disagree. */
static int norm_k(dt_op op, const op_input *in, int n, const dt_op_args *a) {
    if (!is_norm(op)) return 1;
    int k = a->ndims > 0 ? a->ndims : 0;
    for (int i = 1; i < n; i++) {
        if (in[i].ndim < 0) continue;
        if (k && in[i].ndim != k) return 0;
        k = in[i].ndim;
    }
    return k ? k : 1;
}

/* The first normalised dim. */
static int norm_dim(dt_op op, const op_input *in, int n, const dt_op_args *a) {
    if (is_norm(op)) return in[0].ndim - norm_k(op, in, n, a);
    return dt_norm_dim(a->dim, in[0].ndim);
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    int maxin = op == DT_OP_LAYER_NORM ? 3 : op == DT_OP_RMS_NORM ? 2 : 1;
    if (n < 1 || n > maxin)
        return dt_error(DT_ERR_ARG, "%s: takes 1 to %d inputs, got %d", dt_op_name(op), maxin, n);
    const op_input *x = &in[0];
    if (is_norm(op)) {
        if (a->ndims < 0 || a->ndims > x->ndim)
            return dt_error(DT_ERR_SHAPE, "%s: ndims = %d normalised dims of a %d-D input",
                            dt_op_name(op), a->ndims, x->ndim);
        if (!norm_k(op, in, n, a))
            return dt_error(DT_ERR_SHAPE, "%s: ndims = %d but the weight/bias is %d-D",
                            dt_op_name(op), a->ndims, in[1].ndim >= 0 ? in[1].ndim : in[2].ndim);
    }
    int d = norm_dim(op, in, n, a);
    if (x->ndim < 1 || d < 0)
        return dt_error(is_norm(op) ? DT_ERR_SHAPE : DT_ERR_ARG,
                        "%s: dim = %d is out of range for a %d-D tensor", dt_op_name(op),
                        is_norm(op) ? d : a->dim, x->ndim);
    if (x->dtype == DT_I32 || x->dtype == DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: needs a float input, got %s", dt_op_name(op),
                        dt_dtype_name(x->dtype));
    for (int i = 1; i < n; i++) {
        if (in[i].ndim < 0) continue;
        int ok = in[i].dtype == x->dtype;
        for (int j = 0; j < in[i].ndim && ok; j++) ok = in[i].shape[j] == x->shape[d + j];
        if (!ok)
            return dt_error(DT_ERR_SHAPE, "%s: %s must have x's last %d dims' shape and dtype %s",
                            dt_op_name(op), i == 1 ? "weight" : "bias", x->ndim - d,
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
    int k = 0, nd = norm_dim(op, in, n, a);
    rows[k] = (rule_row){.out = RP};
    for (int i = 0; i < n; i++) rows[k].in[i] = RP;
    k++;
    for (int d = 0; d < in[0].ndim; d++) {
        if (d == nd || (is_norm(op) && d > nd)) continue;
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
    /* The kernel normalises the last dim: the last k dims (whole on this rank) merge into one,
     * and the weight and bias flatten to it. */
    op_input g[DT_OP_MAX_INPUTS];
    for (int i = 0; i < c->ninputs; i++) g[i] = c->global[i];
    for (int i = 1; i < c->ninputs; i++)
        if (!c->in[i].data) g[i].ndim = -1;
    int d = norm_dim(c->op, g, c->ninputs, c->args);
    dt_local x = c->in[0], y = c->out, w = {0}, b = {0};
    for (int j = d + 1; j < x.ndim; j++) x.shape[d] *= x.shape[j];
    x.ndim = y.ndim = d + 1;
    y.shape[d] = x.shape[d];
    for (int i = 1; i < c->ninputs; i++) {
        dt_local *p = i == 1 ? &w : &b;
        if (!c->in[i].data) continue;
        *p = c->in[i];
        p->ndim = 1;
        p->shape[0] = x.shape[d];
    }
    return c->k->layer_norm(c->op == DT_OP_RMS_NORM, eps, &x, w.data ? &w : NULL,
                            b.data ? &b : NULL, &y);
}

const op_family dt_family_softmax = {
    .infer = infer, .rules = rules, .compute = compute,
};

const op_family dt_family_norm = {
    .optional = 6u, /* weight and bias */
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* One layer_norm_backward (rms_norm_backward) call: gx, gw = sum(g xhat) and gb = sum(g) over
 * the leading dims in one pass per row (norm_backward.c has the formulas). Sharded as the
 * forward's rows were, it leaves gw and gb Partial(sum) where the rows are sharded. */
static dt_status norm_rule(const dt_grad_call *c, int rms, dt_tensor **gin) {
    dt_tensor *x = IN(0), *w = c->n > 1 ? IN(1) : NULL, *b = c->n > 2 ? IN(2) : NULL;
    int k = c->args->ndims > 0 ? c->args->ndims : w ? w->ndim : b ? b->ndim : 1;
    double eps = c->args->scalar > 0 ? c->args->scalar : 1e-5;
    dt_tensor *g[3] = {0};
    DT_CHECK(rms ? dt_rms_norm_backward(x, w, c->grad, eps, k, &g[0], &g[1])
                 : dt_layer_norm_backward(x, w, c->grad, eps, k, &g[0], &g[1], &g[2]));
    for (int i = 0; i < 3; i++) {
        if (i < c->n && IN(i) && c->need[i])
            gin[i] = g[i];
        else
            dt_tensor_release(g[i]);
    }
    return DT_OK;
}

/* y = softmax(x): gx = y (g - sum(g y)) along dim. */
dt_status dt_grad_softmax(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *t[4] = {0}; /* y, g y, sum, g - sum */
    int dim = c->args->dim;
    dt_status st = dt_softmax(IN(0), dim, &t[0]);
    DO(dt_mul(c->grad, t[0], &t[1]));
    DO(dt_sum(t[1], &dim, 1, 1, &t[2]));
    DO(dt_sub(c->grad, t[2], &t[3]));
    DO(dt_mul(t[0], t[3], &gin[0]));
    dt_grad_release_all(t, 4);
    return dt_grad_finish(c, gin, st);
}

/* y = log_softmax(x): gx = g - softmax(x) sum(g) along dim. */
dt_status dt_grad_log_softmax(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *t[3] = {0}; /* softmax, sum g, product */
    int dim = c->args->dim;
    dt_status st = dt_softmax(IN(0), dim, &t[0]);
    DO(dt_sum(c->grad, &dim, 1, 1, &t[1]));
    DO(dt_mul(t[0], t[1], &t[2]));
    DO(dt_sub(c->grad, t[2], &gin[0]));
    dt_grad_release_all(t, 3);
    return dt_grad_finish(c, gin, st);
}

dt_status dt_grad_layer_norm(const dt_grad_call *c, dt_tensor **gin) {
    return norm_rule(c, 0, gin);
}

dt_status dt_grad_rms_norm(const dt_grad_call *c, dt_tensor **gin) {
    return norm_rule(c, 1, gin);
}
