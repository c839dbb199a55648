/* Creating DTensors where they live, without a full host copy on any rank, and converting
 * their dtype.
 *
 * Creation (ones, full_value, arange, eye, rand, randn): every rank computes only its own
 * shard, from its local shape and global offset (dt_shard_layout), on its device (the CUDA
 * path runs a kernel; nothing is copied from the host); no communication. Partial placements
 * follow the library's convention (dtensor/tensor.h), so the global value is the one asked
 * for: under P(sum) the rank at coordinate 0 of that mesh dim holds the value and the others
 * zeros; P(avg), P(max), P(min) hold it everywhere. None of these calls is collective (each
 * rank may call them alone) and none blocks on other ranks; every rank that holds a shard of
 * the tensor must call them with the same arguments. The caller owns the new tensor. Errors:
 * as dt_tensor_zeros, plus the value checks each call names; on error *out is not
 * written.
 *
 * Random numbers do not depend on the mesh: element i (flat, row-major) of the global tensor
 * is a pure function of (seed, offset, i, dtype) through the counter-based generator
 * Philox4x32-10, so a tensor made on any mesh with any placements equals, bit for bit, the
 * same tensor made on one rank, on the CPU or on a GPU. */
#ifndef DTENSOR_CREATE_H
#define DTENSOR_CREATE_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- constants ---------------------------------------------------------------------------- */

/* torch.ones. */
DT_API dt_status dt_tensor_ones(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                                int nplacements, const dt_placement *placements, dt_tensor **out);

/* torch.full: every element is value, rounded once to dtype (named so because
 * dt_tensor_full_tensor gathers a tensor, as DTensor.full_tensor). Integer dtypes truncate toward
 * zero, as torch does; a value that is NaN, infinite or out of the type's range after
 * truncation is DT_ERR_ARG. */
DT_API dt_status dt_tensor_full_value(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                                      int nplacements, const dt_placement *placements, double value,
                                      dt_tensor **out);

/* torch.arange(start, end, step): a 1-D tensor of ceil((end - start) / step) elements,
 * element i = start + i * step computed in f64 and rounded once (integer dtypes: in i64, and
 * start and step must be whole numbers). DT_ERR_ARG for step 0, a step whose sign does not
 * lead from start to end, a non-finite bound, or a last element outside an integer dtype. */
DT_API dt_status dt_tensor_arange(dt_mesh *mesh, dt_dtype dtype, double start, double end,
                                  double step, int nplacements, const dt_placement *placements,
                                  dt_tensor **out);

/* torch.eye(n, m): an (n, m) tensor with ones where row == column. n, m >= 0. */
DT_API dt_status dt_tensor_eye(dt_mesh *mesh, dt_dtype dtype, int64_t n, int64_t m, int nplacements,
                               const dt_placement *placements, dt_tensor **out);

/* ---- like another tensor ----------------------------------------------------------------- */

/* torch.zeros_like, ones_like, full_like(x, value), empty_like: a tensor with x's mesh, shape,
 * dtype, device and placements, except that Partial becomes Replicate: the new value is known
 * whole on every rank, so a Partial would only make a later consumer pay an all_reduce with
 * nothing to reduce (PyTorch's like-factories do the same). Each rank writes only its shard;
 * no communication; not collective. empty_like leaves the storage unwritten. x is not
 * changed; the caller owns *out; errors as the calls above (value: as
 * dt_tensor_full_value). */
