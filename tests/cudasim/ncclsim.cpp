/* ncclsim: NCCL for communicators of one rank, on cudasim (see include/nccl.h). Every
 * collective of one rank is a copy (or nothing, in place); it happens at the call, as cudasim's
 * streams complete at once. A test tool: it exercises the callers' plumbing, never NCCL. */
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "nccl.h"

struct ncclComm {
    int blocking;
    ncclResult_t state; /* what ncclCommGetAsyncError answers next */
};

namespace {

thread_local char last_error[256] = "";
thread_local int group_depth;
thread_local ncclComm *group_comm; /* a non-blocking communicator used in the open group */
std::atomic<long> calls;

ncclResult_t fail(ncclResult_t r, const char *msg) {
    snprintf(last_error, sizeof last_error, "ncclsim: %s", msg);
    return r;
}

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

/* The end of an operation on c: a non-blocking communicator is "in progress" until asked. */
ncclResult_t issued(ncclComm *c) {
    long n = ++calls;
    const char *f = getenv("NCCLSIM_FAIL_AFTER"), *fr = getenv("NCCLSIM_FAIL_RANK");
    int mine = !fr || (getenv("RANK") && !strcmp(fr, getenv("RANK")));
    if (f && n == atol(f) && mine) {
        c->state = ncclRemoteError;
        snprintf(last_error, sizeof last_error, "ncclsim: injected remote error at call %ld", n);
        return ncclSuccess;
    }
    if (c->blocking) return ncclSuccess;
    if (group_depth) {
        group_comm = c;
        return ncclSuccess;
    }
    if (c->state == ncclSuccess) c->state = ncclInProgress;
    return ncclInProgress;
}

ncclResult_t copy(void *dst, const void *src, size_t count, ncclDataType_t t, ncclComm *c) {
    if (!c) return fail(ncclInvalidArgument, "NULL communicator");
    if (c->state != ncclSuccess && c->state != ncclInProgress) return c->state;
    if (count && (!dst || !src)) return fail(ncclInvalidArgument, "NULL buffer");
    if (count && dst != src) {
        cudasim_device_access(1);
        memcpy(dst, src, count * type_size(t));
        cudasim_device_access(0);
    }
    return issued(c);
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
    if (getenv("NCCLSIM_LOG")) {
        unsigned h = 2166136261u;
        for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
            h = (h ^ (unsigned char)id.internal[i]) * 16777619u;
        fprintf(stderr, "ncclsim: init rank %d of %d, id %08x\n", rank, nranks, h);
    }
    /* NCCLSIM_ANY_SIZE=1: larger communicators are made too, and their collectives are local
     * copies (wrong data, for checking creation, barriers and teardown across processes). */
    if ((nranks != 1 && !getenv("NCCLSIM_ANY_SIZE")) || rank < 0 || rank >= nranks)
        return fail(ncclInvalidUsage, "only communicators of one rank are simulated");
    ncclComm *c = (ncclComm *)calloc(1, sizeof *c);
    if (!c) return fail(ncclSystemError, "out of memory");
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
    if (comm->blocking) return ncclSuccess;
    comm->state = ncclInProgress;
    return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
    *err = comm->state;
    if (comm->state == ncclInProgress) comm->state = ncclSuccess; /* done next time */
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
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth || !group_comm) return ncclSuccess;
    ncclComm *c = group_comm;
    group_comm = NULL;
    if (c->state == ncclSuccess) c->state = ncclInProgress;
    return c->state == ncclInProgress ? ncclInProgress : c->state;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
    (void)op; /* of one rank: sum, avg, max, min and prod are the value itself */
    (void)s;
    return copy(recv, send, count, dt, comm);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t s) {
    (void)s;
    (void)root;
    return copy(recv, send, count, dt, comm);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s) {
    (void)op;
    (void)s;
    (void)root;
    return copy(recv, send, count, dt, comm);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t s) {
    (void)s;
    return copy(recv, send, count, dt, comm);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
    (void)op;
    (void)s;
    return copy(recv, send, count, dt, comm);
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
