/* Moving a stage's output (and the gradient of the next stage's input) between neighbour
 * stages, and cutting micro-batches. Both stage meshes have one shape, so each rank's shard
 * goes as it is to the rank with the same coordinates: a header with the spec, then the data
 * (none for an empty shard). */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/autograd.h"
#include "dtensor/tensor_impl.h"
#include "nn/pipeline_impl.h"
#include "trace/trace_impl.h"

enum {
    H_PRESENT,
    H_DTYPE,
    H_NDIM,
    H_GRAD,
    H_MESH_NDIM,
    H_SHAPE,
    H_LOCAL = H_SHAPE + DT_MAX_NDIM,
    H_PLACE = H_LOCAL + DT_MAX_NDIM,
    H_LEN = H_PLACE + 4 * DT_MESH_MAX_NDIM
};

/* This rank's shard in host memory: borrowed when it is there already, else a copy in *tmp. */
static dt_status host_shard(dt_tensor *t, const dt_tensor_info *info, void **data, void **tmp) {
    *tmp = NULL;
    if (info->device.kind == DT_DEVICE_CPU) {
        *data = info->local_data;
        return DT_OK;
    }
    if (!(*tmp = malloc(info->local_bytes)))
        return dt_error(DT_ERR_NOMEM, "pipeline: out of memory for a %zu-byte shard",
                        info->local_bytes);
    *data = *tmp;
    return dt_tensor_local_to_host(t, *tmp, info->local_bytes);
}

dt_status dt_pipe_send(dt_comm *comm, int peer, dt_tensor *t) {
    int64_t h[H_LEN] = {0};
    dt_tensor_info info;
    if (t) {
        DT_CHECK(dt_tensor_info_get(t, &info));
        h[H_PRESENT] = 1, h[H_DTYPE] = info.dtype, h[H_NDIM] = info.ndim;
        h[H_GRAD] = dt_tensor_requires_grad(t), h[H_MESH_NDIM] = info.mesh_ndim;
        for (int d = 0; d < info.ndim; d++)
            h[H_SHAPE + d] = info.shape[d], h[H_LOCAL + d] = info.local_shape[d];
        for (int m = 0; m < info.mesh_ndim; m++) {
            const dt_placement *p = &info.placements[m];
            int64_t *o = &h[H_PLACE + 4 * m];
            o[0] = p->kind, o[1] = p->dim, o[2] = p->op;
            memcpy(&o[3], &p->norm_ord, sizeof(double));
        }
    }
    DT_CHECK(dt_send(comm, h, H_LEN, DT_I64, peer));
    if (!t || info.local_numel == 0) return DT_OK;
    void *data, *tmp;
    dt_status st = host_shard(t, &info, &data, &tmp);
    /* In the trace, the send waits for the kernel that made the shard. */
    dt_trace_coll_site prev = dt_trace_coll_tls;
    dt_trace_coll_tls = (dt_trace_coll_site){.input = t->trace_src};
    if (st == DT_OK) st = dt_send(comm, data, info.local_numel, info.dtype, peer);
    dt_trace_coll_tls = prev;
    free(tmp);
    return st;
}

dt_status dt_pipe_recv(dt_comm *comm, int peer, dt_mesh *mesh, dt_tensor **out) {
    int64_t h[H_LEN];
    DT_CHECK(dt_recv(comm, h, H_LEN, DT_I64, peer));
    if (!h[H_PRESENT]) {
        *out = NULL;
        return DT_OK;
    }
    int ndim = (int)h[H_NDIM], mnd = (int)h[H_MESH_NDIM];
    dt_dtype dtype = (dt_dtype)h[H_DTYPE];
    int64_t shape[DT_MAX_NDIM], local[DT_MAX_NDIM];
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        shape[d] = h[H_SHAPE + d], local[d] = h[H_LOCAL + d], n *= (size_t)local[d];
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int m = 0; m < mnd; m++) {
        const int64_t *o = &h[H_PLACE + 4 * m];
        pl[m] = (dt_placement){
            .kind = (dt_placement_kind)o[0], .dim = (int)o[1], .op = (dt_reduce_op)o[2]};
        memcpy(&pl[m].norm_ord, &o[3], sizeof(double));
    }
    void *buf = malloc(n * dt_dtype_size(dtype) + 1);
    if (!buf) return dt_error(DT_ERR_NOMEM, "pipeline: out of memory for a received shard");
    dt_trace_last_coll_tls = 0;
    dt_status st = n ? dt_recv(comm, buf, n, dtype, peer) : DT_OK;
    int64_t received_by = dt_trace_last_coll_tls; /* the stage's readers wait for it (trace) */
    dt_tensor *t = NULL;
    if (st == DT_OK)
        st = dt_tensor_from_local(mesh, buf, dtype, ndim, local, mnd, pl, shape, 0, &t);
    if (st == DT_OK) t->trace_src = received_by;
    free(buf);
    if (st == DT_OK && h[H_GRAD]) st = dt_tensor_set_requires_grad(t, 1);
    if (st != DT_OK) {
        dt_tensor_release(t);
        return st;
    }
    *out = t;
    return DT_OK;
}

dt_status dt_pipe_micro_check(dt_tensor *batch, int nmicro, const char *what) {
    dt_tensor_info info;
    DT_CHECK(dt_tensor_info_get(batch, &info));
    DT_ARG(info.ndim >= 1, "dt_pipeline_step: argument %s is a scalar: no batch dim to split",
           what);
    DT_ARG(info.shape[0] % nmicro == 0,
           "dt_pipeline_step: argument %s's batch (dim 0) of %lld is not divisible by nmicro = %d",
           what, (long long)info.shape[0], nmicro);
    DT_ARG(info.local_shape[0] % nmicro == 0,
           "dt_pipeline_step: argument %s's shard on this rank has %lld rows of dim 0, not "
           "divisible by nmicro = %d (make the batch divisible by nmicro x the ranks sharding it)",
           what, (long long)info.local_shape[0], nmicro);
    return DT_OK;
}

dt_status dt_pipe_micro(dt_tensor *batch, int i, int nmicro, const char *what, dt_tensor **out) {
    DT_CHECK(dt_pipe_micro_check(batch, nmicro, what));
    dt_tensor_info info;
    DT_CHECK(dt_tensor_info_get(batch, &info));
    int64_t shape[DT_MAX_NDIM], local[DT_MAX_NDIM];
    memcpy(shape, info.shape, sizeof shape);
    memcpy(local, info.local_shape, sizeof local);
    shape[0] /= nmicro, local[0] /= nmicro;
    size_t bytes = info.local_shape[0] ? info.local_bytes / (size_t)nmicro : 0;
    void *data, *tmp = NULL;
    dt_status st = info.local_bytes ? host_shard(batch, &info, &data, &tmp) : DT_OK;
    if (st != DT_OK) {
        free(tmp);
        return st;
    }
    char *at = info.local_bytes ? (char *)data + bytes * (size_t)i : NULL;
    st = dt_tensor_from_local(info.mesh, at, info.dtype, info.ndim, local, info.mesh_ndim,
                              info.placements, shape, 0, out);
    free(tmp);
    return st;
}
