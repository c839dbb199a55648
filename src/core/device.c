/* The CPU memory table, and the choice of table by device kind. The CUDA table lives in
 * core/cuda/ and exists only in builds with CUDA. */
#include <string.h>

#include "core/alloc.h"
#include "core/box.h"
#include "core/check.h"
#include "core/copy.h"
#include "core/device.h"
#include "core/reduce.h"
#include "dt_config.h"

#if DT_HAVE_CUDA
#include "core/cuda/device_mem.h"
#endif

static void *cpu_alloc(size_t bytes) {
    void *p = dt_host_alloc(bytes);
    if (!p) dt_error(DT_ERR_NOMEM, "out of host memory for %zu bytes", bytes);
    return p;
}

static dt_status cpu_zero(void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
    return DT_OK;
}

static dt_status cpu_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return DT_OK;
    const char *d = dst, *s = src;
    if (d + bytes <= s || s + bytes <= d)
        dt_copy_large(dst, src, bytes); /* split over the pool; streamed past the caches */
    else
        memmove(dst, src, bytes);
    return DT_OK;
}

static dt_status cpu_box_copy(void *dst, const int64_t *dst_shape, const int64_t *dst_off,
                              const void *src, const int64_t *src_shape, const int64_t *src_off,
                              const int64_t *box, int ndim, size_t es) {
    dt_box_copy(dst, dst_shape, dst_off, src, src_shape, src_off, box, ndim, es);
    return DT_OK;
}

static dt_status cpu_reduce_n(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs,
                              int n, size_t count) {
    dt_reduce_n(dtype, op, dst, srcs, n, count);
    return DT_OK;
}

static dt_status cpu_fill_identity(dt_dtype dtype, dt_reduce_op op, void *dst, size_t count) {
    dt_fill_identity(dtype, op, dst, count);
    return DT_OK;
}

static dt_status cpu_scale(dt_dtype dtype, void *buf, size_t count, int64_t mul, int64_t div) {
    dt_scale(dtype, buf, count, mul, div);
    return DT_OK;
}

static dt_status cpu_pow_abs(dt_dtype dtype, void *buf, size_t count, double e) {
    if (dtype != DT_F32 && dtype != DT_F64 && dtype != DT_BF16 && dtype != DT_F16)
        return dt_error(DT_ERR_DTYPE, "pow_abs: %s is not a float dtype", dt_dtype_name(dtype));
    dt_pow_abs(dtype, buf, count, e);
    return DT_OK;
}

static dt_status cpu_sync(void) { return DT_OK; }

const dt_mem_ops dt_mem_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = dt_host_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .upload = cpu_copy,
    .download = cpu_copy,
    .box_copy = cpu_box_copy,
    .reduce_n = cpu_reduce_n,
    .fill_identity = cpu_fill_identity,
    .scale = cpu_scale,
    .pow_abs = cpu_pow_abs,
    .sync = cpu_sync,
};

#if DT_HAVE_CUDA
const dt_mem_ops *const dt_mem_tables[2] = {&dt_mem_cpu, &dt_mem_cuda};
#else
const dt_mem_ops *const dt_mem_tables[2] = {&dt_mem_cpu, NULL};
#endif

dt_status dt_mem_transfer(void *dst, dt_device_kind to, const void *src, dt_device_kind from,
                          size_t bytes) {
    if (!bytes) return DT_OK;
    if (from == to) return dt_mem_ops_of(to)->copy(dst, src, bytes);
    if (from == DT_DEVICE_CPU) return dt_mem_ops_of(to)->upload(dst, src, bytes);
    return dt_mem_ops_of(from)->download(dst, src, bytes);
}

dt_device_kind dt_mem_kind_of(const void *p) {
#if DT_HAVE_CUDA
    return dt_cuda_kind_of(p);
#else
    (void)p;
    return DT_DEVICE_CPU;
#endif
}
