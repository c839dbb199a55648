/* The model of tiny_llama.h. */
#include "tiny_llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

void tl_layout_find_dims(const dt_mesh *mesh, tl_layout *l) {
    int d;
    if (dt_mesh_dim_index(mesh, "dp", &l->dp_dim) != DT_OK &&
        dt_mesh_dim_index(mesh, "dp_shard", &l->dp_dim) != DT_OK)
        l->dp_dim = -1;
    if (dt_mesh_dim_index(mesh, "tp", &l->tp_dim) != DT_OK) l->tp_dim = -1;
    l->dp_replicate_dim = dt_mesh_dim_index(mesh, "dp_replicate", &d) == DT_OK ? d + 1 : 0;
    l->cp_dim = dt_mesh_dim_index(mesh, "cp", &d) == DT_OK ? d + 1 : 0;
    l->ep_dim = dt_mesh_dim_index(mesh, "ep", &d) == DT_OK ? d + 1 : 0;
}

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

/* Declares part's modules: the embedding, blocks [first, end), the head. */
static dt_status declare(tl_model *m, const tl_part *part) {
    const tl_config *c = &m->cfg;
    dt_params *p = m->params;
    /* std 1/sqrt(fan_in) for projections, 1 for the embedding */
    dt_init emb = {DT_INIT_NORMAL, 1.0}, in = {DT_INIT_NORMAL, 1.0 / sqrt(c->dim)},
            hid = {DT_INIT_NORMAL, 1.0 / sqrt(c->hidden)};
    if (part->embed) {
        TRY(dt_params_begin_group(p, "tok_embeddings"));
        TRY(dt_nn_embedding_create(p, "tok_embeddings", c->vocab, c->dim, emb, &m->tok_embeddings));
    }
    for (int i = part->first; i < part->end; i++) {
        char name[64], sub[96];
        tl_block *b = &m->layers[i];
        snprintf(name, sizeof name, "layers.%d", i);
        TRY(dt_params_begin_group(p, name));
        snprintf(sub, sizeof sub, "%s.attention_norm", name);
        TRY(dt_nn_rms_norm_create(p, sub, c->dim, 1e-5, &b->attention_norm));
        snprintf(sub, sizeof sub, "%s.attention", name);
        TRY(dt_nn_attention_create(p, sub, c->dim, c->heads, c->kv_heads, in, in, &b->attention));
        b->attention.cp_dim = m->layout.cp_dim - 1;
        snprintf(sub, sizeof sub, "%s.ffn_norm", name);
        TRY(dt_nn_rms_norm_create(p, sub, c->dim, 1e-5, &b->ffn_norm));
        snprintf(sub, sizeof sub, "%s.feed_forward", name);
        if (c->experts > 0)
            TRY(tl_moe_declare(p, c, sub, &b->moe));
        else
            TRY(dt_nn_mlp_create(p, sub, c->dim, c->hidden, in, hid, &b->feed_forward));
        if (m->layout.float8) {
            dt_module lin[] = {b->attention.wq, b->attention.wk, b->attention.wv,
                               b->attention.wo, b->feed_forward.w1, b->feed_forward.w2,
                               b->feed_forward.w3};
            for (int k = 0; k < (c->experts > 0 ? 4 : 7); k++) TRY(dt_module_set_float8(lin[k], 1));
        } else if (m->layout.bf16) {
            dt_module lin[] = {b->attention.wq, b->attention.wk, b->attention.wv,
                               b->attention.wo, b->feed_forward.w1, b->feed_forward.w2,
                               b->feed_forward.w3};
            for (int k = 0; k < (c->experts > 0 ? 4 : 7); k++) TRY(dt_module_set_bf16(lin[k], 1));
        }
    }
    if (!part->head) return DT_OK;
    TRY(dt_params_begin_group(p, "output"));
    TRY(dt_nn_rms_norm_create(p, "norm", c->dim, 1e-5, &m->norm));
    TRY(dt_nn_linear_create(p, "output", c->dim, c->vocab, 0, in, &m->output));
    return m->layout.bf16 ? dt_module_set_bf16(m->output, 1) : DT_OK;
}

/* Whether the plan's rule for pattern names a module part declares (a plan may not name
 * modules that are not there). */
