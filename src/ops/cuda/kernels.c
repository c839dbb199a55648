/* The CUDA kernel table (ops/kernels.h). Built with CUDA only. */
#include "ops/cuda/cuda_kernels.h"

const dt_kernels dt_kernels_cuda = {
    .name = "cuda",
    .unary = dt_cuda_unary,
    .binary = dt_cuda_binary,
    .where = dt_cuda_where,
    .matmul = dt_cuda_matmul,
    .reduce = dt_cuda_reduce,
    .arg_reduce = dt_cuda_arg_reduce,
    .softmax = dt_cuda_softmax,
    .layer_norm = dt_cuda_layer_norm,
    .embedding = dt_cuda_embedding,
    .pick = dt_cuda_pick,
    .expand = dt_cuda_expand,
    .slice = dt_cuda_slice,
    .permute = dt_cuda_permute,
    .sdpa = dt_cuda_sdpa,
    .rope = dt_cuda_rope,
    .dropout = dt_cuda_dropout,
    .gather = dt_cuda_gather,
    .one_hot = dt_cuda_one_hot,
    .topk = dt_cuda_topk,
    .cumsum = dt_cuda_cumsum,
    .vector_norm = dt_cuda_vector_norm,
    .optim_step = dt_cuda_optim_step,
    .scatter_add = dt_cuda_scatter_add,
};
