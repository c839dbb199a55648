/* The NCCL runtime: one process per GPU, on one host or many, with collectives on CUDA streams
 * through NCCL. It starts exactly as the UCX runtime does (dtensor/ucx.h): same launchers, same
 * environment, same TCP rendezvous through rank 0 and the same control plane, which is how a
 * rank's failure, return or death reaches the others. The same SPMD function that dt_local_run
 * and dt_ucx_run run, runs here unchanged.
 *
 * Launch (every process runs the same binary, which calls dt_nccl_run):
 *   dtrun -n 8 ./prog args...                          one host, one process per GPU
 *   torchrun --nnodes 2 --nproc-per-node 8 --master-addr h0 --master-port 29500 --no-python ./prog
 *   srun -N 2 --ntasks-per-node 8 env MASTER_ADDR=h0 MASTER_PORT=29500 ./prog
 *   mpirun -np 16 -x MASTER_ADDR=h0 -x MASTER_PORT=29500 ./prog
 *
 * Environment read by dt_nccl_run (see dtensor/ucx.h for the launcher variables):
 *   RANK/WORLD_SIZE (or the Open MPI, PMI, Slurm equivalents), LOCAL_RANK when present.
 *   MASTER_ADDR, MASTER_PORT   where rank 0 listens for the rendezvous; required whenever the
 *                              world has more than one rank.
 *   DT_STARTUP_TIMEOUT_S       how long the rendezvous and the world communicator's creation
 *                              may take (default 60).
 *   DT_TIMEOUT_S               how long a collective may stay unfinished after it was queued,
 *                              and how long the members of a new sub-communicator wait for
 *                              each other (default 300; 0 = wait forever).
 *   DT_DEBUG_COLLECTIVES=1     ranks compare each collective's fingerprint first (a small
 *                              all_gather through host memory), as under UCX (dtensor/ucx.h).
 *   DT_NCCL_BLOCKING=1         blocking NCCL communicators instead of non-blocking ones (to
 *                              rule NCCL's non-blocking mode out when debugging). Then a call
 *                              stuck inside NCCL, connecting to a peer that never comes, is
 *                              neither timed nor interrupted until another rank fails.
 *   NCCL_*                     are NCCL's own (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME, ...).
 *
 * Devices: rank r uses GPU LOCAL_RANK % (number of visible GPUs); without LOCAL_RANK, its index
 * among the ranks of its host (from the rendezvous). dt_nccl_run sets it as the context's
 * compute device (dt_ctx_set_device) before fn runs, so tensors fn creates live on that GPU.
 *
 * Streams: every collective, send and recv is queued on the rank's communication stream after
 * the work already queued on its compute stream, and the compute stream then waits for it:
 * calls return once the operation is queued (as NCCL calls do), and kernels queued afterwards
 * see its result. Read results on the host through dt_tensor_local_to_host, dt_tensor_full_tensor
 * or after dt_ctx_synchronize. dt_barrier is the exception: it returns once every rank of the group
 * has reached it and this rank's queued communication is done. Host buffers (a plain malloc'd
 * array passed to a collective) also work: they go through device memory, and such a call
 * returns only once its result is in the host buffer.
 *
 * Communicators: the world communicator comes from ncclCommInitRank with a unique id made by
 * rank 0 and carried by the rendezvous. Mesh and user communicators are created lazily, by their
 * members only (a mesh dimension's communicator is made the first time its group uses it), so a
 * world-wide ncclCommSplit cannot serve them: each gets its own ncclCommInitRank, with a unique
 * id made by its first member and handed to the others through rank 0's control plane.
 *
 * Faults: as in the UCX runtime, a collective that cannot complete fails rather than hangs. A
 * rank whose SPMD function returns an error, whose collective fails (NCCL or CUDA error, a
 * timeout) or whose process dies makes every rank abort its NCCL communicators
 * (ncclCommAbort, which also stops kernels stuck waiting for a peer): pending and later
 * collectives fail with DT_ERR_ABORTED naming the rank and its reason. A rank that returns
 * DT_OK while a member of its group still waits for it in a collective makes that collective
 * fail with DT_ERR_PEER_EXITED (a few seconds after the return). A watchdog thread per process
 * enforces DT_TIMEOUT_S and polls ncclCommGetAsyncError even while the rank does not wait on
 * NCCL itself (dt_ctx_synchronize, say). After a failure the world is unusable: return and let
 * dt_nccl_run tear down. Data of a collective in flight when the world failed is undefined.
 *
 * Results: sum, max, min and prod are NCCL's; avg is ncclAvg for floating-point types and, for
 * integer types, a sum divided afterwards with truncation toward zero (as dt_reduce_n does).
 * NCCL's reduction order differs from the local runtime's: floating-point sums and averages
 * may differ from it in the last bits (every rank of a group gets the same bits). */
#ifndef DTENSOR_NCCL_H
#define DTENSOR_NCCL_H

#include "dtensor/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build of the library has the NCCL runtime (a CUDA build), else 0. Says nothing
 * about GPUs being present. */
DT_API int dt_nccl_available(void);

/* Runs fn on this process's rank: reads the world from the environment, meets the other
 * ranks at MASTER_ADDR:MASTER_PORT (rank 0's blob carries the world's ncclUniqueId), picks and
 * sets this rank's GPU, creates the world communicator, runs fn, then waits until every rank
 * has returned and tears down. Collective over the world; blocks.
 * Returns fn's status when it failed (dt_last_error() reads "rank R: <its message>");
 * otherwise DT_OK when every rank returned DT_OK, else the status of the first rank to fail
 * with "rank R: <that rank's message>". Errors before fn runs: DT_ERR_COMM (rendezvous),
 * DT_ERR_DEVICE (no GPU visible, NCCL could not create the world communicator).
 * Without CUDA in the build: DT_ERR_UNSUPPORTED. */
DT_API dt_status dt_nccl_run(dt_spmd_fn fn, void *arg);

/* Sets this rank's timeout (seconds; 0 = wait forever), overriding DT_TIMEOUT_S. A collective
 * not finished that long after it was queued fails with DT_ERR_ABORTED naming it, and aborts
 * the world. Not collective: set it alike on every rank. DT_ERR_UNSUPPORTED for contexts of
 * other runtimes. */
DT_API dt_status dt_nccl_set_timeout(dt_ctx *ctx, double seconds);

#ifdef __cplusplus
}
#endif
#endif
