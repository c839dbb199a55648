/* The local runtime: dt_local_run's arguments and results, rank identity, a failing or early
 * returning rank turning its peers' collectives into errors (never hangs), user-made
 * communicators, and a barrier stress run. Meshes are tested in test_mesh.c. */
#include <stdatomic.h>
#include <time.h>

#include "helpers.h"

#define MAXR 8 /* most ranks any test here runs */
/* One timeout for every test of the file (a hang becomes a failure): Criterion 2.4.1's runner
 * leaks a timer entry, which LeakSanitizer reports, when tests of one binary differ in it. */
#define TIMEOUT_S 60

static int sentinel_;
#define SENTINEL_COMM ((dt_comm *)&sentinel_)

/* The last error must also mention needle. */
#define R_MSG(needle)                                                                              \
    R_CHECK(strstr(dt_last_error(), (needle)), "message \"%s\" does not mention \"%s\"",           \
            dt_last_error(), (needle))

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Per-rank failure messages, so a rank-side test failure is reported even when dt_local_run
 * passes on another rank's message. */
typedef struct rank_msgs {
    char msg[MAXR][512];
} rank_msgs;

static dt_status keep_msg(rank_msgs *m, dt_ctx *ctx, dt_status st) {
    if (st != DT_OK) snprintf(m->msg[dt_ctx_rank(ctx)], sizeof m->msg[0], "%s", dt_last_error());
    return st;
}

/* ---- dt_local_run itself ------------------------------------------------------------------ */

static dt_status noop_body(dt_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return DT_OK;
}

Test(runtime, local_run_argument_errors) {
    dt_status st[2] = {(dt_status)99, (dt_status)99};
    T_ERR(dt_local_run(0, noop_body, NULL, st), DT_ERR_ARG, "nranks = 0");
    T_ERR(dt_local_run(-1, noop_body, NULL, st), DT_ERR_ARG, "nranks = -1");
    T_ERR(dt_local_run(DT_LOCAL_MAX_RANKS + 1, noop_body, NULL, st), DT_ERR_ARG, "nranks = 1025");
    T_ERR(dt_local_run(2, NULL, NULL, st), DT_ERR_ARG, "fn");
    cr_assert(st[0] == 99 && st[1] == 99, "rank_status_out written on failure");
    cr_assert_eq(dt_ctx_rank(NULL), -1);
    cr_assert_eq(dt_ctx_size(NULL), -1);
}

typedef struct ident_arg {
    int n;
    atomic_int seen[MAXR];
    rank_msgs m;
} ident_arg;

static dt_status ident_inner(dt_ctx *ctx, ident_arg *a) {
    const int me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    R_CHECK(n == a->n, "size %d, want %d", n, a->n);
    R_CHECK(me >= 0 && me < n, "rank %d", me);
    atomic_fetch_add(&a->seen[me], 1);
    dt_comm *w = SENTINEL_COMM;
    R_ERR(dt_ctx_world_comm(NULL, &w), DT_ERR_ARG, "ctx");
    R_ERR(dt_ctx_world_comm(ctx, NULL), DT_ERR_ARG, "comm_out");
    R_CHECK(w == SENTINEL_COMM, "comm_out written on failure");
    R_OK(dt_ctx_world_comm(ctx, &w));
    R_CHECK(dt_comm_rank(w) == me && dt_comm_size(w) == n, "world comm %d/%d", dt_comm_rank(w),
            dt_comm_size(w));
    for (int i = 0; i < n; i++)
        R_CHECK(dt_comm_world_rank(w, i) == i, "world rank of %d", i);
    R_CHECK(dt_comm_world_rank(w, n) == -1, "world_rank(size)");
    int32_t v = me * 7, all[MAXR];
    R_OK(dt_barrier(w));
    R_OK(dt_all_gather(w, &v, all, 1, DT_I32));
    for (int i = 0; i < n; i++)
        R_CHECK(all[i] == i * 7, "all_gather[%d] = %d", i, all[i]);
    return DT_OK;
}

