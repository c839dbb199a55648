/* The NCCL backend: one process per GPU, collectives queued on their communicator's stream and
 * ordered against the rank's compute stream with events. One stream per communicator, as
 * PyTorch has one per process group: the rank's thread and its communication thread may queue
 * on different communicators in different orders on different ranks, and on one shared stream
 * each rank's GPU would then wait for a peer's kernel queued behind its own (a deadlock). Starts from comm/boot (environment,
 * rendezvous, control plane) as the UCX backend does. Knows nothing of placements or meshes.
 *
 * Threads: the rank's own thread and its communication thread (ctx->worker) issue NCCL calls,
 * one at a time under nccl_mu; the control thread only records failures and wakes the
 * watchdog; the watchdog thread pops finished operations, enforces the timeout, polls NCCL's
 * asynchronous errors and aborts every communicator once the world has failed.
 * Lock order: create_mu or stage_mu, then nccl_mu, then ops_mu (under which the watch posts to
 * the board of stuck ranks, taking the control plane's lock), then mu (and the control plane's
 * lock before mu); wd_mu is only held around the watchdog's sleep and its wake-up. */
#ifndef DT_COMM_NCCL_IMPL_H
#define DT_COMM_NCCL_IMPL_H

#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "comm/boot/boot.h"
#include "comm/boot/failure.h"
#include "comm/comm_impl.h"
#include "comm/stuck.h"
#include "core/cuda/cuda_rt.h"
#include "dtensor/nccl.h"

#define NC_RING 1024 /* operations tracked; when full, the oldest merges into the next */

/* An NCCL communicator, shared by the dt_comms with the same key and members on this rank. */
typedef struct nc_group {
    struct nc_group *next;
    uint64_t key[2];
    int n, rank; /* members; this rank's place among them */
    int *members;
    ncclComm_t comm; /* NULL once aborted */
    cudaStream_t stream; /* its operations run here, in the order they were queued */
    int refs;
    char label[32]; /* the label of the last dt_comm that used it (nccl_mu) */
} nc_group;

/* An operation queued on a communicator's stream and not yet seen finished. */
typedef struct nc_pending {
    cudaEvent_t ev; /* recorded after it on that stream (owned by the ring slot) */
    int64_t t0;     /* when it was queued (ns, dt_boot_now_ns) */
    const char *what;
    char label[32]; /* its communicator's label */
    nc_group *g; /* NULL: known finished (its communicator was drained and destroyed) */
    int peer;    /* world rank it exchanges with (send/recv); -1: every member */
    uint64_t id; /* 1, 2, ... in the order queued */
    dt_pos pos;  /* where the rank waits while it is unfinished (comm/stuck.h) */
} nc_pending;

typedef struct nc_world {
    dt_ctx ctx; /* first: the backend state is found from the context */
    dt_boot_env env;
    int rank, size, device;
    int blocking;               /* DT_NCCL_BLOCKING */
    _Atomic int64_t timeout_ns; /* per operation; 0 = none */
    int64_t startup_timeout_ns;
    dt_boot_ctl *ctl; /* NULL for a world of one */
    ncclUniqueId world_id;

    dt_failure fail; /* the world's first failure */
    pthread_mutex_t mu;
    int64_t *exited_at; /* per world rank: when it returned from fn (0: not yet) */

    /* Every call into NCCL on this rank's communicators, and the list of them. */
    pthread_mutex_t create_mu; /* one communicator created at a time (before nccl_mu) */
    pthread_mutex_t nccl_mu;
    nc_group *groups;
    atomic_int comms_aborted;
    cudaEvent_t ready; /* compute-stream position the next operation waits for */
    int *barrier_buf;  /* one device int for dt_barrier */

    /* Operations queued, oldest first (streams may finish them in another order: the oldest
     * unfinished one is the one that can time out). */
    pthread_mutex_t ops_mu;
    nc_pending ring[NC_RING];
    int head, count, nevents;
    uint64_t queued;    /* operations queued so far (the ids) */
    uint64_t posted_id; /* the operation on rank 0's board of stuck ranks; 0: none */

    /* Host buffers go through stage_buf (device) on stage_stream, one call at a time. */
    pthread_mutex_t stage_mu;
    cudaStream_t stage_stream;
    cudaEvent_t stage_ev, stage_done;
    void *stage_buf;
    size_t stage_cap;
    /* Outgrown staging buffers, freed at teardown: cudaFree would wait for the whole GPU,
     * stuck collectives included. Growth doubles, so they hold less than stage_buf. */
    void *stage_old[64];
    int nstage_old;

    /* The watchdog thread. */
    pthread_t watchdog;
    int watchdog_started;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    int wd_stop;
} nc_world;

