/* Op dispatch without ranks: the strategy dt_op_call would choose for inputs of given specs on
 * a mesh of a given shape, and the redistribute plan of each input, computed from the specs
 * alone (no context, no mesh object, any mesh size), for tools (dtensor-explain) and for
 * placement-propagation tests of built-in and registered ops.
 *
 * Nothing here is collective and nothing blocks on other ranks; every call may run on any
 * thread. The choice equals dispatch's on real ranks priced with the same cost model (the
 * rank's model is dt_cost_model_default() unless dt_ctx_set_cost_model changed it). */
#ifndef DTENSOR_EXPLAIN_H
#define DTENSOR_EXPLAIN_H

#include "dtensor/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A DTensor's global spec without data: what dispatch reads of an input. */
typedef struct dt_spec {
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    int nplacements; /* the mesh's ndim */
    dt_placement placements[DT_MESH_MAX_NDIM];
} dt_spec;

/* What dispatch would do. Placements are normalised (no negative shard dims). */
typedef struct dt_op_choice {
    int ninputs, mesh_ndim;
    /* The placements input i is redistributed to (its own when changed[i] is 0; R for an
     * absent optional input). */
    dt_placement inputs[DT_OP_MAX_USER_INPUTS][DT_MESH_MAX_NDIM];
    int changed[DT_OP_MAX_USER_INPUTS];
    int nchanged;
    dt_placement output[DT_MESH_MAX_NDIM];
    dt_dtype out_dtype;
    int out_ndim;
    int64_t out_shape[DT_MAX_NDIM];
    double cost_us; /* the estimates of the inputs' plans, summed */
} dt_op_choice;

/* The op named name: built-in ("mm", "softmax", ...) or registered with dt_op_register.
 * DT_ERR_ARG naming it when there is none. */
DT_API dt_status dt_op_lookup(const char *name, dt_op *out);

/* The strategy dt_op_call(op, inputs, ninputs, args) would choose on a mesh of mesh_ndim dims
 * of sizes mesh_shape. inputs[i] NULL = an absent optional input (a bias); each present one
 * has mesh_ndim placements. args NULL = all zero (as dt_op_call); model NULL = the default.
 * Ops built from other ops (var, std, cross_entropy) have no single strategy:
 * DT_ERR_UNSUPPORTED. Errors in the inputs are the ones dt_op_call reports. */
DT_API dt_status dt_op_choose(dt_op op, int mesh_ndim, const int *mesh_shape,
                              const dt_spec *const *inputs, int ninputs, const dt_op_args *args,
                              const dt_cost_model *model, dt_op_choice *out);

/* The same as text: the inputs, the chosen strategy, the output spec, then each input's
 * redistribute plan as dt_plan_format writes it (or that it stays). dim_names NULL = "d0",
 * "d1", ... Writes at most cap bytes, NUL-terminated; *len_out (nullable) = the length
 * needed, so a call with cap 0 sizes the buffer (DT_ERR_SIZE until it fits). What
 * dtensor-explain --op prints. */
DT_API dt_status dt_op_explain(dt_op op, int mesh_ndim, const int *mesh_shape,
                               const char *const *dim_names, const dt_spec *const *inputs,
                               int ninputs, const dt_op_args *args, const dt_cost_model *model,
                               char *buf, size_t cap, size_t *len_out);

/* Plugins: a shared object that registers ops when loaded, for dtensor-explain --plugin (and
 * for any program that wants its ops). It defines this symbol (extern "C" in C++), which
 * registers its ops with dt_op_register and returns DT_OK, or a status with dt_error_set
 * saying why. Loaders call it once, after dlopen. The library defines no such symbol. */
#define DT_PLUGIN_ENTRY "dt_plugin_register"
typedef dt_status (*dt_plugin_register_fn)(void);
DT_API dt_status dt_plugin_register(void);

#ifdef __cplusplus
}
#endif
#endif
