/* Backward rules of the indexing ops: gather, embedding and scatter_add. The gradient of a
 * selection is a scatter-add (dt_scatter_add, a real op with its own sharding rules: a
 * sharded table's gradient is added into each rank's shard or left Partial, never gathered
 * whole), and scatter_add's own gradient is the gather back. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"

#define IN(i) (c->in[(i)])

/* gather(x, dim, index): gx = scatter_add(g, dim, index) into x's shape. */
dt_status dt_grad_gather(const dt_grad_call *c, dt_tensor **gin) {
    return dt_scatter_add(c->grad, c->args->dim, IN(1), IN(0)->ndim, IN(0)->shape, &gin[0]);
}

/* scatter_add(src, dim, index): gsrc = gather(g, dim, index), the index expanded to src's
 * shape where it was broadcast. */
dt_status dt_grad_scatter_add(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *ix = IN(1), *src = IN(0), *full = NULL;
    if (!memcmp(ix->shape, src->shape, sizeof(int64_t) * (size_t)src->ndim))
        return dt_gather(c->grad, c->args->dim, ix, &gin[0]);
    dt_status st = dt_expand(ix, src->ndim, src->shape, &full);
    if (st == DT_OK) st = dt_gather(c->grad, c->args->dim, full, &gin[0]);
    dt_tensor_release(full);
    return st;
}

/* Whether idx (B, T) is sharded on T and not on B: flattening it to rows would move data (a
 * shard survives a view only on its group's leading dim), flattening (T, B) would not. Context
 * parallel's tokens. */
static int seq_sharded(const dt_tensor *idx) {
    int on_b = 0, on_t = 0;
    for (int m = 0; idx->ndim == 2 && m < dt_mesh_ndim(idx->mesh); m++)
        if (idx->placements[m].kind == DT_PLACEMENT_SHARD)
            on_b |= idx->placements[m].dim == 0, on_t |= idx->placements[m].dim == 1;
    return on_t && !on_b;
}

/* embedding(table (V, E), idx (...)): g (..., E) added into the rows idx names,
 * scatter_add(g (N, E), 0, idx (N, 1)) into (V, E), the index broadcast along E; idx (B, T)
 * sharded on T is flattened as (T, B) (the sum does not depend on the rows' order). */
dt_status dt_grad_embedding(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *w = IN(0), *idx = IN(1), *g = c->grad, *it = NULL, *gt = NULL;
    int64_t N = 1, E = w->shape[1];
    for (int d = 0; d < idx->ndim; d++) N *= idx->shape[d];
    int64_t col[2] = {N, 1}, rows[2] = {N, E};
    dt_tensor *i2 = NULL, *g2 = NULL;
    dt_status st = DT_OK;
    if (seq_sharded(idx)) {
        st = dt_transpose(idx, 0, 1, &it);
        if (st == DT_OK) st = dt_transpose(g, 0, 1, &gt);
        idx = it, g = gt;
    }
    if (st == DT_OK) st = dt_view(idx, 2, col, &i2);
    if (st == DT_OK) st = dt_view(g, 2, rows, &g2);
    if (st == DT_OK) st = dt_scatter_add(g2, 0, i2, 2, w->shape, &gin[0]);
    dt_tensor_release(i2), dt_tensor_release(g2), dt_tensor_release(it), dt_tensor_release(gt);
    return st;
}