static dt_status ident_body(dt_ctx *ctx, void *arg) {
    return keep_msg(&((ident_arg *)arg)->m, ctx, ident_inner(ctx, arg));
}

Test(runtime, rank_and_size_on_1_to_8_ranks) {
    const int sizes[] = {1, 2, 3, 4, 6, 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        ident_arg a = {.n = sizes[k]};
        dt_status st[MAXR];
        for (int i = 0; i < MAXR; i++)
            st[i] = (dt_status)99;
        cr_assert_eq(dt_local_run(a.n, ident_body, &a, st), DT_OK, "%d ranks: %s", a.n,
                     dt_last_error());
        for (int i = 0; i < a.n; i++) {
            cr_assert_eq(st[i], DT_OK, "%d ranks, rank %d: %s", a.n, i, a.m.msg[i]);
            cr_assert_eq(atomic_load(&a.seen[i]), 1, "rank %d ran %d times", i,
                         atomic_load(&a.seen[i]));
        }
        for (int i = a.n; i < MAXR; i++)
            cr_assert_eq(st[i], 99, "rank_status_out[%d] written", i);
    }
}

static dt_status max_ranks_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *w = NULL;
    R_OK(dt_ctx_world_comm(ctx, &w));
    R_CHECK(dt_ctx_size(ctx) == DT_LOCAL_MAX_RANKS, "size %d", dt_ctx_size(ctx));
    R_OK(dt_barrier(w));
    int64_t v = dt_ctx_rank(ctx), sum = 0;
    R_OK(dt_all_reduce(w, &v, &sum, 1, DT_I64, DT_REDUCE_SUM));
    R_CHECK(sum == (int64_t)DT_LOCAL_MAX_RANKS * (DT_LOCAL_MAX_RANKS - 1) / 2, "sum %lld",
            (long long)sum);
    return DT_OK;
}

Test(runtime, max_ranks, .timeout = TIMEOUT_S) {
    t_run(DT_LOCAL_MAX_RANKS, max_ranks_body, NULL);
}

/* Ranks 1, 4 fail with DT_ERR_SHAPE, 2, 5 with DT_ERR_DTYPE (no collectives, no aborts). */
static dt_status mixed_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int me = dt_ctx_rank(ctx);
    if (me % 3 == 1) return dt_error_set(DT_ERR_SHAPE, "shape trouble on %d", me);
    if (me % 3 == 2) return dt_error_set(DT_ERR_DTYPE, "dtype trouble on %d", me);
    return DT_OK;
}

/* A rank that fails without setting a message still gets one. */
static dt_status silent_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    return dt_ctx_rank(ctx) == 1 ? DT_ERR_DTYPE : DT_OK;
}

Test(runtime, rank_status_out_and_first_failure) {
    dt_status st[6];
    dt_status got = dt_local_run(6, mixed_body, NULL, st);
    for (int i = 0; i < 6; i++) {
        dt_status want = i % 3 == 1 ? DT_ERR_SHAPE : i % 3 == 2 ? DT_ERR_DTYPE : DT_OK;
        cr_assert_eq(st[i], want, "rank %d returned %s", i, dt_status_str(st[i]));
    }
    /* Which rank fails first is up to the scheduler; the result must name it consistently. */
    int r = -1;
    cr_assert_eq(sscanf(dt_last_error(), "rank %d: ", &r), 1, "message \"%s\"", dt_last_error());
    cr_assert(r >= 0 && r < 6 && st[r] != DT_OK, "message \"%s\"", dt_last_error());
    cr_assert_eq(got, st[r], "returned %s, but rank %d failed with %s", dt_status_str(got), r,
                 dt_status_str(st[r]));
    char want[64];
    snprintf(want, sizeof want, "rank %d: %s trouble on %d", r, r % 3 == 1 ? "shape" : "dtype", r);
    cr_assert_str_eq(dt_last_error(), want);

    T_ERR(dt_local_run(3, silent_body, NULL, st), DT_ERR_DTYPE, "rank 1: ");
    cr_assert(strstr(dt_last_error(), "DT_ERR_DTYPE"), "message \"%s\"", dt_last_error());
}

