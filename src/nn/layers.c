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

/* ---- async tensor parallelism (dtensor/async_tp.h) ----------------------------------------- */

/* Whether x is an activation async TP can take on params' tp dim: (B, T, in), f32 or f64 on
 * the CPU, with tp's placement want and every other mesh dim replicating or sharding the
 * batch. */
static int async_fits(dt_scope *s, const dt_params *p, dt_tensor *x, dt_placement want) {
    dt_tensor_info info;
    if (!dt_scope_ok(s) || p->async_tp == DT_ASYNC_TP_OFF || p->tp_dim < 0 ||
        dt_tensor_info_get(x, &info) != DT_OK || info.ndim != 3 ||
        info.device.kind != DT_DEVICE_CPU || (info.dtype != DT_F32 && info.dtype != DT_F64))
        return 0;
    for (int m = 0; m < info.mesh_ndim; m++) {
        dt_placement q = info.placements[m];
        if (m == p->tp_dim ? !dt_placement_equal(q, want)
                           : !(q.kind == DT_PLACEMENT_REPLICATE ||
                               (q.kind == DT_PLACEMENT_SHARD && q.dim == 0)))
            return 0;
    }
    return 1;
}

/* A bias-free linear whose style is kind (for rowwise: with its output going to Shard(1)). */
static int async_style(dt_module m, dt_style_kind kind) {
    const module_entry *e = &m.params->modules[m.index];
    if (e->kind != DT_MODULE_LINEAR || !e->has_style || e->style.kind != kind ||
        dt_module_param(m, "bias") >= 0 || e->float8 || e->bf16) /* these: the synchronous form */
        return 0;
    return kind == DT_STYLE_COLWISE ||
           (e->style.has_output && dt_placement_equal(e->style.output, dt_shard(1)));
}

/* outs[i] = linear n[i](x) for colwise linears fed from one sequence gather, when async TP
 * takes x (Shard(1) over tp) and container (nullable) would only have replicated it: returns
 * 1 (outs NULL once the scope failed). 0: the caller runs the synchronous form. */
static int async_colwise(dt_scope *s, dt_module container, int has_container, const dt_module *mods,
                         int n, dt_tensor *x, dt_tensor **outs) {
    const dt_params *p = mods[0].params;
    if (!async_fits(s, p, x, dt_shard(1))) return 0;
    if (has_container) {
        const module_entry *c = &p->modules[container.index];
        if (c->has_style && c->style.has_input &&
            !dt_placement_equal(c->style.input, dt_replicate()))
            return 0;
    }
    for (int i = 0; i < n; i++)
        if (!async_style(mods[i], DT_STYLE_COLWISE)) return 0;
    dt_tensor *w[3], *y[3] = {0};
    for (int i = 0; i < n; i++)
        w[i] = use(s, mods[i], "weight");
    dt_status st =
        dt_scope_ok(s) ? dt_all_gather_linear(x, n, w, p->tp_dim, p->async_tp, y) : DT_OK;
    if (st != DT_OK) dt_scope_fail(s, st);
    for (int i = 0; i < n; i++) {
        dt_tensor *kept = dt_scope_adopt(s, y[i]);
        if (!kept) dt_tensor_release(y[i]);
        outs[i] = dt_module_output(s, mods[i], kept);
    }
    return 1;
}

