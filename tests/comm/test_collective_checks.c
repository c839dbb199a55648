/* The local runtime's collective checks: a collective (or send/recv) that a rank never joins
 * times out on every rank after DT_TIMEOUT_S / dt_local_set_timeout, naming the call and the
 * missing ranks, and the run ends; ranks whose n-th collectives on a communicator differ
 * (kind, count, dtype, op, root) all fail it with DT_ERR_COMM naming both sides, and the group
 * stays usable. Failing and early-returning ranks are test_runtime_faults.c. */
#include <stdlib.h>

#include "helpers.h"

#define MAXR 8
/* One timeout for every test of the file (a hang becomes a failure): Criterion 2.4.1's runner
 * leaks a timer entry, which LeakSanitizer reports, when tests of one binary differ in it. */
#define TIMEOUT_S 60

/* ---- A rank that skips a collective: every rank times out -------------------------------- */

enum { SKIP_TO_SUBGROUP, SKIP_TO_RECV, SKIP_SLOW_BUT_IN_TIME, SKIP_NO_TIMEOUT_SLOW };

typedef struct skip_arg {
    int how;
    double timeout_s;  /* < 0: keep DT_TIMEOUT_S */
    double secs[MAXR]; /* how long each rank's failing call took */
    t_rank_msgs m;
} skip_arg;

/* 4 ranks. SKIP_TO_SUBGROUP: rank 0 skips the world's all_reduce #2 and waits in an all_reduce
 * on {0, 1}, which rank 1 never reaches: all four wait. SKIP_TO_RECV: rank 3 skips the world's
 * barrier and waits for a message rank 0 never sends. Every rank must fail with
 * DT_ERR_ABORTED and "timed out" within the test's timeout. */
static dt_status skip_inner(dt_ctx *ctx, skip_arg *a) {
    const int me = dt_ctx_rank(ctx);
    dt_comm *world = NULL, *pair = NULL;
    R_OK(dt_ctx_world_comm(ctx, &world));
    if (a->timeout_s >= 0) R_OK(dt_local_set_timeout(ctx, a->timeout_s));
    int64_t v = me + 1, sum = 0;
    R_OK(dt_all_reduce(world, &v, &sum, 1, DT_I64, DT_REDUCE_SUM));
    R_CHECK(sum == 10, "all_reduce #1 gave %lld", (long long)sum);
    if (a->how == SKIP_SLOW_BUT_IN_TIME || a->how == SKIP_NO_TIMEOUT_SLOW) {
        if (me == 2) t_sleep_ms(a->how == SKIP_SLOW_BUT_IN_TIME ? 100 : 1500);
        R_OK(dt_barrier(world));
        return DT_OK;
    }
    static const int pair_ranks[] = {0, 1};
    if (me < 2) R_OK(dt_comm_create(ctx, pair_ranks, 2, &pair));
    double t0 = t_now_s();
    dt_status st;
    if (a->how == SKIP_TO_SUBGROUP)
        st = me == 0 ? dt_all_reduce(pair, &v, &sum, 1, DT_I64, DT_REDUCE_SUM)
                     : dt_all_reduce(world, &v, &sum, 1, DT_I64, DT_REDUCE_SUM);
    else
        st = me == 3 ? dt_recv(world, &v, 1, DT_I64, 0) : dt_barrier(world);
    a->secs[me] = t_now_s() - t0;
    dt_comm_destroy(pair);
    R_CHECK(st == DT_ERR_ABORTED, "got %s (%s)", dt_status_str(st), dt_last_error());
    R_MSG("timed out after 0.3 s");
    /* The world is aborted: later calls fail at once, and the ranks can all return. */
    t0 = t_now_s();
    R_ERR(dt_barrier(world), DT_ERR_ABORTED, "timed out");
    R_CHECK(t_now_s() - t0 < 0.1, "a call after the timeout took %.2f s", t_now_s() - t0);
    return DT_OK;
}

static dt_status skip_body(dt_ctx *ctx, void *arg) {
    skip_arg *a = arg;
    return t_keep_msg(&a->m, ctx, skip_inner(ctx, a));
}

