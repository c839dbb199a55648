/* The box forms of redistribute (dt_comm_exchange_boxes, dt_comm_gather_boxes,
 * dt_comm_reduce_scatter_boxes) over a group's shared-memory arena: each box is packed piece
 * by piece straight into the arena and unpacked straight out of it (shm_coll.c), where the
 * generic layer would pack it into a buffer, run the collective through the arena, and unpack
 * it again. Groups without an arena
 * (members on other hosts, DT_UCX_SHM=0) and device arrays take the generic path: ux_boxes_here
 * says which, the same on every member. */
#include "comm/ucx/ucx_impl.h"
#include "core/box.h"
#include "core/check.h"

dt_status ux_boxes_here(dt_comm *base, const void *src, const void *dst, int *out) {
    ux_op op;
    *out = 0;
    DT_CHECK(ux_op_begin(&op, ux(base), "redistribute", 1));
    ux_shm *s = base->size > 1 ? ux_shm_get(&op) : NULL; /* collective on first use */
    *out = s && ux_shm_host(src ? src : dst, dst ? dst : src);
    return ux_op_end(&op);
}

/* The group's arena, decided by ux_boxes_here before the call (no handshake here). */
static ux_shm *arena(ux_op *op) {
    ux_shm *s = ux_shm_get(op);
    if (!s && !op->st)
        op->st = dt_error(DT_ERR_ARG,
                          "%s: group of %d ranks has no shared-memory arena (ask "
                          "dt_comm_*_here first)",
                          op->what, op->c->base.size);
    return s;
}

dt_status ux_exchange_boxes(dt_comm *base, int ndim, size_t es, const void *src,
                            const int64_t *src_shape, const dt_box *send, void *dst,
                            const int64_t *dst_shape, const dt_box *recv) {
    int me = base->rank;
    ux_op op;
    DT_CHECK(ux_op_begin(&op, ux(base), "exchange_boxes", 0));
    if (dt_shape_numel(send[me].ext, ndim))
        dt_box_copy(dst, dst_shape, recv[me].off, src, src_shape, send[me].off, send[me].ext, ndim,
                    es);
    ux_shm *s = arena(&op);
    if (s && ux_shm_exchange_boxes(&op, s, ndim, es, src, src_shape, send, dst, dst_shape, recv) ==
                 DT_OK)
        ux_shm_count(&op);
    return ux_op_end(&op);
}

dt_status ux_gather_boxes(dt_comm *base, int ndim, size_t es, const void *src,
                          const int64_t *src_shape, void *dst, const int64_t *dst_shape,
                          const dt_box *recv) {
    int me = base->rank;
    ux_op op;
    DT_CHECK(ux_op_begin(&op, ux(base), "gather_boxes", 0));
    dt_box_copy(dst, dst_shape, recv[me].off, src, src_shape, NULL, src_shape, ndim, es);
    ux_shm *s = arena(&op);
    if (s && ux_shm_gather_boxes(&op, s, ndim, es, src, dst, dst_shape, recv) == DT_OK)
        ux_shm_count(&op);
    return ux_op_end(&op);
}

dt_status ux_reduce_scatter_boxes(dt_comm *base, int ndim, const void *src, const int64_t *shape,
                                  const dt_box *boxes, void *dst, dt_dtype dt, dt_reduce_op kind) {
    ux_op op;
    DT_CHECK(ux_op_begin(&op, ux(base), "dt_reduce_scatter_boxes", 0));
    ux_shm *s = arena(&op);
    if (s && ux_shm_reduce_scatter_boxes(&op, s, ndim, src, shape, boxes, dst, dt, kind) == DT_OK)
        ux_shm_count(&op);
    return ux_op_end(&op);
}
