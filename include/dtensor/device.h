/* Devices: where a rank computes and where a tensor's local data lives. A rank context has a
 * compute device (the CPU unless dt_ctx_set_device says otherwise); tensors the rank creates
 * afterwards keep their data there, ops run their kernels there, and collectives move it
 * there. On CUDA every rank has its own compute stream and communication stream; several
 * ranks of the local runtime may share one GPU (each with its own streams).
 *
 * Built without CUDA (meson -Dcuda=disabled, or no nvcc), dt_cuda_device_count() is 0 and
 * asking for a CUDA device fails with DT_ERR_UNSUPPORTED; no CUDA call is ever made by a
 * program that stays on the CPU. */
#ifndef DTENSOR_DEVICE_H
#define DTENSOR_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/block.h"
#include "dtensor/status.h"

typedef struct dt_ctx dt_ctx;

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices this process sees: 0 without a GPU, without a driver, or in a build
 * without CUDA. Never fails. */
DT_API int dt_cuda_device_count(void);

/* Sets the calling rank's compute device. Tensors created afterwards (zeros, distribute,
 * from_local, op outputs) keep their local data there. For CUDA it makes the rank's compute
 * and communication streams and its cuBLAS handle; the first call per GPU also sets up that
 * GPU's caching allocator. Not collective, but every rank of a mesh should use the same kind
 * of device. Errors: DT_ERR_UNSUPPORTED (no CUDA in this build), DT_ERR_DEVICE (no such
 * GPU), DT_ERR_ARG (unknown kind). */
DT_API dt_status dt_ctx_set_device(dt_ctx *ctx, dt_device device);

/* The rank's compute device ({DT_DEVICE_CPU, 0} for a NULL context). */
DT_API dt_device dt_ctx_device(const dt_ctx *ctx);

/* Lets f32 GEMMs of this rank use TF32 tensor cores (like torch.backends.cuda.matmul.
 * allow_tf32), on its GPU now or set later. Off by default. No effect on the CPU. */
DT_API dt_status dt_ctx_set_tf32(dt_ctx *ctx, int allow);

/* Blocks until the work this rank queued on its GPU streams is done (a no-op on the CPU).
 * Kernels and copies run asynchronously on CUDA; results read through dt_tensor_full_tensor,
 * dt_tensor_local_to_host or dt_tensor_to_device are always complete. */
DT_API dt_status dt_ctx_synchronize(dt_ctx *ctx);

/* The compute stream (a cudaStream_t) of the rank whose op runs on the calling thread, for a
 * registered op's CUDA kernel (dt_op_register) to queue its work on; NULL when no GPU is
 * bound to the thread. */
DT_API void *dt_cuda_current_stream(void);

/* The caching allocator of one CUDA device. Freed blocks stay cached by size class and by
 * stream, and are handed out again to the same stream, so steady-state ops do not call
 * cudaMalloc/cudaFree. When cudaMalloc fails the cache is emptied and the allocation tried
 * once more before DT_ERR_NOMEM. */
typedef struct dt_memory_stats {
    size_t in_use;          /* bytes handed out and not yet freed (rounded to size classes) */
    size_t peak;            /* most in_use so far */
    size_t cached;          /* bytes held in the cache, free for reuse */
    uint64_t requests;      /* allocations asked of the cache */
    uint64_t device_allocs; /* cudaMalloc calls */
    uint64_t device_frees;  /* cudaFree calls */
} dt_memory_stats;

/* Statistics of device's allocator (all zeros for a GPU not used yet). DT_ERR_UNSUPPORTED
 * for the CPU and in builds without CUDA. Thread-safe. */
DT_API dt_status dt_device_memory_stats(dt_device device, dt_memory_stats *out);

/* Gives device's cached blocks back to the driver (torch.cuda.empty_cache). Thread-safe. */
DT_API dt_status dt_device_empty_cache(dt_device device);

#ifdef __cplusplus
}
#endif
#endif
