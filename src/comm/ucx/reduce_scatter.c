/* reduce_scatter(v) over UCP. Direct exchange below DT_UCX_RING_MIN_BYTES and on two ranks:
 * every rank receives its block from every peer and reduces the n copies in group-rank order
 * with dt_reduce_n, exactly as the local runtime does (bitwise the same result). A ring above
 * it on three or more ranks: n-1 steps, each rank adds its own copy of the block arriving from
 * its left neighbour and passes the partial on; block b is folded in ring order starting after
 * rank b, and bf16/f16 partials are rounded once per hop (see dtensor/ucx.h). */
#include <stdlib.h>
#include <string.h>

#include "comm/ucx/ucx_impl.h"
#include "core/check.h"
#include "core/reduce.h"

static dt_status rs_direct(ux_op *op, const void *send, void *recv, const size_t *counts,
                           const size_t *displs, dt_dtype dt, dt_reduce_op kind) {
    int n = op->c->base.size, me = op->c->base.rank;
    size_t es = dt_dtype_size(dt), mine = counts[me] * es;
    char *scr;
    DT_CHECK(ux_scratch(op, mine * (size_t)(n - 1) + 1, (void **)&scr));
    const void **srcs = malloc(sizeof *srcs * (size_t)n);
    if (!srcs) return op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op->what);
    for (int j = 0; j < n; j++) {
        if (j == me) {
            srcs[j] = (const char *)send + displs[me] * es;
            continue;
        }
        srcs[j] = scr + (size_t)(j < me ? j : j - 1) * mine;
        ux_post_recv(op, j, UX_PH_REDUCE, (void *)srcs[j], mine);
    }
    for (int k = 1; k < n; k++) {
        int to = (me + k) % n;
        ux_post_send(op, to, UX_PH_REDUCE, (const char *)send + displs[to] * es, counts[to] * es,
                     0);
    }
    dt_status st = ux_op_wait(op);
    if (st == DT_OK) dt_reduce_n(dt, kind, recv, srcs, n, counts[me]);
    free(srcs);
    return st;
}

static dt_status rs_ring(ux_op *op, const void *send, void *recv, const size_t *counts,
                         const size_t *displs, dt_dtype dt, dt_reduce_op kind) {
    int n = op->c->base.size, me = op->c->base.rank;
    int right = (me + 1) % n, left = (me - 1 + n) % n;
    size_t es = dt_dtype_size(dt), maxb = 0;
    for (int j = 0; j < n; j++)
        if (counts[j] * es > maxb) maxb = counts[j] * es;
    char *tmp;
    DT_CHECK(ux_scratch(op, 2 * maxb + 1, (void **)&tmp));
    char *acc = tmp + maxb;
    /* avg travels as a sum and is divided once at the end, as dt_reduce_n divides. */
    dt_reduce_op fold = kind == DT_REDUCE_AVG ? DT_REDUCE_SUM : kind;
    const char *in = send;
    for (int s = 0; s < n - 1; s++) {
        int sb = (me - s - 1 + n) % n, rb = (me - s - 2 + 2 * n) % n;
        ux_post_recv(op, left, UX_PH_REDUCE, tmp, counts[rb] * es);
        ux_post_send(op, right, UX_PH_REDUCE, s == 0 ? in + displs[sb] * es : acc, counts[sb] * es,
                     0);
        DT_CHECK(ux_op_wait(op));
        const void *srcs[2] = {tmp, in + displs[rb] * es};
        dt_reduce_n(dt, fold, s == n - 2 ? recv : acc, srcs, 2, counts[rb]);
    }
    if (kind == DT_REDUCE_AVG) dt_scale(dt, recv, counts[me], 1, n);
    return DT_OK;
}

dt_status ux_reduce_scatter_in(ux_op *op, const void *send, void *recv, const size_t *counts,
                               const size_t *displs, dt_dtype dt, dt_reduce_op kind) {
    int n = op->c->base.size;
    size_t total = 0, es = dt_dtype_size(dt);
    for (int j = 0; j < n; j++)
        total += counts[j] * es;
    if (n == 1) {
        const void *src = send;
        dt_reduce_n(dt, kind, recv, &src, 1, counts[0]);
        return DT_OK;
    }
    if (n > 2 && total >= op->c->w->ring_min_bytes)
        return rs_ring(op, send, recv, counts, displs, dt, kind);
    return rs_direct(op, send, recv, counts, displs, dt, kind);
}

dt_status ux_reduce_scatterv(dt_comm *base, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, dt_dtype dt, dt_reduce_op kind) {
    ux_op op;
    DT_CHECK(ux_op_begin(&op, ux(base), "dt_reduce_scatterv", 0));
    ux_shm *s = base->size > 1 ? ux_shm_get(&op) : NULL;
    if (s && ux_shm_host(send, recv)) {
        if (ux_shm_reduce_scatterv(&op, s, send, recv, counts, displs, dt, kind) == DT_OK)
            ux_shm_count(&op);
    } else if (!op.st) {
        ux_reduce_scatter_in(&op, send, recv, counts, displs, dt, kind);
    }
    return ux_op_end(&op);
}
