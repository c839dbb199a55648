/* The CUDA kernel table (ops/kernels.h). Built with CUDA only. */
#include "ops/cuda/cuda_kernels.h"

/* clang-format off */
const dt_kernels dt_kernels_cuda = {
    .name = "cuda",
#define CUDA_ENTRY(slot, params) .slot = dt_cuda_##slot,
    DT_KERNEL_SLOTS(CUDA_ENTRY)
#undef CUDA_ENTRY
};
/* clang-format on */
