/* Public collective entry points: check arguments once, then hand flat buffers to the
 * backend's vtable. Equal-count collectives are expressed as their v-forms here so a backend
 * needs only the general case. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "core/box.h"
#include "core/device.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/fiber.h"

#define COMM_CHECK(c)                                                                              \
    do {                                                                                           \
        DT_ARG((c) != NULL, "%s: argument comm is NULL", __func__);                                \
    } while (0)

#define DTYPE_CHECK(dt)                                                                            \
    DT_ARG((unsigned)(dt) < DT_DTYPE_COUNT, "%s: argument dtype has unknown value %d", __func__,   \
           (int)(dt))

#define OP_CHECK(op)                                                                               \
    DT_ARG((unsigned)(op) < DT_REDUCE_COUNT, "%s: argument op has %s value %d", __func__,          \
           (op) == DT_REDUCE_NORM ? "the placement-only (no collective takes it)" : "unknown",   \
           (int)(op))

/* float8 dtypes travel (gathers, all-to-all, point-to-point) but are never reduced. */
#define REDUCE_DTYPE_CHECK(dt)                                                                     \
    DT_ARG((dt) != DT_F8E4M3 && (dt) != DT_F8E5M2,                                                 \
           "%s: argument dtype is %s: float8 tensors are not reduced (reduce in f32, then cast)",  \
           __func__, dt_dtype_name(dt))

