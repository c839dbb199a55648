/* dt_parallelize: a plan (module name patterns and styles) checked against the registry, then
 * each module's style and each parameter's stored and compute placements recorded. Data
 * only: nothing here communicates or makes tensors. */
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "nn/params_impl.h"

const char *dt_style_name(dt_style_kind kind) {
    switch (kind) {
    case DT_STYLE_COLWISE:
        return "colwise";
    case DT_STYLE_ROWWISE:
        return "rowwise";
    case DT_STYLE_SEQUENCE_PARALLEL:
        return "sequence_parallel";
    case DT_STYLE_PREPARE_INPUT:
        return "prepare_input";
    case DT_STYLE_PREPARE_OUTPUT:
        return "prepare_output";
    }
    return "?";
}

int dt_name_match(const char *pat, const char *s) {
    if (!*pat) return !*s;
    if (*pat == '*') {
        for (const char *e = s; *e && *e != '.'; e++)
            if (dt_name_match(pat + 1, e + 1)) return 1;
        return 0;
    }
    return *pat == *s && dt_name_match(pat + 1, s + 1);
}

static int style_fits(dt_style_kind style, dt_module_kind kind) {
    switch (style) {
    case DT_STYLE_COLWISE:
    case DT_STYLE_ROWWISE:
        return kind == DT_MODULE_LINEAR || kind == DT_MODULE_EMBEDDING;
    case DT_STYLE_SEQUENCE_PARALLEL:
        return kind == DT_MODULE_NORM;
    case DT_STYLE_PREPARE_INPUT:
    case DT_STYLE_PREPARE_OUTPUT:
        return 1;
    }
    return 0;
}

static int layout_ok(dt_placement p) {
    return p.kind == DT_PLACEMENT_REPLICATE || p.kind == DT_PLACEMENT_SHARD;
}

static dt_status check_rule(const dt_params *p, const dt_style_rule *r, int k) {
    DT_ARG(r->pattern && *r->pattern, "dt_parallelize: plan[%d] has no pattern", k);
    const char *sn = dt_style_name(r->style.kind);
    DT_ARG(strcmp(sn, "?"), "dt_parallelize: plan[%d] (\"%s\"): unknown style kind %d", k,
           r->pattern, (int)r->style.kind);
    DT_ARG((!r->style.has_input || layout_ok(r->style.input)) &&
               (!r->style.has_output || layout_ok(r->style.output)),
           "dt_parallelize: plan[%d] (\"%s\"): a layout must be Replicate or Shard", k, r->pattern);
    int hits = 0;
    for (int m = 0; m < p->nmodules; m++) {
        const module_entry *e = &p->modules[m];
        if (!dt_name_match(r->pattern, e->name)) continue;
        hits++;
        DT_ARG(style_fits(r->style.kind, e->kind),
               "dt_parallelize: plan[%d] (\"%s\") gives %s to module \"%s\", which cannot take "
               "it",
               k, r->pattern, sn, e->name);
    }
    DT_ARG(hits, "dt_parallelize: plan[%d]: pattern \"%s\" matches no module", k, r->pattern);
    return DT_OK;
}

/* The tensor dim tp shards parameter e along (-1: none), from its module's style. */
static int tp_shard_dim(const module_entry *m, const param_entry *e, const char *local) {
    if (!m->has_style) return -1;
    int weight = !strcmp(local, "weight");
    if (m->style.kind == DT_STYLE_COLWISE)
        return m->kind == DT_MODULE_EMBEDDING ? 1 : 0; /* bias too: S(0) */
    if (m->style.kind == DT_STYLE_ROWWISE && weight)
        return m->kind == DT_MODULE_EMBEDDING ? 0 : e->ndim - 1;
    return -1;
}

