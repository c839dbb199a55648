/* cat: tensors joined along one dim. That dim must be whole on every rank (its pieces come
 * from different inputs); the other dims shard alike in every input; Partial passes through. */
#include <string.h>

#include "core/box.h"
#include "core/check.h"
#include "ops/op_impl.h"

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)op;
    int d = dt_norm_dim(a->dim, in[0].ndim);
    if (d < 0) return dt_error(DT_ERR_ARG, "cat: dim = %d out of range", a->dim);
    *out = (op_out){.ndim = in[0].ndim, .dtype = in[0].dtype};
    memcpy(out->shape, in[0].shape, sizeof(int64_t) * (size_t)in[0].ndim);
    for (int i = 1; i < n; i++) {
        if (in[i].ndim != in[0].ndim || in[i].dtype != in[0].dtype)
            return dt_error(DT_ERR_SHAPE, "cat: input %d differs from input 0 in dims or dtype", i);
        for (int k = 0; k < in[0].ndim; k++)
            if (k != d && in[i].shape[k] != in[0].shape[k])
                return dt_error(DT_ERR_SHAPE, "cat: input %d has size %lld in dim %d, input 0 has "
                                              "%lld", i, (long long)in[i].shape[k], k,
                                (long long)in[0].shape[k]);
        out->shape[d] += in[i].shape[d];
    }
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)mesh_size, (void)mesh_total;
    int d = dt_norm_dim(a->dim, in[0].ndim), k = 0;
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN};
    rows[k] = (rule_row){.out = RP};
    for (int i = 0; i < n; i++) rows[k].in[i] = RP;
    k++;
    for (int p = 0; p < 4; p++, k++) {
        rows[k].out = PP(ops[p]);
        for (int i = 0; i < n; i++) rows[k].in[i] = PP(ops[p]);
    }
    for (int s = 0; s < in[0].ndim; s++) {
        if (s == d) continue;
        rows[k].out = SP(s);
        for (int i = 0; i < n; i++) rows[k].in[i] = SP(s);
        k++;
    }
    return k;
}

static dt_status compute(local_call *c) {
    int d = dt_norm_dim(c->args->dim, c->out.ndim);
    int64_t off[DT_MAX_NDIM] = {0};
    dt_status st = DT_OK;
    for (int i = 0; i < c->ninputs && st == DT_OK; i++) {
        st = c->mem->box_copy(c->out.data, c->out.shape, off, c->in[i].data, c->in[i].shape, NULL,
                              c->in[i].shape, c->out.ndim, dt_dtype_size(c->out.dtype));
        off[d] += c->in[i].shape[d];
    }
    return st;
}

const op_family dt_family_cat = {
    .infer = infer, .rules = rules,
    .compute = compute,
};
