/* Arguments that depend on the rank, on 4 local ranks (a dp=2,tp=2 mesh): with the debug mode
 * (dt_ctx_set_debug_args or DT_DEBUG_ARGS=1) an op, a redistribute and a checkpoint save or
 * load fail on every rank with one message naming the first difference; off, they split the
 * world as before. A cross-mesh move whose target mesh depends on the rank fails every rank of
 * both meshes without the mode, within two seconds. Each rank records its outcome and returns
 * DT_OK, so the main thread compares all four; the expected messages are written from the
 * setup below (which rank passes what), not from the library's output. */
#include <stdlib.h>

#include "helpers.h"

enum kase {
    OP_SHAPE,          /* add: rank 3's b is [4, 5], the others' [4, 4] */
    OP_PLACEMENT,      /* matmul: rank 2's b is S(1),R, the others' S(0),R */
    REDIST_TARGET,     /* redistribute: rank 1 asks for R,R, the others for S(1),R */
    REDIST_INVALID,    /* redistribute: rank 1 asks for S(5),R (no dim 5), the others S(1),R */
    SAVE_NAME,         /* checkpoint save: rank 3 names the tensor "w3", the others "w" */
    LOAD_NAME,         /* checkpoint load (of a good save): rank 3 asks for "w3" */
    XMESH_TARGET_RANK, /* move from ranks {0,1}: rank 3 (target only) passes a 4-rank mesh */
    XMESH_SOURCE_RANK, /* rank 1 (source only) passes the dp sub-mesh {0,2} as target */
    XMESH_INVALID,     /* rank 2 (target only) asks for S(5) (no dim 5), the others for S(0) */
    AGREEING,          /* add with equal arguments: the sum, and one all_gather more than off */
};

typedef struct outcome {
    int kase, debug;
    const char *dir;
    dt_status st[4];
    char msg[4][512];
    double secs[4];
    uint64_t gathers[4]; /* AGREEING: all_gathers the add issued */
} outcome;

static dt_status zeros(dt_mesh *m, int64_t rows, int64_t cols, const char *pl, dt_tensor **out) {
    dt_placement p[2];
    int n;
    R_OK(dt_placements_parse(pl, p, 2, &n));
    return dt_tensor_zeros(m, DT_F32, 2, (int64_t[]){rows, cols}, n, p, out);
}

/* The cross-mesh cases: x on C (tp sub-mesh at dp=0: ranks 0,1) moves to D (dp=1: ranks 2,3),
 * except on the one rank that passes another target. */
static dt_status xmesh_call(dt_ctx *ctx, outcome *o, dt_mesh *a) {
    int me = dt_ctx_rank(ctx);
    const char *tp[1] = {"tp"}, *dp[1] = {"dp"};
    dt_mesh *c, *d, *b, *e;
    R_OK(dt_mesh_submesh_at(a, tp, 1, (int[]){0, 0}, &c));
    R_OK(dt_mesh_submesh_at(a, tp, 1, (int[]){1, 0}, &d));
    R_OK(dt_mesh_submesh_at(a, dp, 1, (int[]){0, 0}, &e)); /* ranks 0, 2 */
    R_OK(dt_mesh_create_str(ctx, "w=4", &b));
    dt_tensor *x, *y = NULL;
    R_OK(dt_tensor_zeros(c, DT_F32, 2, (int64_t[]){4, 3}, 1, (dt_placement[]){dt_shard(0)}, &x));
    dt_mesh *target = d;
    if (o->kase == XMESH_TARGET_RANK && me == 3) target = b;
    if (o->kase == XMESH_SOURCE_RANK && me == 1) target = e;
    dt_placement p[1] = {o->kase == XMESH_INVALID && me == 2 ? dt_shard(5) : dt_shard(0)};
    double t0 = t_now_s();
    dt_status st = dt_tensor_redistribute_to(x, target, 1, p, &y);
    o->secs[me] = t_now_s() - t0;
    o->st[me] = st;
    if (st != DT_OK) snprintf(o->msg[me], sizeof o->msg[0], "%s", dt_last_error());
    dt_tensor_release(y);
    dt_tensor_release(x);
    dt_mesh *all[] = {b, c, d, e};
    for (int i = 0; i < 4; i++)
        R_OK(dt_mesh_release(all[i]));
    return DT_OK;
}

