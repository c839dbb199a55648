/* The model-writing layer: forward scopes (dtensor/scope.h), the parameter registry
 * (dtensor/params.h), plan checks and placements (dtensor/parallel.h), and the layer helpers
 * (dtensor/nn.h) against naive loops on one rank. Parity of whole models under plans is in
 * test_parallel_train.c. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

/* ---- scopes ------------------------------------------------------------------------------ */

static int calls;
static dt_status counted(dt_tensor *x, dt_tensor **out) {
    calls++;
    return dt_neg(x, out);
}

static dt_status scope_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "1", &mesh));
    int64_t shape[2] = {3, 4};
    dt_placement r = dt_replicate();
    dt_tensor *x;
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, shape, 1, &r, &x));
    dt_tensor_memory before, after;
    R_OK(dt_ctx_tensor_memory(ctx, &before));
    /* far more than any fixed table: all released together */
    dt_scope *s;
    R_OK(dt_scope_create(&s));
    dt_tensor *y = x;
    for (int i = 0; i < 1000; i++)
        y = DT_DO(s, dt_add_scalar, y, 1.0);
    R_OK(dt_ctx_tensor_memory(ctx, &after));
    R_CHECK(after.tensors == before.tensors + 1000, "%lld tensors alive in the scope, want %lld",
            (long long)after.tensors, (long long)before.tensors + 1000);
    dt_tensor *kept;
    R_OK(dt_scope_end(s, y, &kept));
    R_OK(dt_ctx_tensor_memory(ctx, &after));
    R_CHECK(after.tensors == before.tensors + 1, "after the scope %lld tensors, want %lld",
            (long long)after.tensors, (long long)before.tensors + 1);
    float v[12];
    R_OK(dt_tensor_full_tensor(kept, v, sizeof v));
    R_CHECK(v[0] == 1001.0f && v[11] == 1001.0f, "kept %g, want 1001", v[0]);
    dt_tensor_release(kept);

    /* the first failure wins: its status and message survive later failures, and the calls
     * after it are skipped */
    R_OK(dt_scope_create(&s));
    int64_t bad[1] = {5};
    calls = 0;
    dt_tensor *a = DT_DO(s, counted, x);
    dt_tensor *b = DT_DO(s, dt_view, a, 1, bad); /* 12 elements as 5: DT_ERR_SHAPE */
    dt_tensor *c = DT_DO(s, counted, x);         /* skipped */
    dt_tensor *d = DT_DO(s, dt_add, b, c);       /* skipped */
    R_CHECK(a && !b && !c && !d && calls == 1, "a %p b %p c %p d %p, %d calls", (void *)a,
            (void *)b, (void *)c, (void *)d, calls);
    R_CHECK(!dt_scope_ok(s) && dt_scope_status(s) == DT_ERR_SHAPE, "scope status %s",
            dt_status_str(dt_scope_status(s)));
    dt_error_set(DT_ERR_ARG, "a later, unrelated error");
    dt_tensor *never = T_SENTINEL(dt_tensor *);
    R_ERR(dt_scope_end(s, d, &never), DT_ERR_SHAPE, "view");
    R_CHECK(never == T_SENTINEL(dt_tensor *), "dt_scope_end wrote out on failure");
    R_OK(dt_ctx_tensor_memory(ctx, &after));
    R_CHECK(after.tensors == before.tensors, "a failed scope left %lld tensors",
            (long long)(after.tensors - before.tensors));
    /* a failure recorded by hand (a layer's own check) is the scope's too */
    R_OK(dt_scope_create(&s));
    dt_error_set(DT_ERR_SHAPE, "my layer: x has 2 dims");
    R_CHECK(dt_scope_fail(s, DT_ERR_SHAPE) == NULL, "dt_scope_fail returned a tensor");
    R_CHECK(DT_DO(s, counted, x) == NULL && calls == 1, "a call ran after dt_scope_fail");
    R_ERR(dt_scope_end(s, NULL, NULL), DT_ERR_SHAPE, "my layer");
    dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(nn, scope_releases_together_and_keeps_the_first_error) {
    t_run(1, scope_body, NULL);
}

/* ---- registry and plan ------------------------------------------------------------------- */

enum { DIM = 8, HEADS = 4, KV = 2, HIDDEN = 12, VOCAB = 10, B = 2, T = 5 };