/* The timed-out call's own message, as the run's result reports it: whichever rank timed out
 * first names the call, the rank it waited for and where that one was blocked (a rank that
 * the scheduler has not run since it left its last call is not blocked anywhere yet). */
static void expect_run_message(int how) {
    static const char *const forms[2][2][2] = {
        [SKIP_TO_SUBGROUP] = {{"dt_all_reduce #2 on group world of 4 ranks: timed out after 0.3 s "
                               "waiting for rank 0 (",
                               "in dt_all_reduce #1 on group group)"},
                              {"dt_all_reduce #1 on group group of 2 ranks: timed out after 0.3 s "
                               "waiting for rank 1 (",
                               "in dt_all_reduce #2 on group world)"}},
        [SKIP_TO_RECV] = {{"dt_barrier #2 on group world of 4 ranks: timed out after 0.3 s "
                           "waiting for rank 3 (",
                           "in dt_recv on group world)"},
                          {"dt_recv on group world of 4 ranks: timed out after 0.3 s: rank 0 (",
                           "in dt_barrier #2 on group world) never sent it"}},
    };
    const char *msg = dt_last_error(), *at = NULL;
    int k = 0;
    for (; k < 2 && !at; k++)
        if ((at = strstr(msg, forms[how][k][0]))) at += strlen(forms[how][k][0]);
    cr_assert(at, "how %d: %s", how, msg);
    cr_assert(!strncmp(at, forms[how][k - 1][1], strlen(forms[how][k - 1][1])) ||
                  !strncmp(at, "not blocked", 11),
              "how %d: %s", how, msg);
}

static void run_skip(int how, double timeout_s) {
    skip_arg a = {.how = how, .timeout_s = timeout_s};
    dt_status st[4];
    double t0 = t_now_s();
    dt_status got = dt_local_run(4, skip_body, &a, st);
    double secs = t_now_s() - t0;
    for (int i = 0; i < 4; i++)
        cr_assert_eq(st[i], DT_OK, "how %d, rank %d: %s", how, i, a.m.msg[i]);
    cr_assert_eq(got, DT_ERR_ABORTED, "how %d: %s (%s)", how, dt_status_str(got), dt_last_error());
    expect_run_message(how);
    double longest = 0;
    for (int i = 0; i < 4; i++) {
        cr_assert_lt(a.secs[i], 5, "how %d: rank %d failed after %.2f s", how, i, a.secs[i]);
        if (a.secs[i] > longest) longest = a.secs[i];
    }
    cr_assert_geq(longest, 0.25, "how %d: failed before the timeout", how);
    cr_assert_lt(secs, 10, "the run took %.1f s", secs);
}

Test(checks, skipped_collective_times_out_on_every_rank, .timeout = TIMEOUT_S) {
    run_skip(SKIP_TO_SUBGROUP, 0.3);
}

Test(checks, skipped_barrier_and_unsent_message_time_out, .timeout = TIMEOUT_S) {
    run_skip(SKIP_TO_RECV, 0.3);
}

Test(checks, timeout_from_the_environment, .timeout = TIMEOUT_S) {
    setenv("DT_TIMEOUT_S", "0.3", 1);
    run_skip(SKIP_TO_SUBGROUP, -1);
}

/* A slow rank within the timeout is no failure; nor is one slower than DT_TIMEOUT_S on ranks
 * whose timeout dt_local_set_timeout turned off. */
Test(checks, slow_ranks_within_the_timeout_succeed, .timeout = TIMEOUT_S) {
    setenv("DT_TIMEOUT_S", "1", 1);
    skip_arg a = {.how = SKIP_SLOW_BUT_IN_TIME, .timeout_s = -1};
    dt_status got = dt_local_run(4, skip_body, &a, NULL);
    cr_assert_eq(got, DT_OK, "%s", dt_last_error());
    a = (skip_arg){.how = SKIP_NO_TIMEOUT_SLOW, .timeout_s = 0};
    got = dt_local_run(4, skip_body, &a, NULL);
    cr_assert_eq(got, DT_OK, "%s", dt_last_error());
}

