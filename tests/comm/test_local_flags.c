/* The local runtime's sequence flags (src/comm/local/flags.c): a wait that sleeps on the futex
 * and wakes when its peer publishes, and long runs of mixed collectives on the world and on
 * sub-communicators, with ranks held back at random, where members wait only for the peers
 * they exchange data with; every result against values computed here. */
#include <stdlib.h>
#include <time.h>

#include "comm/local/local_impl.h"
#include "helpers.h"

static void threads_not_fibers(void) { setenv("DT_LOCAL_FIBERS", "0", 1); }

static void sleep_ns(long ns) {
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    nanosleep(&ts, NULL);
}

/* Ranks other than 0 wait for rank 0's flag, which it publishes only once all of them sleep
 * on it (the spin is short; rank 0 waits for the waiter count, up to 20 s). */
static dt_status sleep_wake_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    lw_comm *c = (lw_comm *)world;
    const int n = dt_comm_size(world), me = dt_comm_rank(world);
    for (int round = 0; round < 3; round++) {
        R_OK(dt_barrier(world)); /* a new epoch */
        lw_flag *f = &c->group->flags[0];
        if (me == 0) {
            int i = 0;
            while ((int)atomic_load(&f->waiters) < n - 1 && i++ < 20000)
                sleep_ns(1000000);
            R_CHECK((int)atomic_load(&f->waiters) == n - 1, "round %d: %u of %d ranks asleep",
                    round, atomic_load(&f->waiters), n - 1);
            lw_publish(c, LW_DONE);
        } else {
            lw_wait_for(c, 0, LW_HALF); /* passed by DONE */
            R_CHECK((int32_t)(atomic_load(&f->seq) - (c->epoch * LW_PHASES + LW_DONE)) >= 0,
                    "round %d: woke before rank 0 published", round);
        }
    }
    return DT_OK;
}

/* Rank 0 polls the waiter count between sleeps: threads, not fibers (core/fiber.h), which
 * would keep the sleepers it waits for from running. */
Test(local_flags, wait_sleeps_then_wakes, .init = threads_not_fibers) {
    t_run(2, sleep_wake_body, NULL); /* spins first */
    t_run(8, sleep_wake_body, NULL); /* more ranks than cores here: sleeps at once */
}

/* Exactly representable values (|v| <= 16), different every round, rank and element. */
static float val(int round, int r, size_t i) {
    uint64_t h = (uint64_t)round * 2654435761u + (uint64_t)r * 40503u + i * 7u;
    return (float)(int)(h % 33) - 16.0f;
}

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static const size_t sizes[] = {1, 100, 3000, 70000};

typedef struct mix {
    int rounds;
} mix;

/* members[k]: world rank of group rank k. */
static float sum_over(const int *members, int n, int round, size_t i) {
    float acc = 0;
    for (int k = 0; k < n; k++)
        acc += val(round, members[k], i);
    return acc;
}

