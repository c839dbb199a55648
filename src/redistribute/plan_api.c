/* Plan objects: argument checks, the default cost model, accessors. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "redistribute/plan_impl.h"

static const char *const step_names[] = {
    [DT_STEP_ALL_GATHER] = "all_gather", [DT_STEP_ALL_TO_ALL] = "all_to_all",
    [DT_STEP_ALL_REDUCE] = "all_reduce", [DT_STEP_REDUCE_SCATTER] = "reduce_scatter",
    [DT_STEP_SLICE] = "slice",           [DT_STEP_TO_PARTIAL] = "to_partial",
    [DT_STEP_SCALE] = "scale",           [DT_STEP_RELABEL] = "relabel",
};
_Static_assert(sizeof step_names / sizeof step_names[0] == DT_STEP_KIND_COUNT,
               "step name table incomplete");

const char *dt_step_kind_name(dt_step_kind kind) {
    return (unsigned)kind < DT_STEP_KIND_COUNT ? step_names[kind] : "?";
}

dt_cost_model dt_cost_model_default(void) {
    return (dt_cost_model){.latency_us = 5.0, .step_us = 1.0, .bandwidth_gbps = 10.0};
}

dt_status dt_plan_check_args(const char *fn, int mesh_ndim, const int *mesh_shape, int ndim,
                             const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                             const dt_placement *dst, dt_placement *src_out,
                             dt_placement *dst_out) {
    DT_ARG(mesh_ndim >= 1 && mesh_ndim <= DT_MESH_MAX_NDIM,
           "%s: argument mesh_ndim = %d is not in [1, %d]", fn, mesh_ndim, DT_MESH_MAX_NDIM);
    DT_ARG(mesh_shape != NULL, "%s: argument mesh_shape is NULL", fn);
    for (int m = 0; m < mesh_ndim; m++)
        if (mesh_shape[m] < 1)
            return dt_error(DT_ERR_MESH, "%s: mesh_shape[%d] = %d must be at least 1", fn, m,
                            mesh_shape[m]);
    DT_CHECK(dt_shape_dtype_check(fn, ndim, shape, dtype));
    DT_ARG(src != NULL, "%s: argument src is NULL", fn);
    DT_ARG(dst != NULL, "%s: argument dst is NULL", fn);
    DT_CHECK(dt_placements_check(fn, src, mesh_ndim, ndim, dtype, src_out));
    return dt_placements_check(fn, dst, mesh_ndim, ndim, dtype, dst_out);
}

static dt_status check_model(const char *fn, const dt_cost_model *model) {
    if (!model) return DT_OK;
    DT_ARG(model->latency_us >= 0 && model->step_us >= 0 && model->bandwidth_gbps > 0,
           "%s: cost model {latency_us %g, step_us %g, bandwidth_gbps %g} needs non-negative "
           "latencies and a positive bandwidth", fn, model->latency_us, model->step_us,
           model->bandwidth_gbps);
    return DT_OK;
}

dt_status dt_plan_create(int mesh_ndim, const int *mesh_shape, int ndim, const int64_t *shape,
                         dt_dtype dtype, const dt_placement *src, const dt_placement *dst,
                         const dt_cost_model *model, dt_plan **out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check_model("dt_plan_create", model));
    dt_placement s[DT_MESH_MAX_NDIM], d[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_plan_check_args("dt_plan_create", mesh_ndim, mesh_shape, ndim, shape, dtype, src,
                                dst, s, d));
    return dt_plan_search(mesh_ndim, mesh_shape, ndim, shape, dtype, s, d, model, out);
}

dt_status dt_plan_retain(const dt_plan *plan) {
    DT_ARG_NOT_NULL(plan);
    atomic_fetch_add(&((dt_plan *)plan)->refs, 1); /* plans are made on the heap, never const */
    return DT_OK;
}

dt_status dt_plan_release(const dt_plan *plan) {
    dt_plan *p = (dt_plan *)plan;
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return DT_OK;
    free(p->steps);
    free(p);
    return DT_OK;
}

int dt_plan_nsteps(const dt_plan *plan) { return plan ? plan->nsteps : -1; }
int dt_plan_ncollectives(const dt_plan *plan) { return plan ? plan->ncollectives : -1; }
double dt_plan_cost_us(const dt_plan *plan) { return plan ? plan->cost_us : -1.0; }

dt_status dt_plan_step_get(const dt_plan *plan, int i, dt_plan_step *out) {
    DT_ARG_NOT_NULL(plan);
    DT_ARG_NOT_NULL(out);
    DT_ARG(i >= 0 && i < plan->nsteps, "dt_plan_step_get: argument i = %d is not in [0, %d)", i,
           plan->nsteps);
    *out = plan->steps[i];
    return DT_OK;
}
