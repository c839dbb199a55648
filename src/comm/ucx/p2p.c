/* send/recv and barrier over UCP, and the backend's vtable. send is synchronous (returns once
 * the receiver matched it, as the local runtime's rendezvous does); messages of one pair use one
 * tag, so UCX's per-endpoint ordering keeps them in order. The barrier is a dissemination
 * barrier: ceil(log2 n) rounds of empty messages. */
#include "comm/ucx/ucx_impl.h"
#include "core/check.h"

dt_status ux_send(dt_comm *base, const void *buf, size_t bytes, int peer) {
    ux_op op;
    DT_CHECK(ux_op_begin(&op, ux(base), "dt_send", 1));
    ux_post_send(&op, peer, UX_PHASE_P2P, buf, bytes, 1);
    ux_op_wait(&op);
    return ux_op_end(&op);
}

dt_status ux_recv(dt_comm *base, void *buf, size_t bytes, int peer) {
    ux_op op;
    DT_CHECK(ux_op_begin(&op, ux(base), "dt_recv", 1));
    ux_post_recv(&op, peer, UX_PHASE_P2P, buf, bytes);
    ux_op_wait(&op);
    return ux_op_end(&op);
}

dt_status ux_barrier(dt_comm *base) {
    int n = base->size, me = base->rank;
    ux_op op;
    DT_CHECK(ux_op_begin(&op, ux(base), "dt_barrier", 0));
    ux_shm *s = n > 1 ? ux_shm_get(&op) : NULL;
    if (s) {
        if (ux_shm_barrier(&op, s) == DT_OK) ux_shm_count(&op);
        return ux_op_end(&op);
    }
    for (int k = 1, round = 0; k < n && !op.st; k <<= 1, round++) {
        ux_post_send(&op, (me + k) % n, round % UX_PHASE_P2P, NULL, 0, 0);
        ux_post_recv(&op, (me - k + n) % n, round % UX_PHASE_P2P, NULL, 0);
        if (ux_op_wait(&op) != DT_OK) break;
    }
    return ux_op_end(&op);
}

const dt_comm_ops ux_comm_ops = {
    .name = "ucx",
    .all_reduce = ux_all_reduce,
    .all_gatherv = ux_all_gatherv,
    .reduce_scatterv = ux_reduce_scatterv,
    .all_to_allv = ux_all_to_allv,
    .broadcast = ux_broadcast,
    .send = ux_send,
    .recv = ux_recv,
    .barrier = ux_barrier,
    .exchange_boxes = ux_exchange_boxes,
    .gather_boxes = ux_gather_boxes,
    .reduce_scatter_boxes = ux_reduce_scatter_boxes,
    .boxes_here = ux_boxes_here,
    .destroy = ux_comm_destroy,
};
