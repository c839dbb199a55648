/* GPU state shared by the CUDA kernels, the CUDA memory table and the NCCL backend: per-rank
 * streams and handles, the rank bound to each thread, one caching allocator per GPU, and CUDA
 * and cuBLAS errors as statuses. Built with CUDA only (core/cuda_stub.c otherwise). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/cache_alloc.h"
#include "core/check.h"
#include "core/cuda/cuda_rt.h"
#include "core/cuda/device_mem.h"
#include "core/fiber.h"

#define MAX_DEVICES 64
#define WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLAS's recommendation for Hopper */

static _Thread_local dt_cuda_rank *bound;
/* A rank run as a fiber takes its device back when it resumes (core/fiber.h). */
static void bound_resume(void) {
    if (bound) cudaSetDevice(bound->device);
}
DT_FIBER_LOCAL_RESUME(bound, bound_resume)
static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int device_count;
static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static dt_cache_alloc *allocs[MAX_DEVICES];
static atomic_int live; /* a rank has set up a GPU: pointers may be device memory */
/* Rank states of finished contexts, kept for the next: a local run of N ranks would otherwise
 * pay N cuBLAS handles and workspaces (milliseconds each) every time. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static dt_cuda_rank *pool;

dt_status dt_cuda_status(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return DT_OK;
    return dt_error(e == cudaErrorMemoryAllocation ? DT_ERR_NOMEM : DT_ERR_DEVICE, "%s: %s: %s",
                    what, cudaGetErrorName(e), cudaGetErrorString(e));
}

dt_status dt_cublas_status(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return DT_OK;
    return dt_error(s == CUBLAS_STATUS_ALLOC_FAILED ? DT_ERR_NOMEM : DT_ERR_DEVICE, "%s: %s: %s",
                    what, cublasGetStatusName(s), cublasGetStatusString(s));
}

static void count_devices(void) {
    int n = 0; /* left unwritten when there is no driver (error 35) */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    device_count = n > MAX_DEVICES ? MAX_DEVICES : n;
}

int dt_cuda_device_count(void) {
    pthread_once(&count_once, count_devices);
    return device_count;
}

dt_cuda_rank *dt_cuda_current(void) { return bound; }

void *dt_cuda_current_stream(void) { return bound ? (void *)bound->compute : NULL; }

void dt_cuda_bind(dt_cuda_rank *r) {
    if (r && r != bound) cudaSetDevice(r->device);
    bound = r;
}

/* cudaMalloc on the allocator's device, whichever device the calling thread has current. */
static void *raw_alloc(void *user, size_t bytes) {
    int dev = (int)(intptr_t)user, cur = -1;
    void *p = NULL;
    cudaGetDevice(&cur);
    if (cur != dev) cudaSetDevice(dev);
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the caller retries after emptying the cache */
        p = NULL;
    }
    if (cur != dev && cur >= 0) cudaSetDevice(cur);
    return p;
}

static void raw_free(void *user, void *p) {
    int dev = (int)(intptr_t)user, cur = -1;
    cudaGetDevice(&cur);
    if (cur != dev) cudaSetDevice(dev);
    cudaFree(p);
    if (cur != dev && cur >= 0) cudaSetDevice(cur);
}

static dt_cache_alloc *device_alloc(int dev, int create) {
    pthread_mutex_lock(&alloc_mu);
    if (!allocs[dev] && create)
        allocs[dev] = dt_cache_alloc_create(
            (dt_cache_backend){.raw_alloc = raw_alloc, .raw_free = raw_free,
                               .user = (void *)(intptr_t)dev});
    dt_cache_alloc *a = allocs[dev];
    pthread_mutex_unlock(&alloc_mu);
    return a;
}

void *dt_cuda_alloc(size_t bytes) {
    dt_cuda_rank *r = bound;
    if (!r) {
        dt_error(DT_ERR_DEVICE, "device allocation of %zu bytes: no CUDA device bound", bytes);
        return NULL;
    }
    dt_cache_alloc *a = device_alloc(r->device, 0);
    void *p = dt_cache_alloc_get(a, bytes, r->compute);
    if (!p) {
        dt_memory_stats s;
        dt_cache_alloc_stats(a, &s);
        dt_error(DT_ERR_NOMEM,
                 "CUDA device %d: out of memory for %zu bytes (%zu bytes in use by dtensor)",
                 r->device, bytes, s.in_use);
    }
    return p;
}

void dt_cuda_free(void *p) {
    if (!p) return;
    if (bound && allocs[bound->device] && dt_cache_alloc_put(allocs[bound->device], p) == 0)
        return;
    for (int d = 0; d < MAX_DEVICES; d++) {
        dt_cache_alloc *a = device_alloc(d, 0);
        if (a && dt_cache_alloc_put(a, p) == 0) return;
    }
}

static dt_cuda_rank *pool_take(int device) {
    pthread_mutex_lock(&pool_mu);
    dt_cuda_rank *r = NULL, **pp = &pool;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->device == device) {
            r = *pp;
            *pp = r->next;
            break;
        }
    pthread_mutex_unlock(&pool_mu);
    return r;
}

