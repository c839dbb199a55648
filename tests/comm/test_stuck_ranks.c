/* Ranks stuck across groups (comm/stuck.h) on the local runtime: ranks that wait on each other
 * in different groups' collectives fail every rank within a check interval or two, naming the
 * rank the others wait for and the positions, long before DT_TIMEOUT_S; a peer that is only
 * slow (sleeping, or waiting on a rank that is) is waited for. DT_CHECK_S is 0.2 s here and
 * DT_TIMEOUT_S 60 s, so a test that passes cannot have been saved by the timeout. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define TIMEOUT_S 60
#define CHECK_S   "0.2"

enum { CROSS_GROUPS, RECV_CYCLE, SLOW_PEER, SLOW_CHAIN };

typedef struct stuck_arg {
    int how;
    double secs[4];
    dt_status st[4];
    char msg[4][512];
} stuck_arg;

/* 2x2 mesh dp x tp: tp pairs {0,1} {2,3}, dp pairs {0,2} {1,3}. */
static dt_status stuck_inner(dt_ctx *ctx, stuck_arg *a, dt_mesh *mesh) {
    const int me = dt_ctx_rank(ctx);
    dt_comm *dp, *tp, *world;
    R_OK(dt_mesh_dim_comm(mesh, 0, &dp));
    R_OK(dt_mesh_dim_comm(mesh, 1, &tp));
    R_OK(dt_ctx_world_comm(ctx, &world));
    float v[4] = {1, 2, 3, 4}, out[8];
    int64_t x = me;
    switch (a->how) {
    case CROSS_GROUPS: /* rank 0 skips tp's all_reduce: 1 waits for 0, 0 for 2, 2 and 3 for 0 and 1 */
        if (me == 0) return dt_all_gather(dp, v, out, 4, DT_F32);
        dt_status st = dt_all_reduce(tp, v, out, 4, DT_F32, DT_REDUCE_SUM);
        return st == DT_OK ? dt_barrier(world) : st;
    case RECV_CYCLE: /* ranks 0 and 1 each wait to receive from the other */
        if (me < 2) return dt_recv(tp, &x, 1, DT_I64, 1 - me);
        return dt_barrier(dp);
    case SLOW_PEER: /* rank 3 sleeps 5 intervals before joining */
        if (me == 3) t_sleep_ms(1000);
        R_OK(dt_all_reduce(world, v, out, 4, DT_F32, DT_REDUCE_SUM));
        R_CHECK(out[0] == 4 && out[3] == 16, "all_reduce gave %g..%g", out[0], out[3]);
        return DT_OK;
    default: /* SLOW_CHAIN: 0 waits in tp for 1, which waits for a message 3 sends late */
        if (me == 3) {
            t_sleep_ms(1000);
            R_OK(dt_send(dp, &x, 1, DT_I64, 0));
        } else if (me == 1) {
            R_OK(dt_recv(dp, &x, 1, DT_I64, 1));
            R_CHECK(x == 3, "rank 1 received %lld", (long long)x);
        }
        if (me < 2) R_OK(dt_all_reduce(tp, v, out, 4, DT_F32, DT_REDUCE_SUM));
        return dt_barrier(world);
    }
}

static dt_status stuck_body(dt_ctx *ctx, void *arg) {
    stuck_arg *a = arg;
    const int me = dt_ctx_rank(ctx);
    R_OK(dt_local_set_timeout(ctx, 60));
    dt_mesh *mesh = NULL;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    double t0 = t_now_s();
    dt_status st = stuck_inner(ctx, a, mesh);
    a->secs[me] = t_now_s() - t0;
    a->st[me] = st;
    snprintf(a->msg[me], sizeof a->msg[me], "%s", st == DT_OK ? "" : dt_last_error());
    dt_mesh_release(mesh);
    return DT_OK;
}

/* DT_TEST_CHECK_S runs the cases with another interval (unset: CHECK_S), e.g. the default 5. */
static double check_s(void) {
    const char *s = getenv("DT_TEST_CHECK_S");
    return atof(s && *s ? s : CHECK_S);
}

