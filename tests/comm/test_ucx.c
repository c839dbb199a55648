/* The UCX runtime as users run it: real processes started by dtrun on loopback, over shared
 * memory (UCX_TLS=sm) and TCP (UCX_TLS=tcp), running tests/ranks/ucx_rank_prog.c (every collective
 * on the world and subgroups, then mesh + distribute + redistribute + full round trips); and
 * the ways a world fails: a rank killed mid-collective, a rank that hangs, one that returns
 * early, ranks that disagree on counts, a rendezvous that cannot complete. Also the
 * environment conventions and dtrun itself (those run in every build). Without UCX the
 * process tests are skipped. Binary paths come from meson (DT_DTRUN, DT_UCX_RANK_PROG). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dt_config.h"
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */
#include "helpers.h"

#define OUT_CAP (1 << 20)

typedef struct run_result {
    int code; /* exit status (128 + signal when killed) */
    double secs;
    char *out; /* stdout and stderr, merged */
} run_result;

static const char *need_env(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) cr_skip_test("%s is not set (run through meson test)", name);
    return v;
}

/* Runs "env <vars> dtrun <dtrun_args> ucx_rank_prog <mode>" and collects its output. */
static run_result run_prog(const char *vars, const char *dtrun_args, const char *mode) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "env %s %s %s %s %s 2>&1", vars, need_env("DT_DTRUN"), dtrun_args,
             need_env("DT_UCX_RANK_PROG"), mode);
    run_result r = {.out = calloc(1, OUT_CAP)};
    cr_assert(r.out);
    double t0 = t_now_s();
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t len = 0, k;
    while ((k = fread(r.out + len, 1, OUT_CAP - 1 - len, p)) > 0)
        len += k;
    int ws = pclose(p);
    r.secs = t_now_s() - t0;
    r.code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    cr_log_info("%s\n(exit %d after %.2f s)\n%s", cmd, r.code, r.secs, r.out);
    return r;
}

static void skip_without_ucx(void) {
    if (!DT_HAVE_UCX) cr_skip_test("built without UCX");
}

/* Every rank printed line (e.g. "[ok] tensor"). */
static void expect_each_rank(const run_result *r, int n, const char *line) {
    for (int rank = 0; rank < n; rank++) {
        char want[128];
        snprintf(want, sizeof want, "[rank %d] %s", rank, line);
        cr_expect(strstr(r->out, want), "rank %d did not print \"%s\":\n%s", rank, line, r->out);
    }
}

static void collectives(const char *tls, int n) {
    skip_without_ucx();
    char vars[128], args[64];
    snprintf(vars, sizeof vars, "UCX_TLS=%s DT_TIMEOUT_S=60", tls);
    snprintf(args, sizeof args, "-n %d", n);
    run_result r = run_prog(vars, args, "all");
    cr_expect_eq(r.code, 0, "dtrun exited with %d:\n%s", r.code, r.out);
    expect_each_rank(&r, n, "[ok] collectives");
    expect_each_rank(&r, n, "[ok] tensor");
    expect_each_rank(&r, n, "[ok] ops");
    free(r.out);
}

Test(ucx, collectives_sm_2, .timeout = 120) {
    collectives("sm", 2);
}
Test(ucx, collectives_sm_4, .timeout = 120) {
    collectives("sm", 4);
}
/* Over UCP (DT_UCX_SHM=0): the ranks share a host, so by default collectives would run over
 * the shared-memory arena. */
Test(ucx, collectives_tcp_2, .timeout = 120) {
    collectives("tcp DT_UCX_SHM=0", 2);
}
Test(ucx, collectives_tcp_4, .timeout = 120) {
    collectives("tcp DT_UCX_SHM=0", 4);
}

/* Rings at every size (zero-length blocks included) on an odd group. */
Test(ucx, rings_everywhere_3, .timeout = 120) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_UCX_SHM=0 DT_UCX_RING_MIN_BYTES=0 DT_TIMEOUT_S=60",
                            "-n 3", "all");
    cr_expect_eq(r.code, 0, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 3, "[ok] collectives");
    expect_each_rank(&r, 3, "[ok] tensor");
    free(r.out);
}