typedef struct small {
    dt_params *p;
    dt_module emb, norm, out;
    dt_nn_attention attn;
    dt_nn_mlp mlp;
} small;

static dt_status declare_small(dt_mesh *mesh, small *m) {
    dt_init w = {DT_INIT_NORMAL, 0.3};
    R_OK(dt_params_create(mesh, DT_F32, &m->p));
    R_OK(dt_nn_embedding_create(m->p, "emb", VOCAB, DIM, w, &m->emb));
    R_OK(dt_params_begin_group(m->p, "block"));
    R_OK(dt_nn_rms_norm_create(m->p, "block.norm", DIM, 1e-5, &m->norm));
    R_OK(dt_nn_attention_create(m->p, "block.attn", DIM, HEADS, KV, w, w, &m->attn));
    R_OK(dt_nn_mlp_create(m->p, "block.mlp", DIM, HIDDEN, w, w, &m->mlp));
    R_OK(dt_params_begin_group(m->p, "head"));
    return dt_nn_linear_create(m->p, "out", DIM, VOCAB, 1, w, &m->out);
}

static dt_status registry_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    small m;
    R_OK(declare_small(mesh, &m));
    static const char *names[] = {"emb.weight",
                                  "block.norm.weight",
                                  "block.attn.wq.weight",
                                  "block.attn.wk.weight",
                                  "block.attn.wv.weight",
                                  "block.attn.wo.weight",
                                  "block.mlp.w1.weight",
                                  "block.mlp.w2.weight",
                                  "block.mlp.w3.weight",
                                  "out.weight",
                                  "out.bias"};
    int n = dt_params_count(m.p);
    R_CHECK(n == 11, "%d parameters, want 11", n);
    const char *got[16];
    R_OK(dt_params_arrays(m.p, got, NULL, 16, &n));
    for (int i = 0; i < n; i++)
        R_CHECK(!strcmp(got[i], names[i]), "parameter %d is %s, want %s", i, got[i], names[i]);
    R_ERR(dt_params_arrays(m.p, got, NULL, 3, &n), DT_ERR_ARG, "cap 3");
    /* groups: "" holds what came before the first, then contiguous ranges */
    const char *gname;
    int first, count;
    R_CHECK(dt_params_group_count(m.p) == 2, "%d groups", dt_params_group_count(m.p));
    R_OK(dt_params_group_at(m.p, 0, &gname, &first, &count));
    R_CHECK(!strcmp(gname, "block") && first == 1 && count == 8, "group 0: %s [%d, +%d)", gname,
            first, count);
    R_OK(dt_params_group_at(m.p, 1, &gname, &first, &count));
    R_CHECK(!strcmp(gname, "head") && first == 9 && count == 2, "group 1: %s [%d, +%d)", gname,
            first, count);
    int at;
    R_OK(dt_params_find(m.p, "block.mlp.w2.weight", &at));
    R_CHECK(at == 7, "w2 at %d", at);
    R_ERR(dt_params_find(m.p, "block.mlp.w4.weight", &at), DT_ERR_ARG, "block.mlp.w4.weight");
    dt_module dup;
    R_ERR(dt_params_module(m.p, "block.attn.wq", DT_MODULE_LINEAR, &dup), DT_ERR_ARG,
          "block.attn.wq");
    int64_t one = 1;
    R_ERR(dt_params_declare(m.out, "bias", 1, &one, (dt_init){DT_INIT_ZEROS, 0}, NULL), DT_ERR_ARG,
          "out.bias");

    /* plan checks: each names the rule at fault, and nothing is applied */
    dt_style_rule typo[] = {{"block.attn.wq", dt_style_colwise()},
                            {"block.atn.wk", dt_style_colwise()}};
    dt_parallelize_options o = {
        .tp_dim = 1, .plan = typo, .nplan = 2, .dp_dim = 0, .dp_mode = DT_DP_SHARD};
    R_ERR(dt_parallelize(m.p, &o), DT_ERR_ARG, "\"block.atn.wk\" matches no module");
    dt_style_rule twice[] = {{"block.*.wq", dt_style_colwise()},
                             {"block.attn.*", dt_style_rowwise()}};
    o.plan = twice;
    R_ERR(dt_parallelize(m.p, &o), DT_ERR_ARG, "block.attn.wq");
    dt_style_rule kind[] = {{"block.norm", dt_style_colwise()}};
    o.plan = kind, o.nplan = 1;
    R_ERR(dt_parallelize(m.p, &o), DT_ERR_ARG, "cannot take");
    dt_style_rule sp[] = {{"block.mlp.w1", dt_style_sequence_parallel()}};
    o.plan = sp;
    R_ERR(dt_parallelize(m.p, &o), DT_ERR_ARG, "block.mlp.w1");
    dt_style_rule partial[] = {{"block.mlp", dt_style_prepare_input(dt_partial(DT_REDUCE_SUM))}};
    o.plan = partial;
    R_ERR(dt_parallelize(m.p, &o), DT_ERR_ARG, "Replicate or Shard");
    dt_style_rule ok[] = {
        {"emb", dt_style_rowwise()},
        {"block.attn.w*", dt_style_colwise()}, /* wq wk wv wo, not deeper names */
        {"block.mlp.w1", dt_style_colwise()},
        {"block.mlp.w2", dt_style_rowwise_to(dt_shard(1))},
        {"block.norm", dt_style_sequence_parallel()},
        {"out", dt_style_loss_parallel()},
    };
    o.plan = ok, o.nplan = 6, o.dp_dim = 1;
    R_ERR(dt_parallelize(m.p, &o), DT_ERR_ARG, "both 1");
    o.dp_dim = 0;
    R_OK(dt_parallelize(m.p, &o));
    R_ERR(dt_parallelize(m.p, &o), DT_ERR_ARG, "parallelized already");
    /* placements (dp, tp): FSDP shards dim 0 over dp unless tp does */
    static const struct {
        const char *name, *stored, *compute;
    } want[] = {
        {"emb.weight", "S(1),S(0)", "R,S(0)"},
        {"block.norm.weight", "S(0),R", "R,R"},
        {"block.attn.wq.weight", "S(1),S(0)", "R,S(0)"},
        {"block.attn.wo.weight", "S(1),S(0)", "R,S(0)"},
        {"block.mlp.w2.weight", "S(0),S(1)", "R,S(1)"},
        {"block.mlp.w3.weight", "S(0),R", "R,R"},
        {"out.weight", "S(1),S(0)", "R,S(0)"},
        {"out.bias", "R,S(0)", "R,S(0)"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        dt_placement st[2], cp[2];
        char a[32], b[32];
        R_OK(dt_params_find(m.p, want[i].name, &at));
        R_OK(dt_params_placements(m.p, at, st, cp));
        R_OK(dt_placements_format(st, 2, a, sizeof a));
        R_OK(dt_placements_format(cp, 2, b, sizeof b));
        R_CHECK(!strcmp(a, want[i].stored) && !strcmp(b, want[i].compute),
                "%s: stored %s compute %s, want %s and %s", want[i].name, a, b, want[i].stored,
                want[i].compute);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    R_CHECK(mf != NULL, "open_memstream");
    R_OK(dt_params_print(m.p, mf));
    fclose(mf);
    int printed = strstr(text, "block.mlp.w2.weight") && strstr(text, "8x12") &&
                  strstr(text, "rowwise") && strstr(text, "S(0),S(1)") &&
                  strstr(text, "11 parameters, 658 elements, 2 groups");
    free(text);
    R_CHECK(printed, "dt_params_print left out a parameter, its style or the totals");
    R_CHECK(dt_module_style(m.norm)->kind == DT_STYLE_SEQUENCE_PARALLEL &&
                dt_module_style(m.attn.self) == NULL,
            "module styles");
    dt_optim *opt;
    R_ERR(dt_optim_adamw_create_params(&(dt_adamw_options){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99},
                                       m.p, &opt),
          DT_ERR_ARG, "not materialized");
    dt_generator gen = dt_generator_make(5);
    R_OK(dt_params_materialize(m.p, &gen));
    R_ERR(dt_params_module(m.p, "late", DT_MODULE_LINEAR, &dup), DT_ERR_ARG, "materialized");
    dt_tensor *wq;
    dt_tensor_info info;
    R_OK(dt_params_at(m.p, 2, NULL, &wq));
    R_OK(dt_tensor_info_get(wq, &info));
    /* (8, 8) over tp=2 rows then dp=2 columns: a 4x4 shard, requiring grad */
    R_CHECK(info.local_shape[0] == 4 && info.local_shape[1] == 4 && dt_tensor_requires_grad(wq),
            "wq shard %lldx%lld", (long long)info.local_shape[0], (long long)info.local_shape[1]);
    R_OK(dt_params_destroy(m.p));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(nn, registry_names_groups_and_plan_checks) {
    t_run(4, registry_body, NULL);
}

/* ---- layers against naive loops ---------------------------------------------------------- */

static dt_status fetch(dt_params *p, const char *name, float *out, size_t bytes) {
    int i;
    dt_tensor *t;
    R_OK(dt_params_find(p, name, &i));
    R_OK(dt_params_at(p, i, NULL, &t));
    return dt_tensor_full_tensor(t, out, bytes);
}

/* y (n, out) = x (n, in) W^T for W (out, in) */
static void mm_t(const float *x, const float *w, int n, int in, int out, float *y) {
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int k = 0; k < in; k++)
                s += (double)x[r * in + k] * w[o * in + k];
            y[r * out + o] = (float)s;
        }
}

