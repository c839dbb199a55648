/* The body of dt_tensor and the spec helpers the dtensor layer shares. */
#ifndef DT_TENSOR_IMPL_H
#define DT_TENSOR_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "core/device.h"
#include "dtensor/device.h"
#include "dtensor/tensor.h"

struct dt_tensor {
    atomic_int refs;
    dt_mesh *mesh; /* retained */
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_placement placements[DT_MESH_MAX_NDIM];
    int64_t local_shape[DT_MAX_NDIM];
    int64_t local_offset[DT_MAX_NDIM];
    size_t local_numel;
    void *data;       /* on device */
    dt_device device; /* where data lives */
    bool owned;
};

/* The memory table of t's device. */
static inline const dt_mem_ops *dt_tensor_mem(const dt_tensor *t) {
    return dt_mem_ops_of(t->device.kind);
}

/* Checks dtype, ndim and shape of a spec; fn names the public call for messages. */
dt_status dt_shape_dtype_check(const char *fn, int ndim, const int64_t *shape, dt_dtype dtype);

/* Checks mesh, dtype, shape and placements of a spec and returns the placements normalised
 * in norm_out (mesh ndim entries). fn names the public call for messages. */
dt_status dt_spec_check(const char *fn, const dt_mesh *mesh, dt_dtype dtype, int ndim,
                        const int64_t *shape, const dt_placement *placements,
                        dt_placement *norm_out);

/* Allocates a tensor on device for a checked spec; data NULL allocates zeroed storage,
 * otherwise the tensor takes data (on device) as it is (owned says whether release frees
 * it). */
dt_status dt_tensor_new(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                        const int64_t *shape, const dt_placement *norm, void *data, bool owned,
                        dt_tensor **out);

/* The same with uninitialised owned storage (for outputs a kernel fills entirely). */
dt_status dt_tensor_alloc(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                          const int64_t *shape, const dt_placement *norm, dt_tensor **out);

/* Local shape and offset of the shard held by mesh rank r. */
void dt_tensor_layout_of(const dt_tensor *t, int mesh_rank, int64_t *shape_out,
                         int64_t *offset_out);

#endif
