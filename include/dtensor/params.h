/* Parameters by name: a registry of a model's modules and parameters (name -> tensor, in
 * declaration order, in contiguous groups) that the optimizer (dt_optim_adamw_create_params),
 * the parallelize plan (dtensor/parallel.h) and a checkpoint (dt_params_arrays) all take.
 *
 * A model is declared first (modules, then each module's parameters with shape and init, as
 * on PyTorch's meta device), parallelized (which decides every parameter's placements), and
 * then materialized: dt_params_materialize makes each tensor where it lives, drawing from the
 * mesh-independent generator in declaration order, so the same seed gives the same model on
 * any mesh and plan.
 *
 * Layers compute with a parameter through dt_params_use only: that is where the stored form
 * (FSDP-sharded over a data-parallel mesh dim) becomes the form the layer computes with.
 *
 * A registry belongs to one rank (every rank declares the same model); none of these calls
 * is collective but dt_params_use (collective over the mesh when it gathers) and, with FSDP
 * units (dtensor/fsdp.h's dt_fully_shard) whose gather is still in flight, dt_params_destroy. */
#ifndef DTENSOR_PARAMS_H
#define DTENSOR_PARAMS_H

#include <stdio.h>

#include "dtensor/create.h"
#include "dtensor/scope.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_params dt_params;

/* What a module is, for the styles a plan may give it (dtensor/parallel.h). */
typedef enum dt_module_kind {
    DT_MODULE_CONTAINER = 0, /* holds other modules (a block, attention, mlp): prepare styles */
    DT_MODULE_LINEAR,        /* weight (out, in), bias (out) */
    DT_MODULE_EMBEDDING,     /* weight (num, dim) */
    DT_MODULE_NORM,          /* weight (dim): RMSNorm */
    DT_MODULE_EXPERTS,       /* a bank of experts (dtensor/moe.h): every parameter (E, ...),
                                expert first; expert parallelism shards dim 0 */
} dt_module_kind;

/* A module: its registry and its index there. Plain value. */
typedef struct dt_module {
    dt_params *params;
    int index;
} dt_module;

/* How a parameter is drawn at dt_params_materialize. */
typedef enum dt_init_kind { DT_INIT_ZEROS = 0, DT_INIT_ONES, DT_INIT_NORMAL } dt_init_kind;
typedef struct dt_init {
    dt_init_kind kind;
    double std; /* DT_INIT_NORMAL: mean 0, this standard deviation */
} dt_init;

/* An empty registry for a model on mesh (retained) whose parameters have dtype. The caller
 * owns *out (dt_params_destroy, which releases the tensors). */
DT_API dt_status dt_params_create(dt_mesh *mesh, dt_dtype dtype, dt_params **out);
DT_API dt_status dt_params_destroy(dt_params *params);

/* Starts a group: the parameters declared from now on belong to it (until the next call).
 * Groups are contiguous ranges in declaration order (an FSDP unit, a transformer block);
 * parameters declared before the first call are in group "" . DT_ERR_ARG for a name in use. */
DT_API dt_status dt_params_begin_group(dt_params *params, const char *name);

/* Declares a module named name (dotted path, e.g. "layers.0.attention.wq"; copied) of kind.
 * DT_ERR_ARG for an empty or duplicate name, or after dt_params_materialize. */
DT_API dt_status dt_params_module(dt_params *params, const char *name, dt_module_kind kind,
                                  dt_module *out);
/* Declares parameter "<module's name>.<name>" of module (shape copied) with init; *out (nullable)
 * = its index. DT_ERR_ARG for a duplicate name or after dt_params_materialize. */
DT_API dt_status dt_params_declare(dt_module module, const char *name, int ndim,
                                   const int64_t *shape, dt_init init, int *out);

/* Makes every parameter's tensor, in declaration order, in the placements dt_parallelize gave it
 * (Replicate on every mesh dim without it), marked requires_grad. gen advances as each draw
 * needs (dtensor/create.h), so the values do not depend on the mesh or the placements. Once
 * only. */
DT_API dt_status dt_params_materialize(dt_params *params, dt_generator *gen);

/* ---- reading the registry (borrowed results, valid until dt_params_destroy) -------------- */

DT_API int dt_params_count(const dt_params *params);
/* Parameter i's full name and tensor (NULL before dt_params_materialize); either nullable. */
DT_API dt_status dt_params_at(const dt_params *params, int i, const char **name_out,
                              dt_tensor **tensor_out);
