/* The CUDA runtime as the library uses it: per-rank streams and handles, the calling thread's
 * bound rank, and the conversion of CUDA and cuBLAS errors into statuses. Included by C files
 * and .cu files alike; only compiled in builds with CUDA (DT_HAVE_CUDA). */
#ifndef DT_CORE_CUDA_RT_H
#define DT_CORE_CUDA_RT_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/check.h"
#include "dtensor/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One rank's GPU state, made by dt_ctx_set_device. Kernels run on compute; collectives on
 * comm, ordered against compute with events. */
typedef struct dt_cuda_rank {
    int device;
    cudaStream_t compute, comm;
    cublasHandle_t blas;      /* bound to compute */
    cublasLtHandle_t lt;
    void *workspace;          /* cuBLAS(Lt) workspace on device, workspace_bytes long */
    size_t workspace_bytes;
    int allow_tf32;
    struct dt_cuda_rank *next; /* in the pool of released states */
} dt_cuda_rank;

/* The rank bound to the calling thread (NULL when none). Kernels and the CUDA memory table
 * use it; dispatch, redistribute and the comm layer bind the rank before calling them. */
dt_cuda_rank *dt_cuda_current(void);
/* Binds r (NULL unbinds) to the calling thread and makes r's device current. */
void dt_cuda_bind(dt_cuda_rank *r);

/* A rank state on device: a released one when there is one, else a new one. */
dt_status dt_cuda_rank_create(int device, dt_cuda_rank **rank_out);
/* Gives r back for reuse once its streams are idle (a context's end). */
void dt_cuda_rank_release(dt_cuda_rank *r);
/* Frees r's streams and handles. */
void dt_cuda_rank_destroy(dt_cuda_rank *r);

/* Lets device reach every other visible GPU's memory (the local runtime's collectives read
 * peers' buffers); 0 when some pair has no peer access. Only processes whose ranks use several
 * GPUs need it: it makes a context on each GPU. */
int dt_cuda_enable_peers(int device);

/* DT_OK for cudaSuccess; else DT_ERR_DEVICE (DT_ERR_NOMEM for cudaErrorMemoryAllocation)
 * with "<what>: <CUDA error name>: <string>" as the last error. */
dt_status dt_cuda_status(cudaError_t e, const char *what);
dt_status dt_cublas_status(cublasStatus_t s, const char *what);

#define DT_CUDA_CHECK(call) DT_CHECK(dt_cuda_status((call), #call))
/* After a kernel launch: reports launch errors (bad configuration, no device). */
#define DT_CUDA_LAUNCH_CHECK(what) dt_cuda_status(cudaGetLastError(), what)

/* Device allocator of the current rank's device, stream-ordered on its compute stream. */
void *dt_cuda_alloc(size_t bytes);
void dt_cuda_free(void *p);

/* Grid size for n elements at threads per block, capped for grid-stride loops. */
static inline unsigned dt_cuda_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return b > 65535u * 16u ? 65535u * 16u : (unsigned)b;
}

#ifdef __cplusplus
}
#endif
#endif
