/* The box forms of redistribute over the UCX runtime, for ucx_rank_prog's "shm" mode:
 * dt_comm_exchange_boxes as S(0) -> S(1), dt_comm_reduce_scatter_boxes as P -> S(1) and
 * P -> S(2), and dt_comm_gather_boxes as S(1) -> R, on 3-D f32 arrays split unevenly (some
 * members' boxes empty) and large enough to take several rounds of the shared-memory arena.
 * Expected values come from the global array's formula (small integers: every sum is exact, in any
 * order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "comm/comm_impl.h"
#include "ucx_shm_checks.h"

/* Element (i, j, k) of the global array of series s: a small integer. */
static float gval(uint64_t s, int64_t i, int64_t j, int64_t k) {
    uint64_t x = s * 0x9e3779b97f4a7c15ull + (uint64_t)(i * 1000003 + j * 1009 + k);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (float)((int64_t)(x % 17) - 8);
}

/* Member r's start of a dim of length len split n ways (uneven: as redistribute splits). */
static int64_t lo(int64_t len, int n, int r) {
    return len * r / n;
}

static dt_status fail(const char *what, const int64_t *shape, int64_t at, double got, double want) {
    return dt_error_set(DT_ERR_ARG,
                        "ucx_shm_boxes.c: %s on [%lld,%lld,%lld]: element %lld is %g, "
                        "expected %g",
                        what, (long long)shape[0], (long long)shape[1], (long long)shape[2],
                        (long long)at, got, want);
}

/* *src: the part of shape sshape of the global array of series s that starts at row r0 and
 * column c0; *dst: dn elements of a value no result has. */
static dt_status arrays(const int64_t *sshape, uint64_t s, int64_t r0, int64_t c0, size_t dn,
                        float **src, float **dst) {
    size_t sn = (size_t)(sshape[0] * sshape[1] * sshape[2]);
    *src = malloc(sn * 4 + 4);
    *dst = malloc(dn * 4 + 4);
    if (!*src || !*dst) {
        free(*src);
        free(*dst);
        return dt_error_set(DT_ERR_NOMEM, "ucx_shm_boxes.c: out of memory");
    }
    for (size_t e = 0; e < sn; e++)
        (*src)[e] = gval(s, r0 + (int64_t)e / (sshape[1] * sshape[2]),
                         c0 + (int64_t)e / sshape[2] % sshape[1], (int64_t)e % sshape[2]);
    memset(*dst, 0x7f, dn * 4);
    return DT_OK;
}

/* S(1) -> R: columns of the global array in, the whole array out; the runtime gathers boxes
 * itself exactly when the shared-memory path is on (*ran: whether it did). */
static dt_status gather(dt_comm *c, int shm, const int64_t *g, uint64_t s, int *ran) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    int64_t c0 = lo(g[1], n, me), sshape[3] = {g[0], lo(g[1], n, me + 1) - c0, g[2]};
    dt_box recv[64];
    for (int k = 0; k < n; k++)
        recv[k] = (dt_box){.off = {0, lo(g[1], n, k), 0},
                           .ext = {g[0], lo(g[1], n, k + 1) - lo(g[1], n, k), g[2]}};
    size_t dn = (size_t)(g[0] * g[1] * g[2]);
    float *src, *dst;
    int here;
    dt_status st = arrays(sshape, s, 0, c0, dn, &src, &dst);
    if (st != DT_OK) return st;
    st = dt_comm_gather_boxes_here(c, 4, src, dst, &here);
    if (st == DT_OK && here != shm)
        st = dt_error_set(DT_ERR_ARG, "ucx_shm_boxes.c: gather_boxes_here says %d with %s", here,
                          shm ? "shared memory" : "DT_UCX_SHM=0");
    *ran = st == DT_OK && here;
    if (*ran) st = dt_comm_gather_boxes(c, 3, 4, src, sshape, dst, g, recv);
    for (size_t e = 0; *ran && st == DT_OK && e < dn; e++) {
        float want =
            gval(s, (int64_t)e / (g[1] * g[2]), (int64_t)e / g[2] % g[1], (int64_t)e % g[2]);
        if (dst[e] != want) st = fail("gather_boxes S(1)->R", g, (int64_t)e, dst[e], want);
    }
    free(src);
    free(dst);
    return st;
}