/* Every rank knows the process ids of the host's ranks, for the waits' estimate of other
 * processes' load (ucx_host_pids.c). */
Test(ucx, host_pids_3, .timeout = 120) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=60", "-n 3", "pids");
    cr_expect_eq(r.code, 0, "dtrun exited with %d:\n%s", r.code, r.out);
    expect_each_rank(&r, 3, "[ok] pids of 3 ranks");
    free(r.out);
}

/* The shared-memory path at its chunk boundaries on several groups (ucx_shm_checks.c), and
 * the same calls over UCP with DT_UCX_SHM=0; each run says how many went over shared memory. */
static void shm_checks(const char *shm, int n) {
    skip_without_ucx();
    char vars[128], args[32], want[96];
    snprintf(vars, sizeof vars, "UCX_TLS=sm DT_TIMEOUT_S=60 DT_UCX_SHM=%s", shm);
    snprintf(args, sizeof args, "-n %d", n);
    run_result r = run_prog(vars, args, "shm");
    cr_expect_eq(r.code, 0, "dtrun exited with %d:\n%s", r.code, r.out);
    expect_each_rank(&r, n, "[ok] shm");
    snprintf(want, sizeof want, "%s over shared memory", !strcmp(shm, "0") ? " 0" : "");
    cr_expect(strstr(r.out, want), "%s", r.out);
    free(r.out);
}

Test(ucx, shm_collectives_4, .timeout = 120) {
    shm_checks("1", 4);
}
Test(ucx, shm_collectives_3, .timeout = 120) {
    shm_checks("1", 3);
}
Test(ucx, shm_off_collectives_4, .timeout = 120) {
    shm_checks("0", 4);
}

/* A bad DT_UCX_SHM is an argument error naming it, on every rank. */
Test(ucx, shm_bad_value, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("DT_UCX_SHM=yes", "-n 2", "shm");
    cr_expect_neq(r.code, 0);
    cr_expect(strstr(r.out, "DT_UCX_SHM=\"yes\" is not 0 or 1"), "%s", r.out);
    free(r.out);
}

/* Rank 3 raises SIGKILL while all_reduces run: the others fail cleanly, naming it, well
 * within the 5 s timeout (the control plane sees the process die), and exit by themselves
 * (dtrun's grace is longer than the test allows); dtrun exits with rank 3's 128 + 9, however
 * soon after it the others exit, and names it as the root cause from their error records. */
static void fault(const char *tls, int shm) {
    skip_without_ucx();
    char vars[128];
    snprintf(vars, sizeof vars, "UCX_TLS=%s DT_TIMEOUT_S=5 DT_UCX_SHM=%d", tls, shm);
    run_result r = run_prog(vars, "-n 4 --grace 30", "fault");
    expect_each_rank(&r, 4, shm ? "fault: shm on" : "fault: shm off");
    cr_expect_eq(r.code, 137, "dtrun exited with %d, expected 137 (rank 3's SIGKILL)", r.code);
    expect_each_rank(&r, 3, "fault: failed cleanly");
    cr_expect(!strstr(r.out, "FAILED BADLY"));
    cr_expect(strstr(r.out, "dtrun: root cause: rank 3 was killed by signal 9 (Killed) [the other "
                            "ranks' error records name it]"),
              "%s", r.out);
    for (int rank = 0; rank < 3; rank++) { /* each survivor's record: rank 3's death */
        char want[96];
        snprintf(want, sizeof want, "dtrun: also failed: rank %d exited with status 3: rank 3 failed",
                 rank);
        cr_expect(strstr(r.out, want), "no \"%s\" in:\n%s", want, r.out);
    }
    cr_expect_lt(r.secs, 15.0, "took %.1f s", r.secs);
    free(r.out);
}

Test(ucx, fault_kill_sm, .timeout = 60) {
    fault("sm", 0);
}
Test(ucx, fault_kill_tcp, .timeout = 60) {
    fault("tcp", 0);
}
/* Killed mid-collective over the shared-memory arena (4 MiB all_reduces: 8 chunk rounds). */
Test(ucx, shm_fault_kill, .timeout = 60) {
    fault("sm", 1);
}

/* Rank 2 stays alive but stops taking part: the others time out after DT_TIMEOUT_S = 2 s
 * naming it, and exit although it never returns. */