static void run_stuck(stuck_arg *a) {
    const char *s = getenv("DT_TEST_CHECK_S");
    setenv("DT_CHECK_S", s && *s ? s : CHECK_S, 1);
    dt_status st[4];
    cr_assert_eq(dt_local_run(4, stuck_body, a, st), a->how >= SLOW_PEER ? DT_OK : DT_ERR_COMM,
                 "%s", dt_last_error());
    for (int r = 0; r < 4; r++) cr_assert_eq(st[r], DT_OK, "rank %d: %s", r, dt_last_error());
}

/* Every rank failed in time, and its message holds each of want. */
static void expect_all(const stuck_arg *a, const char *const *want, int nwant) {
    for (int r = 0; r < 4; r++) {
        cr_expect(a->st[r] == DT_ERR_COMM || a->st[r] == DT_ERR_ABORTED, "rank %d: %s: %s", r,
                  dt_status_str(a->st[r]), a->msg[r]);
        cr_expect_lt(a->secs[r], 2 * check_s() + 3, "rank %d failed after %.2f s", r, a->secs[r]);
        cr_log_info("rank %d failed after %.2f s", r, a->secs[r]);
        for (int k = 0; k < nwant; k++)
            cr_expect(strstr(a->msg[r], want[k]), "rank %d: no \"%s\" in: %s", r, want[k],
                      a->msg[r]);
    }
}

Test(stuck, cross_group_wait_names_the_diverging_rank, .timeout = TIMEOUT_S) {
    stuck_arg a = {.how = CROSS_GROUPS};
    run_stuck(&a);
    const char *want[] = {
        "rank 0 diverged (ranks wait on each other across groups and none can go on): "
        "rank 0 in all_gather #1 (8 x f32) on group dp, waiting for rank 2; "
        "rank 1 in all_reduce #1 (4 x f32, sum) on group tp, waiting for rank 0; "
        "ranks 2, 3 in barrier #1 on group world, waiting for ranks 0, 1"};
    expect_all(&a, want, 1);
    /* The ranks the verdict aborted name rank 0 as the one that failed. */
    for (int r = 1; r < 4; r++)
        if (a.st[r] == DT_ERR_ABORTED)
            cr_expect(strstr(a.msg[r], "rank 0 failed (DT_ERR_COMM)"), "rank %d: %s", r, a.msg[r]);
}

Test(stuck, receive_cycle_names_both_ranks, .timeout = TIMEOUT_S) {
    stuck_arg a = {.how = RECV_CYCLE};
    run_stuck(&a);
    const char *want[] = {"ranks 0, 1 diverged (ranks wait on each other across groups and none "
                          "can go on): rank 0 in dt_recv from rank 1 on group tp, waiting for "
                          "rank 1; rank 1 in dt_recv from rank 0 on group tp, waiting for rank 0"};
    expect_all(&a, want, 1);
}

Test(stuck, a_sleeping_peer_is_waited_for, .timeout = TIMEOUT_S) {
    stuck_arg a = {.how = SLOW_PEER};
    run_stuck(&a);
    for (int r = 0; r < 4; r++) cr_expect_eq(a.st[r], DT_OK, "rank %d: %s", r, a.msg[r]);
    cr_expect_geq(a.secs[0], 0.9, "rank 0 did not wait for rank 3 (%.2f s)", a.secs[0]);
}

Test(stuck, a_wait_on_a_rank_that_waits_on_a_sleeper_goes_on, .timeout = TIMEOUT_S) {
    stuck_arg a = {.how = SLOW_CHAIN};
    run_stuck(&a);
    for (int r = 0; r < 4; r++) cr_expect_eq(a.st[r], DT_OK, "rank %d: %s", r, a.msg[r]);
}

Test(stuck, check_interval_from_the_environment, .timeout = TIMEOUT_S) {
    setenv("DT_CHECK_S", "soon", 1);
    cr_assert_eq(dt_local_run(2, stuck_body, &(stuck_arg){0}, NULL), DT_ERR_ARG);
    cr_expect(strstr(dt_last_error(), "DT_CHECK_S=\"soon\""), "%s", dt_last_error());
}