static dt_status set_timeout_errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    R_ERR(dt_local_set_timeout(NULL, 1), DT_ERR_ARG, "ctx");
    R_ERR(dt_local_set_timeout(ctx, -1), DT_ERR_ARG, "seconds = -1");
    R_ERR(dt_local_set_timeout(ctx, 1e9), DT_ERR_ARG, "seconds = 1e+09");
    R_ERR(dt_ucx_set_timeout(ctx, 1), DT_ERR_UNSUPPORTED, "");
    return DT_OK;
}

Test(checks, timeout_arguments, .timeout = TIMEOUT_S) {
    t_run(2, set_timeout_errors_body, NULL);
    setenv("DT_TIMEOUT_S", "soon", 1);
    T_ERR(dt_local_run(2, set_timeout_errors_body, NULL, NULL), DT_ERR_ARG,
          "DT_TIMEOUT_S=\"soon\"");
    setenv("DT_TIMEOUT_S", "1e12", 1);
    T_ERR(dt_local_run(2, set_timeout_errors_body, NULL, NULL), DT_ERR_ARG, "DT_TIMEOUT_S");
    unsetenv("DT_TIMEOUT_S");
    setenv("DT_DEBUG_COLLECTIVES", "yes", 1);
    T_ERR(dt_local_run(2, set_timeout_errors_body, NULL, NULL), DT_ERR_ARG,
          "DT_DEBUG_COLLECTIVES=\"yes\" is not 0 or 1");
    setenv("DT_DEBUG_COLLECTIVES", "1", 1); /* accepted; the local runtime checks anyway */
    t_run(2, set_timeout_errors_body, NULL);
}

/* ---- Ranks whose collectives differ -------------------------------------------------------- */

enum {
    C_ALL_REDUCE,
    C_ALL_GATHER,
    C_REDUCE_SCATTER,
    C_ALL_TO_ALL,
    C_BROADCAST,
    C_BARRIER,
    C_ALL_REDUCE_F64,
    C_ALL_REDUCE_MAX,
    C_ALL_REDUCE_LONGER,
    C_COUNT
};

static const char *const c_desc[C_COUNT] = {
    [C_ALL_REDUCE] = "all_reduce #2 (8 x f32, sum)",
    [C_ALL_GATHER] = "all_gather #2 (32 x f32)",
    [C_REDUCE_SCATTER] = "reduce_scatter #2 (8 x f32, sum)",
    [C_ALL_TO_ALL] = "all_to_all #2 (f32)",
    [C_BROADCAST] = "broadcast #2 (8 x f32, root 0)",
    [C_BARRIER] = "barrier #2",
    [C_ALL_REDUCE_F64] = "all_reduce #2 (8 x f64, sum)",
    [C_ALL_REDUCE_MAX] = "all_reduce #2 (8 x f32, max)",
    [C_ALL_REDUCE_LONGER] = "all_reduce #2 (9 x f32, sum)",
};

static dt_status one_call(dt_comm *c, int kind, float *in, float *out) {
    const int n = dt_comm_size(c);
    switch (kind) {
    case C_ALL_REDUCE:
        return dt_all_reduce(c, in, out, 8, DT_F32, DT_REDUCE_SUM);
    case C_ALL_GATHER:
        return dt_all_gather(c, in, out, 8 / (size_t)n * 4, DT_F32);
    case C_REDUCE_SCATTER:
        return dt_reduce_scatter(c, in, out, 8 / (size_t)n, DT_F32, DT_REDUCE_SUM);
    case C_ALL_TO_ALL:
        return dt_all_to_all(c, in, out, 8 / (size_t)n, DT_F32);
    case C_BROADCAST:
        return dt_broadcast(c, out, 8, DT_F32, 0);
    case C_BARRIER:
        return dt_barrier(c);
    case C_ALL_REDUCE_F64:
        return dt_all_reduce(c, in, out, 8, DT_F64, DT_REDUCE_SUM);
    case C_ALL_REDUCE_MAX:
        return dt_all_reduce(c, in, out, 8, DT_F32, DT_REDUCE_MAX);
    default:
        return dt_all_reduce(c, in, out, 9, DT_F32, DT_REDUCE_SUM);
    }
}

