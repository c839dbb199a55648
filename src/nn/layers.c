/* The layer helpers of dtensor/nn.h: declaration (modules and parameters in the registry) and
 * forwards written in a scope. Weights come from dt_params_use only; styles act through
 * dt_module_input / dt_module_output. */
#include <stdio.h>
#include <string.h>

#include "comm/flight.h"
#include "core/check.h"
#include "dtensor/context.h"
#include "dtensor/float8.h"
#include "dtensor/nn.h"
#include "nn/params_impl.h"

/* "<prefix>.<name>" into buf */
static const char *child(char *buf, size_t cap, const char *prefix, const char *name) {
    snprintf(buf, cap, "%s.%s", prefix, name);
    return buf;
}

dt_status dt_nn_linear_create(dt_params *params, const char *name, int64_t in, int64_t out,
                              int bias, dt_init init, dt_module *module_out) {
    DT_ARG(in > 0 && out > 0, "dt_nn_linear_create: \"%s\": in %lld, out %lld", name ? name : "",
           (long long)in, (long long)out);
    DT_ARG_NOT_NULL(module_out);
    dt_module m;
    DT_CHECK(dt_params_module(params, name, DT_MODULE_LINEAR, &m));
    int64_t w[2] = {out, in};
    DT_CHECK(dt_params_declare(m, "weight", 2, w, init, NULL));
    if (bias) DT_CHECK(dt_params_declare(m, "bias", 1, &out, (dt_init){DT_INIT_ZEROS, 0}, NULL));
    *module_out = m;
    return DT_OK;
}

/* The module's parameter local, fetched for computing; NULL (scope failed) when missing. */
static dt_tensor *use(dt_scope *s, dt_module m, const char *local) {
    int i = dt_module_param(m, local);
    if (i < 0) return NULL;
    return dt_params_use(s, m.params, i);
}

/* 1 when the scope is fine and m is a module of kind; else 0 (the failure recorded). */
static int enter(dt_scope *s, const char *fn, dt_module m, int kind) {
    if (!dt_scope_ok(s)) return 0;
    dt_status st = dt_module_check(fn, m, kind);
    if (st != DT_OK) dt_scope_fail(s, st);
    return st == DT_OK;
}

dt_tensor *dt_nn_linear_forward(dt_scope *scope, dt_module module, dt_tensor *x) {
    if (!enter(scope, __func__, module, DT_MODULE_LINEAR)) return NULL;
    x = dt_module_input(scope, module, x);
    dt_tensor *w = use(scope, module, "weight");
    dt_tensor *b = dt_module_param(module, "bias") >= 0 ? use(scope, module, "bias") : NULL;
    dt_tensor *y = module.params->modules[module.index].float8 /* (..., in) -> (..., out) */
                       ? DT_DO(scope, dt_linear_float8, x, w, b)
                       : DT_DO(scope, dt_linear, x, w, b);
    return dt_module_output(scope, module, y);
}

dt_status dt_nn_embedding_create(dt_params *params, const char *name, int64_t num, int64_t dim,
                                 dt_init init, dt_module *module_out) {
    DT_ARG(num > 0 && dim > 0, "dt_nn_embedding_create: \"%s\": num %lld, dim %lld",
           name ? name : "", (long long)num, (long long)dim);
    DT_ARG_NOT_NULL(module_out);
    dt_module m;
    DT_CHECK(dt_params_module(params, name, DT_MODULE_EMBEDDING, &m));
    int64_t w[2] = {num, dim};
    DT_CHECK(dt_params_declare(m, "weight", 2, w, init, NULL));
    *module_out = m;
    return DT_OK;
}

dt_tensor *dt_nn_embedding_forward(dt_scope *scope, dt_module module, dt_tensor *tokens) {
    if (!enter(scope, __func__, module, DT_MODULE_EMBEDDING)) return NULL;
    tokens = dt_module_input(scope, module, tokens);
    dt_tensor *y = DT_DO(scope, dt_embedding, use(scope, module, "weight"), tokens);
    return dt_module_output(scope, module, y);
}

dt_status dt_nn_rms_norm_create(dt_params *params, const char *name, int64_t dim, double eps,
                                dt_module *module_out) {
    DT_ARG(dim > 0 && eps > 0, "dt_nn_rms_norm_create: \"%s\": dim %lld, eps %g", name ? name : "",
           (long long)dim, eps);
    DT_ARG_NOT_NULL(module_out);
    dt_module m;
    DT_CHECK(dt_params_module(params, name, DT_MODULE_NORM, &m));
    DT_CHECK(dt_params_declare(m, "weight", 1, &dim, (dt_init){DT_INIT_ONES, 0}, NULL));
    params->modules[m.index].norm_eps = eps;
    *module_out = m;
    return DT_OK;
}

dt_tensor *dt_nn_rms_norm_forward(dt_scope *scope, dt_module module, dt_tensor *x) {
    if (!enter(scope, __func__, module, DT_MODULE_NORM)) return NULL;
    double eps = module.params->modules[module.index].norm_eps;
    x = dt_module_input(scope, module, x);
    dt_tensor *y = DT_DO(scope, dt_rms_norm, x, use(scope, module, "weight"), eps);
    return dt_module_output(scope, module, y);
}