static int part_has(const tl_part *part, const char *pattern) {
    if (!strncmp(pattern, "layers.", 7)) return part->end > part->first;
    if (!strcmp(pattern, "tok_embeddings")) return part->embed;
    return part->head; /* norm, output */
}

/* m->params: part's parameters, parallelized by m->layout and drawn from gen. */
static dt_status make_params(tl_model *m, const tl_part *part, dt_generator *gen) {
    const tl_layout *l = &m->layout;
    dt_style_rule plan[32];
    dt_parallelize_options o = {.tp_dim = l->tp_dim,
                                .plan = plan,
                                .dp_dim = l->dp_dim,
                                .dp_mode = l->fsdp ? DT_DP_SHARD : DT_DP_REPLICATE,
                                .ep = l->ep_dim > 0,
                                .ep_dim = l->ep_dim - 1,
                                .async_tp = l->sequence_parallel ? l->async_tp : DT_ASYNC_TP_OFF};
    int n;
    TRY(dt_params_create(m->mesh, DT_F32, &m->params));
    TRY(declare(m, part));
    if (l->nplan > 0 && l->tp_dim >= 0) {
        if (l->nplan > 32) return dt_error_set(DT_ERR_ARG, "tiny_llama: %d plan rules", l->nplan);
        memcpy(plan, l->plan, sizeof *plan * (size_t)l->nplan), n = l->nplan;
    } else {
        TRY((m->cfg.experts > 0 ? tl_moe_plan : tl_plan)(l, plan, 32, &n));
    }
    for (int i = 0; i < n; i++)
        if (part_has(part, plan[i].pattern)) plan[o.nplan++] = plan[i];
    TRY(dt_parallelize(m->params, &o));
    if (l->fsdp && l->fsdp_units && l->dp_dim >= 0) {
        /* torchtitan's units: one per block, the root holding the rest */
        dt_fully_shard_options fo = {.dp_dim = dt_mesh_dim_name(m->mesh, l->dp_dim),
                                     .no_coalesce = l->fsdp_no_coalesce,
                                     .float8_all_gather = l->float8_all_gather,
                                     .bf16_all_gather = l->bf16};
        if (part->end > part->first) TRY(dt_fully_shard(m->params, "layers.*", &fo));
        TRY(dt_fully_shard(m->params, NULL, &fo));
    }
    return dt_params_materialize(m->params, gen);
}

/* Context parallel: ranks over cp (1 without), and rows of n sequences of T positions (each
 * position `width` bytes) put in the load-balanced order, row i <- position dt_cp_position(i). */
static int cp_size(const tl_model *m) {
    return m->layout.cp_dim > 0 ? dt_mesh_dim_size(m->mesh, m->layout.cp_dim - 1) : 1;
}

static dt_status cp_order(const tl_model *m, void *buf, int64_t n, int64_t T, size_t width) {
    int cp = cp_size(m);
    char *tmp = malloc(width * (size_t)T + 1), *b = buf;
    if (!tmp) return dt_error_set(DT_ERR_NOMEM, "tiny_llama: out of memory");
    for (int64_t r = 0; r < n && cp > 1; r++) {
        char *row = b + (size_t)r * width * (size_t)T;
        memcpy(tmp, row, width * (size_t)T);
        for (int64_t i = 0; i < T; i++)
            memcpy(row + (size_t)i * width, tmp + (size_t)dt_cp_position(T, cp, i) * width, width);
    }
    free(tmp);
    return DT_OK;
}

/* The rope tables, replicated; with context parallel their rows in the load-balanced order,
 * S(0) over cp (each rank's rows are the positions of its tokens). */