Test(ucx, hang_times_out, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=2", "-n 3 --grace 1", "hang");
    cr_expect_eq(r.code, 3, "dtrun exited with %d, expected a survivor's 3", r.code);
    expect_each_rank(&r, 2, "hang: failed cleanly");
    cr_expect(strstr(r.out, "timed out after 2.0 s waiting for group rank 2 (world rank 2)"));
    cr_expect_lt(r.secs, 15.0, "took %.1f s", r.secs);
    free(r.out);
}

/* Rank 1 returns after five all_gathers (which must all succeed everywhere); the others'
 * next all_reduce fails with DT_ERR_PEER_EXITED naming it. */
Test(ucx, peer_exit, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=20", "-n 4 --grace 30", "peer-exit");
    cr_expect_eq(r.code, 3, "dtrun exited with %d", r.code);
    for (int rank = 0; rank < 4; rank++) {
        if (rank == 1) continue;
        char want[128];
        snprintf(want, sizeof want, "[rank %d] peer-exit: failed cleanly", rank);
        cr_expect(strstr(r.out, want), "rank %d:\n%s", rank, r.out);
    }
    cr_expect(strstr(r.out, "DT_ERR_PEER_EXITED"), "%s", r.out);
    cr_expect(strstr(r.out, "dt_all_reduce: rank 1 returned before joining it"), "%s", r.out);
    cr_expect_lt(r.secs, 15.0);
    free(r.out);
}

Test(ucx, mismatched_counts, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=tcp DT_TIMEOUT_S=20 DT_UCX_SHM=0", "-n 3 --grace 30",
                            "mismatch");
    cr_expect_eq(r.code, 3, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 3, "mismatch: failed cleanly");
    cr_expect(strstr(r.out, "ranks disagree on counts"));
    cr_expect_lt(r.secs, 15.0);
    free(r.out);
}

/* Over shared memory the members compare fingerprints in the first round's chunk headers,
 * without DT_DEBUG_COLLECTIVES, naming both sides as the local runtime does. */
Test(ucx, shm_mismatched_counts, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=20", "-n 3 --grace 30", "mismatch");
    cr_expect_eq(r.code, 3, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 3, "mismatch: failed cleanly");
    cr_expect(strstr(r.out, "ranks disagree on its arguments: rank 0 is in all_reduce #1 (60 x "
                            "f32, sum), rank 1 in all_reduce #1 (64 x f32, sum)"),
              "%s", r.out);
    cr_expect_lt(r.secs, 15.0);
    free(r.out);
}

/* DT_DEBUG_COLLECTIVES=1: ranks exchange fingerprints before each collective, so rank 1's
 * all_gather among the others' all_reduces fails on every rank naming both sides (the user's
 * first collective is #1 although dt_ucx_run's own first contact ran two before it). */
Test(ucx, debug_collectives_names_different_collectives, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=20 DT_DEBUG_COLLECTIVES=1", "-n 3 --grace 30",
                            "wrong-collective");
    cr_expect_eq(r.code, 3, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 3, "wrong-collective: failed cleanly");
    cr_expect(strstr(r.out, "of 3 ranks: ranks called different collectives: "
                            "rank 0 is in all_reduce #2 (60 x f32, sum), rank 1 in all_gather "
                            "#2 (60 x f32)"),
              "%s", r.out);
    cr_expect_lt(r.secs, 15.0);
    free(r.out);
    /* Counts, too, with the same message as the local runtime's. */
    r = run_prog("UCX_TLS=tcp DT_TIMEOUT_S=20 DT_DEBUG_COLLECTIVES=1", "-n 3 --grace 30",
                 "mismatch");
    cr_expect_eq(r.code, 3, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 3, "mismatch: failed cleanly");
    cr_expect(strstr(r.out, "ranks disagree on its arguments: rank 0 is in all_reduce #1 (60 x "
                            "f32, sum), rank 1 in all_reduce #1 (64 x f32, sum)"),
              "%s", r.out);
    free(r.out);
}

/* Ranks stuck across groups (comm/stuck.h), with a check interval of 1 s (the default 5 s
 * gives the same report about 4 s later) and a timeout far beyond: rank 0 skips tp's all_reduce and waits in dp's all_gather; every rank
 * fails within seconds naming it, dtrun's root cause is rank 0, and its report shows each
 * rank's last collectives with the one it waited in. */
