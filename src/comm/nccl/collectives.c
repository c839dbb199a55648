/* The collectives of the NCCL backend: each is queued on the rank's comm stream behind the work
 * already on its compute stream, and the compute stream waits for it (watch.c tracks it). The
 * call returns once NCCL has queued it. Host buffers go through a device staging buffer on a
 * private stream, and those calls return once the result is back in host memory. Unequal
 * counts become groups of NCCL collectives (one broadcast or reduce per root) or of sends and
 * receives; the generic layer (comm.c) counts and traces every call. */
#include <string.h>

#include "comm/nccl/nccl_impl.h"
#include "core/check.h"
#include "core/cuda/memory.h"
#include "core/device.h"
#include "core/reduce.h"

#define NC_KEEP_RECV 1 /* the call writes only parts of recv: the rest must survive staging */

typedef struct nc_op {
    nc_world *w;
    nc_comm *c;
    ncclComm_t comm;
    cudaStream_t stream;
    const char *what;
    int peer;   /* world rank for send/recv, -1 for collectives */
    int staged; /* stage_mu held: a host buffer goes through w->stage_buf */
    int host_recv;
    void *hrecv;
    size_t rbytes;
    const void *dsend; /* what NCCL reads and writes: the caller's or staged */
    void *drecv;
} nc_op;

static ncclDataType_t nc_type(dt_dtype dt) {
    switch (dt) {
    case DT_F32:
        return ncclFloat32;
    case DT_F64:
        return ncclFloat64;
    case DT_BF16:
        return ncclBfloat16;
    case DT_F16:
        return ncclFloat16;
    case DT_I32:
        return ncclInt32;
    case DT_I64:
        return ncclInt64;
    default:
        return ncclInt8;
    }
}

static int is_integer(dt_dtype dt) {
    return dt == DT_I32 || dt == DT_I64;
}

/* avg of integers travels as a sum and is divided once at the end, truncating as dt_scale. */
static ncclRedOp_t nc_redop(dt_reduce_op op, dt_dtype dt) {
    switch (op) {
    case DT_REDUCE_AVG:
        return is_integer(dt) ? ncclSum : ncclAvg;
    case DT_REDUCE_MAX:
        return ncclMax;
    case DT_REDUCE_MIN:
        return ncclMin;
    case DT_REDUCE_PROD:
        return ncclProd;
    default:
        return ncclSum;
    }
}

static int ok(ncclResult_t r) {
    return r == ncclSuccess || r == ncclInProgress;
}

/* Closes a group opened by ncclGroupStart; the first failure inside it wins. */
static ncclResult_t group_end(ncclResult_t r) {
    ncclResult_t e = ncclGroupEnd();
    return ok(r) ? e : r;
}

