/* Shape ops: transpose, permute, view/reshape, slice, unsqueeze, squeeze, contiguous. Shards
 * follow their dim where it moves; Partial passes through (pure data movement). A view keeps
 * a shard only where the shard's rows stay one contiguous torch.chunk of the new dim;
 * otherwise the input is redistributed first. ops' own callers view without a copy where the
 * placements stay: on a borrowed block, or on one the input gives up (dt_view_borrowed,
 * dt_view_consume). */
#include <string.h>

#include "core/box.h"
#include "core/check.h"
#include "mesh/mesh_impl.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

/* out dim i = in dim perm[i]. */
static dt_status permutation(dt_op op, const op_input *x, const dt_op_args *a, int *perm) {
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    if (op == DT_OP_TRANSPOSE) {
        int d0 = dt_norm_dim(a->dim, x->ndim), d1 = dt_norm_dim(a->dim2, x->ndim);
        if (x->ndim == 0) return DT_OK;
        if (d0 < 0 || d1 < 0)
            return dt_error(DT_ERR_ARG, "transpose: dims %d and %d out of range for %d-D", a->dim,
                            a->dim2, x->ndim);
        perm[d0] = d1, perm[d1] = d0;
        return DT_OK;
    }
    if (a->ndims != x->ndim)
        return dt_error(DT_ERR_ARG, "permute: %d dims given for a %d-D tensor", a->ndims, x->ndim);
    unsigned seen = 0;
    for (int i = 0; i < x->ndim; i++) {
        int d = dt_norm_dim(a->dims[i], x->ndim);
        if (d < 0 || (seen & (1u << d)))
            return dt_error(DT_ERR_ARG, "permute: dims[%d] = %d is out of range or repeated", i,
                            a->dims[i]);
        seen |= 1u << d;
        perm[i] = d;
    }
    return DT_OK;
}