static dt_status call(dt_ctx *ctx, outcome *o, dt_mesh *m) {
    int me = dt_ctx_rank(ctx);
    dt_tensor *a, *b = NULL, *y = NULL;
    R_OK(zeros(m, 4, 4, "S(0),R", &a));
    dt_status st = DT_OK;
    switch (o->kase) {
    case OP_SHAPE:
        R_OK(zeros(m, 4, me == 3 ? 5 : 4, "S(0),R", &b));
        st = dt_add(a, b, &y);
        break;
    case OP_PLACEMENT:
        R_OK(zeros(m, 4, 4, me == 2 ? "S(1),R" : "S(0),R", &b));
        st = dt_matmul(a, b, &y);
        break;
    case REDIST_TARGET:
    case REDIST_INVALID: {
        dt_placement odd = o->kase == REDIST_TARGET ? dt_replicate() : dt_shard(5);
        dt_placement p[2] = {me == 1 ? odd : dt_shard(1), dt_replicate()};
        st = dt_tensor_redistribute(a, 2, p, &y);
        break;
    }
    case SAVE_NAME: {
        const char *names[1] = {me == 3 ? "w3" : "w"};
        st = dt_checkpoint_save(ctx, o->dir, names, &a, 1, NULL);
        break;
    }
    case LOAD_NAME: {
        const char *good[1] = {"w"}, *names[1] = {me == 3 ? "w3" : "w"};
        R_OK(dt_ctx_set_debug_args(ctx, 0)); /* a good save first */
        R_OK(dt_checkpoint_save(ctx, o->dir, good, &a, 1, NULL));
        R_OK(dt_ctx_set_debug_args(ctx, o->debug));
        st = dt_checkpoint_load(o->dir, names, &a, 1, NULL);
        break;
    }
    case AGREEING: {
        float ones[16];
        for (int i = 0; i < 16; i++)
            ones[i] = (float)i;
        dt_placement p[2] = {dt_shard(0), dt_replicate()};
        R_OK(dt_tensor_release(a));
        R_OK(dt_tensor_distribute(m, ones, DT_F32, 2, (int64_t[]){4, 4}, 2, p, DT_ALL_RANKS, &a));
        R_OK(dt_comm_stats_reset(ctx));
        st = dt_add(a, a, &y);
        o->gathers[me] = t_issued(ctx, DT_COLL_ALL_GATHER);
        if (st == DT_OK) {
            float full[16];
            R_OK(dt_tensor_full_tensor(y, full, sizeof full));
            for (int i = 0; i < 16; i++)
                R_CHECK(full[i] == 2.0f * (float)i, "a + a element %d is %g, want %g", i, full[i],
                        2.0 * i);
        }
        break;
    }
    default:
        break;
    }
    o->st[me] = st;
    if (st != DT_OK) snprintf(o->msg[me], sizeof o->msg[0], "%s", dt_last_error());
    dt_tensor_release(y);
    dt_tensor_release(b);
    dt_tensor_release(a);
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    outcome *o = arg;
    /* A regression that leaves a rank waiting fails in seconds, not at the default 300 s. */
    R_OK(dt_local_set_timeout(ctx, 10));
    if (o->debug >= 0) R_OK(dt_ctx_set_debug_args(ctx, o->debug));
    dt_mesh *m;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &m));
    dt_status st = o->kase >= XMESH_TARGET_RANK && o->kase <= XMESH_INVALID ? xmesh_call(ctx, o, m)
                                                                            : call(ctx, o, m);
    dt_mesh_release(m);
    return st;
}

/* debug: 1 on, 0 off, -1 as the environment says. */
static outcome run(int kase, int debug) {
    outcome o = {.kase = kase, .debug = debug};
    char dir[] = "/tmp/dtagree-XXXXXX";
    if (kase == SAVE_NAME || kase == LOAD_NAME) {
        cr_assert(mkdtemp(dir), "mkdtemp");
        o.dir = dir;
    }
    t_run(4, body, &o);
    if (o.dir) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
        o.dir = NULL;
    }
    return o;
}

/* Every rank failed with DT_ERR_ARG and exactly the message want. */
static void all_fail(const outcome *o, const char *want) {
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(o->st[r], DT_ERR_ARG, "rank %d returned %s (%s)", r, dt_status_str(o->st[r]),
                     o->msg[r]);
        cr_assert_str_eq(o->msg[r], want, "rank %d's message", r);
    }
}

#define HEAD(fn) fn ": ranks passed different arguments (DT_DEBUG_ARGS): "

Test(agree, rank_dependent_shape_fails_every_rank) {
    outcome o = run(OP_SHAPE, 1);
    all_fail(&o, HEAD("add") "input 1 shape: rank 0 passed [4, 4], rank 3 passed [4, 5]");
}

Test(agree, rank_dependent_shape_off_splits_the_world) {
    /* What the mode is for: off, rank 3 alone fails (broadcasting [4, 4] with [4, 5]) and the
     * other ranks go on with DT_OK. */
    outcome o = run(OP_SHAPE, 0);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(o.st[r], DT_OK, "rank %d: %s", r, o.msg[r]);
    cr_assert_eq(o.st[3], DT_ERR_SHAPE, "rank 3 returned %s (%s)", dt_status_str(o.st[3]),
                 o.msg[3]);
}

Test(agree, rank_dependent_placement_fails_every_rank) {
    outcome o = run(OP_PLACEMENT, 1);
    all_fail(&o, HEAD("matmul") "input 1 placements: rank 0 passed [S(0),R], rank 2 passed "
                                "[S(1),R]");
}