static size_t align_up(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* A failure this rank found (not the world's recorded one) is the world's from now on. */
static dt_status op_failed(nc_op *op, dt_status st) {
    if (!dt_failed(&op->w->fail)) nc_fail(op->w, st, dt_last_error());
    return st;
}

static void unstage(nc_op *op) {
    if (!op->staged) return;
    pthread_mutex_unlock(&op->w->stage_mu);
    op->staged = 0;
}

/* Host buffers into w->stage_buf (send uploaded; recv too when the call keeps parts of it). */
static dt_status stage_in(nc_op *op, const void *send, size_t sbytes, int hs, void *recv,
                          size_t rbytes, int hr, int flags) {
    nc_world *w = op->w;
    pthread_mutex_lock(&w->stage_mu);
    op->staged = 1;
    int same = hs && hr && send == recv; /* in place */
    size_t roff = hs && !same ? align_up(sbytes) : 0;
    size_t need = same ? (sbytes > rbytes ? sbytes : rbytes) : roff + (hr ? rbytes : 0);
    cudaStream_t s = w->stage_stream;
    cudaError_t e = cudaSuccess;
    if (need > w->stage_cap && w->nstage_old == (int)(sizeof w->stage_old / sizeof(void *)))
        e = cudaErrorMemoryAllocation; /* 64 doublings: not reachable */
    if (e == cudaSuccess && need > w->stage_cap) {
        size_t cap = align_up(need > 2 * w->stage_cap ? need : 2 * w->stage_cap);
        void *p = NULL;
        e = cudaMalloc(&p, cap);
        if (e == cudaSuccess) {
            if (w->stage_buf) w->stage_old[w->nstage_old++] = w->stage_buf;
            w->stage_buf = p;
            w->stage_cap = cap;
        }
    }
    char *base = w->stage_buf;
    if (e == cudaSuccess && hs) {
        op->dsend = base;
        e = cudaMemcpyAsync(base, send, sbytes, cudaMemcpyHostToDevice, s);
    }
    if (e == cudaSuccess && hr) {
        op->host_recv = 1;
        op->hrecv = recv;
        op->rbytes = rbytes;
        op->drecv = base + roff;
        if (!same && (flags & NC_KEEP_RECV))
            e = cudaMemcpyAsync(op->drecv, recv, rbytes, cudaMemcpyHostToDevice, s);
    }
    if (e == cudaSuccess) e = cudaEventRecord(w->stage_ev, s);
    if (e != cudaSuccess) {
        unstage(op);
        return op_failed(op, dt_cuda_status(e, op->what));
    }
    return DT_OK;
}

/* Starts an operation on c: stages host buffers, takes nccl_mu and orders the comm stream
 * after the compute stream. send/recv: the caller's buffers and their extents in bytes. */
static dt_status op_begin(nc_op *op, dt_comm *c, const char *what, int peer, const void *send,
                          size_t sbytes, void *recv, size_t rbytes, int flags) {
    memset(op, 0, sizeof *op);
    op->c = nc(c);
    op->w = op->c->w;
    op->what = what;
    op->peer = peer;
    op->dsend = send;
    op->drecv = recv;
    nc_world *w = op->w;
    dt_cuda_rank *cr = w->ctx.dev.cuda;
    if (!cr || cr->device != w->device)
        return op_failed(op, dt_error(DT_ERR_DEVICE,
                                      "%s: the NCCL runtime's rank %d runs on GPU %d, but its "
                                      "context was moved to another device",
                                      what, w->rank, w->device));
    if (dt_cuda_current() != cr) dt_cuda_bind(cr);
    if (dt_failed(&w->fail)) return nc_aborted_error(w, what);
    int hs = sbytes && dt_mem_kind_of(send) != DT_DEVICE_CUDA;
    int hr = rbytes && dt_mem_kind_of(recv) != DT_DEVICE_CUDA;
    if (hs || hr) DT_CHECK(stage_in(op, send, sbytes, hs, recv, rbytes, hr, flags));
    pthread_mutex_lock(&w->nccl_mu);
    op->comm = op->c->g->comm;
    op->stream = op->c->g->stream;
    if (!op->comm) { /* aborted */
        pthread_mutex_unlock(&w->nccl_mu);
        unstage(op);
        return nc_aborted_error(w, what);
    }
    cudaError_t e = cudaEventRecord(w->ready, cr->compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(op->stream, w->ready, 0);
    if (e == cudaSuccess && op->staged) e = cudaStreamWaitEvent(op->stream, w->stage_ev, 0);
    if (e != cudaSuccess) {
        pthread_mutex_unlock(&w->nccl_mu);
        unstage(op);
        return op_failed(op, dt_cuda_status(e, what));
    }
    return DT_OK;
}

/* Ends it: r is the status of the last NCCL call (or ncclGroupEnd). Waits for NCCL to have
 * queued the work, tracks it, lets go of nccl_mu; a staged call then waits for its result. */
static dt_status op_end(nc_op *op, ncclResult_t r) {
    nc_world *w = op->w;
    nc_group *g = op->c->g;
    int64_t t = atomic_load(&w->timeout_ns);
    dt_status st = ok(r) ? nc_settle(w, op->comm, r, op->what, op->c->base.label, g->n,
                                     t > 0 ? dt_boot_now_ns() + t : 0)
                         : nc_nccl_error(r, op->comm, op->what, op->c->base.label, g->n);
    if (st == DT_OK) st = nc_track(w, op->c, op->what, op->peer);
    if (st == DT_OK && op->staged)
        st = dt_cuda_status(cudaEventRecord(w->stage_done, op->stream), op->what);
    pthread_mutex_unlock(&w->nccl_mu);
    if (st == DT_OK && op->staged) {
        /* stage_buf is reused by the next staged call, and host results are read now. */
        st = nc_wait_event(w, w->stage_done, op->what);
        cudaStream_t s = w->stage_stream;
        cudaError_t e = cudaSuccess;
        if (st == DT_OK && op->host_recv) {
            e = cudaStreamWaitEvent(s, w->stage_done, 0);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(op->hrecv, op->drecv, op->rbytes, cudaMemcpyDeviceToHost, s);
            if (e == cudaSuccess) e = cudaStreamSynchronize(s);
            st = dt_cuda_status(e, op->what);
        }
    }
    unstage(op);
    return st == DT_OK ? DT_OK : op_failed(op, st);
}

/* Integer averages: the sum is divided once the reduction is done (compute stream, or host). */
static dt_status finish_avg(nc_op *op, void *recv, size_t count, dt_dtype dt, dt_reduce_op kind) {
    if (kind != DT_REDUCE_AVG || !is_integer(dt) || !count) return DT_OK;
    int n = op->c->base.size;
    if (op->host_recv) {
        dt_scale(dt, recv, count, 1, n);
        return DT_OK;
    }
    dt_status st = dt_cuda_scale(dt, recv, count, 1, n);
    return st == DT_OK ? DT_OK : op_failed(op, st);
}

dt_status nc_all_reduce(dt_comm *c, const void *send, void *recv, size_t count, dt_dtype dt,
                        dt_reduce_op kind) {
    size_t b = count * dt_dtype_size(dt);
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_all_reduce", -1, send, b, recv, b, 0));
    ncclResult_t r = ncclSuccess;
    if (count)
        r = ncclAllReduce(op.dsend, op.drecv, count, nc_type(dt), nc_redop(kind, dt), op.comm,
                          op.stream);
    DT_CHECK(op_end(&op, r));
    return finish_avg(&op, recv, count, dt, kind);
}

/* Equal counts at packed displacements: what NCCL's own all_gather / reduce_scatter take. */
static int packed_equal(const size_t *counts, const size_t *displs, int n) {
    for (int i = 0; i < n; i++)
        if (counts[i] != counts[0] || displs[i] != (size_t)i * counts[0]) return 0;
    return 1;
}

static size_t extent(const size_t *counts, const size_t *displs, int n) {
    size_t e = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] && displs[i] + counts[i] > e) e = displs[i] + counts[i];
    return e;
}

dt_status nc_all_gatherv(dt_comm *c, const void *send, void *recv, const size_t *counts,
                         const size_t *displs, dt_dtype dt) {
    int n = c->size, me = c->rank;
    size_t es = dt_dtype_size(dt);
    int equal = packed_equal(counts, displs, n);
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_all_gatherv", -1, send, counts[me] * es, recv,
                      extent(counts, displs, n) * es, equal ? 0 : NC_KEEP_RECV));
    ncclDataType_t t = nc_type(dt);
    ncclResult_t r = ncclSuccess;
    if (equal) {
        if (counts[0]) r = ncclAllGather(op.dsend, op.drecv, counts[0], t, op.comm, op.stream);
    } else if ((r = ncclGroupStart()) == ncclSuccess) {
        /* Uneven shards: one broadcast per rank that holds any, from its own send buffer. */
        for (int i = 0; i < n && ok(r); i++) {
            if (!counts[i]) continue;
            char *dst = (char *)op.drecv + displs[i] * es;
            r = ncclBroadcast(i == me ? op.dsend : dst, dst, counts[i], t, i, op.comm, op.stream);
        }
        r = group_end(r);
    }
    return op_end(&op, r);
}