/* ---- A failing rank aborts its peers' collectives ----------------------------------------- */

enum { K_BARRIER, K_ALL_REDUCE, K_ALL_GATHER, K_SUB_WITHOUT, K_SUB_WITH };
enum { D_NONE, D_PEERS_WAITING, D_PEERS_LATE };

typedef struct fail_arg {
    int n, fail_rank, fail_iter, kind, delay, iters;
    rank_msgs m;
} fail_arg;

/* One collective on c for iteration it, checked against the group's members. */
static dt_status one_collective(dt_comm *c, int kind, int it, int me) {
    const int n = dt_comm_size(c);
    if (kind == K_BARRIER) return dt_barrier(c);
    int64_t v = (int64_t)me * 1000 + it, out[MAXR], sum = 0;
    dt_status st = kind == K_ALL_GATHER ? dt_all_gather(c, &v, out, 1, DT_I64)
                                        : dt_all_reduce(c, &v, out, 1, DT_I64, DT_REDUCE_SUM);
    if (st != DT_OK) return st;
    for (int i = 0; i < n; i++) {
        int64_t want = (int64_t)dt_comm_world_rank(c, i) * 1000 + it;
        sum += want;
        if (kind == K_ALL_GATHER)
            R_CHECK(out[i] == want, "iteration %d: all_gather[%d] = %lld", it, i,
                    (long long)out[i]);
    }
    if (kind != K_ALL_GATHER)
        R_CHECK(out[0] == sum, "iteration %d: all_reduce gave %lld, want %lld", it,
                (long long)out[0], (long long)sum);
    return DT_OK;
}

static dt_status fail_inner(dt_ctx *ctx, const fail_arg *a) {
    const int me = dt_ctx_rank(ctx), f = a->fail_rank;
    dt_comm *world = NULL, *sub = NULL, *c;
    R_OK(dt_ctx_world_comm(ctx, &world));
    c = world;
    /* Subgroup kinds split the world in parts, each looping on its own communicator:
     * K_SUB_WITHOUT {0,1} | {2,3,...}, K_SUB_WITH {0} | {1,2,3,...}. A part without the
     * failing rank goes on past fail_iter until it sees the abort. */
    int unbounded = 0;
    if (a->kind >= K_SUB_WITHOUT) {
        const int cut = a->kind == K_SUB_WITHOUT ? 2 : 1;
        int grp[MAXR], gn = 0;
        for (int r = 0; r < a->n; r++)
            if ((r < cut) == (me < cut)) grp[gn++] = r;
        R_OK(dt_comm_create(ctx, grp, gn, &sub));
        c = sub;
        unbounded = (f < cut) != (me < cut);
    }
    const int kind = a->kind >= K_SUB_WITHOUT ? K_ALL_REDUCE : a->kind;
    char who[32];
    snprintf(who, sizeof who, "rank %d", f);
    for (int it = 0; it < a->iters || unbounded; it++) {
        if (me == f && it == a->fail_iter) {
            if (a->delay == D_PEERS_WAITING) sleep_ms(30);
            dt_comm_destroy(sub);
            return dt_error_set(DT_ERR_SHAPE, "boom at iteration %d", it);
        }
        if (me != f && it == a->fail_iter && a->delay == D_PEERS_LATE) sleep_ms(30);
        dt_status st = one_collective(c, kind, it, me);
        if (st == DT_OK) {
            R_CHECK(it < a->fail_iter || unbounded,
                    "iteration %d completed although %s failed at %d", it, who, a->fail_iter);
            continue;
        }
        R_CHECK(st == DT_ERR_ABORTED, "iteration %d: %s (%s)", it, dt_status_str(st),
                dt_last_error());
        R_MSG(who);
        R_MSG("boom at iteration");
        /* A rank sharing a group with the failing one stops exactly where it failed. */
        R_CHECK(unbounded || it == a->fail_iter, "aborted at iteration %d, failure was at %d", it,
                a->fail_iter);
        /* Later calls fail the same way, without waiting. */
        R_ERR(dt_barrier(world), DT_ERR_ABORTED, who);
        dt_comm_destroy(sub);
        return DT_OK;
    }
    return t_fail(__FILE__, __LINE__, "rank %d finished %d iterations without an abort", me,
                  a->iters);
}