static dt_status rope_tables(tl_model *m) {
    const tl_config *c = &m->cfg;
    int mnd = dt_mesh_ndim(m->mesh), hd = c->dim / c->heads;
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int d = 0; d < mnd; d++)
        pl[d] = dt_replicate();
    TRY(dt_rope_tables(m->mesh, DT_F32, c->seq, hd, 10000.0, mnd, pl, &m->cos, &m->sin));
    if (cp_size(m) == 1) return DT_OK;
    pl[m->layout.cp_dim - 1] = dt_shard(0);
    int64_t shape[2] = {c->seq, hd / 2};
    size_t bytes = sizeof(float) * (size_t)(c->seq * hd / 2);
    float *host = malloc(bytes + 4);
    dt_status st = host ? DT_OK : dt_error_set(DT_ERR_NOMEM, "tiny_llama: out of memory");
    for (int k = 0; k < 2 && st == DT_OK; k++) {
        dt_tensor **t = k ? &m->sin : &m->cos, *sharded = NULL;
        st = dt_tensor_full_tensor(*t, host, bytes);
        if (st == DT_OK) st = cp_order(m, host, 1, c->seq, sizeof(float) * (size_t)(hd / 2));
        if (st == DT_OK)
            st = dt_tensor_distribute(m->mesh, host, DT_F32, 2, shape, mnd, pl, DT_ALL_RANKS,
                                      &sharded);
        if (st == DT_OK) dt_tensor_release(*t), *t = sharded;
    }
    free(host);
    return st;
}

dt_status tl_model_init(tl_model *m, dt_mesh *mesh, const tl_config *cfg, const tl_layout *layout,
                        uint64_t seed) {
    tl_part all = {.first = 0, .end = cfg->layers, .embed = 1, .head = 1};
    return tl_model_init_part(m, mesh, cfg, layout, seed, &all);
}

dt_status tl_model_init_part(tl_model *m, dt_mesh *mesh, const tl_config *cfg,
                             const tl_layout *layout, uint64_t seed, const tl_part *part) {
    *m = (tl_model){.cfg = *cfg, .layout = *layout, .mesh = mesh};
    if (part->first < 0 || part->end < part->first || part->end > cfg->layers)
        return dt_error_set(DT_ERR_ARG, "tl_model_init_part: blocks [%d, %d) of %d", part->first,
                            part->end, cfg->layers);
    m->layers = calloc((size_t)cfg->layers, sizeof *m->layers);
    if (!m->layers) return dt_error_set(DT_ERR_NOMEM, "tl_model_init: out of memory");
    dt_generator gen = dt_generator_make(seed);
    dt_status st = DT_OK;
    if (!part->embed) {
        /* gen draws in declaration order: draw the parameters declared before part's (the
         * embedding and blocks [0, first)) and drop them (held only while this runs) */
        tl_model before = *m;
        tl_part head = {.first = 0, .end = part->first, .embed = 1, .head = 0};
        st = make_params(&before, &head, &gen);
        dt_params_destroy(before.params);
        memset(m->layers, 0, sizeof *m->layers * (size_t)cfg->layers);
    }
    if (st == DT_OK) st = make_params(m, part, &gen);
    if (st == DT_OK) st = rope_tables(m);
    if (st == DT_OK && layout->ac == DT_AC_MEASURED) {
        dt_ac_policy_options o = dt_ac_policy_options_default();
        o.budget_bytes = layout->ac_budget;
        if (layout->ac_measure_steps) o.measure_steps = layout->ac_measure_steps;
        st = dt_ac_policy_create(&o, &m->ac);
    }
    if (st != DT_OK) tl_model_free(m);
    return st;
}

void tl_model_free(tl_model *m) {
    dt_params_destroy(m->params);
    dt_tensor_release(m->cos), dt_tensor_release(m->sin);
    free(m->layers);
    dt_ac_policy_destroy(m->ac);
    m->params = NULL, m->cos = m->sin = NULL, m->layers = NULL, m->ac = NULL;
}

/* The batch's data-parallel shards: the product of the dims that shard it (dp, dp_replicate,
 * ep), each rank holding a contiguous block of batch / D rows. */
static int batch_shards(const tl_model *m) {
    const tl_layout *l = &m->layout;
    int dims[3] = {l->dp_dim, l->dp_replicate_dim - 1, l->ep_dim - 1}, D = 1;
    for (int k = 0; k < 3; k++)
        if (dims[k] >= 0) D *= dt_mesh_dim_size(m->mesh, dims[k]);
    return D;
}

/* Rows (each `row` int64s, tokens then targets: 2 * batch rows) laid out so that when each of
 * D shards of batch / D rows is cut into nmicro chunks, chunk i of every shard together holds
 * samples [i B / nmicro, (i + 1) B / nmicro): shard d's row r of chunk i <- sample
 * i B / nmicro + d B / (D nmicro) + r. Nothing moves for D = 1, nmicro = 1, or uneven cuts. */
