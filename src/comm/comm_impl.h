/* The communicator vtable every backend fills, and the rank context behind dt_ctx.
 * A backend knows nothing of placements or meshes: it moves and reduces flat buffers. */
#ifndef DT_COMM_IMPL_H
#define DT_COMM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/box.h"
#include "core/device.h"
#include "dtensor/comm.h"
#include "dtensor/device.h"
#include "trace/trace_impl.h"

/* The generic layer (comm.c) has checked every argument before calling these, turned NULL
 * displacements into packed ones and equal-count calls into their v-forms. */
typedef struct dt_comm_piece dt_comm_piece; /* below */

typedef struct dt_comm_ops {
    const char *name;
    dt_status (*all_reduce)(dt_comm *c, const void *send, void *recv, size_t count, dt_dtype dt,
                            dt_reduce_op op);
    dt_status (*all_gatherv)(dt_comm *c, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, dt_dtype dt);
    dt_status (*reduce_scatterv)(dt_comm *c, const void *send, void *recv, const size_t *counts,
                                 const size_t *displs, dt_dtype dt, dt_reduce_op op);
    dt_status (*all_to_allv)(dt_comm *c, const void *send, const size_t *scounts,
                             const size_t *sdispls, void *recv, const size_t *rcounts,
                             const size_t *rdispls, dt_dtype dt);
    dt_status (*broadcast)(dt_comm *c, void *buf, size_t bytes, int root);
    dt_status (*send)(dt_comm *c, const void *buf, size_t bytes, int peer);
    dt_status (*recv)(dt_comm *c, void *buf, size_t bytes, int peer);
    dt_status (*barrier)(dt_comm *c);
    /* Optional (NULL: packed all_to_allv): see dt_comm_exchange_boxes. */
    dt_status (*exchange_boxes)(dt_comm *c, int ndim, size_t es, const void *src,
                                const int64_t *src_shape, const dt_box *send, void *dst,
                                const int64_t *dst_shape, const dt_box *recv);
    /* Optional (NULL: exchange_boxes on backends that are direct): see dt_comm_gather_boxes. */
    dt_status (*gather_boxes)(dt_comm *c, int ndim, size_t es, const void *src,
                              const int64_t *src_shape, void *dst, const int64_t *dst_shape,
                              const dt_box *recv);
    /* Optional, host memory only (NULL: the caller packs the boxes and runs reduce_scatterv):
     * group rank k reduces box boxes[k] of every member's array src (the same shape on every
     * member) into its dst, dense in the box's extents; one pass over the peers' arrays. */
    dt_status (*reduce_scatter_boxes)(dt_comm *c, int ndim, const void *src,
                                      const int64_t *shape, const dt_box *boxes, void *dst,
                                      dt_dtype dt, dt_reduce_op op);
    /* Optional, host memory only (NULL: the caller packs the arrays and runs all_reduce): an
     * in-place all_reduce of n arrays taken as one of their total length (array i holds
     * counts[i] elements; every member passes the same n and counts), with no packed copy. */
    dt_status (*all_reduce_bufs)(dt_comm *c, void *const *bufs, const size_t *counts, int n,
                                 dt_dtype dt, dt_reduce_op op);
    /* Optional, host memory only (NULL: packed into all_gatherv / reduce_scatterv by comm
     * pieces.c): see dt_comm_all_gather_pieces and dt_comm_reduce_scatter_pieces. */
    dt_status (*all_gather_pieces)(dt_comm *c, int n, const dt_comm_piece *pieces,
                                   dt_dtype dt);
    dt_status (*reduce_scatter_pieces)(dt_comm *c, int n, const dt_comm_piece *pieces,
                                       dt_dtype dt, dt_reduce_op op);
    /* Optional (NULL: every host array): whether exchange_boxes and reduce_scatter_boxes
     * (and gather_boxes) take the arrays src and dst (either may be NULL) on this group, in
     * *out, the same on every member; it may communicate, so members call it at the same
     * point. */
    dt_status (*boxes_here)(dt_comm *c, const void *src, const void *dst, int *out);
    /* The backend reads and writes its peers' buffers in place, so that exchange_boxes makes
     * one copy and a strided gather needs no packed buffer (dt_comm_direct_boxes). */
    bool direct;
    void (*destroy)(dt_comm *c);
} dt_comm_ops;

/* What every member of a group must pass alike to one collective, and where the call stands in
 * this rank's sequence on the communicator. comm.c fills comm->fp before each call into the
 * backend; the local runtime compares members' fingerprints at its entry barrier, the others
 * (with DT_DEBUG_COLLECTIVES=1) all_gather them first (fingerprint.c). All int64_t: compared
 * field by field and sent as DT_I64 elements. */
