/* The strategy search of op dispatch over specs: which row of the op's rules each mesh dim
 * takes, priced by the redistribute plans the inputs would need. Knows no tensors, meshes or
 * ranks: the price of moving an input comes from the caller (dt_op_choose plans it from the
 * specs; dispatch reads its mesh's plan cache). */
#ifndef DT_OPS_STRATEGY_H
#define DT_OPS_STRATEGY_H

#include "ops/op_impl.h"

/* The estimated cost of redistributing input i from its placements to want (valid for it). */
typedef dt_status (*dt_strategy_price_fn)(void *user, int i, const dt_placement *want,
                                          double *cost_us);

typedef struct dt_strategy_query {
    dt_op op;
    const op_family *family;
    int n;
    const op_input *in;              /* global specs; ndim -1 for an absent optional input */
    const dt_placement *const *have; /* each input's placements, normalised; NULL if absent */
    const dt_op_args *args;
    int mesh_ndim;
    const int *mesh_shape;
    dt_strategy_price_fn price;
    void *user;
} dt_strategy_query;

typedef struct dt_strategy_found {
    dt_placement in[DT_OP_MAX_INPUTS][DT_MESH_MAX_NDIM];
    dt_placement out[DT_MESH_MAX_NDIM];
    op_out spec;
    double cost_us;
    int changed; /* inputs redistributed */
} dt_strategy_found;

/* Every combination of one row per mesh dim (each dim keeping its few rows closest to the
 * inputs when there are too many), cheapest first, ties broken by fewer inputs changed, then
 * by row order. DT_ERR_PLACEMENT when no row fits. */
dt_status dt_strategy_search(const dt_strategy_query *q, dt_strategy_found *best);

#endif