typedef struct nc_comm {
    dt_comm base;
    nc_world *w;
    nc_group *g;
} nc_comm;

static inline nc_comm *nc(dt_comm *c) {
    return (nc_comm *)c;
}

/* --- failure state and waiting (watch.c) ---------------------------------------------- */

/* Records a failure (first one wins) and wakes the watchdog, which aborts the communicators. */
void nc_world_abort(nc_world *w, int rank, dt_status st, const char *msg);
/* This rank failed: records it and tells every other rank through the control plane. */
void nc_fail(nc_world *w, dt_status st, const char *msg);
/* The world's recorded failure as the error of call `what` (DT_ERR_ABORTED). */
dt_status nc_aborted_error(nc_world *w, const char *what);
/* An NCCL status as a dtensor status, with ncclGetErrorString and ncclGetLastError(comm). */
dt_status nc_nccl_error(ncclResult_t r, ncclComm_t comm, const char *what, const char *label,
                        int n);
/* Waits while NCCL answers ncclInProgress on comm (non-blocking communicators connecting or
 * queueing), until deadline (ns; 0 = none) or the world fails. r: the call's status. */
dt_status nc_settle(nc_world *w, ncclComm_t comm, ncclResult_t r, const char *what,
                    const char *label, int n, int64_t deadline);
/* Tracks an operation just queued on c's stream, and makes the compute stream wait for it.
 * Called with nccl_mu held. */
dt_status nc_track(nc_world *w, nc_comm *c, const char *what, int peer);
/* Polls until ev (recorded on a stream of this rank) has completed, failing on the world's
 * failure, on a timeout of the oldest queued operation or a peer that returned without
 * joining it, and on NCCL's asynchronous errors. Without nccl_mu held. */
dt_status nc_wait_event(nc_world *w, cudaEvent_t ev, const char *what);
/* Waits until everything queued so far on the listed communicators' streams (and on extra,
 * when not NULL: an unlisted one's) is done. */
dt_status nc_drain(nc_world *w, cudaStream_t extra, const char *what);
/* Marks g's tracked operations finished (g was drained and is going away). */
void nc_forget(nc_world *w, nc_group *g);
/* One round of the watchdog's checks; a failure found is recorded, reported and returned. */
dt_status nc_check(nc_world *w);
/* Aborts every communicator (once), all in one NCCL group, and forgets the tracked operations.
 * extra: one no longer listed (NULL: none), aborted with them (or alone, when they already
 * were). */
void nc_abort_comms(nc_world *w, ncclComm_t extra);
dt_status nc_watchdog_start(nc_world *w);
void nc_watchdog_stop(nc_world *w);

/* --- communicators (group.c) ------------------------------------------------------------- */

extern const dt_comm_ops nc_comm_ops;

/* The backend's comm_create; id: the unique id to use (the world's), NULL to agree on one. */
dt_status nc_comm_make(nc_world *w, const uint64_t key[2], const int *members, int n,
                       const ncclUniqueId *id, dt_comm **comm_out);
dt_status nc_comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                         dt_comm **comm_out);
void nc_comm_destroy(dt_comm *c);
/* Teardown, once every rank has returned: finalizes and destroys (after a failure: aborts)
 * every NCCL communicator still alive; then frees what is left of the groups. */
void nc_groups_close(nc_world *w);
void nc_groups_free(nc_world *w);

/* --- collectives (collectives.c, exchange.c) ---------------------------------------------- */

dt_status nc_all_reduce(dt_comm *c, const void *send, void *recv, size_t count, dt_dtype dt,
                        dt_reduce_op op);
dt_status nc_all_gatherv(dt_comm *c, const void *send, void *recv, const size_t *counts,
                         const size_t *displs, dt_dtype dt);
dt_status nc_reduce_scatterv(dt_comm *c, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, dt_dtype dt, dt_reduce_op op);
dt_status nc_all_to_allv(dt_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                         void *recv, const size_t *rcounts, const size_t *rdispls, dt_dtype dt);
dt_status nc_broadcast(dt_comm *c, void *buf, size_t bytes, int root);
dt_status nc_send(dt_comm *c, const void *buf, size_t bytes, int peer);
dt_status nc_recv(dt_comm *c, void *buf, size_t bytes, int peer);
dt_status nc_barrier(dt_comm *c);
dt_status nc_exchange_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                            const int64_t *src_shape, const dt_box *send, void *dst,
                            const int64_t *dst_shape, const dt_box *recv);

#endif
