/* cat and stack: tensors joined along one dim (stack: along a new dim, each input one slice
 * of it). That dim must be whole on every rank (its pieces come from different inputs); the
 * other dims shard alike in every input; Partial passes through. Copies only, no kernel. */
#include <string.h>

#include "core/box.h"
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

/* The joined dim of the output: stack's new dim ranges over ndim + 1 positions. */
static int join_dim(dt_op op, const dt_op_args *a, int ndim) {
    return dt_norm_dim(a->dim, op == DT_OP_STACK ? ndim + 1 : ndim);
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    const char *name = dt_op_name(op);
    int stack = op == DT_OP_STACK, d = join_dim(op, a, in[0].ndim);
    if (d < 0 || (stack && in[0].ndim == DT_MAX_NDIM))
        return dt_error(DT_ERR_ARG, "%s: dim = %d out of range for %d-D inputs", name, a->dim,
                        in[0].ndim);
    for (int i = 1; i < n; i++) {
        if (in[i].ndim != in[0].ndim || in[i].dtype != in[0].dtype)
            return dt_error(DT_ERR_SHAPE, "%s: input %d differs from input 0 in dims or dtype",
                            name, i);
        for (int k = 0; k < in[0].ndim; k++)
            if ((stack || k != d) && in[i].shape[k] != in[0].shape[k])
                return dt_error(DT_ERR_SHAPE, "%s: input %d has size %lld in dim %d, input 0 "
                                              "has %lld", name, i, (long long)in[i].shape[k], k,
                                (long long)in[0].shape[k]);
    }
    *out = (op_out){.ndim = in[0].ndim + stack, .dtype = in[0].dtype};
    for (int k = 0, j = 0; k < out->ndim; k++) /* stack: (A, B) -> (A, n, B) at d = 1 */
        out->shape[k] = stack && k == d ? n : in[0].shape[j++];
    if (!stack)
        for (int i = 1; i < n; i++) out->shape[d] += in[i].shape[d];
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)mesh_size, (void)mesh_total;
    int stack = op == DT_OP_STACK, d = join_dim(op, a, in[0].ndim), k = 0;
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN};
    rows[k] = (rule_row){.out = RP};
    for (int i = 0; i < n; i++) rows[k].in[i] = RP;
    k++;
    for (int p = 0; p < 4; p++, k++) {
        rows[k].out = PP(ops[p]);
        for (int i = 0; i < n; i++) rows[k].in[i] = PP(ops[p]);
    }
    for (int s = 0; s < in[0].ndim; s++) {
        if (!stack && s == d) continue;
        rows[k].out = SP(stack && s >= d ? s + 1 : s); /* stack: dims from d on move right */
        for (int i = 0; i < n; i++) rows[k].in[i] = SP(s);
        k++;
    }
    return k;
}

static dt_status compute(local_call *c) {
    int stack = c->op == DT_OP_STACK, d = join_dim(c->op, c->args, c->in[0].ndim);
    int64_t off[DT_MAX_NDIM] = {0}, shape[DT_MAX_NDIM];
    dt_status st = DT_OK;
    for (int i = 0; i < c->ninputs && st == DT_OK; i++) {
        /* stack: input i is the block of size 1 at index i of the new dim */
        for (int k = 0, j = 0; k < c->out.ndim; k++)
            shape[k] = stack && k == d ? 1 : c->in[i].shape[j++];
        st = c->mem->box_copy(c->out.data, c->out.shape, off, c->in[i].data, shape, NULL, shape,
                              c->out.ndim, dt_dtype_size(c->out.dtype));
        off[d] += shape[d];
    }
    return st;
}

const op_family dt_family_cat = {
    .infer = infer, .rules = rules,
    .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* The gradients of the inputs that want one, from pieces (n new tensors, consumed). */
static void keep_needed(const dt_grad_call *c, dt_tensor **pieces, dt_tensor **gin) {
    for (int i = 0; i < c->n; i++) {
        if (c->need[i])
            gin[i] = pieces[i];
        else
            dt_tensor_release(pieces[i]);
    }
}

/* g split along dim into the inputs' sizes (one move of g when dim is sharded). */
dt_status dt_grad_cat(const dt_grad_call *c, dt_tensor **gin) {
    int d = dt_norm_dim(c->args->dim, IN(0)->ndim);
    int64_t sizes[DT_GRAD_MAX_INPUTS];
    dt_tensor *pieces[DT_GRAD_MAX_INPUTS];
    for (int i = 0; i < c->n; i++)
        sizes[i] = IN(i)->shape[d];
    DT_CHECK(dt_split(c->grad, d, sizes, c->n, pieces));
    keep_needed(c, pieces, gin);
    return DT_OK;
}

/* g unbound along the new dim. */
dt_status dt_grad_stack(const dt_grad_call *c, dt_tensor **gin) {
    int d = dt_norm_dim(c->args->dim, IN(0)->ndim + 1);
    dt_tensor *pieces[DT_GRAD_MAX_INPUTS];
    DT_CHECK(dt_unbind(c->grad, d, c->n, pieces));
    keep_needed(c, pieces, gin);
    return DT_OK;
}