#define BUF_CHECK(buf, count)                                                                      \
    DT_ARG((count) == 0 || (buf) != NULL, "%s: argument %s is NULL with %zu elements", __func__,   \
           #buf, (size_t)(count))

/* The blocking collectives as argument-block runners, for requests on the comm thread and
 * for blocking calls that queue behind them. */
dt_status dt_call_all_reduce(dt_comm *c, const dt_call *a) {
    return dt_all_reduce(c, a->send, a->recv, a->count, a->dtype, a->op);
}
dt_status dt_call_all_gather(dt_comm *c, const dt_call *a) {
    return dt_all_gather(c, a->send, a->recv, a->count, a->dtype);
}
dt_status dt_call_all_gatherv(dt_comm *c, const dt_call *a) {
    return dt_all_gatherv(c, a->send, a->recv, a->c1, a->d1, a->dtype);
}
dt_status dt_call_reduce_scatter(dt_comm *c, const dt_call *a) {
    return dt_reduce_scatter(c, a->send, a->recv, a->count, a->dtype, a->op);
}
dt_status dt_call_reduce_scatterv(dt_comm *c, const dt_call *a) {
    return dt_reduce_scatterv(c, a->send, a->recv, a->c1, a->dtype, a->op);
}
dt_status dt_call_all_to_all(dt_comm *c, const dt_call *a) {
    return dt_all_to_all(c, a->send, a->recv, a->count, a->dtype);
}
dt_status dt_call_all_to_allv(dt_comm *c, const dt_call *a) {
    return dt_all_to_allv(c, a->send, a->c1, a->d1, a->recv, a->c2, a->d2, a->dtype);
}
dt_status dt_call_broadcast(dt_comm *c, const dt_call *a) {
    return dt_broadcast(c, a->recv, a->count, a->dtype, a->root);
}
dt_status dt_call_barrier(dt_comm *c, const dt_call *a) {
    (void)a;
    return dt_barrier(c);
}

/* Stamps the collective about to be issued on comm (see dt_coll_fp); with DT_DEBUG_COLLECTIVES
 * on a backend that does not compare fingerprints itself, checks them across the group first. */
static dt_status issue(dt_comm *c, int64_t kind, int64_t count, int64_t dtype, int64_t op,
                       int64_t root) {
    c->fp = (dt_coll_fp){
        .seq = ++c->seq, .kind = kind, .count = count, .dtype = dtype, .op = op, .root = root};
    dt_fiber_turn(); /* ranks that share a thread take turns (core/fiber.h) */
    c->issued_us = dt_now_us();
    dt_flight_begin(c, &c->fp, -1);
    return c->ctx->check_collectives ? dt_comm_check_fp(c) : DT_OK;
}

dt_status dt_comm_issue(dt_comm *c, int64_t kind, int64_t count, int64_t dtype, int64_t op,
                        int64_t root) {
    return issue(c, kind, count, dtype, op, root);
}

#define IN_ORDER(comm, runner, ...)                                                                \
    do {                                                                                           \
        dt_call in_order_args_ = {__VA_ARGS__};                                                       \
        dt_status in_order_st_;                                                                    \
        if (dt_comm_in_order((comm), (runner), &in_order_args_, &in_order_st_))                    \
            return in_order_st_;                                                                   \
    } while (0)

/* FNV-1a over the key and the member list: the same on every member of a group. */
static uint64_t group_id(const uint64_t key[2], const int *members, int n) {
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < 2 + n; i++) {
        uint64_t v = i < 2 ? key[i] : (uint64_t)(uint32_t)members[i - 2];
        for (int b = 0; b < 8; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
    }
    return h;
}

dt_status dt_comm_init_base(dt_comm *c, const dt_comm_ops *ops, dt_ctx *ctx, const uint64_t key[2],
                            const int *members, int n) {
    c->ops = ops;
    c->flight_id = -1;
    c->gid = group_id(key, members, n);
    c->ctx = ctx;
    c->size = n;
    c->rank = -1;
    snprintf(c->label, sizeof c->label, "group");
    c->members = malloc(sizeof(int) * (size_t)n);
    if (!c->members) return dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", n);
    memcpy(c->members, members, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (members[i] == ctx->rank) c->rank = i;
    return DT_OK;
}

void dt_comm_free_base(dt_comm *c) { free(c->members); }

/* Getters answer -1 for bad arguments and, like the mesh getters, say why. */
int dt_comm_rank(const dt_comm *comm) {
    if (!comm) return dt_error(DT_ERR_ARG, "dt_comm_rank: argument comm is NULL"), -1;
    return comm->rank;
}

int dt_comm_size(const dt_comm *comm) {
    if (!comm) return dt_error(DT_ERR_ARG, "dt_comm_size: argument comm is NULL"), -1;
    return comm->size;
}

int dt_comm_world_rank(const dt_comm *comm, int group_rank) {
    if (!comm) return dt_error(DT_ERR_ARG, "dt_comm_world_rank: argument comm is NULL"), -1;
    if (group_rank < 0 || group_rank >= comm->size)
        return dt_error(DT_ERR_ARG, "dt_comm_world_rank: argument group_rank = %d is not in [0, %d)",
                        group_rank, comm->size),
               -1;
    return comm->members[group_rank];
}

dt_status dt_comm_destroy(dt_comm *comm) {
    if (comm) comm->ops->destroy(comm);
    return DT_OK;
}

/* Packed displacements for counts, in a caller-provided or heap array. */
static dt_status packed_displs(const size_t *counts, int n, size_t **out) {
    size_t *d = malloc(sizeof(size_t) * (size_t)n);
    if (!d) return dt_error(DT_ERR_NOMEM, "displacements for %d ranks: out of memory", n);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        d[i] = off;
        off += counts[i];
    }
    *out = d;
    return DT_OK;
}

static dt_status equal_counts(size_t count, int n, size_t **out) {
    size_t *c = malloc(sizeof(size_t) * (size_t)n);
    if (!c) return dt_error(DT_ERR_NOMEM, "counts for %d ranks: out of memory", n);
    for (int i = 0; i < n; i++) c[i] = count;
    *out = c;
    return DT_OK;
}

dt_status dt_all_reduce(dt_comm *comm, const void *send, void *recv, size_t count, dt_dtype dtype,
                        dt_reduce_op op) {
    COMM_CHECK(comm);
    DTYPE_CHECK(dtype);
    OP_CHECK(op);
    REDUCE_DTYPE_CHECK(dtype);
    BUF_CHECK(send, count);
    BUF_CHECK(recv, count);
    IN_ORDER(comm, dt_call_all_reduce, .send = send, .recv = recv, .count = count, .dtype = dtype,
             .op = op);
    DT_CHECK(issue(comm, DT_COLL_ALL_REDUCE, (int64_t)count, dtype, op, -1));
    double t0 = comm->issued_us;
    dt_status st = comm->ops->all_reduce(comm, send, recv, count, dtype, op);
    if (st == DT_OK) {
        size_t b = count * dt_dtype_size(dtype);
        dt_comm_count(comm, DT_COLL_ALL_REDUCE, b, b, t0);
    }
    return st;
}

dt_status dt_all_gatherv(dt_comm *comm, const void *send, void *recv, const size_t *recvcounts,
                         const size_t *displs, dt_dtype dtype) {
    COMM_CHECK(comm);
    DTYPE_CHECK(dtype);
    DT_ARG_NOT_NULL(recvcounts);
    BUF_CHECK(send, recvcounts[comm->rank]);
    size_t total = 0;
    for (int i = 0; i < comm->size; i++) total += recvcounts[i];
    BUF_CHECK(recv, total);
    IN_ORDER(comm, dt_call_all_gatherv, .send = send, .recv = recv, .c1 = recvcounts, .d1 = displs,
             .dtype = dtype);
    DT_CHECK(issue(comm, DT_COLL_ALL_GATHER, (int64_t)total, dtype, -1, -1));
    size_t *own = NULL;
    if (!displs) {
        DT_CHECK(packed_displs(recvcounts, comm->size, &own));
        displs = own;
    }
    double t0 = comm->issued_us;
    dt_status st = comm->ops->all_gatherv(comm, send, recv, recvcounts, displs, dtype);
    free(own);
    if (st == DT_OK)
        dt_comm_count(comm, DT_COLL_ALL_GATHER, recvcounts[comm->rank] * dt_dtype_size(dtype),
                      total * dt_dtype_size(dtype), t0);
    return st;
}

dt_status dt_all_gather(dt_comm *comm, const void *send, void *recv, size_t count, dt_dtype dtype) {
    COMM_CHECK(comm);
    size_t *counts = NULL;
    DT_CHECK(equal_counts(count, comm->size, &counts));
    dt_status st = dt_all_gatherv(comm, send, recv, counts, NULL, dtype);
    free(counts);
    return st;
}

dt_status dt_reduce_scatterv(dt_comm *comm, const void *send, void *recv, const size_t *recvcounts,
                             dt_dtype dtype, dt_reduce_op op) {
    COMM_CHECK(comm);
    DTYPE_CHECK(dtype);
    OP_CHECK(op);
    REDUCE_DTYPE_CHECK(dtype);
    DT_ARG_NOT_NULL(recvcounts);
    size_t total = 0;
    for (int i = 0; i < comm->size; i++) total += recvcounts[i];
    BUF_CHECK(send, total);
    BUF_CHECK(recv, recvcounts[comm->rank]);
    IN_ORDER(comm, dt_call_reduce_scatterv, .send = send, .recv = recv, .c1 = recvcounts,
             .dtype = dtype, .op = op);
    DT_CHECK(issue(comm, DT_COLL_REDUCE_SCATTER, (int64_t)total, dtype, op, -1));
    size_t *displs = NULL;
    DT_CHECK(packed_displs(recvcounts, comm->size, &displs));
    double t0 = comm->issued_us;
    dt_status st = comm->ops->reduce_scatterv(comm, send, recv, recvcounts, displs, dtype, op);
    free(displs);
    if (st == DT_OK)
        dt_comm_count(comm, DT_COLL_REDUCE_SCATTER, total * dt_dtype_size(dtype),
                      recvcounts[comm->rank] * dt_dtype_size(dtype), t0);
    return st;
}

dt_status dt_reduce_scatter(dt_comm *comm, const void *send, void *recv, size_t count,
                            dt_dtype dtype, dt_reduce_op op) {
    COMM_CHECK(comm);
    size_t *counts = NULL;
    DT_CHECK(equal_counts(count, comm->size, &counts));
    dt_status st = dt_reduce_scatterv(comm, send, recv, counts, dtype, op);
    free(counts);
    return st;
}

dt_status dt_all_to_allv(dt_comm *comm, const void *send, const size_t *sendcounts,
                         const size_t *sdispls, void *recv, const size_t *recvcounts,
                         const size_t *rdispls, dt_dtype dtype) {
    COMM_CHECK(comm);
    DTYPE_CHECK(dtype);
    DT_ARG_NOT_NULL(sendcounts);
    DT_ARG_NOT_NULL(recvcounts);
    size_t stotal = 0, rtotal = 0;
    for (int i = 0; i < comm->size; i++) {
        stotal += sendcounts[i];
        rtotal += recvcounts[i];
    }
    BUF_CHECK(send, stotal);
    BUF_CHECK(recv, rtotal);
    IN_ORDER(comm, dt_call_all_to_allv, .send = send, .recv = recv, .c1 = sendcounts, .d1 = sdispls,
             .c2 = recvcounts, .d2 = rdispls, .dtype = dtype);
    /* Counts differ by rank by design; the backends check that they pair up. */
    DT_CHECK(issue(comm, DT_COLL_ALL_TO_ALL, -1, dtype, -1, -1));
    size_t *own_s = NULL, *own_r = NULL;
    dt_status st = DT_OK;
    if (!sdispls) DT_CHECK_GOTO(packed_displs(sendcounts, comm->size, &own_s), st, out);
    if (!rdispls) DT_CHECK_GOTO(packed_displs(recvcounts, comm->size, &own_r), st, out);
    double t0 = comm->issued_us;
    st = comm->ops->all_to_allv(comm, send, sendcounts, sdispls ? sdispls : own_s, recv,
                                recvcounts, rdispls ? rdispls : own_r, dtype);
    if (st == DT_OK)
        dt_comm_count(comm, DT_COLL_ALL_TO_ALL, stotal * dt_dtype_size(dtype),
                      rtotal * dt_dtype_size(dtype), t0);
out:
    free(own_r);
    free(own_s);
    return st;
}

dt_status dt_all_to_all(dt_comm *comm, const void *send, void *recv, size_t count, dt_dtype dtype) {
    COMM_CHECK(comm);
    size_t *counts = NULL;
    DT_CHECK(equal_counts(count, comm->size, &counts));
    dt_status st = dt_all_to_allv(comm, send, counts, NULL, recv, counts, NULL, dtype);
    free(counts);
    return st;
}

dt_status dt_broadcast(dt_comm *comm, void *buf, size_t count, dt_dtype dtype, int root) {
    COMM_CHECK(comm);
    DTYPE_CHECK(dtype);
    BUF_CHECK(buf, count);
    DT_ARG(root >= 0 && root < comm->size, "dt_broadcast: argument root = %d is not a rank of the "
                                           "group of %d", root, comm->size);
    IN_ORDER(comm, dt_call_broadcast, .recv = buf, .count = count, .dtype = dtype, .root = root);
    DT_CHECK(issue(comm, DT_COLL_BROADCAST, (int64_t)count, dtype, -1, root));
    size_t b = count * dt_dtype_size(dtype);
    double t0 = comm->issued_us;
    dt_status st = comm->ops->broadcast(comm, buf, b, root);
    if (st == DT_OK) dt_comm_count(comm, DT_COLL_BROADCAST, b, b, t0);
    return st;
}

#define PEER_CHECK(comm, peer)                                                                     \
    DT_ARG((peer) >= 0 && (peer) < (comm)->size && (peer) != (comm)->rank,                        \
           "%s: argument peer = %d is not another rank of the group of %d (this rank is %d)",     \
           __func__, (peer), (comm)->size, (comm)->rank)

/* A send or receive's flight recorder entry (no fingerprint: point to point pairs no group). */
static void p2p_begin(dt_comm *comm, dt_coll_kind kind, size_t bytes, int peer) {
    dt_coll_fp fp = {.kind = kind, .count = (int64_t)bytes, .dtype = -1, .op = -1, .root = -1};
    comm->issued_us = dt_now_us();
    dt_flight_begin(comm, &fp, comm->members[peer]);
}

dt_status dt_send(dt_comm *comm, const void *buf, size_t count, dt_dtype dtype, int peer) {
    COMM_CHECK(comm);
    DTYPE_CHECK(dtype);
    BUF_CHECK(buf, count);
    PEER_CHECK(comm, peer);
    size_t b = count * dt_dtype_size(dtype);
    p2p_begin(comm, DT_COLL_SEND, b, peer);
    double t0 = comm->issued_us;
    dt_status st = comm->ops->send(comm, buf, b, peer);
    if (st == DT_OK) dt_comm_count(comm, DT_COLL_SEND, b, 0, t0);
    return st;
}

dt_status dt_recv(dt_comm *comm, void *buf, size_t count, dt_dtype dtype, int peer) {
    COMM_CHECK(comm);
    DTYPE_CHECK(dtype);
    BUF_CHECK(buf, count);
    PEER_CHECK(comm, peer);
    size_t b = count * dt_dtype_size(dtype);
    p2p_begin(comm, DT_COLL_RECV, b, peer);
    double t0 = comm->issued_us;
    dt_status st = comm->ops->recv(comm, buf, b, peer);
    if (st == DT_OK) dt_comm_count(comm, DT_COLL_RECV, 0, b, t0);
    return st;
}

dt_status dt_barrier(dt_comm *comm) {
    COMM_CHECK(comm);
    IN_ORDER(comm, dt_call_barrier, .count = 0);
    DT_CHECK(issue(comm, DT_COLL_BARRIER, -1, -1, -1, -1));
    double t0 = comm->issued_us;
    dt_status st = comm->ops->barrier(comm);
    if (st == DT_OK) dt_comm_count(comm, DT_COLL_BARRIER, 0, 0, t0);
    return st;
}

/* A dtype of the given element size, for moving bytes through typed collectives. */
static dt_dtype carrier(size_t es) { return es == 2 ? DT_F16 : es == 8 ? DT_F64 : DT_F32; }

/* Whether the backend's box form (op: exchange_boxes, gather_boxes or reduce_scatter_boxes)
 * takes these arrays: it exists, no request ever queued on the communicator, and the backend
 * agrees. */
static dt_status boxes_here(dt_comm *c, const void *op, const void *src, const void *dst,
                            int *out) {
    *out = op && !c->had_requests;
    if (*out && c->ops->boxes_here) return c->ops->boxes_here(c, src, dst, out);
    return DT_OK;
}

/* The fallback: pack each destination's box, all_to_allv, unpack each source's box. The
 * buffers live where the arrays do (host or GPU). */
static dt_status exchange_packed(dt_comm *c, int ndim, size_t es, const void *src,
                                 const int64_t *src_shape, const dt_box *send, void *dst,
                                 const int64_t *dst_shape, const dt_box *recv) {
    int n = c->size;
    const dt_mem_ops *mem = dt_mem_ops_of(dt_mem_kind_of(src ? src : dst));
    size_t *sc = malloc(sizeof(size_t) * (size_t)n), *rc = malloc(sizeof(size_t) * (size_t)n);
    size_t stotal = 0, rtotal = 0, o = 0;
    char *sbuf = NULL, *rbuf = NULL;
    dt_status st = DT_OK;
    if (!sc || !rc) {
        st = dt_error(DT_ERR_NOMEM, "exchange_boxes: out of memory");
        goto out;
    }
    for (int k = 0; k < n; k++) {
        stotal += sc[k] = dt_shape_numel(send[k].ext, ndim);
        rtotal += rc[k] = dt_shape_numel(recv[k].ext, ndim);
    }
    sbuf = mem->alloc(stotal * es);
    rbuf = mem->alloc(rtotal * es);
    if (!sbuf || !rbuf) {
        st = dt_error(DT_ERR_NOMEM, "exchange_boxes: out of memory");
        goto out;
    }
    for (int k = 0; k < n && st == DT_OK; o += sc[k], k++)
        st = mem->box_copy(sbuf + o * es, send[k].ext, NULL, src, src_shape, send[k].off,
                           send[k].ext, ndim, es);
    /* all_to_allv counts in units of es bytes */
    if (st == DT_OK) st = dt_all_to_allv(c, sbuf, sc, NULL, rbuf, rc, NULL, carrier(es));
    o = 0;
    for (int k = 0; st == DT_OK && k < n; o += rc[k], k++)
        st = mem->box_copy(dst, dst_shape, recv[k].off, rbuf + o * es, recv[k].ext, NULL,
                           recv[k].ext, ndim, es);
out:
    mem->free(rbuf);
    mem->free(sbuf);
    free(rc);
    free(sc);
    return st;
}

/* Backends that copy boxes between ranks' arrays themselves, by exchange_boxes. */
static int direct_boxes(const dt_comm *c) {
    return c->ops->direct && c->ops->exchange_boxes && !c->had_requests;
}

dt_status dt_comm_gather_boxes_here(dt_comm *c, size_t es, const void *src, const void *dst,
                                    int *out) {
    COMM_CHECK(c);
    *out = 0;
    if (es != 2 && es != 4 && es != 8) return DT_OK;
    if (direct_boxes(c)) {
        *out = 1;
        return DT_OK;
    }
    return boxes_here(c, c->ops->gather_boxes, src, dst, out);
}

dt_status dt_comm_reduce_scatter_boxes(dt_comm *c, int ndim, const void *src,
                                       const int64_t *shape, const dt_box *boxes, void *dst,
                                       dt_dtype dtype, dt_reduce_op op) {
    COMM_CHECK(c);
    DTYPE_CHECK(dtype);
    OP_CHECK(op);
    REDUCE_DTYPE_CHECK(dtype);
    const size_t es = dt_dtype_size(dtype), total = dt_shape_numel(shape, ndim);
    size_t *counts = malloc(sizeof(size_t) * (size_t)c->size);
    if (!counts) return dt_error(DT_ERR_NOMEM, "reduce_scatter_boxes: out of memory");
    for (int k = 0; k < c->size; k++) counts[k] = dt_shape_numel(boxes[k].ext, ndim);
    /* The same choice on every rank: by the backend and had_requests; host memory is what
     * every member's tensor is in when this one's is (one mesh, one device kind). */
    int here = 0;
    dt_status st = boxes_here(c, c->ops->reduce_scatter_boxes, src, dst, &here);
    if (st != DT_OK) {
        free(counts);
        return st;
    }
    if (!here || dt_mem_kind_of(src) != DT_DEVICE_CPU) {
        const dt_mem_ops *mem = dt_mem_ops_of(dt_mem_kind_of(src));
        char *packed = mem->alloc(total * es), *p = packed;
        if (!packed) st = dt_error(DT_ERR_NOMEM, "reduce_scatter_boxes: %zu bytes", total * es);
        for (int k = 0; k < c->size && st == DT_OK; p += counts[k] * es, k++)
            st = mem->box_copy(p, boxes[k].ext, NULL, src, shape, boxes[k].off, boxes[k].ext, ndim,
                               es);
        if (st == DT_OK) st = dt_reduce_scatterv(c, packed, dst, counts, dtype, op);
        mem->free(packed);
        free(counts);
        return st;
    }
    st = issue(c, DT_COLL_REDUCE_SCATTER, (int64_t)total, dtype, op, -1);
    double t0 = c->issued_us;
    if (st == DT_OK) st = c->ops->reduce_scatter_boxes(c, ndim, src, shape, boxes, dst, dtype, op);
    if (st == DT_OK) dt_comm_count(c, DT_COLL_REDUCE_SCATTER, total * es, counts[c->rank] * es, t0);
    free(counts);
    return st;
}

bool dt_comm_all_reduce_bufs_here(const dt_comm *c) {
    return c && c->ops->all_reduce_bufs && !c->had_requests;
}

dt_status dt_comm_all_reduce_bufs(dt_comm *c, void *const *bufs, const size_t *counts, int n,
                                  dt_dtype dtype, dt_reduce_op op) {
    COMM_CHECK(c);
    DTYPE_CHECK(dtype);
    OP_CHECK(op);
    REDUCE_DTYPE_CHECK(dtype);
    DT_ARG(n >= 0 && (n == 0 || (bufs && counts)),
           "%s: argument n = %d with bufs %p and counts %p", __func__, n, (const void *)bufs,
           (const void *)counts);
    DT_ARG(dt_comm_all_reduce_bufs_here(c),
           "%s: the backend cannot reduce the arrays in place here (check "
           "dt_comm_all_reduce_bufs_here first)",
           __func__);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        BUF_CHECK(bufs[i], counts[i]);
        total += counts[i];
    }
    DT_CHECK(issue(c, DT_COLL_ALL_REDUCE, (int64_t)total, dtype, op, -1));
    double t0 = c->issued_us;
    dt_status st = c->ops->all_reduce_bufs(c, bufs, counts, n, dtype, op);
    if (st == DT_OK) {
        size_t b = total * dt_dtype_size(dtype);
        dt_comm_count(c, DT_COLL_ALL_REDUCE, b, b, t0);
    }
    return st;
}

