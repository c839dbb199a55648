/* The failure modes of the rank programs (rank_faults.h). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rank_faults.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* When the expected failure reached this rank's SPMD body (the judge prints it: a rank may
 * also fail before its body runs, when another rank aborts the world during startup). */
static double fail_after = -1;

static dt_status failed_at(dt_status st, double t0) {
    fail_after = now_s() - t0;
    return st;
}

static void *suicide(void *arg) {
    (void)arg;
    struct timespec ts = {0, 30 * 1000000};
    nanosleep(&ts, NULL);
    raise(SIGKILL);
    return NULL;
}

int rank_fault_mode(const char *mode) {
    return !strcmp(mode, "fault") || !strcmp(mode, "hang") || !strcmp(mode, "peer-exit") ||
           !strcmp(mode, "mismatch") || !strcmp(mode, "wrong-collective") ||
           !strcmp(mode, "diverge") || !strcmp(mode, "slow-peer") ||
           !strcmp(mode, "target-mismatch");
}

static void *buf_new(const rank_fault_buffers *b, size_t bytes) {
    void *p = b && b->alloc ? b->alloc(bytes) : malloc(bytes);
    if (p && !(b && b->alloc)) memset(p, 0, bytes);
    return p;
}

static void buf_free(const rank_fault_buffers *b, void *p) {
    if (b && b->release) b->release(p);
    else free(p);
}

/* All_reduces (and, every tenth, a barrier: a runtime whose collectives return once queued
 * reports failures at its next wait) until one fails. */
static dt_status until_failure(dt_comm *world, float *buf, size_t count) {
    for (int it = 0; it < 1000000; it++) {
        double t0 = now_s();
        dt_status st = dt_all_reduce(world, buf, buf, count, DT_F32, DT_REDUCE_SUM);
        if (st == DT_OK && it % 10 == 9) st = dt_barrier(world);
        if (st != DT_OK) return failed_at(st, t0);
    }
    return dt_error_set(DT_ERR_ARG, "collectives kept succeeding");
}

static void sleep_s(const char *text) {
    double s = text ? atof(text) : 2;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Four ranks as dp=2 x tp=2: rank 0 skips tp's all_reduce and waits in dp's all_gather, for
 * rank 2, which waits with rank 3 in a world barrier, for ranks 0 and 1; rank 1 waits for rank 0
 * in the all_reduce. Only the check across groups ends it before DT_TIMEOUT_S. */
static dt_status diverge(dt_ctx *ctx, float *buf, const rank_fault_buffers *buffers) {
    int me = dt_ctx_rank(ctx);
    dt_mesh *mesh = NULL;
    dt_comm *dp, *tp, *world;
    float *out = buf_new(buffers, 8 * sizeof(float));
    dt_status st = out ? dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh)
                       : dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (st == DT_OK) st = dt_mesh_dim_comm(mesh, 0, &dp);
    if (st == DT_OK) st = dt_mesh_dim_comm(mesh, 1, &tp);
    if (st == DT_OK) st = dt_ctx_world_comm(ctx, &world);
    if (st == DT_OK) st = dt_barrier(world);
    double t0 = now_s();
    if (st == DT_OK && me == 0) { /* then the barrier: NCCL's collectives return once queued */
        st = dt_all_gather(dp, buf, out, 4, DT_F32);
        if (st == DT_OK) st = dt_barrier(world);
    } else if (st == DT_OK) {
        st = dt_all_reduce(tp, buf, out, 4, DT_F32, DT_REDUCE_SUM);
        if (st == DT_OK) st = dt_barrier(world);
    }
    st = st == DT_OK ? dt_error_set(DT_ERR_ARG, "ranks stuck across groups went on")
                     : failed_at(st, t0);
    dt_mesh_release(mesh);
    if (out) buf_free(buffers, out);
    return st;
}

/* Four ranks: a tensor on ranks {0, 1} moves to ranks {2, 3}, but rank 3 names the whole world
 * as the target mesh. The move's own check (always on) fails every rank alike. */
static dt_status target_mismatch(dt_ctx *ctx) {
    int me = dt_ctx_rank(ctx);
    const char *tp[1] = {"tp"};
    dt_mesh *grid = NULL, *src = NULL, *dst = NULL, *all = NULL;
    dt_tensor *x = NULL, *y = NULL;
    dt_status st = dt_mesh_create_str(ctx, "dp=2,tp=2", &grid);
    if (st == DT_OK) st = dt_mesh_submesh_at(grid, tp, 1, (int[]){0, 0}, &src);
    if (st == DT_OK) st = dt_mesh_submesh_at(grid, tp, 1, (int[]){1, 0}, &dst);
    if (st == DT_OK) st = dt_mesh_create_str(ctx, "w=4", &all);
    if (st == DT_OK)
        st = dt_tensor_zeros(src, DT_F32, 2, (int64_t[]){4, 3}, 1, (dt_placement[]){dt_shard(0)},
                             &x);
    double t0 = now_s();
    if (st == DT_OK) {
        st = dt_tensor_redistribute_to(x, me == 3 ? all : dst, 1, (dt_placement[]){dt_shard(0)},
                                       &y);
        st = st == DT_OK ? dt_error_set(DT_ERR_ARG, "a move to different target meshes went on")
                         : failed_at(st, t0);
    }
    dt_tensor_release(y);
    dt_tensor_release(x);
    dt_mesh_release(all);
    dt_mesh_release(dst);
    dt_mesh_release(src);
    dt_mesh_release(grid);
    return st;
}

