/* The intra-op pool's mechanics (core/pool.h): every chunk runs exactly once for any item
 * count, grain and thread count; each thread starts at its home share of a job; nested calls
 * run serially; DT_NUM_THREADS is parsed or refused by name; a one-rank process (and a rank of
 * dt_local_run) really runs chunks on more than one thread. Speed is the benchmark's business
 * (bench/bench_pool.c), not this file's. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/pool.h"
#include "core/spin.h"
#include "dtensor/runtime.h"

/* ---- every chunk once ------------------------------------------------------------------- */

typedef struct {
    int64_t n, grain;
    _Atomic int *hits; /* per chunk */
    atomic_int wrong;  /* a range that is not a chunk */
} chunk_log;

static void log_chunk(void *arg, int64_t b, int64_t e) {
    chunk_log *l = arg;
    int64_t g = l->grain < 1 ? 1 : l->grain;
    int64_t want_end = l->n - b > g ? b + g : l->n;
    if (b < 0 || b >= l->n || b % g != 0 || e != want_end) {
        atomic_fetch_add(&l->wrong, 1);
        return;
    }
    atomic_fetch_add(&l->hits[b / g], 1);
}

static void check_once(int64_t n, int64_t grain) {
    int64_t chunks = dt_parallel_chunks(n, grain);
    chunk_log l = {.n = n, .grain = grain, .hits = calloc((size_t)chunks + 1, sizeof(int))};
    cr_assert(l.hits);
    dt_parallel_for(n, grain, log_chunk, &l);
    cr_assert_eq(atomic_load(&l.wrong), 0, "n %lld grain %lld: a range that is no chunk",
                 (long long)n, (long long)grain);
    for (int64_t c = 0; c < chunks; c++)
        cr_assert_eq(l.hits[c], 1, "n %lld grain %lld threads %d: chunk %lld ran %d times",
                     (long long)n, (long long)grain, dt_parallel_threads(), (long long)c,
                     l.hits[c]);
    free((void *)l.hits);
}

Test(pool, every_chunk_runs_exactly_once) {
    const int64_t ns[] = {0, 1, 2, 3, 7, 64, 1000, 4097, 100003, 1 << 20};
    const int64_t grains[] = {-5, 0, 1, 2, 3, 64, 1000, 4096, 1 << 21};
    for (int t = 1; t <= 4; t++) {
        cr_assert_eq(dt_pool_set_threads(t), DT_OK, "%s", dt_last_error());
        cr_assert_eq(dt_parallel_threads(), t);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
                check_once(ns[i], grains[g]);
        /* many calls in a row: workers that are asleep, spinning or late must each get a
         * job only once */
        for (int k = 0; k < 2000; k++)
            check_once(37 + k % 5, 4);
    }
    dt_pool_release();
}

typedef struct {
    atomic_llong items, calls;
} sum_log;

static void count_items(void *arg, int64_t b, int64_t e) {
    sum_log *s = arg;
    atomic_fetch_add(&s->items, e - b);
    atomic_fetch_add(&s->calls, 1);
}

/* A count far past memory: only the chunk sums can be checked, and they are exact. */
Test(pool, huge_counts) {
    cr_assert_eq(dt_pool_set_threads(3), DT_OK);
    const int64_t n = (int64_t)1 << 42, grain = (int64_t)1 << 36;
    sum_log s = {0};
    dt_parallel_for(n, grain, count_items, &s);
    cr_assert_eq(atomic_load(&s.items), n);
    cr_assert_eq(atomic_load(&s.calls), dt_parallel_chunks(n, grain));
    cr_assert_eq(dt_parallel_chunks(INT64_MAX - 1, (int64_t)1 << 40), ((int64_t)1 << 23));
    /* chunk ends near INT64_MAX must not overflow, pooled or serial */
    check_once(INT64_MAX - 5, (int64_t)1 << 61);
    check_once(INT64_MAX, INT64_MAX / 2);
    cr_assert_eq(dt_pool_set_threads(1), DT_OK);
    check_once(INT64_MAX - 5, (int64_t)1 << 61);
    dt_pool_release();
}

/* ---- nesting ---------------------------------------------------------------------------- */

typedef struct {
    atomic_int bad, inner_chunks;
} nest_log;

typedef struct {
    nest_log *log;
    pthread_t outer;
} inner_arg;

static void inner_fn(void *arg, int64_t b, int64_t e) {
    inner_arg *a = arg;
    if (!pthread_equal(pthread_self(), a->outer)) atomic_fetch_add(&a->log->bad, 1);
    atomic_fetch_add(&a->log->inner_chunks, (int)(e > b));
}

static void outer_fn(void *arg, int64_t b, int64_t e) {
    (void)b, (void)e;
    nest_log *l = arg;
    if (dt_parallel_threads() != 1) atomic_fetch_add(&l->bad, 1);
    inner_arg a = {.log = l, .outer = pthread_self()};
    dt_parallel_for(10, 1, inner_fn, &a); /* serial: every inner chunk on this thread */
}