/* gather_boxes on a direct backend: exchange_boxes with this rank's whole array for everyone. */
static dt_status gather_by_exchange(dt_comm *c, int ndim, size_t es, const void *src,
                                    const int64_t *src_shape, void *dst,
                                    const int64_t *dst_shape, const dt_box *recv) {
    dt_box *send = calloc((size_t)c->size, sizeof *send);
    if (!send) return dt_error(DT_ERR_NOMEM, "gather_boxes: out of memory");
    for (int k = 0; k < c->size; k++)
        memcpy(send[k].ext, src_shape, sizeof(int64_t) * (size_t)ndim);
    dt_status st = c->ops->exchange_boxes(c, ndim, es, src, src_shape, send, dst, dst_shape, recv);
    free(send);
    return st;
}

dt_status dt_comm_gather_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                               const int64_t *src_shape, void *dst, const int64_t *dst_shape,
                               const dt_box *recv) {
    COMM_CHECK(c);
    const int direct = direct_boxes(c);
    DT_ARG((direct || c->ops->gather_boxes) && (es == 2 || es == 4 || es == 8),
           "gather_boxes: the %s backend does not copy boxes (element size %zu)", c->ops->name, es);
    dt_status st = issue(c, DT_FP_EXCHANGE_BOXES, -1, -1, -1, -1);
    double t0 = c->issued_us;
    if (st == DT_OK)
        st = direct ? gather_by_exchange(c, ndim, es, src, src_shape, dst, dst_shape, recv)
                    : c->ops->gather_boxes(c, ndim, es, src, src_shape, dst, dst_shape, recv);
    if (st == DT_OK) {
        size_t out = 0;
        for (int k = 0; k < c->size; k++) out += dt_shape_numel(recv[k].ext, ndim) * es;
        dt_comm_count(c, DT_COLL_ALL_GATHER, dt_shape_numel(src_shape, ndim) * es, out, t0);
    }
    return st;
}