static dt_status one_round(dt_comm *comm, int round, int kind, size_t base, int s) {
    const int n = dt_comm_size(comm), me = dt_comm_rank(comm);
    int members[DT_LOCAL_MAX_RANKS];
    for (int k = 0; k < n; k++)
        members[k] = dt_comm_world_rank(comm, k);
    const int w = dt_comm_world_rank(comm, me);
    size_t cnt[DT_LOCAL_MAX_RANKS], dis[DT_LOCAL_MAX_RANKS], total = 0;
    dt_status st = DT_OK;
    float *a = NULL, *b = NULL;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            st = t_fail(__FILE__, __LINE__, __VA_ARGS__);                                          \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
    switch (kind) {
    case 0: { /* all_reduce */
        a = malloc(base * sizeof *a), b = malloc(base * sizeof *b);
        for (size_t i = 0; i < base; i++)
            a[i] = val(round, w, i);
        R_OK(dt_all_reduce(comm, a, b, base, DT_F32, DT_REDUCE_SUM));
        for (size_t i = 0; i < base; i++)
            CHECK(b[i] == sum_over(members, n, round, i), "round %d all_reduce [%zu]", round, i);
        break;
    }
    case 1:   /* all_gatherv, uneven, some blocks empty */
    case 2: { /* reduce_scatterv, the same counts */
        for (int j = 0; j < n; j++) {
            dis[j] = total;
            total += cnt[j] = (size_t)((j * 5 + round) % 4) * base / 2;
        }
        a = malloc(total * sizeof *a + 4), b = malloc(total * sizeof *b + 4);
        if (kind == 1) {
            for (size_t i = 0; i < cnt[me]; i++)
                a[i] = val(round, w, i);
            R_OK(dt_all_gatherv(comm, a, b, cnt, NULL, DT_F32));
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < cnt[j]; i++)
                    CHECK(b[dis[j] + i] == val(round, members[j], i),
                          "round %d all_gatherv block %d [%zu]", round, j, i);
        } else {
            for (size_t i = 0; i < total; i++)
                a[i] = val(round, w, i);
            R_OK(dt_reduce_scatterv(comm, a, b, cnt, DT_F32, DT_REDUCE_SUM));
            for (size_t i = 0; i < cnt[me]; i++)
                CHECK(b[i] == sum_over(members, n, round, dis[me] + i),
                      "round %d reduce_scatterv [%zu]", round, i);
        }
        break;
    }
    case 3: { /* all_to_allv, sparse: many pairs send nothing */
        size_t sc[DT_LOCAL_MAX_RANKS], sd[DT_LOCAL_MAX_RANKS], rc[DT_LOCAL_MAX_RANKS],
            rd[DT_LOCAL_MAX_RANKS], stot = 0, rtot = 0;
#define PAIR(j, k) ((((j)*3 + (k)*5 + round) % 3 == 0) ? 0 : base * (size_t)(((j) + (k)) % 3))
        for (int k = 0; k < n; k++) {
            sd[k] = stot, stot += sc[k] = PAIR(me, k);
            rd[k] = rtot, rtot += rc[k] = PAIR(k, me);
        }
#undef PAIR
        a = malloc(stot * sizeof *a + 4), b = malloc(rtot * sizeof *b + 4);
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < sc[k]; i++)
                a[sd[k] + i] = val(round, w, (size_t)k * 1000003 + i);
        R_OK(dt_all_to_allv(comm, a, sc, sd, b, rc, rd, DT_F32));
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < rc[j]; i++)
                CHECK(b[rd[j] + i] == val(round, members[j], (size_t)me * 1000003 + i),
                      "round %d all_to_allv from %d [%zu]", round, j, i);
        break;
    }
    case 4: { /* broadcast from a root that moves */
        const int root = round % n;
        a = malloc(base * sizeof *a);
        for (size_t i = 0; i < base; i++)
            a[i] = me == root ? val(round, w, i) : -99.0f;
        R_OK(dt_broadcast(comm, a, base, DT_F32, root));
        for (size_t i = 0; i < base; i++)
            CHECK(a[i] == val(round, members[root], i), "round %d broadcast [%zu]", round, i);
        break;
    }
    case 5:   /* exchange_boxes, rows to one peer: pushed */
    case 6: { /* exchange_boxes, two column boxes with different rows to two peers: pulled */
        const int64_t rows = 4, cc = (int64_t)(base / 16 + 1), R = rows * n, C = cc * n;
        const int64_t h = R / 2;
        const int64_t src_shape[2] = {R, C};
        int64_t dst_shape[2] = {kind == 5 ? rows : R, kind == 5 ? C : cc};
        dt_box send[DT_LOCAL_MAX_RANKS] = {{{0}}}, recv[DT_LOCAL_MAX_RANKS] = {{{0}}};
        const int k1 = (me + s) % n, k2 = (me + s + 1) % n;
        const int j1 = ((me - s) % n + n) % n, j2 = ((me - s - 1) % n + 2 * n) % n;
        if (kind == 5) {
            send[k1] = (dt_box){.off = {k1 * rows, 0}, .ext = {rows, C}};
            recv[j1] = (dt_box){.off = {0, 0}, .ext = {rows, C}};
        } else if (n > 1) {
            send[k1] = (dt_box){.off = {0, 0}, .ext = {h, cc}};
            send[k2] = (dt_box){.off = {h, cc}, .ext = {R - h, cc}};
            recv[j1] = (dt_box){.off = {0, 0}, .ext = {h, cc}};
            recv[j2] = (dt_box){.off = {h, 0}, .ext = {R - h, cc}};
        } else {
            break;
        }
        a = malloc((size_t)(R * C) * sizeof *a);
        b = malloc((size_t)(dst_shape[0] * dst_shape[1]) * sizeof *b);
        for (size_t i = 0; i < (size_t)(R * C); i++)
            a[i] = val(round, w, i);
        R_OK(
            dt_comm_exchange_boxes(comm, 2, sizeof(float), a, src_shape, send, b, dst_shape, recv));
        for (int64_t i = 0; i < dst_shape[0]; i++)
            for (int64_t c = 0; c < dst_shape[1]; c++) {
                float want = kind == 5 ? val(round, members[j1], (size_t)((me * rows + i) * C + c))
                             : i < h   ? val(round, members[j1], (size_t)(i * C + c))
                                       : val(round, members[j2], (size_t)(i * C + cc + c));
                CHECK(b[i * dst_shape[1] + c] == want, "round %d exchange_boxes %d [%lld, %lld]",
                      round, kind, (long long)i, (long long)c);
            }
        break;
    }
    default: { /* reduce_scatter_boxes: P -> S(1) */
        const int64_t R = 8, cc = (int64_t)(base / 8 + 1), C = cc * n, shape[2] = {R, C};
        dt_box boxes[DT_LOCAL_MAX_RANKS];
        for (int k = 0; k < n; k++)
            boxes[k] = (dt_box){.off = {0, k * cc}, .ext = {R, cc}};
        a = malloc((size_t)(R * C) * sizeof *a), b = malloc((size_t)(R * cc) * sizeof *b);
        for (size_t i = 0; i < (size_t)(R * C); i++)
            a[i] = val(round, w, i);
        R_OK(dt_comm_reduce_scatter_boxes(comm, 2, a, shape, boxes, b, DT_F32, DT_REDUCE_SUM));
        for (int64_t i = 0; i < R; i++)
            for (int64_t c = 0; c < cc; c++)
                CHECK(b[i * cc + c] == sum_over(members, n, round, (size_t)(i * C + me * cc + c)),
                      "round %d reduce_scatter_boxes [%lld, %lld]", round, (long long)i,
                      (long long)c);
        break;
    }
    }
