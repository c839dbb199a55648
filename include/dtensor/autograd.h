/* Autograd on DTensors: ops on tensors that need gradients record a node (the op, its
 * arguments, references to its inputs); dt_backward walks the nodes in reverse and
 * accumulates each leaf's gradient. Backward rules are written with the library's own ops, so
 * a gradient is a DTensor whose placements follow from sharding propagation and whose
 * communication dispatch inserts: an all_gather in forward becomes a reduce_scatter in
 * backward because the rules' outputs are Partial where the forward's inputs were gathered.
 *
 * Grad mode, grad sync and the graph belong to the rank (its context); like every op, backward
 * is collective over the loss's mesh. */
#ifndef DTENSOR_AUTOGRAD_H
#define DTENSOR_AUTOGRAD_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a leaf (a tensor no recorded op made) as needing a gradient, or not. DT_ERR_ARG for a
 * tensor an op recorded (its gradient flows to its inputs) or for an integer dtype. */
DT_API dt_status dt_tensor_set_requires_grad(dt_tensor *tensor, int requires_grad);
/* 1 when ops on tensor record nodes (a leaf marked so, or the output of a recorded op); 0
 * otherwise and for NULL. */
DT_API int dt_tensor_requires_grad(const dt_tensor *tensor);
/* The gradient accumulated in a leaf, borrowed (NULL when none yet): a DTensor of the leaf's
 * shape, in the leaf's placements when grad sync is on. */
DT_API dt_tensor *dt_tensor_grad(const dt_tensor *tensor);
/* The dtype a leaf's gradient is accumulated and reduced in (FSDP's reduce_dtype): by default
 * the leaf's own; DT_F32 for a bf16 parameter keeps the sum of its micro-batch gradients and
 * its data-parallel reduction in f32 (torchtitan's default), and the optimizer's master weights
 * (dtensor/optim.h) take that f32 gradient. Each contribution is widened before it is added (a
 * Partial stays Partial: the reduction that places it runs in the wide type). DT_ERR_ARG for a
 * non-leaf, a non-float dtype, or a leaf holding a gradient of another dtype. */
DT_API dt_status dt_tensor_set_grad_dtype(dt_tensor *tensor, dt_dtype dtype);
/* Drops the leaf's gradient (torch's zero_grad(set_to_none=True)). */
DT_API dt_status dt_tensor_zero_grad(dt_tensor *tensor);

/* Backpropagates from loss (a DTensor of one element, any placements) with gradient 1 and
 * frees the graph as it goes: each node drops the tensors it saved as soon as its rule ran (so
 * activations die during backward, not after it), and a second backward through the same
 * graph is DT_ERR_ARG. Saved tensors whose storage activation checkpointing or FSDP dropped
 * (dtensor/ac.h, dtensor/fsdp.h) are refilled just before the first rule that reads them.
 * Gradients add into leaves that have one already. */
DT_API dt_status dt_backward(dt_tensor *loss);
/* The same from any tensor t with gradient grad (t's shape; any placements). */
DT_API dt_status dt_backward_with(dt_tensor *t, dt_tensor *grad);

/* Grad mode of the calling rank: while disabled (dt_no_grad_enter until the matching
 * dt_no_grad_exit; scopes nest), ops record nothing. */
DT_API dt_status dt_no_grad_enter(dt_ctx *ctx);
DT_API dt_status dt_no_grad_exit(dt_ctx *ctx);
DT_API int dt_grad_enabled(const dt_ctx *ctx);

/* Grad sync (default on): leaf gradients end in the leaf's placements: a leaf replicated over
 * a mesh dim whose gradient is Partial there is all_reduced (DDP), one sharded there (and
 * gathered by the ops that used it) is reduce_scattered (FSDP), once per backward however
 * many ops used the leaf. Off: leaf gradients stay as backward left them (Partial where the
 * leaf was replicated or gathered), for gradient accumulation; the next backward with sync on
 * adds to them and reduces once. */
DT_API dt_status dt_ctx_set_grad_sync(dt_ctx *ctx, int sync);

/* Grad sync is coalesced, as DDP's buckets and FSDP2's per-group reduce_scatter are: after a
 * backward, the leaves whose gradients need the same collectives (the same mesh dims, reduce
 * op, gradient dtype and device) are packed, in the order backward reached them, into buckets
 * of at most bytes (DDP's bucket_cap_mb; a larger gradient gets a bucket of its own), and each
 * bucket is one all_reduce of a flat buffer (DDP) or one reduce_scatter whose rank-k region
 * holds every leaf's shard for rank k (FSDP, uneven shards included). Each element is reduced
 * as it would be alone (bitwise on the local runtime). Default 25 MiB; 0 reduces every leaf by
 * itself. Moves that are not plain reductions (a gradient to gather, a pending norm) are always
 * made leaf by leaf. Not collective, but every rank must set the same value. */
DT_API dt_status dt_ctx_set_grad_bucket_bytes(dt_ctx *ctx, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
