/* broadcast over UCP. Below DT_UCX_RING_MIN_BYTES (and on two ranks) a binomial tree:
 * ceil(log2 n) rounds of latency. Above it, scatter + ring all_gather (van de Geijn): the root
 * sends each rank one n-th, then the ring circulates the pieces, so no link carries more than
 * about twice the message whatever n is. */
#include <stdlib.h>

#include "comm/ucx/ucx_impl.h"
#include "core/check.h"

static dt_status bc_tree(ux_op *op, void *buf, size_t bytes, int root) {
    int n = op->c->base.size, me = op->c->base.rank;
    int vr = (me - root + n) % n, mask = 1;
    while (mask < n) {
        if (vr & mask) {
            ux_post_recv(op, (vr - mask + root) % n, UX_PH_GATHER, buf, bytes);
            DT_CHECK(ux_op_wait(op));
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n) ux_post_send(op, (vr + mask + root) % n, UX_PH_GATHER, buf, bytes, 0);
    return ux_op_wait(op);
}

static dt_status bc_scatter_ring(ux_op *op, void *buf, size_t bytes, int root) {
    int n = op->c->base.size, me = op->c->base.rank;
    size_t *counts = malloc(sizeof *counts * 2 * (size_t)n), *displs = counts + n;
    if (!counts) return op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op->what);
    /* Group rank r holds piece (r - root) mod n. */
    for (int r = 0; r < n; r++) {
        size_t v = (size_t)((r - root + n) % n);
        displs[r] = bytes * v / (size_t)n;
        counts[r] = bytes * (v + 1) / (size_t)n - displs[r];
    }
    char *b = buf;
    if (me == root) {
        for (int k = 1; k < n; k++) {
            int to = (root + k) % n;
            ux_post_send(op, to, UX_PH_SCATTER, b + displs[to], counts[to], 0);
        }
    } else {
        ux_post_recv(op, root, UX_PH_SCATTER, b + displs[me], counts[me]);
    }
    dt_status st = ux_op_wait(op);
    if (st == DT_OK) st = ux_ring_all_gatherv(op, buf, counts, displs, 1);
    free(counts);
    return st;
}

dt_status ux_broadcast(dt_comm *base, void *buf, size_t bytes, int root) {
    ux_comm *c = ux(base);
    ux_op op;
    DT_CHECK(ux_op_begin(&op, c, "dt_broadcast", 0));
    ux_shm *s = base->size > 1 ? ux_shm_get(&op) : NULL;
    if (s && ux_shm_host(buf, buf)) {
        if (ux_shm_broadcast(&op, s, buf, bytes, root) == DT_OK) ux_shm_count(&op);
    } else if (base->size > 1 && !op.st) {
        if (base->size > 2 && bytes >= c->w->ring_min_bytes)
            bc_scatter_ring(&op, buf, bytes, root);
        else
            bc_tree(&op, buf, bytes, root);
    }
    return ux_op_end(&op);
}
