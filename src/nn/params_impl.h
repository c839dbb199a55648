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
    int float8;      /* DT_MODULE_LINEAR: forward through dt_linear_float8 */
    int bf16;        /* DT_MODULE_LINEAR: forward through dt_linear_bf16 */
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
    int dp_shard;       /* dt_parallelize's dp_mode was DT_DP_SHARD */
    int parallelized, materialized;
    struct dt_units *units; /* dt_fully_shard's declarations and units (fully_shard.c) */

    /* set by dt_parallelize */
    dt_async_tp_mode async_tp;
    dt_params_use_fn use_hook; /* dt_params_set_use_hook; NULL: redistribute */
    void *use_user;
};

/* Whether name matches pattern, where '*' matches one or more characters other than '.'. */
int dt_name_match(const char *pattern, const char *name);

/* ---- FSDP units by declaration (fully_shard.c) ---- */
/* At the end of dt_params_materialize: the units declared, made. */
dt_status dt_units_build(dt_params *p);
/* Parameter i's compute form through its unit (*out: a new reference); 0 when i is in no
 * unit or grad mode is off (the caller redistributes it then). */
int dt_units_has(const dt_params *p, int i);
dt_status dt_units_use(dt_params *p, int i, dt_tensor **out);
void dt_units_free(dt_params *p);

/* DT_ERR_ARG naming fn unless module names a module of kind (kind < 0: any). */
dt_status dt_module_check(const char *fn, dt_module module, int kind);

#endif