Test(agree, rank_dependent_redistribute_target_fails_every_rank) {
    outcome o = run(REDIST_TARGET, 1);
    all_fail(&o, HEAD("dt_tensor_redistribute") "target placements: rank 0 passed [S(1),R], "
                                                "rank 1 passed [R,R]");
}

Test(agree, target_invalid_on_one_rank_fails_every_rank_alike) {
    /* Compared before they are checked: rank 1 does not fail alone with S(5) out of range
     * while the others wait in the all_to_all of S(0) -> S(1). */
    outcome o = run(REDIST_INVALID, 1);
    all_fail(&o, HEAD("dt_tensor_redistribute") "target placements: rank 0 passed [S(1),R], "
                                                "rank 1 passed [S(5),R]");
}

Test(agree, rank_dependent_checkpoint_name_fails_every_rank) {
    outcome o = run(SAVE_NAME, 1);
    all_fail(&o, HEAD("dt_checkpoint_save") "tensor 0 name: rank 0 passed \"w\", rank 3 passed "
                                            "\"w3\"");
    o = run(LOAD_NAME, 1);
    all_fail(&o, HEAD("dt_checkpoint_load") "tensor 0 name: rank 0 passed \"w\", rank 3 passed "
                                            "\"w3\"");
}

Test(agree, load_name_off_fails_every_rank_through_the_collective_load) {
    /* Off, nothing compares the names first: rank 3 alone finds no tensor "w3", and the
     * collective load's outcome step (not this check) fails every rank naming it. */
    outcome o = run(LOAD_NAME, 0);
    for (int r = 0; r < 4; r++) {
        cr_assert_neq(o.st[r], DT_OK, "rank %d loaded while rank 3 failed", r);
        cr_assert(strstr(o.msg[r], "dt_checkpoint_load: rank 3 failed: tensor \"w3\" is not in "
                                   "the checkpoint"),
                  "rank %d: %s", r, o.msg[r]);
        cr_assert(!strstr(o.msg[r], "DT_DEBUG_ARGS"), "rank %d: %s", r, o.msg[r]);
    }
}

Test(agree, agreeing_arguments_cost_one_all_gather) {
    outcome on = run(AGREEING, 1), off = run(AGREEING, 0);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(on.st[r], DT_OK, "rank %d: %s", r, on.msg[r]);
        cr_assert_eq(off.st[r], DT_OK, "rank %d: %s", r, off.msg[r]);
        /* S(0),R + S(0),R moves nothing: off issues no all_gather, on the hash's one. */
        cr_assert_eq(off.gathers[r], 0, "rank %d: %llu all_gathers off", r,
                     (unsigned long long)off.gathers[r]);
        cr_assert_eq(on.gathers[r], 1, "rank %d: %llu all_gathers on", r,
                     (unsigned long long)on.gathers[r]);
    }
}

Test(agree, environment_turns_it_on) {
    setenv("DT_DEBUG_ARGS", "1", 1);
    outcome o = run(OP_SHAPE, -1);
    all_fail(&o, HEAD("add") "input 1 shape: rank 0 passed [4, 4], rank 3 passed [4, 5]");
}

Test(agree, environment_malformed) {
    setenv("DT_DEBUG_ARGS", "yes", 1);
    outcome o = run(AGREEING, -1);
    all_fail(&o, "environment: DT_DEBUG_ARGS=\"yes\" is not 0 or 1");
}

Test(agree, setter_needs_a_context) {
    T_ERR(dt_ctx_set_debug_args(NULL, 1), DT_ERR_ARG, "ctx");
}

/* The cross-mesh move compares without the mode: every rank of both meshes, the same message,
 * at once (no timeout). */
static void xmesh_all_fail(int kase, const char *want) {
    outcome o = run(kase, 0);
    all_fail(&o, want);
    for (int r = 0; r < 4; r++)
        cr_assert_lt(o.secs[r], 2.0, "rank %d took %.2f s to learn it", r, o.secs[r]);
}

#define XHEAD "dt_tensor_redistribute_to: ranks passed different arguments: "

Test(agree, xmesh_target_only_rank_disagrees) {
    xmesh_all_fail(XMESH_TARGET_RANK,
                   XHEAD "target mesh: rank 0 passed tp=2 on ranks [2,3], rank 3 passed w=4 on "
                         "ranks [0-3]");
}

Test(agree, xmesh_source_only_rank_disagrees) {
    xmesh_all_fail(XMESH_SOURCE_RANK,
                   XHEAD "target mesh: rank 0 passed tp=2 on ranks [2,3], rank 1 passed dp=2 on "
                         "ranks [0,2]");
}

Test(agree, xmesh_target_invalid_on_one_rank) {
    xmesh_all_fail(XMESH_INVALID,
                   XHEAD "target placements: rank 0 passed [S(0)], rank 2 passed [S(5)]");
}
