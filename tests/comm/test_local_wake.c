/* How the local runtime's ranks sleep and wake when they outnumber the cores (no spin): a wait
 * for every member sleeps once and is woken by the last member to publish, not once per member;
 * entry-barrier waiters sleep on the group's futex word, none leaves before the last arrival,
 * each wakes once; a rank that fails frees the sleepers with an error naming it. Sleeps are
 * counted as the thread's voluntary context switches (getrusage RUSAGE_THREAD). The ranks hold
 * each other back by polling shared words between sleeps, so they run as threads, not as
 * fibers (DT_LOCAL_FIBERS=0), whose polls would never let another fiber run. */
#include <stdatomic.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <time.h>

#include "comm/local/local_impl.h"
#include "helpers.h"

enum { N = 4, ROUNDS = 20 };

static void sleep_ms(long ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static long voluntary_switches(void) {
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nvcsw;
}

/* Polls *word until it reaches want, up to 20 s; 1 when it did. */
static int await(_Atomic uint32_t *word, uint32_t want) {
    for (int i = 0; i < 20000 && atomic_load(word) < want; i++)
        sleep_ms(1);
    return atomic_load(word) >= want;
}

typedef struct {
    _Atomic uint32_t turn; /* the rank whose turn it is to publish, + ROUNDS * round */
    _Atomic uint32_t last_published;
} order;

/* Rank N - 1 publishes DONE and waits for everyone while ranks 0, 1, ..., N - 2 publish one at a
 * time, each once the previous one has and N - 1 sleeps: a wait that went member by member
 * would sleep and wake N - 1 times; the count's wait sleeps once, woken by the last. */
static dt_status wait_all_body(dt_ctx *ctx, void *arg) {
    order *o = arg;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    lw_comm *c = (lw_comm *)world;
    c->world->spin = 0; /* as when the ranks outnumber the cores */
    const int me = dt_comm_rank(world);
    lw_count *k = &c->group->counts[LW_DONE];
    for (uint32_t round = 0; round < ROUNDS; round++) {
        R_OK(dt_barrier(world)); /* a new epoch */
        const uint32_t base = k->base;
        if (me == N - 1) {
            lw_publish(c, LW_DONE);
            long before = voluntary_switches();
            lw_wait_all(c, LW_DONE);
            long slept = voluntary_switches() - before;
            R_CHECK(atomic_load(&o->last_published) == round + 1,
                    "round %u: woke before the last member published", round);
            R_CHECK(atomic_load(&k->n) - base == N, "round %u: %u of %d published", round,
                    atomic_load(&k->n) - base, N);
            R_CHECK(slept == 1, "round %u: slept %ld times in one wait for all", round, slept);
        } else {
            /* Asleep by now, as a rule (if not, its count below says so): a bounded wait, so
             * that a wait that sleeps elsewhere fails the count instead of hanging here. */
            for (int i = 0; i < 1000 && atomic_load(&k->sleepers) < 1; i++)
                sleep_ms(1);
            R_CHECK(await(&o->turn, round * ROUNDS + (uint32_t)me), "round %u: turn %d", round, me);
            sleep_ms(2); /* a wait woken by an earlier publication would sleep again */
            if (me == N - 2) atomic_store(&o->last_published, round + 1);
            lw_publish(c, LW_DONE);
            /* The next rank's turn; after the last, rank 0's in the next round. */
            atomic_store(&o->turn, me == N - 2 ? (round + 1) * ROUNDS : round * ROUNDS + me + 1);
            lw_wait_all(c, LW_DONE);
        }
    }
    return DT_OK;
}

static void threads_not_fibers(void) { setenv("DT_LOCAL_FIBERS", "0", 1); }
TestSuite(local_wake, .init = threads_not_fibers);

Test(local_wake, wait_for_all_sleeps_once_woken_by_the_last) {
    order o = {0};
    t_run(N, wait_all_body, &o);
}

typedef struct {
    _Atomic uint32_t last_in;  /* round + 1 once rank 0 is about to arrive */
    _Atomic uint32_t entering; /* ranks 1.. about to arrive, over all rounds */
    _Atomic uint32_t left;     /* ranks out of the barrier that starts a round, over all rounds */
} arrival;

/* Ranks 1.. arrive first, one at a time (each once the ones before sleep: no wait for the group
 * lock), and sleep on the group's word; rank 0 arrives once all of them sleep. Nobody leaves
 * before rank 0 arrived, and each sleeper slept once. */
static dt_status barrier_body(dt_ctx *ctx, void *arg) {
    arrival *a = arg;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    lw_comm *c = (lw_comm *)world;
    c->world->spin = 0;
    const int me = dt_comm_rank(world);
    lw_group *g = c->group;
    for (uint32_t round = 0; round < ROUNDS; round++) {
        R_OK(dt_barrier(world)); /* everyone is out of the last round's barrier */
        atomic_fetch_add(&a->left, 1);
        /* Then nobody counts as asleep but in the barrier below. */
        R_CHECK(await(&a->left, N * (round + 1)), "round %u: ranks stuck", round);
        if (me == 0) {
            R_CHECK(await(&a->entering, (N - 1) * (round + 1)) && await(&g->sleepers, N - 1),
                    "round %u: %u of %d ranks asleep", round, atomic_load(&g->sleepers), N - 1);
            atomic_store(&a->last_in, round + 1);
            R_OK(dt_barrier(world));
        } else {
            R_CHECK(await(&a->entering, (N - 1) * round + (uint32_t)me - 1) &&
                        await(&g->sleepers, (uint32_t)me - 1),
                    "round %u: rank %d: the ranks before it never slept", round, me);
            atomic_fetch_add(&a->entering, 1);
            long before = voluntary_switches();
            R_OK(dt_barrier(world));
            long slept = voluntary_switches() - before;
            R_CHECK(atomic_load(&a->last_in) == round + 1,
                    "round %u: rank %d left the barrier before rank 0 arrived", round, me);
            R_CHECK(slept == 1, "round %u: rank %d slept %ld times in one barrier", round, me,
                    slept);
        }
    }
    return DT_OK;
}

Test(local_wake, barrier_sleepers_leave_after_the_last_and_wake_once) {
    arrival a = {0};
    t_run(N, barrier_body, &a);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Ranks 1.. sleep in a barrier; rank 0 fails instead of arriving. The sleepers must wake at once,
 * not at the next look for stuck ranks (DT_CHECK_S, 5 s by default) or their timeout. */
static dt_status fail_body(dt_ctx *ctx, void *arg) {
    _Atomic double *failed_at = arg;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    lw_comm *c = (lw_comm *)world;
    c->world->spin = 0;
    if (dt_comm_rank(world) == 0) {
        R_CHECK(await(&c->group->sleepers, N - 1), "%u of %d ranks asleep",
                atomic_load(&c->group->sleepers), N - 1);
        atomic_store(failed_at, now_s());
        return dt_error_set(DT_ERR_SHAPE, "rank zero gives up");
    }
    dt_status st = dt_barrier(world);
    double late = now_s() - atomic_load(failed_at);
    R_CHECK(late < 2, "the barrier returned %.2f s after rank 0 failed", late);
    R_CHECK(st == DT_ERR_ABORTED, "the barrier returned %s (%s)", dt_status_str(st),
            dt_last_error());
    R_CHECK(strstr(dt_last_error(), "rank 0") && strstr(dt_last_error(), "rank zero gives up"),
            "message \"%s\" does not name rank 0's failure", dt_last_error());
    return DT_OK;
}

Test(local_wake, failing_rank_wakes_barrier_sleepers_with_its_error) {
    for (int round = 0; round < 5; round++) {
        dt_status st[N];
        _Atomic double failed_at = 1e30;
        dt_status got = dt_local_run(N, fail_body, &failed_at, st);
        cr_assert_eq(got, DT_ERR_SHAPE, "round %d: %s (%s)", round, dt_status_str(got),
                     dt_last_error());
        for (int i = 1; i < N; i++)
            cr_assert_eq(st[i], DT_OK, "round %d: rank %d: %s", round, i, dt_status_str(st[i]));
    }
}