/* S(0) -> S(1): rows of the global array in, columns out. */
static dt_status exchange(dt_comm *c, const int64_t *g, uint64_t s) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    int64_t r0 = lo(g[0], n, me), c0 = lo(g[1], n, me);
    int64_t sshape[3] = {lo(g[0], n, me + 1) - r0, g[1], g[2]};
    int64_t dshape[3] = {g[0], lo(g[1], n, me + 1) - c0, g[2]};
    dt_box send[64], recv[64];
    for (int k = 0; k < n; k++) {
        send[k] = (dt_box){.off = {0, lo(g[1], n, k), 0},
                           .ext = {sshape[0], lo(g[1], n, k + 1) - lo(g[1], n, k), g[2]}};
        recv[k] = (dt_box){.off = {lo(g[0], n, k), 0, 0},
                           .ext = {lo(g[0], n, k + 1) - lo(g[0], n, k), dshape[1], g[2]}};
    }
    size_t dn = (size_t)(g[0] * dshape[1] * g[2]);
    float *src, *dst;
    dt_status st = arrays(sshape, s, r0, 0, dn, &src, &dst);
    if (st != DT_OK) return st;
    st = dt_comm_exchange_boxes(c, 3, 4, src, sshape, send, dst, dshape, recv);
    for (size_t e = 0; st == DT_OK && e < dn; e++) {
        int64_t i = (int64_t)e / (dshape[1] * g[2]), j = (int64_t)e / g[2] % dshape[1];
        float want = gval(s, i, c0 + j, (int64_t)e % g[2]);
        if (dst[e] != want) st = fail("exchange_boxes S(0)->S(1)", g, (int64_t)e, dst[e], want);
    }
    free(src);
    free(dst);
    return st;
}

/* P -> S(d): member r holds the global array of series s + r; member k gets the sum of its
 * slice of dim d. */
static dt_status reduce(dt_comm *c, const int64_t *g, int d, uint64_t s) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    dt_box boxes[64];
    for (int k = 0; k < n; k++) {
        boxes[k] = (dt_box){.ext = {g[0], g[1], g[2]}};
        boxes[k].off[d] = lo(g[d], n, k);
        boxes[k].ext[d] = lo(g[d], n, k + 1) - lo(g[d], n, k);
    }
    const dt_box *b = &boxes[me];
    size_t dn = (size_t)(b->ext[0] * b->ext[1] * b->ext[2]);
    float *src, *dst;
    dt_status st = arrays(g, s + (uint64_t)me, 0, 0, dn, &src, &dst);
    if (st != DT_OK) return st;
    st = dt_comm_reduce_scatter_boxes(c, 3, src, g, boxes, dst, DT_F32, DT_REDUCE_SUM);
    for (size_t e = 0; st == DT_OK && e < dn; e++) {
        int64_t i = (int64_t)e / (b->ext[1] * b->ext[2]), j = (int64_t)e / b->ext[2] % b->ext[1],
                k = (int64_t)e % b->ext[2];
        float want = 0;
        for (int r = 0; r < n; r++)
            want += gval(s + (uint64_t)r, b->off[0] + i, b->off[1] + j, b->off[2] + k);
        if (dst[e] != want)
            st = fail(d == 1 ? "reduce_scatter_boxes P->S(1)" : "reduce_scatter_boxes P->S(2)", g,
                      (int64_t)e, dst[e], want);
    }
    free(src);
    free(dst);
    return st;
}

dt_status ucx_shm_boxes(dt_comm *c, int shm, uint64_t seed, long *calls) {
    /* several rounds per pair; members with no rows and no columns */
    static const int64_t shapes[2][3] = {{37, 203, 130}, {3, 2, 5}};
    for (int k = 0; k < 2; k++) {
        const int64_t *g = shapes[k];
        dt_status st = exchange(c, g, seed + (uint64_t)k);
        if (st == DT_OK) st = reduce(c, g, 1, seed + 10 + (uint64_t)k);
        if (st == DT_OK) st = reduce(c, g, 2, seed + 20 + (uint64_t)k);
        int gathered = 0;
        if (st == DT_OK) st = gather(c, shm, g, seed + 30 + (uint64_t)k, &gathered);
        if (st != DT_OK) return st;
        *calls += 3 + gathered;
    }
    return DT_OK;
}