static dt_status view_shape(const op_input *x, const dt_op_args *a, op_out *out) {
    int64_t numel = (int64_t)dt_shape_numel(x->shape, x->ndim), known = 1;
    int infer = -1;
    if (a->shape_ndim < 0 || a->shape_ndim > DT_MAX_NDIM)
        return dt_error(DT_ERR_ARG, "view: shape_ndim = %d", a->shape_ndim);
    for (int i = 0; i < a->shape_ndim; i++) {
        if (a->shape[i] == -1 && infer >= 0)
            return dt_error(DT_ERR_SHAPE, "view: only one dim may be -1 (inferred), but "
                                          "shape[%d] and shape[%d] both are", infer, i);
        if (a->shape[i] == -1) infer = i;
        else if (a->shape[i] < 0)
            return dt_error(DT_ERR_SHAPE, "view: shape[%d] = %lld is negative (only -1, to "
                                          "infer one dim, is allowed)", i,
                            (long long)a->shape[i]);
        else if (__builtin_mul_overflow(known, a->shape[i], &known)) {
            char text[DT_MAX_NDIM * 21 + 3];
            dt_shape_text(a->shape, a->shape_ndim, text, sizeof text);
            return dt_error(DT_ERR_SHAPE, "view: shape %s has more elements than an int64 "
                                          "counts", text);
        }
    }
    out->ndim = a->shape_ndim;
    for (int i = 0; i < a->shape_ndim; i++) out->shape[i] = a->shape[i];
    if (infer >= 0 && known == 0)
        return dt_error(DT_ERR_SHAPE, "view: shape[%d] = -1 cannot be inferred when the other "
                                      "dims hold 0 elements (any size fits)", infer);
    if (infer >= 0) out->shape[infer] = numel / known;
    if ((int64_t)dt_shape_numel(out->shape, out->ndim) != numel) {
        char text[DT_MAX_NDIM * 21 + 3];
        dt_shape_text(a->shape, a->shape_ndim, text, sizeof text);
        return dt_error(DT_ERR_SHAPE, "view: %lld elements do not fit shape %s",
                        (long long)numel, text);
    }
    return DT_OK;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    if (n != 1) return dt_error(DT_ERR_ARG, "%s: takes 1 input, got %d", dt_op_name(op), n);
    const op_input *x = &in[0];
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    memcpy(out->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    int perm[DT_MAX_NDIM], d = dt_norm_dim(a->dim, x->ndim);
    switch (op) {
    case DT_OP_TRANSPOSE:
    case DT_OP_PERMUTE:
        DT_CHECK(permutation(op, x, a, perm));
        for (int i = 0; i < x->ndim; i++) out->shape[i] = x->shape[perm[i]];
        return DT_OK;
    case DT_OP_VIEW: return view_shape(x, a, out);
    case DT_OP_SLICE:
        if (d < 0 || a->start < 0 || a->end < a->start || a->end > x->shape[d])
            return dt_error(DT_ERR_ARG, "slice: [%lld, %lld) along dim %d does not fit size %lld",
                            (long long)a->start, (long long)a->end, a->dim,
                            d < 0 ? -1ll : (long long)x->shape[d]);
        out->shape[d] = a->end - a->start;
        return DT_OK;
    case DT_OP_UNSQUEEZE:
        d = dt_norm_dim(a->dim, x->ndim + 1);
        if (d < 0 || x->ndim == DT_MAX_NDIM)
            return dt_error(DT_ERR_ARG, "unsqueeze: dim = %d out of range", a->dim);
        out->ndim = x->ndim + 1;
        for (int i = 0, j = 0; i < out->ndim; i++) out->shape[i] = i == d ? 1 : x->shape[j++];
        return DT_OK;
    case DT_OP_EXPAND:
        if (a->shape_ndim < x->ndim || a->shape_ndim > DT_MAX_NDIM)
            return dt_error(DT_ERR_SHAPE, "expand: %d target dims for a %d-D tensor",
                            a->shape_ndim, x->ndim);
        out->ndim = a->shape_ndim;
        for (int i = 0; i < out->ndim; i++) {
            int xi = i - (out->ndim - x->ndim);
            int64_t want = a->shape[i] == -1 && xi >= 0 ? x->shape[xi] : a->shape[i];
            if (want < 0 || (xi >= 0 && x->shape[xi] != 1 && x->shape[xi] != want))
                return dt_error(DT_ERR_SHAPE, "expand: dim %d of size %lld cannot become %lld", xi,
                                xi >= 0 ? (long long)x->shape[xi] : 0ll, (long long)want);
            out->shape[i] = want;
        }
        return DT_OK;
    case DT_OP_SQUEEZE:
        if (d < 0 || x->shape[d] != 1)
            return dt_error(DT_ERR_ARG, "squeeze: dim = %d is not a dim of size 1", a->dim);
        out->ndim = x->ndim - 1;
        for (int i = 0, j = 0; i < x->ndim; i++)
            if (i != d) out->shape[j++] = x->shape[i];
        return DT_OK;
    default: return DT_OK;
    }
}

/* For a view: the output dim that input dim d's shard can become, or -1, when ranks ranks
 * shard d together. Dims are grouped where running products agree; a shard survives on the
 * first dim of a group when its torch.chunk pieces stay whole rows of the other dims: the
 * group's leading input and output dims both divide evenly over the ranks (then each piece is
 * the same contiguous 1/ranks of the group's elements on both sides), or the group is one dim
 * on both sides. Uneven pieces would chunk differently after the view: those redistribute. */
static int view_target(const op_input *x, const op_out *o, int d, int ranks) {
    int i = 0, j = 0;
    while (i < x->ndim && j < o->ndim) {
        int i0 = i, j0 = j;
        int64_t pi = x->shape[i++], pj = o->shape[j++];
        while (pi != pj) {
            if (pi < pj && i < x->ndim) pi *= x->shape[i++];
            else if (j < o->ndim) pj *= o->shape[j++];
            else return -1;
        }
        if (d < i0 || d >= i) continue;
        if (d != i0) return -1; /* only the leading dim of a group keeps its shard */
        if (i - i0 == 1 && j - j0 == 1) return j0;
        if (x->shape[i0] % ranks == 0 && o->shape[j0] % ranks == 0) return j0;
        return -1;
    }
    return -1;
}

/* A view's rows are made per mesh dim (each checks its own mesh dim's size); nested shards of
 * one dim (S(0),S(0)) must divide by the product of the mesh dims sharding it. */
static int view_combine_ok(dt_op op, const op_input *in, int n, const dt_op_args *a,
                           int mesh_ndim, const int *mesh_shape,
                           const dt_placement (*in_pl)[DT_MESH_MAX_NDIM],
                           const dt_placement *out_pl) {
    (void)n, (void)out_pl;
    if (op != DT_OP_VIEW) return 1;
    op_out o;
    if (infer(op, in, 1, a, &o) != DT_OK) return 0;
    for (int d = 0; d < in[0].ndim; d++) {
        int ranks = 1;
        for (int m = 0; m < mesh_ndim; m++)
            if (in_pl[0][m].kind == DT_PLACEMENT_SHARD && in_pl[0][m].dim == d)
                ranks *= mesh_shape[m];
        if (ranks > 1 && view_target(&in[0], &o, d, ranks) < 0) return 0;
    }
    return 1;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)n, (void)mesh_total;
    op_out o;
    if (infer(op, in, 1, a, &o) != DT_OK) return 0;
    const op_input *x = &in[0];
    int k = 0, perm[DT_MAX_NDIM], d0 = dt_norm_dim(a->dim, x->ndim);
    rows[k++] = (rule_row){.in = {RP}, .out = RP};
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN};
    for (int p = 0; p < 4; p++) /* moving or selecting elements commutes with any reduction */
        rows[k++] = (rule_row){.in = {PP(ops[p])}, .out = PP(ops[p])};
    for (int d = 0; d < x->ndim; d++) {
        int to = -1;
        switch (op) {
        case DT_OP_TRANSPOSE:
        case DT_OP_PERMUTE:
            permutation(op, x, a, perm);
            for (int i = 0; i < x->ndim; i++)
                if (perm[i] == d) to = i;
            break;
        case DT_OP_VIEW: to = view_target(x, &o, d, mesh_size); break;
        case DT_OP_SLICE: to = d == d0 ? -1 : d; break;
        case DT_OP_UNSQUEEZE: to = d >= dt_norm_dim(a->dim, x->ndim + 1) ? d + 1 : d; break;
        case DT_OP_SQUEEZE: to = d == d0 ? -1 : d > d0 ? d - 1 : d; break;
        case DT_OP_EXPAND: /* a dim that grows is whole on every rank */
            to = x->shape[d] == o.shape[d + o.ndim - x->ndim] ? d + o.ndim - x->ndim : -1;
            break;
        default: to = d; break;
        }
        if (to >= 0) rows[k++] = (rule_row){.in = {SP(d)}, .out = SP(to)};
    }
    return k;
}

