/* Grouped gathers and reduces of many arrays' blocks (dt_comm_all_gather_pieces,
 * dt_comm_reduce_scatter_pieces), direct on the local runtime and packed (the form the other
 * runtimes run), blocking and on the communication thread: every element against a naive
 * computation here (the global value; a sum in rank order), uneven and empty blocks cut along
 * dim 0 or an inner dim, 2, 3 and 4 ranks; ranks that pass different pieces fail alike, and
 * bad arguments are named. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/request.h"
#include "helpers.h"

enum { MAXP = 5 };

typedef struct pcase {
    int n;                     /* pieces */
    int ndim[MAXP], cut[MAXP]; /* dims of each array, and the dim cut into the ranks' blocks */
    int64_t shape[MAXP][3];
} pcase;

/* Rank r's value at element e of piece i: not exactly representable, so the order of a sum
 * shows in its bits (r = -1: the gathered arrays' value, the same on every rank). */
static float value(int r, int i, size_t e) {
    uint64_t h = (uint64_t)(r + 5) * 0x9E3779B97F4A7C15ull ^
                 (e + 11 * (size_t)i + 7) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (float)((double)((int64_t)(h % 300007) - 150000) / 613.0);
}

/* torch.chunk's blocks of dim cut: ceil-divided, trailing ranks may get less or nothing. */
static void blocks_of(const pcase *t, int i, int ranks, dt_box *boxes) {
    int64_t e = t->shape[i][t->cut[i]], chunk = (e + ranks - 1) / ranks;
    for (int k = 0; k < ranks; k++) {
        memset(&boxes[k], 0, sizeof boxes[k]);
        for (int d = 0; d < t->ndim[i]; d++)
            boxes[k].ext[d] = t->shape[i][d];
        int64_t lo = k * chunk < e ? k * chunk : e, hi = (k + 1) * chunk < e ? (k + 1) * chunk : e;
        boxes[k].off[t->cut[i]] = lo;
        boxes[k].ext[t->cut[i]] = hi - lo;
    }
}

/* Whether element e of an array of shape lies in box b (and its place there, densely). */
static int in_box(const dt_box *b, const int64_t *shape, int ndim, size_t e, size_t *dense) {
    size_t at = 0;
    int64_t idx[3];
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(e % (size_t)shape[d]);
        e /= (size_t)shape[d];
    }
    for (int d = 0; d < ndim; d++) {
        if (idx[d] < b->off[d] || idx[d] >= b->off[d] + b->ext[d]) return 0;
        at = at * (size_t)b->ext[d] + (size_t)(idx[d] - b->off[d]);
    }
    *dense = at;
    return 1;
}

enum { BLOCKING, PACKED, STARTED };

static dt_status run_once(dt_comm *comm, const pcase *t, int how, int reduce) {
    const int ranks = dt_comm_size(comm), me = dt_comm_rank(comm);
    dt_comm_piece pieces[MAXP];
    dt_box boxes[MAXP][4];
    float *full[MAXP], *shard[MAXP];
    size_t numel[MAXP], own[MAXP];
    for (int i = 0; i < t->n; i++) {
        blocks_of(t, i, ranks, boxes[i]);
        numel[i] = dt_shape_numel(t->shape[i], t->ndim[i]);
        own[i] = dt_shape_numel(boxes[i][me].ext, t->ndim[i]);
        full[i] = malloc((numel[i] + 1) * sizeof(float)); /* one past the end: never written */
        shard[i] = malloc((own[i] + 1) * sizeof(float));
        R_CHECK(full[i] && shard[i], "out of memory");
        for (size_t e = 0; e <= numel[i]; e++)
            full[i][e] = reduce ? value(me, i, e) : -7.0f;
        shard[i][own[i]] = -1234.5f;
        for (size_t e = 0, at; !reduce && e < numel[i]; e++)
            if (in_box(&boxes[i][me], t->shape[i], t->ndim[i], e, &at))
                shard[i][at] = value(-1, i, e);
        pieces[i] = (dt_comm_piece){.full = full[i],
                                    .shard = shard[i],
                                    .shape = t->shape[i],
                                    .boxes = boxes[i],
                                    .ndim = t->ndim[i]};
    }
    int flags = how == PACKED ? DT_PIECES_PACKED : 0;
    dt_status st;
    if (how == STARTED) {
        dt_request *req;
        st = reduce ? dt_comm_reduce_scatter_pieces_start(comm, t->n, pieces, DT_F32, DT_REDUCE_SUM,
                                                          0, &req)
                    : dt_comm_all_gather_pieces_start(comm, t->n, pieces, DT_F32, 0, &req);
        if (st == DT_OK) st = dt_request_wait(req, NULL);
    } else {
        st = reduce
                 ? dt_comm_reduce_scatter_pieces(comm, t->n, pieces, DT_F32, DT_REDUCE_SUM, flags)
                 : dt_comm_all_gather_pieces(comm, t->n, pieces, DT_F32, flags);
    }
    for (int i = 0; i < t->n && st == DT_OK; i++) {
        for (size_t e = 0, at; e < numel[i] && st == DT_OK; e++) {
            if (!reduce) { /* every element of every array, whoever's block it was */
                float want = value(-1, i, e);
                if (memcmp(&full[i][e], &want, 4))
                    st = t_fail(__FILE__, __LINE__,
                                "how %d rank %d: gathered piece %d element "
                                "%zu is %.9g, want %.9g",
                                how, me, i, e, full[i][e], want);
                continue;
            }
            if (!in_box(&boxes[i][me], t->shape[i], t->ndim[i], e, &at)) continue;
            float want = value(0, i, e); /* the naive sum, ranks in order */
            for (int r = 1; r < ranks; r++)
                want += value(r, i, e);
            if (memcmp(&shard[i][at], &want, 4))
                st = t_fail(__FILE__, __LINE__,
                            "how %d rank %d: reduced piece %d element %zu is "
                            "%.9g, want %.9g",
                            how, me, i, e, shard[i][at], want);
        }
        if (st == DT_OK && (shard[i][own[i]] != -1234.5f ||
                            full[i][numel[i]] != (reduce ? value(me, i, numel[i]) : -7.0f)))
            st = t_fail(__FILE__, __LINE__, "rank %d: piece %d written past its end", me, i);
    }
    for (int i = 0; i < t->n; i++)
        free(full[i]), free(shard[i]);
    return st;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    dt_comm *comm;
    R_OK(dt_ctx_world_comm(ctx, &comm));
    R_CHECK(dt_comm_pieces_direct(comm), "the local runtime moves pieces directly");
    for (int how = BLOCKING; how <= STARTED; how++)
        for (int reduce = 0; reduce < 2; reduce++)
            R_OK(run_once(comm, arg, how, reduce));
    return DT_OK;
}

