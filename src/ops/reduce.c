/* Reductions over dims: sum, mean, amax, amin, argmax, argmin. A reduced dim that is sharded
 * leaves a Partial of the matching kind (mean only where every shard has the same size, so
 * the average of averages is the average); argmax/argmin need their dim whole, so the index
 * is exact. Other dims keep their shards. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_arg(dt_op op) { return op == DT_OP_ARGMAX || op == DT_OP_ARGMIN; }

/* max and min reduce values exactly like amax and amin. */
static dt_op canonical(dt_op op) {
    return op == DT_OP_MAX ? DT_OP_AMAX : op == DT_OP_MIN ? DT_OP_AMIN : op;
}

/* Bit d set when dim d is reduced. */
static dt_status reduced_mask(dt_op op, const op_input *x, const dt_op_args *a, unsigned *mask) {
    if (is_arg(op)) {
        int d = dt_norm_dim(a->dim, x->ndim);
        if (d < 0)
            return dt_error(DT_ERR_ARG, "%s: dim = %d is out of range for a %d-D tensor",
                            dt_op_name(op), a->dim, x->ndim);
        *mask = 1u << d;
        return DT_OK;
    }
    if (a->ndims == 0) {
        *mask = (1u << x->ndim) - 1;
        return DT_OK;
    }
    *mask = 0;
    for (int i = 0; i < a->ndims; i++) {
        int d = dt_norm_dim(a->dims[i], x->ndim);
        if (d < 0)
            return dt_error(DT_ERR_ARG, "%s: dims[%d] = %d is out of range for a %d-D tensor",
                            dt_op_name(op), i, a->dims[i], x->ndim);
        if (*mask & (1u << d))
            return dt_error(DT_ERR_ARG, "%s: dims[%d] = %d repeats dim %d (each dim may appear "
                                        "once)", dt_op_name(op), i, a->dims[i], d);
        *mask |= 1u << d;
    }
    return DT_OK;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    if (n != 1) return dt_error(DT_ERR_ARG, "%s: takes 1 input, got %d", dt_op_name(op), n);
    unsigned mask;
    DT_CHECK(reduced_mask(op, &in[0], a, &mask));
    out->ndim = 0;
    for (int d = 0; d < in[0].ndim; d++) {
        if (!(mask & (1u << d))) out->shape[out->ndim++] = in[0].shape[d];
        else if (a->keepdim) out->shape[out->ndim++] = 1;
    }
    out->dtype = is_arg(op) ? DT_I64 : in[0].dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)n, (void)mesh_size;
    op = canonical(op);
    unsigned mask;
    if (reduced_mask(op, &in[0], a, &mask) != DT_OK) return 0;
    int k = 0;
    rows[k++] = (rule_row){.in = {RP}, .out = RP};
    for (int d = 0, od = 0; d < in[0].ndim; d++) {
        int kept = !(mask & (1u << d)) || a->keepdim;
        if (!(mask & (1u << d))) {
            rows[k++] = (rule_row){.in = {SP(d)}, .out = SP(od)};
        } else if (op == DT_OP_SUM) {
            rows[k++] = (rule_row){.in = {SP(d)}, .out = PP(DT_REDUCE_SUM)};
        } else if (op == DT_OP_MEAN && in[0].shape[d] % mesh_total == 0) {
            rows[k++] = (rule_row){.in = {SP(d)}, .out = PP(DT_REDUCE_AVG)};
        } else if (op == DT_OP_AMAX || op == DT_OP_AMIN) {
            rows[k++] = (rule_row){.in = {SP(d)}, .out = PP(op == DT_OP_AMAX ? DT_REDUCE_MAX : DT_REDUCE_MIN)};
        }
        od += kept;
    }
    if (op == DT_OP_SUM || op == DT_OP_MEAN) {
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_SUM)}, .out = PP(DT_REDUCE_SUM)};
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_AVG)}, .out = PP(DT_REDUCE_AVG)};
    }
    if (op == DT_OP_AMAX) rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MAX)}, .out = PP(DT_REDUCE_MAX)};
    if (op == DT_OP_AMIN) rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MIN)}, .out = PP(DT_REDUCE_MIN)};
    return k;
}