/* torchtitan's attention: q, k rotated by interleaved pairs, query head h reads kv head
 * h / (HEADS / KV), causal softmax, then wo. */
static void naive_attention(const float *x, const float *wq, const float *wk, const float *wv,
                            const float *wo, float *y) {
    enum { HD = DIM / HEADS };
    float q[B * T * DIM], k[B * T * KV * HD], v[B * T * KV * HD], o[B * T * DIM];
    mm_t(x, wq, B * T, DIM, DIM, q);
    mm_t(x, wk, B * T, DIM, KV * HD, k);
    mm_t(x, wv, B * T, DIM, KV * HD, v);
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        for (int h = 0; h < HEADS + KV; h++) {
            float *z = h < HEADS ? q + bt * DIM + h * HD : k + bt * KV * HD + (h - HEADS) * HD;
            for (int i = 0; i < HD / 2; i++) {
                double a = t * pow(10000.0, -2.0 * i / HD), c = cos(a), s = sin(a);
                double x0 = z[2 * i], x1 = z[2 * i + 1];
                z[2 * i] = (float)(x0 * c - x1 * s), z[2 * i + 1] = (float)(x0 * s + x1 * c);
            }
        }
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HEADS; h++) {
            int g = h / (HEADS / KV);
            for (int i = 0; i < T; i++) {
                double sc[T], mx = -1e30, sum = 0;
                for (int j = 0; j <= i; j++) {
                    double d = 0;
                    for (int e = 0; e < HD; e++)
                        d += (double)q[(b * T + i) * DIM + h * HD + e] *
                             k[(b * T + j) * KV * HD + g * HD + e];
                    sc[j] = d / sqrt(HD), mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= i; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int e = 0; e < HD; e++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++)
                        acc += sc[j] / sum * v[(b * T + j) * KV * HD + g * HD + e];
                    o[(b * T + i) * DIM + h * HD + e] = (float)acc;
                }
            }
        }
    mm_t(o, wo, B * T, DIM, DIM, y);
}

