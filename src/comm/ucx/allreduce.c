/* all_reduce over UCP. Small messages (below DT_UCX_RING_MIN_BYTES, at most a few of them in
 * flight): one round of direct exchange, every rank receives every other rank's vector and
 * reduces the n of them in group-rank order (bitwise the local runtime's result). Larger ones:
 * reduce_scatter into the local runtime's chunks, then all_gather of the reduced chunks, each
 * by ring or direct exchange by size: bandwidth-optimal, and every rank ends with the bits the
 * chunk's reducer computed. On a communicator spanning hosts, hier.c's hierarchical form
 * replaces both (DT_UCX_HIER). */
#include <stdlib.h>
#include <string.h>

#include "comm/ucx/ucx_impl.h"
#include "core/check.h"
#include "core/reduce.h"

/* Direct exchange while a rank receives at most this many times the ring threshold. */
#define DIRECT_FANIN 4

static dt_status ar_direct(ux_op *op, const void *send, void *recv, size_t count, dt_dtype dt,
                           dt_reduce_op kind) {
    int n = op->c->base.size, me = op->c->base.rank;
    size_t bytes = count * dt_dtype_size(dt);
    char *scr;
    DT_CHECK(ux_scratch(op, bytes * (size_t)(n - 1) + 1, (void **)&scr));
    const void **srcs = malloc(sizeof *srcs * (size_t)n);
    if (!srcs) return op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op->what);
    for (int j = 0; j < n; j++) {
        if (j == me) {
            srcs[j] = send;
            continue;
        }
        srcs[j] = scr + (size_t)(j < me ? j : j - 1) * bytes;
        ux_post_recv(op, j, UX_PH_ALL, (void *)srcs[j], bytes);
    }
    for (int k = 1; k < n; k++)
        ux_post_send(op, (me + k) % n, UX_PH_ALL, send, bytes, 0);
    dt_status st = ux_op_wait(op);
    if (st == DT_OK) dt_reduce_n(dt, kind, recv, srcs, n, count);
    free(srcs);
    return st;
}

static dt_status ar_split(ux_op *op, const void *send, void *recv, size_t count, dt_dtype dt,
                          dt_reduce_op kind) {
    int n = op->c->base.size, me = op->c->base.rank;
    size_t es = dt_dtype_size(dt);
    size_t *counts = malloc(sizeof *counts * 2 * (size_t)n), *displs = counts + n;
    if (!counts) return op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op->what);
    for (int j = 0; j < n; j++) {
        displs[j] = count * (size_t)j / (size_t)n;
        counts[j] = count * (size_t)(j + 1) / (size_t)n - displs[j];
    }
    dt_status st =
        ux_reduce_scatter_in(op, send, (char *)recv + displs[me] * es, counts, displs, dt, kind);
    if (st == DT_OK) {
        if (n > 2 && count * es >= op->c->w->ring_min_bytes)
            st = ux_ring_all_gatherv(op, recv, counts, displs, es);
        else
            st = ux_direct_all_gatherv(op, recv, counts, displs, es);
    }
    free(counts);
    return st;
}

dt_status ux_all_reduce(dt_comm *base, const void *send, void *recv, size_t count, dt_dtype dt,
                        dt_reduce_op kind) {
    ux_comm *c = ux(base);
    int n = base->size;
    size_t bytes = count * dt_dtype_size(dt), small = c->w->ring_min_bytes;
    dt_status hst;
    if (ux_hier_use(c, &hst)) /* members on several hosts: hier.c */
        return hst != DT_OK ? hst : ux_hier_all_reduce(c, send, recv, count, dt, kind);
    ux_op op;
    DT_CHECK(ux_op_begin(&op, c, "dt_all_reduce", 0));
    ux_shm *s = n > 1 ? ux_shm_get(&op) : NULL;
    if (op.st)
        ;
    else if (s && ux_shm_host(send, recv)) {
        if (ux_shm_all_reduce(&op, s, send, recv, count, dt, kind) == DT_OK) ux_shm_count(&op);
    } else if (n == 1)
        dt_reduce_n(dt, kind, recv, &send, 1, count);
    else if (bytes < small && bytes * (size_t)(n - 1) <= DIRECT_FANIN * small)
        ar_direct(&op, send, recv, count, dt, kind);
    else
        ar_split(&op, send, recv, count, dt, kind);
    return ux_op_end(&op);
}