typedef struct mismatch_arg {
    int odd_rank, odd_kind, kind; /* odd_rank calls odd_kind, the others kind */
    t_rank_msgs m;
} mismatch_arg;

/* 4 ranks: a good all_reduce, the mismatched call (#2), then the group must still work. */
static dt_status mismatch_inner(dt_ctx *ctx, const mismatch_arg *a) {
    const int me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    R_OK(dt_local_set_timeout(ctx, 20)); /* a check that misses it fails, not hangs */
    float in[64], out[64];
    for (int i = 0; i < 64; i++)
        in[i] = (float)(me + i);
    R_OK(dt_all_reduce(world, in, out, 8, DT_F32, DT_REDUCE_SUM));
    const int mine = me == a->odd_rank ? a->odd_kind : a->kind;
    dt_status st = one_call(world, mine, in, out);
    R_CHECK(st == DT_ERR_COMM, "%s against %s: got %s (%s)", c_desc[mine], c_desc[a->kind],
            dt_status_str(st), dt_last_error());
    /* Group rank 0 and the first that differs from it, whatever the order of arrival. */
    const int b = a->odd_rank == 0 ? 1 : a->odd_rank;
    const int same_kind = a->odd_kind >= C_ALL_REDUCE_F64; /* all_reduce with other arguments */
    char want[256];
    snprintf(want, sizeof want, "on group world of 4 ranks: %s: rank 0 is in %s, rank %d in %s",
             same_kind ? "ranks disagree on its arguments" : "ranks called different collectives",
             c_desc[a->odd_rank == 0 ? a->odd_kind : a->kind], b,
             c_desc[a->odd_rank == 0 ? a->kind : a->odd_kind]);
    R_MSG(want);
    /* Every member left the failed call together: the next ones line up. */
    for (int k = 0; k < 3; k++) {
        R_OK(dt_all_reduce(world, in, out, 8, DT_F32, DT_REDUCE_SUM));
        for (int i = 0; i < 8; i++)
            R_CHECK(out[i] == (float)(6 + 4 * i), "after the mismatch: out[%d] = %g", i, out[i]);
        R_OK(dt_barrier(world));
    }
    return DT_OK;
}

static dt_status mismatch_body(dt_ctx *ctx, void *arg) {
    mismatch_arg *a = arg;
    return t_keep_msg(&a->m, ctx, mismatch_inner(ctx, a));
}

static void run_mismatch(int odd_rank, int odd_kind, int kind) {
    mismatch_arg a = {.odd_rank = odd_rank, .odd_kind = odd_kind, .kind = kind};
    dt_status st[4];
    dt_status got = dt_local_run(4, mismatch_body, &a, st);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(st[i], DT_OK, "rank %d calls %s, the others %s: rank %d: %s", odd_rank,
                     c_desc[odd_kind], c_desc[kind], i, a.m.msg[i]);
    cr_assert_eq(got, DT_OK, "%s", dt_last_error());
}

/* Every pair of kinds, either way round: collectives with different numbers of internal
 * phases must still leave together. */
Test(checks, different_collectives_fail_on_every_rank, .timeout = TIMEOUT_S) {
    for (int k = C_ALL_REDUCE; k <= C_BARRIER; k++)
        for (int o = C_ALL_REDUCE; o <= C_BARRIER; o++)
            if (o != k) run_mismatch(k % 2 ? 2 : 0, o, k);
}

Test(checks, different_count_dtype_or_op_fail_on_every_rank, .timeout = TIMEOUT_S) {
    for (int o = C_ALL_REDUCE_F64; o < C_COUNT; o++) {
        run_mismatch(3, o, C_ALL_REDUCE);
        run_mismatch(0, o, C_ALL_REDUCE);
    }
}

