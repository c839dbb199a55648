/* The backend-independent part of a rank context: identity, the world communicator and
 * user-created groups (matched across ranks by how often each member list was created). */
#include <stdlib.h>
#include <string.h>

#include "comm/boot/boot.h"
#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "comm/stuck.h"
#include "comm/worker.h"
#include "core/alloc.h"
#include "core/check.h"

struct dt_user_group_count {
    dt_user_group_count *next;
    int n;
    uint64_t created;
    int ranks[];
};

int dt_ctx_rank(const dt_ctx *ctx) { return ctx ? ctx->rank : -1; }
int dt_ctx_size(const dt_ctx *ctx) { return ctx ? ctx->size : -1; }

dt_status dt_ctx_world_comm(dt_ctx *ctx, dt_comm **out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(out);
    *out = ctx->world;
    return DT_OK;
}

dt_status dt_ctx_comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                             dt_comm **comm_out) {
    return ctx->backend->comm_create(ctx, key, members, n, comm_out);
}

dt_status dt_ctx_init_common(dt_ctx *ctx) {
    int debug = 0;
    DT_CHECK(dt_boot_env_flag("DT_DEBUG_COLLECTIVES", 0, &debug));
    ctx->check_collectives = debug && !ctx->backend->checks_collectives;
    DT_CHECK(dt_check_interval_ns(ctx->size, &ctx->check_ns));
    ctx->arena = dt_host_arena_create(); /* NULL: the shared lists serve this rank */
    ctx->flight = calloc(1, sizeof *ctx->flight);
    if (!ctx->flight) return dt_error(DT_ERR_NOMEM, "rank %d: out of memory", ctx->rank);
    if (pthread_mutex_init(&ctx->stats_mu, NULL) != 0)
        return dt_error(DT_ERR_SYSTEM, "rank %d: pthread_mutex_init failed", ctx->rank);
    return DT_OK;
}

void dt_ctx_fini_common(dt_ctx *ctx) {
    dt_worker_destroy(ctx->worker);
    ctx->worker = NULL;
    while (ctx->user_groups) {
        dt_user_group_count *next = ctx->user_groups->next;
        free(ctx->user_groups);
        ctx->user_groups = next;
    }
    dt_trace_destroy(ctx->trace);
    ctx->trace = NULL;
    dt_ctx_device_fini(ctx);
    free(ctx->flight);
    ctx->flight = NULL;
    pthread_mutex_destroy(&ctx->stats_mu);
    dt_host_arena_close(ctx->arena); /* its thread unbound it (backends bind around the rank) */
    ctx->arena = NULL;
}

static const char *const coll_names[] = {
    [DT_COLL_ALL_REDUCE] = "all_reduce", [DT_COLL_ALL_GATHER] = "all_gather",
    [DT_COLL_REDUCE_SCATTER] = "reduce_scatter", [DT_COLL_ALL_TO_ALL] = "all_to_all",
    [DT_COLL_BROADCAST] = "broadcast", [DT_COLL_SEND] = "send", [DT_COLL_RECV] = "recv",
    [DT_COLL_BARRIER] = "barrier",
};
_Static_assert(sizeof coll_names / sizeof coll_names[0] == DT_COLL_KIND_COUNT,
               "collective name table incomplete");

const char *dt_coll_kind_name(dt_coll_kind kind) {
    return (unsigned)kind < DT_COLL_KIND_COUNT ? coll_names[kind] : "?";
}

/* The collective as a trace event: on the comm thread's lane when that thread ran it, with
 * what the issuer said of it (dt_trace_coll_tls: its input's producer and the placements). */
static void trace_coll(dt_comm *comm, dt_coll_kind kind, size_t bytes_in, size_t bytes_out,
                       double t0_us) {
    dt_ctx *ctx = comm->ctx;
    int p2p = kind == DT_COLL_SEND || kind == DT_COLL_RECV;
    dt_trace_coll_site site = dt_trace_coll_tls;
    /* Collectives match across members by (comm, seq): fp.seq counts them from 1 alike on
     * every member; point-to-point calls pair no group and count apart. */
    dt_trace_args a = {.deps = &site.input, .ndeps = site.input > 0, .op = dt_comm_caller_tls,
                       .module = dt_comm_module_tls, .kind = dt_coll_kind_name(kind),
                       .group = comm->label, .from = site.from, .to = site.to,
                       .group_size = comm->size, .peer = -1, .bytes_in = bytes_in,
                       .bytes_out = bytes_out, .seq = p2p ? comm->p2p_traced++ : comm->fp.seq - 1,
                       .comm = comm->gid};
    dt_lane lane = dt_worker_is_current(ctx->worker) ? DT_LANE_COMM_THREAD : DT_LANE_COMM;
    dt_trace_add_args(ctx->trace, lane, a.kind, t0_us, &a, "group %s of %d, %zu B in, %zu B out",
                      comm->label, comm->size, bytes_in, bytes_out);
}

