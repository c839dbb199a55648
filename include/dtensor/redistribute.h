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
 * no ranks, any mesh size. model NULL = default. The caller owns one reference: drop it with
 * dt_plan_release. */
DT_API dt_status dt_plan_create(int mesh_ndim, const int *mesh_shape, int ndim,
                                const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                                const dt_placement *dst, const dt_cost_model *model, dt_plan **out);
/* Plans are reference-counted (thread-safe): a mesh's plan cache holds one reference on each
 * plan it keeps, a pending dt_tensor_redistribute_async one on its plan. dt_plan_retain adds
 * one, e.g. to keep a plan borrowed from the cache past its eviction; dt_plan_release drops
 * one and frees the plan with the last. NULL is fine there. */
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

/* ---- across meshes ----------------------------------------------------------------------
 * A tensor moved to another mesh over the same world: a pipeline stage's output on the pp=0
 * sub-mesh handed to the pp=1 sub-mesh, a mesh to one of its sub-meshes and back, or two
 * meshes of different shapes over the same ranks. The plan is point to point: each target
 * rank's block is cut into the boxes that the source blocks overlap, and each box comes from
 * one source rank holding it (a rank holding it itself copies it locally; replicas share the
 * sending). Partial source dims are reduced on the source mesh first (a same-mesh plan), and
 * Partial target dims are made locally on the target mesh afterwards; for P(sum) targets only
 * the ranks that keep the value receive it. */

/* A mesh by value, for planning without ranks: its shape and the world rank of each mesh rank
 * (row-major); ranks NULL means 0, 1, ..., n-1. */
typedef struct dt_mesh_desc {
    int ndim;
    int shape[DT_MESH_MAX_NDIM];
    const int *ranks;
} dt_mesh_desc;

/* One message of a cross-mesh plan: the box [off, off + ext) of the global tensor that world
 * rank from sends to world rank to (from == to: a local copy, nothing sent). */
typedef struct dt_transfer {
    int from, to;
    int64_t off[DT_MAX_NDIM], ext[DT_MAX_NDIM];
    size_t bytes;
} dt_transfer;

typedef struct dt_xplan dt_xplan;

/* Plans moving a tensor of this shape and dtype from src placements on src_mesh to dst
 * placements on dst_mesh. Pure: no ranks. model NULL = default (for the estimate and the
 * plans before and after). Free with dt_xplan_destroy. */
DT_API dt_status dt_xplan_create(const dt_mesh_desc *src_mesh, const dt_mesh_desc *dst_mesh,
                                 int ndim, const int64_t *shape, dt_dtype dtype,
                                 const dt_placement *src, const dt_placement *dst,
                                 const dt_cost_model *model, dt_xplan **out);
/* NULL is fine. */
DT_API dt_status dt_xplan_destroy(dt_xplan *plan);
/* Transfers in the order every rank runs them (local copies included), and transfer i. */
DT_API int dt_xplan_ntransfers(const dt_xplan *plan);
DT_API dt_status dt_xplan_transfer_get(const dt_xplan *plan, int i, dt_transfer *out);
/* The same-mesh plans run before (on the source mesh: Partial dims reduced) and after (on the
 * target mesh: Partial dims made, local); NULL when there is nothing to do. Borrowed. */
DT_API const dt_plan *dt_xplan_before(const dt_xplan *plan);
DT_API const dt_plan *dt_xplan_after(const dt_xplan *plan);
/* Messages between ranks (local copies not counted), their bytes, and the estimate: the
 * plans before and after plus, for the busiest rank, latency_us per message it sends or
 * receives and its bytes over the bandwidth. -1 (0 bytes) for NULL. */
DT_API int dt_xplan_nmessages(const dt_xplan *plan);
DT_API size_t dt_xplan_bytes(const dt_xplan *plan);
DT_API double dt_xplan_cost_us(const dt_xplan *plan);

/* The plan as text (what dtensor-explain --to-mesh prints): the meshes, the plan before, one
 * line per transfer, the plan after, then the totals. Names NULL = "d0", "d1", ... Writes at
 * most cap bytes, NUL-terminated; *len_out (nullable) = length needed. */
DT_API dt_status dt_xplan_format(const dt_xplan *plan, const char *const *src_names,
                                 const char *const *dst_names, char *buf, size_t cap,
                                 size_t *len_out);

/* A new tensor on dst_mesh with placements dst (ndst = dst_mesh's ndim) holding the same
 * global value as tensor, which lives on another mesh of the same world (between meshes equal
 * by value, dt_mesh_equal, a same-mesh plan moves it). Collective over the union of both
 * meshes' ranks: each of them calls it with meshes and placements describing the same move.
 * A rank outside the source mesh passes a tensor on it that holds nothing (made on a
 * dt_mesh_submesh_at it is not in, e.g. with dt_tensor_zeros); a rank outside dst_mesh gets
 * such a tensor back. Ranks in neither mesh need not call. Blocks; point-to-point sends on the
 * world communicator, in the plan's order. The input is unchanged.
 *
 * Checked always (no debug mode): before any data moves, the ranks compare the move's
 * arguments as given, before checking them (tensor shape, dtype, placements and mesh, target
 * mesh and placements), so a target invalid on some ranks only fails all alike. Where they
 * differ, e.g. a target mesh that depends on the rank, every rank of both meshes fails with
 * DT_ERR_ARG and the same message naming the first difference ("dt_tensor_redistribute_to:
 * ranks passed different arguments: target mesh: rank 0 passed tp=2 on ranks [2,3], rank 3
 * passed w=4 on ranks [0-3]"). This costs one all_gather of a few words over the source mesh,
 * and, when the target has ranks outside it, a message each way between each of them and the
 * source mesh's first rank plus a broadcast over the source mesh. A rank outside the source
 * mesh that no source rank counts among the target still waits (until the runtime's timeout):
 * nothing tells it the others did not expect it.
 *
 * Differentiable: the output's gradient is placed as the output was (Replicate where Partial)
 * and goes back to the source mesh by the reverse move (in tensor's placements, Replicate
 * where they are Partial). For that every rank of the union must record the move: on ranks
 * outside the source mesh mark the empty input requires_grad, and on ranks outside dst_mesh
 * run dt_backward_with(out, g) with g a tensor that holds nothing on dst_mesh (dt_tensor_zeros
 * there, any placements) while the target ranks run their backward. */
DT_API dt_status dt_tensor_redistribute_to(dt_tensor *tensor, dt_mesh *dst_mesh, int ndst,
                                           const dt_placement *dst, dt_tensor **out);

/* What op dispatch does about inputs whose placements differ from the chosen strategy's. */
typedef enum dt_redistribute_mode {
    DT_REDISTRIBUTE_IMPLICIT = 0, /* redistribute them (the default) */
    DT_REDISTRIBUTE_LOG,          /* redistribute them and print each one to stderr */
    DT_REDISTRIBUTE_EXPLICIT,     /* fail with DT_ERR_PLACEMENT naming the op and the input */
} dt_redistribute_mode;

DT_API dt_status dt_ctx_set_redistribute_mode(dt_ctx *ctx, dt_redistribute_mode mode);

#ifdef __cplusplus
}
#endif
#endif
