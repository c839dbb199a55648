/* Backward rules of the shape ops: permute, slice, unsqueeze, squeeze, expand, cat and stack.
 * Each moves the gradient back with the inverse shape op; slice pads with zeros made in the
 * gradient's own layout so that padding moves no data where it need not. (view and transpose
 * are in grad_basic.c.) */
#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"

#define IN(i) (c->in[(i)])

/* out dim i was x dim dims[i]: the gradient's dim dims[i] goes back to place i. */
dt_status dt_grad_permute(const dt_grad_call *c, dt_tensor **gin) {
    int nd = IN(0)->ndim, inv[DT_MAX_NDIM];
    for (int i = 0; i < nd; i++) inv[dt_norm_dim(c->args->dims[i], nd)] = i;
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

/* ---- slice: g padded with zeros along dim ------------------------------------------------ */

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
    for (int k = 0; k < g->ndim; k++) shape[k] = g->shape[k];
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

/* ---- cat and stack: the pieces of g ------------------------------------------------------ */

/* The gradients of the inputs that want one, from pieces (n new tensors, consumed). */
static void keep_needed(const dt_grad_call *c, dt_tensor **pieces, dt_tensor **gin) {
    for (int i = 0; i < c->n; i++) {
        if (c->need[i]) gin[i] = pieces[i];
        else dt_tensor_release(pieces[i]);
    }
}

/* g split along dim into the inputs' sizes (one move of g when dim is sharded). */
dt_status dt_grad_cat(const dt_grad_call *c, dt_tensor **gin) {
    int d = dt_norm_dim(c->args->dim, IN(0)->ndim);
    int64_t sizes[DT_GRAD_MAX_INPUTS];
    dt_tensor *pieces[DT_GRAD_MAX_INPUTS];
    for (int i = 0; i < c->n; i++) sizes[i] = IN(i)->shape[d];
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