/* The index of the parameter named name; DT_ERR_ARG naming it when there is none. */
DT_API dt_status dt_params_find(const dt_params *params, const char *name, int *out);
/* Fills names[0..n) and tensors[0..n) (either nullable), n = dt_params_count, for a checkpoint
 * or an optimizer; DT_ERR_ARG when cap < n. */
DT_API dt_status dt_params_arrays(const dt_params *params, const char **names, dt_tensor **tensors,
                                  int cap, int *n_out);
/* Parameter i's placements: stored (the leaf's) and those layers compute with (dp gathered);
 * either nullable, each the mesh's ndim long. */
DT_API dt_status dt_params_placements(const dt_params *params, int i, dt_placement *stored_out,
                                      dt_placement *compute_out);
DT_API int dt_params_group_count(const dt_params *params);
/* Group g's name and its parameters [*first_out, *first_out + *n_out); each out nullable. */
DT_API dt_status dt_params_group_at(const dt_params *params, int g, const char **name_out,
                                    int *first_out, int *n_out);
DT_API int dt_params_module_count(const dt_params *params);
DT_API const char *dt_params_module_name(const dt_params *params, int module);
/* Module m's parameter named name ("weight"), -1 when it has none. */
DT_API int dt_module_param(dt_module module, const char *name);
DT_API dt_mesh *dt_params_mesh(const dt_params *params);

/* Prints one line per parameter (index, name, shape, group, its module's style, stored and
 * compute placements) and the totals, as a plan a person can check. Not collective. */
DT_API dt_status dt_params_print(const dt_params *params, FILE *f);

/* ---- computing with them ----------------------------------------------------------------- */

/* The tensor a layer computes with for parameter i, owned by the scope (or the registry):
 * the parameter itself when its stored and compute placements agree, else the parameter
 * gathered by its FSDP unit when it is in one (dtensor/fsdp.h's dt_fully_shard: the whole
 * unit in one all_gather) and grad mode is on, else the parameter redistributed to its
 * compute placements (an all_gather over the data-parallel dim; autograd records it, so
 * backward reduce_scatters the gradient into the stored shard once). Every layer fetches its
 * weights here and only here. Collective over the mesh when it gathers. */
DT_API dt_tensor *dt_params_use(dt_scope *scope, dt_params *params, int i);

/* Replaces how dt_params_use makes a parameter's compute form, for FSDP with prefetch and
 * reshard-after-forward: fn (NULL: the default, one redistribute per use) is called for every
 * use of a parameter whose stored and compute placements differ, with the parameter's index,
 * its stored tensor and its compute placements (ncompute = the mesh's ndim), and returns
 * through out a new reference the scope then owns (gathered ahead of time, say, and recorded so
 * that backward reduce_scatters into stored). Group and order come from the registry
 * (dt_params_group_of). DT_ERR_ARG when the registry has FSDP units (dt_fully_shard makes
 * the compute form then). Not collective itself; the hook's work is. */
typedef dt_status (*dt_params_use_fn)(void *user, dt_params *params, int i, dt_tensor *stored,
                                      int ncompute, const dt_placement *compute, dt_tensor **out);
DT_API dt_status dt_params_set_use_hook(dt_params *params, dt_params_use_fn fn, void *user);
/* The group parameter i belongs to (-1: declared before the first group). */
DT_API int dt_params_group_of(const dt_params *params, int i);

/* A module's input and output as its style wants them over the tensor-parallel mesh dim
 * (dtensor/parallel.h: Replicate for a colwise module's input, Shard(1) for a sequence-parallel
 * norm's, ...): x itself when already so, else x redistributed (recorded by autograd). The
 * layer helpers call them at their start and end; a container module written by hand calls
 * them around its body so prepare-input/output styles apply to it. */
DT_API dt_tensor *dt_module_input(dt_scope *scope, dt_module module, dt_tensor *x);
DT_API dt_tensor *dt_module_output(dt_scope *scope, dt_module module, dt_tensor *y);

/* An observer of the layout changes dt_module_input / dt_module_output make over the
 * tensor-parallel dim (sequence parallel's Shard(1) <-> Replicate, say), for explain tools:
 * fn(user, module name, output (0: the module's input, 1: its output), from, to) runs before
 * the redistribute. Thread-local: it sees the calls of the thread that set it (under the local
 * runtime, one rank; fn NULL: none, the default). Not collective. */
typedef void (*dt_layout_observer_fn)(void *user, const char *module, int output,
                                      dt_placement from, dt_placement to);
DT_API void dt_module_set_layout_observer(dt_layout_observer_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
