/* In-place all_reduce of several arrays as one (dt_comm_all_reduce_bufs, the local runtime's
 * all_reduce_bufs): every element against a naive reduction of every rank's value in rank
 * order, computed here, and bitwise against dt_all_reduce of the arrays packed; empty arrays,
 * arrays that cross the 64 KiB pieces and chunk edges, 2, 3 and 4 ranks; members that cut the
 * arrays differently fail alike, and bad arguments are named. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "helpers.h"

enum { MAXB = 6 };

typedef struct bcase {
    int n;               /* arrays */
    size_t counts[MAXB]; /* elements of each */
} bcase;

/* Rank r's value at element i of the whole: not exactly representable, so the order of the
 * sum shows in its bits. */
static double part(int r, size_t i) {
    uint64_t h = (uint64_t)(r + 3) * 0x9E3779B97F4A7C15ull ^ (i + 7) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (double)((int64_t)(h % 300007) - 150000) / 613.0;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    const bcase *t = arg;
    dt_comm *comm;
    R_OK(dt_ctx_world_comm(ctx, &comm));
    const int n = dt_comm_size(comm), me = dt_comm_rank(comm);
    R_CHECK(dt_comm_all_reduce_bufs_here(comm), "the local runtime reduces arrays in place");
    size_t total = 0;
    for (int i = 0; i < t->n; i++)
        total += t->counts[i];
    void *bufs[MAXB];
    float *packed = malloc((total + 1) * sizeof *packed);
    R_CHECK(packed != NULL, "out of memory");
    dt_status st = DT_OK;
    const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX};
    for (size_t q = 0; q < sizeof ops / sizeof ops[0] && st == DT_OK; q++) {
        /* Each array one past its end, to see nothing is written there. */
        for (int i = 0, at = 0; i < t->n; at += (int)t->counts[i++]) {
            float *b = malloc((t->counts[i] + 1) * sizeof *b);
            R_CHECK(b != NULL, "out of memory");
            for (size_t e = 0; e < t->counts[i]; e++)
                b[e] = (float)part(me, (size_t)at + e);
            b[t->counts[i]] = -1234.5f;
            bufs[i] = b;
        }
        for (size_t e = 0; e < total; e++)
            packed[e] = (float)part(me, e);
        st = dt_comm_all_reduce_bufs(comm, bufs, t->counts, t->n, DT_F32, ops[q]);
        if (st == DT_OK) st = dt_all_reduce(comm, packed, packed, total, DT_F32, ops[q]);
        for (int i = 0, at = 0; i < t->n && st == DT_OK; at += (int)t->counts[i++]) {
            const float *b = bufs[i];
            for (size_t e = 0; e < t->counts[i] && st == DT_OK; e++) {
                /* the naive reduction, ranks 0..n-1 in order */
                float want = (float)part(0, (size_t)at + e);
                for (int r = 1; r < n; r++) {
                    float v = (float)part(r, (size_t)at + e);
                    want = ops[q] == DT_REDUCE_MAX ? (v > want ? v : want) : want + v;
                }
                if (ops[q] == DT_REDUCE_AVG) want /= (float)n;
                if (memcmp(&b[e], &want, 4))
                    st = t_fail(__FILE__, __LINE__,
                                "rank %d op %zu: array %d element %zu is "
                                "%.9g, want %.9g",
                                me, q, i, e, b[e], want);
                else if (memcmp(&b[e], &packed[(size_t)at + e], 4))
                    st = t_fail(__FILE__, __LINE__,
                                "rank %d op %zu: array %d element %zu is "
                                "%.9g, the packed all_reduce's %.9g",
                                me, q, i, e, b[e], packed[(size_t)at + e]);
            }
            if (st == DT_OK && b[t->counts[i]] != -1234.5f)
                st = t_fail(__FILE__, __LINE__, "rank %d: array %d written past its end", me, i);
        }
        for (int i = 0; i < t->n; i++)
            free(bufs[i]);
    }
    free(packed);
    return st;
}

static void run_case(int ranks, bcase t) {
    t_run(ranks, body, &t);
}

Test(reduce_bufs, small_and_empty_arrays) {
    run_case(4, (bcase){4, {5, 0, 17, 3}});
    run_case(3, (bcase){3, {1, 1, 1}}); /* one element a rank */
    run_case(2, (bcase){2, {0, 9}});
    run_case(4, (bcase){2, {1, 1}}); /* fewer elements than ranks: two ranks reduce nothing */
    run_case(4, (bcase){0, {0}});    /* nothing at all */
}

Test(reduce_bufs, pieces_and_chunks_cross_arrays) {
    /* 16384 floats a 64 KiB piece: arrays that end inside a piece, a chunk edge inside an
     * array, and one array longer than two pieces */
    run_case(4, (bcase){5, {40000, 3, 16385, 0, 70001}});
    run_case(3, (bcase){3, {16384, 16384, 16383}});
    run_case(2, (bcase){1, {100003}});
}

/* Ranks that cut the same total differently: every member fails alike, naming the cut. */
static dt_status cut_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *comm;
    R_OK(dt_ctx_world_comm(ctx, &comm));
    const int me = dt_comm_rank(comm);
    float a[8] = {0}, b[8] = {0};
    void *bufs[2] = {a, b};
    size_t counts[2] = {me == 1 ? 3 : 4, me == 1 ? 5 : 4};
    R_ERR(dt_comm_all_reduce_bufs(comm, bufs, counts, 2, DT_F32, DT_REDUCE_SUM), DT_ERR_COMM,
          "cut the arrays differently");
    /* the group still works after */
    R_OK(dt_all_reduce(comm, a, a, 8, DT_F32, DT_REDUCE_SUM));
    return DT_OK;
}

Test(reduce_bufs, different_cuts_fail_on_every_rank) {
    t_run(3, cut_body, NULL);
}

static dt_status bad_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *comm;
    R_OK(dt_ctx_world_comm(ctx, &comm));
    float a[2] = {0};
    void *bufs[2] = {a, NULL};
    size_t counts[2] = {2, 3};
    R_ERR(dt_comm_all_reduce_bufs(comm, bufs, counts, -1, DT_F32, DT_REDUCE_SUM), DT_ERR_ARG,
          "n = -1");
    R_ERR(dt_comm_all_reduce_bufs(comm, NULL, counts, 2, DT_F32, DT_REDUCE_SUM), DT_ERR_ARG,
          "n = 2");
    R_ERR(dt_comm_all_reduce_bufs(comm, bufs, counts, 2, DT_F32, DT_REDUCE_SUM), DT_ERR_ARG,
          "bufs[i]");
    R_ERR(dt_comm_all_reduce_bufs(NULL, bufs, counts, 1, DT_F32, DT_REDUCE_SUM), DT_ERR_ARG,
          "comm");
    return DT_OK;
}

Test(reduce_bufs, bad_arguments_are_named) {
    t_run(2, bad_body, NULL);
}
