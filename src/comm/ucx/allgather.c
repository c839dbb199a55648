/* all_gather(v) over UCP: direct exchange below DT_UCX_RING_MIN_BYTES (one round: every rank
 * sends its block to every other), a ring above it (n-1 steps, each rank forwards the block it
 * received last to its right neighbour: bandwidth-optimal, each link carries (n-1)/n of the
 * data). Blocks land straight in the receive buffer; no scratch. */
#include <string.h>

#include "comm/ucx/ucx_impl.h"
#include "core/check.h"

dt_status ux_direct_all_gatherv(ux_op *op, void *recv, const size_t *counts, const size_t *displs,
                                size_t es) {
    int n = op->c->base.size, me = op->c->base.rank;
    char *r = recv;
    for (int k = 1; k < n; k++) {
        int from = (me - k + n) % n;
        ux_post_recv(op, from, UX_PH_GATHER, r + displs[from] * es, counts[from] * es);
    }
    for (int k = 1; k < n; k++)
        ux_post_send(op, (me + k) % n, UX_PH_GATHER, r + displs[me] * es, counts[me] * es, 0);
    return ux_op_wait(op);
}

dt_status ux_ring_all_gatherv(ux_op *op, void *recv, const size_t *counts, const size_t *displs,
                              size_t es) {
    int n = op->c->base.size, me = op->c->base.rank;
    int right = (me + 1) % n, left = (me - 1 + n) % n;
    char *r = recv;
    for (int s = 0; s < n - 1; s++) {
        int sb = (me - s + n) % n, rb = (me - s - 1 + n) % n;
        ux_post_recv(op, left, UX_PH_GATHER, r + displs[rb] * es, counts[rb] * es);
        ux_post_send(op, right, UX_PH_GATHER, r + displs[sb] * es, counts[sb] * es, 0);
        DT_CHECK(ux_op_wait(op));
    }
    return DT_OK;
}

dt_status ux_all_gatherv(dt_comm *base, const void *send, void *recv, const size_t *counts,
                         const size_t *displs, dt_dtype dt) {
    ux_comm *c = ux(base);
    int n = base->size, me = base->rank;
    size_t es = dt_dtype_size(dt), total = 0;
    ux_op op;
    DT_CHECK(ux_op_begin(&op, c, "dt_all_gatherv", 0));
    char *mine = (char *)recv + displs[me] * es;
    if (counts[me] && mine != send) memmove(mine, send, counts[me] * es);
    for (int j = 0; j < n; j++)
        total += counts[j] * es;
    ux_shm *s = n > 1 ? ux_shm_get(&op) : NULL;
    if (s && ux_shm_host(send, recv)) {
        if (ux_shm_all_gatherv(&op, s, mine, recv, counts, displs, es, 1) == DT_OK)
            ux_shm_count(&op);
    } else if (n > 1 && !op.st) {
        if (n > 2 && total >= c->w->ring_min_bytes)
            ux_ring_all_gatherv(&op, recv, counts, displs, es);
        else
            ux_direct_all_gatherv(&op, recv, counts, displs, es);
    }
    return ux_op_end(&op);
}
