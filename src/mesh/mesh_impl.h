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
    dt_comm **comms; /* root only: indexed by a mask of root dims, made on first use */
};

#endif
