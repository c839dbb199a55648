/* Redistribute: change a DTensor's placements. Plans are searched, not greedy: the planner
 * walks the graph of per-mesh-dim placement states with an alpha-beta cost model, fuses
 * collectives of one kind over several mesh dims into one over the flattened group where
 * that is cheaper, and caches the result per (mesh, shape, dtype, source, target). Planning
 * needs no ranks, so a plan for any mesh size can be explained without running anything.
 *
 * Conventions for the local steps (no communication):
 *   R -> S(d)        keep this rank's torch.chunk slice;
 *   R -> P(sum)      the rank at coordinate 0 of that mesh dim keeps the value, the others
 *                    hold zeros (exact for every dtype; PyTorch divides by n instead);
 *   R -> P(avg|max|min)  every rank keeps the value;
 *   P(avg) -> P(sum) divide by the mesh dim size; P(sum) -> P(avg) multiply by it.
 * Every other change goes through collectives; there is no transition without a route
 * (e.g. P(max) -> P(sum) is an all_reduce(max) then R -> P(sum)). Several Partial mesh dims
 * reduce in mesh-dim order, so a Partial is reduced only after the Partials of other kinds
 * on lower mesh dims. */
#ifndef DTENSOR_REDISTRIBUTE_H
#define DTENSOR_REDISTRIBUTE_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per collective: latency_us + step_us * ceil(log2(group size)) + bytes received per rank /
 * bandwidth. Local steps cost nothing. Defaults: 5 us, 1 us, 10 GB/s. */
typedef struct dt_cost_model {
    double latency_us;
    double step_us;
    double bandwidth_gbps; /* GB/s = 1e9 bytes per second */
} dt_cost_model;

DT_API dt_cost_model dt_cost_model_default(void);
/* The model this rank's plans use from now on (cached plans made with another model are
 * planned again). NULL restores the default. */
DT_API dt_status dt_ctx_set_cost_model(dt_ctx *ctx, const dt_cost_model *model);

typedef enum dt_step_kind {
    DT_STEP_ALL_GATHER = 0, /* S(d) -> R over the group */
    DT_STEP_ALL_TO_ALL,     /* S(i) -> S(j) */
    DT_STEP_ALL_REDUCE,     /* P(op) -> R */
    DT_STEP_REDUCE_SCATTER, /* P(op) -> S(d) */
    DT_STEP_SLICE,          /* R -> S(d), local */
    DT_STEP_TO_PARTIAL,     /* R -> P(op), local */
    DT_STEP_SCALE,          /* P(avg) <-> P(sum), local */
    DT_STEP_RELABEL,        /* any change on mesh dims of size 1: no data moves */
    DT_STEP_KIND_COUNT
} dt_step_kind;

/* "all_gather", "all_to_all", "all_reduce", "reduce_scatter", "slice", "to_partial", "scale",
 * "relabel". */
DT_API const char *dt_step_kind_name(dt_step_kind kind);

typedef struct dt_plan_step {
    dt_step_kind kind;
    unsigned mesh_mask; /* the mesh dims acted on; several = one collective, flattened */
    int group_size;     /* product of their sizes */
    dt_placement before[DT_MESH_MAX_NDIM], after[DT_MESH_MAX_NDIM];
    size_t send_bytes, recv_bytes; /* per rank, for the rank holding the largest shard */
    double cost_us;
} dt_plan_step;

typedef struct dt_plan dt_plan;

/* Plans src -> dst for a tensor of the given shape and dtype on a mesh of this shape. Pure:
 * no ranks, any mesh size. model NULL = default. The caller owns one reference: free with
 * dt_plan_destroy. */
DT_API dt_status dt_plan_create(int mesh_ndim, const int *mesh_shape, int ndim,
                                const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                                const dt_placement *dst, const dt_cost_model *model, dt_plan **out);
DT_API dt_status dt_plan_destroy(dt_plan *plan);
/* Plans are reference-counted (thread-safe): a mesh's plan cache holds one reference on each
 * plan it keeps, a pending dt_tensor_redistribute_async one on its plan. dt_plan_retain adds
 * one, e.g. to keep a plan borrowed from the cache past its eviction; dt_plan_release drops
 * one and frees the plan with the last (dt_plan_destroy is the same). NULL is fine there. */
DT_API dt_status dt_plan_retain(const dt_plan *plan);
DT_API dt_status dt_plan_release(const dt_plan *plan);
/* Number of steps (0 when src equals dst), step i, and the totals. */
DT_API int dt_plan_nsteps(const dt_plan *plan);
DT_API dt_status dt_plan_step_get(const dt_plan *plan, int i, dt_plan_step *out);
/* Number of collectives (local steps not counted) and estimated cost. */
DT_API int dt_plan_ncollectives(const dt_plan *plan);
DT_API double dt_plan_cost_us(const dt_plan *plan);

/* The plan as text: one line per step (collective, mesh dims, group size, bytes sent and
 * received per rank, estimated cost), then the total. dim_names NULL = "d0", "d1", ...
 * Writes at most cap bytes, NUL-terminated; *len_out (nullable) = length needed. */
DT_API dt_status dt_plan_format(const dt_plan *plan, const char *const *dim_names, char *buf,
                                size_t cap, size_t *len_out);

/* Plan and format in one call, without ranks: what dtensor-explain prints. */
DT_API dt_status dt_redistribute_explain(int mesh_ndim, const int *mesh_shape,
                                         const char *const *dim_names, int ndim,
                                         const int64_t *shape, dt_dtype dtype,
                                         const dt_placement *src, const dt_placement *dst,
                                         const dt_cost_model *model, char *buf, size_t cap,
                                         size_t *len_out);

/* A new tensor with placements dst (ndst of them, the mesh's ndim) holding the same global
 * value. The plan comes from the
 * mesh's cache. Collective over the mesh; blocks. The input is unchanged. */
DT_API dt_status dt_tensor_redistribute(dt_tensor *tensor, int ndst, const dt_placement *dst,
                                        dt_tensor **out);

/* Non-blocking form: returns at once with a request (dt_request_wait hands over the result);
 * the work runs on this rank's communication thread, on communicators of its own, in the
 * order the calls were made (the same on every rank). The input must stay alive and unchanged
 * until the wait. Collective over the mesh. */
DT_API dt_status dt_tensor_redistribute_async(dt_tensor *tensor, int ndst, const dt_placement *dst,
                                              dt_request **out);

/* The plan the mesh's cache holds (or makes) for this tensor and target. Borrowed: valid
 * until a later call plans on this mesh object (redistribute, an op, dt_op_strategy, this
 * call, dt_mesh_set_cache_capacity), which may evict it from the bounded cache. To keep it
 * longer, dt_plan_retain it and dt_plan_release it when done. */
DT_API dt_status dt_tensor_redistribute_plan(dt_tensor *tensor, int ndst, const dt_placement *dst,
                                             const dt_plan **out);

#ifdef __cplusplus
}
#endif
#endif
