/* CUDA fused optimizer step: the items' table travels by value as the kernel's argument (up to
 * DT_CU_OPTIM_ITEMS a launch, as torch's multi_tensor_apply), each block takes one chunk of one
 * item, and every element goes through ops/cpu/optim_math.h as on the CPU. */
#include "ops/cpu/optim_math.h"
#include "ops/cuda/cuda_common.cuh"

#define DT_CU_OPTIM_ITEMS 16
#define DT_CU_OPTIM_CHUNK 65536

struct optim_table {
    dt_optim_hyper h;
    int n;
    dt_optim_item item[DT_CU_OPTIM_ITEMS];
    unsigned first_block[DT_CU_OPTIM_ITEMS + 1]; /* item k owns blocks [first_block[k], ..[k+1]) */
};

__global__ void optim_kernel(optim_table t) {
    int k = 0;
    while (k + 1 < t.n && blockIdx.x >= t.first_block[k + 1]) k++;
    const dt_optim_item *it = &t.item[k];
    uint64_t lo = (uint64_t)(blockIdx.x - t.first_block[k]) * DT_CU_OPTIM_CHUNK;
    uint64_t hi = lo + DT_CU_OPTIM_CHUNK < it->numel ? lo + DT_CU_OPTIM_CHUNK : it->numel;
    for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dt_om_step(&t.h, it, i);
}

dt_status dt_cuda_optim_step(const dt_optim_hyper *h, const dt_optim_item *items, int n) {
    const char *fn = "dt_cuda_optim_step";
    DT_CU_RANK(r, fn);
    int k = 0;
    while (k < n) {
        optim_table t;
        t.h = *h, t.n = 0, t.first_block[0] = 0;
        for (; k < n && t.n < DT_CU_OPTIM_ITEMS; k++) {
            if (items[k].numel == 0) continue;
            uint64_t chunks = (items[k].numel + DT_CU_OPTIM_CHUNK - 1) / DT_CU_OPTIM_CHUNK;
            if (t.first_block[t.n] + chunks > 0x7fffffffu) break; /* the next launch takes it */
            t.item[t.n] = items[k];
            t.first_block[t.n + 1] = t.first_block[t.n] + (unsigned)chunks;
            t.n++;
        }
        if (t.n == 0) continue;
        optim_kernel<<<t.first_block[t.n], DT_CU_THREADS, 0, r->compute>>>(t);
        DT_CHECK(DT_CUDA_LAUNCH_CHECK(fn));
    }
    return DT_OK;
}