Test(ucx, ranks_stuck_across_groups_fail_naming_the_diverging_rank, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=300 DT_CHECK_S=1", "-n 4 --grace 30", "diverge");
    cr_expect_eq(r.code, 3, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 4, "diverge: failed cleanly");
    cr_expect(strstr(r.out, "dtrun: root cause: rank 0 exited with status 3: DT_ERR_COMM: rank 0 "
                            "diverged (ranks wait on each other across groups and none can go "
                            "on): rank 0 in all_gather #1 (8 x f32) on group dp, waiting for rank "
                            "2; rank 1 in all_reduce #1 (4 x f32, sum) on group tp, waiting for "
                            "rank 0; ranks 2, 3 in barrier #2 on group world, waiting for ranks "
                            "0, 1 [the other ranks' error records name it]"),
              "%s", r.out);
    const char *last[] = {"all_gather #1 (8 x f32) on dp: not completed",
                          "all_reduce #1 (4 x f32, sum) on tp: not completed",
                          "barrier #2 on world: not completed", "barrier #2 on world: not completed"};
    for (int rank = 0; rank < 4; rank++) {
        char want[96];
        snprintf(want, sizeof want, "dtrun:   rank %d | ", rank);
        const char *line = strstr(r.out, want);
        cr_expect(line, "no flight recorder line for rank %d:\n%s", rank, r.out);
        const char *end = line ? strchr(line, '\n') : NULL;
        const char *at = line ? strstr(line, last[rank]) : NULL;
        cr_expect(at && (!end || at < end), "rank %d's last entry is not \"%s\":\n%s", rank,
                  last[rank], r.out);
    }
    cr_expect_lt(r.secs, 15.0, "took %.1f s", r.secs);
    free(r.out);
}

/* Ranks that pass different target meshes to dt_tensor_redistribute_to fail alike, at once,
 * naming the difference (the move's own check, no debug mode). */
Test(ucx, mismatched_move_targets_fail_every_rank, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=300", "-n 4 --grace 30", "target-mismatch");
    cr_expect_eq(r.code, 3, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 4, "target-mismatch: failed cleanly");
    cr_expect(strstr(r.out, "dt_tensor_redistribute_to: ranks passed different arguments: target "
                            "mesh: rank 0 passed tp=2 on ranks [2,3], rank 3 passed w=4 on ranks "
                            "[0-3]"),
              "%s", r.out);
    cr_expect_lt(r.secs, 15.0, "took %.1f s", r.secs);
    free(r.out);
}

/* A peer that only sleeps past the check interval is waited for: the all_reduce completes. */
Test(ucx, a_sleeping_peer_is_waited_for, .timeout = 60) {
    skip_without_ucx();
    run_result r = run_prog("UCX_TLS=sm DT_TIMEOUT_S=60 DT_CHECK_S=0.5 DT_TEST_SLEEP_S=2",
                            "-n 4 --grace 30", "slow-peer");
    cr_expect_eq(r.code, 0, "dtrun exited with %d", r.code);
    expect_each_rank(&r, 4, "[ok] slow-peer");
    cr_expect_geq(r.secs, 2.0, "took %.1f s: nobody slept?", r.secs);
    free(r.out);
}

/* --- rendezvous errors and one-rank worlds, in this process ----------------------------- */

static dt_status never(dt_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return dt_error_set(DT_ERR_ARG, "the SPMD body should not have run");
}

