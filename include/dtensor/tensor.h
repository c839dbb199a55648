/* DTensor: a local tensor (this rank's shard) plus its spec: mesh, one placement per mesh
 * dimension, global shape and dtype. Local data is dense row-major.
 *
 * Uneven sizes follow torch.chunk: along a sharded dim of length L over n ranks, rank i
 * holds [i*c, min(L, (i+1)*c)) with c = ceil(L/n), so trailing ranks may hold less or nothing.
 * A tensor dim sharded by several mesh dims is split by the first of them (in mesh order),
 * then each piece by the next.
 *
 * Partial convention when a tensor is made Partial from a full value: for P(sum) the rank at
 * coordinate 0 of that mesh dim holds the value and the others hold zeros (exact for every
 * dtype, where PyTorch's divide-by-n is not); P(avg), P(max), P(min) keep the value on every
 * rank. Several Partial mesh dims reduce in mesh-dim order.
 *
 * Tensors are reference-counted; every rank holds its own dt_tensor. */
#ifndef DTENSOR_TENSOR_H
#define DTENSOR_TENSOR_H

#include <stdio.h>

#include "dtensor/device.h"
#include "dtensor/mesh.h"
#include "dtensor/placement.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_tensor dt_tensor;

/* Means "every rank passes the full tensor" for dt_tensor_distribute's src_rank. */
#define DT_ALL_RANKS (-1)

/* from_local flags. */
#define DT_FROM_LOCAL_BORROW 1u /* keep a pointer to the caller's data instead of copying */
#define DT_FROM_LOCAL_CHECK  2u /* collective check that all ranks agree on the spec */

/* Local shape and global offset of the shard at mesh coordinate coord. A pure function of
 * the spec: no ranks needed, so it works for any mesh size. placements are normalised. */
DT_API dt_status dt_shard_layout(int mesh_ndim, const int *mesh_shape, const int *coord, int ndim,
                                 const int64_t *shape, const dt_placement *placements,
                                 int64_t *local_shape_out, int64_t *offset_out);

/* Calls that take placements take nplacements, their count, which must equal the mesh's
 * ndim (DT_ERR_PLACEMENT otherwise). */

/* A tensor with zeroed local storage on the rank's device. Not collective. */
DT_API dt_status dt_tensor_zeros(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                                 int nplacements, const dt_placement *placements, dt_tensor **out);

/* Shards a full tensor (host memory) onto the rank's device (dt_ctx_set_device). With src_rank ==
 * DT_ALL_RANKS every rank passes the same full tensor and keeps its slice (no communication).
 * Otherwise only mesh rank src_rank passes it (others pass NULL) and it sends each rank its shard,
 * one shard-sized buffer at a time, so no more than the one full copy ever exists. Collective over
 * the mesh; blocks. */
DT_API dt_status dt_tensor_distribute(dt_mesh *mesh, const void *full, dt_dtype dtype, int ndim,
                                      const int64_t *shape, int nplacements,
                                      const dt_placement *placements, int src_rank,
                                      dt_tensor **out);

/* Wraps this rank's shard. global_shape NULL infers the global shape from every rank's local
 * shape (collective: one small all_gather), and rejects shards that do not follow torch.chunk.
 * With global_shape given, the local shape must be the one the spec implies; with
 * DT_FROM_LOCAL_CHECK all ranks must also pass the same global shape, placements and dtype
 * (collective). DT_FROM_LOCAL_BORROW keeps a pointer to local (the caller keeps it alive
 * and unchanged in size); otherwise the data is copied, to the rank's device when local lives
 * elsewhere (as torch's from_local moves it); a borrowed local must be on the rank's device. */
DT_API dt_status dt_tensor_from_local(dt_mesh *mesh, void *local, dt_dtype dtype, int ndim,
                                      const int64_t *local_shape, int nplacements,
                                      const dt_placement *placements, const int64_t *global_shape,
                                      unsigned flags, dt_tensor **out);

DT_API dt_status dt_tensor_retain(dt_tensor *tensor);
/* Drops one reference; the last frees the tensor (and its data when owned). NULL is fine. */
DT_API dt_status dt_tensor_release(dt_tensor *tensor);

