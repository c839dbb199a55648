/* The cuBLAS attention path (attention_gemm.cu): dt_cuda_sdpa's and dt_cuda_sdpa_backward's
 * contracts (ops/kernels.h), for head dims above the flash kernels' limit. Internal to
 * src/ops/cuda. */
#ifndef DT_OPS_CUDA_ATTENTION_GEMM_H
#define DT_OPS_CUDA_ATTENTION_GEMM_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

dt_status dt_cuda_sdpa_gemm(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                            dt_sdpa_heads heads, double scale, dt_local *out, dt_local *lse);
dt_status dt_cuda_sdpa_backward_gemm(const dt_local *g, const dt_local *q, const dt_local *k,
                                     const dt_local *v, const dt_local *lse, int causal,
                                     dt_sdpa_heads heads, double scale, dt_local *dq, dt_local *dk,
                                     dt_local *dv);

#ifdef __cplusplus
}
#endif
#endif