static dt_status compute(local_call *c) {
    unsigned mask;
    DT_CHECK(reduced_mask(c->op, &c->global[0], c->args, &mask));
    /* Kernels write the keepdim form; dropping size-1 dims does not move data. */
    dt_local out = {.data = c->out.data, .dtype = c->out.dtype, .ndim = c->in[0].ndim};
    for (int d = 0; d < out.ndim; d++) out.shape[d] = (mask & (1u << d)) ? 1 : c->in[0].shape[d];
    if (is_arg(c->op))
        return c->k->arg_reduce(c->op == DT_OP_ARGMAX, __builtin_ctz(mask), 0, &c->in[0], &out,
                                 NULL);
    static const dt_reduce_op kind[DT_OP_COUNT] = {[DT_OP_SUM] = DT_REDUCE_SUM,
                                                   [DT_OP_MEAN] = DT_REDUCE_AVG,
                                                   [DT_OP_AMAX] = DT_REDUCE_MAX,
                                                   [DT_OP_AMIN] = DT_REDUCE_MIN};
    return c->k->reduce(kind[canonical(c->op)], mask, &c->in[0], &out);
}

const op_family dt_family_reduce = {
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* g of a reduction over args' dims, brought back to x's shape (keepdim form, then expanded),
 * times scale (1 for sum, 1/count for mean). */
static dt_status unreduce(const dt_grad_call *c, double scale, dt_tensor **out) {
    dt_tensor *x = IN(0);
    int64_t kept[DT_MAX_NDIM];
    unsigned mask = 0;
    for (int i = 0; i < c->args->ndims; i++) {
        int d = c->args->dims[i] < 0 ? c->args->dims[i] + x->ndim : c->args->dims[i];
        mask |= 1u << d;
    }
    if (!c->args->ndims) mask = (1u << x->ndim) - 1;
    double count = 1;
    for (int d = 0; d < x->ndim; d++) {
        kept[d] = mask & (1u << d) ? 1 : x->shape[d];
        if (mask & (1u << d)) count *= (double)x->shape[d];
    }
    /* x sharded along a reduced dim (loss parallel's sum over the class shards): g lands in x's
     * own shards, zeros of x's spec plus g broadcast (a local add), where an expand of the
     * Replicate g would write every class on every rank for the next op to slice. */
    int lands = 0;
    for (int m = 0; m < dt_mesh_ndim(x->mesh); m++)
        lands |= x->placements[m].kind == DT_PLACEMENT_SHARD && (mask >> x->placements[m].dim & 1);
    dt_tensor *k = NULL, *e = NULL;
    dt_status st = dt_view(c->grad, x->ndim, kept, &k);
    if (st == DT_OK && lands && x->dtype == c->grad->dtype) {
        dt_tensor *z = NULL;
        st = dt_tensor_zeros_like(x, &z);
        if (st == DT_OK) st = dt_add(z, k, &e);
        dt_tensor_release(z);
    } else if (st == DT_OK) {
        st = dt_expand(k, x->ndim, x->shape, &e);
    }
    dt_tensor_release(k);
    if (st != DT_OK) return st;
    if (scale == 1) {
        *out = e;
        return DT_OK;
    }
    st = dt_mul_scalar(e, scale < 0 ? 1 / count : scale, out);
    dt_tensor_release(e);
    return st;
}

static dt_status extremum(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *x = IN(0);
    dt_tensor *hit = chain2(&ch, dt_eq, x, dt_grad_reduce_kept(&ch, c, c->op, x));
    return chain_end1(&ch, dt_grad_split_among(&ch, c, hit, NULL), gin);
}

dt_status dt_grad_sum(const dt_grad_call *c, dt_tensor **gin) {
    return unreduce(c, 1, &gin[0]);
}

dt_status dt_grad_mean(const dt_grad_call *c, dt_tensor **gin) {
    return unreduce(c, -1, &gin[0]);
}

dt_status dt_grad_amax(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}

dt_status dt_grad_amin(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}

dt_status dt_grad_max(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}

dt_status dt_grad_min(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, gin);
}
