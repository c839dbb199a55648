/* ncclsim: NCCL on cudasim (see include/nccl.h). A communicator of one rank copies (or does
 * nothing, in place); one of several ranks (one process each, as dtrun starts them) moves the
 * data through a shared-memory segment named from its ncclUniqueId (ncclsim_shm.cpp). Each
 * group's work is queued on the caller's stream as NCCL's kernel would be: at the call (blocking
 * communicators) or, for a non-blocking one, when ncclCommGetAsyncError first reports the call
 * done; it runs when that stream is waited for, and waits there for the peers (bounded by
 * NCCLSIM_TIMEOUT_S). A test tool: it exercises the callers' plumbing, never NCCL. It holds the
 * callers to NCCL's contract where real NCCL would fail, hang or corrupt memory (these fail
 * here, with a message): a call on a non-blocking communicator whose previous call is still
 * ncclInProgress, a communicator used after ncclCommDestroy or ncclCommAbort (kept, never
 * freed, so that the use is seen), ncclCommFinalize twice or an operation after it, host memory
 * passed as a buffer, an ncclConfig_t not made by NCCL_CONFIG_INITIALIZER, two threads inside
 * NCCL calls at once (NCCL's calls on one device must not run in parallel; NCCLSIM_SLOW_US=N
 * makes each call last N us, to see more of them), two threads polling one communicator at
 * once, a peer or root outside the communicator, and ranks that disagree on a collective or on
 * a send's size (an asynchronous error on the communicator). */
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "nccl.h"
#include "ncclsim_shm.h"

namespace {

const unsigned LIVE = 0x6e63636c, DEAD = 0xdeadc0de;

/* One operation of a group: for one rank, the copy NCCL's kernel would make; for several, what
 * the shared segment runs. */
struct work {
    void *dst;
    const void *src;
    size_t bytes;
    cudaStream_t stream;
    shm_op op;
};

/* A group's work on one communicator, not yet queued on its stream. */
struct batch {
    cudaStream_t stream; /* the first operation's: the group runs there as one piece of work */
    std::vector<work> ops;
};

} // namespace

struct ncclComm {
    unsigned magic;
    int blocking;
    int finalized;
    ncclResult_t state;         /* what ncclCommGetAsyncError answers next */
    std::vector<batch> pending; /* non-blocking: queued once the call is seen done */
    std::atomic<int> polling;
    int n, rank;
    shm_comm *shm;  /* several ranks: the data path (nullptr for one rank, after destroy) */
    int connecting; /* non-blocking init: InProgress until every rank joined */
    std::atomic<int> async_err; /* set by its work on a stream (a peer failed, or disagreed) */
    char async_msg[256];
};