/* The placements a view of x to o keeps with no redistribution, in pl: R and Partial as they
 * are, a shard where view_target keeps it for its mesh dim and for all the mesh dims sharding
 * the same dim together (view_combine_ok's test). 0 when some shard would move. */
static int view_kept(const dt_tensor *x, const op_input *xi, const op_out *o, dt_placement *pl) {
    const dt_mesh *mesh = x->mesh;
    for (int m = 0; m < mesh->ndim; m++) {
        pl[m] = x->placements[m];
        if (pl[m].kind != DT_PLACEMENT_SHARD) continue;
        int d = pl[m].dim, ranks = 1;
        for (int e = 0; e < mesh->ndim; e++)
            if (x->placements[e].kind == DT_PLACEMENT_SHARD && x->placements[e].dim == d)
                ranks *= mesh->shape[e];
        int to = view_target(xi, o, d, mesh->shape[m]);
        if (to < 0 || view_target(xi, o, d, ranks) != to) return 0;
        pl[m].dim = to;
    }
    return 1;
}

/* x viewed as shape on x's own block (take: the view takes it, else borrows it), or on dt_view's
 * copy where x's block cannot serve: dropped or empty, a shard that must move, a borrow in a
 * recording scope (an op there could save the alias in its node, to be read after the caller
 * freed it), a block with another holder to take. */
