/* The model of tiny_llama.h. */
#include "tiny_llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

dt_status tl_plan(const tl_layout *l, dt_style_rule *rules, int cap, int *n_out) {
    if (l->tp_dim < 0) return *n_out = 0, DT_OK;
    int sp = l->sequence_parallel;
    dt_placement seq = dt_shard(1);
    dt_style_rule all[] = {
        {"tok_embeddings", sp ? dt_style_rowwise_to(seq) : dt_style_rowwise()},
        {"layers.*.attention.wq", dt_style_colwise()},
        {"layers.*.attention.wk", dt_style_colwise()},
        {"layers.*.attention.wv", dt_style_colwise()},
        {"layers.*.attention.wo", sp ? dt_style_rowwise_to(seq) : dt_style_rowwise()},
        {"layers.*.feed_forward.w1", dt_style_colwise()},
        {"layers.*.feed_forward.w3", dt_style_colwise()},
        {"layers.*.feed_forward.w2", sp ? dt_style_rowwise_to(seq) : dt_style_rowwise()},
        {"output",
         l->loss_parallel ? dt_style_loss_parallel() : dt_style_colwise_to(dt_replicate())},
        /* sequence parallel only: */
        {"layers.*.attention_norm", dt_style_sequence_parallel()},
        {"layers.*.ffn_norm", dt_style_sequence_parallel()},
        {"norm", dt_style_sequence_parallel()},
        /* gather the sequence once for q, k and v (not once per projection) */
        {"layers.*.attention", dt_style_prepare_input(dt_replicate())},
        {"layers.*.feed_forward", dt_style_prepare_input(dt_replicate())},
    };
    int n = sp ? (int)(sizeof all / sizeof all[0]) : 9;
    if (n > cap) return dt_error_set(DT_ERR_ARG, "tl_plan: %d rules, room for %d", n, cap);
    for (int i = 0; i < n; i++)
        rules[i] = all[i];
    *n_out = n;
    return DT_OK;
}

static dt_status declare(tl_model *m) {
    const tl_config *c = &m->cfg;
    dt_params *p = m->params;
    /* std 1/sqrt(fan_in) for projections, 1 for the embedding */
    dt_init emb = {DT_INIT_NORMAL, 1.0}, in = {DT_INIT_NORMAL, 1.0 / sqrt(c->dim)},
            hid = {DT_INIT_NORMAL, 1.0 / sqrt(c->hidden)};
    TRY(dt_params_begin_group(p, "tok_embeddings"));
    TRY(dt_nn_embedding_create(p, "tok_embeddings", c->vocab, c->dim, emb, &m->tok_embeddings));
    for (int i = 0; i < c->layers; i++) {
        char name[64], sub[96];
        tl_block *b = &m->layers[i];
        snprintf(name, sizeof name, "layers.%d", i);
        TRY(dt_params_begin_group(p, name));
        snprintf(sub, sizeof sub, "%s.attention_norm", name);
        TRY(dt_nn_rms_norm_create(p, sub, c->dim, 1e-5, &b->attention_norm));
        snprintf(sub, sizeof sub, "%s.attention", name);
        TRY(dt_nn_attention_create(p, sub, c->dim, c->heads, c->kv_heads, in, in, &b->attention));
        snprintf(sub, sizeof sub, "%s.ffn_norm", name);
        TRY(dt_nn_rms_norm_create(p, sub, c->dim, 1e-5, &b->ffn_norm));
        snprintf(sub, sizeof sub, "%s.feed_forward", name);
        if (c->experts > 0)
            TRY(tl_moe_declare(p, c, sub, &b->moe));
        else
            TRY(dt_nn_mlp_create(p, sub, c->dim, c->hidden, in, hid, &b->feed_forward));
    }
    TRY(dt_params_begin_group(p, "output"));
    TRY(dt_nn_rms_norm_create(p, "norm", c->dim, 1e-5, &m->norm));
    return dt_nn_linear_create(p, "output", c->dim, c->vocab, 0, in, &m->output);
}

dt_status tl_model_init(tl_model *m, dt_mesh *mesh, const tl_config *cfg, const tl_layout *layout,
                        uint64_t seed) {
    *m = (tl_model){.cfg = *cfg, .layout = *layout, .mesh = mesh};
    m->layers = calloc((size_t)cfg->layers, sizeof *m->layers);
    if (!m->layers) return dt_error_set(DT_ERR_NOMEM, "tl_model_init: out of memory");
    dt_style_rule plan[16];
    dt_parallelize_options o = {.tp_dim = layout->tp_dim,
                                .plan = plan,
                                .dp_dim = layout->dp_dim,
                                .dp_mode = layout->fsdp ? DT_DP_SHARD : DT_DP_REPLICATE,
                                .ep = layout->ep_dim > 0,
                                .ep_dim = layout->ep_dim - 1};
    dt_generator gen = dt_generator_make(seed);
    int mnd = dt_mesh_ndim(mesh);
    dt_placement rep[DT_MESH_MAX_NDIM];
    for (int d = 0; d < mnd; d++)
        rep[d] = dt_replicate();
    dt_status st = dt_params_create(mesh, DT_F32, &m->params);
    if (st == DT_OK) st = declare(m);
    if (st == DT_OK) st = (cfg->experts > 0 ? tl_moe_plan : tl_plan)(layout, plan, 16, &o.nplan);
    if (st == DT_OK) st = dt_parallelize(m->params, &o);
    if (st == DT_OK) st = dt_params_materialize(m->params, &gen);
    if (st == DT_OK && layout->fsdp && layout->fsdp_units && layout->dp_dim >= 0)
        st = tl_fsdp_attach(m);
    if (st == DT_OK)
        st = dt_rope_tables(mesh, DT_F32, cfg->seq, cfg->dim / cfg->heads, 10000.0, mnd, rep,
                            &m->cos, &m->sin);
    if (st != DT_OK) tl_model_free(m);
    return st;
}

