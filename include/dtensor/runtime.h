/* Rank contexts and the local runtime: N ranks as N threads of one process.
 * A dt_ctx is one rank's view of the world (rank, world size, comm backend). One context is
 * used by one thread at a time, as NCCL communicators are. */
#ifndef DTENSOR_RUNTIME_H
#define DTENSOR_RUNTIME_H

#include "dtensor/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_ctx dt_ctx;

/* The SPMD body run on every rank. Returning anything but DT_OK marks the rank failed: the
 * other ranks' pending and later collectives then fail with DT_ERR_ABORTED instead of
 * hanging. Returning DT_OK early makes collectives that wait for this rank fail with
 * DT_ERR_PEER_EXITED. */
typedef dt_status (*dt_spmd_fn)(dt_ctx *ctx, void *arg);

#define DT_LOCAL_MAX_RANKS 1024

/* Runs fn on nranks threads (ranks 0..nranks-1) of this process and waits for all of them.
 * Blocks. rank_status_out (nullable, nranks entries) receives each rank's return value.
 * Returns DT_OK when every rank returned DT_OK; otherwise the status of the first rank to
 * fail, and dt_last_error() on the calling thread reads "rank R: <that rank's message>". */
dt_status dt_local_run(int nranks, dt_spmd_fn fn, void *arg, dt_status *rank_status_out);

/* This rank's index in the world, and the world size; -1 for a NULL context. */
int dt_ctx_rank(const dt_ctx *ctx);
int dt_ctx_size(const dt_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
