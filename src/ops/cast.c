/* dt_cast: dtype conversion keeping placements. Local, except for Partial inputs whose parts
 * cannot be cast one by one (see dtensor/create.h): those are reduced first, in the input's
 * dtype, then cast and laid out again under the Partial convention. */
#include "comm/comm_impl.h"
#include "core/check.h"
#include "core/fill.h"
#include "dtensor/create.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "redistribute/redistribute_impl.h"

static int is_float(dt_dtype d) {
    return d == DT_F32 || d == DT_F64 || d == DT_BF16 || d == DT_F16;
}

/* Bits of significand: a float cast from -> to is exact when to has at least as many and
 * the exponent range too (f16's is narrower than bf16's, so bf16 <-> f16 is never exact). */
static int widens(dt_dtype from, dt_dtype to) {
    if (from == to) return 1;
    if (to == DT_F64) return from == DT_F32 || from == DT_BF16 || from == DT_F16;
    if (to == DT_F32) return from == DT_BF16 || from == DT_F16;
    return 0;
}

/* Whether a part of a Partial(op) tensor may be cast on its own. */
static int part_castable(dt_reduce_op op, dt_dtype from, dt_dtype to) {
    if (from == to) return 1;
    if (!is_float(from) || !is_float(to)) return 0;
    /* A norm's parts are non-negative: rounding each costs one rounding of the result (no
     * cancellation), and a reduced copy cannot be spread back (every rank holding it is a
     * different norm). */
    return widens(from, to) || op == DT_REDUCE_MAX || op == DT_REDUCE_MIN || op == DT_REDUCE_NORM;
}

/* Casts src's shard (its local data, same local shape) into out's, or zeros out's when it is
 * off coordinate 0 of a P(sum) dim. */
static dt_status cast_shard(dt_tensor *src, dt_tensor *out, int zeros) {
    if (out->local_numel == 0) return DT_OK;
    dt_ctx_bind(out->mesh->ctx);
    if (zeros)
        return dt_tensor_mem(out)->zero(out->data, out->local_numel * dt_dtype_size(out->dtype));
    const dt_fill_ops *ops = dt_fill_ops_of(out->device.kind);
    if (!ops)
        return dt_error(DT_ERR_UNSUPPORTED, "dt_cast: device kind %d is not in this build",
                        (int)out->device.kind);
    return ops->cast(out->dtype, out->data, src->dtype, src->data, out->local_numel);
}

dt_status dt_cast(dt_tensor *x, dt_dtype dtype, dt_tensor **out) {
    DT_TENSOR_ARG(x);
    DT_ARG_NOT_NULL(out);
    if ((unsigned)dtype >= DT_DTYPE_COUNT)
        return dt_error(DT_ERR_DTYPE, "dt_cast: argument dtype has unknown value %d", (int)dtype);
    dt_mesh *mesh = x->mesh;
    int reduce_first = 0;
    dt_placement rep[DT_MESH_MAX_NDIM];
    for (int m = 0; m < mesh->ndim; m++) {
        rep[m] = x->placements[m];
        if (x->placements[m].kind != DT_PLACEMENT_PARTIAL) continue;
        rep[m] = dt_replicate();
        if (!part_castable(x->placements[m].op, x->dtype, dtype)) reduce_first = 1;
    }
    dt_tensor *src = x, *y = NULL;
    /* Every Partial dim at once: reducing only some would change the order the mesh dims
     * reduce in (P(max) then P(sum) is not P(sum) then P(max)). */
    if (reduce_first) DT_CHECK(dt_redistribute_run(x, rep, &src));
    dt_status st = dt_tensor_alloc(mesh, x->device, dtype, x->ndim, x->shape, x->placements, &y);
    int zeros = 0;
    for (int m = 0; reduce_first && m < mesh->ndim; m++)
        zeros |= x->placements[m].kind == DT_PLACEMENT_PARTIAL &&
                 x->placements[m].op == DT_REDUCE_SUM && mesh->coord[m] != 0;
    if (st == DT_OK) st = cast_shard(src, y, zeros);
    if (src != x) dt_tensor_release(src);
    if (st != DT_OK) {
        dt_error_prefix("dt_cast");
        dt_tensor_release(y);
        return st;
    }
    *out = y;
    return DT_OK;
}
