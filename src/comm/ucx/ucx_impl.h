/* The UCX backend: one process per rank. Data moves as UCP tagged messages (shared memory,
 * CMA, TCP or RDMA, as UCX picks); a small TCP control plane through rank 0 carries the
 * rendezvous, failures and exits. Knows nothing of placements or meshes.
 *
 * Threads: the rank's own thread and its communication thread (ctx->worker, async
 * redistribute) both drive the one UCP worker, created with UCS_THREAD_MODE_MULTI so UCX
 * serialises them; they use different communicators, so different tags. The control thread
 * only reads sockets and updates the failure state below, then wakes a thread asleep on the
 * worker's event fd (ucp_worker_signal, which is thread-safe). */
#ifndef DT_COMM_UCX_IMPL_H
#define DT_COMM_UCX_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "comm/boot/boot.h"
#include "comm/boot/failure.h"
#include "comm/comm_impl.h"
#include "comm/host_load.h"

/* Group ranks travel in 16 bits of a message tag. */
#define DT_UX_MAX_RANKS DT_BOOT_MAX_RANKS

/* Tag layout: group id (28 bits) | sequence number (16) | phase (4) | sender's group rank (16).
 * Every tag is matched exactly. */
#define UX_TAG(gid, seq, phase, src)                                                               \
    (((uint64_t)(gid) << 36) | ((uint64_t)((seq)&0xffffu) << 20) |                                 \
     ((uint64_t)((phase)&0xfu) << 16) | (uint64_t)((src)&0xffffu))
#define UX_GID_BITS  28
#define UX_PHASE_P2P 15 /* send/recv: ordered per pair, no sequence number */

/* Phases within one collective (its sequence number already sets it apart from others). */
enum { UX_PH_GATHER = 0, UX_PH_REDUCE, UX_PH_ALL, UX_PH_SCATTER };

typedef struct ux_world {
    dt_ctx ctx; /* first: the backend state is found from the context */
    dt_ucx_env env;
    int rank, size;
    ucp_context_h ucp;
    ucp_worker_h worker;
    int efd;                    /* the worker's event fd (UCP_FEATURE_WAKEUP); -1 without */
    ucp_ep_h *eps;              /* per world rank; NULL for this rank */
    atomic_int *ep_error;       /* ucs_status_t of an endpoint's failure, 0 while fine */
    atomic_int closing;         /* teardown: endpoint errors are expected */
    _Atomic int64_t timeout_ns; /* per operation; 0 = none */
    int64_t startup_timeout_ns;
    size_t ring_min_bytes;
    int err_mode; /* UX_ERR_*, from DT_UCX_ERR_MODE (policy.c) */
    int cma;      /* DT_UCX_CMA=1: keep CMA in the transports (policy.c) */
    int shm_on;   /* DT_UCX_SHM: groups on one host run over a shared-memory arena (shm.c) */
    int *host;    /* per world rank: the lowest world rank on its host (UX_HOST_ID) */
    int fits;     /* every rank of this host has a core: waits may spin and yield */
    /* The process ids of this host's ranks (this one's first), and other processes' use of
     * the host's cores (comm/host_load.h). */
    int *host_pids, nhost_pids;
    dt_host_load load;

    /* Failure and exit state: written under mu (control thread, error callbacks, failing
     * operations), announced by bumping events, which waiting operations poll. */
    atomic_uint events;
    dt_failure fail; /* the world's first failure */
    pthread_mutex_t mu;
    unsigned char *exited;              /* per world rank: returned from its SPMD function */
    uint64_t *exit_sent;                /* messages exited rank r sent to this rank */
    uint64_t *exit_recvd;               /* messages exited rank r received from this rank */
    atomic_uint_fast64_t *sent, *recvd; /* messages this rank sent to / received from r */

    dt_boot_ctl *ctl; /* the control plane (comm/boot); NULL for a world of one */

    pthread_mutex_t groups_mu;
    struct ux_group *groups;
    void **orphans; /* scratch still targeted by requests UCX could not cancel */
    int norphans;

    /* Hierarchical collectives (hier.c). */
    int hier;              /* DT_UCX_HIER (default 1) */
    atomic_long hier_runs; /* hierarchical all_reduces run, for tests */
} ux_world;

/* Whether a wait may yield before it sleeps: every rank of this host has a core and no other
 * process keeps the cores busy (beside CPU-bound processes, 2 processes' 1 KiB collectives
 * took 1.3-2.7 ms yielding for 50 us, each yield handing its core away for a slice). */
static inline int ux_may_yield(ux_world *w) {
    return w->fits && !dt_host_load_shared(&w->load);
}

/* Communicators with the same key and members on this rank share one group (tags, seq). */
typedef struct ux_group {
    struct ux_group *next;
    uint64_t key[2];
    int n;
    int *members;
    uint32_t gid;
    uint32_t seq; /* collectives issued so far */
    int refs;
    int shm_state;      /* 0: not tried yet, 1: shm ready, -1: UCP only (shm.c) */
    struct ux_shm *shm; /* the group's shared-memory arena, when every member is on this host */
} ux_group;