Test(pool, nested_calls_run_serially) {
    cr_assert_eq(dt_pool_set_threads(4), DT_OK);
    nest_log l = {0};
    dt_parallel_for(16, 1, outer_fn, &l);
    cr_assert_eq(atomic_load(&l.bad), 0);
    cr_assert_eq(atomic_load(&l.inner_chunks), 16 * 10);
    cr_assert_eq(dt_parallel_threads(), 4, "the caller's pool is back after the job");
    dt_pool_release();
}

/* ---- homes ------------------------------------------------------------------------------ */

/* Each thread's first chunk of a job waits until every thread has started one: no thread can
 * take a second chunk before all have taken their first, so the first chunks show where each
 * thread began. */
typedef struct {
    int job, threads;
    atomic_int started, timed_out;
    _Atomic int64_t first[8]; /* in order of arrival */
} home_log;

static _Thread_local int home_job; /* the job whose first chunk this thread ran */

static void note_first(void *arg, int64_t b, int64_t e) {
    (void)e;
    home_log *l = arg;
    if (home_job == l->job) return;
    home_job = l->job;
    int i = atomic_fetch_add(&l->started, 1);
    if (i < 8) atomic_store(&l->first[i], b);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&l->started) < l->threads) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 20) { /* a worker that never came: fail, do not hang */
            atomic_store(&l->timed_out, 1);
            return;
        }
        sched_yield();
    }
}

/* Thread i (the caller 0) starts at the i-th share of the chunks, not at the next free one: a
 * kernel meets the rows its thread handled in the kernel before. */
Test(pool, each_thread_starts_at_its_home) {
    for (int t = 2; t <= 4; t++) {
        cr_assert_eq(dt_pool_set_threads(t), DT_OK, "%s", dt_last_error());
        for (int job = 1; job <= 20; job++) {
            home_log l = {.job = t * 100 + job, .threads = t};
            dt_parallel_for(4 * t, 1, note_first, &l); /* four chunks a home */
            cr_assert_eq(atomic_load(&l.timed_out), 0, "threads %d: a worker never started", t);
            cr_assert_eq(atomic_load(&l.started), t);
            int seen[8] = {0};
            for (int i = 0; i < t; i++) {
                int64_t c = atomic_load(&l.first[i]);
                cr_assert(c % 4 == 0 && c / 4 < t && !seen[c / 4],
                          "threads %d: a thread began at chunk %lld, not at a home's first", t,
                          (long long)c);
                seen[c / 4] = 1;
            }
        }
    }
    dt_pool_release();
}

/* ---- sizing ----------------------------------------------------------------------------- */

Test(pool, env_threads_parsed) {
    int t = -1;
    unsetenv("DT_NUM_THREADS");
    cr_assert_eq(dt_pool_env_threads(&t), DT_OK);
    cr_assert_eq(t, 0);
    setenv("DT_NUM_THREADS", "", 1);
    cr_assert_eq(dt_pool_env_threads(&t), DT_OK);
    cr_assert_eq(t, 0);
    const char *good[] = {"1", "3", " 7", "12\n", "1024"};
    const int want[] = {1, 3, 7, 12, 1024};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("DT_NUM_THREADS", good[i], 1);
        cr_assert_eq(dt_pool_env_threads(&t), DT_OK, "'%s': %s", good[i], dt_last_error());
        cr_assert_eq(t, want[i], "'%s'", good[i]);
        cr_assert_eq(dt_pool_share(4), want[i], "the variable decides over the cores");
    }
}

Test(pool, env_threads_refused_by_name) {
    const char *bad[] = {"0", "-2", "abc", "2x", "1e3", "1025", "99999999999999999999", "3 4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("DT_NUM_THREADS", bad[i], 1);
        int t = -7;
        cr_assert_eq(dt_pool_env_threads(&t), DT_ERR_ARG, "'%s' accepted", bad[i]);
        cr_assert_eq(t, -7, "the output is set only on success");
        cr_assert(strstr(dt_last_error(), "DT_NUM_THREADS"), "%s", dt_last_error());
        cr_assert(strstr(dt_last_error(), bad[i]), "%s", dt_last_error());
        /* a kernel's lazy start cannot fail: it falls back on the cores */
        int cores = dt_usable_cores();
        cr_assert_eq(dt_pool_share(1), cores);
        cr_assert_eq(dt_pool_share(2 * cores), 1);
    }
    cr_assert_eq(dt_pool_env_threads(NULL), DT_ERR_ARG);
}

Test(pool, set_threads_refuses_bad_counts) {
    cr_assert_eq(dt_pool_set_threads(0), DT_ERR_ARG);
    cr_assert(strstr(dt_last_error(), "n = 0"), "%s", dt_last_error());
    cr_assert_eq(dt_pool_set_threads(DT_POOL_MAX_THREADS + 1), DT_ERR_ARG);
    cr_assert_eq(dt_pool_set_threads(-3), DT_ERR_ARG);
    cr_assert(strstr(dt_last_error(), "n = -3"), "%s", dt_last_error());
}

