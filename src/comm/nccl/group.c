/* Communicators of the NCCL backend. The world's comes from the unique id rank 0 published in
 * the rendezvous. Mesh and user communicators are created lazily, by their members only (a mesh
 * dimension's communicator is made the first time that group uses it), so ncclCommSplit, which
 * every rank of the parent must call, cannot make them: each is its own ncclCommInitRank, over
 * a unique id its first member makes and puts in rank 0's store (comm/boot), where the other
 * members fetch it. Communicators with the same key and members on this rank share one NCCL
 * communicator, as they share one group in the UCX backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl/nccl_impl.h"
#include "core/check.h"

#define FINALIZE_DEFAULT_NS 60000000000LL /* finalize's wait when DT_TIMEOUT_S is 0 */

/* The store key of a group's unique id: what every member derives alike. */
typedef struct id_key {
    char tag[8];
    uint64_t key[2];
    uint64_t hash;
    int32_t n, pad;
} id_key;

static uint64_t members_hash(const int *members, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < n; k++) {
        uint32_t v = (uint32_t)members[k];
        for (int i = 0; i < 4; i++)
            h = (h ^ ((v >> (8 * i)) & 0xffu)) * 0x100000001b3ull;
    }
    return h;
}

static void describe(char *out, size_t cap, const int *members, int n) {
    size_t o = (size_t)snprintf(out, cap, "the communicator of world ranks ");
    for (int i = 0; i < n && o + 16 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, i ? ",%d" : "%d", members[i]);
    if (o + 16 >= cap) snprintf(out + cap - 5, 5, "...");
}

/* Members agree on a unique id: the first makes it, the others fetch it through rank 0. */
static dt_status agree_on_id(nc_world *w, const nc_group *g, const char *what, int64_t deadline,
                             ncclUniqueId *id) {
    if (g->n == 1 || g->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess) return nc_nccl_error(r, NULL, what, "new", g->n);
        if (g->n == 1) return DT_OK;
    }
    id_key k;
    memset(&k, 0, sizeof k);
    memcpy(k.tag, "ncclid", 6);
    k.key[0] = g->key[0];
    k.key[1] = g->key[1];
    k.hash = members_hash(g->members, g->n);
    k.n = g->n;
    dt_status st;
    if (g->rank == 0) {
        st = dt_boot_ctl_put(w->ctl, &k, sizeof k, id, sizeof *id, g->n - 1);
    } else {
        size_t len = 0;
        st = dt_boot_ctl_get(w->ctl, &k, sizeof k, id, sizeof *id, &len, deadline);
        if (st == DT_OK && len != sizeof *id)
            st = dt_error(DT_ERR_COMM, "a unique id of %zu bytes instead of %zu", len, sizeof *id);
    }
    if (st != DT_OK) {
        char prefix[300];
        snprintf(prefix, sizeof prefix, "%s: agreeing on its NCCL unique id (with world rank %d)",
                 what, g->members[0]);
        dt_error_prefix(prefix);
    }
    return st;
}

static dt_status group_init(nc_world *w, nc_group *g, const ncclUniqueId *given, const char *what) {
    int64_t t = given ? w->startup_timeout_ns : atomic_load(&w->timeout_ns);
    int64_t deadline = t > 0 ? dt_boot_now_ns() + t : 0;
    ncclUniqueId id;
    if (given)
        id = *given;
    else
        DT_CHECK(agree_on_id(w, g, what, deadline, &id));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = w->blocking;
    ncclComm_t comm = NULL;
    /* Under nccl_mu although nobody else knows this communicator yet: NCCL's calls on one
     * device must not run in parallel, even on different communicators, and the comm thread
     * may be queueing a collective on another one right now. (Non-blocking: this returns at
     * once, and the wait for the other members below holds no lock.) */
    pthread_mutex_lock(&w->nccl_mu);
    ncclResult_t r = ncclCommInitRankConfig(&comm, g->n, id, g->rank, &cfg);
    pthread_mutex_unlock(&w->nccl_mu);
    dt_status st;
    if (r != ncclSuccess && r != ncclInProgress)
        st = nc_nccl_error(r, comm, what, g->label, g->n);
    else /* not yet in w->groups: only this thread polls it */
        st = nc_settle(w, comm, r, what, g->label, g->n, deadline);
    if (st == DT_OK)
        st = dt_cuda_status(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), what);
    if (st != DT_OK) {
        if (comm) ncclCommAbort(comm); /* no lock: a blocking call may hold it until aborts */
        return st;
    }
    g->comm = comm;
    return DT_OK;
}