typedef struct ux_comm {
    dt_comm base;
    ux_world *w;
    ux_group *g;
    void *scratch;
    size_t scratch_cap;
    struct ux_hier *hier; /* hier.c: whether members span hosts, sub-communicators */
} ux_comm;

/* --- operations (progress.c) ---------------------------------------------------------- */

typedef struct ux_req {
    void *ucp; /* in-flight UCP request; NULL once done */
    int peer;  /* group rank */
    int is_recv;
    int done;
    size_t expect; /* receive: bytes the sender must send */
    ucp_tag_recv_info_t info;
} ux_req;

#define UX_OP_INLINE 8

/* One collective (or send/recv) in progress: its tags, deadline and posted requests. A
 * failure is sticky: later posts are skipped and ux_op_end cleans up and reports it. */
typedef struct ux_op {
    ux_comm *c;
    ux_world *w;
    const char *what;
    uint32_t seq;
    int64_t deadline; /* ns on CLOCK_MONOTONIC; 0 = none */
    dt_status st;
    int remote;  /* the failure came from another rank: do not report it again */
    int recheck; /* a peer awaited has returned: look at the message counts again */
    int p2p;     /* a send or receive */
    int posted;  /* its position is on rank 0's board of stuck ranks (comm/stuck.h) */
    int64_t post_at; /* when to post it (0: never) */
    int nreq, cap;
    ux_req *reqs;
    ux_req inline_reqs[UX_OP_INLINE];
} ux_op;

/* Starts an operation on c (takes the group's next sequence number; p2p = 1 for send/recv,
 * which do not). Fails at once when the world has already failed. */
dt_status ux_op_begin(ux_op *op, ux_comm *c, const char *what, int p2p);
/* Post a message to / from group rank peer. sync = complete only once the peer matched it. */
void ux_post_send(ux_op *op, int peer, int phase, const void *buf, size_t bytes, int sync);
void ux_post_recv(ux_op *op, int peer, int phase, void *buf, size_t bytes);
/* Progresses until every posted request is done, the deadline passes, a peer fails or exits
 * without sending what is awaited; then forgets the done requests. */
dt_status ux_op_wait(ux_op *op);
/* Inside a wait, now: once the operation has waited the check interval, its position goes to
 * rank 0's board (comm/stuck.h); ux_op_end takes it off. */
void ux_op_watch(ux_op *op, int64_t now);
/* Ends the operation: on failure cancels what is pending and tells the world. Returns st. */
dt_status ux_op_end(ux_op *op);
/* op fails with the world's first failure (reported by another rank: not reported again). */
void ux_fail_aborted(ux_op *op);
/* Scratch of at least bytes owned by the communicator (kept between calls). */
dt_status ux_scratch(ux_op *op, size_t bytes, void **out);

int64_t ux_now_ns(void);

/* --- failure state (world.c) ------------------------------------------------------------ */

/* Records a failure (first one wins) and wakes waiting operations. */
void ux_world_abort(ux_world *w, int rank, dt_status st, const char *msg);
/* Records that rank r returned, with the messages it sent to and received from this rank. */
void ux_world_exited(ux_world *w, int r, uint64_t sent_to_me, uint64_t recvd_from_me);

/* --- control plane (comm/boot/control.c, driven from world.c) --------------------------- */

/* Takes over the rendezvous sockets (root: one per rank, socks[0] unused; others: socks[0] is
 * rank 0) and starts the control thread. */
dt_status ux_ctl_start(ux_world *w, int *socks);
/* This rank failed (first report only): every rank's operations fail with DT_ERR_ABORTED. */
void ux_ctl_fail(ux_world *w, dt_status st, const char *msg);
/* This rank returned: tells the others (with its message counts), then waits until every rank
 * has returned or died. The first failure of the world (rank, status, message) comes back;
 * *rank_out = -1 when none. */
void ux_ctl_finish(ux_world *w, int *rank_out, dt_status *st_out, char *msg, size_t cap);
void ux_ctl_stop(ux_world *w);

/* --- error-handling policy (policy.c) ---------------------------------------------------- */

enum { UX_ERR_AUTO = 0, UX_ERR_PEER, UX_ERR_NONE };
#define UX_HOST_ID DT_BOOT_HOST_ID /* host name + boot id: ranks with equal ids share a host */

dt_status ux_err_mode_read(int *mode_out, int *cma_out);
/* UCX_TLS value user (NULL = unset) without CMA; 0 when it cannot be expressed. */
int ux_tls_without_cma(const char *user, char *out, size_t cap);

/* --- collectives ------------------------------------------------------------------------- */

extern const dt_comm_ops ux_comm_ops;

/* group.c */
dt_status ux_comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                         dt_comm **comm_out);
void ux_groups_free(ux_world *w);

dt_status ux_all_gatherv(dt_comm *c, const void *send, void *recv, const size_t *counts,
                         const size_t *displs, dt_dtype dt);
