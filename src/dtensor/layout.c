/* Where each shard lies: torch.chunk arithmetic over the mesh dims that shard a tensor dim,
 * applied in mesh-dim order. Pure functions of the spec. */
#include <string.h>

#include "core/box.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"

dt_status dt_shape_dtype_check(const char *fn, int ndim, const int64_t *shape, dt_dtype dtype) {
    if ((unsigned)dtype >= DT_DTYPE_COUNT)
        return dt_error(DT_ERR_DTYPE, "%s: argument dtype has unknown value %d", fn, (int)dtype);
    if (ndim < 0 || ndim > DT_MAX_NDIM)
        return dt_error(DT_ERR_SHAPE, "%s: argument ndim = %d is not in [0, %d]", fn, ndim,
                        DT_MAX_NDIM);
    DT_ARG(shape != NULL || ndim == 0, "%s: argument shape is NULL", fn);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return dt_error(DT_ERR_SHAPE, "%s: shape[%d] = %lld is negative", fn, d,
                            (long long)shape[d]);
    if (!dt_shape_size(shape, ndim, dt_dtype_size(dtype), NULL, NULL)) {
        char text[DT_MAX_NDIM * 21 + 3];
        dt_shape_text(shape, ndim, text, sizeof text);
        return dt_error(DT_ERR_SHAPE, "%s: shape %s of %s has more elements or bytes than an "
                                      "int64 counts", fn, text, dt_dtype_name(dtype));
    }
    return DT_OK;
}

dt_status dt_shard_layout(int mesh_ndim, const int *mesh_shape, const int *coord, int ndim,
                          const int64_t *shape, const dt_placement *placements,
                          int64_t *local_shape_out, int64_t *offset_out) {
    DT_ARG(mesh_ndim >= 1 && mesh_ndim <= DT_MESH_MAX_NDIM,
           "dt_shard_layout: argument mesh_ndim = %d is not in [1, %d]", mesh_ndim,
           DT_MESH_MAX_NDIM);
    DT_ARG(ndim >= 0 && ndim <= DT_MAX_NDIM, "dt_shard_layout: argument ndim = %d is not in "
                                             "[0, %d]", ndim, DT_MAX_NDIM);
    DT_ARG_NOT_NULL(mesh_shape);
    DT_ARG_NOT_NULL(coord);
    DT_ARG_NOT_NULL(placements);
    DT_ARG(ndim == 0 || (shape && local_shape_out && offset_out),
           "dt_shard_layout: shape, local_shape_out or offset_out is NULL");
    int64_t len[DT_MAX_NDIM], off[DT_MAX_NDIM];
    for (int d = 0; d < ndim; d++) {
        DT_ARG(shape[d] >= 0, "dt_shard_layout: shape[%d] = %lld is negative", d,
               (long long)shape[d]);
        len[d] = shape[d];
        off[d] = 0;
    }
    for (int m = 0; m < mesh_ndim; m++) {
        if (mesh_shape[m] < 1)
            return dt_error(DT_ERR_MESH, "dt_shard_layout: mesh_shape[%d] = %d must be at least 1",
                            m, mesh_shape[m]);
        DT_ARG(coord[m] >= 0 && coord[m] < mesh_shape[m],
               "dt_shard_layout: coord[%d] = %d is not in [0, %d)", m, coord[m], mesh_shape[m]);
        if (placements[m].kind != DT_PLACEMENT_SHARD) continue;
        int d = placements[m].dim < 0 ? placements[m].dim + ndim : placements[m].dim;
        if (d < 0 || d >= ndim)
            return dt_error(DT_ERR_PLACEMENT, "dt_shard_layout: placements[%d] = S(%d) is out of "
                                              "range for a %d-D tensor", m, placements[m].dim, ndim);
        int64_t n = mesh_shape[m];
        int64_t chunk = (len[d] + n - 1) / n;
        int64_t lo = chunk * coord[m] < len[d] ? chunk * coord[m] : len[d];
        int64_t hi = chunk * (coord[m] + 1) < len[d] ? chunk * (coord[m] + 1) : len[d];
        off[d] += lo;
        len[d] = hi - lo;
    }
    if (ndim) {
        memcpy(local_shape_out, len, sizeof(int64_t) * (size_t)ndim);
        memcpy(offset_out, off, sizeof(int64_t) * (size_t)ndim);
    }
    return DT_OK;
}