static dt_status fail_body(dt_ctx *ctx, void *arg) {
    fail_arg *a = arg;
    dt_status st = fail_inner(ctx, a);
    return dt_ctx_rank(ctx) == a->fail_rank ? st : keep_msg(&a->m, ctx, st);
}

static void run_fail_case(int n, int fail_rank, int fail_iter, int kind, int delay, int iters) {
    fail_arg a = {.n = n,
                  .fail_rank = fail_rank,
                  .fail_iter = fail_iter,
                  .kind = kind,
                  .delay = delay,
                  .iters = iters};
    dt_status st[MAXR];
    dt_status got = dt_local_run(a.n, fail_body, &a, st);
    char desc[96], who[32];
    snprintf(desc, sizeof desc, "%d ranks, kind %d, delay %d, rank %d failing at iteration %d", a.n,
             a.kind, a.delay, a.fail_rank, a.fail_iter);
    cr_assert_eq(got, DT_ERR_SHAPE, "%s: returned %s (%s)", desc, dt_status_str(got),
                 dt_last_error());
    snprintf(who, sizeof who, "rank %d: ", a.fail_rank);
    cr_assert(strstr(dt_last_error(), who) && strstr(dt_last_error(), "boom"),
              "%s: caller message \"%s\"", desc, dt_last_error());
    for (int i = 0; i < a.n; i++) {
        dt_status want = i == a.fail_rank ? DT_ERR_SHAPE : DT_OK;
        cr_assert_eq(st[i], want, "%s: rank %d: %s (%s)", desc, i, dt_status_str(st[i]),
                     a.m.msg[i]);
    }
}

/* (ranks, failing rank, its iteration, kind, delay, iterations). In K_SUB_WITHOUT the pair
 * {0,1} races the abort: one of them may give up in the entry barrier just as the other
 * enters it. */
Test(runtime, failing_rank_aborts_collectives, .timeout = TIMEOUT_S) {
    const int kinds[] = {K_BARRIER, K_ALL_REDUCE, K_ALL_GATHER, K_SUB_WITHOUT, K_SUB_WITH};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int delay = D_NONE; delay <= D_PEERS_LATE; delay++) {
            run_fail_case(4, 2, 0, kinds[k], delay, 10);
            run_fail_case(4, 2, 5, kinds[k], delay, 10);
        }
    run_fail_case(8, 2, 3, K_ALL_GATHER, D_PEERS_WAITING, 10);
}

Test(runtime, rank_fails_inside_a_loop_of_200_all_reduces, .timeout = TIMEOUT_S) {
    for (int delay = D_NONE; delay <= D_PEERS_LATE; delay++) {
        run_fail_case(4, 3, 37, K_ALL_REDUCE, delay, 200);
        run_fail_case(8, 3, 37, K_BARRIER, delay, 200);
    }
}

/* ---- A rank that returns early ------------------------------------------------------------ */

enum { E_BARRIER, E_ALL_REDUCE, E_RECV, E_SEND, E_RECV_AFTER_MSG, E_NOT_A_MEMBER };

typedef struct exit_arg {
    int kind, late; /* late: peers call after the rank returned, else they wait for it */
    rank_msgs m;
} exit_arg;

/* 4 ranks; the last one returns DT_OK at once (or after 30 ms when the others should already
 * be waiting). The others' call must fail with DT_ERR_PEER_EXITED naming it. */
