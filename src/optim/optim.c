/* SGD and AdamW over DTensor parameters: the state per parameter (made in the parameter's mesh,
 * placements and device), the checks, and the step, which turns every parameter with a
 * gradient into one dt_optim_item and hands them all to one fused kernel per device
 * (ops/kernels.h optim_step). Local only: parameters and gradients share placements, so no
 * communication is ever needed here; a mismatch is the caller's to fix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "comm/comm_impl.h"
#include "core/check.h"
#include "dtensor/autograd.h"
#include "dtensor/create.h"
#include "dtensor/optim.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/kernels.h"

#define DT_OPTIM_LIVE 0x0971a11eu

typedef struct opt_param {
    dt_tensor *p;        /* retained */
    dt_tensor *state[2]; /* momentum buffer / exp_avg, exp_avg_sq (NULL when unused) */
    dt_tensor *master;   /* f32 copy of a bf16/f16 parameter, or NULL */
    double weight_decay;
    int64_t steps; /* steps this parameter took (torch's state['step']) */
} opt_param;

struct dt_optim {
    unsigned magic;
    dt_optim_hyper h;
    double lr;
    int n;
    opt_param *params;
};

static int is_float(dt_dtype t) {
    return t == DT_F32 || t == DT_F64 || t == DT_BF16 || t == DT_F16;
}

static int is_half(dt_dtype t) { return t == DT_BF16 || t == DT_F16; }

#define DT_OPTIM_ARG(o)                                                                            \
    DT_ARG((o) && (o)->magic == DT_OPTIM_LIVE, "%s: argument optim is NULL or not a live "         \
                                               "optimizer", __func__)

/* The state dtype: f32 under master weights, else the parameter's (torch's zeros_like). */
static dt_dtype state_dtype(const opt_param *q) {
    return q->master ? DT_F32 : q->p->dtype;
}

static dt_status zeros_of(const dt_tensor *p, dt_dtype dtype, dt_tensor **out) {
    return dt_tensor_new(p->mesh, p->device, dtype, p->ndim, p->shape, p->placements, NULL, true,
                         out);
}

static void release_param(opt_param *q) {
    dt_tensor_release(q->state[0]), dt_tensor_release(q->state[1]);
    dt_tensor_release(q->master), dt_tensor_release(q->p);
}

dt_status dt_optim_destroy(dt_optim *optim) {
    if (!optim) return DT_OK;
    DT_OPTIM_ARG(optim);
    for (int k = 0; k < optim->n; k++) release_param(&optim->params[k]);
    free(optim->params);
    optim->magic = 0;
    free(optim);
    return DT_OK;
}

