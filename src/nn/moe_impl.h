/* The body of a MoE routing plan (dtensor/moe.h), shared by the plan (moe_plan.c) and the
 * dispatch/experts/combine layer (moe_experts.c). */
#ifndef DT_NN_MOE_IMPL_H
#define DT_NN_MOE_IMPL_H

#include <stdatomic.h>

#include "dtensor/comm.h"
#include "dtensor/moe.h"

struct dt_moe_plan {
    atomic_int refs;
    dt_mesh *mesh; /* retained */
    int ep_dim;
    dt_comm *comm; /* the ep group (lane 0), the mesh's */
    /* the experts tensor the plan was made from: x and gates must match it */
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_placement placements[DT_MESH_MAX_NDIM];
    dt_moe_plan_info info; /* its arrays point into the ones below */
    int64_t *routed, *kept, *send_counts, *send_order, *recv_per_expert, *recv_counts;
    int64_t *expert_rows; /* [local_experts]: rows each local expert receives, over sources */
};

/* ep_dim shards a token dim of t (not the last) and no mesh dim is Partial: the token layout
 * every MoE input shares. fn and arg name the call and argument in the message. */
dt_status dt_moe_check_tokens(const char *fn, const char *arg, const dt_tensor *t, int ep_dim);

/* One more reference (for an autograd node). */
void dt_moe_plan_retain(dt_moe_plan *plan);

#endif
