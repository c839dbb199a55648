/* scatter_add, the adjoint of gather: out = zeros(args.shape) with src added at index along
 * args.dim. Every rank adds what its src block holds into its out block, dropping what lands
 * elsewhere, so the rows are: whole inputs give any shard of out (each rank keeps its part: a
 * row-sharded table's gradient comes out row-sharded without a whole table anywhere), inputs
 * sharded alike give a Partial sum, and on a dim other than the scatter dim where src spans
 * out, src sharded gives out sharded alike. Adding is linear, so a Partial src stays Partial. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_int(dt_dtype d) { return d == DT_I32 || d == DT_I64; }

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)op, (void)n;
    const op_input *src = &in[0], *ix = &in[1];
    if (is_int(src->dtype))
        return dt_error(DT_ERR_DTYPE, "scatter_add: src must be a float dtype, got %s",
                        dt_dtype_name(src->dtype));
    if (!is_int(ix->dtype))
        return dt_error(DT_ERR_DTYPE, "scatter_add: index must be i32 or i64, got %s",
                        dt_dtype_name(ix->dtype));
    if (a->shape_ndim < 1 || a->shape_ndim > DT_MAX_NDIM)
        return dt_error(DT_ERR_SHAPE, "scatter_add: the output has %d dims (1 .. %d)",
                        a->shape_ndim, DT_MAX_NDIM);
    int dim = dt_norm_dim(a->dim, a->shape_ndim);
    if (dim < 0)
        return dt_error(DT_ERR_ARG, "scatter_add: dim = %d is out of range for a %d-D output",
                        a->dim, a->shape_ndim);
    if (src->ndim != a->shape_ndim || ix->ndim != a->shape_ndim)
        return dt_error(DT_ERR_SHAPE, "scatter_add: src (%d-D) and index (%d-D) must have the "
                        "output's %d dims", src->ndim, ix->ndim, a->shape_ndim);
    for (int d = 0; d < src->ndim; d++) {
        if (a->shape[d] < 0)
            return dt_error(DT_ERR_SHAPE, "scatter_add: shape[%d] = %lld is negative", d,
                            (long long)a->shape[d]);
        if (ix->shape[d] != src->shape[d] && (d == dim || ix->shape[d] != 1))
            return dt_error(DT_ERR_SHAPE, "scatter_add: index size %lld differs from src size "
                            "%lld in dim %d (it may be 1 on a dim other than dim %d)",
                            (long long)ix->shape[d], (long long)src->shape[d], d, dim);
        if (d != dim && src->shape[d] > a->shape[d])
            return dt_error(DT_ERR_SHAPE, "scatter_add: src size %lld > output size %lld in "
                            "dim %d (only dim %d may be larger)", (long long)src->shape[d],
                            (long long)a->shape[d], d, dim);
    }
    out->ndim = a->shape_ndim;
    for (int d = 0; d < out->ndim; d++) out->shape[d] = a->shape[d];
    out->dtype = src->dtype;
    return DT_OK;
}

/* src spans out on d (d not the scatter dim): their shards line up. */
static int spans(const op_input *src, const dt_op_args *a, int dim, int d) {
    return d != dim && src->shape[d] == a->shape[d];
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)n, (void)mesh_size, (void)mesh_total;
    const op_input *src = &in[0];
    int dim = dt_norm_dim(a->dim, a->shape_ndim), k = 0;
    if (dim < 0) return 0;
    /* Whole inputs give each rank its rows of the scatter dim first (ties go to the earlier
     * row): the output is the large one (an embedding table's gradient), and a row-sharded
     * table's gradient then comes out in the table's placement, never whole on every rank. */
    rows[k++] = (rule_row){.in = {RP, RP}, .out = SP(dim)};
    rows[k++] = (rule_row){.in = {RP, RP}, .out = RP};
    const op_input *ix = &in[1];
    for (int d = 0; d < src->ndim; d++) {
        /* an index broadcast along d (size 1) stays whole where src is split */
        dt_placement is = ix->shape[d] == src->shape[d] ? SP(d) : RP;
        if (spans(src, a, dim, d)) rows[k++] = (rule_row){.in = {SP(d), is}, .out = SP(d)};
        rows[k++] = (rule_row){.in = {SP(d), is}, .out = PP(DT_REDUCE_SUM)};
        if (d != dim) rows[k++] = (rule_row){.in = {RP, RP}, .out = SP(d)}; /* masked */
    }
    rows[k++] = (rule_row){.in = {PP(DT_REDUCE_SUM), RP}, .out = PP(DT_REDUCE_SUM)};
    return k;
}

/* A dim that one mesh dim shards src and out alike on (S(d), S(d) -> S(d)) must be sharded so
 * by every mesh dim that shards either: then src's and out's blocks along it are the same
 * chunks. Mixed with a masked or a Partial row on d, out's nested chunks would not lie in the
 * src chunk a rank holds. */
static int combine_ok(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_ndim,
                      const int *mesh_shape, const dt_placement (*in_pl)[DT_MESH_MAX_NDIM],
                      const dt_placement *out_pl) {
    (void)op, (void)in, (void)n, (void)a, (void)mesh_shape;
    for (int d = 0; d < a->shape_ndim; d++) {
        int aligned = 0, other = 0;
        for (int m = 0; m < mesh_ndim; m++) {
            int s = in_pl[0][m].kind == DT_PLACEMENT_SHARD && in_pl[0][m].dim == d;
            int o = out_pl[m].kind == DT_PLACEMENT_SHARD && out_pl[m].dim == d;
            if (s && o)
                aligned = 1;
            else if (s || o)
                other = 1;
        }
        if (aligned && other) return 0;
    }
    return 1;
}

static dt_status compute(local_call *c) {
    int nd = c->args->shape_ndim, dim = dt_norm_dim(c->args->dim, nd);
    int64_t shift[DT_MAX_NDIM] = {0};
    for (int d = 0; d < nd; d++)
        if (d != dim) shift[d] = c->in_offset[0][d] - c->out_offset[d];
    return c->k->scatter_add(&c->in[0], dim, shift, c->out_offset[dim], c->args->shape[dim],
                             &c->in[1], &c->out);
}

const op_family dt_family_scatter = {
    .infer = infer, .rules = rules, .compute = compute, .combine_ok = combine_ok,
};

/* ---- backward rules ------------------------------------------------------------------ */

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