static dt_status check_param(const char *fn, dt_tensor *p, int k, int g, int j) {
    char what[64];
    snprintf(what, sizeof what, "parameter %d (groups[%d].params[%d])", k, g, j);
    DT_CHECK(dt_tensor_check(fn, what, p));
    DT_ARG(dt_ag(p)->requires_grad && !dt_ag(p)->node, "%s: %s is not a leaf that requires grad",
           fn, what);
    if (!is_float(p->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: %s has dtype %s; parameters are floats", fn, what,
                        dt_dtype_name(p->dtype));
    for (int m = 0; m < p->mesh->ndim; m++)
        if (p->placements[m].kind == DT_PLACEMENT_PARTIAL)
            return dt_error(DT_ERR_PLACEMENT, "%s: %s is Partial on mesh dim %d; a parameter "
                                              "holds its value (Replicate or Shard)", fn, what, m);
    return DT_OK;
}

/* Parameter k's state: buffers zeroed in its placements, the master a copy made under no grad
 * (a widening cast of a non-Partial tensor is local). */
static dt_status init_param(opt_param *q, dt_optim_rule rule, double momentum,
                            const dt_param_group *g) {
    int master = g->master_weights;
    if (g->reduce_f32 && is_half(q->p->dtype)) DT_CHECK(dt_tensor_set_grad_dtype(q->p, DT_F32));
    if (master && is_half(q->p->dtype)) {
        dt_ctx *ctx = q->p->mesh->ctx;
        DT_CHECK(dt_no_grad_enter(ctx));
        dt_status st = dt_cast(q->p, DT_F32, &q->master);
        dt_no_grad_exit(ctx);
        DT_CHECK(st);
    }
    int nstate = rule == DT_OPTIM_RULE_ADAMW ? 2 : momentum != 0 ? 1 : 0;
    for (int s = 0; s < nstate; s++) DT_CHECK(zeros_of(q->p, state_dtype(q), &q->state[s]));
    return DT_OK;
}

static dt_status create(const char *fn, const dt_optim_hyper *h, double lr, double wd,
                        const dt_param_group *groups, int ngroups, dt_optim **out) {
    DT_ARG(out != NULL, "%s: argument out is NULL", fn);
    DT_ARG(ngroups >= 0, "%s: argument ngroups = %d is negative", fn, ngroups);
    DT_ARG(groups || ngroups == 0, "%s: argument groups is NULL with ngroups = %d", fn, ngroups);
    int n = 0;
    for (int g = 0; g < ngroups; g++) {
        DT_ARG(groups[g].n >= 0 && (groups[g].params || groups[g].n == 0),
               "%s: groups[%d] has n = %d and params %p", fn, g, groups[g].n,
               (const void *)groups[g].params);
        DT_ARG(!groups[g].reduce_f32 || groups[g].master_weights,
               "%s: groups[%d].reduce_f32 needs master_weights (an f32 gradient updates the f32 "
               "master)", fn, g);
        DT_ARG(!groups[g].weight_decay || *groups[g].weight_decay >= 0,
               "%s: groups[%d].weight_decay = %g is negative", fn, g,
               groups[g].weight_decay ? *groups[g].weight_decay : 0.0);
        for (int j = 0; j < groups[g].n; j++, n++) {
            dt_tensor *p = groups[g].params[j];
            DT_CHECK(check_param(fn, p, n, g, j));
            for (int g2 = 0, k2 = 0; g2 <= g; g2++) /* torch: a parameter in one group only */
                for (int j2 = 0; j2 < (g2 < g ? groups[g2].n : j); j2++, k2++)
                    DT_ARG(groups[g2].params[j2] != p, "%s: parameter %d (groups[%d].params[%d]) "
                                                       "is parameter %d again", fn, n, g, j, k2);
        }
    }
    dt_optim *o = calloc(1, sizeof *o);
    opt_param *qs = calloc((size_t)n + 1, sizeof *qs);
    if (!o || !qs) {
        free(o), free(qs);
        return dt_error(DT_ERR_NOMEM, "%s: out of memory for %d parameters", fn, n);
    }
    *o = (dt_optim){.magic = DT_OPTIM_LIVE, .h = *h, .lr = lr, .n = 0, .params = qs};
    dt_status st = DT_OK;
    for (int g = 0; g < ngroups && st == DT_OK; g++) {
        for (int j = 0; j < groups[g].n && st == DT_OK; j++) {
            opt_param *q = &qs[o->n++];
            q->p = groups[g].params[j];
            dt_tensor_retain(q->p);
            q->weight_decay = groups[g].weight_decay ? *groups[g].weight_decay : wd;
            st = init_param(q, h->rule, h->momentum, &groups[g]);
        }
    }
    if (st != DT_OK) {
        dt_optim_destroy(o);
        return st;
    }
    *out = o;
    return DT_OK;
}

dt_status dt_optim_sgd_create(const dt_sgd_options *options, const dt_param_group *groups,
                              int ngroups, dt_optim **out) {
    const char *fn = "dt_optim_sgd_create";
    DT_ARG(options != NULL, "%s: argument options is NULL", fn);
    const dt_sgd_options *o = options;
    DT_ARG(o->lr >= 0, "%s: options->lr = %g is not a non-negative number", fn, o->lr);
    DT_ARG(o->momentum >= 0, "%s: options->momentum = %g is not a non-negative number", fn,
           o->momentum);
    DT_ARG(o->weight_decay >= 0, "%s: options->weight_decay = %g is not a non-negative number",
           fn, o->weight_decay);
    DT_ARG(isfinite(o->dampening), "%s: options->dampening = %g is not finite", fn, o->dampening);
    DT_ARG(!o->nesterov || (o->momentum > 0 && o->dampening == 0),
           "%s: options->nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening "
           "%g)", fn, o->momentum, o->dampening);
    dt_optim_hyper h = {.rule = DT_OPTIM_RULE_SGD, .momentum = o->momentum,
                        .dampening = o->dampening, .nesterov = o->nesterov != 0};
    return create(fn, &h, o->lr, o->weight_decay, groups, ngroups, out);
}

dt_status dt_optim_adamw_create(const dt_adamw_options *options, const dt_param_group *groups,
                                int ngroups, dt_optim **out) {
    const char *fn = "dt_optim_adamw_create";
    DT_ARG(options != NULL, "%s: argument options is NULL", fn);
    const dt_adamw_options *o = options;
    DT_ARG(o->lr >= 0, "%s: options->lr = %g is not a non-negative number", fn, o->lr);
    DT_ARG(o->beta1 >= 0 && o->beta1 < 1, "%s: options->beta1 = %g is outside [0, 1)", fn,
           o->beta1);
    DT_ARG(o->beta2 >= 0 && o->beta2 < 1, "%s: options->beta2 = %g is outside [0, 1)", fn,
           o->beta2);
    DT_ARG(o->eps >= 0, "%s: options->eps = %g is not a non-negative number", fn, o->eps);
    DT_ARG(o->weight_decay >= 0, "%s: options->weight_decay = %g is not a non-negative number",
           fn, o->weight_decay);
    dt_optim_hyper h = {.rule = DT_OPTIM_RULE_ADAMW, .beta1 = o->beta1, .beta2 = o->beta2,
                        .eps = o->eps};
    return create(fn, &h, o->lr, o->weight_decay, groups, ngroups, out);
}

/* ---- the step ------------------------------------------------------------------------------ */

/* Parameter k's gradient, checked against it; *g_out NULL when it has none. */
static dt_status check_grad(const dt_optim *o, int k, dt_tensor **g_out) {
    const char *fn = "dt_optim_step";
    const opt_param *q = &o->params[k];
    const dt_tensor *p = q->p, *g = dt_ag(p)->grad;
    *g_out = NULL;
    DT_ARG(p->magic == DT_TENSOR_LIVE, "%s: parameter %d was released while the optimizer held "
                                       "it", fn, k);
    if (!g) return DT_OK;
    for (int m = 0; m < p->mesh->ndim; m++) {
        if (dt_placement_equal(g->placements[m], p->placements[m])) continue;
        char gs[128] = "?", ps[128] = "?";
        dt_placements_format(g->placements, p->mesh->ndim, gs, sizeof gs);
        dt_placements_format(p->placements, p->mesh->ndim, ps, sizeof ps);
        return dt_error(DT_ERR_PLACEMENT, "%s: parameter %d's gradient is %s, the parameter %s "
                                          "(mesh dim %d differs); with grad sync off, reduce the "
                                          "gradient to the parameter's placements first", fn, k,
                        gs, ps, m);
    }
    DT_ARG(dt_mesh_equal(g->mesh, p->mesh), "%s: parameter %d's gradient is on another mesh", fn, k);
    DT_ARG(g->ndim == p->ndim && !memcmp(g->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim),
           "%s: parameter %d's gradient has another shape", fn, k);
    if (g->dtype != p->dtype && !(g->dtype == DT_F32 && q->master))
        return dt_error(DT_ERR_DTYPE, "%s: parameter %d is %s, its gradient %s", fn, k,
                        dt_dtype_name(p->dtype), dt_dtype_name(g->dtype));
    if (g->device.kind != p->device.kind || g->device.index != p->device.index)
        return dt_error(DT_ERR_DEVICE, "%s: parameter %d and its gradient live on different "
                                       "devices", fn, k);
    *g_out = (dt_tensor *)g;
    return DT_OK;
}

static dt_optim_item item_of(const dt_optim *o, const opt_param *q, const dt_tensor *g) {
    dt_optim_item it = {
        .param = q->p->data, .grad = g->data, .master = q->master ? q->master->data : NULL,
        .state = {q->state[0] ? q->state[0]->data : NULL, q->state[1] ? q->state[1]->data : NULL},
        .numel = q->p->local_numel, .param_dtype = q->p->dtype, .grad_dtype = g->dtype,
        .state_dtype = state_dtype(q), .lr = o->lr, .weight_decay = q->weight_decay,
        .first = q->steps == 0};
    if (o->h.rule == DT_OPTIM_RULE_ADAMW) { /* t = this step's number, from 1 */
        double t = (double)(q->steps + 1);
        it.step_size = o->lr / (1 - pow(o->h.beta1, t));
        it.bc2_sqrt = sqrt(1 - pow(o->h.beta2, t));
    }
    return it;
}

dt_status dt_optim_step(dt_optim *optim) {
    DT_OPTIM_ARG(optim);
    dt_optim *o = optim;
    dt_optim_item *items = malloc(sizeof *items * ((size_t)o->n + 1));
    bool *took = calloc((size_t)o->n + 1, sizeof *took);
    if (!items || !took) {
        free(items), free(took);
        return dt_error(DT_ERR_NOMEM, "dt_optim_step: out of memory for %d items", o->n);
    }
    dt_status st = DT_OK;
    for (int k = 0; k < o->n && st == DT_OK; k++) { /* every check before any change */
        dt_tensor *g;
        st = check_grad(o, k, &g);
        took[k] = st == DT_OK && g;
    }
    /* One kernel call per device kind over the shards that live there. */
    for (int dev = 0; dev < 2 && st == DT_OK; dev++) {
        int n = 0;
        dt_ctx *ctx = NULL;
        for (int k = 0; k < o->n; k++) {
            const opt_param *q = &o->params[k];
            if (!took[k] || (int)q->p->device.kind != dev || !q->p->local_numel) continue;
            items[n++] = item_of(o, q, dt_ag(q->p)->grad);
            ctx = q->p->mesh->ctx;
        }
        if (!n) continue;
        const dt_kernels *kt = dt_kernels_of((dt_device_kind)dev);
        if (!kt) {
            st = dt_error(DT_ERR_UNSUPPORTED, "dt_optim_step: parameters live on a device this "
                                              "build has no kernels for");
            break;
        }
        dt_ctx_bind(ctx);
        st = kt->optim_step(&o->h, items, n);
    }
    for (int k = 0; k < o->n && st == DT_OK; k++) o->params[k].steps += took[k];
    free(items), free(took);
    return st;
}

dt_status dt_optim_zero_grad(dt_optim *optim) {
    DT_OPTIM_ARG(optim);
    for (int k = 0; k < optim->n; k++) DT_CHECK(dt_tensor_zero_grad(optim->params[k].p));
    return DT_OK;
}

dt_status dt_optim_set_lr(dt_optim *optim, double lr) {
    DT_OPTIM_ARG(optim);
    DT_ARG(lr >= 0, "dt_optim_set_lr: argument lr = %g is not a non-negative number", lr);
    optim->lr = lr;
    return DT_OK;
}

dt_status dt_optim_get_lr(const dt_optim *optim, double *out) {
    DT_OPTIM_ARG(optim);
    DT_ARG(out != NULL, "dt_optim_get_lr: argument out is NULL");
    *out = optim->lr;
    return DT_OK;
}

dt_status dt_optim_param_count(const dt_optim *optim, int *out) {
    DT_OPTIM_ARG(optim);
    DT_ARG(out != NULL, "dt_optim_param_count: argument out is NULL");
    *out = optim->n;
    return DT_OK;
}

dt_status dt_optim_param(const dt_optim *optim, int k, dt_tensor **out) {
    DT_OPTIM_ARG(optim);
    DT_ARG(out != NULL, "dt_optim_param: argument out is NULL");
    DT_ARG(k >= 0 && k < optim->n, "dt_optim_param: argument k = %d is not a parameter (%d of "
                                   "them)", k, optim->n);
    *out = optim->params[k].p;
    return DT_OK;
}

dt_status dt_optim_kind(const dt_optim *optim, const char **out) {
    DT_OPTIM_ARG(optim);
    DT_ARG(out != NULL, "dt_optim_kind: argument out is NULL");
    *out = optim->h.rule == DT_OPTIM_RULE_ADAMW ? "AdamW" : "SGD";
    return DT_OK;
}

dt_status dt_optim_state(const dt_optim *optim, int k, int which, dt_tensor **out) {
    DT_OPTIM_ARG(optim);
    DT_ARG(out != NULL, "dt_optim_state: argument out is NULL");
    DT_ARG(k >= 0 && k < optim->n, "dt_optim_state: argument k = %d is not a parameter (%d of "
                                   "them)", k, optim->n);
    DT_ARG(which >= 0 && which <= 2, "dt_optim_state: argument which = %d is not 0, 1 or 2",
           which);
    const opt_param *q = &optim->params[k];
    *out = which == 2 ? q->master : q->state[which];
    return DT_OK;
}

/* ---- state by name (checkpoints) ----------------------------------------------------------- */

/* The state tensors in order: per parameter, its state slots then its master copy. */
static int state_slot(const dt_optim *o, int i, int *k_out, int *which_out) {
    for (int k = 0; k < o->n; k++) {
        const opt_param *q = &o->params[k];
        dt_tensor *slots[3] = {q->state[0], q->state[1], q->master};
        for (int w = 0; w < 3; w++)
            if (slots[w] && i-- == 0) {
                *k_out = k, *which_out = w;
                return 1;
            }
    }
    return 0;
}

dt_status dt_optim_state_count(const dt_optim *optim, int *out) {
    DT_OPTIM_ARG(optim);
    DT_ARG(out != NULL, "dt_optim_state_count: argument out is NULL");
    int n = 0, k, w;
    while (state_slot(optim, n, &k, &w)) n++;
    *out = n;
    return DT_OK;
}

dt_status dt_optim_state_named(const dt_optim *optim, const char *const *param_names, int i,
                               char *name_out, size_t cap, dt_tensor **out) {
    const char *fn = "dt_optim_state_named";
    DT_OPTIM_ARG(optim);
    DT_ARG(param_names && name_out && out, "%s: param_names, name_out or out is NULL", fn);
    int k, w;
    DT_ARG(i >= 0 && state_slot(optim, i, &k, &w), "%s: argument i = %d is not a state tensor", fn,
           i);
    DT_ARG(param_names[k] != NULL, "%s: param_names[%d] is NULL", fn, k);
    static const char *const sgd[] = {"momentum_buffer", "?", "master"};
    static const char *const adamw[] = {"exp_avg", "exp_avg_sq", "master"};
    const char *suffix = (optim->h.rule == DT_OPTIM_RULE_ADAMW ? adamw : sgd)[w];
    int need = snprintf(name_out, cap, "%s.%s", param_names[k], suffix);
    if (need < 0 || (size_t)need >= cap)
        return dt_error(DT_ERR_SIZE, "%s: \"%s.%s\" needs %d bytes, cap is %zu", fn,
                        param_names[k], suffix, need + 1, cap);
    *out = w == 2 ? optim->params[k].master : optim->params[k].state[w];
    return DT_OK;
}

dt_status dt_optim_steps_get(const dt_optim *optim, int k, int64_t *out) {
    DT_OPTIM_ARG(optim);
    DT_ARG(out != NULL, "dt_optim_steps_get: argument out is NULL");
    DT_ARG(k >= 0 && k < optim->n, "dt_optim_steps_get: argument k = %d is not a parameter (%d "
                                   "of them)", k, optim->n);
    *out = optim->params[k].steps;
    return DT_OK;
}

dt_status dt_optim_steps_set(dt_optim *optim, int k, int64_t steps) {
    DT_OPTIM_ARG(optim);
    DT_ARG(k >= 0 && k < optim->n, "dt_optim_steps_set: argument k = %d is not a parameter (%d "
                                   "of them)", k, optim->n);
    DT_ARG(steps >= 0, "dt_optim_steps_set: argument steps = %lld is negative", (long long)steps);
    optim->params[k].steps = steps;
    return DT_OK;
}
