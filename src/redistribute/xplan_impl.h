/* Cross-mesh plans as the planner makes them and the executor (xmesh.c) reads them. Knows
 * nothing of ranks beyond the world rank lists of the two meshes. */
#ifndef DT_REDISTRIBUTE_XPLAN_IMPL_H
#define DT_REDISTRIBUTE_XPLAN_IMPL_H

#include "redistribute/plan_impl.h"

struct dt_xplan {
    dt_mesh_desc mesh[2]; /* source, target; ranks point at rank_store */
    int *rank_store;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_dtype dtype;
    dt_placement src[DT_MESH_MAX_NDIM], dst[DT_MESH_MAX_NDIM];
    /* What the transfers move between: src and dst with Partial made Replicate. */
    dt_placement mid_src[DT_MESH_MAX_NDIM], mid_dst[DT_MESH_MAX_NDIM];
    dt_plan *before, *after; /* NULL when nothing to do */
    int ntransfers, nmessages;
    dt_transfer *transfers;
    size_t bytes;
    double cost_us;
};

/* Plans already checked and normalised arguments. */
dt_status dt_xplan_build(const dt_mesh_desc *src_mesh, const dt_mesh_desc *dst_mesh, int ndim,
                         const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                         const dt_placement *dst, const dt_cost_model *model, dt_xplan **out);

#endif