static dt_status view_on_block(dt_tensor *x, int ndim, const int64_t *shape, bool take,
                               dt_tensor **out) {
    DT_TENSOR_ARG(x);
    bool allowed =
        take ? x->owned && !x->ag && atomic_load_explicit(&x->refs, memory_order_acquire) == 1
             : !dt_ops_grad_on(x->mesh->ctx);
    DT_ARG(ndim >= 0 && ndim <= DT_MAX_NDIM, "dt_view: argument ndim = %d is not in [0, %d]", ndim,
           DT_MAX_NDIM);
    dt_op_args a = {.shape_ndim = ndim};
    if (ndim) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    op_input xi = {.ndim = x->ndim, .shape = x->shape, .dtype = x->dtype};
    op_out o;
    dt_placement pl[DT_MESH_MAX_NDIM];
    if (!allowed || x->dropped || !x->data || !x->local_numel || x->mesh->rank < 0 ||
        view_shape(&xi, &a, &o) != DT_OK || !view_kept(x, &xi, &o, pl))
        return dt_view(x, ndim, shape, out);
    dt_tensor *v;
    DT_CHECK(dt_tensor_new(x->mesh, x->device, x->dtype, o.ndim, o.shape, pl, x->data, false, &v));
    if (v->local_numel != x->local_numel) { /* kept placements chunk alike: a library bug */
        dt_tensor_release(v);
        return dt_error(DT_ERR_SHAPE, "dt_view: a local block of %zu elements became %zu",
                        x->local_numel, v->local_numel);
    }
    v->trace_src = x->trace_src;
    if (take) { /* the block changes hands: the rank's byte count (a sum) stays as it is */
        v->owned = true;
        x->owned = false, x->data = NULL, x->dropped = true; /* a shell, only released now */
    }
    *out = v;
    return DT_OK;
}

dt_status dt_view_borrowed(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out) {
    return view_on_block(x, ndim, shape, false, out);
}

dt_status dt_view_consume(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out) {
    return view_on_block(x, ndim, shape, true, out);
}

/* out = x broadcast to out's shape (stride 0 along the dims that grow). */
static dt_status compute(local_call *c) {
    const dt_local *x = &c->in[0];
    int perm[DT_MAX_NDIM];
    switch (c->op) {
    case DT_OP_TRANSPOSE:
    case DT_OP_PERMUTE:
        DT_CHECK(permutation(c->op, &c->global[0], c->args, perm));
        return c->k->permute(x, perm, &c->out);
    case DT_OP_SLICE: {
        int d = dt_norm_dim(c->args->dim, x->ndim);
        int64_t start[DT_MAX_NDIM] = {0};
        start[d] = c->args->start; /* dim d is whole here: the strategy never shards it */
        return c->k->slice(x, start, &c->out);
    }
    case DT_OP_EXPAND: return c->k->expand(x, &c->out);
    default: /* view, (un)squeeze, contiguous: the local block keeps its memory order */
        return c->mem->copy(c->out.data, x->data,
                            dt_shape_numel(x->shape, x->ndim) * dt_dtype_size(x->dtype));
    }
}

