/* The local runtime: starts one thread per rank (or, when the ranks outnumber the cores, one
 * per core that runs its ranks as fibers: core/fiber.h), keeps the registry of groups that ranks
 * share, and turns a rank's failure or early return into errors for the ranks waiting on it. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/boot/boot.h"
#include "comm/host_load.h"
#include "comm/local/local_impl.h"
#include "comm/worker.h"
#include "core/alloc.h"
#include "core/check.h"
#include "core/fiber.h"
#include "core/pool.h"
#include "core/ranks.h"
#include "core/spin.h"
#include "dtensor/trace.h"

typedef struct lw_rank {
    dt_ctx ctx;
    lw_world *world;
    dt_spmd_fn fn;
    void *arg;
    pthread_t thread;
    dt_status status;
} lw_rank;

static int group_has(const lw_group *g, int world_rank) {
    for (int i = 0; i < g->n; i++)
        if (g->members[i] == world_rank) return 1;
    return 0;
}

static void group_free(lw_group *g) {
    pthread_mutex_destroy(&g->mu);
    free(g->members);
    free(g->arrived_at);
    free(g->fps);
    free(g->slots);
    free(g->flags);
    free(g->p2p);
    free(g);
}

/* Finds or makes the group for (key, members); call with w->mu held. */
static lw_group *group_get(lw_world *w, const uint64_t key[2], const int *members, int n) {
    for (lw_group *g = w->groups; g; g = g->next)
        if (g->key[0] == key[0] && g->key[1] == key[1] && g->n == n &&
            memcmp(g->members, members, sizeof(int) * (size_t)n) == 0)
            return g;
    const size_t size = (sizeof(lw_group) + 63) & ~(size_t)63; /* its futex words' lines */
    lw_group *g = aligned_alloc(64, size);
    if (!g) return NULL;
    memset(g, 0, size);
    g->members = malloc(sizeof(int) * (size_t)n);
    g->arrived_at = calloc((size_t)n, sizeof *g->arrived_at);
    g->fps = calloc((size_t)n, sizeof *g->fps);
    g->slots = calloc((size_t)n, sizeof *g->slots);
    g->p2p = calloc((size_t)n * (size_t)n, sizeof *g->p2p);
    g->flags = aligned_alloc(_Alignof(lw_flag), sizeof(lw_flag) * (size_t)n);
    if (g->flags) memset(g->flags, 0, sizeof(lw_flag) * (size_t)n);
    if (!(g->members && g->arrived_at && g->fps && g->slots && g->p2p && g->flags)) {
        free(g->members);
        free(g->arrived_at);
        free(g->fps);
        free(g->slots);
        free(g->flags);
        free(g->p2p);
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    g->odd = g->verdict.a = -1;
    memcpy(g->key, key, sizeof g->key);
    memcpy(g->members, members, sizeof(int) * (size_t)n);
    g->n = n;
    for (int i = 0; i < n; i++) g->exited += atomic_load(&w->exited[members[i]]) != 0;
    g->next = w->groups;
    w->groups = g;
    return g;
}

static dt_status comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                             dt_comm **comm_out) {
    lw_world *w = ctx->backend_state;
    lw_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", n);
    dt_status st = dt_comm_init_base(&c->base, &lw_comm_ops, ctx, key, members, n);
    if (st != DT_OK) {
        free(c);
        return st;
    }
    pthread_mutex_lock(&w->mu);
    lw_group *g = group_get(w, key, members, n);
    if (g) g->handles++;
    pthread_mutex_unlock(&w->mu);
    if (!g) {
        dt_comm_free_base(&c->base);
        free(c);
        return dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", n);
    }
    c->world = w;
    c->group = g;
    *comm_out = &c->base;
    return DT_OK;
}

void lw_comm_destroy(dt_comm *base) {
    lw_comm *c = (lw_comm *)base;
    lw_world *w = c->world;
    pthread_mutex_lock(&w->mu);
    if (--c->group->handles == 0) {
        lw_group **pp = &w->groups;
        while (*pp != c->group) pp = &(*pp)->next;
        *pp = c->group->next;
        group_free(c->group);
    }
    pthread_mutex_unlock(&w->mu);
    free(c->scratch);
    dt_comm_free_base(base);
    free(c);
}

static const dt_backend_ops lw_backend = {
    .name = "local", .checks_collectives = 1, .comm_create = comm_create};

/* Wakes every waiter of the groups that rank belongs to (all groups when rank < 0). */
static void wake_groups(lw_world *w, int rank) {
    for (lw_group *g = w->groups; g; g = g->next) {
        if (rank >= 0 && !group_has(g, rank)) continue;
        pthread_mutex_lock(&g->mu);
        if (rank >= 0) g->exited++;
        lw_notify(g);
        pthread_mutex_unlock(&g->mu);
        lw_group_wake(g);
    }
}

