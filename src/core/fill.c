/* The CPU fill and cast kernels (core/fill.h), and the table by device kind. The CPU is the
 * readable reference: a row at a time, one Philox block per four (f64: two) draws. Rows (and a
 * cast's elements) are shared out by the intra-op pool; every element depends only on its own
 * global index, so the bits do not depend on the thread count. */
#include "core/fill.h"

#include "core/check.h"
#include "core/pool.h"
#include "dt_config.h"

#define PIECE 8192 /* elements a pool chunk writes at least: smaller stays serial */

typedef struct {
    const dt_fill *f;
    void *dst;
    size_t row;
} fill_job;

/* Rows [begin, end). */
static void fill_range(void *arg, int64_t begin, int64_t end) {
    const fill_job *job = arg;
    const dt_fill *f = job->f;
    void *dst = job->dst;
    size_t row = job->row;
    int random = dt_fill_is_random(f);
    int shift = dt_fill_block_shift(f->dtype);
    uint64_t have = UINT64_MAX;
    dt_philox4 x = {{0, 0, 0, 0}};
    for (size_t r0 = (size_t)begin * row; r0 < (size_t)end * row; r0 += row) {
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
}

static dt_status cpu_fill(const dt_fill *f, void *dst) {
    size_t n = 1, row = f->ndim ? (size_t)f->local_shape[f->ndim - 1] : 1;
    for (int d = 0; d < f->ndim; d++)
        n *= (size_t)f->local_shape[d];
    if (n == 0) return DT_OK;
    fill_job j = {.f = f, .dst = dst, .row = row};
    dt_parallel_for((int64_t)(n / row), row >= PIECE ? 1 : (int64_t)(PIECE / row), fill_range, &j);
    return DT_OK;
}

typedef struct {
    dt_dtype to, from;
    void *dst;
    const void *src;
} cast_job;

static void cast_range(void *arg, int64_t begin, int64_t end) {
    const cast_job *j = arg;
    for (size_t i = (size_t)begin; i < (size_t)end; i++)
        dt_cast_elem(j->to, j->dst, j->from, j->src, i);
}

static dt_status cpu_cast(dt_dtype to, void *dst, dt_dtype from, const void *src, size_t count) {
    cast_job j = {.to = to, .from = from, .dst = dst, .src = src};
    dt_parallel_for((int64_t)count, PIECE, cast_range, &j);
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
