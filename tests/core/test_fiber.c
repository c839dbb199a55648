/* Ranks as fibers (core/fiber.h): every fiber runs once, on the thread it was given; a fiber
 * that waits lets the others of its thread run (a token passed round a ring of fibers on one
 * thread would otherwise never move); fiber-local variables keep each fiber's value across
 * switches and give the thread its own back; a deadline ends a wait nobody wakes; a fiber that
 * never waits still lets the others run at its turns (dt_fiber_turn); a spawned
 * fiber runs beside its parent until joined; and dt_local_run runs ranks that outnumber the
 * cores as fibers unless DT_LOCAL_FIBERS=0 says otherwise. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "core/fiber.h"
#include "dtensor/comm.h"
#include "dtensor/runtime.h"

static int64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ---- every fiber once, on its thread ----------------------------------------------------- */

typedef struct {
    int n;
    atomic_int ran[64];
    pthread_t thread[64];
} once_log;

static void note_once(void *arg, int i) {
    once_log *l = arg;
    atomic_fetch_add(&l->ran[i], 1);
    l->thread[i] = pthread_self();
    cr_assert_not_null(dt_fiber_self(), "fiber %d: dt_fiber_self is NULL", i);
}

Test(fiber, every_fiber_runs_once_on_its_thread) {
    const int shapes[][2] = {{1, 1}, {5, 1}, {6, 2}, {7, 3}, {2, 4}, {64, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        once_log l = {.n = shapes[s][0]};
        const int threads = shapes[s][1];
        cr_assert_eq(dt_fibers_run(l.n, threads, note_once, &l), DT_OK, "%s", dt_last_error());
        const int used = threads < l.n ? threads : l.n;
        for (int i = 0; i < l.n; i++) {
            cr_assert_eq(atomic_load(&l.ran[i]), 1, "n %d threads %d: fiber %d ran %d times",
                         l.n, threads, i, atomic_load(&l.ran[i]));
            for (int j = 0; j < i; j++) /* fiber k on thread k * used / n */
                cr_assert_eq(pthread_equal(l.thread[i], l.thread[j]) != 0,
                             i * used / l.n == j * used / l.n,
                             "n %d threads %d: fibers %d and %d", l.n, threads, i, j);
        }
    }
    cr_assert_null(dt_fiber_self(), "the caller is a fiber after dt_fibers_run");
}

Test(fiber, bad_arguments_are_named) {
    cr_assert_eq(dt_fibers_run(0, 1, note_once, NULL), DT_ERR_ARG);
    cr_assert(strstr(dt_last_error(), "n = 0"), "%s", dt_last_error());
    cr_assert_eq(dt_fibers_run(2, 0, note_once, NULL), DT_ERR_ARG);
    cr_assert(strstr(dt_last_error(), "threads = 0"), "%s", dt_last_error());
    dt_fiber *f;
    cr_assert_eq(dt_fiber_spawn(NULL, NULL, &f), DT_ERR_ARG, "spawn outside a fiber");
    cr_assert(strstr(dt_last_error(), "not a fiber"), "%s", dt_last_error());
}

/* ---- a token round a ring: waits switch ------------------------------------------------- */

#define LAPS 500

typedef struct {
    int n;
    _Atomic uint32_t token; /* whose turn: lap * n + fiber */
    atomic_int out_of_turn;
} ring;

static void pass_token(void *arg, int i) {
    ring *r = arg;
    for (int lap = 0; lap < LAPS; lap++) {
        const uint32_t mine = (uint32_t)(lap * r->n + i);
        for (uint32_t v; (v = atomic_load(&r->token)) != mine;) {
            if (v > mine) atomic_fetch_add(&r->out_of_turn, 1);
            dt_wait_word(&r->token, v, 0);
        }
        atomic_store(&r->token, mine + 1);
        dt_wake_word(&r->token);
    }
}

Test(fiber, a_waiting_fiber_lets_the_others_run, .timeout = 60) {
    const int shapes[][2] = {{2, 1}, {5, 1}, {6, 2}, {7, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        ring r = {.n = shapes[s][0]};
        cr_assert_eq(dt_fibers_run(r.n, shapes[s][1], pass_token, &r), DT_OK);
        cr_assert_eq(atomic_load(&r.token), (uint32_t)(LAPS * r.n), "n %d threads %d: token %u",
                     r.n, shapes[s][1], atomic_load(&r.token));
        cr_assert_eq(atomic_load(&r.out_of_turn), 0);
    }
}

/* ---- fiber-local values ------------------------------------------------------------------ */

static _Thread_local int mine;
static _Thread_local char label[40];
DT_FIBER_LOCAL(mine)
DT_FIBER_LOCAL(label)

typedef struct {
    int n;
    _Atomic uint32_t arrived; /* a barrier: every fiber sets its values, then waits for all */
    atomic_int wrong;
} locals_run;

static void keep_locals(void *arg, int i) {
    locals_run *l = arg;
    if (mine != 0 || label[0] != '\0') atomic_fetch_add(&l->wrong, 1); /* starts zeroed */
    for (int round = 0; round < 20; round++) {
        mine = 1000 * round + i;
        snprintf(label, sizeof label, "fiber %d round %d", i, round);
        atomic_fetch_add(&l->arrived, 1);
        dt_wake_word(&l->arrived);
        const uint32_t all = (uint32_t)((round + 1) * l->n);
        for (uint32_t v; (v = atomic_load(&l->arrived)) < all;) dt_wait_word(&l->arrived, v, 0);
        char want[40];
        snprintf(want, sizeof want, "fiber %d round %d", i, round);
        if (mine != 1000 * round + i || strcmp(label, want) != 0) atomic_fetch_add(&l->wrong, 1);
    }
}

Test(fiber, fiber_locals_follow_the_fiber, .timeout = 60) {
    mine = -7;
    snprintf(label, sizeof label, "the caller's");
    locals_run l = {.n = 6};
    cr_assert_eq(dt_fibers_run(l.n, 2, keep_locals, &l), DT_OK);
    cr_assert_eq(atomic_load(&l.wrong), 0, "%d fiber-local values were another fiber's",
                 atomic_load(&l.wrong));
    cr_assert_eq(mine, -7, "the caller's value became %d", mine);
    cr_assert_str_eq(label, "the caller's");
}

/* ---- deadlines ----------------------------------------------------------------------------- */

typedef struct {
    _Atomic uint32_t never; /* nobody stores it */
    _Atomic uint32_t spins; /* the other fiber's progress while the first one waits */
    atomic_llong waited_ns;
    atomic_int done;
} deadline_run;

static void wait_with_deadline(void *arg, int i) {
    deadline_run *d = arg;
    if (i == 0) {
        const int64_t t0 = mono_ns();
        dt_wait_word(&d->never, 0, t0 + 30 * 1000000);
        atomic_store(&d->waited_ns, mono_ns() - t0);
        atomic_store(&d->done, 1);
        dt_wake_word(&d->spins);
    } else { /* keeps yielding its turn until fiber 0 is back */
        while (!atomic_load(&d->done)) {
            atomic_fetch_add(&d->spins, 1);
            dt_wait_word(&d->spins, atomic_load(&d->spins) - 1, 0); /* returns at once */
        }
    }
}

Test(fiber, a_deadline_ends_a_wait_nobody_wakes, .timeout = 30) {
    for (int threads = 1; threads <= 2; threads++) {
        deadline_run d = {0};
        cr_assert_eq(dt_fibers_run(2, threads, wait_with_deadline, &d), DT_OK);
        const long long w = atomic_load(&d.waited_ns);
        cr_assert(w >= 30 * 1000000, "threads %d: the wait returned after %lld ns", threads, w);
    }
    /* An ordinary thread's wait: a futex with a timeout. */
    _Atomic uint32_t never = 0;
    const int64_t t0 = mono_ns();
    while (mono_ns() - t0 < 20 * 1000000) dt_wait_word(&never, 0, t0 + 20 * 1000000);
    cr_assert(mono_ns() - t0 >= 20 * 1000000);
}

/* ---- turns ------------------------------------------------------------------------------ */

typedef struct {
    atomic_int other_ran;
    atomic_int saw_it;
} turns;

/* Fiber 0 never waits: it only calls dt_fiber_turn, for up to 2 s, until fiber 1 (on the
 * same thread) has run. */
static void take_turns(void *arg, int i) {
    turns *t = arg;
    if (i == 1) {
        atomic_store(&t->other_ran, 1);
        return;
    }
    const int64_t t0 = mono_ns();
    while (!atomic_load(&t->other_ran) && mono_ns() - t0 < 2000000000LL) dt_fiber_turn();
    atomic_store(&t->saw_it, atomic_load(&t->other_ran));
}

Test(fiber, a_fiber_that_never_waits_takes_turns, .timeout = 30) {
    turns t = {0};
    cr_assert_eq(dt_fibers_run(2, 1, take_turns, &t), DT_OK);
    cr_assert(atomic_load(&t.saw_it), "the other fiber never ran within 2 s of turns");
    dt_fiber_turn(); /* nothing on an ordinary thread */
}

/* ---- spawn and join -------------------------------------------------------------------- */

typedef struct {
    _Atomic uint32_t ping, pong;
} pair;

static void child(void *arg) {
    pair *p = arg;
    for (uint32_t k = 1; k <= 100; k++) {
        while (atomic_load(&p->ping) < k) dt_wait_word(&p->ping, k - 1, 0);
        atomic_store(&p->pong, k);
        dt_wake_word(&p->pong);
    }
}

static void parent(void *arg, int i) {
    pair *p = &((pair *)arg)[i];
    dt_fiber *f;
    cr_assert_eq(dt_fiber_spawn(child, p, &f), DT_OK, "%s", dt_last_error());
    for (uint32_t k = 1; k <= 100; k++) {
        atomic_store(&p->ping, k);
        dt_wake_word(&p->ping);
        while (atomic_load(&p->pong) < k) dt_wait_word(&p->pong, k - 1, 0);
    }
    dt_fiber_join(f);
}

Test(fiber, a_spawned_fiber_runs_beside_its_parent, .timeout = 30) {
    pair p[3] = {0};
    cr_assert_eq(dt_fibers_run(3, 1, parent, p), DT_OK);
    for (int i = 0; i < 3; i++) cr_assert_eq(atomic_load(&p[i].pong), 100);
}

/* ---- dt_local_run ------------------------------------------------------------------------ */

typedef struct {
    atomic_int fibers;
} rank_log;

static dt_status sum_ranks(dt_ctx *ctx, void *arg) {
    rank_log *l = arg;
    if (dt_fiber_self()) atomic_fetch_add(&l->fibers, 1);
    int64_t v = ctx->rank + 1, sum = 0;
    for (int k = 0; k < 50; k++) { /* on the rank, then on its communication thread */
        dt_request *req = NULL;
        dt_status st = k % 2 ? dt_all_reduce(ctx->world, &v, &sum, 1, DT_I64, DT_REDUCE_SUM)
                             : dt_all_reduce_start(ctx->world, &v, &sum, 1, DT_I64,
                                                   DT_REDUCE_SUM, &req);
        if (st == DT_OK && req) st = dt_request_wait(req, NULL);
        if (st != DT_OK) return st;
        if (sum != (int64_t)ctx->size * (ctx->size + 1) / 2)
            return dt_error(DT_ERR_COMM, "rank %d: sum %lld", ctx->rank, (long long)sum);
    }
    return DT_OK;
}

/* On one core, so that 3 ranks outnumber the cores on any machine. */
static void one_core(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            CPU_ZERO(&set);
            CPU_SET(c, &set);
            break;
        }
    cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0);
}

Test(fiber, local_ranks_outnumbering_the_cores_are_fibers, .timeout = 60) {
    one_core();
    rank_log l = {0};
    cr_assert_eq(dt_local_run(3, sum_ranks, &l, NULL), DT_OK, "%s", dt_last_error());
    cr_assert_eq(atomic_load(&l.fibers), 3);
    setenv("DT_LOCAL_FIBERS", "0", 1);
    l = (rank_log){0};
    cr_assert_eq(dt_local_run(3, sum_ranks, &l, NULL), DT_OK, "%s", dt_last_error());
    cr_assert_eq(atomic_load(&l.fibers), 0, "DT_LOCAL_FIBERS=0 ran fibers");
    setenv("DT_LOCAL_FIBERS", "yes", 1);
    cr_assert_eq(dt_local_run(3, sum_ranks, &l, NULL), DT_ERR_ARG);
    cr_assert(strstr(dt_last_error(), "DT_LOCAL_FIBERS"), "%s", dt_last_error());
    unsetenv("DT_LOCAL_FIBERS");
}
