/* tiny_llama's MoE feed-forward (cfg.experts > 0): each block's SwiGLU MLP becomes a top-k
 * router over E SwiGLU experts (dtensor/moe.h), as torchtitan's Llama-MoE has it. The experts
 * are Shard(0) over the layout's ep dim (dt_parallelize's expert parallelism), the batch is
 * sharded over dp and ep together (ep ranks are extra data-parallel ranks for the dense
 * layers), and over tp the tokens enter replicated (prepare_input), so the tp ranks repeat
 * the expert work. The loss gains TL_MOE_AUX times each block's load-balancing loss. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tiny_llama.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

dt_status tl_moe_declare(dt_params *p, const tl_config *c, const char *name, tl_moe *out) {
    if (c->top_k < 1 || c->top_k > c->experts)
        return dt_error_set(DT_ERR_ARG, "tl_moe_declare: top_k %d is not in [1, %d experts]",
                            c->top_k, c->experts);
    dt_init in = {DT_INIT_NORMAL, 1.0 / sqrt(c->dim)},
            hid = {DT_INIT_NORMAL, 1.0 / sqrt(c->hidden)};
    int64_t E = c->experts, s13[3] = {E, c->dim, c->hidden}, s2[3] = {E, c->hidden, c->dim};
    char sub[128];
    dt_module router, experts;
    TRY(dt_params_module(p, name, DT_MODULE_CONTAINER, &out->self));
    snprintf(sub, sizeof sub, "%s.router", name);
    TRY(dt_nn_linear_create(p, sub, c->dim, c->experts, 0, in, &router)); /* weight (E, dim) */
    out->router = dt_module_param(router, "weight");
    snprintf(sub, sizeof sub, "%s.experts", name);
    TRY(dt_params_module(p, sub, DT_MODULE_EXPERTS, &experts));
    TRY(dt_params_declare(experts, "w1", 3, s13, in, &out->w1));
    TRY(dt_params_declare(experts, "w2", 3, s2, hid, &out->w2));
    return dt_params_declare(experts, "w3", 3, s13, in, &out->w3);
}

dt_status tl_moe_plan(const tl_layout *l, dt_style_rule *rules, int cap, int *n_out) {
    if (l->ep_dim <= 0)
        return dt_error_set(DT_ERR_ARG, "tl_moe_plan: a MoE model needs an ep mesh dim "
                                        "(layout.ep_dim; ep=1 for none)");
    if (l->fsdp_units)
        return dt_error_set(DT_ERR_ARG, "tl_moe_plan: the MoE model takes no FSDP units (its "
                                        "experts are not unit members); use fsdp_units = 0");
    dt_style_rule dense[16];
    int n = 0, nd;
    TRY(tl_plan(l, dense, 16, &nd));
    static const char ff[] = "layers.*.feed_forward";
    int has_ff = 0;
    for (int i = 0; i < nd; i++) {
        if (!strncmp(dense[i].pattern, ff, sizeof ff - 1) && dense[i].pattern[sizeof ff - 1] == '.')
            continue; /* the dense MLP's linears: the MoE has none */
        has_ff |= !strcmp(dense[i].pattern, ff);
        if (n == cap) return dt_error_set(DT_ERR_ARG, "tl_moe_plan: room for %d rules", cap);
        rules[n++] = dense[i];
    }
    if (l->tp_dim >= 0 && !has_ff) { /* the layer takes tokens replicated over tp */
        if (n == cap) return dt_error_set(DT_ERR_ARG, "tl_moe_plan: room for %d rules", cap);
        rules[n++] = (dt_style_rule){ff, dt_style_prepare_input(dt_replicate())};
    }
    *n_out = n;
    return DT_OK;
}

dt_tensor *tl_moe_forward(dt_scope *s, const tl_model *m, const tl_moe *f, dt_tensor *h,
                          dt_tensor **aux) {
    h = dt_module_input(s, f->self, h); /* (B, T, dim): S(0) over dp and ep, R over tp */
    dt_tensor *rw = dt_params_use(s, m->params, f->router);
    dt_tensor *w1 = dt_params_use(s, m->params, f->w1), *w2 = dt_params_use(s, m->params, f->w2),
              *w3 = dt_params_use(s, m->params, f->w3);
    if (!dt_scope_ok(s)) return NULL;
    dt_moe_opts o = {.top_k = m->cfg.top_k, .score = DT_MOE_SOFTMAX};
    dt_tensor *y, *a;
    dt_status st = dt_moe_forward(h, rw, w1, w2, w3, m->layout.ep_dim - 1, &o, &y, &a);
    if (st != DT_OK) return dt_scope_fail(s, st);
    y = dt_scope_adopt(s, y), a = dt_scope_adopt(s, a);
    a = DT_DO(s, dt_mul_scalar, a, TL_MOE_AUX);
    if (aux) *aux = *aux ? DT_DO(s, dt_add, *aux, a) : a;
    return dt_module_output(s, f->self, y);
}