void tl_model_free(tl_model *m) {
    tl_fsdp_detach(m);
    dt_params_destroy(m->params);
    dt_tensor_release(m->cos), dt_tensor_release(m->sin);
    free(m->layers);
    m->params = NULL, m->cos = m->sin = NULL, m->layers = NULL;
}

dt_status tl_batch(const tl_model *m, const unsigned char *text, size_t n, int step,
                   dt_tensor **tokens, dt_tensor **targets) {
    const tl_config *c = &m->cfg;
    int64_t count = (int64_t)c->batch * c->seq, shape[2] = {c->batch, c->seq};
    if (text && n <= (size_t)c->seq + 1)
        return dt_error_set(DT_ERR_ARG, "tl_batch: %zu bytes of text, need more than %d", n,
                            c->seq + 1);
    int64_t *buf = malloc(sizeof *buf * (size_t)(2 * count));
    if (!buf) return dt_error_set(DT_ERR_NOMEM, "tl_batch: out of memory");
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
    for (int b = 0; b < c->batch; b++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t at = text ? (size_t)(x % (n - (size_t)c->seq - 1)) : 0;
        int64_t prev = 0;
        for (int t = 0; t <= c->seq; t++) {
            int64_t tok;
            if (text) {
                tok = text[at + (size_t)t] % c->vocab;
            } else { /* a learnable rule: mostly the previous token + 1, sometimes random */
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                tok = x % 4 ? (prev + 1) % c->vocab : (int64_t)(x >> 8) % c->vocab;
            }
            if (t < c->seq) buf[b * c->seq + t] = tok;
            if (t > 0) buf[count + b * c->seq + t - 1] = tok;
            prev = tok;
        }
    }
    int mnd = dt_mesh_ndim(m->mesh);
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int d = 0; d < mnd; d++)
        pl[d] = dt_replicate();
    if (m->layout.dp_dim >= 0) pl[m->layout.dp_dim] = dt_shard(0);
    if (m->layout.dp_replicate_dim > 0) pl[m->layout.dp_replicate_dim - 1] = dt_shard(0);
    if (m->layout.ep_dim > 0) pl[m->layout.ep_dim - 1] = dt_shard(0);
    dt_status st =
        dt_tensor_distribute(m->mesh, buf, DT_I64, 2, shape, mnd, pl, DT_ALL_RANKS, tokens);
    if (st == DT_OK) {
        st = dt_tensor_distribute(m->mesh, buf + count, DT_I64, 2, shape, mnd, pl, DT_ALL_RANKS,
                                  targets);
        if (st != DT_OK) dt_tensor_release(*tokens);
    }
    free(buf);
    return st;
}

/* One block, as llm.c and torchtitan write it: x + attention(norm(x)), then + mlp(norm(x)). */
static dt_tensor *block(dt_scope *s, const tl_model *m, const tl_block *b, dt_tensor *x,
                        dt_tensor **aux) {
    dt_tensor *h = dt_nn_rms_norm_forward(s, b->attention_norm, x);
    x = DT_DO(s, dt_add, x, dt_nn_attention_forward(s, &b->attention, h, m->cos, m->sin));
    h = dt_nn_rms_norm_forward(s, b->ffn_norm, x);
    return DT_DO(s, dt_add, x,
                 m->cfg.experts > 0 ? tl_moe_forward(s, m, &b->moe, h, aux)
                                    : dt_nn_mlp_forward(s, &b->feed_forward, h));
}

dt_status tl_loss(const tl_model *m, dt_tensor *tokens, dt_tensor *targets, dt_tensor **out) {
    const tl_config *c = &m->cfg;
    int64_t rows[2] = {(int64_t)c->batch * c->seq, c->vocab}, flat[1] = {rows[0]};
    dt_scope *s;
    TRY(dt_scope_create(&s));
    dt_tensor *x = dt_nn_embedding_forward(s, m->tok_embeddings, tokens); /* (B, T, dim) */
    dt_ctx *ctx = dt_mesh_ctx(m->mesh);
    dt_tensor *aux = NULL; /* MoE: the blocks' load-balancing losses, scaled */
    for (int i = 0; i < c->layers; i++) {
        /* activation checkpointing: a region around each block keeps what the policy keeps */
        dt_ac_region *r = NULL;
        int ac = m->layout.ac != DT_AC_NONE && dt_grad_enabled(ctx) && dt_scope_ok(s);
        if (ac) dt_scope_fail(s, dt_ac_begin(ctx, m->layout.ac, &r));
        x = block(s, m, &m->layers[i], x, &aux);
        if (r) dt_scope_fail(s, dt_ac_end(r, x ? 1 : 0, &x));
    }
    x = dt_nn_rms_norm_forward(s, m->norm, x);
    dt_tensor *logits = dt_nn_linear_forward(s, m->output, x); /* (B, T, vocab) */
    dt_tensor *lg = DT_DO(s, dt_view, logits, 2, rows);
    dt_tensor *tg = DT_DO(s, dt_view, targets, 1, flat);
    dt_tensor *loss = DT_DO(s, dt_cross_entropy, lg, tg, DT_REDUCTION_MEAN);
    if (aux) loss = DT_DO(s, dt_add, loss, aux);
    dt_scope_fail(s, tl_fsdp_end_forward(m));
    return dt_scope_end(s, loss, out);
}