static void set_world(int rank, int size, int port) {
    char b[16];
    snprintf(b, sizeof b, "%d", rank);
    setenv("RANK", b, 1);
    snprintf(b, sizeof b, "%d", size);
    setenv("WORLD_SIZE", b, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(b, sizeof b, "%d", port);
    setenv("MASTER_PORT", b, 1);
}

Test(ucx, rendezvous_unreachable_rank0, .timeout = 30) {
    skip_without_ucx();
    int port = t_closed_port();
    set_world(1, 2, port);
    setenv("DT_STARTUP_TIMEOUT_S", "1", 1);
    double t0 = t_now_s();
    char want[96];
    snprintf(want, sizeof want, "could not reach rank 0 at MASTER_ADDR:MASTER_PORT = 127.0.0.1:%d",
             port);
    T_ERR(dt_ucx_run(never, NULL), DT_ERR_COMM, want);
    cr_expect(strstr(dt_last_error(), "Connection refused"), "%s", dt_last_error());
    cr_expect_lt(t_now_s() - t0, 5.0);
}

Test(ucx, rendezvous_missing_ranks, .timeout = 30) {
    skip_without_ucx();
    set_world(0, 3, t_closed_port());
    setenv("DT_STARTUP_TIMEOUT_S", "1", 1);
    T_ERR(dt_ucx_run(never, NULL), DT_ERR_COMM, "1 of 3 ranks arrived; missing: 1, 2");
}

static dt_status one_rank(dt_ctx *ctx, void *arg) {
    (void)arg;
    R_CHECK(dt_ctx_rank(ctx) == 0 && dt_ctx_size(ctx) == 1, "rank %d of %d", dt_ctx_rank(ctx),
            dt_ctx_size(ctx));
    dt_comm *w;
    R_OK(dt_ctx_world_comm(ctx, &w));
    float v[3] = {1, 2, 3}, out[3];
    R_OK(dt_all_reduce(w, v, out, 3, DT_F32, DT_REDUCE_AVG));
    R_CHECK(out[2] == 3, "all_reduce on one rank: %g", out[2]);
    R_OK(dt_ucx_set_timeout(ctx, 1.5));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "x=1", &mesh));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ucx, single_rank_world) {
    skip_without_ucx();
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    dt_status st = dt_ucx_run(one_rank, NULL);
    cr_assert_eq(st, DT_OK, "%s", dt_last_error());
}

/* DT_UCX_HIER takes 0 or 1 (whether all_reduce goes hierarchical across hosts); anything else
 * fails before the world forms, naming the variable and its value. */
Test(ucx, hier_env_checked) {
    skip_without_ucx();
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("DT_UCX_HIER", "yes", 1);
    T_ERR(dt_ucx_run(one_rank, NULL), DT_ERR_ARG, "DT_UCX_HIER=\"yes\" is not 0 or 1");
    setenv("DT_UCX_HIER", "0", 1);
    dt_status st = dt_ucx_run(one_rank, NULL);
    unsetenv("DT_UCX_HIER");
    cr_assert_eq(st, DT_OK, "%s", dt_last_error());
}

static dt_status set_timeout_local(dt_ctx *ctx, void *arg) {
    (void)arg;
    R_ERR(dt_ucx_set_timeout(ctx, 1), DT_ERR_UNSUPPORTED, "not the UCX one");
    R_ERR(dt_ucx_set_timeout(ctx, -1), DT_ERR_ARG, "seconds");
    return DT_OK;
}

Test(ucx, set_timeout_needs_ucx_context) {
    skip_without_ucx();
    t_run(2, set_timeout_local, NULL);
}

Test(ucx, without_ucx_says_so) {
    if (DT_HAVE_UCX) cr_skip_test("built with UCX");
    T_ERR(dt_ucx_run(never, NULL), DT_ERR_UNSUPPORTED, "no UCX runtime");
}

/* --- environment conventions (every build) ----------------------------------------------- */

