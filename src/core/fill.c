/* The CPU fill and cast kernels (core/fill.h), and the table by device kind. The CPU is the
 * readable reference: a row at a time, one Philox block per four (f64: two) draws. */
#include "core/fill.h"

#include "core/check.h"
#include "dt_config.h"

static dt_status cpu_fill(const dt_fill *f, void *dst) {
    size_t n = 1, row = f->ndim ? (size_t)f->local_shape[f->ndim - 1] : 1;
    for (int d = 0; d < f->ndim; d++)
        n *= (size_t)f->local_shape[d];
    if (n == 0) return DT_OK;
    int random = dt_fill_is_random(f);
    int shift = dt_fill_block_shift(f->dtype);
    uint64_t have = UINT64_MAX;
    dt_philox4 x = {{0, 0, 0, 0}};
    for (size_t r0 = 0; r0 < n; r0 += row) {
        uint64_t g0 = dt_fill_index(f, r0); /* a row is contiguous in the global tensor too */
        for (size_t j = 0; j < row; j++) {
            uint64_t gi = g0 + j;
            if (random && gi >> shift != have) {
                have = gi >> shift;
                x = dt_fill_block(f, gi);
            }
            dt_fill_elem(f, gi, x, dst, r0 + j);
        }
    }
    return DT_OK;
}

static dt_status cpu_cast(dt_dtype to, void *dst, dt_dtype from, const void *src, size_t count) {
    for (size_t i = 0; i < count; i++)
        dt_cast_elem(to, dst, from, src, i);
    return DT_OK;
}

static const dt_fill_ops fill_cpu = {.name = "cpu", .fill = cpu_fill, .cast = cpu_cast};

#if DT_HAVE_CUDA
static const dt_fill_ops fill_cuda = {.name = "cuda", .fill = dt_cuda_fill, .cast = dt_cuda_cast};
#endif

const dt_fill_ops *dt_fill_ops_of(dt_device_kind kind) {
    switch (kind) {
    case DT_DEVICE_CPU:
        return &fill_cpu;
#if DT_HAVE_CUDA
    case DT_DEVICE_CUDA:
        return &fill_cuda;
#endif
    default:
        return NULL;
    }
}
