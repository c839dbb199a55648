/* The parameter registry of dtensor/params.h: modules, parameters and groups in declaration
 * order, materialization, and the one place layers fetch weights (dt_params_use). The plan
 * that sets placements lives in parallel.c. */
#include <stdlib.h>
#include <string.h>

#include "comm/flight.h"
#include "core/check.h"
#include "core/fiber.h"
#include "dtensor/autograd.h"
#include "dtensor/ops.h"
#include "nn/params_impl.h"

static char *copy_name(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

/* Grows *arr (of *cap elements of size sz) to hold n + 1. */
static dt_status grow(void **arr, int *cap, int n, size_t sz, const char *fn) {
    if (n < *cap) return DT_OK;
    int c = *cap ? 2 * *cap : 16;
    void *a = realloc(*arr, sz * (size_t)c);
    if (!a) return dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    *arr = a, *cap = c;
    return DT_OK;
}

dt_status dt_params_create(dt_mesh *mesh, dt_dtype dtype, dt_params **out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(out);
    DT_ARG(dtype == DT_F32 || dtype == DT_F64 || dtype == DT_BF16 || dtype == DT_F16,
           "dt_params_create: dtype %s is not a float type", dt_dtype_name(dtype));
    dt_params *p = calloc(1, sizeof *p);
    if (!p) return dt_error(DT_ERR_NOMEM, "dt_params_create: out of memory");
    p->mesh = mesh, p->dtype = dtype, p->tp_dim = -1, p->dp_dim = -1;
    dt_mesh_retain(mesh);
    *out = p;
    return DT_OK;
}

dt_status dt_params_destroy(dt_params *params) {
    if (!params) return DT_OK;
    dt_units_free(params);
    for (int i = 0; i < params->nmodules; i++)
        free(params->modules[i].name);
    for (int i = 0; i < params->nparams; i++) {
        free(params->params[i].name);
        dt_tensor_release(params->params[i].tensor);
    }
    for (int i = 0; i < params->ngroups; i++)
        free(params->groups[i].name);
    free(params->modules), free(params->params), free(params->groups);
    dt_mesh_release(params->mesh);
    free(params);
    return DT_OK;
}

static dt_status declaring(const char *fn, const dt_params *p, const char *name) {
    DT_ARG(p != NULL, "%s: argument params is NULL", fn);
    DT_ARG(name && *name, "%s: argument name is NULL or empty", fn);
    DT_ARG(!p->materialized,
           "%s: \"%s\": the registry is materialized already (declare the "
           "whole model first)",
           fn, name);
    DT_ARG(!p->units,
           "%s: \"%s\": FSDP units are declared already (dt_fully_shard): declare the whole "
           "model first",
           fn, name);
    return DT_OK;
}

dt_status dt_params_begin_group(dt_params *params, const char *name) {
    DT_CHECK(declaring(__func__, params, name));
    for (int g = 0; g < params->ngroups; g++)
        DT_ARG(strcmp(params->groups[g].name, name), "dt_params_begin_group: group \"%s\" exists",
               name);
    DT_CHECK(grow((void **)&params->groups, &params->cap_groups, params->ngroups,
                  sizeof *params->groups, __func__));
    char *c = copy_name(name);
    if (!c) return dt_error(DT_ERR_NOMEM, "dt_params_begin_group: out of memory");
    params->groups[params->ngroups++] = (group_entry){.name = c, .first = params->nparams};
    return DT_OK;
}

dt_status dt_params_module(dt_params *params, const char *name, dt_module_kind kind,
                           dt_module *out) {
    DT_CHECK(declaring(__func__, params, name));
    DT_ARG_NOT_NULL(out);
    DT_ARG(kind >= DT_MODULE_CONTAINER && kind <= DT_MODULE_EXPERTS,
           "dt_params_module: \"%s\": unknown kind %d", name, (int)kind);
    for (int m = 0; m < params->nmodules; m++)
        DT_ARG(strcmp(params->modules[m].name, name), "dt_params_module: module \"%s\" exists",
               name);
    DT_CHECK(grow((void **)&params->modules, &params->cap_modules, params->nmodules,
                  sizeof *params->modules, __func__));
    char *c = copy_name(name);
    if (!c) return dt_error(DT_ERR_NOMEM, "dt_params_module: out of memory");
    params->modules[params->nmodules] = (module_entry){.name = c, .kind = kind};
    *out = (dt_module){params, params->nmodules++};
    return DT_OK;
}

dt_status dt_module_check(const char *fn, dt_module module, int kind) {
    dt_params *p = module.params;
    DT_ARG(p != NULL, "%s: module has no registry", fn);
    DT_ARG(module.index >= 0 && module.index < p->nmodules,
           "%s: module index %d out of range "
           "[0, %d)",
           fn, module.index, p->nmodules);
    DT_ARG(kind < 0 || p->modules[module.index].kind == (dt_module_kind)kind,
           "%s: module \"%s\" is not of the kind this call runs", fn,
           p->modules[module.index].name);
    return DT_OK;
}

dt_status dt_params_declare(dt_module module, const char *name, int ndim, const int64_t *shape,
                            dt_init init, int *out) {
    DT_CHECK(dt_module_check(__func__, module, -1));
    dt_params *p = module.params;
    DT_CHECK(declaring(__func__, p, name));
    DT_ARG(ndim >= 1 && ndim <= DT_MAX_NDIM && shape,
           "dt_params_declare: \"%s\": ndim %d "
           "(want 1..%d and a shape)",
           name, ndim, DT_MAX_NDIM);
    for (int d = 0; d < ndim; d++)
        DT_ARG(shape[d] >= 0, "dt_params_declare: \"%s\": shape[%d] = %lld", name, d,
               (long long)shape[d]);
    DT_ARG(init.kind >= DT_INIT_ZEROS && init.kind <= DT_INIT_NORMAL && init.std >= 0,
           "dt_params_declare: \"%s\": init kind %d std %g", name, (int)init.kind, init.std);
    const char *mname = p->modules[module.index].name;
    size_t len = strlen(mname) + 1 + strlen(name) + 1;
    char *full = malloc(len);
    if (!full) return dt_error(DT_ERR_NOMEM, "dt_params_declare: out of memory");
    snprintf(full, len, "%s.%s", mname, name);
    for (int i = 0; i < p->nparams; i++)
        if (!strcmp(p->params[i].name, full)) {
            free(full);
            return dt_error(DT_ERR_ARG, "dt_params_declare: parameter \"%s.%s\" exists", mname,
                            name);
        }
    dt_status st =
        grow((void **)&p->params, &p->cap_params, p->nparams, sizeof *p->params, __func__);
    if (st != DT_OK) return free(full), st;
    param_entry *e = &p->params[p->nparams];
    *e = (param_entry){
        .name = full, .module = module.index, .group = p->ngroups - 1, .ndim = ndim, .init = init};
    memcpy(e->shape, shape, sizeof(int64_t) * (size_t)ndim);
    for (int m = 0; m < dt_mesh_ndim(p->mesh); m++)
        e->stored[m] = e->compute[m] = dt_replicate();
    if (p->ngroups) p->groups[p->ngroups - 1].n++;
    if (out) *out = p->nparams;
    p->nparams++;
    return DT_OK;
}

static dt_status make_param(dt_params *p, param_entry *e, dt_generator *gen) {
    int mnd = dt_mesh_ndim(p->mesh);
    if (e->init.kind == DT_INIT_ZEROS)
        return dt_tensor_zeros(p->mesh, p->dtype, e->ndim, e->shape, mnd, e->stored, &e->tensor);
    if (e->init.kind == DT_INIT_ONES)
        return dt_tensor_ones(p->mesh, p->dtype, e->ndim, e->shape, mnd, e->stored, &e->tensor);
    dt_tensor *r;
    DT_CHECK(dt_tensor_randn(p->mesh, p->dtype, e->ndim, e->shape, mnd, e->stored, gen, &r));
    dt_status st = dt_mul_scalar(r, e->init.std, &e->tensor);
    dt_tensor_release(r);
    return st;
}

dt_status dt_params_materialize(dt_params *params, dt_generator *gen) {
    DT_ARG_NOT_NULL(params);
    DT_ARG_NOT_NULL(gen);
    DT_ARG(!params->materialized, "dt_params_materialize: the registry is materialized already");
    dt_status st = DT_OK;
    for (int i = 0; i < params->nparams && st == DT_OK; i++) {
        param_entry *e = &params->params[i];
        st = make_param(params, e, gen);
        if (st == DT_OK) st = dt_tensor_set_requires_grad(e->tensor, 1);
        if (st != DT_OK) dt_error_prefix(e->name);
    }
    if (st == DT_OK) st = dt_units_build(params);
    if (st != DT_OK) {
        for (int i = 0; i < params->nparams; i++)
            dt_tensor_release(params->params[i].tensor), params->params[i].tensor = NULL;
        return st;
    }
    params->materialized = 1;
    return DT_OK;
}

int dt_params_count(const dt_params *params) {
    return params ? params->nparams : 0;
}

static dt_status index_check(const char *fn, const dt_params *p, int i) {
    DT_ARG(p != NULL, "%s: argument params is NULL", fn);
    DT_ARG(i >= 0 && i < p->nparams, "%s: parameter index %d out of range [0, %d)", fn, i,
           p->nparams);
    return DT_OK;
}

dt_status dt_params_at(const dt_params *params, int i, const char **name_out,
                       dt_tensor **tensor_out) {
    DT_CHECK(index_check(__func__, params, i));
    if (name_out) *name_out = params->params[i].name;
    if (tensor_out) *tensor_out = params->params[i].tensor;
    return DT_OK;
}

dt_status dt_params_find(const dt_params *params, const char *name, int *out) {
    DT_ARG_NOT_NULL(params);
    DT_ARG_NOT_NULL(name);
    DT_ARG_NOT_NULL(out);
    for (int i = 0; i < params->nparams; i++)
        if (!strcmp(params->params[i].name, name)) return *out = i, DT_OK;
    return dt_error(DT_ERR_ARG, "dt_params_find: no parameter named \"%s\"", name);
}

dt_status dt_params_arrays(const dt_params *params, const char **names, dt_tensor **tensors,
                           int cap, int *n_out) {
    DT_ARG_NOT_NULL(params);
    DT_ARG(cap >= params->nparams, "dt_params_arrays: cap %d < %d parameters", cap,
           params->nparams);
    for (int i = 0; i < params->nparams; i++) {
        if (names) names[i] = params->params[i].name;
        if (tensors) tensors[i] = params->params[i].tensor;
    }
    if (n_out) *n_out = params->nparams;
    return DT_OK;
}

dt_status dt_params_placements(const dt_params *params, int i, dt_placement *stored_out,
                               dt_placement *compute_out) {
    DT_CHECK(index_check(__func__, params, i));
    size_t bytes = sizeof(dt_placement) * (size_t)dt_mesh_ndim(params->mesh);
    if (stored_out) memcpy(stored_out, params->params[i].stored, bytes);
    if (compute_out) memcpy(compute_out, params->params[i].compute, bytes);
    return DT_OK;
}

int dt_params_group_count(const dt_params *params) {
    return params ? params->ngroups : 0;
}

dt_status dt_params_group_at(const dt_params *params, int g, const char **name_out, int *first_out,
                             int *n_out) {
    DT_ARG_NOT_NULL(params);
    DT_ARG(g >= 0 && g < params->ngroups, "dt_params_group_at: group %d out of range [0, %d)", g,
           params->ngroups);
    if (name_out) *name_out = params->groups[g].name;
    if (first_out) *first_out = params->groups[g].first;
    if (n_out) *n_out = params->groups[g].n;
    return DT_OK;
}

int dt_params_module_count(const dt_params *params) {
    return params ? params->nmodules : 0;
}

const char *dt_params_module_name(const dt_params *params, int module) {
    if (!params || module < 0 || module >= params->nmodules) return NULL;
    return params->modules[module].name;
}

dt_mesh *dt_params_mesh(const dt_params *params) {
    return params ? params->mesh : NULL;
}

int dt_module_param(dt_module module, const char *name) {
    const dt_params *p = module.params;
    if (!p || !name || module.index < 0 || module.index >= p->nmodules) return -1;
    size_t ml = strlen(p->modules[module.index].name);
    for (int i = 0; i < p->nparams; i++)
        if (p->params[i].module == module.index && !strcmp(p->params[i].name + ml + 1, name))
            return i;
    return -1;
}

dt_tensor *dt_params_use(dt_scope *scope, dt_params *params, int i) {
    if (!dt_scope_ok(scope)) return NULL;
    if (index_check(__func__, params, i) != DT_OK) return dt_scope_fail(scope, DT_ERR_ARG);
    param_entry *e = &params->params[i];
    dt_comm_module_tls = params->modules[e->module].name; /* for dt_comm_set_observer */
    if (!e->tensor) {
        dt_error(DT_ERR_ARG, "dt_params_use: parameter \"%s\" is not materialized", e->name);
        return dt_scope_fail(scope, DT_ERR_ARG);
    }
    int mnd = dt_mesh_ndim(params->mesh), same = 1;
    for (int m = 0; m < mnd; m++)
        same &= dt_placement_equal(e->stored[m], e->compute[m]);
    if (same) return e->tensor;
    if (dt_units_has(params, i)) return DT_DO(scope, dt_units_use, params, i);
    if (params->use_hook)
        return DT_DO(scope, params->use_hook, params->use_user, params, i, e->tensor, mnd,
                     e->compute);
    return DT_DO(scope, dt_tensor_redistribute, e->tensor, mnd, e->compute);
}

dt_status dt_params_set_use_hook(dt_params *params, dt_params_use_fn fn, void *user) {
    DT_ARG_NOT_NULL(params);
    DT_ARG(!params->units || !fn,
           "dt_params_set_use_hook: the registry has FSDP units (dt_fully_shard), which "
           "make its parameters' compute form");
    params->use_hook = fn, params->use_user = user;
    return DT_OK;
}

int dt_params_group_of(const dt_params *params, int i) {
    if (!params || i < 0 || i >= params->nparams) return -1;
    return params->params[i].group;
}

static _Thread_local dt_layout_observer_fn layout_observer;
static _Thread_local void *layout_observer_user;
DT_FIBER_LOCAL(layout_observer)
DT_FIBER_LOCAL(layout_observer_user)

void dt_module_set_layout_observer(dt_layout_observer_fn fn, void *user) {
    layout_observer = fn, layout_observer_user = user;
}

/* x with its tp placement made want (a negative Shard dim counted from x's end); name and
 * output for the observer. */
static dt_tensor *to_layout(dt_scope *s, const dt_params *p, dt_tensor *x, dt_placement want,
                            const char *name, int output) {
    if (!dt_scope_ok(s) || p->tp_dim < 0) return x;
    dt_tensor_info info;
    dt_status st = dt_tensor_info_get(x, &info);
    if (st != DT_OK) return dt_scope_fail(s, st);
    if (want.kind == DT_PLACEMENT_SHARD && want.dim < 0) want.dim += info.ndim;
    if (dt_placement_equal(info.placements[p->tp_dim], want)) return x;
    if (layout_observer)
        layout_observer(layout_observer_user, name, output, info.placements[p->tp_dim], want);
    info.placements[p->tp_dim] = want;
    return DT_DO(s, dt_tensor_redistribute, x, info.mesh_ndim, info.placements);
}

dt_tensor *dt_module_input(dt_scope *scope, dt_module module, dt_tensor *x) {
    if (!dt_scope_ok(scope)) return NULL;
    if (dt_module_check(__func__, module, -1) != DT_OK) return dt_scope_fail(scope, DT_ERR_ARG);
    const module_entry *m = &module.params->modules[module.index];
    dt_comm_module_tls = m->name;
    if (!m->has_style || !m->style.has_input) return x;
    /* embeddings take their indices whole whatever the style */
    dt_placement want = m->kind == DT_MODULE_EMBEDDING ? dt_replicate() : m->style.input;
    return to_layout(scope, module.params, x, want, m->name, 0);
}

dt_tensor *dt_module_output(dt_scope *scope, dt_module module, dt_tensor *y) {
    if (!dt_scope_ok(scope)) return NULL;
    if (dt_module_check(__func__, module, -1) != DT_OK) return dt_scope_fail(scope, DT_ERR_ARG);
    const module_entry *m = &module.params->modules[module.index];
    dt_comm_module_tls = m->name;
    if (!m->has_style || !m->style.has_output) return y;
    return to_layout(scope, module.params, y, m->style.output, m->name, 1);
}