/* This rank's shard: a borrowed pointer to dense row-major data (may be NULL when empty). */
DT_API dt_status dt_tensor_to_local(dt_tensor *tensor, void **out);

typedef struct dt_tensor_info {
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];        /* global */
    int64_t local_shape[DT_MAX_NDIM];  /* this rank's shard */
    int64_t local_offset[DT_MAX_NDIM]; /* where the shard starts in the global tensor */
    size_t numel, local_numel, local_bytes;
    int mesh_ndim;
    dt_placement placements[DT_MESH_MAX_NDIM];
    dt_mesh *mesh;    /* borrowed */
    void *local_data; /* borrowed; on device */
    dt_device device; /* where local_data lives */
} dt_tensor_info;

DT_API dt_status dt_tensor_info_get(const dt_tensor *tensor, dt_tensor_info *out);

/* A copy of tensor with the same spec whose local data lives on device (as torch's
 * DTensor.to(device)); the copy is complete when this returns. Not collective. Fails with
 * DT_ERR_UNSUPPORTED for CUDA in a build without it, DT_ERR_NOMEM when device is full. */
DT_API dt_status dt_tensor_to_device(dt_tensor *tensor, dt_device device, dt_tensor **out);

/* The calling rank's tensor memory: tensors alive, bytes of local data they own (on any
 * device; borrowed data is not counted) and the most bytes owned at once since the context
 * began or the last dt_ctx_reset_peak (a training step's peak: activations, gradients and
 * gathered weights included). Storage that activation checkpointing or FSDP resharding dropped
 * does not count while dropped. Not collective. */
typedef struct dt_tensor_memory {
    int64_t tensors, bytes, peak_bytes;
} dt_tensor_memory;
DT_API dt_status dt_ctx_tensor_memory(dt_ctx *ctx, dt_tensor_memory *out);
DT_API dt_status dt_ctx_reset_peak(dt_ctx *ctx);

/* Argument agreement checks (debug mode; off by default, or DT_DEBUG_ARGS=1 in the
 * environment, read at the rank's first checked call; DT_ERR_ARG there when it is not 0 or
 * 1). When on, before each op call, dt_tensor_redistribute(_async), dt_tensor_redistribute_to,
 * dt_checkpoint_save(_async) and dt_checkpoint_load, the ranks of the call's mesh exchange a
 * short description of its arguments (op, each input's global shape, dtype, placements and
 * mesh, the target placements or mesh, the checkpoint's directory and each tensor's name,
 * shape, dtype and placements) with one all_gather of a hash, and on a difference every rank
 * fails with DT_ERR_ARG and the same message naming the first difference, e.g. "matmul: ranks
 * passed different arguments (DT_DEBUG_ARGS): input 1 placements: rank 0 passed [S(0),R], rank
 * 3 passed [S(1),R]". Each checked call is then collective over its mesh (dt_checkpoint_load
 * over each tensor's mesh too), so set it alike on every rank. Ranks that disagree on a mesh's
 * ranks themselves form different groups: that wait ends at the runtime's timeout. Not
 * collective; on is 0 or 1. The cross-mesh move compares its target mesh and placements always,
 * with or without this mode (redistribute.h). */
DT_API dt_status dt_ctx_set_debug_args(dt_ctx *ctx, int on);

/* Copies this rank's shard (local_bytes of dt_tensor_info) into host memory out, from
 * whichever device it lives on, after the work queued on it. Not collective; blocks. */
DT_API dt_status dt_tensor_local_to_host(dt_tensor *tensor, void *out, size_t out_bytes);

/* Gathers the global tensor into host memory out (out_bytes >= numel * dtype size) on every
 * rank, reducing Partial dims. Collective over the mesh; blocks. */
DT_API dt_status dt_tensor_full_tensor(dt_tensor *tensor, void *out, size_t out_bytes);

/* Text picture of which ranks hold which slice of a 1-D or 2-D tensor (like
 * jax.debug.visualize_sharding), Partial included. Writes at most cap bytes, NUL-terminated;
 * *len_out (nullable) = length needed. Not collective. */
DT_API dt_status dt_tensor_visualize(const dt_tensor *tensor, char *buf, size_t cap,
                                     size_t *len_out);
/* The same, printed to f. */
DT_API dt_status dt_tensor_print_layout(const dt_tensor *tensor, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
