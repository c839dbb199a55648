/* ncclsim: NCCL for communicators of one rank, on cudasim (see include/nccl.h). Every
 * collective of one rank is a copy (or nothing, in place), queued on the caller's stream as
 * NCCL's kernel would be: at the call (blocking communicators) or, for a non-blocking one, when
 * ncclCommGetAsyncError first reports the call done. A test tool: it exercises the callers'
 * plumbing, never NCCL. It holds the callers to NCCL's contract where real NCCL would fail or
 * corrupt memory (these fail here, with a message): a call on a non-blocking communicator whose
 * previous call is still ncclInProgress, a communicator used after ncclCommDestroy or
 * ncclCommAbort (kept, never freed, so that the use is seen), ncclCommFinalize twice or an
 * operation after it, host memory passed as a buffer, an ncclConfig_t not made by
 * NCCL_CONFIG_INITIALIZER, two threads inside NCCL calls at once (NCCL's calls on one device
 * must not run in parallel; NCCLSIM_SLOW_US=N makes each call last N us, to see more of them),
 * and two threads polling one communicator at once. */
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "nccl.h"

namespace {

const unsigned LIVE = 0x6e63636c, DEAD = 0xdeadc0de;

/* A copy NCCL's kernel would make, not yet queued on its stream. */
struct work {
    void *dst;
    const void *src;
    size_t bytes;
    cudaStream_t stream;
};

} // namespace

struct ncclComm {
    unsigned magic;
    int blocking;
    int finalized;
    ncclResult_t state; /* what ncclCommGetAsyncError answers next */
    std::vector<work> pending; /* non-blocking: queued once the call is seen done */
    std::atomic<int> polling;
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

size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    default:
        return 8;
    }
}

bool device_ptr(const void *p) {
    cudaPointerAttributes a;
    return cudaPointerGetAttributes(&a, p) == cudaSuccess &&
           (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
}

/* The communicator is alive and ready for its next call (NCCL's ncclCommEnsureReady). */
ncclResult_t ready(ncclComm *c) {
    if (!c) return fail(ncclInvalidArgument, "NULL communicator");
    if (c->magic != LIVE)
        return misuse(ncclInvalidArgument, "communicator used after ncclCommDestroy/Abort");
    if (c->state == ncclInProgress)
        return misuse(ncclInvalidArgument, "Attempt to use communicator before the previous "
                                           "operation returned ncclSuccess");
    return c->state;
}

void queue(const work &w) {
    if (w.bytes) cudaMemcpyAsync(w.dst, w.src, w.bytes, cudaMemcpyDeviceToDevice, w.stream);
}

/* The end of a group (or of a call outside one): its copies are queued, at once for blocking
 * communicators, once seen done for non-blocking ones. */
ncclResult_t launch() {
    ncclResult_t r = ncclSuccess;
    for (auto &cw : group_work) {
        ncclComm *c = cw.first;
        if (c->blocking) queue(cw.second);
        else c->pending.push_back(cw.second);
    }
    for (ncclComm *c : group_comms) {
        if (c->blocking) continue;
        if (c->state == ncclSuccess) c->state = ncclInProgress;
        r = c->state == ncclInProgress && r == ncclSuccess ? ncclInProgress
            : c->state != ncclInProgress                  ? c->state
                                                          : r;
    }
    group_work.clear();
    group_comms.clear();
    return r;
}

ncclResult_t op(void *dst, const void *src, size_t count, ncclDataType_t t, ncclComm *c,
                cudaStream_t s) {
    api_call a;
    if (a.clash) return misuse(ncclInvalidUsage, "NCCL called from two threads at once");
    ncclResult_t r = ready(c);
    if (r != ncclSuccess) return r;
    if (c->finalized) return misuse(ncclInvalidUsage, "operation on a finalized communicator");
    if (count && ((dst && !device_ptr(dst)) || (src && !device_ptr(src))))
        return misuse(ncclInvalidArgument, "a buffer in host memory (NCCL takes device memory)");
    long n = ++calls;
    const char *f = getenv("NCCLSIM_FAIL_AFTER"), *fr = getenv("NCCLSIM_FAIL_RANK");
    int mine = !fr || (getenv("RANK") && !strcmp(fr, getenv("RANK")));
    if (f && n == atol(f) && mine) {
        c->state = ncclRemoteError;
        snprintf(last_error, sizeof last_error, "ncclsim: injected remote error at call %ld", n);
        return ncclSuccess;
    }
    bool copy = count && dst && src && dst != src;
    work w = {dst, src, copy ? count * type_size(t) : 0, s};
    group_work.emplace_back(c, w);
    bool known = false;
    for (ncclComm *g : group_comms) known = known || g == c;
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
    /* NCCLSIM_ANY_SIZE=1: larger communicators are made too, and their collectives are local
     * copies (wrong data, for checking creation, barriers and teardown across processes). */
    if ((nranks != 1 && !getenv("NCCLSIM_ANY_SIZE")) || rank < 0 || rank >= nranks)
        return fail(ncclInvalidUsage, "only communicators of one rank are simulated");
    ncclComm *c = new ncclComm();
    c->magic = LIVE;
    c->blocking = !config || config->blocking != 0;
    *comm = c;
    if (c->blocking) return ncclSuccess;
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
    comm->magic = DEAD;                  /* kept, so that a later use is seen */
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (comm->magic != LIVE)
        return misuse(ncclInvalidArgument, "ncclCommAbort of a destroyed or aborted communicator");
    comm->magic = DEAD;
    comm->pending.clear(); /* aborted work never runs */
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
    *err = comm->state;
    if (comm->state == ncclInProgress) { /* done next time: its kernels are queued now */
        for (const work &w : comm->pending)
            queue(w);
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
    (void)comm;
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
    (void)op_; /* of one rank: sum, avg, max, min and prod are the value itself */
    if (count && (!send || !recv)) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, count, dt, comm, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t s) {
    (void)root;
    if (count && !recv) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, count, dt, comm, s);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op_, int root, ncclComm_t comm, cudaStream_t s) {
    (void)op_;
    (void)root;
    if (count && !send) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, count, dt, comm, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t s) {
    if (count && (!send || !recv)) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, count, dt, comm, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op_, ncclComm_t comm, cudaStream_t s) {
    (void)op_;
    if (count && (!send || !recv)) return fail(ncclInvalidArgument, "NULL buffer");
    return op(recv, send, count, dt, comm, s);
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s) {
    (void)send, (void)count, (void)dt, (void)peer, (void)comm, (void)s;
    return fail(ncclInvalidUsage, "send/recv need two ranks");
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s) {
    (void)recv, (void)count, (void)dt, (void)peer, (void)comm, (void)s;
    return fail(ncclInvalidUsage, "send/recv need two ranks");
}

} // extern "C"
