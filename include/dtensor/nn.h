/* Layer helpers, as torch.nn and torchtitan's Llama write them: each *_create declares a
 * module and its parameters in a registry (dtensor/params.h), each *_forward runs it in a
 * forward scope (dtensor/scope.h) and returns its output, owned by the scope (NULL once the
 * scope has failed; dt_scope_end returns the first error). A forward fetches every weight
 * through dt_params_use and applies its module's style (dtensor/parallel.h) to its input and
 * output with dt_module_input / dt_module_output, so one model definition runs on one rank or
 * under any plan. Shapes: x (..., dim) with batch first and sequence second where it matters.
 * Forwards are collective over the parameters' mesh (they run ops). */
#ifndef DTENSOR_NN_H
#define DTENSOR_NN_H

#include "dtensor/ops.h"
#include "dtensor/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* nn.Linear(in, out, bias): weight (out, in) drawn by init, bias (out) zeros when bias. */
DT_API dt_status dt_nn_linear_create(dt_params *params, const char *name, int64_t in, int64_t out,
                                     int bias, dt_init init, dt_module *module_out);
/* (..., in) -> (..., out) */
DT_API dt_tensor *dt_nn_linear_forward(dt_scope *scope, dt_module module, dt_tensor *x);

/* nn.Embedding(num, dim): weight (num, dim) drawn by init. */
DT_API dt_status dt_nn_embedding_create(dt_params *params, const char *name, int64_t num,
                                        int64_t dim, dt_init init, dt_module *module_out);
/* tokens (...) integer -> (..., dim) */
DT_API dt_tensor *dt_nn_embedding_forward(dt_scope *scope, dt_module module, dt_tensor *tokens);

/* RMSNorm(dim, eps): weight (dim) ones. eps > 0. */
DT_API dt_status dt_nn_rms_norm_create(dt_params *params, const char *name, int64_t dim, double eps,
                                       dt_module *module_out);
DT_API dt_tensor *dt_nn_rms_norm_forward(dt_scope *scope, dt_module module, dt_tensor *x);
/* The block's residual add and this norm in one pass (dt_rms_norm_residual): *sum = x +
 * residual (the next residual stream, owned by the scope), returns rms_norm(*sum). The module's
 * input layout applies to x and residual alike. */
DT_API dt_tensor *dt_nn_rms_norm_residual_forward(dt_scope *scope, dt_module module, dt_tensor *x,
                                                  dt_tensor *residual, dt_tensor **sum);

/* Causal self-attention with rotary positions and grouped-query heads (torchtitan's
 * Attention): container module name with linears wq (dim -> heads * head_dim), wk and wv
 * (dim -> kv_heads * head_dim) and wo (heads * head_dim -> dim), no biases; head_dim =
 * dim / heads; kv_heads divides heads.
 * Context parallel when cp_dim >= 0 (dt_nn_attention_create sets -1; the caller may set a mesh
 * dim afterwards): x's sequence is sharded over mesh dim cp_dim in dt_cp_position's
 * load-balanced order, the rope tables' rows are in that order and sharded alike (S(0)), and
 * attention runs as dt_ring_sdpa (dtensor/context.h) instead of dt_sdpa. */
typedef struct dt_nn_attention {
    dt_module self, wq, wk, wv, wo;
    int64_t heads, kv_heads, head_dim;
    int cp_dim;
} dt_nn_attention;
DT_API dt_status dt_nn_attention_create(dt_params *params, const char *name, int64_t dim,
                                        int64_t heads, int64_t kv_heads, dt_init init,
                                        dt_init out_init, dt_nn_attention *out);
/* x (B, T, dim), rope tables cos and sin (T, head_dim / 2) (dt_rope_tables) -> (B, T, dim) */
DT_API dt_tensor *dt_nn_attention_forward(dt_scope *scope, const dt_nn_attention *attention,
                                          dt_tensor *x, dt_tensor *cos, dt_tensor *sin);

/* SwiGLU feed-forward (torchtitan's FeedForward): container module name with linears w1 and w3
 * (dim -> hidden) and w2 (hidden -> dim), no biases: w2(silu(w1 x) * w3 x). */
typedef struct dt_nn_mlp {
    dt_module self, w1, w2, w3;
} dt_nn_mlp;
DT_API dt_status dt_nn_mlp_create(dt_params *params, const char *name, int64_t dim, int64_t hidden,
                                  dt_init init, dt_init out_init, dt_nn_mlp *out);
DT_API dt_tensor *dt_nn_mlp_forward(dt_scope *scope, const dt_nn_mlp *mlp, dt_tensor *x);

#ifdef __cplusplus
}
#endif
#endif
