/* all_to_all(v) over UCP: pairwise exchange. In step s each rank sends to rank + s and receives
 * from rank - s, so every rank talks to one peer at a time; below DT_UCX_RING_MIN_BYTES all
 * steps are posted at once (one round of latency). Sizes are checked on arrival: a count that
 * does not pair up fails with DT_ERR_COMM on the rank that sees it. */
#include <string.h>

#include "comm/ucx/ucx_impl.h"
#include "core/check.h"

dt_status ux_all_to_allv(dt_comm *base, const void *send, const size_t *scounts,
                         const size_t *sdispls, void *recv, const size_t *rcounts,
                         const size_t *rdispls, dt_dtype dt) {
    ux_comm *c = ux(base);
    int n = base->size, me = base->rank;
    size_t es = dt_dtype_size(dt), total = 0;
    ux_op op;
    DT_CHECK(ux_op_begin(&op, c, "dt_all_to_allv", 0));
    if (scounts[me] != rcounts[me]) {
        op.st = dt_error(DT_ERR_COMM,
                         "dt_all_to_allv: group rank %d sends %zu elements to itself "
                         "but expects recvcounts[%d] = %zu",
                         me, scounts[me], me, rcounts[me]);
        return ux_op_end(&op);
    }
    if (rcounts[me])
        memmove((char *)recv + rdispls[me] * es, (const char *)send + sdispls[me] * es,
                rcounts[me] * es);
    ux_shm *s = n > 1 ? ux_shm_get(&op) : NULL;
    if (s && ux_shm_host(send, recv)) {
        if (ux_shm_all_to_allv(&op, s, send, scounts, sdispls, recv, rcounts, rdispls, es) == DT_OK)
            ux_shm_count(&op);
        return ux_op_end(&op);
    }
    for (int j = 0; j < n; j++)
        total += (scounts[j] + rcounts[j]) * es;
    int batch = total < c->w->ring_min_bytes;
    for (int s = 1; s < n; s++) {
        int to = (me + s) % n, from = (me - s + n) % n;
        ux_post_recv(&op, from, UX_PH_ALL, (char *)recv + rdispls[from] * es, rcounts[from] * es);
        ux_post_send(&op, to, UX_PH_ALL, (const char *)send + sdispls[to] * es, scounts[to] * es,
                     0);
        if (!batch && ux_op_wait(&op) != DT_OK) break;
    }
    if (batch) ux_op_wait(&op);
    return ux_op_end(&op);
}
