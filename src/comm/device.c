/* A rank's compute device: the public dt_ctx_set_device and friends. The GPU state itself
 * (streams, handles, allocators) is core/cuda's; this file ties it to the rank context. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "dt_config.h"

#if DT_HAVE_CUDA
#include "core/cuda/cuda_rt.h"

/* The rank's index among the ranks of its host: the local runtime's ranks all share one host;
 * launchers say it in LOCAL_RANK (torchrun, dtrun) or their own variables. */
static int local_rank(const dt_ctx *ctx) {
    static const char *const vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "MPI_LOCALRANKID", "SLURM_LOCALID"};
    if (strcmp(ctx->backend->name, "local") != 0)
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
            const char *v = getenv(vars[i]);
            if (v && *v) return atoi(v);
        }
    return ctx->rank;
}

static dt_status set_cuda(dt_ctx *ctx, int index) {
    int n = dt_cuda_device_count();
    if (n == 0)
        return dt_error(DT_ERR_DEVICE, "dt_ctx_set_device: no CUDA device is visible (rank %d)",
                        ctx->rank);
    if (index < 0) index = local_rank(ctx) % n;
    if (index >= n)
        return dt_error(DT_ERR_DEVICE,
                        "dt_ctx_set_device: argument device.index = %d, but %d CUDA device%s %s "
                        "visible", index, n, n == 1 ? "" : "s", n == 1 ? "is" : "are");
    if (ctx->dev.cuda && ctx->dev.cuda->device == index) {
        ctx->dev.device = (dt_device){DT_DEVICE_CUDA, index};
        dt_cuda_bind(ctx->dev.cuda);
        return DT_OK;
    }
    /* Ranks of the local runtime on different GPUs read each other's buffers. A process per
     * GPU (UCX, NCCL) must not: peer access makes a context on every GPU. */
    if (n > 1 && strcmp(ctx->backend->name, "local") == 0 && !dt_cuda_enable_peers(index))
        return dt_error(DT_ERR_DEVICE, "dt_ctx_set_device: CUDA device %d cannot reach every "
                                       "other GPU's memory (no peer access), which ranks of the "
                                       "local runtime on several GPUs need; use one GPU "
                                       "(CUDA_VISIBLE_DEVICES) or one process per GPU", index);
    dt_cuda_rank *r;
    DT_CHECK(dt_cuda_rank_create(index, &r));
    r->allow_tf32 = ctx->dev.allow_tf32;
    dt_cuda_rank_release(ctx->dev.cuda);
    ctx->dev.cuda = r;
    ctx->dev.device = (dt_device){DT_DEVICE_CUDA, index};
    dt_cuda_bind(r);
    return DT_OK;
}
#endif

dt_status dt_ctx_set_device(dt_ctx *ctx, dt_device device) {
    DT_ARG_NOT_NULL(ctx);
    switch (device.kind) {
    case DT_DEVICE_CPU:
        ctx->dev.device = (dt_device){DT_DEVICE_CPU, 0};
        return DT_OK;
    case DT_DEVICE_CUDA:
#if DT_HAVE_CUDA
        return set_cuda(ctx, device.index);
#else
        return dt_error(DT_ERR_UNSUPPORTED,
                        "dt_ctx_set_device: this build of dtensor has no CUDA (rebuild with "
                        "meson -Dcuda=enabled where nvcc is installed)");
#endif
    }
    return dt_error(DT_ERR_ARG, "dt_ctx_set_device: argument device.kind = %d is not a device kind",
                    (int)device.kind);
}

dt_device dt_ctx_device(const dt_ctx *ctx) {
    return ctx ? ctx->dev.device : (dt_device){DT_DEVICE_CPU, 0};
}

dt_status dt_ctx_set_tf32(dt_ctx *ctx, int allow) {
    DT_ARG_NOT_NULL(ctx);
    ctx->dev.allow_tf32 = allow != 0;
#if DT_HAVE_CUDA
    if (ctx->dev.cuda) ctx->dev.cuda->allow_tf32 = ctx->dev.allow_tf32;
#endif
    return DT_OK;
}

dt_status dt_ctx_synchronize(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
#if DT_HAVE_CUDA
    if (ctx->dev.device.kind == DT_DEVICE_CUDA) {
        DT_CHECK(dt_cuda_status(cudaStreamSynchronize(ctx->dev.cuda->comm), "dt_ctx_synchronize"));
        return dt_cuda_status(cudaStreamSynchronize(ctx->dev.cuda->compute), "dt_ctx_synchronize");
    }
#endif
    return DT_OK;
}

void dt_ctx_device_fini(dt_ctx *ctx) {
#if DT_HAVE_CUDA
    dt_cuda_rank_release(ctx->dev.cuda);
#endif
    ctx->dev.cuda = NULL;
    ctx->dev.device = (dt_device){DT_DEVICE_CPU, 0};
}

void dt_ctx_bind_gpu(dt_ctx *ctx) {
#if DT_HAVE_CUDA
    dt_cuda_bind(ctx->dev.cuda);
#else
    (void)ctx;
#endif
}