dt_tensor *dt_nn_linear_forward(dt_scope *scope, dt_module module, dt_tensor *x) {
    if (!enter(scope, __func__, module, DT_MODULE_LINEAR)) return NULL;
    dt_tensor *y;
    if (async_colwise(scope, module, 0, &module, 1, x, &y)) return y;
    x = dt_module_input(scope, module, x);
    if (async_style(module, DT_STYLE_ROWWISE) && async_fits(scope, module.params, x, dt_shard(2))) {
        const dt_params *p = module.params;
        y = DT_DO(scope, dt_linear_reduce_scatter, x, use(scope, module, "weight"), p->tp_dim,
                  p->async_tp); /* (B, T, in / tp) -> (B, T / tp, out) */
        return dt_module_output(scope, module, y);
    }
    dt_tensor *w = use(scope, module, "weight");
    dt_tensor *b = dt_module_param(module, "bias") >= 0 ? use(scope, module, "bias") : NULL;
    const module_entry *e = &module.params->modules[module.index];
    y = e->float8 ? DT_DO(scope, dt_linear_float8, x, w, b) /* (..., in) -> (..., out) */
        : e->bf16 ? DT_DO(scope, dt_linear_bf16, x, w, b)
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

dt_tensor *dt_nn_rms_norm_residual_forward(dt_scope *scope, dt_module module, dt_tensor *x,
                                           dt_tensor *residual, dt_tensor **sum) {
    *sum = NULL;
    if (!enter(scope, __func__, module, DT_MODULE_NORM)) return NULL;
    double eps = module.params->modules[module.index].norm_eps;
    x = dt_module_input(scope, module, x);
    residual = dt_module_input(scope, module, residual);
    dt_tensor *w = use(scope, module, "weight"), *y = NULL, *s = NULL;
    if (!dt_scope_ok(scope)) return NULL;
    dt_status st = dt_rms_norm_residual(x, residual, w, eps, &y, &s);
    if (st != DT_OK) return dt_scope_fail(scope, st);
    *sum = dt_scope_adopt(scope, s);
    return dt_module_output(scope, module, dt_scope_adopt(scope, y));
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

/* (B, T, h * hd) -> (B, T, h, hd), rotated by the rope tables when cos is set; heads_first
 * also -> (B, h, T, hd) (a copy: the ring's layout; plain attention reads (B, T, h, hd)). */
static dt_tensor *split_heads(dt_scope *s, dt_tensor *x, int64_t B, int64_t T, int64_t h,
                              int64_t hd, dt_tensor *cos, dt_tensor *sin, int heads_first) {
    int64_t split[4] = {B, T, h, hd};
    dt_tensor *x4 = DT_DO(s, dt_view, x, 4, split);
    if (cos) x4 = DT_DO(s, dt_rope_, x4, cos, sin); /* x4 is the view's own copy */
    return heads_first ? DT_DO(s, dt_transpose, x4, 1, 2) : x4;
}

/* x (B, T, h * hd) made Replicate on the mesh dims that split its columns inside a head (more
 * ranks than kv heads: tp=4 over 2 kv heads), so that it views as (B, T, h, hd) whole: one
 * all-gather, where the view itself would move it to batch shards and attention back. Where
 * the columns split into whole heads, x as it is. */
static dt_tensor *whole_heads(dt_scope *s, dt_tensor *x, int64_t hd) {
    dt_tensor_info info;
    if (!dt_scope_ok(s)) return NULL;
    dt_status st = dt_tensor_info_get(x, &info);
    if (st != DT_OK) return dt_scope_fail(s, st);
    int last = info.ndim - 1, ranks = 1;
    for (int m = 0; m < info.mesh_ndim; m++)
        if (info.placements[m].kind == DT_PLACEMENT_SHARD && info.placements[m].dim == last)
            ranks *= dt_mesh_dim_size(info.mesh, m);
    int64_t cols = info.shape[last], chunk = (cols + ranks - 1) / ranks;
    if (ranks == 1 || chunk % hd == 0) return x;
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int m = 0; m < info.mesh_ndim; m++) {
        int split = info.placements[m].kind == DT_PLACEMENT_SHARD && info.placements[m].dim == last;
        pl[m] = split ? dt_replicate() : info.placements[m];
    }
    return DT_DO(s, dt_tensor_redistribute, x, info.mesh_ndim, pl);
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
    dt_module proj[3] = {a->wq, a->wk, a->wv};
    dt_tensor *qkv[3];
    if (!async_colwise(scope, a->self, 1, proj, 3, x, qkv)) { /* else one gather for the three */
        x = dt_module_input(scope, a->self, x);
        for (int i = 0; i < 3; i++)
            qkv[i] = dt_nn_linear_forward(scope, proj[i], x);
    }
    int ring = a->cp_dim >= 0;
    dt_comm_module_tls = a->self.params->modules[a->self.index].name; /* gathers', the ring's */
    /* k and v split inside a head: whole on those mesh dims (attention's q-heads rule) */
    for (int i = 1; i < 3 && !ring; i++)
        qkv[i] = whole_heads(scope, qkv[i], a->head_dim);
    dt_tensor *q = split_heads(scope, qkv[0], B, T, a->heads, a->head_dim, cos, sin, ring);
    dt_tensor *k = split_heads(scope, qkv[1], B, T, a->kv_heads, a->head_dim, cos, sin, ring);
    dt_tensor *v = split_heads(scope, qkv[2], B, T, a->kv_heads, a->head_dim, NULL, NULL, ring);
    dt_tensor *o;
    if (ring) { /* (B, heads, T, hd) -> (B, T, heads, hd) */
        o = DT_DO(scope, dt_ring_sdpa, q, k, v, a->cp_dim, 1, 1);
        o = DT_DO(scope, dt_transpose, o, 1, 2);
    } else { /* (B, T, heads, hd): no transposes either way, nor in backward */
        o = DT_DO(scope, dt_sdpa_seq_first, q, k, v, 1);
    }
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
    dt_module in[2] = {mlp->w1, mlp->w3};
    dt_tensor *gate_up[2];
    if (!async_colwise(scope, mlp->self, 1, in, 2, x, gate_up)) { /* else one gather for both */
        x = dt_module_input(scope, mlp->self, x);
        gate_up[0] = dt_nn_linear_forward(scope, mlp->w1, x);
        gate_up[1] = dt_nn_linear_forward(scope, mlp->w3, x);
    }
    dt_tensor *h = DT_DO(scope, dt_swiglu, gate_up[0], gate_up[1]);
    return dt_module_output(scope, mlp->self, dt_nn_linear_forward(scope, mlp->w2, h));
}
