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
 * Blocks. out (nullable, nranks entries) receives each rank's return value. When nranks is
 * more than the cores the process may use, the ranks run as fibers on a thread per core,
 * switching where they wait in dtensor's calls: a rank must then wait for another only through
 * dtensor (not by polling shared memory), or set DT_LOCAL_FIBERS=0 for a thread per rank.
 * Returns DT_OK when every rank returned DT_OK and no call timed out; otherwise the status of
 * the world's first failure (a rank that failed, or a timeout), and dt_last_error() on the
 * calling thread reads "rank R: <that rank's message>".
 *
 * Checks, always on: a collective or send/recv that waits longer than DT_TIMEOUT_S seconds
 * (environment; default 300, 0 = wait forever; see dt_local_set_timeout) for a rank that
 * never comes fails with DT_ERR_ABORTED naming the call ("dt_all_reduce #12 on group world"),
 * the ranks that never arrived and where they are, and aborts the world: every waiting and
 * later call on every rank fails with DT_ERR_ABORTED, so all ranks can return. Members of a
 * group whose collectives differ (kind, count, dtype, reduce op or root of their n-th call on
 * the communicator) all fail it with DT_ERR_COMM naming both sides: "ranks called different
 * collectives: rank 0 is in all_gather #12 (1024 x f32), rank 1 in all_reduce #12 (1024 x
 * f32, sum)"; the group stays usable. (The UCX and NCCL runtimes do the latter with
 * DT_DEBUG_COLLECTIVES=1.) Ranks that wait on each other in different groups (rank 0 in an
 * all_gather over dp for rank 2, rank 1 in an all_reduce over tp for rank 0, ...) are found
 * without the timeout: a wait longer than DT_CHECK_S (default 5 s; 0 = never) looks where every
 * rank waits, and when the waiting ranks form a set that no running rank can release, every
 * rank fails with DT_ERR_COMM (the ranks it aborts: DT_ERR_ABORTED naming it) within a second,
 * naming the rank(s) the others wait for most, which diverged, and each position: "rank 0
 * diverged (ranks wait on each other across groups and none can go on): rank 0 in all_gather
 * #1 (8 x f32) on group dp by matmul, waiting for rank 2; rank 1 in ...". A wait on a rank that
 * runs (or waits on one that does) goes on to DT_TIMEOUT_S. The UCX and NCCL runtimes do the
 * same through rank 0. DT_ERR_ARG when DT_TIMEOUT_S, DT_CHECK_S, DT_DEBUG_COLLECTIVES or
 * DT_LOCAL_FIBERS is malformed. */
DT_API dt_status dt_local_run(int nranks, dt_spmd_fn fn, void *arg, dt_status *out);

/* Sets this rank's timeout (seconds; 0 = wait forever), overriding DT_TIMEOUT_S, for its
 * later collectives and send/recv. Not collective: set it alike on every rank.
 * DT_ERR_UNSUPPORTED for contexts of other runtimes (see dt_ucx_set_timeout,
 * dt_nccl_set_timeout). */
DT_API dt_status dt_local_set_timeout(dt_ctx *ctx, double seconds);

/* A request: work started by a non-blocking call (dt_all_reduce_start and the other _start
 * collectives, dt_tensor_redistribute_async) that runs on the rank's communication thread. */
typedef struct dt_request dt_request;
typedef struct dt_tensor dt_tensor;

/* Blocks until the request is done, frees it and returns its status. out (nullable) receives
 * its result, which the caller then owns: the tensor of a redistribute, NULL for a collective
 * (its result is in the buffers it was given). On failure nothing is handed over and the
 * request is freed all the same. */
DT_API dt_status dt_request_wait(dt_request *request, dt_tensor **out);
/* 1 when done (dt_request_wait then returns at once), 0 when not yet; -1 for NULL. */
DT_API int dt_request_test(const dt_request *request);

/* This rank's index in the world, and the world size; -1 for a NULL context. */
DT_API int dt_ctx_rank(const dt_ctx *ctx);
DT_API int dt_ctx_size(const dt_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
