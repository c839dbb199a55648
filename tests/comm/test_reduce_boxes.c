/* P -> S(d > 0) on the local runtime (dt_comm_reduce_scatter_boxes, src/comm/local/boxes.c):
 * each rank's box against a naive sum of every rank's partial in rank order, computed here,
 * for uneven splits, empty boxes and 3-D arrays, in push order and pulled (the members pull
 * when any asks), with the same bits both ways. */
#include "comm/comm_impl.h"
#include "comm/local/local_impl.h"
#include "core/box.h"
#include "helpers.h"

typedef struct rcase {
    int ndim, d;
    int64_t shape[3];
    int ceil_split; /* chunks of ceil(D / n), as Shard does (trailing boxes may be empty); else
                     * [D k / n, D (k + 1) / n) */
    int push;       /* push order applies: at least one outer step per rank */
} rcase;

/* Rank r's partial at flat index i: not exactly representable, so the sum's order shows in
 * its bits; never -0. */
static double part(int r, size_t i) {
    uint64_t h = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    return (double)((int64_t)(h % 200001) - 100000) / 977.0;
}

static void box_of(const rcase *t, int n, int k, dt_box *b) {
    const int64_t D = t->shape[t->d];
    int64_t lo, hi;
    if (t->ceil_split) {
        const int64_t chunk = (D + n - 1) / n;
        lo = k * chunk < D ? k * chunk : D;
        hi = (k + 1) * chunk < D ? (k + 1) * chunk : D;
    } else {
        lo = D * k / n, hi = D * (k + 1) / n;
    }
    *b = (dt_box){{0}};
    memcpy(b->ext, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    b->off[t->d] = lo;
    b->ext[t->d] = hi - lo;
}

/* Flat index in the whole array of element e of box b (dense, row-major). */
static size_t flat_of(const rcase *t, const dt_box *b, size_t e) {
    size_t at = 0, stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const size_t i = e % (size_t)b->ext[d];
        e /= (size_t)b->ext[d];
        at += ((size_t)b->off[d] + i) * stride;
        stride *= (size_t)t->shape[d];
    }
    return at;
}