static dt_status layers_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "1", &mesh));
    small m;
    R_OK(declare_small(mesh, &m));
    dt_generator gen = dt_generator_make(11);
    R_OK(dt_params_materialize(m.p, &gen));
    int64_t tshape[2] = {B, T};
    int64_t tok[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 7 + 3) % VOCAB;
    dt_placement r = dt_replicate();
    dt_tensor *tokens, *cos, *sin, *y_attn, *y_mlp;
    R_OK(dt_tensor_distribute(mesh, tok, DT_I64, 2, tshape, 1, &r, DT_ALL_RANKS, &tokens));
    R_OK(dt_rope_tables(mesh, DT_F32, T, DIM / HEADS, 10000.0, 1, &r, &cos, &sin));
    dt_scope *s;
    R_OK(dt_scope_create(&s));
    dt_tensor *x = dt_nn_embedding_forward(s, m.emb, tokens);
    dt_tensor *h = dt_nn_rms_norm_forward(s, m.norm, x);
    dt_tensor *a = dt_nn_attention_forward(s, &m.attn, h, cos, sin);
    R_OK(dt_scope_end(s, a, &y_attn));
    R_OK(dt_scope_create(&s));
    x = dt_nn_embedding_forward(s, m.emb, tokens);
    R_OK(dt_scope_end(s, dt_nn_mlp_forward(s, &m.mlp, x), &y_mlp));
    static float emb[VOCAB * DIM], nw[DIM], wq[DIM * DIM], wk[DIM * DIM], wv[DIM * DIM],
        wo[DIM * DIM], w1[HIDDEN * DIM], w2[DIM * HIDDEN], w3[HIDDEN * DIM];
    R_OK(fetch(m.p, "emb.weight", emb, sizeof emb));
    R_OK(fetch(m.p, "block.norm.weight", nw, sizeof nw));
    R_OK(fetch(m.p, "block.attn.wq.weight", wq, sizeof wq));
    R_OK(fetch(m.p, "block.attn.wk.weight", wk, sizeof(float) * KV * (DIM / HEADS) * DIM));
    R_OK(fetch(m.p, "block.attn.wv.weight", wv, sizeof(float) * KV * (DIM / HEADS) * DIM));
    R_OK(fetch(m.p, "block.attn.wo.weight", wo, sizeof wo));
    R_OK(fetch(m.p, "block.mlp.w1.weight", w1, sizeof w1));
    R_OK(fetch(m.p, "block.mlp.w2.weight", w2, sizeof w2));
    R_OK(fetch(m.p, "block.mlp.w3.weight", w3, sizeof w3));
    float xe[B * T * DIM], hn[B * T * DIM], want[B * T * DIM], got[B * T * DIM];
    for (int i = 0; i < B * T; i++) {
        double ms = 0;
        for (int c = 0; c < DIM; c++)
            xe[i * DIM + c] = emb[tok[i] * DIM + c];
        for (int c = 0; c < DIM; c++)
            ms += (double)xe[i * DIM + c] * xe[i * DIM + c];
        for (int c = 0; c < DIM; c++)
            hn[i * DIM + c] = (float)(xe[i * DIM + c] / sqrt(ms / DIM + 1e-5) * nw[c]);
    }
    naive_attention(hn, wq, wk, wv, wo, want);
    R_OK(dt_tensor_full_tensor(y_attn, got, sizeof got));
    for (int i = 0; i < B * T * DIM; i++)
        R_CHECK(fabsf(got[i] - want[i]) <= 1e-5f + 1e-4f * fabsf(want[i]),
                "attention[%d] = %.7g, naive %.7g", i, got[i], want[i]);
    float g[B * T * HIDDEN], u[B * T * HIDDEN];
    mm_t(xe, w1, B * T, DIM, HIDDEN, g);
    mm_t(xe, w3, B * T, DIM, HIDDEN, u);
    for (int i = 0; i < B * T * HIDDEN; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    mm_t(g, w2, B * T, HIDDEN, DIM, want);
    R_OK(dt_tensor_full_tensor(y_mlp, got, sizeof got));
    for (int i = 0; i < B * T * DIM; i++)
        R_CHECK(fabsf(got[i] - want[i]) <= 1e-5f + 1e-4f * fabsf(want[i]),
                "mlp[%d] = %.7g, naive %.7g", i, got[i], want[i]);
    dt_tensor *all[] = {y_attn, y_mlp, tokens, cos, sin};
    for (size_t i = 0; i < 5; i++)
        dt_tensor_release(all[i]);
    R_OK(dt_params_destroy(m.p));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(nn, layers_match_naive_loops) {
    t_run(1, layers_body, NULL);
}

/* ---- the use hook (where FSDP substitutes its gathered weights) -------------------------- */

typedef struct hook_log {
    int calls, last, fail;
} hook_log;

static dt_status gather_hook(void *user, dt_params *p, int i, dt_tensor *stored, int ncompute,
                             const dt_placement *compute, dt_tensor **out) {
    (void)p;
    hook_log *log = user;
    log->calls++, log->last = i;
    if (log->fail) return dt_error_set(DT_ERR_COMM, "my prefetch of parameter %d failed", i);
    return dt_tensor_redistribute(stored, ncompute, compute, out);
}

static dt_status hook_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2", &mesh));
    small m;
    R_OK(declare_small(mesh, &m));
    dt_parallelize_options o = {.tp_dim = -1, .dp_dim = 0, .dp_mode = DT_DP_SHARD};
    R_OK(dt_parallelize(m.p, &o));
    dt_generator gen = dt_generator_make(3);
    R_OK(dt_params_materialize(m.p, &gen));
    hook_log log = {0};
    R_OK(dt_params_set_use_hook(m.p, gather_hook, &log));
    int64_t shape[3] = {B, T, DIM};
    dt_placement pl = dt_shard(0);
    dt_tensor *x, *y;
    R_OK(dt_tensor_ones(mesh, DT_F32, 3, shape, 1, &pl, &x));
    dt_scope *s;
    R_OK(dt_scope_create(&s));
    R_OK(dt_scope_end(s, dt_nn_mlp_forward(s, &m.mlp, x), &y));
    int w2;
    R_OK(dt_params_find(m.p, "block.mlp.w2.weight", &w2));
    R_CHECK(log.calls == 3 && log.last == w2, "hook called %d times, last for %d (w2 is %d)",
            log.calls, log.last, w2);
    R_CHECK(dt_params_group_of(m.p, w2) == 0 && dt_params_group_of(m.p, 0) == -1,
            "groups of w2 and emb: %d, %d", dt_params_group_of(m.p, w2),
            dt_params_group_of(m.p, 0));
    dt_tensor_release(y);
    log.fail = 1;
    R_OK(dt_scope_create(&s));
    dt_tensor *never = T_SENTINEL(dt_tensor *);
    R_ERR(dt_scope_end(s, dt_nn_mlp_forward(s, &m.mlp, x), &never), DT_ERR_COMM, "my prefetch");
    R_CHECK(log.calls == 4, "the hook ran %d times after failing once", log.calls - 3);
    dt_tensor_release(x);
    R_OK(dt_params_destroy(m.p));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(nn, use_hook_replaces_the_gather) {
    t_run(2, hook_body, NULL);
}

/* ---- styles at module boundaries --------------------------------------------------------- */

static int placed(dt_tensor *t, const char *want) {
    dt_tensor_info info;
    char got[32];
    if (!t || dt_tensor_info_get(t, &info) != DT_OK) return 0;
    dt_placements_format(info.placements, info.mesh_ndim, got, sizeof got);
    if (strcmp(got, want)) fprintf(stderr, "placements %s, want %s\n", got, want);
    return !strcmp(got, want);
}

static dt_status styles_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=2", &mesh));
    small m;
    R_OK(declare_small(mesh, &m));
    dt_style_rule plan[] = {
        {"block.mlp.w1", dt_style_colwise()},
        {"block.mlp.w3", dt_style_colwise()},
        {"block.mlp.w2", dt_style_rowwise()},
        {"block.mlp", dt_style_prepare_output(dt_shard(1))},
        {"block.norm", dt_style_sequence_parallel()},
        {"block.attn", dt_style_prepare_input(dt_replicate())},
        {"out", dt_style_colwise_to(dt_replicate())},
    };
    dt_parallelize_options o = {.tp_dim = 0, .plan = plan, .nplan = 7, .dp_dim = -1};
    R_OK(dt_parallelize(m.p, &o));
    dt_generator gen = dt_generator_make(3);
    R_OK(dt_params_materialize(m.p, &gen));
    int64_t shape[3] = {B, T, DIM};
    dt_placement r = dt_replicate();
    dt_tensor *x;
    R_OK(dt_tensor_ones(mesh, DT_F32, 3, shape, 1, &r, &x));
    dt_scope *s;
    R_OK(dt_scope_create(&s));
    /* the mlp's Partial sum all_reduced by w2, then its output sequence-sharded */
    dt_tensor *y = dt_nn_mlp_forward(s, &m.mlp, x);
    /* a sequence-parallel norm shards a replicated input over the sequence */
    dt_tensor *h = dt_nn_rms_norm_forward(s, m.norm, x);
    /* prepare_input gathers it back for the container */
    dt_tensor *g = dt_module_input(s, m.attn.self, h);
    /* colwise with output Replicate: logits gathered */
    dt_tensor *l = dt_nn_linear_forward(s, m.out, g);
    int ok = placed(y, "S(1)") && placed(h, "S(1)") && placed(g, "R") && placed(l, "R");
    R_OK(dt_scope_end(s, NULL, NULL));
    R_CHECK(ok, "module boundaries placed otherwise (above)");
    dt_tensor_release(x);
    R_OK(dt_params_destroy(m.p));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(nn, styles_place_module_inputs_and_outputs) {
    t_run(2, styles_body, NULL);
}

/* Expert parallelism in dt_parallelize: an experts module's parameters go Shard(0) over ep and
 * Replicate over tp, FSDP shards them over dp along dim 1; other parameters take nothing from
 * ep; without ep the experts are placed as any parameter; bad ep options are named. */
static dt_status experts_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,ep=2,tp=2", &mesh));
    for (int mode = 0; mode < 3; mode++) { /* DDP x EP, FSDP x EP, FSDP without ep */
        dt_params *p;
        dt_module lin, ex;
        int64_t s[3] = {4, 6, 5};
        dt_init w = {DT_INIT_NORMAL, 0.5};
        R_OK(dt_params_create(mesh, DT_F32, &p));
        R_OK(dt_nn_linear_create(p, "ff.w", 6, 4, 0, w, &lin));
        R_OK(dt_params_module(p, "ff.experts", DT_MODULE_EXPERTS, &ex));
        R_OK(dt_params_declare(ex, "w1", 3, s, w, NULL));
        dt_style_rule rules[] = {{"ff.w", dt_style_colwise()}};
        dt_parallelize_options o = {.tp_dim = 2,
                                    .plan = rules,
                                    .nplan = 1,
                                    .dp_dim = 0,
                                    .dp_mode = mode ? DT_DP_SHARD : DT_DP_REPLICATE,
                                    .ep = mode < 2,
                                    .ep_dim = 1};
        if (mode == 0) {
            dt_style_rule bad[] = {{"ff.experts", dt_style_colwise()}};
            dt_parallelize_options b = o;
            b.plan = bad, b.nplan = 1;
            R_ERR(dt_parallelize(p, &b), DT_ERR_ARG, "cannot take");
            b = o, b.ep_dim = 2;
            R_ERR(dt_parallelize(p, &b), DT_ERR_ARG, "ep_dim 2 is also the tp dim");
            b = o, b.ep_dim = 0;
            R_ERR(dt_parallelize(p, &b), DT_ERR_ARG, "ep_dim 0 is also the dp dim");
            b = o, b.ep_dim = 3;
            R_ERR(dt_parallelize(p, &b), DT_ERR_ARG, "ep_dim 3 out of range");
        }
        R_OK(dt_parallelize(p, &o));
        static const char *const want[3][2][2] = {
            {{"R,R,S(0)", "R,R,S(0)"}, {"R,S(0),R", "R,S(0),R"}},
            {{"S(1),R,S(0)", "R,R,S(0)"}, {"S(1),S(0),R", "R,S(0),R"}},
            {{"S(1),R,S(0)", "R,R,S(0)"}, {"S(0),R,R", "R,R,R"}},
        };
        for (int i = 0; i < 2; i++) {
            dt_placement st[3], cp[3];
            char a[32], b[32];
            R_OK(dt_params_placements(p, i, st, cp));
            R_OK(dt_placements_format(st, 3, a, sizeof a));
            R_OK(dt_placements_format(cp, 3, b, sizeof b));
            R_CHECK(!strcmp(a, want[mode][i][0]) && !strcmp(b, want[mode][i][1]),
                    "mode %d, parameter %d: stored %s compute %s, want %s and %s", mode, i, a, b,
                    want[mode][i][0], want[mode][i][1]);
        }
        dt_generator gen = dt_generator_make(3);
        R_OK(dt_params_materialize(p, &gen));
        dt_tensor *w1;
        dt_tensor_info info;
        R_OK(dt_params_at(p, 1, NULL, &w1));
        R_OK(dt_tensor_info_get(w1, &info));
        int64_t want0 = 2, want1 = mode == 1 ? 3 : 6; /* experts over ep, or FSDP's dim 0 */
        R_CHECK(info.local_shape[0] == want0 && info.local_shape[1] == want1 &&
                    info.local_shape[2] == 5,
                "mode %d: w1's block %lldx%lldx%lld", mode, (long long)info.local_shape[0],
                (long long)info.local_shape[1], (long long)info.local_shape[2]);
        R_OK(dt_params_destroy(p));
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(nn, experts_shard_over_ep) {
    t_run(8, experts_body, NULL);
}