dt_status dt_nn_attention_create(dt_params *params, const char *name, int64_t dim, int64_t heads,
                                 int64_t kv_heads, dt_init init, dt_init out_init,
                                 dt_nn_attention *out) {
    DT_ARG(name && heads > 0 && kv_heads > 0 && dim % heads == 0 && heads % kv_heads == 0 &&
               (dim / heads) % 2 == 0,
           "dt_nn_attention_create: \"%s\": dim %lld, heads %lld, kv_heads %lld (heads must "
           "divide dim into an even head size, kv_heads divide heads)",
           name ? name : "", (long long)dim, (long long)heads, (long long)kv_heads);
    DT_ARG_NOT_NULL(out);
    dt_nn_attention a = {
        .heads = heads, .kv_heads = kv_heads, .head_dim = dim / heads, .cp_dim = -1};
    char buf[256];
    DT_CHECK(dt_params_module(params, name, DT_MODULE_CONTAINER, &a.self));
    int64_t q = heads * a.head_dim, kv = kv_heads * a.head_dim;
    DT_CHECK(
        dt_nn_linear_create(params, child(buf, sizeof buf, name, "wq"), dim, q, 0, init, &a.wq));
    DT_CHECK(
        dt_nn_linear_create(params, child(buf, sizeof buf, name, "wk"), dim, kv, 0, init, &a.wk));
    DT_CHECK(
        dt_nn_linear_create(params, child(buf, sizeof buf, name, "wv"), dim, kv, 0, init, &a.wv));
    DT_CHECK(dt_nn_linear_create(params, child(buf, sizeof buf, name, "wo"), q, dim, 0, out_init,
                                 &a.wo));
    *out = a;
    return DT_OK;
}

/* (B, T, h * hd) -> (B, h, T, hd), rotated by the rope tables when cos is set */
static dt_tensor *heads_first(dt_scope *s, dt_tensor *x, int64_t B, int64_t T, int64_t h,
                              int64_t hd, dt_tensor *cos, dt_tensor *sin) {
    int64_t split[4] = {B, T, h, hd};
    dt_tensor *x4 = DT_DO(s, dt_view, x, 4, split);
    if (cos) x4 = DT_DO(s, dt_rope, x4, cos, sin);
    return DT_DO(s, dt_transpose, x4, 1, 2);
}

dt_tensor *dt_nn_attention_forward(dt_scope *scope, const dt_nn_attention *attention, dt_tensor *x,
                                   dt_tensor *cos, dt_tensor *sin) {
    if (!dt_scope_ok(scope)) return NULL;
    const dt_nn_attention *a = attention;
    dt_tensor_info info;
    dt_status st = a ? dt_tensor_info_get(x, &info)
                     : dt_error(DT_ERR_ARG, "dt_nn_attention_forward: argument attention is NULL");
    if (st == DT_OK && info.ndim != 3)
        st = dt_error(DT_ERR_SHAPE, "dt_nn_attention_forward: x has %d dims, want (B, T, dim)",
                      info.ndim);
    if (st != DT_OK) return dt_scope_fail(scope, st);
    int64_t B = info.shape[0], T = info.shape[1], merged[3] = {B, T, a->heads * a->head_dim};
    x = dt_module_input(scope, a->self, x);
    dt_tensor *q = heads_first(scope, dt_nn_linear_forward(scope, a->wq, x), B, T, a->heads,
                               a->head_dim, cos, sin);
    dt_tensor *k = heads_first(scope, dt_nn_linear_forward(scope, a->wk, x), B, T, a->kv_heads,
                               a->head_dim, cos, sin);
    dt_tensor *v = heads_first(scope, dt_nn_linear_forward(scope, a->wv, x), B, T, a->kv_heads,
                               a->head_dim, NULL, NULL);
    dt_comm_module_tls = a->self.params->modules[a->self.index].name; /* the ring's module */
    dt_tensor *o = a->cp_dim >= 0 /* (B, heads, T, hd) */
                       ? DT_DO(scope, dt_ring_sdpa, q, k, v, a->cp_dim, 1, 1)
                       : DT_DO(scope, dt_sdpa, q, k, v, 1);
    o = DT_DO(scope, dt_transpose, o, 1, 2);
    o = DT_DO(scope, dt_view, o, 3, merged);
    return dt_module_output(scope, a->self, dt_nn_linear_forward(scope, a->wo, o));
}

dt_status dt_nn_mlp_create(dt_params *params, const char *name, int64_t dim, int64_t hidden,
                           dt_init init, dt_init out_init, dt_nn_mlp *out) {
    DT_ARG(name && dim > 0 && hidden > 0, "dt_nn_mlp_create: \"%s\": dim %lld, hidden %lld",
           name ? name : "", (long long)dim, (long long)hidden);
    DT_ARG_NOT_NULL(out);
    dt_nn_mlp f;
    char buf[256];
    DT_CHECK(dt_params_module(params, name, DT_MODULE_CONTAINER, &f.self));
    DT_CHECK(dt_nn_linear_create(params, child(buf, sizeof buf, name, "w1"), dim, hidden, 0, init,
                                 &f.w1));
    DT_CHECK(dt_nn_linear_create(params, child(buf, sizeof buf, name, "w2"), hidden, dim, 0,
                                 out_init, &f.w2));
    DT_CHECK(dt_nn_linear_create(params, child(buf, sizeof buf, name, "w3"), dim, hidden, 0, init,
                                 &f.w3));
    *out = f;
    return DT_OK;
}

dt_tensor *dt_nn_mlp_forward(dt_scope *scope, const dt_nn_mlp *mlp, dt_tensor *x) {
    if (!dt_scope_ok(scope)) return NULL;
    if (!mlp) {
        dt_error(DT_ERR_ARG, "dt_nn_mlp_forward: argument mlp is NULL");
        return dt_scope_fail(scope, DT_ERR_ARG);
    }
    x = dt_module_input(scope, mlp->self, x);
    dt_tensor *gate = dt_nn_linear_forward(scope, mlp->w1, x);
    dt_tensor *up = dt_nn_linear_forward(scope, mlp->w3, x);
    dt_tensor *h = DT_DO(scope, dt_swiglu, gate, up);
    return dt_module_output(scope, mlp->self, dt_nn_linear_forward(scope, mlp->w2, h));
}