static dt_status exit_inner(dt_ctx *ctx, const exit_arg *a) {
    const int me = dt_ctx_rank(ctx), last = dt_ctx_size(ctx) - 1;
    dt_comm *world = NULL;
    R_OK(dt_ctx_world_comm(ctx, &world));
    int32_t v = me, got = -1;
    if (me == last) {
        if (a->kind == E_RECV_AFTER_MSG) R_OK(dt_send(world, &v, 1, DT_I32, 0));
        if (!a->late) sleep_ms(30);
        return DT_OK;
    }
    if (a->late) sleep_ms(30);
    char who[32];
    snprintf(who, sizeof who, "rank %d", last);
    dt_status st = DT_OK;
    switch (a->kind) {
    case E_BARRIER:
        st = dt_barrier(world);
        break;
    case E_ALL_REDUCE:
        st = dt_all_reduce(world, &v, &got, 1, DT_I32, DT_REDUCE_SUM);
        break;
    case E_RECV:
        if (me == 0) st = dt_recv(world, &got, 1, DT_I32, last);
        break;
    case E_SEND:
        if (me == 0) st = dt_send(world, &v, 1, DT_I32, last);
        break;
    case E_RECV_AFTER_MSG:
        if (me == 0) { /* the message sent before returning still arrives */
            R_OK(dt_recv(world, &got, 1, DT_I32, last));
            R_CHECK(got == last, "received %d", got);
            st = dt_recv(world, &got, 1, DT_I32, last);
        }
        break;
    case E_NOT_A_MEMBER: { /* the rank that left is not in this group: nothing fails */
        static const int pair[] = {0, 1};
        dt_comm *c = NULL;
        if (me > 1) return DT_OK;
        R_OK(dt_comm_create(ctx, pair, 2, &c));
        for (int it = 0; it < 50; it++) {
            int32_t one = 1, sum = 0;
            R_OK(dt_all_reduce(c, &one, &sum, 1, DT_I32, DT_REDUCE_SUM));
            R_CHECK(sum == 2, "sum %d", sum);
        }
        R_OK(dt_comm_destroy(c));
        return DT_OK;
    }
    }
    if (a->kind == E_RECV || a->kind == E_SEND || a->kind == E_RECV_AFTER_MSG) {
        if (me != 0) return DT_OK;
        R_CHECK(st == DT_ERR_PEER_EXITED, "got %s (%s)", dt_status_str(st), dt_last_error());
        R_MSG(who);
        return DT_OK;
    }
    R_CHECK(st == DT_ERR_PEER_EXITED, "got %s (%s)", dt_status_str(st), dt_last_error());
    R_MSG(who);
    /* Leave together: a waiter that returned would be blamed by the others instead (see
     * peer_exited_names_the_rank_that_never_joined). */
    static const int rest[] = {0, 1, 2};
    dt_comm *c = NULL;
    R_OK(dt_comm_create(ctx, rest, 3, &c));
    R_OK(dt_barrier(c));
    R_OK(dt_comm_destroy(c));
    return DT_OK;
}

static dt_status exit_body(dt_ctx *ctx, void *arg) {
    exit_arg *a = arg;
    return keep_msg(&a->m, ctx, exit_inner(ctx, a));
}

Test(runtime, early_return_is_peer_exited, .timeout = TIMEOUT_S) {
    for (int kind = E_BARRIER; kind <= E_NOT_A_MEMBER; kind++)
        for (int late = 0; late <= 1; late++) {
            exit_arg a = {.kind = kind, .late = late};
            dt_status st[4];
            dt_status got = dt_local_run(4, exit_body, &a, st);
            for (int i = 0; i < 4; i++)
                cr_assert_eq(st[i], DT_OK, "kind %d, late %d, rank %d: %s", kind, late, i,
                             a.m.msg[i]);
            cr_assert_eq(got, DT_OK, "kind %d, late %d: %s", kind, late, dt_last_error());
        }
}

/* The same on point to point: a failing rank aborts sends and receives, also between two
 * ranks that are both fine. */
static dt_status p2p_abort_inner(dt_ctx *ctx, int delay) {
    const int me = dt_ctx_rank(ctx);
    dt_comm *w = NULL;
    R_OK(dt_ctx_world_comm(ctx, &w));
    int32_t v = me;
    dt_status st = DT_OK;
    if (me == 2) {
        if (delay == D_PEERS_WAITING) sleep_ms(30);
        return dt_error_set(DT_ERR_SHAPE, "boom in p2p");
    }
    if (delay == D_PEERS_LATE) sleep_ms(30);
    if (me == 0) st = dt_recv(w, &v, 1, DT_I32, 2);
    if (me == 1) st = dt_send(w, &v, 1, DT_I32, 2);
    if (me == 3) st = dt_recv(w, &v, 1, DT_I32, 0); /* rank 0 never sends */
    R_CHECK(st == DT_ERR_ABORTED, "got %s (%s)", dt_status_str(st), dt_last_error());
    R_MSG("rank 2");
    R_MSG("boom in p2p");
    return DT_OK;
}