dt_status dt_comm_exchange_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                                 const int64_t *src_shape, const dt_box *send, void *dst,
                                 const int64_t *dst_shape, const dt_box *recv) {
    COMM_CHECK(c);
    DT_ARG(es == 2 || es == 4 || es == 8, "exchange_boxes: element size %zu", es);
    /* The packed form is an all_to_allv, which queues behind pending requests (issue order).
     * The choice must be the same on every rank: by had_requests, not by pending. */
    int here;
    DT_CHECK(boxes_here(c, c->ops->exchange_boxes, src, dst, &here));
    if (!here) return exchange_packed(c, ndim, es, src, src_shape, send, dst, dst_shape, recv);
    DT_CHECK(issue(c, DT_FP_EXCHANGE_BOXES, -1, -1, -1, -1));
    double t0 = c->issued_us;
    dt_status st = c->ops->exchange_boxes(c, ndim, es, src, src_shape, send, dst, dst_shape, recv);
    if (st == DT_OK) {
        size_t in = 0, out = 0;
        for (int k = 0; k < c->size; k++) {
            in += dt_shape_numel(send[k].ext, ndim) * es;
            out += dt_shape_numel(recv[k].ext, ndim) * es;
        }
        dt_comm_count(c, DT_COLL_ALL_TO_ALL, in, out, t0);
    }
    return st;
}
