/* FSDP's private state (nn/fsdp.c: units, gathers, the engine's hooks; nn/fsdp_reduce.c: the
 * gradients' packed reduce_scatter) and the helpers both halves use. */
#ifndef DT_NN_FSDP_IMPL_H
#define DT_NN_FSDP_IMPL_H

#include <stdbool.h>
#include <string.h>

#include "autograd/saved.h"
#include "comm/request.h"
#include "dtensor/fsdp.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"

typedef struct fsdp_unit {
    dt_saved_hooks hooks; /* first: a gathered parameter's hooks point here */
    dt_fsdp *f;
    int index, n;
    bool reshard;      /* drop the gathered storage at the end of the unit's forward */
    dt_tensor **param; /* retained */
    dt_tensor **full;  /* retained: the last forward's gathered parameters (NULL before) */
    dt_tensor **grad;  /* gradients backward handed over, in the reduce's placements */
    dt_placement (*gpl)[DT_MESH_MAX_NDIM]; /* those placements, dp taken as P(sum) */
    int ngrad;
    size_t *off, *len, slot, es;
    float *scale8;      /* float8_all_gather: each parameter's scale in the gather in flight */
    dt_request *gather; /* an all_gather in flight (prefetched) */
    void *gsend, *grecv;
    dt_request *rs; /* a reduce_scatter in flight */
    void *rsend, *rrecv;
    double t_begin; /* trace: when the unit's forward began */
} unit;

struct dt_fsdp {
    dt_mesh *mesh; /* retained */
    dt_fsdp_options opt;
    dt_comm *comm; /* the dp group on the communication-thread lane */
    int dp_size;
    unit **u;
    int n, cap;
    bool end_registered;
    dt_fsdp_stats stats;
    int64_t gathered_bytes;
};

static inline const dt_mem_ops *mem_of(const unit *u) {
    return dt_tensor_mem(u->param[0]);
}

static inline size_t bytes_of(const dt_tensor *t) {
    return t->local_numel * dt_dtype_size(t->dtype);
}

/* Whether t's placements are pl already (over a mesh of mnd dims). */
static inline bool dt_fsdp_placed(const dt_tensor *t, const dt_placement *pl, int mnd) {
    for (int m = 0; m < mnd; m++)
        if (!dt_placement_equal(t->placements[m], pl[m])) return false;
    return true;
}

/* The shard of parameter p held by dp group rank r (with this rank's other coordinates). */
static inline void chunk_of(const unit *u, int p, int r, int64_t *shape, int64_t *off) {
    const dt_mesh *mesh = u->f->mesh;
    int coord[DT_MESH_MAX_NDIM], mr;
    memcpy(coord, mesh->coord, sizeof(int) * (size_t)mesh->ndim);
    coord[u->f->opt.dp_dim] = r;
    dt_mesh_rank_of(mesh, coord, &mr);
    dt_tensor_layout_of(u->param[p], mr, shape, off);
}

/* The reduce half (nn/fsdp_reduce.c). reduce_start packs the unit's gradients per destination
 * rank and issues one reduce_scatter, in flight; reduce_finish waits for it and adds each
 * shard into its parameter's gradient; reduce_free drops the buffers. */
dt_status dt_fsdp_reduce_start(unit *u);
dt_status dt_fsdp_reduce_finish(unit *u);
void dt_fsdp_reduce_free(unit *u);

#endif
