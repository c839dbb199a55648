/* embedding (table lookup) and pick (the target logit of each sample). A row-sharded table
 * answers only the indices it holds and zeros elsewhere: a Partial sum; a column-sharded
 * table shards the hidden dim; sharded indices shard the output alike. pick is the same
 * pattern along the class dim. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_int(dt_dtype d) { return d == DT_I32 || d == DT_I64; }

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)a;
    if (n != 2) return dt_error(DT_ERR_ARG, "%s: takes 2 inputs, got %d", dt_op_name(op), n);
    const op_input *src = &in[0], *idx = &in[1];
    if (!is_int(idx->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: indices must be i32 or i64, got %s", dt_op_name(op),
                        dt_dtype_name(idx->dtype));
    if (op == DT_OP_EMBEDDING) {
        if (src->ndim != 2 || idx->ndim + 1 > DT_MAX_NDIM)
            return dt_error(DT_ERR_SHAPE, "embedding: the table must be 2-D (got %d-D)", src->ndim);
        out->ndim = idx->ndim + 1;
        for (int d = 0; d < idx->ndim; d++) out->shape[d] = idx->shape[d];
        out->shape[idx->ndim] = src->shape[1];
    } else {
        if (src->ndim != idx->ndim + 1)
            return dt_error(DT_ERR_SHAPE, "pick: logits must have one dim more than target");
        for (int d = 0; d < idx->ndim; d++)
            if (src->shape[d] != idx->shape[d])
                return dt_error(DT_ERR_SHAPE, "pick: logits and target differ in dim %d", d);
        out->ndim = idx->ndim;
        for (int d = 0; d < idx->ndim; d++) out->shape[d] = idx->shape[d];
    }
    out->dtype = src->dtype;
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)n, (void)a, (void)mesh_size, (void)mesh_total;
    const op_input *src = &in[0], *idx = &in[1];
    int k = 0;
    rows[k++] = (rule_row){.in = {RP, RP}, .out = RP};
    for (int d = 0; d < idx->ndim; d++)
        rows[k++] = (rule_row){.in = {op == DT_OP_PICK ? SP(d) : RP, SP(d)}, .out = SP(d)};
    if (op == DT_OP_EMBEDDING) {
        rows[k++] = (rule_row){.in = {SP(1), RP}, .out = SP(idx->ndim)};
        rows[k++] = (rule_row){.in = {SP(0), RP}, .out = PP(DT_REDUCE_SUM)};
    } else {
        rows[k++] = (rule_row){.in = {SP(src->ndim - 1), RP}, .out = PP(DT_REDUCE_SUM)};
    }
    return k;
}

static dt_status compute(local_call *c) {
    if (c->op == DT_OP_EMBEDDING)
        return c->k->embedding(&c->in[0], c->in_offset[0][0], &c->in[1], &c->out);
    return c->k->pick(&c->in[0], c->in_offset[0][c->in[0].ndim - 1], &c->in[1], &c->out);
}

const op_family dt_family_embedding = {
    .infer = infer, .rules = rules, .compute = compute,
};

const op_family dt_family_pick = {
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

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

/* Whether idx (B, T) is sharded on both B and T (data parallel and context parallel tokens),
 * evenly: then every rank's block is (B / pb, T / pt), which is also its block of the rows
 * (B T) chunked over all those mesh dims, in some order of the rows. */
static int rows_even(const dt_tensor *idx) {
    int64_t parts[2] = {1, 1};
    if (idx->ndim != 2) return 0;
    for (int m = 0; m < dt_mesh_ndim(idx->mesh); m++)
        if (idx->placements[m].kind == DT_PLACEMENT_SHARD)
            parts[idx->placements[m].dim] *= dt_mesh_dim_size(idx->mesh, m);
    return parts[0] > 1 && parts[1] > 1 && idx->shape[0] % parts[0] == 0 &&
           idx->shape[1] % parts[1] == 0;
}

/* The rows of idx (B, T) sharded on B and T (rows_even) and of g (B, T, E) as (B T, 1) and
 * (B T, E), each rank's block flattened where it lies: S(0) on the mesh dims that shard idx.
 * The rows come in another order than a row-major flattening's, which a sum does not see, and
 * nothing moves but g to idx's token sharding (its E placement kept). */
