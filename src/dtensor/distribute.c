/* Moving whole tensors in and out of shards: distribute (from every rank's copy or scattered
 * from one source rank) and full_tensor (Partial dims reduced, shards gathered). */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/alloc.h"
#include "core/box.h"
#include "core/check.h"
#include "core/reduce.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"

/* Under the P(sum) convention only the rank at coordinate 0 of each P(sum) dim holds the
 * value; the others hold zeros. */
static int holds_zeros(const dt_mesh *mesh, const dt_placement *pl, const int *coord) {
    for (int m = 0; m < mesh->ndim; m++)
        if (pl[m].kind == DT_PLACEMENT_PARTIAL && pl[m].op == DT_REDUCE_SUM && coord[m] != 0)
            return 1;
    return 0;
}

/* Mesh-rank r's shard of full (host memory), cut into dst (dense, on t's device). A device
 * shard is cut on the host and uploaded: full is host memory whatever the device. */
static dt_status cut_shard(const dt_tensor *t, int r, const void *full, void *dst) {
    int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
    int coord[DT_MESH_MAX_NDIM];
    dt_tensor_layout_of(t, r, shape, off);
    dt_mesh_coord_of(t->mesh, r, coord);
    size_t es = dt_dtype_size(t->dtype), n = dt_shape_numel(shape, t->ndim);
    const dt_mem_ops *mem = dt_tensor_mem(t);
    if (!n) return DT_OK;
    if (holds_zeros(t->mesh, t->placements, coord)) return mem->zero(dst, n * es);
    void *host = mem == &dt_mem_cpu ? dst : dt_host_alloc(n * es);
    if (!host) return dt_error(DT_ERR_NOMEM, "dt_tensor_distribute: out of host memory");
    dt_box_copy(host, shape, NULL, full, t->shape, off, shape, t->ndim, es);
    if (host == dst) return DT_OK;
    dt_status st = mem->upload(dst, host, n * es);
    dt_host_free(host);
    return st;
}

static dt_status scatter_from(dt_tensor *t, const void *full, int src) {
    dt_mesh *mesh = t->mesh;
    dt_comm *all;
    DT_CHECK(dt_mesh_mask_comm(mesh, (1u << mesh->ndim) - 1, &all));
    size_t es = dt_dtype_size(t->dtype);
    int coord[DT_MESH_MAX_NDIM];
    if (mesh->rank != src) {
        if (t->local_numel == 0 || holds_zeros(mesh, t->placements, mesh->coord)) return DT_OK;
        return dt_recv(all, t->data, t->local_numel, t->dtype, src);
    }
    /* One shard-sized buffer, reused for each destination in turn. */
    size_t cap = 0;
    int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
    for (int r = 0; r < mesh->nranks; r++) {
        dt_tensor_layout_of(t, r, shape, off);
        size_t n = dt_shape_numel(shape, t->ndim);
        if (n > cap) cap = n;
    }
    const dt_mem_ops *mem = dt_tensor_mem(t);
    void *buf = cap ? mem->alloc(cap * es) : NULL;
    if (cap && !buf) return dt_error(DT_ERR_NOMEM, "dt_tensor_distribute: out of memory");
    dt_status st = DT_OK;
    for (int r = 0; r < mesh->nranks && st == DT_OK; r++) {
        dt_tensor_layout_of(t, r, shape, off);
        dt_mesh_coord_of(mesh, r, coord);
        size_t n = dt_shape_numel(shape, t->ndim);
        if (r == src) {
            st = cut_shard(t, r, full, t->data);
        } else if (n && !holds_zeros(mesh, t->placements, coord)) {
            if ((st = cut_shard(t, r, full, buf)) == DT_OK) st = dt_send(all, buf, n, t->dtype, r);
        }
    }
    mem->free(buf);
    return st;
}

dt_status dt_tensor_distribute(dt_mesh *mesh, const void *full, dt_dtype dtype, int ndim,
                               const int64_t *shape, int nplacements,
                               const dt_placement *placements, int src_rank,
                               dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    dt_placement norm[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_spec_check("dt_tensor_distribute", mesh, dtype, ndim, shape, nplacements,
                           placements, norm));
    int nm = dt_placements_find_norm(norm, mesh->ndim);
    if (nm >= 0)
        return dt_error(DT_ERR_PLACEMENT, "dt_tensor_distribute: placements[%d] = NormP(%g): a "
                                          "pending norm is made by norm ops (dt_vector_norm), not "
                                          "distributed", nm, norm[nm].norm_ord);
    DT_ARG(src_rank == DT_ALL_RANKS || (src_rank >= 0 && src_rank < mesh->nranks),
           "dt_tensor_distribute: argument src_rank = %d is neither DT_ALL_RANKS nor a mesh rank "
           "in [0, %d)", src_rank, mesh->nranks);
    int has_full = src_rank == DT_ALL_RANKS || src_rank == mesh->rank;
    DT_ARG(!has_full || full != NULL || dt_shape_numel(shape, ndim) == 0,
           "dt_tensor_distribute: argument full is NULL on mesh rank %d (src_rank = %d)",
           mesh->rank, src_rank);
    dt_tensor *t;
    dt_ctx_bind(mesh->ctx);
    DT_CHECK(dt_tensor_new(mesh, mesh->ctx->dev.device, dtype, ndim, shape, norm, NULL, true, &t));
    dt_status st = DT_OK;
    if (src_rank == DT_ALL_RANKS && mesh->rank >= 0) /* outside the mesh: holds nothing */
        st = cut_shard(t, mesh->rank, full, t->data);
    else if (src_rank == DT_ALL_RANKS)
        st = DT_OK;
    else
        st = scatter_from(t, full, src_rank);
    if (st != DT_OK) {
        dt_tensor_release(t);
        return st;
    }
    *out = t;
    return DT_OK;
}

