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

/* dt_cuda_<slot> for every slot of DT_KERNEL_SLOTS (ops/kernels.h), one per file of this folder
 * (expand.cu, rope.cu, scan.cu: cumsum, vector_norm.cu, ...). Where they differ from the CPU:
 * gather.cu gives 0 for an out-of-range index value and scatter.cu skips one (checking them
 * would need a host sync); optim.cu launches once per up to DT_CU_OPTIM_ITEMS items, their
 * table travelling as the kernel's argument, as torch's multi_tensor_apply does. */
#define DT_CUDA_DECLARE(slot, params) dt_status dt_cuda_##slot params;
DT_KERNEL_SLOTS(DT_CUDA_DECLARE)
#undef DT_CUDA_DECLARE

/* How many float8 products took cuBLASLt's native float8 GEMM (matmul.cu: sm_89+ and a shape
 * it takes) since the process began, so that a check can tell which path it exercised. */
unsigned long long dt_cuda_float8_lt_gemms(void);

#ifdef __cplusplus
}
#endif
#endif