static dt_status micro_order(int64_t *buf, int batch, int D, int nmicro, int64_t row) {
    if (nmicro <= 1 || D <= 1 || batch % (D * nmicro)) return DT_OK;
    int per = batch / (D * nmicro), local = batch / D;
    size_t bytes = sizeof *buf * (size_t)(row * batch);
    int64_t *tmp = malloc(bytes);
    if (!tmp) return dt_error_set(DT_ERR_NOMEM, "tl_batch: out of memory");
    for (int half = 0; half < 2; half++) {
        int64_t *b = buf + (size_t)half * (size_t)(row * batch);
        memcpy(tmp, b, bytes);
        for (int g = 0; g < batch; g++) {
            int d = g / local, i = g % local / per, r = g % per;
            int sample = i * (batch / nmicro) + d * per + r;
            memcpy(b + (size_t)g * (size_t)row, tmp + (size_t)sample * (size_t)row,
                   sizeof *buf * (size_t)row);
        }
    }
    free(tmp);
    return DT_OK;
}

static dt_status batch_of(const tl_model *m, const unsigned char *text, size_t n,
                          const size_t *starts, int step, int nmicro, dt_tensor **tokens,
                          dt_tensor **targets);

dt_status tl_batch(const tl_model *m, const unsigned char *text, size_t n, int step,
                   dt_tensor **tokens, dt_tensor **targets) {
    return tl_batch_micro(m, text, n, step, 1, tokens, targets);
}

dt_status tl_batch_micro(const tl_model *m, const unsigned char *text, size_t n, int step,
                         int nmicro, dt_tensor **tokens, dt_tensor **targets) {
    return batch_of(m, text, n, NULL, step, nmicro, tokens, targets);
}

dt_status tl_batch_at(const tl_model *m, const unsigned char *text, size_t n,
                      const size_t *starts, int nmicro, dt_tensor **tokens,
                      dt_tensor **targets) {
    for (int b = 0; b < m->cfg.batch; b++)
        if (starts[b] > n || n - starts[b] < (size_t)m->cfg.seq + 1)
            return dt_error_set(DT_ERR_ARG, "tl_batch_at: starts[%d] = %zu leaves less than %d "
                                "of the text's %zu bytes", b, starts[b], m->cfg.seq + 1, n);
    return batch_of(m, text, n, starts, 0, nmicro, tokens, targets);
}

/* tl_batch_micro's body: windows at starts (NULL: drawn from step). */
static dt_status batch_of(const tl_model *m, const unsigned char *text, size_t n,
                          const size_t *starts, int step, int nmicro, dt_tensor **tokens,
                          dt_tensor **targets) {
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
        size_t at = !text ? 0 : starts ? starts[b] : (size_t)(x % (n - (size_t)c->seq - 1));
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
    dt_placement pl[DT_MESH_MAX_NDIM], rep[DT_MESH_MAX_NDIM];
    for (int d = 0; d < mnd; d++)
        pl[d] = rep[d] = dt_replicate();
    if (m->layout.dp_dim >= 0) pl[m->layout.dp_dim] = dt_shard(0);
    if (m->layout.dp_replicate_dim > 0) pl[m->layout.dp_replicate_dim - 1] = dt_shard(0);
    if (m->layout.cp_dim > 0) pl[m->layout.cp_dim - 1] = dt_shard(1);
    if (m->layout.ep_dim > 0) pl[m->layout.ep_dim - 1] = dt_shard(0);
    /* The targets stay whole on every rank (every rank holds the batch here anyway): the
     * loss reads its rows' slice locally, and cross_entropy checks every label on every rank
     * alike, with no collective (a dp-sharded target costs an all_gather of each rank's
     * label summary per step). With context parallel, tokens and targets alike in the
     * load-balanced order, so each target stays its token's successor. */
    dt_status st = micro_order(buf, c->batch, batch_shards(m), nmicro, c->seq);
    if (st == DT_OK) st = cp_order(m, buf, 2 * (int64_t)c->batch, c->seq, sizeof *buf);
    if (st == DT_OK)
        st = dt_tensor_distribute(m->mesh, buf, DT_I64, 2, shape, mnd, pl, DT_ALL_RANKS, tokens);
    if (st == DT_OK) {
        st = dt_tensor_distribute(m->mesh, buf + count, DT_I64, 2, shape, mnd, rep, DT_ALL_RANKS,
                                  targets);
        if (st != DT_OK) dt_tensor_release(*tokens);
    }
    free(buf);
    return st;
}