typedef struct dt_coll_fp {
    int64_t seq;   /* 1 for the communicator's first collective on this rank */
    int64_t kind;  /* dt_coll_kind, or DT_FP_EXCHANGE_BOXES */
    int64_t count; /* elements every member agrees on (a v-form's total); -1: not compared */
    int64_t dtype; /* dt_dtype; -1 for none */
    int64_t op;    /* dt_reduce_op; -1 for none */
    int64_t root;  /* broadcast's group root; -1 for none */
} dt_coll_fp;
#define DT_FP_EXCHANGE_BOXES DT_COLL_KIND_COUNT

static inline int dt_coll_fp_equal(const dt_coll_fp *a, const dt_coll_fp *b) {
    return a->seq == b->seq && a->kind == b->kind && a->count == b->count &&
           a->dtype == b->dtype && a->op == b->op && a->root == b->root;
}
/* "all_reduce #12 (1024 x f32, sum)", "barrier #3". */
void dt_coll_fp_str(const dt_coll_fp *fp, char *buf, size_t cap);
/* The error for members whose fingerprints differ (world ranks ra and rb), on every member
 * alike: "<what> on group world of 4 ranks: ranks called different collectives: rank 0 is in
 * all_gather #12 (1024 x f32), rank 1 in all_reduce #12 (1024 x f32, sum)". DT_ERR_COMM. */
dt_status dt_coll_fp_mismatch(const dt_comm *c, const char *what, int ra, const dt_coll_fp *a,
                              int rb, const dt_coll_fp *b);
/* DT_DEBUG_COLLECTIVES: all_gathers c->fp over c's members and compares (collective). */
dt_status dt_comm_check_fp(dt_comm *c);

/* Backends embed this as their first member. */
struct dt_comm {
    const dt_comm_ops *ops;
    dt_ctx *ctx;
    int rank, size;
    int *members;   /* world rank of each group rank */
    char label[32]; /* for counters and traces: "world", "group" or the mesh dims */
    atomic_int pending; /* non-blocking requests queued or running on the comm thread */
    /* Set when the first non-blocking request is issued on this comm: program order, so the
     * same on every rank, unlike pending (a rank whose request finished a moment earlier
     * sees 0). exchange_boxes picks its protocol by it, so every rank picks the same. */
    bool had_requests;
    /* The collective being issued, set by comm.c just before it calls ops (calls on one
     * communicator never overlap: see dt_comm_in_order), and the count issued so far. */
    dt_coll_fp fp;
    int64_t seq;
    int64_t p2p_traced; /* sends and receives traced on this comm, their trace seq */
    uint64_t gid;      /* the group, alike on every member: a hash of its key and members */
    int64_t flight_id; /* the flight recorder's entry of the call in progress (comm/flight.h) */
    double issued_us;  /* dt_now_us when the call in progress was issued */
};

/* Groups are matched across ranks by key and member list: ranks that create a communicator
 * with the same key and members get the same group. */
enum { DT_KEY_WORLD = 1, DT_KEY_USER = 2, DT_KEY_MESH = 3 };
#define DT_COMM_KEY(kind, seq) (((uint64_t)(kind) << 56) | (uint64_t)(seq))

typedef struct dt_backend_ops {
    const char *name;
    int checks_collectives; /* compares fingerprints at every rendezvous by itself (local) */
    dt_status (*comm_create)(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                             dt_comm **comm_out);
} dt_backend_ops;

typedef struct dt_user_group_count dt_user_group_count;
typedef struct dt_worker dt_worker;

/* Per-rank state of the layers above comm, opaque here: each layer casts its slot to a struct
 * of its own (asserting that it fits), whose all-zero bytes mean "as created". The context
 * only zeroes the slots; no layer's fields live in this header. */
typedef enum dt_ctx_slot_id {
    DT_CTX_SLOT_MESH,         /* the count of meshes made (mesh.c) */
    DT_CTX_SLOT_DTENSOR,      /* live tensors and bytes (tensor.c) */
    DT_CTX_SLOT_REDISTRIBUTE, /* cost model and redistribute mode (redistribute.c) */
    DT_CTX_SLOT_AUTOGRAD,     /* grad mode, grad sync, backward hooks, AC region (engine.c) */
    DT_CTX_SLOT_COUNT
} dt_ctx_slot_id;
#define DT_CTX_SLOT_BYTES 96

