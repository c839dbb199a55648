/* Whether other processes keep the cores busy (src/comm/host_load.c), which decides whether
 * the runtimes' waits yield while the ranks fit on the cores: /proc/stat's first line read
 * against values written here, the verdict's threshold, a process's CPU time from /proc
 * against wait4's, and, with as many CPU-bound child processes as usable cores, the local
 * runtime's estimate turning to "shared" and its ranks' waits then giving up their yields. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/host_load.h"
#include "comm/local/local_impl.h"
#include "core/spin.h"
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */
#include "helpers.h"

Test(host_load, parses_the_first_line_of_proc_stat) {
    int64_t t = -1;
    /* user nice system idle iowait irq softirq steal guest guest_nice */
    cr_assert(dt_parse_stat_busy("cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 1 2 3\n", &t));
    cr_assert_eq(t, 100 + 5 + 50 + 3 + 2, "busy ticks %lld", (long long)t);
    cr_assert(dt_parse_stat_busy("cpu 7 0 0 9 9 0 1", &t));
    cr_assert_eq(t, 8);
    cr_assert_not(dt_parse_stat_busy("cpu0 100 5 50 1000 20 3 2 7 0 0", &t), "a CPU's line");
    cr_assert_not(dt_parse_stat_busy("cpu  100 5 50", &t), "too few fields");
    cr_assert_not(dt_parse_stat_busy("cpu  100 -5 50 1000 20 3 2", &t), "a negative field");
    cr_assert_not(dt_parse_stat_busy("intr 1 2 3 4 5 6 7 8", &t), "another line");
    cr_assert_not(dt_parse_stat_busy("", &t), "empty");
}

Test(host_load, other_processes_count_from_a_quarter_of_a_core) {
    const int64_t ms = 1000000;
    cr_assert(dt_host_load_verdict(100 * ms, 40 * ms, 200 * ms), "60 of 200 ms: shared");
    cr_assert(dt_host_load_verdict(100 * ms, 50 * ms, 200 * ms), "50 of 200 ms: shared");
    cr_assert_not(dt_host_load_verdict(100 * ms, 60 * ms, 200 * ms), "40 of 200 ms: not shared");
    cr_assert_not(dt_host_load_verdict(0, 0, 200 * ms), "an idle machine");
    cr_assert_not(dt_host_load_verdict(380 * ms, 400 * ms, 200 * ms), "this process alone");
}

/* Children that spin until killed, or until this process dies. */
static void spin_children(pid_t *pids, int n) {
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        cr_assert(pids[i] >= 0, "fork");
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (volatile unsigned long x = 0;; x++) {
            }
        }
    }
}

static void kill_children(const pid_t *pids, int n) {
    for (int i = 0; i < n; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
}

/* A spinning child's CPU time read from /proc against what wait4 reports once it is killed. */
Test(host_load, counts_processes_cpu_time_as_their_rusage_does) {
    pid_t pid;
    spin_children(&pid, 1);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 300 * 1000000};
    int p = (int)pid;
    int64_t a = dt_pids_cpu_ns(&p, 1);
    nanosleep(&ts, NULL);
    int64_t b = dt_pids_cpu_ns(&p, 1);
    kill(pid, SIGKILL);
    int status;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
    int64_t total = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
                    ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
    cr_assert(a >= 0 && b > a, "readings %lld then %lld ns", (long long)a, (long long)b);
    /* /proc counts in 10 ms ticks; the child ran a few more ms between the reading and the kill */
    cr_assert(b <= total + 10000000 && total - b <= 60000000, "/proc said %lld ns, wait4 %lld ns",
              (long long)b, (long long)total);
    int gone[2] = {p, 0};
    cr_assert_eq(dt_pids_cpu_ns(gone, 1), -1, "a reaped child's /proc entry");
    cr_assert_eq(dt_pids_cpu_ns(gone + 1, 1), -1, "pid 0");
}

/* Polls lw_host_shared every 20 ms for up to 5 s; 1 when it said shared. */
static int turns_shared(void) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000000};
    for (int i = 0; i < 250; i++) {
        if (lw_host_shared()) return 1;
        nanosleep(&ts, NULL);
    }
    return 0;
}

static dt_status spin_body(dt_ctx *ctx, void *arg) {
    int *seen = arg;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    lw_comm *c = (lw_comm *)world;
    R_CHECK(c->world->spin == LW_SPIN, "2 ranks on %d cores: spin %d", dt_usable_cores(),
            c->world->spin);
    if (dt_comm_rank(world) == 0) *seen = lw_spin(c->world);
    return dt_barrier(world);
}

Test(host_load, busy_processes_make_the_host_shared_and_waits_sleep, .timeout = 60) {
    enum { MAXP = 16 };
    int n = dt_usable_cores();
    if (n > MAXP) n = MAXP;
    pid_t pids[MAXP];
    spin_children(pids, n);
    int shared = turns_shared();
    int seen = -1;
    dt_status st = DT_OK;
    if (shared && dt_usable_cores() >= 2 && lw_host_shared())
        st = dt_local_run(2, spin_body, &seen, NULL);
    kill_children(pids, n);
    cr_assert(shared, "%d spinning processes never made the host shared", n);
    cr_assert_eq(st, DT_OK, "%s", dt_last_error());
    if (dt_usable_cores() >= 2 && seen != -1)
        cr_assert_eq(seen, 0, "the ranks' waits may still yield %d times", seen);
}
