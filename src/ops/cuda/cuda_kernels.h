/* The CUDA kernels: the same calls, arguments and results as the CPU kernels of
 * ops/kernels.h (read that header for each one's contract), on device pointers, queued on the
 * bound rank's compute stream (core/cuda/cuda_rt.h) and returning once queued. bf16 and f16 are
 * computed in f32 and rounded once, as on the CPU; the per-element math is ops/cpu/elementwise.h.
 * GEMMs go through cuBLAS (bf16/f16 inputs with f32 compute; f32 with TF32 when the rank
 * allows it). Built with CUDA only. */
#ifndef DT_OPS_CUDA_KERNELS_H
#define DT_OPS_CUDA_KERNELS_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

dt_status dt_cuda_unary(dt_unary f, double scalar, const dt_local *x, dt_local *out);
dt_status dt_cuda_binary(dt_binary f, const dt_local *a, const dt_local *b, dt_local *out);
dt_status dt_cuda_where(const dt_local *cond, const dt_local *a, const dt_local *b, dt_local *out);
dt_status dt_cuda_matmul(const dt_local *a, const dt_local *b, int trans_b, dt_local *out);
dt_status dt_cuda_reduce(dt_reduce_op op, unsigned mask, const dt_local *x, dt_local *out);
dt_status dt_cuda_arg_reduce(int is_max, int dim, int64_t offset, const dt_local *x,
                             dt_local *out, dt_local *values);
dt_status dt_cuda_softmax(int log, int dim, const dt_local *x, dt_local *out);
dt_status dt_cuda_layer_norm(int rms, double eps, const dt_local *x, const dt_local *weight,
                             const dt_local *bias, dt_local *out);
dt_status dt_cuda_embedding(const dt_local *table, int64_t row_offset, const dt_local *indices,
                            dt_local *out);
dt_status dt_cuda_pick(const dt_local *logits, int64_t class_offset, const dt_local *target,
                       dt_local *out);
dt_status dt_cuda_expand(const dt_local *x, dt_local *out); /* expand.cu */
dt_status dt_cuda_slice(const dt_local *x, const int64_t *start, dt_local *out);
dt_status dt_cuda_permute(const dt_local *x, const int *perm, dt_local *out);
dt_status dt_cuda_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                       double scale, dt_local *out, dt_local *lse);
dt_status dt_cuda_sdpa_backward(const dt_local *g, const dt_local *q, const dt_local *k,
                                const dt_local *v, const dt_local *lse, int causal, double scale,
                                dt_local *dq, dt_local *dk, dt_local *dv);
dt_status dt_cuda_rope(const dt_local *x, const dt_local *cos, const dt_local *sin,
                       dt_local *out); /* rope.cu */
dt_status dt_cuda_dropout(double p, uint64_t seed, uint64_t offset, const int64_t *global_shape,
                          const int64_t *box_offset, const dt_local *x, dt_local *out);
/* gather.cu: out-of-range index values give 0 here (checking them would need a host sync). */
dt_status dt_cuda_gather(const dt_local *x, int dim, const int64_t *shift, int64_t dim_offset,
                         int64_t dim_size, const dt_local *index, dt_local *out);
dt_status dt_cuda_one_hot(const dt_local *index, int64_t num_classes, int64_t class_offset,
                          dt_local *out);
dt_status dt_cuda_topk(const dt_local *x, int64_t k, int dim, int smallest, dt_local *out);
dt_status dt_cuda_cumsum(const dt_local *x, int dim, dt_local *out); /* scan.cu */
dt_status dt_cuda_vector_norm(double ord, unsigned mask, const dt_local *x,
                              dt_local *out); /* vector_norm.cu */
/* optim.cu: one launch per up to DT_CU_OPTIM_ITEMS items (their table travels as the kernel's
 * argument, as torch's multi_tensor_apply does). */
dt_status dt_cuda_optim_step(const dt_optim_hyper *h, const dt_optim_item *items, int n);
/* scatter.cu: out-of-range index values are skipped (checking them would need a host sync). */
dt_status dt_cuda_scatter_add(const dt_local *src, int dim, const int64_t *shift,
                              int64_t dim_offset, int64_t dim_size, const dt_local *index,
                              dt_local *out);

#ifdef __cplusplus
}
#endif
#endif