struct dt_ctx {
    int rank, size;
    const dt_backend_ops *backend;
    void *backend_state;
    dt_comm *world;
    dt_user_group_count *user_groups; /* creations per member list, for dt_comm_create */
    pthread_mutex_t stats_mu;         /* the comm thread counts too */
    dt_comm_stats stats;
    dt_worker *worker;        /* this rank's communication thread, made on first async call */
    struct dt_trace *trace;   /* the trace layer's recorder (trace/trace_impl.h); NULL: off */
    dt_rank_device dev;       /* the compute device and its GPU state (core/device.h) */
    int check_collectives;     /* DT_DEBUG_COLLECTIVES=1 on a backend that does not by itself */
    int64_t check_ns;          /* DT_CHECK_S: when a wait looks for ranks stuck elsewhere */
    struct dt_flight *flight;  /* the last collectives (comm/flight.h) */
    dt_comm_observer_fn observer; /* dt_comm_set_observer; NULL: none */
    struct dt_host_arena *arena;  /* the rank's host blocks (core/alloc.h), bound to the thread
                                     that runs it; NULL: the shared lists */
    void *observer_user;
    _Alignas(16) unsigned char slots[DT_CTX_SLOT_COUNT][DT_CTX_SLOT_BYTES];
};

/* An event of the rank's trace (trace/trace_impl.h), when it records, stamped with the module
 * running on this thread (comm/flight.h); dt_trace_add_args takes more (deps, op). */
extern _Thread_local const char *dt_comm_module_tls;
#define dt_trace_record(ctx, lane, name, t0, ...)                                                  \
    dt_trace_add_args((ctx)->trace, lane, name, t0,                                                \
                      &(dt_trace_args){.module = dt_comm_module_tls}, __VA_ARGS__)

/* The bytes a layer above keeps in ctx (zero until that layer writes them). */
static inline void *dt_ctx_slot(dt_ctx *ctx, dt_ctx_slot_id id) {
    return ctx->slots[id];
}
static inline const void *dt_ctx_slot_peek(const dt_ctx *ctx, dt_ctx_slot_id id) {
    return ctx->slots[id];
}

/* Frees the rank's GPU state (ctx_fini_common calls it). */
void dt_ctx_device_fini(dt_ctx *ctx);
/* Makes ctx's GPU (if any) the calling thread's: kernels and device copies then run on its
 * compute stream. Inline: a CPU rank pays one test. */
void dt_ctx_bind_gpu(dt_ctx *ctx);
static inline void dt_ctx_bind(dt_ctx *ctx) {
    if (ctx->dev.cuda) dt_ctx_bind_gpu(ctx);
}

/* Fills the fields every backend shares for the group (key, members); members is copied. */
dt_status dt_comm_init_base(dt_comm *c, const dt_comm_ops *ops, dt_ctx *ctx, const uint64_t key[2],
                            const int *members, int n);
void dt_comm_free_base(dt_comm *c);

/* Creates a communicator through the context's backend. */
dt_status dt_ctx_comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                             dt_comm **comm_out);
/* Sets up and frees what the backend-independent part of a context owns (backends call
 * these around their own setup; fini stops the communication thread first). */
dt_status dt_ctx_init_common(dt_ctx *ctx);
void dt_ctx_fini_common(dt_ctx *ctx);

/* An all_to_all of sub-boxes: box send[k] of this rank's array src goes to group rank k, and
 * group rank k's box lands in box recv[k] of dst; the extents of each pair must agree.
 * Backends that can copy between ranks' arrays directly do it in one copy; the fallback
 * packs, runs all_to_allv and unpacks. Collective; counted as an all_to_all. */
dt_status dt_comm_exchange_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                                 const int64_t *src_shape, const dt_box *send, void *dst,
                                 const int64_t *dst_shape, const dt_box *recv);
/* An all_gather whose blocks land as boxes: this rank's whole array src goes to every member,
 * and group rank k's array lands in box recv[k] of dst, with no packed buffer (S(d) -> R along
 * a dim d > 0): one copy where the backend copies between ranks' arrays directly, two through
 * the UCX runtime's shared-memory arena. Only where dt_comm_gather_boxes_here says so;
 * collective; counted as the all_gather it is. */
dt_status dt_comm_gather_boxes_here(dt_comm *c, size_t es, const void *src, const void *dst,
                                    int *out);
/* P -> S(d) along a dim d > 0: group rank k gets box boxes[k] of src reduced over the members,
 * dense in dst, in one pass where the backend has reduce_scatter_boxes (host memory); else
 * the boxes are packed and reduce_scattered. Collective; counted as a reduce_scatter. */
dt_status dt_comm_reduce_scatter_boxes(dt_comm *c, int ndim, const void *src,
                                       const int64_t *shape, const dt_box *boxes, void *dst,
                                       dt_dtype dtype, dt_reduce_op op);
/* Whether dt_comm_all_reduce_bufs may run on c now (the backend has it and no request was
 * ever issued on c: the same answer on every member, from program order alone). The arrays
 * must be host memory. */
bool dt_comm_all_reduce_bufs_here(const dt_comm *c);
/* An in-place all_reduce of n host arrays as one array of their total length (each element
 * reduced in group-rank order, as dt_all_reduce does, so the same bits), with no packed copy:
 * only where dt_comm_all_reduce_bufs_here says so. Collective (every member passes the same n
 * and counts); blocks; counted as one all_reduce. */