dt_status nc_reduce_scatterv(dt_comm *c, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, dt_dtype dt, dt_reduce_op kind) {
    int n = c->size, me = c->rank;
    size_t es = dt_dtype_size(dt);
    int equal = packed_equal(counts, displs, n);
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_reduce_scatterv", -1, send, extent(counts, displs, n) * es, recv,
                      counts[me] * es, 0));
    ncclDataType_t t = nc_type(dt);
    ncclRedOp_t o = nc_redop(kind, dt);
    ncclResult_t r = ncclSuccess;
    if (equal) {
        if (counts[0])
            r = ncclReduceScatter(op.dsend, op.drecv, counts[0], t, o, op.comm, op.stream);
    } else if ((r = ncclGroupStart()) == ncclSuccess) {
        /* Uneven blocks: one reduce per rank whose block is not empty, rooted there. */
        for (int i = 0; i < n && ok(r); i++) {
            if (!counts[i]) continue;
            const char *src = (const char *)op.dsend + displs[i] * es;
            r = ncclReduce(src, i == me ? op.drecv : NULL, counts[i], t, o, i, op.comm, op.stream);
        }
        r = group_end(r);
    }
    DT_CHECK(op_end(&op, r));
    return finish_avg(&op, recv, counts[me], dt, kind);
}

