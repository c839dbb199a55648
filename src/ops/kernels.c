/* The kernel table of each device: the CPU's here, CUDA's in ops/cuda/kernels.c. */
#include "dt_config.h"
#include "ops/kernels.h"

const dt_kernels dt_kernels_cpu = {
    .name = "cpu",
    .unary = dt_cpu_unary,
    .binary = dt_cpu_binary,
    .where = dt_cpu_where,
    .matmul = dt_cpu_matmul,
    .reduce = dt_cpu_reduce,
    .arg_reduce = dt_cpu_arg_reduce,
    .softmax = dt_cpu_softmax,
    .layer_norm = dt_cpu_layer_norm,
    .embedding = dt_cpu_embedding,
    .pick = dt_cpu_pick,
    .expand = dt_cpu_expand,
    .slice = dt_cpu_slice,
    .permute = dt_cpu_permute,
    .sdpa = dt_cpu_sdpa,
    .sdpa_backward = dt_cpu_sdpa_backward,
    .rope = dt_cpu_rope,
    .dropout = dt_cpu_dropout,
    .gather = dt_cpu_gather,
    .one_hot = dt_cpu_one_hot,
    .topk = dt_cpu_topk,
    .cumsum = dt_cpu_cumsum,
    .vector_norm = dt_cpu_vector_norm,
    .optim_step = dt_cpu_optim_step,
    .scatter_add = dt_cpu_scatter_add,
};

#if DT_HAVE_CUDA
extern const dt_kernels dt_kernels_cuda;
const dt_kernels *const dt_kernel_tables[2] = {&dt_kernels_cpu, &dt_kernels_cuda};
#else
const dt_kernels *const dt_kernel_tables[2] = {&dt_kernels_cpu, NULL};
#endif