dt_status dt_comm_all_reduce_bufs(dt_comm *c, void *const *bufs, const size_t *counts, int n,
                                  dt_dtype dtype, dt_reduce_op op);
dt_status dt_comm_gather_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                               const int64_t *src_shape, void *dst, const int64_t *dst_shape,
                               const dt_box *recv);

/* One array of a grouped gather or reduce (comm/pieces.c): full is this rank's whole array
 * (ndim dims of shape), of which group rank k's block is boxes[k] (group size boxes, the same
 * on every member); shard is this rank's block, dense (extents boxes[rank].ext). */
struct dt_comm_piece {
    void *full;
    void *shard;
    const int64_t *shape;
    const dt_box *boxes;
    int ndim;
};

/* Pass to the pieces calls: pack into all_gatherv / reduce_scatterv even where the backend
 * copies between ranks' arrays directly (tests compare the two; the bits are the same). */
#define DT_PIECES_PACKED 1

/* Whether the backend moves pieces of host arrays straight between the members' arrays (the
 * same answer on every member; no buffers). */
bool dt_comm_pieces_direct(const dt_comm *c);
/* A grouped all_gather: every member's shard of pieces[i] lands in box boxes[rank] of every
 * member's pieces[i].full, for all n pieces (every member passes the same n, shapes and
 * boxes). One copy per element where dt_comm_pieces_direct (the local runtime); else packed
 * into one all_gatherv and unpacked. Collective; blocks; counted as one all_gather. */
dt_status dt_comm_all_gather_pieces(dt_comm *c, int n, const dt_comm_piece *pieces,
                                    dt_dtype dtype, int flags);
/* A grouped reduce_scatter: box boxes[rank] of every member's pieces[i].full, reduced element
 * by element in group-rank order (dt_reduce_scatter's bits), lands in this rank's
 * pieces[i].shard. One pass where dt_comm_pieces_direct; else packed by destination into one
 * reduce_scatterv and unpacked. Collective; blocks; counted as one reduce_scatter. */
dt_status dt_comm_reduce_scatter_pieces(dt_comm *c, int n, const dt_comm_piece *pieces,
                                        dt_dtype dtype, dt_reduce_op op, int flags);
/* The same on the communication thread: pieces (the array and what it points to) must stay
 * until the request is waited for. Non-blocking; collective. */
dt_status dt_comm_all_gather_pieces_start(dt_comm *c, int n, const dt_comm_piece *pieces,
                                          dt_dtype dtype, int flags, dt_request **out);
dt_status dt_comm_reduce_scatter_pieces_start(dt_comm *c, int n, const dt_comm_piece *pieces,
                                              dt_dtype dtype, dt_reduce_op op, int flags,
                                              dt_request **out);
/* Stamps the collective about to be issued on c (its fingerprint, the flight recorder). */
dt_status dt_comm_issue(dt_comm *c, int64_t kind, int64_t count, int64_t dtype, int64_t op,
                        int64_t root);

/* When requests are pending on comm, a blocking call runs as a queued request too, so that
 * the order of issue is the order on the wire: returns 1 and sets *st in that case. */
typedef struct dt_call {
    const void *send;
    void *recv;
    size_t count;
    const size_t *c1, *d1, *c2, *d2;
    dt_dtype dtype;
    dt_reduce_op op;
    int root;
} dt_call;

/* A collective run from its argument block (on the comm thread, or in order behind it). */
typedef dt_status (*dt_call_fn)(dt_comm *c, const dt_call *a);
dt_status dt_call_all_reduce(dt_comm *c, const dt_call *a);
dt_status dt_call_all_gather(dt_comm *c, const dt_call *a);
dt_status dt_call_all_gatherv(dt_comm *c, const dt_call *a);
dt_status dt_call_reduce_scatter(dt_comm *c, const dt_call *a);
dt_status dt_call_reduce_scatterv(dt_comm *c, const dt_call *a);
dt_status dt_call_all_to_all(dt_comm *c, const dt_call *a);
dt_status dt_call_all_to_allv(dt_comm *c, const dt_call *a);
dt_status dt_call_broadcast(dt_comm *c, const dt_call *a);
dt_status dt_call_barrier(dt_comm *c, const dt_call *a);

/* Queues run(a) on the comm thread behind the requests already there (async.c). */
dt_status dt_comm_submit(dt_comm *comm, dt_call_fn run, const dt_call *a, dt_request **out);
int dt_comm_in_order(dt_comm *comm, dt_call_fn run, const dt_call *a, dt_status *st);

/* Counts (and traces) one successful call on comm's context that started at t0_us. */
void dt_comm_count(dt_comm *comm, dt_coll_kind kind, size_t bytes_in, size_t bytes_out,
                   double t0_us);

#endif