dt_status dt_parallelize(dt_params *params, const dt_parallelize_options *options) {
    DT_ARG_NOT_NULL(params);
    DT_ARG_NOT_NULL(options);
    const dt_parallelize_options *o = options;
    DT_ARG(!params->materialized && !params->parallelized,
           "dt_parallelize: the registry is %s already",
           params->materialized ? "materialized" : "parallelized");
    DT_ARG(!params->units,
           "dt_parallelize: FSDP units are declared already (dt_fully_shard): plan tensor "
           "parallelism first, as torchtitan does");
    int mnd = dt_mesh_ndim(params->mesh);
    DT_ARG(o->tp_dim >= -1 && o->tp_dim < mnd,
           "dt_parallelize: tp_dim %d out of range for a "
           "%d-D mesh",
           o->tp_dim, mnd);
    DT_ARG(o->dp_dim >= -1 && o->dp_dim < mnd,
           "dt_parallelize: dp_dim %d out of range for a "
           "%d-D mesh",
           o->dp_dim, mnd);
    DT_ARG(o->dp_dim < 0 || o->dp_dim != o->tp_dim,
           "dt_parallelize: dp_dim and tp_dim are both "
           "%d",
           o->dp_dim);
    DT_ARG(o->dp_mode == DT_DP_REPLICATE || o->dp_mode == DT_DP_SHARD,
           "dt_parallelize: unknown dp_mode %d", (int)o->dp_mode);
    DT_ARG(!o->ep || (o->ep_dim >= 0 && o->ep_dim < mnd),
           "dt_parallelize: ep_dim %d out of range for a %d-D mesh", o->ep_dim, mnd);
    DT_ARG(!o->ep || (o->ep_dim != o->tp_dim && o->ep_dim != o->dp_dim),
           "dt_parallelize: ep_dim %d is also the %s dim", o->ep_dim,
           o->ep_dim == o->tp_dim ? "tp" : "dp");
    DT_ARG(o->async_tp >= DT_ASYNC_TP_OFF && o->async_tp <= DT_ASYNC_TP_ORDERED,
           "dt_parallelize: unknown async_tp mode %d", (int)o->async_tp);
    DT_ARG(o->nplan >= 0 && (o->nplan == 0 || o->plan), "dt_parallelize: nplan %d, plan %p",
           o->nplan, (const void *)o->plan);
    DT_ARG(o->nplan == 0 || o->tp_dim >= 0, "dt_parallelize: a plan of %d rules needs tp_dim",
           o->nplan);
    for (int k = 0; k < o->nplan; k++)
        DT_CHECK(check_rule(params, &o->plan[k], k));
    for (int m = 0; m < params->nmodules; m++) {
        int first = -1;
        for (int k = 0; k < o->nplan; k++) {
            if (!dt_name_match(o->plan[k].pattern, params->modules[m].name)) continue;
            DT_ARG(first < 0,
                   "dt_parallelize: module \"%s\" is matched by plan[%d] (\"%s\") and "
                   "plan[%d] (\"%s\")",
                   params->modules[m].name, first, o->plan[first].pattern, k, o->plan[k].pattern);
            first = k;
        }
    }
    /* checked: apply */
    for (int m = 0; m < params->nmodules; m++)
        for (int k = 0; k < o->nplan; k++)
            if (dt_name_match(o->plan[k].pattern, params->modules[m].name))
                params->modules[m].has_style = 1, params->modules[m].style = o->plan[k].style;
    for (int i = 0; i < params->nparams; i++) {
        param_entry *e = &params->params[i];
        const module_entry *m = &params->modules[e->module];
        const char *local = e->name + strlen(m->name) + 1;
        int tpd = o->tp_dim >= 0 ? tp_shard_dim(m, e, local) : -1;
        if (tpd >= 0) e->stored[o->tp_dim] = e->compute[o->tp_dim] = dt_shard(tpd);
        /* experts: whole experts per ep rank; FSDP then takes the next dim */
        int epd = o->ep && m->kind == DT_MODULE_EXPERTS ? 0 : -1;
        if (epd >= 0) e->stored[o->ep_dim] = e->compute[o->ep_dim] = dt_shard(epd);
        if (o->dp_dim >= 0 && o->dp_mode == DT_DP_SHARD) {
            int dpd = tpd == 0 || epd == 0 ? (e->ndim > 1 ? 1 : -1) : 0;
            if (dpd >= 0) e->stored[o->dp_dim] = dt_shard(dpd);
        }
    }
    params->tp_dim = o->tp_dim, params->dp_dim = o->dp_dim, params->parallelized = 1;
    params->dp_shard = o->dp_dim >= 0 && o->dp_mode == DT_DP_SHARD;
    params->async_tp = o->tp_dim >= 0 ? o->async_tp : DT_ASYNC_TP_OFF;
    return DT_OK;
}

const dt_style *dt_module_style(dt_module module) {
    if (dt_module_check(__func__, module, -1) != DT_OK) return NULL;
    const module_entry *m = &module.params->modules[module.index];
    return m->has_style ? &m->style : NULL;
}

dt_status dt_params_print(const dt_params *params, FILE *f) {
    DT_ARG_NOT_NULL(params);
    DT_ARG_NOT_NULL(f);
    int mnd = dt_mesh_ndim(params->mesh);
    int64_t total = 0;
    fprintf(f, "  %-3s %-36s %-12s %-16s %-18s %-16s %s\n", "#", "parameter", "shape", "group",
            "style", "stored", "compute");
    for (int i = 0; i < params->nparams; i++) {
        const param_entry *e = &params->params[i];
        const module_entry *m = &params->modules[e->module];
        char shape[32] = "", st[64], cp[64];
        int64_t n = 1;
        for (int d = 0, at = 0; d < e->ndim && at < (int)sizeof shape; d++) {
            at += snprintf(shape + at, sizeof shape - (size_t)at, d ? "x%lld" : "%lld",
                           (long long)e->shape[d]);
            n *= e->shape[d];
        }
        total += n;
        dt_placements_format(e->stored, mnd, st, sizeof st);
        dt_placements_format(e->compute, mnd, cp, sizeof cp);
        fprintf(f, "  %-3d %-36s %-12s %-16s %-18s %-16s %s\n", i, e->name, shape,
                e->group >= 0 ? params->groups[e->group].name : "",
                m->has_style ? dt_style_name(m->style.kind) : "-", st, cp);
    }
    fprintf(f, "  %d parameters, %lld elements, %d groups\n", params->nparams, (long long)total,
            params->ngroups);
    return DT_OK;
}
