/* ucx_rank_prog's "shm" mode (tests/ranks/ucx_shm_checks.c). */
#ifndef DT_TESTS_UCX_SHM_CHECKS_H
#define DT_TESTS_UCX_SHM_CHECKS_H

#include <dtensor.h>

/* Every collective at the shared-memory path's chunk boundaries, on several groups; prints
 * "[ok] shm: ..." and returns DT_OK when all results are right. */
dt_status ucx_shm_checks(dt_ctx *ctx);

/* The box forms of redistribute on c (ucx_shm_boxes.c), shm: whether the shared-memory path is
 * on; adds the collectives it ran to *calls. */
dt_status ucx_shm_boxes(dt_comm *c, int shm, uint64_t seed, long *calls);

#endif