static dt_status never_called(dt_ctx *ctx, void *arg) {
    (void)ctx;
    *(int *)arg = 1;
    return DT_OK;
}

Test(pool, local_run_refuses_bad_env) {
    setenv("DT_NUM_THREADS", "lots", 1);
    int ran = 0;
    cr_assert_eq(dt_local_run(2, never_called, &ran, NULL), DT_ERR_ARG);
    cr_assert(strstr(dt_last_error(), "DT_NUM_THREADS = 'lots'"), "%s", dt_last_error());
    cr_assert_eq(ran, 0);
}

/* ---- more than one thread, for real ------------------------------------------------------ */

typedef struct {
    pthread_mutex_t mu;
    pthread_t seen[8];
    int nseen, want;
} thread_log;

/* Records its thread, then waits (20 s at most) until `want` distinct threads have run chunks:
 * a caller that could run every chunk alone never returns early, so a second thread must
 * take one. Not a timing test: a slow machine only waits longer. */
static void meet(void *arg, int64_t b, int64_t e) {
    (void)b, (void)e;
    thread_log *l = arg;
    pthread_mutex_lock(&l->mu);
    int known = 0;
    for (int i = 0; i < l->nseen; i++)
        known |= pthread_equal(l->seen[i], pthread_self());
    if (!known && l->nseen < 8) l->seen[l->nseen++] = pthread_self();
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < 20000; i++) {
        pthread_mutex_lock(&l->mu);
        int n = l->nseen;
        pthread_mutex_unlock(&l->mu);
        if (n >= l->want) return;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

static int distinct_threads(int chunks, int want) {
    thread_log l = {.mu = PTHREAD_MUTEX_INITIALIZER, .want = want};
    dt_parallel_for(chunks, 1, meet, &l);
    return l.nseen;
}

/* A thread no runtime sized: its first kernel sizes the pool from DT_NUM_THREADS. */
static void *lazy_thread(void *arg) {
    int *out = arg;
    out[0] = dt_parallel_threads();
    out[1] = distinct_threads(2, 2);
    return NULL; /* the thread's workers stop with it (the sanitizer build sees no leak) */
}

Test(pool, one_rank_process_uses_two_threads) {
    setenv("DT_NUM_THREADS", "2", 1);
    int got[2] = {0, 0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, lazy_thread, got), 0);
    pthread_join(t, NULL);
    cr_assert_eq(got[0], 2);
    cr_assert_eq(got[1], 2, "chunks ran on %d thread(s)", got[1]);
}

static dt_status rank_threads(dt_ctx *ctx, void *arg) {
    (void)ctx;
    int *out = arg;
    out[0] = dt_parallel_threads();
    out[1] = distinct_threads(2, out[0]);
    return DT_OK;
}

Test(pool, local_rank_gets_its_share) {
    setenv("DT_NUM_THREADS", "2", 1);
    int got[2] = {0, 0};
    cr_assert_eq(dt_local_run(1, rank_threads, got, NULL), DT_OK, "%s", dt_last_error());
    cr_assert_eq(got[0], 2);
    cr_assert_eq(got[1], 2, "chunks ran on %d thread(s)", got[1]);
}

static dt_status rank_share(dt_ctx *ctx, void *arg) {
    ((int *)arg)[dt_ctx_rank(ctx)] = dt_parallel_threads();
    return DT_OK;
}

/* Without the variable, the ranks of one process divide the usable cores among them. */
Test(pool, local_ranks_divide_the_cores) {
    unsetenv("DT_NUM_THREADS");
    int cores = dt_usable_cores();
    for (int nranks = 1; nranks <= 4; nranks++) {
        int got[4] = {0};
        cr_assert_eq(dt_local_run(nranks, rank_share, got, NULL), DT_OK, "%s", dt_last_error());
        int want = cores / nranks > 1 ? cores / nranks : 1;
        for (int r = 0; r < nranks; r++)
            cr_assert_eq(got[r], want, "%d ranks, rank %d: %d threads", nranks, r, got[r]);
    }
}

/* A child of fork has none of its parent's workers: it starts a pool of its own, whose threads
 * really run chunks (a pool kept from the parent would post jobs to workers that are not
 * there, and run everything on one thread). */
Test(pool, fork_child_starts_its_own_pool) {
    setenv("DT_NUM_THREADS", "2", 1);
    cr_assert_eq(dt_pool_set_threads(3), DT_OK);
    check_once(1000, 10);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int ok = dt_parallel_threads() == 2; /* DT_NUM_THREADS, not the parent's 3 */
        ok &= distinct_threads(2, 2) == 2;
        dt_pool_release();
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's pool failed");
    dt_pool_release();
}