dt_status ux_reduce_scatterv(dt_comm *c, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, dt_dtype dt, dt_reduce_op op);
dt_status ux_all_reduce(dt_comm *c, const void *send, void *recv, size_t count, dt_dtype dt,
                        dt_reduce_op op);
dt_status ux_all_to_allv(dt_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                         void *recv, const size_t *rcounts, const size_t *rdispls, dt_dtype dt);
dt_status ux_broadcast(dt_comm *c, void *buf, size_t bytes, int root);
dt_status ux_send(dt_comm *c, const void *buf, size_t bytes, int peer);
dt_status ux_recv(dt_comm *c, void *buf, size_t bytes, int peer);
dt_status ux_barrier(dt_comm *c);
void ux_comm_destroy(dt_comm *c);

/* boxes.c: the box forms of redistribute over the arena (groups that have one, host arrays) */
dt_status ux_boxes_here(dt_comm *c, const void *src, const void *dst, int *out);
dt_status ux_exchange_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                            const int64_t *src_shape, const dt_box *send, void *dst,
                            const int64_t *dst_shape, const dt_box *recv);
dt_status ux_gather_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                          const int64_t *src_shape, void *dst, const int64_t *dst_shape,
                          const dt_box *recv);
dt_status ux_reduce_scatter_boxes(dt_comm *c, int ndim, const void *src, const int64_t *shape,
                                  const dt_box *boxes, void *dst, dt_dtype dt, dt_reduce_op kind);

/* The algorithms inside an operation that the composite collectives reuse. */
dt_status ux_ring_all_gatherv(ux_op *op, void *recv, const size_t *counts, const size_t *displs,
                              size_t es);
dt_status ux_direct_all_gatherv(ux_op *op, void *recv, const size_t *counts, const size_t *displs,
                                size_t es);
dt_status ux_reduce_scatter_in(ux_op *op, const void *send, void *recv, const size_t *counts,
                               const size_t *displs, dt_dtype dt, dt_reduce_op op_kind);

/* Over the group's shared-memory arena (shm.c, shm_coll.c): ux_shm_get sets it up on the
 * group's first collective (every member must call it there) and answers NULL when the group
 * keeps to UCP; ux_shm_host says whether buffers are host memory. check = 0: the caller has
 * compared fingerprints in this operation already. */
typedef struct ux_shm ux_shm;
ux_shm *ux_shm_get(ux_op *op);
void ux_shm_free(ux_shm *s);
int ux_shm_host(const void *a, const void *b);
void ux_shm_count(ux_op *op);
dt_status ux_shm_all_gatherv(ux_op *op, ux_shm *s, const void *send, void *recv,
                             const size_t *counts, const size_t *displs, size_t es, int check);
dt_status ux_shm_reduce_scatterv(ux_op *op, ux_shm *s, const void *send, void *recv,
                                 const size_t *counts, const size_t *displs, dt_dtype dt,
                                 dt_reduce_op kind);
dt_status ux_shm_all_reduce(ux_op *op, ux_shm *s, const void *send, void *recv, size_t count,
                            dt_dtype dt, dt_reduce_op kind);
dt_status ux_shm_all_to_allv(ux_op *op, ux_shm *s, const void *send, const size_t *scounts,
                             const size_t *sdispls, void *recv, const size_t *rcounts,
                             const size_t *rdispls, size_t es);
dt_status ux_shm_exchange_boxes(ux_op *op, ux_shm *s, int ndim, size_t es, const void *src,
                                const int64_t *src_shape, const dt_box *send, void *dst,
                                const int64_t *dst_shape, const dt_box *recv);
dt_status ux_shm_gather_boxes(ux_op *op, ux_shm *s, int ndim, size_t es, const void *src,
                              void *dst, const int64_t *dst_shape, const dt_box *recv);
dt_status ux_shm_reduce_scatter_boxes(ux_op *op, ux_shm *s, int ndim, const void *src,
                                      const int64_t *shape, const dt_box *boxes, void *dst,
                                      dt_dtype dt, dt_reduce_op kind);
dt_status ux_shm_broadcast(ux_op *op, ux_shm *s, void *buf, size_t bytes, int root);
dt_status ux_shm_barrier(ux_op *op, ux_shm *s);

/* --- hierarchical collectives (hier.c) ------------------------------------------------- */

typedef struct ux_hier ux_hier;
/* 1 when c runs its all_reduce hierarchically (members on several hosts, some host with more
 * than one, DT_UCX_HIER not 0), or when deciding failed (*st_out says why). Decided on first
 * call, with no communication, alike on every member. */
int ux_hier_use(ux_comm *c, dt_status *st_out);
dt_status ux_hier_all_reduce(ux_comm *c, const void *send, void *recv, size_t count, dt_dtype dt,
                             dt_reduce_op op);
void ux_hier_free(ux_comm *c);

static inline ux_comm *ux(dt_comm *c) {
    return (ux_comm *)c;
}

#endif
