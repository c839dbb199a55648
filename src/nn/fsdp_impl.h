/* FSDP's private state (nn/fsdp.c: units, gathers, the engine's hooks; nn/fsdp_reduce.c: the
 * gradients' packed reduce_scatter; nn/fsdp_pieces.c: direct and coalesced moves) and the
 * helpers they share. */
#ifndef DT_NN_FSDP_IMPL_H
#define DT_NN_FSDP_IMPL_H

#include <stdbool.h>
#include <string.h>

#include "autograd/saved.h"
#include "comm/comm_impl.h"
#include "comm/request.h"
#include "core/box.h"
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
    /* Direct moves (nn/fsdp_pieces.c): the runtime copies every shard straight into the peers'
     * gathered parameters and reduces the gradients straight into the shards' gradients, with
     * no flat buffer (the local runtime); false: packed, as above. */
    bool direct;
    int64_t (*fshape)[DT_MAX_NDIM]; /* each gathered parameter's local shape */
    dt_box *box;                    /* [p * dp_size + r]: group rank r's shard in it */
    dt_comm_piece *gp, *rp;         /* the pieces of the gather and the reduce in flight */
    void **gbuf;     /* a direct gather's destinations, until the gathered tensors own them */
    dt_tensor **rg;  /* a direct reduce's results: the shards' gradients */
    /* Coalescing (dt_fsdp_options.coalesce_bytes). A leader's gather carries the units
     * [index + 1, batch_end) too, through the pieces bp; each of those is ahead: AHEAD_FLYING
     * until the leader's request is waited for, then AHEAD_LANDED with its outcome. */
    int ahead, leader, batch_end;
    dt_comm_piece *bp;
    dt_status ahead_st;
    int64_t ahead_by; /* the gather's trace event */
    bool rs_deferred; /* its reduce goes with the others' at the end of backward */
} unit;

enum { AHEAD_NONE = 0, AHEAD_FLYING, AHEAD_LANDED };

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
    int64_t deferred_bytes; /* gradients of the reduces deferred to the end of backward */
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

/* Mesh dims other than dp where every gradient of the unit is still Partial (HSDP's replicate
 * dim): the reduced shards are all_reduced over them once, packed (dt_fsdp_reduce_finish). */
static inline unsigned dt_fsdp_hsdp_mask(const unit *u) {
    int mnd = u->f->mesh->ndim, dp = u->f->opt.dp_dim;
    unsigned mask = 0;
    for (int p = 0; p < u->n; p++) {
        unsigned mp = 0;
        for (int m = 0; m < mnd; m++)
            if (m != dp && u->gpl[p][m].kind == DT_PLACEMENT_PARTIAL) mp |= 1u << m;
        mask = p == 0 ? mp : mask == mp ? mask : 0;
    }
    return mask;
}

/* Direct moves (nn/fsdp_pieces.c). init decides whether the unit moves directly (the same on
 * every dp rank: from the runtime, the options and the specs) and lays out the shards' boxes;
 * gather_start issues the unit's gather into fresh storage (u->gbuf); reduce_start issues the
 * reduce of u->grad into fresh shard gradients (u->rg), or sets *done false where it cannot
 * (HSDP's further all_reduce: the packed path then runs); free drops what a unit holds. */
dt_status dt_fsdp_pieces_init(unit *u);
dt_status dt_fsdp_pieces_gather_start(unit *u, int end);
/* Where a forward gather issued for unit k ends (exclusive): k + 1, or further while the next
 * units are direct, have nothing gathered or coming, and their gathered bytes with k's stay
 * within coalesce_bytes (the same on every dp rank). */
int dt_fsdp_batch_end(const dt_fsdp *f, int k);
/* The reduces deferred to the end of backward, as one reduce_scatter (blocks), each unit's
 * shards then added into its parameters' gradients. */
dt_status dt_fsdp_reduce_deferred(dt_fsdp *f);
dt_status dt_fsdp_pieces_reduce_start(unit *u, bool *done);
void dt_fsdp_pieces_gather_free(unit *u);
void dt_fsdp_pieces_free(unit *u);

/* The reduce half (nn/fsdp_reduce.c). reduce_start packs the unit's gradients per destination
 * rank and issues one reduce_scatter, in flight; reduce_finish waits for it and adds each
 * shard into its parameter's gradient; reduce_free drops the buffers. */
dt_status dt_fsdp_reduce_start(unit *u);
dt_status dt_fsdp_reduce_finish(unit *u);
/* reduce_finish's second half: adds the reduced shards (u->rg or u->rrecv) into the
 * parameters' gradients, reduced_by the collective's trace event. */
dt_status dt_fsdp_reduce_add(unit *u, dt_status st, int64_t reduced_by);
void dt_fsdp_reduce_free(unit *u);

#endif