/* One reduction with the members' pull wishes as given; pushed says whether it pushed. */
static dt_status reduce(dt_comm *comm, const rcase *t, const void *src, const dt_box *boxes,
                        void *dst, dt_dtype dt, dt_reduce_op op, int pull, int *pushed) {
    lw_comm *c = (lw_comm *)comm;
    const unsigned before = c->reduce_pushes;
    c->reduce_pull = pull;
    dt_status st = dt_comm_reduce_scatter_boxes(comm, t->ndim, src, t->shape, boxes, dst, dt, op);
    c->reduce_pull = 0;
    *pushed = c->reduce_pushes != before;
    return st;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    const rcase *t = arg;
    dt_comm *comm;
    R_OK(dt_ctx_world_comm(ctx, &comm));
    const int n = dt_comm_size(comm), me = dt_comm_rank(comm);
    dt_box boxes[8];
    for (int k = 0; k < n; k++)
        box_of(t, n, k, &boxes[k]);
    const size_t total = dt_shape_numel(t->shape, t->ndim);
    const size_t mine = dt_shape_numel(boxes[me].ext, t->ndim);
    float *fsrc = malloc(total * sizeof *fsrc), *fwant = malloc((mine + 1) * sizeof *fwant);
    int32_t *isrc = malloc(total * sizeof *isrc), *iwant = malloc((mine + 1) * sizeof *iwant);
    float *f[3];
    int32_t *iv[3];
    for (int v = 0; v < 3; v++) {
        f[v] = malloc((mine + 1) * sizeof *f[v]);
        iv[v] = malloc((mine + 1) * sizeof *iv[v]);
    }
    for (size_t i = 0; i < total; i++) {
        fsrc[i] = (float)part(me, i);
        isrc[i] = (int32_t)(part(me, i) * 977.0);
    }
    dt_status st = DT_OK;
    const struct {
        dt_dtype dt;
        dt_reduce_op op;
    } kinds[] = {{DT_F32, DT_REDUCE_SUM}, {DT_F32, DT_REDUCE_AVG}, {DT_I32, DT_REDUCE_SUM}};
    for (size_t q = 0; q < sizeof kinds / sizeof kinds[0] && st == DT_OK; q++) {
        const int isf = kinds[q].dt == DT_F32;
        /* The naive reduction of the unsharded partials, over ranks 0..n-1 in order. */
        for (size_t e = 0; e < mine; e++) {
            const size_t at = flat_of(t, &boxes[me], e);
            float acc = 0;
            int32_t iacc = 0;
            for (int r = 0; r < n; r++) {
                acc += (float)part(r, at);
                iacc += (int32_t)(part(r, at) * 977.0);
            }
            fwant[e] = kinds[q].op == DT_REDUCE_AVG ? acc / (float)n : acc;
            iwant[e] = iacc;
        }
        void *src = isf ? (void *)fsrc : (void *)isrc;
        /* Every member pushes (where it applies), every member pulls, one member asks to pull. */
        for (int v = 0; v < 3; v++) {
            void *dst = isf ? (void *)f[v] : (void *)iv[v];
            memset(dst, 0xA5, (mine + 1) * 4);
            int pushed;
            const int pull = v == 1 || (v == 2 && me == n - 1);
            R_OK(reduce(comm, t, src, boxes, dst, kinds[q].dt, kinds[q].op, pull, &pushed));
            R_CHECK(pushed == (v == 0 && t->push), "kind %zu variant %d: pushed %d", q, v, pushed);
            for (size_t e = 0; e < mine; e++)
                if (isf ? memcmp(&f[v][e], &fwant[e], 4) : iv[v][e] != iwant[e]) {
                    st = t_fail(__FILE__, __LINE__,
                                "rank %d kind %zu variant %d: element %zu (flat %zu) is %.9g, "
                                "want %.9g",
                                me, q, v, e, flat_of(t, &boxes[me], e),
                                isf ? f[v][e] : (double)iv[v][e], isf ? fwant[e] : iwant[e]);
                    break;
                }
            static const unsigned char fill[4] = {0xA5, 0xA5, 0xA5, 0xA5};
            if (st == DT_OK && memcmp((char *)dst + mine * 4, fill, 4))
                st = t_fail(__FILE__, __LINE__, "kind %zu variant %d: wrote past the box", q, v);
            if (st == DT_OK && v > 0 && memcmp(dst, isf ? (void *)f[0] : (void *)iv[0], mine * 4))
                st = t_fail(__FILE__, __LINE__, "kind %zu: variant %d's bits differ", q, v);
            if (st != DT_OK) break;
        }
    }
    for (int v = 0; v < 3; v++) {
        free(f[v]);
        free(iv[v]);
    }
    free(fsrc), free(fwant), free(isrc), free(iwant);
    return st;
}

static void run_case(int n, rcase t) {
    t_run(n, body, &t);
}

Test(reduce_boxes, uneven_columns) {
    run_case(4, (rcase){2, 1, {7, 13}, 1, 1}); /* 4, 4, 4, 1 columns; 1 or 2 rows a rank */
    run_case(4, (rcase){2, 1, {9, 13}, 0, 1}); /* 3, 3, 3, 4 */
    run_case(3, (rcase){2, 1, {5, 2}, 1, 1});  /* 1, 1, 0: an empty box */
    run_case(4, (rcase){2, 1, {5, 3}, 1, 1});  /* 1, 1, 1, 0 */
    run_case(2, (rcase){2, 1, {3, 17}, 0, 1});
}

Test(reduce_boxes, three_dims) {
    run_case(4, (rcase){3, 2, {3, 5, 11}, 1, 1}); /* runs of 3, 3, 3, 2 under 15 outer steps */
    run_case(3, (rcase){3, 2, {2, 2, 8}, 0, 1});  /* 2, 3, 3 */
    run_case(4, (rcase){3, 1, {5, 6, 4}, 1, 1});  /* S(1): runs of 2 x 4, 2 x 4, 2 x 4, none */
    run_case(4, (rcase){3, 1, {4, 3, 2}, 0, 1});  /* 0, 1, 1, 1 rows of dim 1 */
}

Test(reduce_boxes, fewer_outer_steps_than_ranks_pull) {
    run_case(4, (rcase){2, 1, {3, 8}, 0, 0});
    run_case(4, (rcase){3, 2, {1, 2, 9}, 0, 0});
}

Test(reduce_boxes, streamed) { /* boxes of 1 and 1.5 MiB: streaming stores, runs of 1 and 6 KiB */
    run_case(4, (rcase){2, 1, {1024, 1024}, 1, 1});
    run_case(2, (rcase){3, 2, {8, 32, 3072}, 0, 1});
}