static const char *const world_vars[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "PMI_RANK",
                                         "PMI_SIZE",
                                         "MPI_LOCALRANKID",
                                         "MPI_LOCALNRANKS",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_TASKS_PER_NODE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT"};

static void clear_world(void) {
    for (size_t i = 0; i < sizeof world_vars / sizeof world_vars[0]; i++)
        unsetenv(world_vars[i]);
}

Test(ucx_env, conventions) {
    dt_ucx_env e;
    clear_world();
    T_ERR(dt_ucx_env_read(&e), DT_ERR_ARG, "no world found");

    setenv("RANK", "2", 1);
    T_ERR(dt_ucx_env_read(&e), DT_ERR_ARG, "RANK is set but WORLD_SIZE is not");
    setenv("WORLD_SIZE", "4", 1);
    T_ERR(dt_ucx_env_read(&e), DT_ERR_ARG, "MASTER_ADDR and MASTER_PORT not set");
    setenv("MASTER_ADDR", "node7", 1);
    T_ERR(dt_ucx_env_read(&e), DT_ERR_ARG, "MASTER_PORT not set");
    setenv("MASTER_PORT", "29500", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    cr_assert_eq(dt_ucx_env_read(&e), DT_OK, "%s", dt_last_error());
    cr_expect(e.rank == 2 && e.size == 4 && e.local_rank == 0 && e.local_size == 2);
    cr_expect_str_eq(e.source, "torchrun");
    cr_expect_str_eq(e.master_addr, "node7");
    cr_expect_eq(e.master_port, 29500);

    setenv("RANK", "4", 1);
    T_ERR(dt_ucx_env_read(&e), DT_ERR_ARG, "RANK=\"4\" is not an integer in [0, 3]");
    setenv("MASTER_PORT", "http", 1);
    setenv("RANK", "1", 1);
    T_ERR(dt_ucx_env_read(&e), DT_ERR_ARG, "MASTER_PORT=\"http\"");

    clear_world();
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_TASKS_PER_NODE", "4(x2)", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "1234", 1);
    cr_assert_eq(dt_ucx_env_read(&e), DT_OK, "%s", dt_last_error());
    cr_expect(e.rank == 5 && e.size == 8 && e.local_rank == 1 && e.local_size == 4);
    cr_expect_str_eq(e.source, "slurm");

    /* Open MPI wins over Slurm when both are set (mpirun inside an allocation). */
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
    cr_assert_eq(dt_ucx_env_read(&e), DT_OK, "%s", dt_last_error());
    cr_expect(e.rank == 3 && e.size == 6 && e.local_rank == -1);
    cr_expect_str_eq(e.source, "openmpi");

    /* One rank needs no rendezvous. */
    clear_world();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    cr_assert_eq(dt_ucx_env_read(&e), DT_OK, "%s", dt_last_error());
    cr_expect(e.size == 1 && e.master_port == 0);
}

/* --- dtrun ------------------------------------------------------------------------------- */

static run_result run_dtrun(const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", need_env("DT_DTRUN"), args);
    run_result r = {.out = calloc(1, OUT_CAP)};
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t len = 0, k;
    while ((k = fread(r.out + len, 1, OUT_CAP - 1 - len, p)) > 0)
        len += k;
    int ws = pclose(p);
    r.code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    return r;
}

Test(dtrun, environment_prefix_and_status) {
    run_result r =
        run_dtrun("-n 3 sh -c 'echo \"env $RANK/$WORLD_SIZE $LOCAL_RANK/$LOCAL_WORLD_SIZE"
                  " $MASTER_ADDR\"; printf partial; test $RANK != 1 || exit 5'");
    cr_expect_eq(r.code, 5, "%d\n%s", r.code, r.out);
    for (int k = 0; k < 3; k++) {
        char want[96];
        snprintf(want, sizeof want, "[rank %d] env %d/3 %d/3 127.0.0.1\n", k, k, k);
        cr_expect(strstr(r.out, want), "missing \"%s\" in:\n%s", want, r.out);
    }
    cr_expect(strstr(r.out, "[rank 2] partial\n"), "%s", r.out);
    cr_expect(strstr(r.out, "dtrun: rank 1 exited with status 5"), "%s", r.out);
    free(r.out);
}

/* A rank killed by a signal: 128 + signal, and the others (sleeping) are stopped. */
Test(dtrun, signal_stops_the_others, .timeout = 30) {
    double t0 = t_now_s();
    run_result r = run_dtrun("-n 3 --grace 0 sh -c 'test $RANK = 2 && kill -9 $$; sleep 20'");
    cr_expect_eq(r.code, 137, "%d\n%s", r.code, r.out);
    cr_expect_lt(t_now_s() - t0, 10.0);
    free(r.out);
}

Test(dtrun, usage_errors) {
    run_result r = run_dtrun("-n 0 true");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.out, "usage: dtrun"));
    free(r.out);
    r = run_dtrun("-n 2 /nonexistent/program");
    cr_expect_eq(r.code, 127, "%d\n%s", r.code, r.out);
    cr_expect(strstr(r.out, "[rank 0] dtrun: cannot run /nonexistent/program"), "%s", r.out);
    free(r.out);
}