/* The world's first failure; call with w->mu held. */
static void record_failure(lw_world *w, int rank, dt_status st, const char *msg) {
    if (atomic_load(&w->aborted)) return;
    w->failed_rank = rank;
    w->failed_status = st;
    snprintf(w->failed_msg, sizeof w->failed_msg, "%s", msg);
    atomic_store(&w->aborted, 1);
}

void lw_abort(lw_world *w, int rank, dt_status st, const char *msg) {
    pthread_mutex_lock(&w->mu);
    record_failure(w, rank, st, msg);
    wake_groups(w, -1);
    pthread_mutex_unlock(&w->mu);
}

static void rank_finished(lw_world *w, int rank, dt_status st) {
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->exited[rank], ++w->nexited);
    if (st != DT_OK) record_failure(w, rank, st, dt_last_error());
    wake_groups(w, rank);
    if (st != DT_OK) wake_groups(w, -1);
    pthread_mutex_unlock(&w->mu);
}

/* Other processes' use of the cores, for the waits of ranks that fit on them (lw_spin). */
static dt_host_load host_load = DT_HOST_LOAD_INIT(200 * 1000 * 1000, dt_process_cpu_ns, NULL);

int lw_host_shared(void) {
    return dt_host_load_shared(&host_load);
}

static void *rank_main(void *p) {
    lw_rank *r = p;
    /* This rank's share of the cores for its kernels' intra-op threads; a pool that could not
     * start every thread runs with fewer, which changes no result. */
    if (dt_pool_set_threads(dt_pool_share(r->world->size)) != DT_OK) dt_error(DT_OK, "%s", "");
    dt_host_arena_bind(r->ctx.arena); /* the rank's temporaries reuse its own blocks */
    dt_status st = r->fn(&r->ctx, r->arg);
    if (st != DT_OK && dt_last_error()[0] == '\0')
        dt_error(st, "the SPMD function returned %s", dt_status_str(st));
    r->status = st;
    /* The communication thread finishes what was queued before the rank counts as gone; a
     * failed rank aborts first so that queued work cannot wait on it forever. */
    if (st != DT_OK) rank_finished(r->world, r->ctx.rank, st);
    dt_worker_destroy(r->ctx.worker);
    r->ctx.worker = NULL;
    const char *prefix = getenv("DT_TRACE");
    if (prefix && *prefix) {
        char path[4096];
        snprintf(path, sizeof path, "%s.rank%d.json", prefix, r->ctx.rank);
        if (dt_trace_write(&r->ctx, path) != DT_OK)
            fprintf(stderr, "dtensor: DT_TRACE: %s\n", dt_last_error());
    }
    if (st == DT_OK) rank_finished(r->world, r->ctx.rank, st);
    dt_pool_release();
    dt_host_arena_bind(NULL); /* ctx_fini closes it on the joining thread */
    return NULL;
}

static void rank_fiber(void *ranks, int i) { rank_main(&((lw_rank *)ranks)[i]); }

static dt_status ctx_init(lw_rank *r, lw_world *w, int rank) {
    r->world = w;
    r->ctx = (dt_ctx){.rank = rank, .size = w->size, .backend = &lw_backend, .backend_state = w};
    DT_CHECK(dt_ctx_init_common(&r->ctx));
    const char *trace = getenv("DT_TRACE");
    if (trace && *trace) DT_CHECK(dt_trace_start(&r->ctx));
    int *all = malloc(sizeof(int) * (size_t)w->size);
    if (!all) return dt_error(DT_ERR_NOMEM, "dt_local_run: out of memory");
    for (int i = 0; i < w->size; i++) all[i] = i;
    uint64_t key[2] = {DT_COMM_KEY(DT_KEY_WORLD, 0), 0};
    dt_status st = comm_create(&r->ctx, key, all, w->size, &r->ctx.world);
    free(all);
    if (st == DT_OK) snprintf(r->ctx.world->label, sizeof r->ctx.world->label, "world");
    return st;
}

static void ctx_fini(lw_rank *r) {
    if (r->ctx.world) lw_comm_destroy(r->ctx.world);
    dt_ctx_fini_common(&r->ctx);
}

/* With DT_TRACE=prefix, the ranks' files become prefix.json. */
static void merge_traces(int nranks) {
    const char *prefix = getenv("DT_TRACE");
    if (!prefix || !*prefix || nranks < 1) return;
    char **paths = calloc((size_t)nranks, sizeof *paths), out[4096];
    for (int i = 0; paths && i < nranks; i++) {
        paths[i] = malloc(4096);
        if (paths[i]) snprintf(paths[i], 4096, "%s.rank%d.json", prefix, i);
    }
    snprintf(out, sizeof out, "%s.json", prefix);
    char saved[512]; /* the run's own message must survive the merge */
    snprintf(saved, sizeof saved, "%s", dt_last_error());
    if (paths && dt_trace_merge((const char *const *)paths, nranks, out) == DT_OK)
        for (int i = 0; i < nranks; i++) remove(paths[i]);
    else
        fprintf(stderr, "dtensor: DT_TRACE: %s\n", dt_last_error());
    dt_error(DT_OK, "%s", saved);
    for (int i = 0; paths && i < nranks; i++) free(paths[i]);
    free(paths);
}

