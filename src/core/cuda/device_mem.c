/* The CUDA memory table: copies, fills and reductions queued on the bound rank's compute
 * stream, in the order the tensor and comm layers issue them; upload and download wait. */
#include "core/check.h"
#include "core/cuda/cuda_rt.h"
#include "core/cuda/device_mem.h"
#include "core/cuda/memory.h"

static dt_status need_rank(const char *what, dt_cuda_rank **r_out) {
    if (!(*r_out = dt_cuda_current()))
        return dt_error(DT_ERR_DEVICE, "%s: no CUDA device bound to this thread", what);
    return DT_OK;
}

static dt_status cuda_zero(void *dst, size_t bytes) {
    dt_cuda_rank *r;
    DT_CHECK(need_rank("device memset", &r));
    if (!bytes) return DT_OK;
    return dt_cuda_status(cudaMemsetAsync(dst, 0, bytes, r->compute), "cudaMemsetAsync");
}

static dt_status cuda_copy(void *dst, const void *src, size_t bytes) {
    dt_cuda_rank *r;
    DT_CHECK(need_rank("device copy", &r));
    if (!bytes || dst == src) return DT_OK;
    return dt_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, r->compute),
                          "cudaMemcpyAsync");
}

static dt_status copy_wait(void *dst, const void *src, size_t bytes, const char *what) {
    dt_cuda_rank *r;
    DT_CHECK(need_rank(what, &r));
    if (!bytes) return DT_OK;
    DT_CHECK(dt_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, r->compute), what));
    return dt_cuda_status(cudaStreamSynchronize(r->compute), what);
}

static dt_status cuda_upload(void *dst, const void *host, size_t bytes) {
    return copy_wait(dst, host, bytes, "host to device copy");
}

static dt_status cuda_download(void *host, const void *src, size_t bytes) {
    return copy_wait(host, src, bytes, "device to host copy");
}

static dt_status cuda_sync(void) {
    dt_cuda_rank *r;
    DT_CHECK(need_rank("device synchronize", &r));
    return dt_cuda_status(cudaStreamSynchronize(r->compute), "cudaStreamSynchronize");
}

const dt_mem_ops dt_mem_cuda = {
    .name = "cuda",
    .alloc = dt_cuda_alloc,
    .free = dt_cuda_free,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .upload = cuda_upload,
    .download = cuda_download,
    .box_copy = dt_cuda_box_copy,
    .reduce_n = dt_cuda_reduce_n,
    .fill_identity = dt_cuda_fill_identity,
    .scale = dt_cuda_scale,
    .pow_abs = dt_cuda_pow_abs,
    .sync = cuda_sync,
};
