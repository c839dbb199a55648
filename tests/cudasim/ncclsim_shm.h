/* ncclsim's data path between the processes of a communicator of several ranks: a POSIX
 * shared-memory segment named from the ncclUniqueId, with per-rank collective slots and one
 * byte ring per ordered pair of ranks. Internal to ncclsim (ncclsim.cpp makes the API calls). */
#ifndef NCCLSIM_SHM_H
#define NCCLSIM_SHM_H

#include <cstddef>
#include <vector>

#include "nccl.h"

struct shm_comm;

/* One NCCL operation of a group, as the segment runs it. */
struct shm_op {
    enum op_kind { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND, RECV } kind;
    const void *send;
    void *recv;
    size_t count; /* elements: per rank for all_gather and reduce_scatter, as NCCL counts */
    ncclDataType_t type;
    ncclRedOp_t op;
    int peer; /* root of broadcast and reduce; peer of send and recv */
};

/* Maps (creating when first) the segment of id for rank of n and marks this rank joined.
 * nullptr with a message in err when it cannot. */
shm_comm *shm_join(const ncclUniqueId &id, int n, int rank, char *err, size_t cap);
/* 1: every rank joined; 0: not yet; -1: a peer died, the segment was aborted or the wait
 * passed NCCLSIM_TIMEOUT_S since the join (err says which). */
int shm_connected(shm_comm *s, char *err, size_t cap);
/* Runs a group's operations: its collectives in order, then its sends and receives together
 * (as NCCL runs a group's point-to-point operations concurrently). Waits for the peers, bounded
 * by NCCLSIM_TIMEOUT_S (default 60) without progress; a dead peer or an abort ends it at once.
 * ncclSuccess, or an error with its message in err. */
ncclResult_t shm_run(shm_comm *s, const std::vector<shm_op> &ops, char *err, size_t cap);
/* Tells the peers that this communicator was aborted: their waits end with an error. */
void shm_abort(shm_comm *s);
/* Unmaps the segment (its name is gone once every rank joined, or after this). */
void shm_leave(shm_comm *s);
size_t shm_type_size(ncclDataType_t t);

#endif
