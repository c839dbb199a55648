/* Plans as text: what dt_redistribute_explain and dtensor-explain print. */
#include <stdio.h>

#include "core/check.h"
#include "core/text.h"
#include "redistribute/plan_impl.h"

static void put_placements(dt_text *t, const dt_placement *p, int n) {
    char buf[16 * DT_MESH_MAX_NDIM];
    dt_placements_format(p, n, buf, sizeof buf);
    dt_text_put(t, "%s", buf);
}

static void put_dims(dt_text *t, unsigned mask, int mnd, const char *const *names) {
    char buf[DT_MESH_MAX_NDIM * 34] = "";
    size_t o = 0;
    for (int m = 0; m < mnd; m++) {
        if (!(mask & (1u << m))) continue;
        char def[16];
        snprintf(def, sizeof def, "d%d", m);
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", o ? "+" : "", names ? names[m] : def);
    }
    dt_text_put(t, "%-10s", buf);
}

dt_status dt_plan_format(const dt_plan *plan, const char *const *dim_names, char *buf, size_t cap,
                         size_t *len_out) {
    DT_ARG_NOT_NULL(plan);
    DT_ARG(buf != NULL || cap == 0, "dt_plan_format: argument buf is NULL with cap %zu", cap);
    dt_text t = {buf, cap, 0};
    dt_text_put(&t, "redistribute %s[", dt_dtype_name(plan->dtype));
    for (int d = 0; d < plan->ndim; d++)
        dt_text_put(&t, d ? ",%lld" : "%lld", (long long)plan->shape[d]);
    dt_text_put(&t, "] on mesh ");
    for (int m = 0; m < plan->mesh_ndim; m++) {
        if (dim_names) dt_text_put(&t, "%s%s=%d", m ? " x " : "", dim_names[m], plan->mesh_shape[m]);
        else dt_text_put(&t, "%s%d", m ? "x" : "", plan->mesh_shape[m]);
    }
    dt_text_put(&t, ": ");
    put_placements(&t, plan->src, plan->mesh_ndim);
    dt_text_put(&t, " -> ");
    put_placements(&t, plan->dst, plan->mesh_ndim);
    dt_text_put(&t, "\n");
    double recv = 0;
    for (int i = 0; i < plan->nsteps; i++) {
        const dt_plan_step *s = &plan->steps[i];
        dt_text_put(&t, "  %d. %-15s", i + 1, dt_step_kind_name(s->kind));
        put_dims(&t, s->mesh_mask, plan->mesh_ndim, dim_names);
        if (dt_step_is_collective(s->kind)) {
            dt_text_put(&t, " group %-5d send ", s->group_size);
            dt_text_bytes(&t, (double)s->send_bytes);
            dt_text_put(&t, ", recv ");
            dt_text_bytes(&t, (double)s->recv_bytes);
            dt_text_put(&t, ", ~%.1f us  ", s->cost_us);
            recv += (double)s->recv_bytes;
        } else {
            dt_text_put(&t, " local  ");
        }
        put_placements(&t, s->before, plan->mesh_ndim);
        dt_text_put(&t, " -> ");
        put_placements(&t, s->after, plan->mesh_ndim);
        dt_text_put(&t, "\n");
    }
    if (plan->nsteps == 0) dt_text_put(&t, "  nothing to do: the placements are the same\n");
    dt_text_put(&t, "total: %d collective%s, ", plan->ncollectives,
                plan->ncollectives == 1 ? "" : "s");
    dt_text_bytes(&t, recv);
    dt_text_put(&t, " received per rank (largest shard), estimated %.1f us\n", plan->cost_us);
    return dt_text_finish(&t, "dt_plan_format", len_out);
}

dt_status dt_redistribute_explain(int mesh_ndim, const int *mesh_shape,
                                  const char *const *dim_names, int ndim, const int64_t *shape,
                                  dt_dtype dtype, const dt_placement *src, const dt_placement *dst,
                                  const dt_cost_model *model, char *buf, size_t cap,
                                  size_t *len_out) {
    dt_plan *plan;
    DT_CHECK(dt_plan_create(mesh_ndim, mesh_shape, ndim, shape, dtype, src, dst, model, &plan));
    dt_status st = dt_plan_format(plan, dim_names, buf, cap, len_out);
    dt_plan_release(plan);
    return st;
}
