/* Communicators and collectives over a group of ranks.
 *
 * Every collective is collective: all ranks of the group call it, in the same order, with
 * agreeing counts and dtypes. All calls here block until this rank's part is done; the
 * buffers may be reused on return. Counts and displacements are in elements, not bytes.
 * send may equal recv (in place) where noted. A communicator belongs to one rank context and
 * is used by one thread at a time. */
#ifndef DTENSOR_COMM_H
#define DTENSOR_COMM_H

#include <stdio.h>

#include "dtensor/runtime.h"
#include "dtensor/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_comm dt_comm;

/* The communicator over all ranks of the world; borrowed, valid while ctx lives. */
DT_API dt_status dt_ctx_world_comm(dt_ctx *ctx, dt_comm **out);

/* A communicator over world ranks ranks[0..n-1] (group rank i = ranks[i]); the caller must be
 * one of them. Does not block. Matched by order: the k-th creation of a given rank list on
 * each member refers to the same group. Destroy it with dt_comm_destroy (not collective). */
DT_API dt_status dt_comm_create(dt_ctx *ctx, const int *ranks, int n, dt_comm **out);
DT_API dt_status dt_comm_destroy(dt_comm *comm);

/* This rank's index in the group, the group size, and the world rank of group rank i;
 * -1 for bad arguments (and dt_last_error() says which). */
DT_API int dt_comm_rank(const dt_comm *comm);
DT_API int dt_comm_size(const dt_comm *comm);
DT_API int dt_comm_world_rank(const dt_comm *comm, int group_rank);

/* recv = op over ranks of send (count elements). In place allowed. Every rank gets bitwise
 * identical results: each element is reduced once, in group-rank order (bf16/f16 in f32). */
DT_API dt_status dt_all_reduce(dt_comm *comm, const void *send, void *recv, size_t count,
                               dt_dtype dtype, dt_reduce_op op);

/* recv = concatenation of every rank's send (count elements each). */
DT_API dt_status dt_all_gather(dt_comm *comm, const void *send, void *recv, size_t count,
                               dt_dtype dtype);

/* Variable counts: rank i's send (recvcounts[i] elements) lands at recv + displs[i].
 * displs NULL means packed in rank order. recvcounts must agree on every rank. */
DT_API dt_status dt_all_gatherv(dt_comm *comm, const void *send, void *recv,
                                const size_t *recvcounts, const size_t *displs, dt_dtype dtype);

/* send holds size blocks of count elements; rank i receives block i reduced over ranks. */
DT_API dt_status dt_reduce_scatter(dt_comm *comm, const void *send, void *recv, size_t count,
                                   dt_dtype dtype, dt_reduce_op op);

/* Variable counts: send holds blocks of recvcounts[0], recvcounts[1], ... elements, packed;
 * rank i receives block i reduced over ranks. recvcounts must agree on every rank. */
DT_API dt_status dt_reduce_scatterv(dt_comm *comm, const void *send, void *recv,
                                    const size_t *recvcounts, dt_dtype dtype, dt_reduce_op op);

/* Block i of send (count elements) goes to rank i; block j of recv comes from rank j. */
DT_API dt_status dt_all_to_all(dt_comm *comm, const void *send, void *recv, size_t count,
                               dt_dtype dtype);

/* Per-peer counts: sendcounts[j] elements at send + sdispls[j] go to rank j, and
 * recvcounts[j] elements from rank j land at recv + rdispls[j]. The counts must pair up
 * (my recvcounts[j] == rank j's sendcounts[me]). Displacement arrays NULL = packed. */
DT_API dt_status dt_all_to_allv(dt_comm *comm, const void *send, const size_t *sendcounts,
                                const size_t *sdispls, void *recv, const size_t *recvcounts,
                                const size_t *rdispls, dt_dtype dtype);

/* buf (count elements) of group rank root is copied to every rank's buf. */
DT_API dt_status dt_broadcast(dt_comm *comm, void *buf, size_t count, dt_dtype dtype, int root);

/* Point to point, not collective. send blocks until the matching recv on peer has taken the
 * data (rendezvous, no intermediate copy), so pair them (e.g. even ranks send first). Messages
 * between one pair arrive in order; counts and dtypes must match. */
DT_API dt_status dt_send(dt_comm *comm, const void *buf, size_t count, dt_dtype dtype, int peer);
DT_API dt_status dt_recv(dt_comm *comm, void *buf, size_t count, dt_dtype dtype, int peer);

/* Returns when every rank of the group has called it. */
DT_API dt_status dt_barrier(dt_comm *comm);

/* Non-blocking forms: they return at once with a request and the collective runs on this
 * rank's communication thread, so computation can overlap it. Same arguments and semantics
 * as the blocking calls; buffers must stay untouched (send) and unread (recv) until
 * dt_request_wait. Collectives on one communicator keep the order they were issued in: a
 * blocking call made while requests are pending on that communicator waits its turn. */
