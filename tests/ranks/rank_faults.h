/* The failure modes the UCX and NCCL rank programs share (one process per rank, under dtrun):
 *   fault      the last rank kills itself (SIGKILL) while all_reduces run
 *   hang       the last rank stays alive but stops taking part
 *   peer-exit  rank 1 returns early, after five all_gathers that must succeed everywhere
 *   mismatch   ranks disagree on an all_reduce's count
 *   wrong-collective  rank 1 calls all_gather where the others call all_reduce (needs
 *              DT_DEBUG_COLLECTIVES=1, which names both sides)
 *   diverge    4 ranks as dp=2 x tp=2, rank 0 skips tp's all_reduce: ranks wait on each other
 *              across groups, which the check of DT_CHECK_S names ("rank 0 diverged")
 *   target-mismatch  4 ranks: a tensor on ranks {0,1} moves to {2,3}, but rank 3 names all four
 *              as the target mesh: the move's own check fails every rank (DT_ERR_ARG, or
 *              DT_ERR_ABORTED with the same message where another rank's failure came first)
 *   slow-peer  the last rank sleeps DT_TEST_SLEEP_S (default 2) before an all_reduce: the
 *              others must wait for it and succeed ("[ok] slow-peer", exit 0)
 * The others must fail cleanly: DT_ERR_ABORTED, DT_ERR_PEER_EXITED or DT_ERR_COMM, with a
 * message naming the rank at fault (or the disagreement), never hang. */
#ifndef DT_TEST_RANK_FAULTS_H
#define DT_TEST_RANK_FAULTS_H

#include <stddef.h>

#include <dtensor.h>

/* Where the modes' buffers live: NULL alloc means host memory (malloc/free). */
typedef struct rank_fault_buffers {
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
} rank_fault_buffers;

/* 1 when mode is one of the failure modes above. */
int rank_fault_mode(const char *mode);
/* The SPMD part of mode on this rank; returns the failure it met (or DT_OK on the ranks that
 * return on purpose). */
dt_status rank_fault_run(dt_ctx *ctx, const char *mode, const rank_fault_buffers *buffers);
/* After the runtime returned st: prints "<mode>: failed cleanly after S s: ..." or "<mode>:
 * FAILED BADLY ..." and returns the exit status, 3 (clean) or 1; slow-peer: 0 when it
 * succeeded. */
int rank_fault_judge(const char *mode, dt_status st);

#endif