namespace {

thread_local char last_error[256] = "";
thread_local int group_depth;
thread_local std::vector<std::pair<ncclComm *, work>> group_work; /* the open group's copies */
thread_local std::vector<ncclComm *> group_comms;                 /* its communicators */
std::atomic<long> calls;
std::atomic<int> in_call; /* threads inside an NCCL call (or an open group) now */

ncclResult_t fail(ncclResult_t r, const char *msg) {
    snprintf(last_error, sizeof last_error, "ncclsim: %s", msg);
    return r;
}

/* A contract violation: said on stderr too, as real NCCL would often crash instead. */
ncclResult_t misuse(ncclResult_t r, const char *msg) {
    fprintf(stderr, "ncclsim: NCCL misuse: %s\n", msg);
    return fail(r, msg);
}

/* Calls into NCCL from two threads at once (on one device) are not allowed: each call, and an
 * open group, holds this. */
struct api_call {
    bool clash;
    api_call() : clash(group_depth == 0 && in_call.fetch_add(1) != 0) {
        static long slow = getenv("NCCLSIM_SLOW_US") ? atol(getenv("NCCLSIM_SLOW_US")) : 0;
        if (slow > 0) usleep((useconds_t)slow); /* widens the window in which a clash is seen */
    }
    ~api_call() {
        if (group_depth == 0) in_call.fetch_sub(1);
    }
};

bool device_ptr(const void *p) {
    cudaPointerAttributes a;
    return cudaPointerGetAttributes(&a, p) == cudaSuccess &&
           (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
}

/* An error left by the communicator's work on a stream becomes its state. */
void collect(ncclComm *c) {
    int e = c->async_err.load();
    if (e && (c->state == ncclSuccess || c->state == ncclInProgress)) {
        c->state = (ncclResult_t)e;
        snprintf(last_error, sizeof last_error, "%s", c->async_msg);
    }
}

/* The communicator is alive and ready for its next call (NCCL's ncclCommEnsureReady). */
ncclResult_t ready(ncclComm *c) {
    if (!c) return fail(ncclInvalidArgument, "NULL communicator");
    if (c->magic != LIVE)
        return misuse(ncclInvalidArgument, "communicator used after ncclCommDestroy/Abort");
    if (c->state == ncclInProgress)
        return misuse(ncclInvalidArgument, "Attempt to use communicator before the previous "
                                           "operation returned ncclSuccess");
    collect(c);
    return c->state;
}

/* Several ranks: the group runs through the segment when its stream gets there. A communicator
 * that failed (or was aborted) runs nothing more, as NCCL's aborted kernels do not. */
void run_batch(ncclComm *c, const std::vector<shm_op> &ops) {
    if (c->magic != LIVE || !c->shm || c->async_err.load()) return;
    char err[sizeof c->async_msg];
    ncclResult_t r = shm_run(c->shm, ops, err, sizeof err);
    if (r == ncclSuccess) return;
    snprintf(c->async_msg, sizeof c->async_msg, "%s", err);
    c->async_err.store(r);
}

void queue(ncclComm *c, const batch &b) {
    if (!c->shm) {
        for (const work &w : b.ops)
            if (w.bytes) cudaMemcpyAsync(w.dst, w.src, w.bytes, cudaMemcpyDeviceToDevice, w.stream);
        return;
    }
    std::vector<shm_op> ops;
    for (const work &w : b.ops)
        ops.push_back(w.op);
    cudasim_enqueue(b.stream, [c, ops] { run_batch(c, ops); });
}

/* The end of a group (or of a call outside one): its work is queued, one batch a communicator,
 * at once for blocking communicators, once seen done for non-blocking ones. */
ncclResult_t launch() {
    ncclResult_t r = ncclSuccess;
    for (ncclComm *c : group_comms) {
        batch b = {nullptr, {}};
        for (auto &cw : group_work)
            if (cw.first == c) b.ops.push_back(cw.second);
        b.stream = b.ops.empty() ? nullptr : b.ops[0].stream;
        if (c->blocking)
            queue(c, b);
        else
            c->pending.push_back(b);
    }
    for (ncclComm *c : group_comms) {
        if (c->blocking) continue;
        if (c->state == ncclSuccess) c->state = ncclInProgress;
        r = c->state == ncclInProgress && r == ncclSuccess ? ncclInProgress
            : c->state != ncclInProgress                   ? c->state
                                                           : r;
    }
    group_work.clear();
    group_comms.clear();
    return r;
}

/* dst/src: what a one-rank communicator copies; o: what several ranks run. */
ncclResult_t op(void *dst, const void *src, ncclComm *c, cudaStream_t s, const shm_op &o) {
    api_call a;
    if (a.clash) return misuse(ncclInvalidUsage, "NCCL called from two threads at once");
    ncclResult_t r = ready(c);
    if (r != ncclSuccess) return r;
    if (c->finalized) return misuse(ncclInvalidUsage, "operation on a finalized communicator");
    size_t count = o.count;
    if (count && ((dst && !device_ptr(dst)) || (src && !device_ptr(src))))
        return misuse(ncclInvalidArgument, "a buffer in host memory (NCCL takes device memory)");
    bool rooted = o.kind != shm_op::ALL_REDUCE && o.kind != shm_op::ALL_GATHER &&
                  o.kind != shm_op::REDUCE_SCATTER;
    if (rooted && (o.peer < 0 || o.peer >= c->n)) {
        char m[128];
        snprintf(m, sizeof m, "%s %d is not a rank of this communicator of %d",
                 o.kind == shm_op::SEND || o.kind == shm_op::RECV ? "peer" : "root", o.peer, c->n);
        return misuse(ncclInvalidArgument, m);
    }
    long n = ++calls;
    const char *f = getenv("NCCLSIM_FAIL_AFTER"), *fr = getenv("NCCLSIM_FAIL_RANK");
    int mine = !fr || (getenv("RANK") && !strcmp(fr, getenv("RANK")));
    if (f && n == atol(f) && mine) {
        c->state = ncclRemoteError;
        snprintf(last_error, sizeof last_error, "ncclsim: injected remote error at call %ld", n);
        return ncclSuccess;
    }
    bool copy = count && dst && src && dst != src;
    work w = {dst, src, copy ? count * shm_type_size(o.type) : 0, s, o};
    group_work.emplace_back(c, w);
    bool known = false;
    for (ncclComm *g : group_comms)
        known = known || g == c;
    if (!known) group_comms.push_back(c);
    return group_depth ? ncclSuccess : launch();
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static std::atomic<unsigned> seq;
    unsigned seed = (unsigned)getpid() * 2654435761u + seq++; /* unique per process and call */
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        id->internal[i] = (char)rand_r(&seed);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
    api_call a;
    if (a.clash) return misuse(ncclInvalidUsage, "NCCL called from two threads at once");
    if (getenv("NCCLSIM_LOG")) {
        unsigned h = 2166136261u;
        for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
            h = (h ^ (unsigned char)id.internal[i]) * 16777619u;
        fprintf(stderr, "ncclsim: init rank %d of %d, id %08x\n", rank, nranks, h);
    }
    if (config && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)))
        return misuse(ncclInvalidArgument, "ncclConfig_t not set by NCCL_CONFIG_INITIALIZER");
    if (config && config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 &&
        config->blocking != 1)
        return misuse(ncclInvalidArgument, "config.blocking is not 0 or 1");
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        char m[96];
        snprintf(m, sizeof m, "rank %d of a communicator of %d ranks", rank, nranks);
        return misuse(ncclInvalidArgument, m);
    }
    shm_comm *shm = nullptr;
    if (nranks > 1 && !(shm = shm_join(id, nranks, rank, last_error, sizeof last_error)))
        return ncclSystemError;
    ncclComm *c = new ncclComm();
    c->magic = LIVE;
    c->blocking = !config || config->blocking != 0;
    c->n = nranks;
    c->rank = rank;
    c->shm = shm;
    *comm = c;
    if (c->blocking) {
        /* NCCL's blocking init returns once every rank has joined */
        int k;
        while (shm && (k = shm_connected(shm, last_error, sizeof last_error)) == 0) {
        }
        if (shm && k < 0) {
            c->state = ncclRemoteError;
            return ncclRemoteError;
        }
        return ncclSuccess;
    }
    c->connecting = shm != nullptr;
    c->state = ncclInProgress;
    return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    api_call a;
    if (a.clash) return misuse(ncclInvalidUsage, "NCCL called from two threads at once");
    ncclResult_t r = ready(comm);
    if (r != ncclSuccess) return r;
    if (comm->finalized) return misuse(ncclInvalidArgument, "ncclCommFinalize called twice");
    comm->finalized = 1;
    if (comm->blocking) return ncclSuccess;
    comm->state = ncclInProgress;
    return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    api_call a;
    if (a.clash) return misuse(ncclInvalidUsage, "NCCL called from two threads at once");
    if (!comm) return ncclSuccess;
    ncclResult_t r = ready(comm);
    if (r != ncclSuccess) return r; /* as NCCL: not destroyed, abort it */
    comm->magic = DEAD;             /* kept, so that a later use is seen */
    if (comm->shm) shm_leave(comm->shm);
    comm->shm = nullptr;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (comm->magic != LIVE)
        return misuse(ncclInvalidArgument, "ncclCommAbort of a destroyed or aborted communicator");
    comm->magic = DEAD;
    comm->pending.clear(); /* aborted work never runs */
    /* the peers' waits end; the mapping stays, as work still queued may look at it */
    if (comm->shm) shm_abort(comm->shm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
    if (!comm) return fail(ncclInvalidArgument, "NULL communicator");
    if (comm->magic != LIVE)
        return misuse(ncclInvalidArgument, "ncclCommGetAsyncError after ncclCommDestroy/Abort");
    if (comm->polling.fetch_add(1) != 0) {
        comm->polling.fetch_sub(1);
        return misuse(ncclInvalidUsage, "two threads poll one communicator at once");
    }
    if (comm->connecting) { /* a non-blocking init: done once every rank has joined */
        int k = shm_connected(comm->shm, comm->async_msg, sizeof comm->async_msg);
        if (k != 0) comm->connecting = 0;
        if (k > 0) comm->state = ncclSuccess;
        if (k < 0) comm->async_err.store(comm->state = ncclRemoteError);
        *err = comm->state;
        comm->polling.fetch_sub(1);
        return ncclSuccess;
    }
    collect(comm);
    *err = comm->state;
    if (comm->state == ncclInProgress) { /* done next time: its kernels are queued now */
        for (const batch &b : comm->pending)
            queue(comm, b);
        comm->pending.clear();
        comm->state = ncclSuccess;
    }
    comm->polling.fetch_sub(1);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    static const char *const s[] = {"no error",
                                    "unhandled cuda error",
                                    "unhandled system error",
                                    "internal error",
                                    "invalid argument",
                                    "invalid usage",
                                    "remote process exited or there was a network error",
                                    "NCCL operation in progress"};
    return (unsigned)r < sizeof s / sizeof s[0] ? s[r] : "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm) {
    if (comm && comm->async_err.load()) return comm->async_msg;
    return last_error;
}