static dt_status local_rows(dt_tensor *idx, dt_tensor *g, dt_tensor **i2, dt_tensor **g2,
                            dt_tensor **gm) {
    int nd = dt_mesh_ndim(idx->mesh);
    dt_placement q[DT_MESH_MAX_NDIM], pi[DT_MESH_MAX_NDIM], pg[DT_MESH_MAX_NDIM];
    for (int m = 0; m < nd; m++) {
        dt_placement gp = g->placements[m];
        int mine = idx->placements[m].kind == DT_PLACEMENT_SHARD;
        int tok = gp.kind == DT_PLACEMENT_SHARD && gp.dim < 2;
        q[m] = mine ? idx->placements[m] : tok ? dt_replicate() : gp;
        pi[m] = mine ? dt_shard(0) : dt_replicate();
        pg[m] = mine ? dt_shard(0) : q[m].kind == DT_PLACEMENT_SHARD ? dt_shard(1) : q[m];
    }
    dt_status st = dt_ops_move(g, q, gm);
    if (st != DT_OK) return st;
    void *il = NULL, *gl = NULL;
    int64_t n = idx->local_shape[0] * idx->local_shape[1];
    int64_t ishape[2] = {n, 1}, iglobal[2] = {idx->shape[0] * idx->shape[1], 1};
    int64_t gshape[2] = {n, (*gm)->local_shape[2]}, gglobal[2] = {iglobal[0], g->shape[2]};
    st = dt_tensor_to_local(idx, &il);
    if (st == DT_OK) st = dt_tensor_to_local(*gm, &gl);
    if (st == DT_OK)
        st = dt_tensor_from_local(idx->mesh, il, idx->dtype, 2, ishape, nd, pi, iglobal,
                                  DT_FROM_LOCAL_BORROW, i2);
    if (st == DT_OK)
        st = dt_tensor_from_local(idx->mesh, gl, g->dtype, 2, gshape, nd, pg, gglobal,
                                  DT_FROM_LOCAL_BORROW, g2);
    return st;
}

/* embedding(table (V, E), idx (...)): g (..., E) added into the rows idx names,
 * scatter_add(g (N, E), 0, idx (N, 1)) into (V, E), the index broadcast along E; idx (B, T)
 * sharded on T is flattened as (T, B), and sharded on B and T evenly, block by block where
 * it lies (local_rows): the sum does not depend on the rows' order, and no token moves. */
dt_status dt_grad_embedding(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *w = IN(0), *idx = IN(1), *g = c->grad, *it = NULL, *gt = NULL, *gm = NULL;
    int64_t N = 1, E = w->shape[1];
    for (int d = 0; d < idx->ndim; d++)
        N *= idx->shape[d];
    int64_t col[2] = {N, 1}, rows[2] = {N, E};
    dt_tensor *i2 = NULL, *g2 = NULL;
    dt_status st = DT_OK;
    if (rows_even(idx)) {
        st = local_rows(idx, g, &i2, &g2, &gm);
    } else {
        if (seq_sharded(idx)) {
            st = dt_transpose(idx, 0, 1, &it);
            if (st == DT_OK) st = dt_transpose(g, 0, 1, &gt);
            idx = it, g = gt;
        }
        if (st == DT_OK) st = dt_view_borrowed(idx, 2, col, &i2); /* no copies where kept */
        if (st == DT_OK) st = dt_view_borrowed(g, 2, rows, &g2);
    }
    if (st == DT_OK) st = dt_scatter_add(g2, 0, i2, 2, w->shape, &gin[0]);
    dt_tensor_release(i2), dt_tensor_release(g2), dt_tensor_release(it), dt_tensor_release(gt);
    dt_tensor_release(gm);
    return st;
}

/* pick(logits (..., C), target (...)): the gradient is g at each row's target class and 0
 * elsewhere, where(one_hot(target, C), g[..., None], 0). It is the logits' size, as the
 * gradient must be, and one_hot writes each rank's class range when the logits' class dim is
 * sharded (loss parallel), so nothing is gathered. A target outside [0, C) (cross_entropy's
 * ignored rows) picks 0, so its row gets no gradient: the target is clamped into range for
 * one_hot and g zeroed where clamping moved it (all on per-row tensors). */
dt_status dt_grad_pick(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *l = IN(0), *t = IN(1);
    int64_t C = l->shape[l->ndim - 1];
    enum { LO, HI, UP, TC, OFF, ZG, GZ, HOT, GU, ZERO, N };
    dt_tensor *x[N] = {0};
    dt_status st = dt_tensor_full_like(t, 0, &x[LO]);
    DO(dt_tensor_full_like(t, (double)(C - 1), &x[HI]));
    DO(dt_maximum(t, x[LO], &x[UP]));
    DO(dt_minimum(x[UP], x[HI], &x[TC]));
    DO(dt_sub(t, x[TC], &x[OFF])); /* non-zero where the target is out of range */
    DO(dt_tensor_zeros_like(c->grad, &x[ZG]));
    DO(dt_where(x[OFF], x[ZG], c->grad, &x[GZ]));
    DO(dt_one_hot(x[TC], C, &x[HOT]));
    DO(dt_unsqueeze(x[GZ], -1, &x[GU]));
    DO(dt_mul_scalar(x[GU], 0, &x[ZERO]));
    DO(dt_where(x[HOT], x[GU], x[ZERO], &gin[0]));
    dt_grad_release_all(x, N);
    return dt_grad_finish(c, gin, st);
}
