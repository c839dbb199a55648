/* The local runtime when a rank fails or returns early: its peers' pending and later
 * collectives (and send/recv) fail with DT_ERR_ABORTED or DT_ERR_PEER_EXITED naming it, within
 * the test's time, and never hang. */
#include <stdatomic.h>
#include <time.h>

#include "helpers.h"

#define MAXR 8 /* most ranks any test here runs */
/* One timeout for every test of the file (a hang becomes a failure): Criterion 2.4.1's runner
 * leaks a timer entry, which LeakSanitizer reports, when tests of one binary differ in it. */
#define TIMEOUT_S 60

/* ---- A failing rank aborts its peers' collectives ----------------------------------------- */

enum { K_BARRIER, K_ALL_REDUCE, K_ALL_GATHER, K_SUB_WITHOUT, K_SUB_WITH };
enum { D_NONE, D_PEERS_WAITING, D_PEERS_LATE };

typedef struct fail_arg {
    int n, fail_rank, fail_iter, kind, delay, iters;
    t_rank_msgs m;
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
            if (a->delay == D_PEERS_WAITING) t_sleep_ms(30);
            dt_comm_destroy(sub);
            return dt_error_set(DT_ERR_SHAPE, "boom at iteration %d", it);
        }
        if (me != f && it == a->fail_iter && a->delay == D_PEERS_LATE) t_sleep_ms(30);
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
    return dt_ctx_rank(ctx) == a->fail_rank ? st : t_keep_msg(&a->m, ctx, st);
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
    t_rank_msgs m;
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
        if (!a->late) t_sleep_ms(30);
        return DT_OK;
    }
    if (a->late) t_sleep_ms(30);
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
    return t_keep_msg(&a->m, ctx, exit_inner(ctx, a));
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
        if (delay == D_PEERS_WAITING) t_sleep_ms(30);
        return dt_error_set(DT_ERR_SHAPE, "boom in p2p");
    }
    if (delay == D_PEERS_LATE) t_sleep_ms(30);
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
    return dt_ctx_rank(ctx) == 2 ? st : t_keep_msg(&a->m, ctx, st);
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
    return t_keep_msg(arg, ctx, blame_inner(ctx));
}

Test(runtime, peer_exited_names_the_rank_that_never_joined, .timeout = TIMEOUT_S) {
    for (int run = 0; run < 50; run++) {
        t_rank_msgs m = {0};
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
    return t_keep_msg(arg, ctx, retry_inner(ctx));
}

Test(runtime, collectives_keep_failing_after_a_peer_exited, .timeout = TIMEOUT_S) {
    t_rank_msgs m = {0};
    dt_status st[3];
    dt_local_run(3, retry_body, &m, st);
    cr_assert_eq(st[0], DT_OK, "%s", m.msg[0]);
}