ncclResult_t ncclGroupStart(void) {
    if (group_depth == 0 && in_call.fetch_add(1) != 0) {
        in_call.fetch_sub(1);
        return misuse(ncclInvalidUsage, "NCCL called from two threads at once");
    }
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth) return ncclSuccess;
    ncclResult_t r = launch();
    in_call.fetch_sub(1);
    return r;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op_, ncclComm_t comm, cudaStream_t s) {
    if (count && (!send || !recv)) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, comm, s, {shm_op::ALL_REDUCE, send, recv, count, dt, op_, -1});
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t s) {
    if (count && !recv) return fail(ncclInvalidArgument, "NULL buffer");
    if (count && comm && comm->magic == LIVE && comm->rank == root && !send)
        return fail(ncclInvalidArgument, "NULL send buffer on the root");
    return op(recv, send, comm, s, {shm_op::BROADCAST, send, recv, count, dt, ncclSum, root});
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op_, int root, ncclComm_t comm, cudaStream_t s) {
    if (count && !send) return fail(ncclInvalidArgument, "NULL buffer");
    if (count && comm && comm->magic == LIVE && comm->rank == root && !recv)
        return fail(ncclInvalidArgument, "NULL receive buffer on the root");
    return op(recv, send, comm, s, {shm_op::REDUCE, send, recv, count, dt, op_, root});
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t s) {
    if (count && (!send || !recv)) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, comm, s, {shm_op::ALL_GATHER, send, recv, count, dt, ncclSum, -1});
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op_, ncclComm_t comm, cudaStream_t s) {
    if (count && (!send || !recv)) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, comm, s, {shm_op::REDUCE_SCATTER, send, recv, count, dt, op_, -1});
}

/* A send and its receive: between two ranks of one communicator (a rank may send to itself). */
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s) {
    if (comm && comm->magic == LIVE && comm->n == 1)
        return fail(ncclInvalidUsage, "send/recv need two ranks");
    if (count && !send) return fail(ncclInvalidArgument, "NULL buffer");
    return op(nullptr, send, comm, s, {shm_op::SEND, send, nullptr, count, dt, ncclSum, peer});
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s) {
    if (comm && comm->magic == LIVE && comm->n == 1)
        return fail(ncclInvalidUsage, "send/recv need two ranks");
    if (count && !recv) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, nullptr, comm, s, {shm_op::RECV, nullptr, recv, count, dt, ncclSum, peer});
}

} // extern "C"