static dt_status p2p_abort_body(dt_ctx *ctx, void *arg) {
    fail_arg *a = arg;
    dt_status st = p2p_abort_inner(ctx, a->delay);
    return dt_ctx_rank(ctx) == 2 ? st : keep_msg(&a->m, ctx, st);
}

Test(runtime, failing_rank_aborts_send_and_recv, .timeout = TIMEOUT_S) {
    for (int delay = D_NONE; delay <= D_PEERS_LATE; delay++) {
        fail_arg a = {.delay = delay};
        dt_status st[4];
        dt_status got = dt_local_run(4, p2p_abort_body, &a, st);
        T_ERR(got, DT_ERR_SHAPE, "rank 2: boom in p2p");
        for (int i = 0; i < 4; i++)
            cr_assert_eq(st[i], i == 2 ? DT_ERR_SHAPE : DT_OK, "delay %d, rank %d: %s", delay, i,
                         a.m.msg[i]);
    }
}

/* Without leaving together: the first waiter to get its error returns, and the others must
 * still name the rank that never came, not the waiter that joined and then left. */
static dt_status blame_inner(dt_ctx *ctx) {
    const int me = dt_ctx_rank(ctx);
    dt_comm *w = NULL;
    R_OK(dt_ctx_world_comm(ctx, &w));
    if (me == 3) return DT_OK;
    R_ERR(dt_barrier(w), DT_ERR_PEER_EXITED, "rank 3 returned");
    return DT_OK;
}

static dt_status blame_body(dt_ctx *ctx, void *arg) {
    return keep_msg(arg, ctx, blame_inner(ctx));
}

Test(runtime, peer_exited_names_the_rank_that_never_joined, .timeout = TIMEOUT_S) {
    for (int run = 0; run < 50; run++) {
        rank_msgs m = {0};
        dt_status st[4];
        dt_local_run(4, blame_body, &m, st);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(st[i], DT_OK, "run %d, rank %d: %s", run, i, m.msg[i]);
    }
}

/* Calls that gave up on a missing peer must not count as arrivals: with ranks 1 and 2 gone,
 * every later collective of rank 0 on the world fails too (a third barrier must not make up
 * "3 of 3" from rank 0's own abandoned calls; an all_reduce must not then hang inside). */
static dt_status retry_inner(dt_ctx *ctx) {
    dt_comm *w = NULL;
    R_OK(dt_ctx_world_comm(ctx, &w));
    if (dt_ctx_rank(ctx) != 0) return DT_OK;
    for (int i = 0; i < 4; i++)
        R_ERR(dt_barrier(w), DT_ERR_PEER_EXITED, "returned before");
    int64_t v = 1, sum = 0;
    for (int i = 0; i < 4; i++)
        R_ERR(dt_all_reduce(w, &v, &sum, 1, DT_I64, DT_REDUCE_SUM), DT_ERR_PEER_EXITED,
              "returned before");
    return DT_OK;
}

static dt_status retry_body(dt_ctx *ctx, void *arg) {
    return keep_msg(arg, ctx, retry_inner(ctx));
}

Test(runtime, collectives_keep_failing_after_a_peer_exited, .timeout = TIMEOUT_S) {
    rank_msgs m = {0};
    dt_status st[3];
    dt_local_run(3, retry_body, &m, st);
    cr_assert_eq(st[0], DT_OK, "%s", m.msg[0]);
}

/* ---- User communicators ------------------------------------------------------------------- */

