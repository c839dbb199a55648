/* float8 training pieces in the style of torchao.float8: amax-based scales, scaled casts to
 * and from DT_F8E4M3 / DT_F8E5M2 (dtensor/types.h), a scaled float8 matmul (torch._scaled_mm)
 * and a float8 linear for training, with the bf16 linear it is measured against. A float8
 * tensor is a plain DT_F8* tensor; its scale is a separate f32 tensor that the caller keeps
 * next to it (data = saturate(x * scale)).
 *
 * Scales are torchao's "dynamic" recipe: scale = max_finite(dtype) / max(amax, 1e-12),
 * computed in f64 and rounded to f32, where amax is the largest |x| over the whole (global)
 * tensor (tensorwise) or over one dim (axiswise, torchao's rowwise). Under sharding the amax is
 * global: each rank's local amax, then one small all_reduce MAX over the mesh dims that shard
 * the reduced dims (none when they are replicated).
 *
 * None of these calls is recorded by autograd except dt_linear_float8 and dt_linear_bf16
 * (straight-through: see there). The calls that take tensors are collective over their mesh
 * (the ops they run may communicate) and block; their outputs are new tensors owned by the
 * caller, set only on success. dt_float8_max, dt_module_set_float8 and dt_module_set_bf16 are
 * local. */
#ifndef DTENSOR_FLOAT8_H
#define DTENSOR_FLOAT8_H

#include "dtensor/params.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest finite value of a float8 dtype (448 for e4m3, 57344 for e5m2); 0 otherwise.
 * Not collective. */
DT_API double dt_float8_max(dt_dtype dtype);

/* One scale for all of x (a float tensor): a 0-d f32 tensor, Replicate on every mesh dim. */
DT_API dt_status dt_float8_scale_tensorwise(dt_tensor *x, dt_dtype dtype, dt_tensor **scale_out);
/* One scale per slice of x along dim (amax over dim, kept as size 1): an f32 tensor of x's
 * shape with dim's size 1, sharded as x on the other dims. dim < 0 counts from the end. For
 * a (M, K) @ (K, N) matmul: dim -1 for a (a scale per row), dim 0 for b (per column). */
DT_API dt_status dt_float8_scale_axiswise(dt_tensor *x, dt_dtype dtype, int dim,
                                          dt_tensor **scale_out);

/* Scaled casts; scale (f32) broadcasts against x.
 *   dtype float8, x f32/f64/bf16/f16: out = x * scale (in f32) rounded to dtype, saturating.
 *   x float8, dtype f32/f64/bf16/f16: out = x / scale (in f32), then rounded to dtype.
 * out keeps x's placements. DT_ERR_DTYPE for any other pair or a scale that is not f32. */
DT_API dt_status dt_cast_scaled(dt_tensor *x, dt_dtype dtype, dt_tensor *scale, dt_tensor **out);

/* out (M, N), f32 = (a @ b) / (a_scale * b_scale): a (M, K) and b (K, N) float8 (either
 * format each), multiplied with the products accumulated in f32 (dt_mm on float8 inputs);
 * a_scale 0-d or (M, 1), b_scale 0-d or (1, N). Sharded as dt_mm shards. */
DT_API dt_status dt_mm_scaled(dt_tensor *a, dt_tensor *a_scale, dt_tensor *b, dt_tensor *b_scale,
                              dt_tensor **out);

/* torchao's Float8Linear (tensorwise, e4m3 for x and w): out = dt_linear(x8, w8, bias) where
 * x8 and w8 are x and w rounded through e4m3 under their own tensorwise scales, so the forward
 * values are those of the float8 GEMM. Recorded by autograd with straight-through gradients
 * (the rounding's derivative taken as 1, as torchao does); unlike torchao, the output gradient
 * is not rounded to e5m2 in backward. x and w f32. */
DT_API dt_status dt_linear_float8(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_tensor **out);

/* torchao's convert_to_float8_training for one linear module (dt_nn_linear_create's, or a
 * layer's wq, w1, ...): on, its forward (dt_nn_linear_forward) runs dt_linear_float8 instead
 * of dt_linear. Modules whose weights are not f32 fail in their forward. Not collective. */
DT_API dt_status dt_module_set_float8(dt_module module, int on);

/* The bf16 reference float8 training is measured against, as torchtitan's mixed precision
 * (mixed_precision_param = "bfloat16") computes a linear: out = dt_linear(xb, wb, bias) where
 * xb and wb are x and w rounded to bf16 (nearest, ties to even) and held in f32, so the
 * products are exact and accumulated in f32, as a bf16 GEMM with f32 accumulation does; the
 * master weights and their gradients stay f32. Straight-through gradients (the rounding's
 * derivative taken as 1); unlike torch's bf16 linear, out and the gradients are not rounded
 * to bf16. x and w f32. */
DT_API dt_status dt_linear_bf16(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_tensor **out);

/* On: the linear module's forward runs dt_linear_bf16 instead of dt_linear. A module is
 * float8 or bf16, not both (DT_ERR_ARG). Not collective. */
DT_API dt_status dt_module_set_bf16(dt_module module, int on);

#ifdef __cplusplus
}
#endif
#endif