static nc_group *group_find(nc_world *w, const uint64_t key[2], const int *members, int n) {
    for (nc_group *g = w->groups; g; g = g->next)
        if (g->key[0] == key[0] && g->key[1] == key[1] && g->n == n &&
            !memcmp(g->members, members, sizeof(int) * (size_t)n))
            return g;
    return NULL;
}

static dt_status group_make(nc_world *w, const uint64_t key[2], const int *members, int n, int rank,
                            const ncclUniqueId *id, nc_group **out) {
    pthread_mutex_lock(&w->nccl_mu);
    nc_group *g = group_find(w, key, members, n);
    if (g) g->refs++;
    pthread_mutex_unlock(&w->nccl_mu);
    if (g) {
        *out = g;
        return DT_OK;
    }
    char what[200];
    describe(what, sizeof what, members, n);
    g = calloc(1, sizeof *g);
    int *m = malloc(sizeof(int) * (size_t)n);
    if (!g || !m) {
        free(g);
        free(m);
        return dt_error(DT_ERR_NOMEM, "%s: out of memory", what);
    }
    memcpy(m, members, sizeof(int) * (size_t)n);
    memcpy(g->key, key, sizeof g->key);
    g->members = m;
    g->n = n;
    g->rank = rank;
    g->refs = 1;
    snprintf(g->label, sizeof g->label, "%s", n == w->size ? "world" : "new");
    dt_status st = group_init(w, g, id, what);
    if (st != DT_OK) {
        free(m);
        free(g);
        return st;
    }
    pthread_mutex_lock(&w->nccl_mu);
    if (atomic_load(&w->comms_aborted)) { /* the world failed while it was being made */
        ncclCommAbort(g->comm);
        g->comm = NULL;
    }
    g->next = w->groups;
    w->groups = g;
    pthread_mutex_unlock(&w->nccl_mu);
    *out = g;
    return DT_OK;
}

dt_status nc_comm_make(nc_world *w, const uint64_t key[2], const int *members, int n,
                       const ncclUniqueId *id, dt_comm **comm_out) {
    if (dt_cuda_current() != w->ctx.dev.cuda) dt_cuda_bind(w->ctx.dev.cuda);
    if (dt_failed(&w->fail)) return nc_aborted_error(w, "communicator creation");
    nc_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", n);
    dt_status st = dt_comm_init_base(&c->base, &nc_comm_ops, &w->ctx, key, members, n);
    if (st != DT_OK) {
        free(c);
        return st;
    }
    pthread_mutex_lock(&w->create_mu);
    st = group_make(w, key, members, n, c->base.rank, id, &c->g);
    pthread_mutex_unlock(&w->create_mu);
    if (st != DT_OK) {
        /* The other members wait for this one in NCCL's init: fail the world, not just here. */
        if (!dt_failed(&w->fail)) nc_fail(w, st, dt_last_error());
        dt_comm_free_base(&c->base);
        free(c);
        return st;
    }
    c->w = w;
    *comm_out = &c->base;
    return DT_OK;
}

dt_status nc_comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                         dt_comm **comm_out) {
    return nc_comm_make(ctx->backend_state, key, members, n, NULL, comm_out);
}

/* Finalizes comm (waiting for NCCL to flush it) and destroys it; aborts it when that fails.
 * comm is no longer listed; its NCCL calls still take nccl_mu (NCCL's calls on one device must
 * not run in parallel), its wait does not. */
