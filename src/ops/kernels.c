/* The kernel table of each device: the CPU's here, CUDA's in ops/cuda/kernels.c. */
#include "dt_config.h"
#include "ops/kernels.h"

/* clang-format off */
const dt_kernels dt_kernels_cpu = {
    .name = "cpu",
#define CPU_ENTRY(slot, params) .slot = dt_cpu_##slot,
    DT_KERNEL_SLOTS(CPU_ENTRY)
#undef CPU_ENTRY
};
/* clang-format on */

#if DT_HAVE_CUDA
extern const dt_kernels dt_kernels_cuda;
const dt_kernels *const dt_kernel_tables[2] = {&dt_kernels_cpu, &dt_kernels_cuda};
#else
const dt_kernels *const dt_kernel_tables[2] = {&dt_kernels_cpu, NULL};
#endif
