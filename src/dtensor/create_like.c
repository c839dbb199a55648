/* Tensors made like another (zeros_like, ones_like, full_like, empty_like, new_full): the
 * spec comes from x, the shard is written by the creation calls of create.c on the rank's
 * device and moved to x's device when x lives elsewhere. No communication. */
#include <string.h>

#include "core/check.h"
#include "dtensor/create.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"

typedef enum like_kind { LIKE_ZEROS, LIKE_FULL, LIKE_EMPTY } like_kind;

/* x's placements with Partial made Replicate (dtensor/create.h says why). */
static void like_placements(const dt_tensor *x, dt_placement *out) {
    for (int m = 0; m < x->mesh->ndim; m++)
        out[m] = x->placements[m].kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : x->placements[m];
}

/* A new tensor of x's mesh, dtype and device with the given shape and placements. */
static dt_status make(const char *fn, dt_tensor *x, like_kind kind, double value, int ndim,
                      const int64_t *shape, const dt_placement *pl, dt_tensor **out) {
    dt_mesh *mesh = x->mesh;
    dt_tensor *t = NULL;
    dt_status st;
    if (kind == LIKE_EMPTY) {
        dt_placement norm[DT_MESH_MAX_NDIM];
        st = dt_spec_check(fn, mesh, x->dtype, ndim, shape, mesh->ndim, pl, norm);
        if (st == DT_OK)
            return dt_tensor_alloc(mesh, x->device, x->dtype, ndim, shape, norm, out);
        return st;
    }
    st = kind == LIKE_ZEROS
             ? dt_tensor_zeros(mesh, x->dtype, ndim, shape, mesh->ndim, pl, &t)
             : dt_tensor_full_value(mesh, x->dtype, ndim, shape, mesh->ndim, pl, value, &t);
    if (st == DT_OK && (t->device.kind != x->device.kind || t->device.index != x->device.index)) {
        dt_tensor *moved;
        st = dt_tensor_to_device(t, x->device, &moved);
        dt_tensor_release(t);
        t = st == DT_OK ? moved : NULL;
    }
    if (st != DT_OK) {
        dt_error_prefix(fn);
        return st;
    }
    *out = t;
    return DT_OK;
}

static dt_status like(const char *fn, dt_tensor *x, like_kind kind, double value,
                      dt_tensor **out) {
    DT_CHECK(dt_tensor_check(fn, "x", x));
    DT_ARG(out != NULL, "%s: argument out is NULL", fn);
    dt_placement pl[DT_MESH_MAX_NDIM];
    like_placements(x, pl);
    return make(fn, x, kind, value, x->ndim, x->shape, pl, out);
}

dt_status dt_tensor_zeros_like(dt_tensor *x, dt_tensor **out) {
    return like("dt_tensor_zeros_like", x, LIKE_ZEROS, 0, out);
}

dt_status dt_tensor_ones_like(dt_tensor *x, dt_tensor **out) {
    return like("dt_tensor_ones_like", x, LIKE_FULL, 1, out);
}

dt_status dt_tensor_full_like(dt_tensor *x, double value, dt_tensor **out) {
    return like("dt_tensor_full_like", x, LIKE_FULL, value, out);
}

dt_status dt_tensor_empty_like(dt_tensor *x, dt_tensor **out) {
    return like("dt_tensor_empty_like", x, LIKE_EMPTY, 0, out);
}

dt_status dt_tensor_new_full(dt_tensor *x, int ndim, const int64_t *shape, double value,
                             dt_tensor **out) {
    const char *fn = "dt_tensor_new_full";
    DT_CHECK(dt_tensor_check(fn, "x", x));
    DT_ARG(out != NULL, "%s: argument out is NULL", fn);
    DT_ARG(ndim >= 0 && ndim <= DT_MAX_NDIM, "%s: argument ndim = %d is not in [0, %d]", fn, ndim,
           DT_MAX_NDIM);
    DT_ARG(shape != NULL || ndim == 0, "%s: argument shape is NULL", fn);
    dt_placement pl[DT_MESH_MAX_NDIM];
    int same = ndim == x->ndim && !memcmp(shape, x->shape, sizeof(int64_t) * (size_t)ndim);
    if (same) like_placements(x, pl);
    else
        for (int m = 0; m < x->mesh->ndim; m++) pl[m] = dt_replicate();
    return make(fn, x, LIKE_FULL, value, ndim, shape, pl, out);
}