static void comm_close(nc_world *w, ncclComm_t comm, const char *label, int n) {
    int64_t t = atomic_load(&w->timeout_ns);
    int64_t deadline = dt_boot_now_ns() + (t > 0 ? t : FINALIZE_DEFAULT_NS);
    pthread_mutex_lock(&w->nccl_mu);
    ncclResult_t r = ncclCommFinalize(comm);
    pthread_mutex_unlock(&w->nccl_mu);
    dt_status st = r == ncclSuccess || r == ncclInProgress
                       ? nc_settle(w, comm, r, "dt_comm_destroy", label, n, deadline)
                       : nc_nccl_error(r, comm, "dt_comm_destroy", label, n);
    pthread_mutex_lock(&w->nccl_mu);
    if (st == DT_OK && (r = ncclCommDestroy(comm)) != ncclSuccess)
        st = nc_nccl_error(r, comm, "dt_comm_destroy", label, n);
    if (st != DT_OK) ncclCommAbort(comm);
    pthread_mutex_unlock(&w->nccl_mu);
    /* NCCL refuses to finalize or destroy a communicator with an asynchronous error (a remote
     * or network error in its last operations, whose results are then undefined): no longer
     * listed, the watchdog never saw it, so it fails the world here instead of vanishing. */
    if (st != DT_OK && !dt_failed(&w->fail)) nc_fail(w, st, dt_last_error());
}

void nc_comm_destroy(dt_comm *base) {
    nc_comm *c = nc(base);
    nc_world *w = c->w;
    nc_group *g = c->g;
    if (dt_cuda_current() != w->ctx.dev.cuda) dt_cuda_bind(w->ctx.dev.cuda);
    pthread_mutex_lock(&w->nccl_mu);
    int last = --g->refs == 0;
    if (last) {
        nc_group **pp = &w->groups;
        while (*pp && *pp != g)
            pp = &(*pp)->next;
        if (*pp) *pp = g->next;
    }
    pthread_mutex_unlock(&w->nccl_mu);
    if (last && g->comm) {
        /* Its queued operations finish first, and leave the ring (which points at g). */
        dt_status st = nc_drain(w, g->stream, "dt_comm_destroy");
        if (st == DT_OK) nc_forget(w, g);
        if (st == DT_OK) st = nc_check(w);
        if (st == DT_OK && !dt_failed(&w->fail)) {
            comm_close(w, g->comm, g->label, g->n);
        } else {
            /* g is no longer listed: aborted with the others, in the same NCCL group (its
             * queued kernels may hold theirs back, or theirs its own). Also forgets the ring. */
            nc_abort_comms(w, g->comm);
        }
        g->comm = NULL;
    }
    if (last) {
        nc_forget(w, g); /* also after an abort: the ring must not point at it */
        if (g->stream) cudaStreamDestroy(g->stream); /* released once its work is done */
        free(g->members);
        free(g);
    }
    dt_comm_free_base(base);
    free(c);
}

void nc_groups_close(nc_world *w) {
    if (dt_failed(&w->fail)) {
        nc_abort_comms(w, NULL);
        return;
    }
    /* Finalize them all before waiting on any: NCCL may need every member to finalize. */
    int64_t t = atomic_load(&w->timeout_ns);
    int64_t deadline = dt_boot_now_ns() + (t > 0 ? t : FINALIZE_DEFAULT_NS);
    pthread_mutex_lock(&w->nccl_mu);
    for (nc_group *g = w->groups; g; g = g->next) {
        if (!g->comm) continue;
        ncclResult_t r = ncclCommFinalize(g->comm);
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclCommAbort(g->comm);
            g->comm = NULL;
        }
    }
    for (nc_group *g = w->groups; g; g = g->next) {
        if (!g->comm) continue;
        dt_status st = nc_settle(w, g->comm, ncclInProgress, "dt_nccl_run (closing)", g->label,
                                 g->n, deadline);
        if (st == DT_OK && ncclCommDestroy(g->comm) == ncclSuccess) {
            g->comm = NULL;
            continue;
        }
        ncclCommAbort(g->comm);
        g->comm = NULL;
    }
    pthread_mutex_lock(&w->ops_mu);
    w->count = 0;
    pthread_mutex_unlock(&w->ops_mu);
    pthread_mutex_unlock(&w->nccl_mu);
}

void nc_groups_free(nc_world *w) {
    while (w->groups) {
        nc_group *next = w->groups->next;
        if (w->groups->comm) ncclCommAbort(w->groups->comm);
        if (w->groups->stream) cudaStreamDestroy(w->groups->stream);
        free(w->groups->members);
        free(w->groups);
        w->groups = next;
    }
}