Test(pieces, uneven_blocks_along_dim_0) {
    /* 10 rows over 4 ranks: 3, 3, 3, 1; 5 over 4: 2, 2, 1, 0; 2 rows: two ranks hold nothing */
    pcase t = {3, {2, 1, 2}, {0, 0, 0}, {{10, 7}, {5}, {2, 3}}};
    t_run(4, body, &t);
    t_run(3, body, &t);
    t_run(2, body, &t);
}

Test(pieces, blocks_cut_along_an_inner_dim) {
    /* dim 1 cut: every block is a strided box of its array; a 3-D array cut in its middle dim */
    pcase t = {3, {2, 3, 2}, {1, 1, 0}, {{6, 9}, {2, 5, 3}, {9, 4}}};
    t_run(4, body, &t);
    t_run(3, body, &t);
    t_run(2, body, &t);
}

Test(pieces, large_and_empty_arrays) {
    pcase t = {3, {1, 2, 1}, {0, 0, 0}, {{70001}, {0, 4}, {33}}};
    t_run(4, body, &t);
    t_run(3, body, &t);
    pcase none = {0, {0}, {0}, {{0}}};
    t_run(2, body, &none);
}

/* Ranks that pass different boxes fail alike, naming the piece; the group still works. */
static dt_status differ_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *comm;
    R_OK(dt_ctx_world_comm(ctx, &comm));
    const int me = dt_comm_rank(comm);
    float full[8] = {0}, shard[8] = {0};
    int64_t shape[1] = {8};
    dt_box boxes[3] = {{{0}, {3}}, {{3}, {3}}, {{6}, {2}}};
    if (me == 1) boxes[1].ext[0] = 2, boxes[2].off[0] = 5, boxes[2].ext[0] = 3;
    dt_comm_piece p = {.full = full, .shard = shard, .shape = shape, .boxes = boxes, .ndim = 1};
    R_ERR(dt_comm_all_gather_pieces(comm, 1, &p, DT_F32, 0), DT_ERR_COMM, "pieces[0] differs");
    R_ERR(dt_comm_reduce_scatter_pieces(comm, 1, &p, DT_F32, DT_REDUCE_SUM, 0), DT_ERR_COMM,
          "pieces[0] differs");
    R_OK(dt_all_reduce(comm, full, full, 8, DT_F32, DT_REDUCE_SUM));
    return DT_OK;
}

Test(pieces, different_pieces_fail_on_every_rank) {
    t_run(3, differ_body, NULL);
}

static dt_status bad_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *comm;
    R_OK(dt_ctx_world_comm(ctx, &comm));
    float full[4] = {0}, shard[2] = {0};
    int64_t shape[1] = {4};
    dt_box boxes[2] = {{{0}, {2}}, {{2}, {2}}};
    dt_comm_piece p = {.full = full, .shard = shard, .shape = shape, .boxes = boxes, .ndim = 1};
    R_ERR(dt_comm_all_gather_pieces(comm, -1, &p, DT_F32, 0), DT_ERR_ARG, "n = -1");
    R_ERR(dt_comm_all_gather_pieces(NULL, 1, &p, DT_F32, 0), DT_ERR_ARG, "comm");
    R_ERR(dt_comm_reduce_scatter_pieces(comm, 1, &p, DT_F8E4M3, DT_REDUCE_SUM, 0), DT_ERR_ARG,
          "dtype");
    dt_comm_piece q = p;
    q.shard = NULL;
    R_ERR(dt_comm_all_gather_pieces(comm, 1, &q, DT_F32, 0), DT_ERR_ARG, "pieces[0].shard");
    dt_box wide[2] = {{{0}, {2}}, {{3}, {2}}};
    q = p, q.boxes = wide;
    R_ERR(dt_comm_reduce_scatter_pieces(comm, 1, &q, DT_F32, DT_REDUCE_SUM, 0), DT_ERR_ARG,
          "pieces[0].boxes[1] spans [3, 5)");
    q = p, q.ndim = 9;
    dt_request *req;
    R_ERR(dt_comm_all_gather_pieces_start(comm, 1, &q, DT_F32, 0, &req), DT_ERR_ARG,
          "pieces[0].ndim = 9");
    return DT_OK;
}

Test(pieces, bad_arguments_are_named) {
    t_run(2, bad_body, NULL);
}