/* One block, as llm.c and torchtitan write it: x + attention(norm(x)), then + mlp(norm(x));
 * the first residual add and the norm after it run as one fused pass. */
static dt_tensor *block(dt_scope *s, const tl_model *m, const tl_block *b, dt_tensor *x,
                        dt_tensor **aux) {
    dt_tensor *h = dt_nn_rms_norm_forward(s, b->attention_norm, x);
    dt_tensor *a = dt_nn_attention_forward(s, &b->attention, h, m->cos, m->sin);
    h = dt_nn_rms_norm_residual_forward(s, b->ffn_norm, x, a, &x);
    return DT_DO(s, dt_add, x,
                 m->cfg.experts > 0 ? tl_moe_forward(s, m, &b->moe, h, aux)
                                    : dt_nn_mlp_forward(s, &b->feed_forward, h));
}

dt_tensor *tl_layers_forward(dt_scope *s, const tl_model *m, int first, int end, dt_tensor *x,
                             dt_tensor **aux) {
    dt_ctx *ctx = dt_mesh_ctx(m->mesh);
    for (int i = first; i < end; i++) {
        /* activation checkpointing: a region around each block keeps what the policy keeps */
        dt_ac_region *r = NULL;
        int ac = m->layout.ac != DT_AC_NONE && dt_grad_enabled(ctx) && dt_scope_ok(s);
        if (ac)
            dt_scope_fail(s, m->ac ? dt_ac_begin_measured(ctx, m->ac, &r)
                                   : dt_ac_begin(ctx, m->layout.ac, &r));
        x = block(s, m, &m->layers[i], x, aux);
        /* the block's outputs: x, and with MoE the running sum of the aux losses (read after
         * the region, so kept; the routing plan lives in the experts' node, which the region
         * keeps, so backward replays the forward's routing) */
        dt_tensor *keep[2] = {x, aux ? *aux : NULL};
        if (r) dt_scope_fail(s, dt_ac_end(r, !x ? 0 : keep[1] ? 2 : 1, keep));
    }
    return x;
}

dt_tensor *tl_head_loss(dt_scope *s, const tl_model *m, dt_tensor *x, dt_tensor *targets) {
    dt_tensor_info t;
    if (!dt_scope_ok(s)) return NULL;
    dt_status st = dt_tensor_info_get(targets, &t);
    if (st != DT_OK) return dt_scope_fail(s, st);
    /* the rows of this batch (a pipeline's micro-batch is smaller than cfg.batch) */
    int64_t rows[2] = {t.shape[0] * t.shape[1], m->cfg.vocab}, flat[1] = {rows[0]};
    x = dt_nn_rms_norm_forward(s, m->norm, x);
    dt_tensor *logits = dt_nn_linear_forward(s, m->output, x); /* (B, T, vocab) */
    dt_tensor *lg, *tg;
    if (m->layout.cp_dim > 0) { /* (B, vocab, T) and (B, T) as torch's N-d form: flattening a
                                   cp-sharded sequence into rows would re-shard it */
        lg = DT_DO(s, dt_transpose, logits, 1, 2);
        tg = targets;
    } else {
        lg = DT_DO(s, dt_view, logits, 2, rows);
        tg = DT_DO(s, dt_view, targets, 1, flat);
    }
    return DT_DO(s, dt_cross_entropy, lg, tg, DT_REDUCTION_MEAN);
}

dt_status tl_loss(const tl_model *m, dt_tensor *tokens, dt_tensor *targets, dt_tensor **out) {
    dt_scope *s;
    TRY(dt_scope_create(&s));
    dt_tensor *x = dt_nn_embedding_forward(s, m->tok_embeddings, tokens); /* (B, T, dim) */
    dt_tensor *aux = NULL; /* MoE: the blocks' load-balancing losses, scaled */
    x = tl_layers_forward(s, m, 0, m->cfg.layers, x, &aux);
    dt_tensor *loss = tl_head_loss(s, m, x, targets);
    if (aux) loss = DT_DO(s, dt_add, loss, aux);
    return dt_scope_end(s, loss, out);
}
