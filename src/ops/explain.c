/* dt_op_choose and dt_op_explain (dtensor/explain.h): dispatch's strategy search over specs,
 * each move priced by a plan made from the specs, so no mesh, rank or cache is involved and
 * any mesh size works. Must not reach a context or a mesh. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/text.h"
#include "dtensor/explain.h"
#include "dtensor/tensor_impl.h"
#include "ops/strategy.h"
#include "redistribute/plan_impl.h"

_Static_assert(DT_OP_MAX_USER_INPUTS == DT_OP_MAX_INPUTS, "dt_op_choice sizes its inputs");
_Static_assert(DT_MAX_NDIM <= 8 && DT_MESH_MAX_NDIM <= 8, "price keys pack 6 bits per mesh dim");

dt_status dt_op_lookup(const char *name, dt_op *out) {
    DT_ARG_NOT_NULL(name);
    DT_ARG_NOT_NULL(out);
    for (int op = 0; op < DT_OP_COUNT; op++)
        if (!strcmp(dt_op_name((dt_op)op), name)) return *out = (dt_op)op, DT_OK;
    for (int op = DT_OP_COUNT; op < DT_OP_COUNT + DT_OP_MAX_REGISTERED; op++) {
        const char *user = dt_user_op_name((dt_op)op);
        if (!user) break;
        if (!strcmp(user, name)) return *out = (dt_op)op, DT_OK;
    }
    return dt_error(DT_ERR_ARG,
                    "dt_op_lookup: no op is named \"%s\" (neither built in nor "
                    "registered)",
                    name);
}

/* ---- pricing: one plan per (input, target), remembered for the rest of the search -------- */

typedef struct pricer {
    int mnd;
    const int *mesh_shape;
    const dt_spec *const *in;
    dt_placement (*have)[DT_MESH_MAX_NDIM];
    const dt_cost_model *model;
    uint64_t *keys; /* 0 = empty slot */
    double *costs;
    size_t cap, used;
} pricer;

static uint64_t price_key(int i, const dt_placement *want, int mnd) {
    uint64_t k = 1ull << 63 | (uint64_t)i << 56;
    for (int m = 0; m < mnd; m++) {
        /* Partial(norm) is code 7 (sum..min are 0..3); its p does not enter the key: the
         * search prices a NormP want only where input i already holds that NormP (strategy.c),
         * so input i and the mesh dim fix p. */
        unsigned v = want[m].kind == DT_PLACEMENT_SHARD     ? (unsigned)want[m].dim
                     : want[m].kind != DT_PLACEMENT_PARTIAL ? 0
                     : want[m].op == DT_REDUCE_NORM          ? 7
                                                            : (unsigned)want[m].op;
        k |= (uint64_t)(((unsigned)want[m].kind & 3) << 3 | (v & 7)) << (6 * m);
    }
    return k;
}

static size_t slot_of(const pricer *p, uint64_t key) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    size_t s = (size_t)(h >> 17) & (p->cap - 1);
    while (p->keys[s] && p->keys[s] != key)
        s = (s + 1) & (p->cap - 1);
    return s;
}

static dt_status grow(pricer *p) {
    pricer bigger = *p;
    bigger.cap = p->cap ? p->cap * 2 : 256;
    bigger.keys = calloc(bigger.cap, sizeof *bigger.keys);
    bigger.costs = malloc(bigger.cap * sizeof *bigger.costs);
    if (!bigger.keys || !bigger.costs) {
        free(bigger.keys), free(bigger.costs);
        return dt_error(DT_ERR_NOMEM, "dt_op_choose: out of memory");
    }
    for (size_t s = 0; s < p->cap; s++) {
        if (!p->keys[s]) continue;
        size_t t = slot_of(&bigger, p->keys[s]);
        bigger.keys[t] = p->keys[s];
        bigger.costs[t] = p->costs[s];
    }
    free(p->keys), free(p->costs);
    *p = bigger;
    return DT_OK;
}

static dt_status price(void *user, int i, const dt_placement *want, double *cost_us) {
    pricer *p = user;
    uint64_t key = price_key(i, want, p->mnd);
    if (2 * (p->used + 1) > p->cap) DT_CHECK(grow(p));
    size_t s = slot_of(p, key);
    if (!p->keys[s]) {
        const dt_spec *x = p->in[i];
        dt_plan *plan;
        DT_CHECK(dt_plan_search(p->mnd, p->mesh_shape, x->ndim, x->shape, x->dtype, p->have[i],
                                want, p->model, &plan));
        p->keys[s] = key;
        p->costs[s] = plan->cost_us;
        p->used++;
        dt_plan_release(plan);
    }
    *cost_us = p->costs[s];
    return DT_OK;
}

/* ---- choosing ----------------------------------------------------------------------------- */