DT_API dt_status dt_tensor_zeros_like(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_tensor_ones_like(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_tensor_full_like(dt_tensor *x, double value, dt_tensor **out);
DT_API dt_status dt_tensor_empty_like(dt_tensor *x, dt_tensor **out);

/* Tensor.new_full(shape, value): x's mesh, dtype and device; x's placements (Partial made
 * Replicate, as above) when shape is x's shape, otherwise Replicate (x's shards need not fit
 * another shape), as PyTorch's new_* factories. */
DT_API dt_status dt_tensor_new_full(dt_tensor *x, int ndim, const int64_t *shape, double value,
                                    dt_tensor **out);

/* ---- random numbers ----------------------------------------------------------------------- */

/* A Philox stream, as torch.Generator: the 64-bit seed is the key, the offset counts the
 * 128-bit counter blocks already used. Plain data: make one per rank with the same seed
 * (dt_generator_make, or {seed, offset} for an explicit position). Every random call uses
 * blocks offset, offset + 1, ... and then advances offset past them (by ceil(numel / 4) for
 * f32, bf16 and f16 and ceil(numel / 2) for f64, numel counting the global tensor), like
 * torch's generator after each draw. The advance depends on the global shape only, so the
 * generators of all ranks stay equal without talking, also on ranks whose shard is empty or
 * zero (P(sum) off coordinate 0); a call that fails leaves the generator unchanged. One
 * generator per thread: the calls read and write it without locking. */
typedef struct dt_generator {
    uint64_t seed;
    uint64_t offset;
} dt_generator;

static inline dt_generator dt_generator_make(uint64_t seed) {
    dt_generator g = {seed, 0};
    return g;
}

/* Draws, per element i of the global tensor (block offset + i / 4, lane i % 4; f64: block
 * offset + i / 2, two lanes per draw):
 *   uniform   U = the lane's top p bits * 2^-p, p = the dtype's significand (f32 24, f64 53,
 *             bf16 8, f16 11), so U is exact in the output type and 0 <= U < 1 holds after
 *             rounding; lo + (hi - lo) * U is computed in f64 and rounded once (bf16 and f16
 *             through f32), which may round up to hi for a wide [lo, hi), as in torch.
 *   normal    Box-Muller on a fixed pair: elements 2k and 2k+1 share two uniforms (24-bit from
 *             32-bit lanes; f64: 53-bit from the block's two 64-bit lanes) and take r cos t and
 *             r sin t; mean + std * Z in f64, rounded once. The log, sin and cos are the
 *             library's own (no libm), so CPU and GPU agree bit for bit.
 * Float dtypes only (DT_ERR_DTYPE for integers); gen must not be NULL. */

/* torch.rand: uniform in [0, 1). */
DT_API dt_status dt_tensor_rand(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                                int nplacements, const dt_placement *placements, dt_generator *gen,
                                dt_tensor **out);

/* torch.randn: standard normal. */
DT_API dt_status dt_tensor_randn(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                                 int nplacements, const dt_placement *placements, dt_generator *gen,
                                 dt_tensor **out);

/* Tensor.uniform_(lo, hi): overwrites tensor's shard in place (keeping its placements, under
 * the Partial convention above) with uniform draws in [lo, hi). lo <= hi, both finite. Not
 * collective. Queued on the rank's compute stream on a GPU, like an op. */
DT_API dt_status dt_tensor_uniform_(dt_tensor *tensor, double lo, double hi, dt_generator *gen);

/* Tensor.normal_(mean, std): likewise with normal draws. mean finite, 0 <= std < inf. */
DT_API dt_status dt_tensor_normal_(dt_tensor *tensor, double mean, double std, dt_generator *gen);

/* ---- dtype conversion --------------------------------------------------------------------- */

/* Tensor.to(dtype): a new tensor (always a copy, also for the same dtype) with x's mesh,
 * placements, shape and device and each element converted: floats to floats rounded to
 * nearest even once (f64 to bf16/f16 through f32, as torch), floats to integers truncated
 * toward zero and saturated (NaN to 0), integers to integers wrapped, i64 to floats rounded
 * once. Any pair of the six dtypes.
 *
 * Partial inputs, where casting each rank's part is not casting the sum:
 *   - A widening float cast (bf16/f16 to f32/f64, f32 to f64) casts the parts and keeps
 *     Partial: the reduction that follows then runs in the wider type, as PyTorch's
 *     mixed-precision FSDP reduces gradients in reduce_dtype; the global value is then the
 *     parts summed in the wider type, more accurate than the cast of the narrow sum.
 *   - P(max)/P(min) under a narrowing float cast keep Partial: rounding to nearest is
 *     monotone, so the max of the rounded parts is the rounded max.
 *   - Otherwise (a narrowing cast of P(sum)/P(avg), or integers involved): a sum of rounded
 *     parts is not the rounded sum (f32 parts 1 + 2^-8 and 2^-8, each cast to bf16, sum to 1
 *     in bf16; their sum, cast, is 1 + 2^-7), so x is first reduced in its own dtype (every
 *     Partial mesh dim, one redistribute to Replicate), then cast, and the result is laid out
 *     again in x's placements (the convention above: no further communication). Its global
 *     value is exactly the cast of x's global value. Collective over the mesh in this case
 *     only (all ranks call it; it blocks); otherwise local.
 * The caller owns *out. DT_ERR_DTYPE for an unknown dtype. */
DT_API dt_status dt_cast(dt_tensor *x, dt_dtype dtype, dt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
