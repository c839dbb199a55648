/* The pre-flash CPU attention kernels (attention_gemm_ref.c), bench_attention's reference. */
#ifndef DT_BENCH_ATTENTION_GEMM_REF_H
#define DT_BENCH_ATTENTION_GEMM_REF_H

#include "ops/kernels.h"

dt_status ref_gemm_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                        double scale, dt_local *out, dt_local *lse);
dt_status ref_gemm_sdpa_backward(const dt_local *g, const dt_local *q, const dt_local *k,
                                 const dt_local *v, const dt_local *lse, int causal, double scale,
                                 dt_local *dq, dt_local *dk, dt_local *dv);

#endif