const op_family dt_family_shape = {
    .infer = infer, .rules = rules, .compute = compute, .combine_ok = view_combine_ok,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* The placements of the zeros that pad g along dim d: g's own on every mesh dim cat can keep
 * (R, Partial, a shard of another dim), so the gradient keeps its shards and the zeros cost
 * nothing to join. Where g shards d itself, cat cannot keep that shard (the joined dim is
 * whole on every rank): the zeros are sharded on g's largest other dim that the mesh dim can
 * split, so dispatch can move g there with one all_to_all instead of all_gathering it (it
 * would find that from replicated zeros too, R -> S being local, but sharded zeros are never
 * allocated whole); a g with no such dim (1-D) is joined replicated. */
static void pad_placements(dt_tensor *g, int d, dt_placement *pl) {
    for (int m = 0; m < g->mesh->ndim; m++) {
        pl[m] = g->placements[m];
        if (pl[m].kind != DT_PLACEMENT_SHARD || pl[m].dim != d) continue;
        int best = -1;
        for (int e = 0; e < g->ndim; e++)
            if (e != d && g->shape[e] >= g->mesh->shape[m] &&
                (best < 0 || g->shape[e] > g->shape[best]))
                best = e;
        pl[m] = best >= 0 ? dt_shard(best) : dt_replicate();
    }
}

dt_status dt_grad_contiguous(const dt_grad_call *c, dt_tensor **gin) {
    return dt_grad_add_scalar(c, gin);
}

/* The engine releases the output's gradient after this rule: where it holds the only reference,
 * the input's gradient takes its block instead of a copy. */
dt_status dt_grad_view(const dt_grad_call *c, dt_tensor **gin) {
    return dt_view_consume(c->grad, IN(0)->ndim, IN(0)->shape, &gin[0]);
}

dt_status dt_grad_transpose(const dt_grad_call *c, dt_tensor **gin) {
    return dt_transpose(c->grad, c->args->dim, c->args->dim2, &gin[0]);
}

/* out dim i was x dim dims[i]: the gradient's dim dims[i] goes back to place i. */
dt_status dt_grad_permute(const dt_grad_call *c, dt_tensor **gin) {
    int nd = IN(0)->ndim, inv[DT_MAX_NDIM];
    for (int i = 0; i < nd; i++)
        inv[dt_norm_dim(c->args->dims[i], nd)] = i;
    return dt_permute(c->grad, nd, inv, &gin[0]);
}

dt_status dt_grad_unsqueeze(const dt_grad_call *c, dt_tensor **gin) {
    return dt_squeeze(c->grad, dt_norm_dim(c->args->dim, IN(0)->ndim + 1), &gin[0]);
}

dt_status dt_grad_squeeze(const dt_grad_call *c, dt_tensor **gin) {
    return dt_unsqueeze(c->grad, dt_norm_dim(c->args->dim, IN(0)->ndim), &gin[0]);
}

dt_status dt_grad_expand(const dt_grad_call *c, dt_tensor **gin) {
    return dt_grad_sum_to(c->grad, IN(0)->ndim, IN(0)->shape, &gin[0]);
}

/* x[..., start:end, ...] along d: the gradient is g at [start, end) and zero elsewhere,
 * cat(zeros(start), g, zeros(size - end)) along d. */
dt_status dt_grad_slice(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *x = IN(0), *g = c->grad;
    int d = dt_norm_dim(c->args->dim, x->ndim);
    int64_t before = c->args->start, after = x->shape[d] - c->args->end;
    if (!before && !after) {
        DT_CHECK(dt_tensor_retain(g));
        gin[0] = g;
        return DT_OK;
    }
    dt_placement pl[DT_MESH_MAX_NDIM];
    pad_placements(g, d, pl);
    dt_tensor *parts[3] = {0};
    int n = 0;
    dt_status st = DT_OK;
    int64_t shape[DT_MAX_NDIM];
    for (int k = 0; k < g->ndim; k++)
        shape[k] = g->shape[k];
    if (before) {
        shape[d] = before;
        st = dt_tensor_zeros(g->mesh, g->dtype, g->ndim, shape, g->mesh->ndim, pl, &parts[n++]);
    }
    parts[n++] = g;
    if (st == DT_OK && after) {
        shape[d] = after;
        st = dt_tensor_zeros(g->mesh, g->dtype, g->ndim, shape, g->mesh->ndim, pl, &parts[n++]);
    }
    if (st == DT_OK) st = dt_cat(parts, n, d, &gin[0]);
    for (int i = 0; i < n; i++)
        if (parts[i] != g) dt_tensor_release(parts[i]);
    return st;
}
