/* Device mesh: an N-D row-major grid of ranks with a name per dimension (the last dimension
 * varies fastest, as in arange(world).view(dp, pp, cp, tp)). Each rank holds its own mesh
 * object; meshes are reference-counted. */
#ifndef DTENSOR_MESH_H
#define DTENSOR_MESH_H

#include "dtensor/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_mesh dt_mesh;

#define DT_MESH_NAME_MAX 31

/* A mesh over every rank of the world; the product of shape must equal the world size.
 * names (nullable: "d0", "d1", ...) must be non-empty, distinct and at most DT_MESH_NAME_MAX
 * characters. Collective in order: every rank creates the same meshes in the same order
 * (nothing blocks; communicators are made on first use). The caller owns one reference. */
DT_API dt_status dt_mesh_create(dt_ctx *ctx, int ndim, const int *shape, const char *const *names,
                                dt_mesh **out);

/* The same from text: "dp=2,tp=2" (named) or "2x2" (names d0, d1). */
DT_API dt_status dt_mesh_create_str(dt_ctx *ctx, const char *text, dt_mesh **out);

/* Parses that text without making a mesh (no ranks needed): up to DT_MESH_MAX_NDIM sizes in
 * shape_out, names in names_out (nullable; "d0", "d1", ... when unnamed). Sizes are not
 * checked beyond being numbers; dt_mesh_create checks them. */
DT_API dt_status dt_mesh_parse(const char *text, int *shape_out,
                               char (*names_out)[DT_MESH_NAME_MAX + 1], int *ndim_out);

DT_API dt_status dt_mesh_retain(dt_mesh *mesh);
/* Drops one reference; the last one frees the mesh and its communicators. NULL is fine. */
DT_API dt_status dt_mesh_release(dt_mesh *mesh);

/* Sizes and names. Bad arguments give -1 (NULL for names) and set dt_last_error(). */
DT_API int dt_mesh_ndim(const dt_mesh *mesh);
DT_API int dt_mesh_dim_size(const dt_mesh *mesh, int dim);
DT_API const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim);
DT_API int dt_mesh_nranks(const dt_mesh *mesh);
/* This rank's index in the mesh (row-major) and its coordinate on dim; both -1 on a
 * sub-mesh this rank is not in (see dt_mesh_submesh_at). */
DT_API int dt_mesh_rank(const dt_mesh *mesh);
DT_API int dt_mesh_coord(const dt_mesh *mesh, int dim);
/* The rank context the mesh was made on (borrowed). */
DT_API dt_ctx *dt_mesh_ctx(const dt_mesh *mesh);

DT_API dt_status dt_mesh_dim_index(const dt_mesh *mesh, const char *name, int *out);
/* Coordinate of mesh rank r (ndim entries), and the reverse. Pure functions of the shape. */
DT_API dt_status dt_mesh_coord_of(const dt_mesh *mesh, int mesh_rank, int *out);
DT_API dt_status dt_mesh_rank_of(const dt_mesh *mesh, const int *coord, int *out);
/* World rank of mesh rank r. */
DT_API dt_status dt_mesh_world_rank(const dt_mesh *mesh, int mesh_rank, int *out);

/* The communicator along one mesh dimension: the ranks that differ from this one only in
 * dim, ordered by their coordinate. Borrowed (owned by the mesh); made on first use. */
DT_API dt_status dt_mesh_dim_comm(dt_mesh *mesh, int dim, dt_comm **out);

/* One communicator over several dimensions flattened (row-major in mesh order), e.g.
 * ("dp","tp"): the ranks that differ from this one only in those dims. names must follow
 * the mesh order. Borrowed. */
DT_API dt_status dt_mesh_group_comm(dt_mesh *mesh, const char *const *names, int n, dt_comm **out);
/* The same by a bit mask of dimensions (bit d = mesh dim d); 0 gives a group of one. */
DT_API dt_status dt_mesh_mask_comm(dt_mesh *mesh, unsigned dims_mask, dt_comm **out);

/* The sub-mesh of the named dims (in mesh order) that contains this rank, e.g. "tp" of a
 * ("dp","tp") mesh. Shares the parent's communicators. The caller owns one reference. */
DT_API dt_status dt_mesh_submesh(dt_mesh *mesh, const char *const *names, int n, dt_mesh **out);

/* The sub-mesh of the named dims at parent coordinate coord (mesh ndim entries; those of the
 * named dims are ignored), which need not contain this rank: e.g. on every rank, the "tp"
 * sub-mesh of pipeline stage pp=1, to hand a tensor to it (dt_tensor_redistribute_to). On a
 * rank outside it, dt_mesh_rank and dt_mesh_coord are -1, it has no communicators, and
 * tensors made on it hold nothing (their local shape is all zeros); ops on them are no-ops
 * that give such tensors. Not collective. The caller owns one reference. */
DT_API dt_status dt_mesh_submesh_at(dt_mesh *mesh, const char *const *names, int n,
                                    const int *coord, dt_mesh **out);

/* 1 when a and b are the same mesh by value: the same world, shape and world rank of every
 * mesh rank (dimension names aside), as PyTorch compares DeviceMesh objects; 0 otherwise (and
 * for NULL). Ops take inputs on equal meshes as on one; the output lives on input 0's. */
DT_API int dt_mesh_equal(const dt_mesh *a, const dt_mesh *b);

/* Each mesh object keeps two caches on each rank: the sharding strategies op dispatch chose
 * (DT_CACHE_STRATEGY, keyed by op, input specs and arguments) and the redistribute plans
 * (DT_CACHE_PLAN, keyed by shape, dtype, source and target placements and cost model). Each
 * holds at most capacity entries; past that, inserting evicts an entry not used for a while
 * (CLOCK, an approximation of least recently used). Default capacity: DT_CACHE_CAPACITY from
 * the environment, else 4096, for each; a sub-mesh starts with its parent's.
 *
 * Sets one cache's capacity (>= 1); a cache holding more evicts down to it at once. Not
 * collective: caches only save planning work, no result depends on them. */
DT_API dt_status dt_mesh_set_cache_capacity(dt_mesh *mesh, dt_cache_kind kind, size_t capacity);
/* One cache's counters on this mesh object: hits, misses and evictions since the mesh was
 * made, entries and capacity now. dt_comm_stats_get sums the counters over a rank's meshes. */
DT_API dt_status dt_mesh_cache_stats(const dt_mesh *mesh, dt_cache_kind kind, dt_cache_stats *out);

#ifdef __cplusplus
}
#endif
#endif