static dt_status check_mesh(const char *fn, int mnd, const int *shape) {
    DT_ARG(mnd >= 1 && mnd <= DT_MESH_MAX_NDIM, "%s: argument mesh_ndim = %d is not in [1, %d]", fn,
           mnd, DT_MESH_MAX_NDIM);
    DT_ARG(shape != NULL, "%s: argument mesh_shape is NULL", fn);
    long long total = 1;
    for (int m = 0; m < mnd; m++) {
        if (shape[m] < 1)
            return dt_error(DT_ERR_MESH, "%s: mesh_shape[%d] = %d must be at least 1", fn, m,
                            shape[m]);
        total *= shape[m];
        if (total > INT_MAX)
            return dt_error(DT_ERR_MESH, "%s: the mesh has more than %d ranks", fn, INT_MAX);
    }
    return DT_OK;
}

/* Checks the inputs as dt_op_call does and normalises their placements into have. */
static dt_status check_inputs(dt_op op, int mnd, const dt_spec *const *in,
                              int n, dt_placement (*have)[DT_MESH_MAX_NDIM]) {
    const char *name = dt_op_name(op);
    DT_CHECK(dt_op_inputs_check("dt_op_choose", op, (const void *const *)in, n));
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        char what[32];
        snprintf(what, sizeof what, "input %d's placements", i);
        DT_CHECK(dt_placement_count_check(name, what, in[i]->nplacements, in[i]->placements, mnd));
        DT_CHECK(dt_shape_dtype_check(name, in[i]->ndim, in[i]->shape, in[i]->dtype));
        memcpy(have[i], in[i]->placements, sizeof(dt_placement) * (size_t)mnd);
        dt_status st = dt_placements_normalize(have[i], mnd, in[i]->ndim);
        if (st != DT_OK) {
            snprintf(what, sizeof what, "%s: input %d", name, i);
            dt_error_prefix(what);
            return st;
        }
    }
    return DT_OK;
}

dt_status dt_op_choose(dt_op op, int mesh_ndim, const int *mesh_shape, const dt_spec *const *inputs,
                       int ninputs, const dt_op_args *args, const dt_cost_model *model,
                       dt_op_choice *out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check_mesh("dt_op_choose", mesh_ndim, mesh_shape));
    if (model)
        DT_ARG(model->latency_us >= 0 && model->step_us >= 0 && model->bandwidth_gbps > 0,
               "dt_op_choose: cost model {latency_us %g, step_us %g, bandwidth_gbps %g} needs "
               "non-negative latencies and a positive bandwidth",
               model->latency_us, model->step_us, model->bandwidth_gbps);
    const op_family *f = dt_op_family(op);
    dt_placement have[DT_OP_MAX_INPUTS][DT_MESH_MAX_NDIM];
    DT_CHECK(check_inputs(op, mesh_ndim, inputs, ninputs, have));
    if (f->composite)
        return dt_error(DT_ERR_UNSUPPORTED,
                        "%s is built from other ops: it has no single "
                        "strategy",
                        dt_op_name(op));
    dt_op_args zero = {0};
    op_input gin[DT_OP_MAX_INPUTS];
    const dt_placement *have_ptr[DT_OP_MAX_INPUTS];
    for (int i = 0; i < ninputs; i++) {
        gin[i] = inputs[i] ? (op_input){inputs[i]->ndim, inputs[i]->shape, inputs[i]->dtype}
                           : (op_input){-1, NULL, DT_F32};
        have_ptr[i] = inputs[i] ? have[i] : NULL;
    }
    pricer p = {
        .mnd = mesh_ndim, .mesh_shape = mesh_shape, .in = inputs, .have = have, .model = model};
    dt_strategy_query q = {.op = op,
                           .family = f,
                           .n = ninputs,
                           .in = gin,
                           .have = have_ptr,
                           .args = args ? args : &zero,
                           .mesh_ndim = mesh_ndim,
                           .mesh_shape = mesh_shape,
                           .price = price,
                           .user = &p};
    dt_strategy_found best;
    dt_status st = dt_strategy_search(&q, &best);
    free(p.keys), free(p.costs);
    DT_CHECK(st);
    dt_op_choice c = {.ninputs = ninputs,
                      .mesh_ndim = mesh_ndim,
                      .nchanged = best.changed,
                      .out_dtype = best.spec.dtype,
                      .out_ndim = best.spec.ndim,
                      .cost_us = best.cost_us};
    size_t row = sizeof(dt_placement) * (size_t)mesh_ndim;
    for (int i = 0; i < ninputs; i++) {
        if (!inputs[i]) { /* absent: nothing moves (R, whatever the row said) */
            for (int m = 0; m < mesh_ndim; m++)
                c.inputs[i][m] = dt_replicate();
            continue;
        }
        memcpy(c.inputs[i], best.in[i], row);
        for (int m = 0; m < mesh_ndim; m++)
            c.changed[i] |= !dt_placement_equal(best.in[i][m], have[i][m]);
    }
    memcpy(c.output, best.out, row);
    memcpy(c.out_shape, best.spec.shape, sizeof(int64_t) * (size_t)best.spec.ndim);
    *out = c;
    return DT_OK;
}