dt_status rank_fault_run(dt_ctx *ctx, const char *mode, const rank_fault_buffers *buffers) {
    int me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    dt_comm *world;
    dt_status st = dt_ctx_world_comm(ctx, &world);
    size_t count = 1 << 20;
    float *buf = buf_new(buffers, count * sizeof(float)), *out = NULL;
    if (st != DT_OK || !buf) return st != DT_OK ? st : dt_error_set(DT_ERR_NOMEM, "out of memory");
    if (!strcmp(mode, "mismatch")) {
        double t0 = now_s();
        st = dt_all_reduce(world, buf, buf, me == 1 ? 64 : 60, DT_F32, DT_REDUCE_SUM);
        if (st == DT_OK) st = dt_barrier(world);
        st = st == DT_OK ? dt_error_set(DT_ERR_ARG, "mismatched counts went through")
                         : failed_at(st, t0);
    } else if (!strcmp(mode, "wrong-collective")) {
        /* Run with DT_DEBUG_COLLECTIVES=1: without it nothing compares the kinds. */
        if (!(out = buf_new(buffers, 60 * sizeof(float))))
            st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        double t0 = now_s();
        if (st == DT_OK) st = dt_barrier(world);
        if (st == DT_OK)
            st = me == 1 ? dt_all_gather(world, buf, out, 60 / (size_t)n, DT_F32)
                         : dt_all_reduce(world, buf, out, 60, DT_F32, DT_REDUCE_SUM);
        st = st == DT_OK ? dt_error_set(DT_ERR_ARG, "an all_gather met all_reduces")
                         : failed_at(st, t0);
    } else if (!strcmp(mode, "diverge")) {
        st = diverge(ctx, buf, buffers);
    } else if (!strcmp(mode, "target-mismatch")) {
        st = target_mismatch(ctx);
    } else if (!strcmp(mode, "slow-peer")) {
        /* The last rank sleeps longer than the check interval: the others wait, then finish. */
        st = dt_barrier(world);
        if (st == DT_OK && me == n - 1) sleep_s(getenv("DT_TEST_SLEEP_S"));
        if (st == DT_OK) st = dt_all_reduce(world, buf, buf, 64, DT_F32, DT_REDUCE_SUM);
        if (st == DT_OK) st = dt_barrier(world);
    } else if (!strcmp(mode, "peer-exit")) {
        if (!(out = buf_new(buffers, 3000 * sizeof(float) * (size_t)n)))
            st = dt_error_set(DT_ERR_NOMEM, "out of memory");
        for (int k = 0; k < 5 && st == DT_OK; k++) st = dt_all_gather(world, buf, out, 3000, DT_F32);
        if (st == DT_OK) st = dt_barrier(world);
        if (st == DT_OK && me == 1) printf("peer-exit: rank 1 returns early\n");
        else if (st == DT_OK) st = until_failure(world, buf, 3000);
    } else {
        st = dt_all_reduce(world, buf, buf, count, DT_F32, DT_REDUCE_SUM);
        if (st == DT_OK) st = dt_barrier(world);
        if (st == DT_OK && me == n - 1 && !strcmp(mode, "fault")) {
            pthread_t th;
            pthread_create(&th, NULL, suicide, NULL);
        }
        if (st == DT_OK && me == n - 1 && !strcmp(mode, "hang")) sleep(60);
        else if (st == DT_OK) st = until_failure(world, buf, count);
    }
    if (out) buf_free(buffers, out);
    buf_free(buffers, buf);
    return st;
}

int rank_fault_judge(const char *mode, dt_status st) {
    int n = getenv("WORLD_SIZE") ? atoi(getenv("WORLD_SIZE")) : 0;
    if (st == DT_OK && !strcmp(mode, "slow-peer")) {
        printf("[ok] slow-peer\n");
        return 0;
    }
    if (st == DT_OK) {
        printf("%s: FAILED BADLY: the run succeeded\n", mode);
        return 1;
    }
    char culprit[32] = "ranks disagree on"; /* counts, or (DT_DEBUG_COLLECTIVES) its arguments */
    if (!strcmp(mode, "fault") || !strcmp(mode, "hang"))
        snprintf(culprit, sizeof culprit, "rank %d", n - 1);
    if (!strcmp(mode, "peer-exit")) snprintf(culprit, sizeof culprit, "rank 1");
    if (!strcmp(mode, "wrong-collective"))
        snprintf(culprit, sizeof culprit, "ranks called different");
    if (!strcmp(mode, "diverge")) snprintf(culprit, sizeof culprit, "rank 0 diverged");
    if (!strcmp(mode, "target-mismatch"))
        snprintf(culprit, sizeof culprit, "rank 3 passed w=4");
    const char *msg = dt_last_error();
    int clean = st != DT_OK &&
                (st == DT_ERR_ABORTED || st == DT_ERR_PEER_EXITED || st == DT_ERR_COMM ||
                 (st == DT_ERR_ARG && !strcmp(mode, "target-mismatch"))) &&
                (strstr(msg, culprit) || (!strcmp(mode, "hang") && strstr(msg, "timed out")));
    printf("%s: %s after %.2f s: %s: %s\n", mode, clean ? "failed cleanly" : "FAILED BADLY",
           fail_after, dt_status_str(st), msg);
    return clean ? 3 : 1;
}
