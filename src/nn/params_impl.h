/* The body of dt_params, shared by the registry (params.c), the plan (parallel.c) and the
 * layers (layers.c). */
#ifndef DT_NN_PARAMS_IMPL_H
#define DT_NN_PARAMS_IMPL_H

#include "dtensor/parallel.h"

typedef struct module_entry {
    char *name;
    dt_module_kind kind;
    int has_style;
    dt_style style;
    double norm_eps; /* DT_MODULE_NORM */
} module_entry;

typedef struct param_entry {
    char *name; /* full: "<module>.<local>" */
    int module;
    int group;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_init init;
    dt_placement stored[DT_MESH_MAX_NDIM];  /* the leaf's placements */
    dt_placement compute[DT_MESH_MAX_NDIM]; /* what layers compute with */
    dt_tensor *tensor;
} param_entry;

typedef struct group_entry {
    char *name;
    int first, n;
} group_entry;

struct dt_params {
    dt_mesh *mesh; /* retained */
    dt_dtype dtype;
    module_entry *modules;
    int nmodules, cap_modules;
    param_entry *params;
    int nparams, cap_params;
    group_entry *groups;
    int ngroups, cap_groups;
    int tp_dim, dp_dim; /* set by dt_parallelize; -1: none */
    int parallelized, materialized;

    /* set by dt_parallelize */
    dt_async_tp_mode async_tp;
    dt_params_use_fn use_hook; /* dt_params_set_use_hook; NULL: redistribute */
    void *use_user;
};

/* DT_ERR_ARG naming fn unless module names a module of kind (kind < 0: any). */
dt_status dt_module_check(const char *fn, dt_module module, int kind);

#endif