/* ---- as text ------------------------------------------------------------------------------ */

static void put_spec(dt_text *t, dt_dtype dtype, int ndim, const int64_t *shape,
                     const dt_placement *pl, int mnd) {
    char text[16 * DT_MESH_MAX_NDIM];
    dt_text_put(t, "%s[", dt_dtype_name(dtype));
    for (int d = 0; d < ndim; d++)
        dt_text_put(t, d ? ",%lld" : "%lld", (long long)shape[d]);
    dt_placements_format(pl, mnd, text, sizeof text);
    dt_text_put(t, "] %s", text);
}

/* Input i's plan, every line indented. */
static dt_status put_plan(dt_text *t, int mnd, const int *mesh_shape, const char *const *names,
                          const dt_spec *x, const dt_placement *want, const dt_cost_model *model) {
    dt_plan *plan;
    DT_CHECK(dt_plan_create(mnd, mesh_shape, x->ndim, x->shape, x->dtype, x->placements, want,
                            model, &plan));
    size_t len = 0;
    dt_plan_format(plan, names, NULL, 0, &len);
    char *text = malloc(len);
    dt_status st = text ? dt_plan_format(plan, names, text, len, NULL)
                        : dt_error(DT_ERR_NOMEM, "dt_op_explain: out of memory");
    dt_plan_release(plan);
    for (const char *line = text; st == DT_OK && line && *line;) {
        const char *nl = strchr(line, '\n');
        dt_text_put(t, "    %.*s\n", (int)(nl ? (size_t)(nl - line) : strlen(line)), line);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return st;
}

dt_status dt_op_explain(dt_op op, int mesh_ndim, const int *mesh_shape,
                        const char *const *dim_names, const dt_spec *const *inputs, int ninputs,
                        const dt_op_args *args, const dt_cost_model *model, char *buf, size_t cap,
                        size_t *len_out) {
    DT_ARG(buf != NULL || cap == 0, "dt_op_explain: argument buf is NULL with cap %zu", cap);
    dt_op_choice c;
    DT_CHECK(dt_op_choose(op, mesh_ndim, mesh_shape, inputs, ninputs, args, model, &c));
    dt_text t = {buf, cap, 0};
    char text[16 * DT_MESH_MAX_NDIM];
    dt_text_put(&t, "%s on mesh ", dt_op_name(op));
    for (int m = 0; m < mesh_ndim; m++) {
        if (dim_names)
            dt_text_put(&t, "%s%s=%d", m ? " x " : "", dim_names[m], mesh_shape[m]);
        else
            dt_text_put(&t, "%s%d", m ? "x" : "", mesh_shape[m]);
    }
    dt_text_put(&t, "\n");
    for (int i = 0; i < ninputs; i++) {
        dt_text_put(&t, "  input %d: ", i);
        if (inputs[i])
            put_spec(&t, inputs[i]->dtype, inputs[i]->ndim, inputs[i]->shape, inputs[i]->placements,
                     mesh_ndim);
        else
            dt_text_put(&t, "none");
        dt_text_put(&t, "\n");
    }
    dt_text_put(&t, "strategy: ");
    for (int i = 0; i < ninputs; i++) {
        dt_placements_format(c.inputs[i], mesh_ndim, text, sizeof text);
        dt_text_put(&t, "%s%s", i ? " | " : "", inputs[i] ? text : "-");
    }
    dt_placements_format(c.output, mesh_ndim, text, sizeof text);
    dt_text_put(&t, " -> %s\n  output: ", text);
    put_spec(&t, c.out_dtype, c.out_ndim, c.out_shape, c.output, mesh_ndim);
    dt_text_put(&t, "\n");
    for (int i = 0; i < ninputs; i++) {
        if (!inputs[i]) continue;
        dt_placements_format(c.inputs[i], mesh_ndim, text, sizeof text);
        if (!c.changed[i]) {
            dt_text_put(&t, "  input %d stays %s\n", i, text);
            continue;
        }
        dt_text_put(&t, "  input %d is redistributed to %s:\n", i, text);
        DT_CHECK(put_plan(&t, mesh_ndim, mesh_shape, dim_names, inputs[i], c.inputs[i], model));
    }
    dt_text_put(&t, "total: %d input%s redistributed, estimated %.1f us\n", c.nchanged,
                c.nchanged == 1 ? "" : "s", c.cost_us);
    return dt_text_finish(&t, "dt_op_explain", len_out);
}