void dt_comm_count(dt_comm *comm, dt_coll_kind kind, size_t bytes_in, size_t bytes_out,
                   double t0_us) {
    dt_ctx *ctx = comm->ctx;
    double now = dt_now_us(), dt = now - t0_us;
    dt_flight_end(comm, now);
    pthread_mutex_lock(&ctx->stats_mu);
    dt_comm_stats *s = &ctx->stats;
    s->calls[kind]++;
    s->bytes_in[kind] += bytes_in;
    s->bytes_out[kind] += bytes_out;
    s->time_us[kind] += dt;
    int i = 0;
    while (i < s->nentries &&
           !(s->entries[i].kind == kind && s->entries[i].group_size == comm->size &&
             !strcmp(s->entries[i].group, comm->label)))
        i++;
    if (i == s->nentries && i < DT_COMM_STATS_MAX) {
        s->entries[s->nentries] = (dt_comm_stats_entry){.kind = kind, .group_size = comm->size};
        memcpy(s->entries[s->nentries++].group, comm->label, sizeof comm->label);
    }
    if (i < s->nentries) {
        s->entries[i].calls++;
        s->entries[i].bytes_in += bytes_in;
        s->entries[i].bytes_out += bytes_out;
        s->entries[i].time_us += dt;
    }
    pthread_mutex_unlock(&ctx->stats_mu);
    if (ctx->observer) {
        dt_comm_event e = {.kind = kind, .group = comm->label, .group_size = comm->size,
                           .bytes_in = bytes_in, .bytes_out = bytes_out,
                           .op = dt_comm_caller_tls, .module = dt_comm_module_tls,
                           .backward = dt_comm_backward_tls};
        ctx->observer(ctx->observer_user, &e);
    }
    if (ctx->trace) trace_coll(comm, kind, bytes_in, bytes_out, t0_us);
}

dt_status dt_comm_stats_get(dt_ctx *ctx, dt_comm_stats *out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(out);
    pthread_mutex_lock(&ctx->stats_mu);
    *out = ctx->stats;
    pthread_mutex_unlock(&ctx->stats_mu);
    return DT_OK;
}

dt_status dt_comm_set_observer(dt_ctx *ctx, dt_comm_observer_fn fn, void *user) {
    DT_ARG_NOT_NULL(ctx);
    ctx->observer = fn, ctx->observer_user = user;
    return DT_OK;
}

dt_status dt_comm_stats_reset(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    pthread_mutex_lock(&ctx->stats_mu);
    ctx->stats = (dt_comm_stats){0};
    pthread_mutex_unlock(&ctx->stats_mu);
    return DT_OK;
}

/* How many times this rank created a group over exactly these ranks, counting this one. */
static dt_status next_user_key(dt_ctx *ctx, const int *ranks, int n, uint64_t *seq_out) {
    dt_user_group_count *g = ctx->user_groups;
    for (; g; g = g->next)
        if (g->n == n && memcmp(g->ranks, ranks, sizeof(int) * (size_t)n) == 0) break;
    if (!g) {
        g = calloc(1, sizeof *g + sizeof(int) * (size_t)n);
        if (!g) return dt_error(DT_ERR_NOMEM, "dt_comm_create: out of memory");
        g->n = n;
        memcpy(g->ranks, ranks, sizeof(int) * (size_t)n);
        g->next = ctx->user_groups;
        ctx->user_groups = g;
    }
    *seq_out = g->created++;
    return DT_OK;
}

dt_status dt_comm_create(dt_ctx *ctx, const int *ranks, int n, dt_comm **out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(ranks);
    DT_ARG_NOT_NULL(out);
    DT_ARG(n >= 1 && n <= ctx->size, "dt_comm_create: argument n = %d is not in [1, %d]", n,
           ctx->size);
    int self = 0;
    for (int i = 0; i < n; i++) {
        DT_ARG(ranks[i] >= 0 && ranks[i] < ctx->size,
               "dt_comm_create: ranks[%d] = %d is not a rank of the world of %d", i, ranks[i],
               ctx->size);
        for (int j = 0; j < i; j++)
            DT_ARG(ranks[j] != ranks[i], "dt_comm_create: rank %d appears twice in ranks (at %d "
                                         "and %d)", ranks[i], j, i);
        self |= ranks[i] == ctx->rank;
    }
    DT_ARG(self, "dt_comm_create: the calling rank %d is not in ranks", ctx->rank);
    uint64_t seq = 0;
    DT_CHECK(next_user_key(ctx, ranks, n, &seq));
    uint64_t key[2] = {DT_COMM_KEY(DT_KEY_USER, seq), 0};
    return dt_ctx_comm_create(ctx, key, ranks, n, out);
}