dt_status dt_cuda_rank_create(int device, dt_cuda_rank **rank_out) {
    dt_cuda_rank *r = pool_take(device);
    if (r) {
        r->next = NULL;
        r->allow_tf32 = 0;
        *rank_out = r;
        return dt_cuda_status(cudaSetDevice(device), "cudaSetDevice");
    }
    r = calloc(1, sizeof *r);
    if (!r) return dt_error(DT_ERR_NOMEM, "dt_ctx_set_device: out of memory");
    r->device = device;
    dt_status st;
    DT_CHECK_GOTO(dt_cuda_status(cudaSetDevice(device), "cudaSetDevice"), st, fail);
    DT_CHECK_GOTO(dt_cuda_status(cudaStreamCreateWithFlags(&r->compute, cudaStreamNonBlocking),
                                 "cudaStreamCreate"), st, fail);
    DT_CHECK_GOTO(dt_cuda_status(cudaStreamCreateWithFlags(&r->comm, cudaStreamNonBlocking),
                                 "cudaStreamCreate"), st, fail);
    DT_CHECK_GOTO(dt_cublas_status(cublasCreate(&r->blas), "cublasCreate"), st, fail);
    DT_CHECK_GOTO(dt_cublas_status(cublasSetStream(r->blas, r->compute), "cublasSetStream"), st,
                  fail);
    DT_CHECK_GOTO(dt_cublas_status(cublasLtCreate(&r->lt), "cublasLtCreate"), st, fail);
    r->workspace_bytes = WORKSPACE_BYTES;
    DT_CHECK_GOTO(dt_cuda_status(cudaMalloc(&r->workspace, r->workspace_bytes), "cudaMalloc"), st,
                  fail);
    DT_CHECK_GOTO(dt_cublas_status(cublasSetWorkspace(r->blas, r->workspace, r->workspace_bytes),
                                   "cublasSetWorkspace"), st, fail);
    if (!device_alloc(device, 1)) {
        st = dt_error(DT_ERR_NOMEM, "dt_ctx_set_device: out of memory");
        goto fail;
    }
    atomic_store(&live, 1);
    *rank_out = r;
    return DT_OK;
fail:
    dt_cuda_rank_destroy(r);
    return st;
}

void dt_cuda_rank_release(dt_cuda_rank *r) {
    if (!r) return;
    if (bound == r) bound = NULL;
    /* Work still queued finishes before another rank may take the streams. */
    if (cudaStreamSynchronize(r->compute) != cudaSuccess ||
        cudaStreamSynchronize(r->comm) != cudaSuccess) {
        (void)cudaGetLastError();
        dt_cuda_rank_destroy(r);
        return;
    }
    pthread_mutex_lock(&pool_mu);
    r->next = pool;
    pool = r;
    pthread_mutex_unlock(&pool_mu);
}

void dt_cuda_rank_destroy(dt_cuda_rank *r) {
    if (!r) return;
    if (r->compute) cudaStreamSynchronize(r->compute);
    if (r->comm) cudaStreamSynchronize(r->comm);
    if (r->lt) cublasLtDestroy(r->lt);
    if (r->blas) cublasDestroy(r->blas);
    if (r->workspace) cudaFree(r->workspace);
    if (r->comm) cudaStreamDestroy(r->comm);
    if (r->compute) cudaStreamDestroy(r->compute);
    if (bound == r) bound = NULL;
    free(r);
}

int dt_cuda_enable_peers(int device) {
    int all = 1, cur = -1;
    cudaGetDevice(&cur);
    cudaSetDevice(device);
    for (int d = 0; d < dt_cuda_device_count(); d++) {
        int can = 0;
        if (d == device) continue;
        if (cudaDeviceCanAccessPeer(&can, device, d) != cudaSuccess || !can) {
            (void)cudaGetLastError();
            all = 0;
        } else if (cudaDeviceEnablePeerAccess(d, 0) != cudaSuccess) {
            (void)cudaGetLastError(); /* already enabled by another rank on this device */
        }
    }
    if (cur >= 0) cudaSetDevice(cur);
    return all;
}

dt_device_kind dt_cuda_kind_of(const void *p) {
    if (!atomic_load_explicit(&live, memory_order_relaxed) || !p) return DT_DEVICE_CPU;
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return DT_DEVICE_CPU;
    }
    return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged ? DT_DEVICE_CUDA
                                                                               : DT_DEVICE_CPU;
}

static dt_status device_arg(const char *fn, dt_device device, dt_cache_alloc **a_out) {
    if (device.kind != DT_DEVICE_CUDA)
        return dt_error(DT_ERR_UNSUPPORTED, "%s: device kind %d has no caching allocator", fn,
                        (int)device.kind);
    if (device.index < 0 || device.index >= dt_cuda_device_count())
        return dt_error(DT_ERR_DEVICE, "%s: CUDA device %d does not exist (%d visible)", fn,
                        device.index, dt_cuda_device_count());
    *a_out = device_alloc(device.index, 0);
    return DT_OK;
}

dt_status dt_device_memory_stats(dt_device device, dt_memory_stats *out) {
    DT_ARG_NOT_NULL(out);
    dt_cache_alloc *a;
    DT_CHECK(device_arg(__func__, device, &a));
    if (a) dt_cache_alloc_stats(a, out);
    else *out = (dt_memory_stats){0};
    return DT_OK;
}

dt_status dt_device_empty_cache(dt_device device) {
    dt_cache_alloc *a;
    DT_CHECK(device_arg(__func__, device, &a));
    if (a) dt_cache_alloc_empty(a);
    return DT_OK;
}
