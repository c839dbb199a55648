/* Plans as the planner makes them and the executor reads them. Knows nothing of ranks. */
#ifndef DT_REDISTRIBUTE_PLAN_IMPL_H
#define DT_REDISTRIBUTE_PLAN_IMPL_H

#include <stdatomic.h>

#include "dtensor/redistribute.h"

struct dt_plan {
    atomic_int refs; /* the creator's, a mesh cache's, pending requests' */
    int mesh_ndim;
    int mesh_shape[DT_MESH_MAX_NDIM];
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_dtype dtype;
    dt_placement src[DT_MESH_MAX_NDIM], dst[DT_MESH_MAX_NDIM];
    int nsteps, ncollectives;
    double cost_us;
    dt_plan_step *steps;
};

/* 1 when the step moves data between ranks. */
static inline int dt_step_is_collective(dt_step_kind k) {
    return k == DT_STEP_ALL_GATHER || k == DT_STEP_ALL_TO_ALL || k == DT_STEP_ALL_REDUCE ||
           k == DT_STEP_REDUCE_SCATTER;
}

/* Checked, normalised inputs of dt_plan_create, shared with the tensor-level entry points. */
dt_status dt_plan_check_args(const char *fn, int mesh_ndim, const int *mesh_shape, int ndim,
                             const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                             const dt_placement *dst, dt_placement *src_out,
                             dt_placement *dst_out);

/* Searches the plan for already checked and normalised arguments. */
dt_status dt_plan_search(int mesh_ndim, const int *mesh_shape, int ndim, const int64_t *shape,
                         dt_dtype dtype, const dt_placement *src, const dt_placement *dst,
                         const dt_cost_model *model, dt_plan **plan_out);

#endif
