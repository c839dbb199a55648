/* Async tensor parallelism (torchtitan's enable_async_tensor_parallel, PyTorch's
 * fused_all_gather_matmul / fused_matmul_reduce_scatter): sequence parallelism's all_gather
 * before a colwise linear and reduce_scatter after a rowwise one, each cut per tp peer so that
 * one chunk's GEMM runs while the next chunk moves (a "collective matmul"). The transfers are
 * point to point (tp - 1 steps of one send to the next or a shifted peer and one receive), on
 * the rank's communication thread; the results are those of the synchronous form
 * (redistribute, then dt_linear) to rounding: the GEMMs run per chunk of rows, which a BLAS
 * may round differently from the whole, and DT_ASYNC_TP_RING sums the reduce_scatter's parts
 * in ring order. DT_ASYNC_TP_ORDERED sums them in rank order, as the local runtime's
 * reduce_scatter does, so its sums match that bitwise when the GEMMs do.
 *
 * The styles of dtensor/parallel.h use these when dt_parallelize_options.async_tp is set: a
 * colwise linear whose input arrives Shard(1) over tp runs dt_all_gather_linear, a rowwise
 * linear whose output goes to Shard(1) runs dt_linear_reduce_scatter, and attention's q, k, v
 * projections (the MLP's w1, w3) share one gather when their container prepares its input
 * Replicate.
 *
 * Shapes: x is (B, T, K) with the sequence as dim 1; weights are nn.Linear's (out, in). Mesh
 * dims other than tp may shard the batch (dim 0) or replicate. f32 or f64, on the CPU or CUDA
 * (all operands on one device; each transfer waits for the rank's compute stream). */
#ifndef DTENSOR_ASYNC_TP_H
#define DTENSOR_ASYNC_TP_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_async_tp_mode {
    DT_ASYNC_TP_OFF = 0,
    DT_ASYNC_TP_RING,    /* reduce_scatter by a ring of partial sums (two blocks of memory) */
    DT_ASYNC_TP_ORDERED, /* each partial to its owner, summed there in rank order (tp blocks
                            of memory), as the local runtime's reduce_scatter sums */
} dt_async_tp_mode;

/* outs[i] = all_gather(x, dim 1, over mesh dim tp_dim) @ w[i]^T for i < nw (1 <= nw <= 8):
 * x (B, T, K) placed Shard(1) over tp, each w[i] (N_i, K) Shard(0) over tp (colwise) and
 * Replicate elsewhere; outs[i] (B, T, N_i) keeps x's placements but Shard(2) over tp. New
 * tensors, owned by the caller. The gathered x is kept for backward (as the synchronous form
 * keeps it). Differentiable: w[i]'s gradient is a local GEMM on the gathered x; x's is the
 * dual collective matmul, reduce_scatter(sum_i dy[i] @ w[i]) on dt_linear_reduce_scatter's
 * schedule, once for all nw outputs (their nodes hand their gradients to one node of x's,
 * which runs after them). Collective over tp_dim's group; blocks. */
DT_API dt_status dt_all_gather_linear(dt_tensor *x, int nw, dt_tensor *const *w, int tp_dim,
                                      dt_async_tp_mode mode, dt_tensor **outs);

/* out = reduce_scatter(x @ w^T over mesh dim tp_dim, onto dim 1): x (B, T, K) placed Shard(2)
 * over tp, w (N, K) Shard(1) over tp (rowwise) and Replicate elsewhere; out (B, T, N) keeps
 * x's placements but Shard(1) over tp. New, owned by the caller. mode RING or ORDERED.
 * Differentiable: backward runs dt_all_gather_linear's schedule on out's gradient (x's
 * gradient), and w's gradient is a local GEMM on the gradient it gathered. Collective over
 * tp_dim's group; blocks. */
DT_API dt_status dt_linear_reduce_scatter(dt_tensor *x, dt_tensor *w, int tp_dim,
                                          dt_async_tp_mode mode, dt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
