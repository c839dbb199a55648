/* cudasim stand-in for NCCL (see cudasim.h): the slice of nccl.h that dtensor's NCCL backend
 * uses (ncclsim.cpp). A communicator of one rank copies; one of several ranks, one process each
 * (as dtrun starts them), moves the data through a shared-memory segment named from its
 * ncclUniqueId (ncclsim_shm.cpp): every collective here, and sends and receives, grouped or
 * not. A group's work is queued on the caller's stream and runs when that stream is waited for
 * (as cudasim's kernels), waiting there for the peers. Non-blocking communicators answer
 * ncclInProgress once per call (and until every rank joined, after init), so the callers'
 * waiting paths run, and the stand-in refuses what real NCCL forbids (a call while the previous
 * one is in progress, use after destroy, host buffers, calls from two threads at once, a root or
 * peer outside the communicator; ranks that disagree on a collective or a message's size leave
 * an asynchronous error). A peer process that exits, an abort on another rank, or
 * NCCLSIM_TIMEOUT_S seconds (default 60) without progress end a wait with ncclRemoteError and a
 * message (ncclGetLastError). NCCLSIM_FAIL_AFTER=N: the N-th collective leaves an asynchronous
 * ncclRemoteError on its communicator (for the failure paths; only on the rank NCCLSIM_FAIL_RANK
 * names, when set). NCCLSIM_LOG=1 prints every communicator's creation with a hash of its
 * unique id. */
#ifndef NCCLSIM_H
#define NCCLSIM_H

#include <limits.h>

#include "cudasim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR            2
#define NCCL_MINOR            28
#define NCCL_PATCH            9
#define NCCL_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE     NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

typedef struct ncclComm *ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
typedef struct ncclConfig_v22800 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                    \
    { sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT }

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9
} ncclDataType_t;

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s);
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