dt_status nc_all_to_allv(dt_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                         void *recv, const size_t *rcounts, const size_t *rdispls, dt_dtype dt) {
    int n = c->size, me = c->rank;
    size_t es = dt_dtype_size(dt);
    /* NCCL cannot tell when ranks disagree on counts; this one pair it can check. */
    if (scounts[me] != rcounts[me]) {
        dt_status st = dt_error(DT_ERR_COMM,
                                "dt_all_to_allv: this rank (group rank %d) sends itself %zu "
                                "elements but expects %zu: ranks disagree on counts",
                                me, scounts[me], rcounts[me]);
        nc_fail(nc(c)->w, st, dt_last_error()); /* the others would wait for it in vain */
        return st;
    }
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_all_to_allv", -1, send, extent(scounts, sdispls, n) * es, recv,
                      extent(rcounts, rdispls, n) * es, NC_KEEP_RECV));
    ncclResult_t r = ncclSuccess;
    if (scounts[me]) {
        cudaError_t e = cudaMemcpyAsync((char *)op.drecv + rdispls[me] * es,
                                        (const char *)op.dsend + sdispls[me] * es, scounts[me] * es,
                                        cudaMemcpyDeviceToDevice, op.stream);
        if (e != cudaSuccess) {
            pthread_mutex_unlock(&op.w->nccl_mu);
            unstage(&op);
            return op_failed(&op, dt_cuda_status(e, "dt_all_to_allv"));
        }
    }
    ncclDataType_t t = nc_type(dt);
    if ((r = ncclGroupStart()) == ncclSuccess) {
        for (int k = 1; k < n && ok(r); k++) {
            int to = (me + k) % n, from = (me - k + n) % n;
            if (scounts[to])
                r = ncclSend((const char *)op.dsend + sdispls[to] * es, scounts[to], t, to, op.comm,
                             op.stream);
            if (ok(r) && rcounts[from])
                r = ncclRecv((char *)op.drecv + rdispls[from] * es, rcounts[from], t, from, op.comm,
                             op.stream);
        }
        r = group_end(r);
    }
    return op_end(&op, r);
}

dt_status nc_broadcast(dt_comm *c, void *buf, size_t bytes, int root) {
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_broadcast", -1, buf, bytes, buf, bytes, 0));
    ncclResult_t r = ncclSuccess;
    if (bytes) r = ncclBroadcast(op.dsend, op.drecv, bytes, ncclInt8, root, op.comm, op.stream);
    return op_end(&op, r);
}

dt_status nc_send(dt_comm *c, const void *buf, size_t bytes, int peer) {
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_send", c->members[peer], buf, bytes, NULL, 0, 0));
    ncclResult_t r = ncclSuccess;
    if (bytes) r = ncclSend(op.dsend, bytes, ncclInt8, peer, op.comm, op.stream);
    return op_end(&op, r);
}

dt_status nc_recv(dt_comm *c, void *buf, size_t bytes, int peer) {
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_recv", c->members[peer], NULL, 0, buf, bytes, 0));
    ncclResult_t r = ncclSuccess;
    if (bytes) r = ncclRecv(op.drecv, bytes, ncclInt8, peer, op.comm, op.stream);
    return op_end(&op, r);
}

/* A one-element all_reduce, then a wait for everything this rank queued on any communicator. */
dt_status nc_barrier(dt_comm *c) {
    nc_op op;
    DT_CHECK(op_begin(&op, c, "dt_barrier", -1, NULL, 0, NULL, 0, 0));
    int *flag = op.w->barrier_buf;
    ncclResult_t r = ncclAllReduce(flag, flag, 1, ncclInt32, ncclMax, op.comm, op.stream);
    DT_CHECK(op_end(&op, r));
    return nc_drain(op.w, NULL, "dt_barrier");
}

const dt_comm_ops nc_comm_ops = {
    .name = "nccl",
    .all_reduce = nc_all_reduce,
    .all_gatherv = nc_all_gatherv,
    .reduce_scatterv = nc_reduce_scatterv,
    .all_to_allv = nc_all_to_allv,
    .broadcast = nc_broadcast,
    .send = nc_send,
    .recv = nc_recv,
    .barrier = nc_barrier,
    .exchange_boxes = nc_exchange_boxes,
    .destroy = nc_comm_destroy,
};