dt_status dt_tensor_full_tensor(dt_tensor *tensor, void *out, size_t out_bytes) {
    DT_TENSOR_ARG(tensor);
    dt_mesh *mesh = tensor->mesh;
    size_t es = dt_dtype_size(tensor->dtype), numel = dt_shape_numel(tensor->shape, tensor->ndim);
    DT_ARG(out != NULL || numel == 0, "dt_tensor_full_tensor: argument out is NULL");
    if (out_bytes < numel * es)
        return dt_error(DT_ERR_SIZE,
                        "dt_tensor_full_tensor: out_bytes = %zu is less than the %zu bytes "
                        "of the full tensor",
                        out_bytes, numel * es);
    size_t local_bytes = tensor->local_numel * es;
    int partial = 0;
    for (int m = 0; m < mesh->ndim; m++) partial |= tensor->placements[m].kind == DT_PLACEMENT_PARTIAL;
    /* The collectives run on the tensor's device; a device result is copied to out at the end. */
    const dt_mem_ops *mem = dt_tensor_mem(tensor);
    dt_ctx_bind(mesh->ctx);
    void *dst = mem == &dt_mem_cpu ? out : mem->alloc(numel * es);
    /* Partial values are reduced in a copy: the tensor itself keeps its placements. */
    void *local = partial ? mem->alloc(local_bytes) : tensor->data;
    void *gathered = NULL;
    size_t *counts = malloc(sizeof(size_t) * (size_t)mesh->nranks);
    size_t *displs = malloc(sizeof(size_t) * (size_t)mesh->nranks);
    int *members = malloc(sizeof(int) * (size_t)mesh->nranks);
    dt_status st = DT_OK;
    if ((partial && !local) || !dst || !counts || !displs || !members) {
        st = dt_error(DT_ERR_NOMEM, "dt_tensor_full_tensor: out of memory");
        goto out;
    }
    if (partial && local_bytes) DT_CHECK_GOTO(mem->copy(local, tensor->data, local_bytes), st, out);
    /* Partial dims first, in mesh-dim order: afterwards every rank of a shard group holds the
     * reduced value of its shard. */
    unsigned shard_mask = 0;
    for (int m = 0; m < mesh->ndim; m++) {
        const dt_placement *pl = &tensor->placements[m];
        if (pl->kind == DT_PLACEMENT_SHARD) shard_mask |= 1u << m;
        if (pl->kind != DT_PLACEMENT_PARTIAL) continue;
        dt_comm *c;
        DT_CHECK_GOTO(dt_mesh_dim_comm(mesh, m, &c), st, out);
        if (pl->op == DT_REDUCE_NORM) {
            DT_CHECK_GOTO(dt_norm_partial_pre(mem, tensor->dtype, local, tensor->local_numel,
                                              pl->norm_ord), st, out);
            DT_CHECK_GOTO(dt_all_reduce(c, local, local, tensor->local_numel, tensor->dtype,
                                        dt_norm_partial_reduce_op(pl->norm_ord)), st, out);
            DT_CHECK_GOTO(dt_norm_partial_post(mem, tensor->dtype, local, tensor->local_numel,
                                               pl->norm_ord), st, out);
            continue;
        }
        DT_CHECK_GOTO(dt_all_reduce(c, local, local, tensor->local_numel, tensor->dtype, pl->op),
                      st, out);
    }
    /* The ranks that differ only in sharded dims hold disjoint shards covering the tensor. */
    dt_comm *group;
    DT_CHECK_GOTO(dt_mesh_mask_comm(mesh, shard_mask, &group), st, out);
    int n = 0, rows_only = 1, coord[DT_MESH_MAX_NDIM];
    size_t row = tensor->ndim ? dt_shape_numel(tensor->shape + 1, tensor->ndim - 1) : 0;
    for (int r = 0; r < mesh->nranks; r++) {
        dt_mesh_coord_of(mesh, r, coord);
        int same = 1;
        for (int m = 0; m < mesh->ndim; m++)
            if (!(shard_mask & (1u << m)) && coord[m] != mesh->coord[m]) same = 0;
        if (!same) continue;
        int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
        dt_tensor_layout_of(tensor, r, shape, off);
        counts[n] = dt_shape_numel(shape, tensor->ndim);
        displs[n] = tensor->ndim ? (size_t)off[0] * row : 0;
        for (int d = 1; d < tensor->ndim; d++) rows_only &= shape[d] == tensor->shape[d];
        members[n++] = r;
    }
    DT_ASSERT(n == group->size);
    if (rows_only) { /* blocks of whole rows: gather straight into place */
        DT_CHECK_GOTO(dt_all_gatherv(group, local, dst, counts, displs, tensor->dtype), st, out);
        goto out;
    }
    if (!(gathered = mem->alloc(numel * es))) {
        st = dt_error(DT_ERR_NOMEM, "dt_tensor_full_tensor: out of memory");
        goto out;
    }
    DT_CHECK_GOTO(dt_all_gatherv(group, local, gathered, counts, NULL, tensor->dtype), st, out);
    const char *block = gathered;
    for (int i = 0; i < n; i++) {
        int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
        dt_tensor_layout_of(tensor, members[i], shape, off);
        DT_CHECK_GOTO(mem->box_copy(dst, tensor->shape, off, block, shape, NULL, shape,
                                    tensor->ndim, es), st, out);
        block += counts[i] * es;
    }
out:
    if (st == DT_OK && dst != out && numel) st = mem->download(out, dst, numel * es);
    free(members);
    free(displs);
    free(counts);
    mem->free(gathered);
    if (partial) mem->free(local);
    if (dst != out) mem->free(dst);
    return st;
}