/* c must be the group ranks[0..n-1] and carry collectives correctly. */
static dt_status check_user_comm(dt_comm *c, const int *ranks, int n, int me) {
    int self = -1;
    int64_t sum = 0, max = -1;
    for (int i = 0; i < n; i++) {
        R_CHECK(dt_comm_world_rank(c, i) == ranks[i], "group rank %d is %d, want %d", i,
                dt_comm_world_rank(c, i), ranks[i]);
        if (ranks[i] == me) self = i;
        sum += ranks[i] + 1;
        if (ranks[i] > max) max = ranks[i];
    }
    R_CHECK(dt_comm_size(c) == n && dt_comm_rank(c) == self, "rank %d of %d, want %d of %d",
            dt_comm_rank(c), dt_comm_size(c), self, n);
    R_CHECK(dt_comm_world_rank(c, n) == -1 && dt_comm_world_rank(c, -1) == -1, "out of range");
    int64_t v = me + 1, out[MAXR], b = me == ranks[0] ? 4242 : -1;
    R_OK(dt_all_reduce(c, &v, out, 1, DT_I64, DT_REDUCE_SUM));
    R_CHECK(out[0] == sum, "sum %lld, want %lld", (long long)out[0], (long long)sum);
    v = me;
    R_OK(dt_all_reduce(c, &v, out, 1, DT_I64, DT_REDUCE_MAX));
    R_CHECK(out[0] == max, "max %lld, want %lld", (long long)out[0], (long long)max);
    R_OK(dt_all_gather(c, &v, out, 1, DT_I64));
    for (int i = 0; i < n; i++)
        R_CHECK(out[i] == ranks[i], "all_gather[%d] = %lld", i, (long long)out[i]);
    R_OK(dt_broadcast(c, &b, 1, DT_I64, 0));
    R_CHECK(b == 4242, "broadcast gave %lld", (long long)b);
    R_OK(dt_barrier(c));
    return DT_OK;
}