DT_API dt_status dt_all_reduce_start(dt_comm *comm, const void *send, void *recv, size_t count,
                                     dt_dtype dtype, dt_reduce_op op, dt_request **out);
DT_API dt_status dt_all_gather_start(dt_comm *comm, const void *send, void *recv, size_t count,
                                     dt_dtype dtype, dt_request **out);
DT_API dt_status dt_reduce_scatter_start(dt_comm *comm, const void *send, void *recv, size_t count,
                                         dt_dtype dtype, dt_reduce_op op, dt_request **out);
DT_API dt_status dt_all_to_all_start(dt_comm *comm, const void *send, void *recv, size_t count,
                                     dt_dtype dtype, dt_request **out);

/* Communication accounting (like PyTorch's CommDebugMode): every call above that succeeds is
 * counted on the calling rank's context, by kind and group size, with the bytes of this
 * rank's input and output buffers. Counting is always on and costs one lock per call. */
typedef enum dt_coll_kind {
    DT_COLL_ALL_REDUCE = 0,
    DT_COLL_ALL_GATHER, /* all_gather and all_gatherv */
    DT_COLL_REDUCE_SCATTER,
    DT_COLL_ALL_TO_ALL,
    DT_COLL_BROADCAST,
    DT_COLL_SEND,
    DT_COLL_RECV,
    DT_COLL_BARRIER,
    DT_COLL_KIND_COUNT
} dt_coll_kind;

/* "all_reduce", "all_gather", ... ; "?" for an unknown kind. */
DT_API const char *dt_coll_kind_name(dt_coll_kind kind);

#define DT_COMM_STATS_MAX 64

typedef struct dt_comm_stats_entry {
    dt_coll_kind kind;
    int group_size;
    char group[32]; /* the communicator's label: mesh dims ("tp", "dp+tp"), "world" or "group" */
    uint64_t calls;
    uint64_t bytes_in, bytes_out; /* this rank's input and output buffers, summed */
    double time_us;               /* wall time inside the calls */
} dt_comm_stats_entry;

typedef struct dt_comm_stats {
    uint64_t calls[DT_COLL_KIND_COUNT]; /* by kind, all groups */
    uint64_t bytes_in[DT_COLL_KIND_COUNT], bytes_out[DT_COLL_KIND_COUNT];
    double time_us[DT_COLL_KIND_COUNT];
    int nentries; /* (kind, group) pairs seen, at most DT_COMM_STATS_MAX */
    dt_comm_stats_entry entries[DT_COMM_STATS_MAX];
    /* Op dispatch's strategy caches and the redistribute plan caches of all this rank's
     * meshes: hits, misses and evictions summed (dt_mesh_cache_stats has one mesh's). */
    dt_cache_stats caches[DT_CACHE_KIND_COUNT];
    /* Collectives the UCX runtime ran over a shared-memory arena (members on one host). */
    uint64_t shm_calls;
} dt_comm_stats;

/* dt_comm_stats_get copies this rank's counters, dt_comm_stats_reset zeroes them. Not
 * collective. */
DT_API dt_status dt_comm_stats_get(dt_ctx *ctx, dt_comm_stats *out);
DT_API dt_status dt_comm_stats_reset(dt_ctx *ctx);

/* An observer of the counted calls (explain tools, CommDebugMode-style logs): fn(user, event)
 * runs once for every call above that succeeds on ctx's rank, after it was counted, on the
 * thread that ran it (the rank's own, or its communication thread for a non-blocking call:
 * fn must not call into ctx). The event's strings are valid during the call only. */
typedef struct dt_comm_event {
    dt_coll_kind kind;
    const char *group; /* the communicator's label, as in dt_comm_stats_entry */
    int group_size;
    size_t bytes_in, bytes_out; /* as counted */
    const char *op;     /* the op (or "redistribute") that issued it; NULL: called directly */
    const char *module; /* the registry module whose forward or backward issued it (dtensor/
                           params.h: set where layers fetch weights and inputs, and by autograd
                           for each node's backward); NULL: none */
    int backward;       /* issued while dt_backward runs (module: the node's) */
} dt_comm_event;
typedef void (*dt_comm_observer_fn)(void *user, const dt_comm_event *event);
/* Sets ctx's observer (fn NULL: none; the default). Not collective; call it while no call of
 * ctx's rank is in flight. */
DT_API dt_status dt_comm_set_observer(dt_ctx *ctx, dt_comm_observer_fn fn, void *user);

/* Prints a communication summary: calls, bytes and time per collective kind and mesh dims,
 * from counters read with dt_comm_stats_get (like CommDebugMode's table), then the hits,
 * misses and evictions of the strategy and plan caches (when any). title names the rank or
 * the phase. */
DT_API dt_status dt_comm_stats_print(const dt_comm_stats *stats, const char *title, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
