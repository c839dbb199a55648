/* Memory operations per device kind: what the tensor, redistribute and comm layers do to local
 * data (allocate, copy, cut boxes, reduce), so that one code path serves host and GPU memory.
 * The CPU table wraps core/alloc, memcpy, core/box and core/reduce; the CUDA table (built with
 * CUDA only) queues the same work on the calling rank's compute stream. Knows nothing of
 * tensors or ranks. */
#ifndef DT_CORE_DEVICE_H
#define DT_CORE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/device.h"
#include "dtensor/types.h"

/* A rank's compute device, the device layer's state kept in the rank's context: which device
 * (dt_ctx_set_device), whether TF32 is allowed (kept for GPUs set up later), and the GPU's
 * streams and handles (core/cuda/cuda_rt.h) when the device is CUDA. */
typedef struct dt_rank_device {
    dt_device device;
    int allow_tf32;
    struct dt_cuda_rank *cuda;
} dt_rank_device;

typedef struct dt_mem_ops {
    const char *name;
    /* Uninitialised memory; NULL (with the error set) when out of memory. 0 bytes is valid. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p); /* NULL is fine */
    dt_status (*zero)(void *dst, size_t bytes);
    /* dst and src both on this device (CUDA: any two device pointers, peers included). */
    dt_status (*copy)(void *dst, const void *src, size_t bytes);
    /* From host memory to this device and back. Both return once the host buffer may be
     * reused (download: once the data is in host memory, after the queued work). */
    dt_status (*upload)(void *dst, const void *host, size_t bytes);
    dt_status (*download)(void *host, const void *src, size_t bytes);
    /* As dt_box_copy, dt_reduce_n, dt_fill_identity and dt_scale (core/box.h, core/reduce.h). */
    dt_status (*box_copy)(void *dst, const int64_t *dst_shape, const int64_t *dst_off,
                          const void *src, const int64_t *src_shape, const int64_t *src_off,
                          const int64_t *box, int ndim, size_t elem_size);
    dt_status (*reduce_n)(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs,
                          int n, size_t count);
    dt_status (*fill_identity)(dt_dtype dtype, dt_reduce_op op, void *dst, size_t count);
    dt_status (*scale)(dt_dtype dtype, void *buf, size_t count, int64_t mul, int64_t div);
    /* As dt_pow_abs (core/reduce.h): float dtypes, DT_ERR_DTYPE for others. */
    dt_status (*pow_abs)(dt_dtype dtype, void *buf, size_t count, double e);
    /* Waits for the work the calling rank queued (its compute stream). */
    dt_status (*sync)(void);
} dt_mem_ops;

extern const dt_mem_ops dt_mem_cpu;

/* Per device kind (CPU, CUDA); the CUDA entry is NULL in builds without it. */
extern const dt_mem_ops *const dt_mem_tables[2];

/* The table of a device kind: never NULL for the CPU; NULL for CUDA in builds without it and
 * for kinds that do not exist. Inline: dispatch asks on every op. */
static inline const dt_mem_ops *dt_mem_ops_of(dt_device_kind kind) {
    return (unsigned)kind < 2 ? dt_mem_tables[kind] : NULL;
}

/* Copies bytes from src (on device kind from) to dst (on kind to), whichever pair of kinds:
 * a copy on one device is queued on the calling rank's stream; between host and device it is
 * an upload or download, complete on return. */
dt_status dt_mem_transfer(void *dst, dt_device_kind to, const void *src, dt_device_kind from,
                          size_t bytes);

/* Where p lives: DT_DEVICE_CPU unless this process has set up a CUDA device and p is device
 * memory. Costs nothing until then; the local runtime's collectives use it to serve host and
 * device buffers alike. */
dt_device_kind dt_mem_kind_of(const void *p);

#endif