/* A rank that skipped a collective meets the others' with its next one. */
static dt_status skipped_one_inner(dt_ctx *ctx) {
    const int me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    int32_t v = me, sum = 0;
    dt_status st =
        me == 2 ? dt_all_reduce(world, &v, &sum, 1, DT_I32, DT_REDUCE_SUM) : dt_barrier(world);
    R_CHECK(st == DT_ERR_COMM, "%s (%s)", dt_status_str(st), dt_last_error());
    R_MSG("dt_");
    R_MSG(" #1 on group world of 4 ranks: ranks called different collectives: rank 0 is in "
          "barrier #1, rank 2 in all_reduce #1 (1 x i32, sum)");
    return DT_OK;
}

static dt_status skipped_one_body(dt_ctx *ctx, void *arg) {
    return t_keep_msg(arg, ctx, skipped_one_inner(ctx));
}

Test(checks, a_skipped_collective_is_named, .timeout = TIMEOUT_S) {
    t_rank_msgs m = {0};
    dt_status st[4];
    dt_status got = dt_local_run(4, skipped_one_body, &m, st);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(st[i], DT_OK, "rank %d: %s", i, m.msg[i]);
    cr_assert_eq(got, DT_OK, "%s", dt_last_error());
}

/* ---- Rank-dependent placements ----------------------------------------------------------- */

/* A (8, 8) tensor sharded S(0) over 4 ranks; ranks 0-2 redistribute it to R (an all_gather),
 * rank 3 to `odd`: to S(1) it calls another collective, to S(0) none at all (and returns). The
 * others' error must name what really happened, not only "rank 3 returned". */
static dt_status placements_inner(dt_ctx *ctx, const dt_placement *odd) {
    const int me = dt_ctx_rank(ctx);
    dt_mesh *mesh = NULL;
    const int shape[1] = {4};
    const char *const names[1] = {"tp"};
    R_OK(dt_local_set_timeout(ctx, 20));
    R_OK(dt_mesh_create(ctx, 1, shape, names, &mesh));
    float full[64];
    for (int i = 0; i < 64; i++)
        full[i] = (float)i;
    const int64_t gshape[2] = {8, 8};
    const dt_placement s0[1] = {dt_shard(0)}, r[1] = {dt_replicate()};
    dt_tensor *t = NULL, *u = NULL;
    R_OK(dt_tensor_distribute(mesh, full, DT_F32, 2, gshape, 1, s0, DT_ALL_RANKS, &t));
    dt_status st = dt_tensor_redistribute(t, 1, me == 3 ? odd : r, &u);
    dt_tensor_release(u);
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    if (odd[0].kind == DT_PLACEMENT_SHARD && odd[0].dim == 0) { /* rank 3 makes no call */
        if (me == 3) return st;
        R_CHECK(st == DT_ERR_PEER_EXITED, "%s (%s)", dt_status_str(st), dt_last_error());
        R_MSG("rank 3 returned before joining it, having made no collective call on this group");
        R_MSG("same placements");
        return DT_OK;
    }
    R_CHECK(st == DT_ERR_COMM, "%s (%s)", dt_status_str(st), dt_last_error());
    R_MSG("on group tp of 4 ranks: ranks called different collectives: rank 0 is in all_gather");
    R_MSG("rank 3 in exchange_boxes");
    return DT_OK;
}

typedef struct placements_arg {
    dt_placement odd[1];
    t_rank_msgs m;
} placements_arg;

static dt_status placements_body(dt_ctx *ctx, void *arg) {
    placements_arg *a = arg;
    return t_keep_msg(&a->m, ctx, placements_inner(ctx, a->odd));
}

Test(checks, rank_dependent_placements_are_named, .timeout = TIMEOUT_S) {
    const dt_placement odd[2] = {dt_shard(1), dt_shard(0)};
    for (int k = 0; k < 2; k++) {
        placements_arg a = {.odd = {odd[k]}};
        dt_status st[4];
        dt_status got = dt_local_run(4, placements_body, &a, st);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(st[i], DT_OK, "case %d, rank %d: %s", k, i, a.m.msg[i]);
        cr_assert_eq(got, DT_OK, "case %d: %s", k, dt_last_error());
    }
}