dt_status dt_local_run(int nranks, dt_spmd_fn fn, void *arg, dt_status *out) {
    DT_ARG(nranks >= 1 && nranks <= DT_LOCAL_MAX_RANKS,
           "dt_local_run: argument nranks = %d is not in [1, %d]", nranks, DT_LOCAL_MAX_RANKS);
    DT_ARG_NOT_NULL(fn);
    int64_t timeout_ns;
    DT_CHECK(dt_boot_env_timeout_ns(&timeout_ns));
    int env_threads; /* a bad DT_NUM_THREADS fails the run before any rank starts */
    DT_CHECK(dt_pool_env_threads(&env_threads));
    int fibers; /* ranks that outnumber the cores take turns on them (core/fiber.h) */
    DT_CHECK(dt_boot_env_flag("DT_LOCAL_FIBERS", 1, &fibers));
    lw_world *w = calloc(1, sizeof *w);
    lw_rank *ranks = calloc((size_t)nranks, sizeof *ranks);
    atomic_int *exited = calloc((size_t)nranks, sizeof *exited);
    _Atomic int64_t *timeouts = calloc((size_t)nranks, sizeof *timeouts);
    lw_where *where = calloc((size_t)nranks, sizeof *where);
    dt_status st = DT_OK;
    int initialised = 0, started = 0;
    if (!w || !ranks || !exited || !timeouts || !where) {
        st = dt_error(DT_ERR_NOMEM, "dt_local_run: out of memory for %d ranks", nranks);
        goto done;
    }
    w->size = nranks;
    w->spin = nranks <= dt_usable_cores() ? LW_SPIN : 0;
    if (w->spin) lw_host_shared(); /* starts the window, if none is running */
    w->exited = exited;
    w->timeout_ns = timeouts;
    w->where = where;
    for (int i = 0; i < nranks; i++) {
        atomic_store(&timeouts[i], timeout_ns);
        pthread_mutex_init(&where[i].mu, NULL);
    }
    pthread_mutex_init(&w->mu, NULL);
    for (; initialised < nranks; initialised++) {
        DT_CHECK_GOTO(ctx_init(&ranks[initialised], w, initialised), st, stop);
        ranks[initialised].fn = fn;
        ranks[initialised].arg = arg;
    }
    dt_process_ranks_add(nranks);
    const int cores = dt_usable_cores();
    if (fibers && nranks > cores) {
        if (dt_fibers_run(nranks, cores, rank_fiber, ranks) == DT_OK) {
            started = nranks;
            goto joined;
        }
        dt_error(DT_OK, "%s", ""); /* nothing ran: threads instead */
    }
    for (; started < nranks; started++) {
        if (pthread_create(&ranks[started].thread, NULL, rank_main, &ranks[started]) != 0) {
            st = dt_error(DT_ERR_SYSTEM, "dt_local_run: could not start the thread of rank %d",
                          started);
            break;
        }
    }
stop:
    if (st != DT_OK) /* ranks already running must not wait for the missing ones */
        lw_abort(w, started, st, dt_last_error());
    for (int i = 0; i < started; i++) pthread_join(ranks[i].thread, NULL);
joined:
    if (initialised == nranks) dt_process_ranks_add(-nranks);
    for (int i = 0; i < initialised; i++) ctx_fini(&ranks[i]);
    if (out)
        for (int i = 0; i < nranks; i++)
            out[i] = i < started ? ranks[i].status : st;
    if (st == DT_OK && atomic_load(&w->aborted))
        st = dt_error(w->failed_status, "rank %d: %s", w->failed_rank, w->failed_msg);
    merge_traces(started);
    /* Communicators a rank did not destroy still hold their groups. */
    while (w->groups) {
        lw_group *next = w->groups->next;
        group_free(w->groups);
        w->groups = next;
    }
    for (int i = 0; i < nranks; i++)
        pthread_mutex_destroy(&where[i].mu);
    pthread_mutex_destroy(&w->mu);
    dt_host_cache_trim();
done:
    free(where);
    free(timeouts);
    free(exited);
    free(ranks);
    free(w);
    return st;
}

dt_status dt_local_set_timeout(dt_ctx *ctx, double seconds) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG(seconds >= 0 && seconds < 1e9,
           "dt_local_set_timeout: argument seconds = %g is not in [0, 1e9)", seconds);
    if (ctx->backend != &lw_backend)
        return dt_error(DT_ERR_UNSUPPORTED,
                        "dt_local_set_timeout: the context belongs to the %s runtime, not the "
                        "local one",
                        ctx->backend->name);
    lw_world *w = ctx->backend_state;
    atomic_store(&w->timeout_ns[ctx->rank], (int64_t)(seconds * 1e9));
    return DT_OK;
}