static dt_status user_comm_inner(dt_ctx *ctx) {
    const int me = dt_ctx_rank(ctx);
    const int parity[2][2] = {{0, 2}, {1, 3}}, reversed[4] = {3, 2, 1, 0};
    const int *mine = parity[me % 2];
    dt_comm *par = NULL, *rev = NULL, *a = NULL, *b = NULL, *swapped = NULL;
    R_OK(dt_comm_create(ctx, mine, 2, &par));
    R_OK(dt_comm_create(ctx, reversed, 4, &rev));
    R_OK(check_user_comm(par, mine, 2, me));
    R_OK(check_user_comm(rev, reversed, 4, me));
    /* The same pair in the other order is another group with other group ranks. */
    const int other[2] = {mine[1], mine[0]};
    R_OK(dt_comm_create(ctx, other, 2, &swapped));
    R_OK(check_user_comm(swapped, other, 2, me));

    /* The same list twice: two communicators, used interleaved, then one destroyed while the
     * other goes on (a shared group would be freed under it). */
    R_OK(dt_comm_create(ctx, reversed, 4, &a));
    R_OK(dt_comm_create(ctx, reversed, 4, &b));
    R_CHECK(a != b && a != rev, "same list, same handle");
    for (int it = 0; it < 20; it++) {
        int64_t x[3] = {me, it, 1}, y[3], z[5] = {1, 1, 1, 1, me}, w[5];
        R_OK(dt_all_reduce(a, x, y, 3, DT_I64, DT_REDUCE_SUM));
        R_OK(dt_all_reduce(b, z, w, 5, DT_I64, DT_REDUCE_MAX));
        R_CHECK(y[0] == 6 && y[1] == 4 * it && y[2] == 4, "a: %lld %lld %lld", (long long)y[0],
                (long long)y[1], (long long)y[2]);
        R_CHECK(w[0] == 1 && w[4] == 3, "b: %lld %lld", (long long)w[0], (long long)w[4]);
        R_OK(dt_barrier(it % 2 ? a : b));
    }
    R_OK(dt_comm_destroy(a));
    R_OK(check_user_comm(b, reversed, 4, me));
    R_OK(check_user_comm(rev, reversed, 4, me));

    dt_comm *c = SENTINEL_COMM;
    int not_me[1] = {(me + 1) % 4}, twice[2] = {me, me}, beyond[2] = {me, 4}, neg[2] = {me, -1};
    char msg[64];
    snprintf(msg, sizeof msg, "calling rank %d is not in ranks", me);
    R_ERR(dt_comm_create(ctx, not_me, 1, &c), DT_ERR_ARG, msg);
    snprintf(msg, sizeof msg, "rank %d appears twice", me);
    R_ERR(dt_comm_create(ctx, twice, 2, &c), DT_ERR_ARG, msg);
    R_ERR(dt_comm_create(ctx, beyond, 2, &c), DT_ERR_ARG, "ranks[1] = 4");
    R_ERR(dt_comm_create(ctx, neg, 2, &c), DT_ERR_ARG, "ranks[1] = -1");
    R_ERR(dt_comm_create(ctx, reversed, 0, &c), DT_ERR_ARG, "n = 0");
    R_ERR(dt_comm_create(ctx, reversed, -3, &c), DT_ERR_ARG, "n = -3");
    R_ERR(dt_comm_create(ctx, (int[]){0, 1, 2, 3, 0}, 5, &c), DT_ERR_ARG, "n = 5");
    R_ERR(dt_comm_create(ctx, NULL, 2, &c), DT_ERR_ARG, "ranks");
    R_ERR(dt_comm_create(NULL, reversed, 4, &c), DT_ERR_ARG, "ctx");
    R_ERR(dt_comm_create(ctx, reversed, 4, NULL), DT_ERR_ARG, "comm_out");
    R_CHECK(c == SENTINEL_COMM, "comm_out written on failure");
    R_CHECK(dt_comm_rank(NULL) == -1 && dt_comm_size(NULL) == -1 &&
                dt_comm_world_rank(NULL, 0) == -1,
            "getters on a NULL comm");
    R_ERR(dt_barrier(NULL), DT_ERR_ARG, "comm");

    R_OK(dt_comm_destroy(b));
    R_OK(dt_comm_destroy(swapped));
    R_OK(dt_comm_destroy(rev));
    R_OK(dt_comm_destroy(par));
    R_OK(dt_comm_destroy(NULL));
    return DT_OK;
}

static dt_status user_comm_body(dt_ctx *ctx, void *arg) {
    return keep_msg(arg, ctx, user_comm_inner(ctx));
}

Test(runtime, user_communicators, .timeout = TIMEOUT_S) {
    rank_msgs m = {0};
    dt_status st[4];
    dt_status got = dt_local_run(4, user_comm_body, &m, st);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(st[i], DT_OK, "rank %d: %s", i, m.msg[i]);
    cr_assert_eq(got, DT_OK, "%s", dt_last_error());
}

/* ---- Stress ------------------------------------------------------------------------------- */

static dt_status stress_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    dt_comm *w = NULL;
    R_OK(dt_ctx_world_comm(ctx, &w));
    for (int it = 0; it < 2000; it++) {
        R_OK(dt_barrier(w));
        int64_t x[2] = {me, it}, y[2];
        R_OK(dt_all_reduce(w, x, y, 2, DT_I64, DT_REDUCE_SUM));
        R_CHECK(y[0] == n * (n - 1) / 2 && y[1] == (int64_t)n * it, "iteration %d: %lld %lld", it,
                (long long)y[0], (long long)y[1]);
    }
    return DT_OK;
}

Test(runtime, stress_2000_barriers_on_8_ranks, .timeout = TIMEOUT_S) {
    double t0 = now_s();
    t_run(8, stress_body, NULL);
    double dt = now_s() - t0;
    cr_assert_lt(dt, 10.0, "2000 barriers and all_reduces on 8 ranks took %.2f s", dt);
}

/* Many short runs one after another: contexts and groups are rebuilt and freed each time. */
Test(runtime, many_short_runs, .timeout = TIMEOUT_S) {
    for (int i = 0; i < 100; i++)
        t_run(1 + i % 8, ident_body, &(ident_arg){.n = 1 + i % 8});
}