#undef CHECK
out:
    free(a);
    free(b);
    return st;
}

/* Every rank draws the same choices; a rank held back makes the others race ahead into the
 * next collectives of other groups while its own group still reads its buffers. */
static dt_status mix_body(dt_ctx *ctx, void *arg) {
    const mix *m = arg;
    const int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    int parity[DT_LOCAL_MAX_RANKS], np = 0, half[DT_LOCAL_MAX_RANKS], nh = 0,
                                    rev[DT_LOCAL_MAX_RANKS];
    for (int r = me % 2; r < n; r += 2)
        parity[np++] = r;
    for (int r = me < n / 2 ? 0 : n / 2; r < (me < n / 2 ? n / 2 : n); r++)
        half[nh++] = r;
    for (int r = 0; r < n; r++)
        rev[r] = n - 1 - r;
    dt_comm *comms[4];
    R_OK(dt_ctx_world_comm(ctx, &comms[0]));
    R_OK(dt_comm_create(ctx, parity, np, &comms[1]));
    R_OK(dt_comm_create(ctx, half, nh, &comms[2]));
    R_OK(dt_comm_create(ctx, rev, n, &comms[3]));
    uint64_t rng = 12345;
    dt_status st = DT_OK;
    for (int round = 0; round < m->rounds && st == DT_OK; round++) {
        int which = (int)(next(&rng) % 4), kind = (int)(next(&rng) % 8);
        size_t base = sizes[next(&rng) % (sizeof sizes / sizeof sizes[0])];
        int s = (int)(next(&rng) % 8), slow = (int)(next(&rng) % (uint64_t)(2 * n));
        long pause = (long)(next(&rng) % 2000) * 1000;
        if (slow == me) sleep_ns(pause); /* one rank in two rounds comes late */
        st = one_round(comms[which], round, kind, base, s);
        if (st != DT_OK)
            fprintf(stderr, "rank %d: round %d (comm %d, kind %d, %zu) failed\n", me, round, which,
                    kind, base);
    }
    for (int i = 1; i < 4; i++)
        R_OK(dt_comm_destroy(comms[i]));
    return st;
}

Test(local_flags, mixed_collectives_and_groups) {
    mix m = {.rounds = 150};
    t_run(8, mix_body, &m); /* 8 ranks on the cores there are (2 here) */
    m.rounds = 100;
    t_run(3, mix_body, &m);
    t_run(2, mix_body, &m);
}
