/* layer_norm_backward and rms_norm_backward: the norms' gradients in one kernel pass (the
 * kernel table's layer_norm_backward), which their backward rules (norm.c) call. gx shards as
 * x's rows do; the weight's and bias's gradients, sums over the rows, come out Partial(sum)
 * wherever the rows are sharded, as the composite's sum over the leading dims left them. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static const char *const input_names[] = {"x", "weight", "grad"};

/* The normalised trailing dims: args.ndims, else the weight's ndim, else 1. */
static int norm_k(const op_input *in, int n, const dt_op_args *a) {
    if (a->ndims > 0) return a->ndims;
    return n > 1 && in[1].ndim > 0 ? in[1].ndim : 1;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    const char *name = dt_op_name(op);
    if (n != 3)
        return dt_error(DT_ERR_ARG, "%s: takes x, weight (nullable), grad, got %d inputs", name, n);
    const op_input *x = &in[0];
    dt_dtype t = x->dtype;
    if (t != DT_F32 && t != DT_F64 && t != DT_BF16 && t != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: x must be a float dtype, got %s", name,
                        dt_dtype_name(t));
    int k = norm_k(in, n, a);
    if (a->ndims < 0 || k > x->ndim || x->ndim < 1)
        return dt_error(DT_ERR_SHAPE, "%s: ndims = %d normalised dims of a %d-D x", name, k,
                        x->ndim);
    for (int i = 1; i < 3; i++) {
        if (in[i].ndim < 0) continue; /* no weight */
        int want = i == 1 ? k : x->ndim, ok = in[i].ndim == want && in[i].dtype == t;
        for (int d = 0; ok && d < want; d++)
            ok = in[i].shape[d] == x->shape[x->ndim - want + d];
        if (!ok)
            return dt_error(DT_ERR_SHAPE, "%s: %s must have x's last %d dims' shape and dtype %s",
                            name, input_names[i], want, dt_dtype_name(t));
    }
    if (in[2].ndim < 0) return dt_error(DT_ERR_ARG, "%s: grad is NULL", name);
    *out = (op_out){.ndim = x->ndim, .dtype = t};
    for (int d = 0; d < x->ndim; d++)
        out->shape[d] = x->shape[d];
    return DT_OK;
}

/* Replicated, or x and grad sharded alike on a dim before the normalised ones (weight R). Every
 * output is linear in grad, so a pending sum (or mean) of grad stays pending (x and the weight
 * replicated): a tensor-parallel block's grad, Partial after its column-parallel linears, is
 * reduced once later, as the unfused rule's ops left it. */
static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)mesh_size, (void)mesh_total;
    int k = 0, nd = in[0].ndim - norm_k(in, n, a);
    rows[k++] = (rule_row){.in = {RP, RP, RP}, .out = RP};
    rows[k++] = (rule_row){.in = {RP, RP, PP(DT_REDUCE_SUM)}, .out = PP(DT_REDUCE_SUM)};
    rows[k++] = (rule_row){.in = {RP, RP, PP(DT_REDUCE_AVG)}, .out = PP(DT_REDUCE_AVG)};
    for (int d = 0; d < nd && k < DT_OP_MAX_ROWS; d++)
        rows[k++] = (rule_row){.in = {SP(d), RP, SP(d)}, .out = SP(d)};
    return k;
}

/* gw and, for layer norm, gb: the normalised dims' shape, summed over the rows (Partial where
 * the rows are sharded; pending as gx where grad is). */
static int aux(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *o, int *for_grad) {
    int k = norm_k(in, n, a), na = op == DT_OP_LAYER_NORM_BACKWARD ? 2 : 1;
    for (int i = 0; i < na; i++) {
        o[i] = (op_out){.ndim = k, .dtype = in[0].dtype, .sums_rows = true};
        for (int d = 0; d < k; d++)
            o[i].shape[d] = in[0].shape[in[0].ndim - k + d];
    }
    *for_grad = 0;
    return na;
}

/* The kernel normalises the last dim: the k normalised dims (whole here) merge into one. */
static dt_status compute(local_call *c) {
    int k = norm_k(c->global, c->ninputs, c->args), d = c->in[0].ndim - k;
    int64_t H = 1;
    for (int j = d; j < c->in[0].ndim; j++)
        H *= c->in[0].shape[j];
    dt_local x = c->in[0], g = c->in[2], gx = c->out, w = {0}, gw = {0}, gb = {0};
    dt_local *flat[] = {&x, &g, &gx};
    for (int i = 0; i < 3; i++)
        flat[i]->shape[d] = H, flat[i]->ndim = d + 1;
    dt_local *row[] = {&w, &gw, &gb};
    const dt_local *src[] = {&c->in[1], &c->aux[0], c->naux > 1 ? &c->aux[1] : NULL};
    for (int i = 0; i < 3; i++) {
        if (!src[i] || !src[i]->data) continue;
        *row[i] = *src[i];
        row[i]->ndim = 1, row[i]->shape[0] = H;
    }
    double eps = c->args->scalar > 0 ? c->args->scalar : 1e-5;
    return c->k->layer_norm_backward(c->op == DT_OP_RMS_NORM_BACKWARD, eps, &x, w.data ? &w : NULL,
                                     &g, &gx, gw.data ? &gw : NULL, gb.data ? &gb : NULL);
}

const op_family dt_family_norm_backward = {
    .optional = 2u, /* weight */
    .infer = infer,
    .rules = rules,
    .compute = compute,
    .aux = aux,
};

/* ---- wrappers ----------------------------------------------------------------------------- */

static dt_status call(dt_op op, dt_tensor *x, dt_tensor *weight, dt_tensor *grad, double eps,
                      int ndims, dt_tensor **gx, dt_tensor **aux, int naux) {
    DT_ARG_NOT_NULL(x);
    DT_ARG_NOT_NULL(grad);
    DT_ARG(eps >= 0, "%s: eps = %g must be >= 0 (0: the default 1e-5)", dt_op_name(op), eps);
    DT_ARG(ndims >= 0, "%s: ndims = %d must be >= 0 (0: the weight's, else 1)", dt_op_name(op),
           ndims);
    dt_tensor *in[3] = {x, weight, grad};
    dt_op_args a = {.scalar = eps, .ndims = ndims};
    return dt_op_call_aux(op, in, 3, &a, gx, aux, naux);
}

dt_status dt_layer_norm_backward(dt_tensor *x, dt_tensor *weight, dt_tensor *grad, double eps,
                                 int ndims, dt_tensor **gx, dt_tensor **gw, dt_tensor **gb) {
    DT_ARG_NOT_NULL(gw);
    DT_ARG_NOT_NULL(gb);
    dt_tensor *ax[2] = {0};
    DT_CHECK(call(DT_OP_LAYER_NORM_BACKWARD, x, weight, grad, eps, ndims, gx, ax, 2));
    *gw = ax[0], *gb = ax[1];
    return DT_OK;
}

dt_status dt_rms_norm_backward(dt_tensor *x, dt_tensor *weight, dt_tensor *grad, double eps,
                               int ndims, dt_tensor **gx, dt_tensor **gw) {
    DT_ARG_NOT_NULL(gw);
    return call(DT_OP_RMS_NORM_BACKWARD, x, weight, grad, eps, ndims, gx, gw, 1);
}
