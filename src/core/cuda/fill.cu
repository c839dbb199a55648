/* The CUDA fill and cast kernels (core/fill.h): one thread per element, each computing its
 * global index, its Philox block and its value with the CPU kernels' per-element code, so the
 * results are the CPU's bit for bit. Queued on the bound rank's compute stream. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/check.h"
#include "core/cuda/cuda_rt.h"
#include "core/fill.h"

#define THREADS 256

#define FOR_EACH(i, n)                                                                             \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);                \
         i += (size_t)gridDim.x * blockDim.x)

/* The box's elements, row-major (the fill describes which global elements they are). */
__global__ void fill_kernel(dt_fill f, void *dst, size_t n) {
    int random = dt_fill_is_random(&f);
    FOR_EACH(k, n) {
        uint64_t gi = dt_fill_index(&f, k);
        dt_philox4 x = {{0, 0, 0, 0}};
        if (random) x = dt_fill_block(&f, gi);
        dt_fill_elem(&f, gi, x, dst, k);
    }
}

__global__ void cast_kernel(dt_dtype to, void *dst, dt_dtype from, const void *src, size_t n) {
    FOR_EACH(k, n) dt_cast_elem(to, dst, from, src, k);
}

extern "C" dt_status dt_cuda_fill(const dt_fill *f, void *dst) {
    const char *fn = "dt_cuda_fill";
    dt_cuda_rank *r = dt_cuda_current();
    if (!r) return dt_error(DT_ERR_DEVICE, "%s: no CUDA device bound to this thread", fn);
    size_t n = 1;
    for (int d = 0; d < f->ndim; d++)
        n *= (size_t)f->local_shape[d];
    if (n == 0) return DT_OK;
    fill_kernel<<<dt_cuda_blocks(n, THREADS), THREADS, 0, r->compute>>>(*f, dst, n);
    return DT_CUDA_LAUNCH_CHECK(fn);
}

extern "C" dt_status dt_cuda_cast(dt_dtype to, void *dst, dt_dtype from, const void *src,
                                  size_t count) {
    const char *fn = "dt_cuda_cast";
    dt_cuda_rank *r = dt_cuda_current();
    if (!r) return dt_error(DT_ERR_DEVICE, "%s: no CUDA device bound to this thread", fn);
    if (count == 0) return DT_OK;
    cast_kernel<<<dt_cuda_blocks(count, THREADS), THREADS, 0, r->compute>>>(to, dst, from, src,
                                                                            count);
    return DT_CUDA_LAUNCH_CHECK(fn);
}
