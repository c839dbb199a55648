/* The body of dt_mesh. A sub-mesh keeps a reference to the mesh it was cut from (its root)
 * and names root dims; communicators live in the root, one per set of root dims. */
#ifndef DT_MESH_IMPL_H
#define DT_MESH_IMPL_H

#include <stdatomic.h>
#include <stdint.h>

#include "dtensor/mesh.h"

struct dt_mesh {
    atomic_int refs;
    dt_ctx *ctx;
    dt_mesh *root; /* NULL for a mesh made by dt_mesh_create */
    int ndim;
    int shape[DT_MESH_MAX_NDIM];
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    int root_dim[DT_MESH_MAX_NDIM];
    int coord[DT_MESH_MAX_NDIM]; /* this rank's */
    int rank;                    /* this rank's mesh rank */
    int nranks;
    int *ranks; /* world rank of each mesh rank */
    uint64_t seq;
    dt_comm **comms; /* root only: [lane << ndim | mask of root dims], made on first use */
    /* This rank's caches: strategies (filled by op dispatch) and plans (by redistribute),
     * made on first use with the capacity set here. */
    struct dt_lru *caches[DT_CACHE_KIND_COUNT];
    size_t cache_capacity[DT_CACHE_KIND_COUNT];
    /* Op dispatch's front to its strategy cache (ops/dispatch_memo.h): plain memory made on
     * first use, freed with the mesh. */
    void *op_memo;
};

/* Makes the mesh's cache of kind, whose values free_value frees (mesh->caches[kind] is
 * checked first by the caller: this is the slow path). */
dt_status dt_mesh_cache_make(dt_mesh *mesh, dt_cache_kind kind, void (*free_value)(void *),
                             struct dt_lru **cache_out);

/* Communicators come in lanes: lane 0 for blocking calls, lane 1 for the communication
 * thread, so that work queued there never interleaves with the rank's own collectives. */
#define DT_MESH_LANES 2
dt_status dt_mesh_lane_comm(dt_mesh *mesh, unsigned dims_mask, int lane, dt_comm **comm_out);

#endif
