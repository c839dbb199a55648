/* FSDP units by declaration (dtensor/fsdp.h's dt_fully_shard) on the model of make train
 * (examples/tiny_llama.c with train.c's default sizes): the collectives per step equal the
 * hand-written units' (30 on dp=2 x tp=2 with sequence and loss parallelism, 7 on dp=4; 10
 * on HSDP 2x2), the losses and every gradient of a few AdamW steps equal the one-rank
 * model's within 1e-5 relative (f32; dp x tp's gradients past step 0 against FSDP without
 * units on the same mesh), also with a gradient-accumulation micro-batch (grad sync off)
 * before each step's; forwards without a backward; every wrong declaration fails with its
 * argument named, on every rank alike. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#include "../../examples/tiny_llama.h"

enum { STEPS = 3 };

/* examples/train.c's defaults */
static const tl_config cfg = {.vocab = 256,
                              .seq = 64,
                              .batch = 8,
                              .dim = 128,
                              .layers = 2,
                              .heads = 4,
                              .kv_heads = 2,
                              .hidden = 384};

typedef struct run {
    const char *mesh;
    int ranks, accum; /* accum: a backward with grad sync off before each step's */
    int per_param;    /* FSDP without units: each parameter gathered at its use */
    int no_coalesce;  /* units gather and reduce alone (dt_fully_shard_options.no_coalesce) */
    float loss[STEPS];
    uint64_t colls[STEPS]; /* rank 0's collectives per step */
    dt_fsdp_stats fs[STEPS];
    int has_fsdp;
    float *grad[STEPS]; /* rank 0: every parameter's full gradient, in registry order */
    size_t ngrad;
    int np;
    size_t numel[64];
} run;

/* Every parameter's full gradient, concatenated (collective: full_tensor gathers). */
static size_t numel(const dt_tensor_info *info) {
    size_t n = 1;
    for (int d = 0; d < info->ndim; d++)
        n *= (size_t)info->shape[d];
    return n;
}

static dt_status grads(const tl_model *m, run *r, float **out, size_t *n_out) {
    int np = dt_params_count(m->params);
    size_t n = 0;
    R_CHECK(np <= 64, "%d parameters", np);
    for (int i = 0; i < np; i++) {
        dt_tensor *t;
        dt_tensor_info info;
        R_OK(dt_params_at(m->params, i, NULL, &t));
        R_OK(dt_tensor_info_get(t, &info));
        r->numel[i] = numel(&info);
        n += r->numel[i];
    }
    r->np = np;
    float *g = malloc(sizeof *g * n), *at = g;
    R_CHECK(g, "out of memory");
    for (int i = 0; i < np; i++) {
        dt_tensor *t, *gt;
        dt_tensor_info info;
        R_OK(dt_params_at(m->params, i, NULL, &t));
        R_OK(dt_tensor_info_get(t, &info));
        size_t k = numel(&info);
        R_CHECK((gt = dt_tensor_grad(t)) != NULL, "parameter %d has no gradient", i);
        R_OK(dt_tensor_full_tensor(gt, at, sizeof *at * k));
        at += k;
    }
    *out = g, *n_out = n;
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    /* as examples/train.c lays it out */
    tl_layout l = {.fsdp = 1, .fsdp_units = !r->per_param, .fsdp_no_coalesce = r->no_coalesce};
    tl_layout_find_dims(mesh, &l);
    l.sequence_parallel = l.loss_parallel = l.tp_dim >= 0;
    tl_model m;
    R_OK(tl_model_init(&m, mesh, &cfg, &l, 1234));
    dt_fsdp *f = dt_params_fsdp(m.params);
    r->has_fsdp = f != NULL;
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    int rank = dt_ctx_rank(ctx);
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        if (r->accum) { /* the same batch as an earlier micro-batch, its gradient kept local */
            R_OK(dt_ctx_set_grad_sync(ctx, 0));
            R_OK(tl_loss(&m, tok, tgt, &loss));
            R_OK(dt_backward(loss));
            dt_tensor_release(loss);
            R_OK(dt_ctx_set_grad_sync(ctx, 1));
        }
        R_OK(dt_comm_stats_reset(ctx));
        if (f) R_OK(dt_fsdp_stats_reset(f));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_OK(dt_backward(loss));
        R_OK(dt_optim_step(opt));
        dt_comm_stats cs;
        R_OK(dt_comm_stats_get(ctx, &cs));
        if (f) R_OK(dt_fsdp_stats_get(f, &r->fs[s]));
        if (rank == 0 && s == 0 && getenv("DT_PRINT_COMMS"))
            dt_comm_stats_print(&cs, r->mesh, stderr);
        for (int k = 0; k < DT_COLL_KIND_COUNT && rank == 0; k++)
            r->colls[s] += cs.calls[k];
        float *g = NULL;
        size_t n = 0;
        R_OK(grads(&m, r, &g, &n));
        if (rank == 0)
            r->grad[s] = g, r->ngrad = n;
        else
            free(g);
        R_OK(dt_optim_zero_grad(opt));
        R_OK(dt_tensor_full_tensor(loss, &r->loss[s], sizeof r->loss[s]));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    R_OK(dt_optim_destroy(opt));
    tl_model_free(&m);
    return dt_mesh_release(mesh);
}

static void expect_losses(const run *r, const run *ref) {
    for (int s = 0; s < STEPS; s++)
        cr_expect(fabsf(r->loss[s] - ref->loss[s]) <= 1e-5f * fabsf(ref->loss[s]),
                  "%s step %d: loss %.8g, one rank %.8g", r->mesh, s, r->loss[s], ref->loss[s]);
}

/* r's gradients against ref's over the first steps: each gradient tensor's difference within
 * 1e-5 of its norm (the reductions add in another order). */
static void expect_grads(const run *r, const run *ref, int steps) {
    cr_assert_eq(r->ngrad, ref->ngrad);
    for (int s = 0; s < steps; s++) {
        size_t at = 0;
        for (int i = 0; i < ref->np; i++) {
            size_t k = ref->numel[i];
            double big = 0, diff = 0;
            for (size_t e = at; e < at + k; e++) {
                double d = (double)r->grad[s][e] - ref->grad[s][e];
                big += (double)ref->grad[s][e] * ref->grad[s][e], diff += d * d;
            }
            cr_expect(sqrt(diff) <= 1e-5 * sqrt(big),
                      "%s step %d: parameter %d's gradient differs by %g (norm %g) from %s's",
                      r->mesh, s, i, sqrt(diff), sqrt(big), ref->mesh);
            at += k;
        }
    }
}

static void free_run(run *r) {
    for (int s = 0; s < STEPS; s++)
        free(r->grad[s]);
}

/* Collectives per step of make train's model, derived from its units, not from the code:
 * units U = 3 (the root: tok_embeddings, norm, output; one per block), all far smaller than
 * DT_FSDP_COALESCE_BYTES together. Forward gathers each unit once (3 unit gathers, as one
 * collective: the root's carries the blocks'; the output finds the root still gathered);
 * backward gathers again the units resharded after forward, all but the root and the last
 * block (1); one reduce_scatter per unit (3), as one collective at the end of backward; no
 * gradient all_reduce over dp (every parameter is in a unit, its gradient left Shard over
 * dp). dp=4: 1 + 1 + 1 = 3.
 * dp=2 x tp=2 adds tp's: with sequence parallelism each block all_gathers the sequence before
 * attention and before the feed-forward and reduce_scatters wo's and w2's outputs (2 + 2),
 * the embedding reduce_scatters its output (1) and the output projection all_gathers its
 * input (1): 5 + 5 in forward and their duals 5 + 5 in backward; loss parallelism
 * all_reduces two per-row statistics of the vocab-sharded logits (2), and grad sync one
 * bucket of the norms' weight gradients, Partial over tp (1). 3 + 20 + 3 = 26. */
Test(fully_shard, make_train_counts_losses_and_gradients) {
    run ref = {.mesh = "1", .ranks = 1}, ref_acc = {.mesh = "1", .ranks = 1, .accum = 1};
    t_run(1, body, &ref);
    t_run(1, body, &ref_acc);
    cr_assert(!ref.has_fsdp, "one rank has no dp dim, so no units");
    /* tp splits the matmuls' sums, and AdamW's first steps turn rounding-sized gradient
     * differences into sign-sized updates, so past step 0 dp x tp's gradients are checked
     * against FSDP on the same mesh without units (each parameter gathered at its use; it
     * differs from one rank as much: about 3e-5 of a gradient's norm at steps 1 and 2) */
    run per_param = {.mesh = "dp=2,tp=2", .ranks = 4, .per_param = 1};
    t_run(4, body, &per_param);
    expect_losses(&per_param, &ref);
    expect_grads(&per_param, &ref, 1);
    struct {
        run r;
        uint64_t colls;
        const run *ref, *grad_ref;
        int64_t unit_all_reduces;
    } cases[] = {
        {{.mesh = "dp=4", .ranks = 4}, 3, &ref, &ref},
        /* each unit alone, as FSDP2: 3 gathers + 1 + 3 reduce_scatters */
        {{.mesh = "dp=4", .ranks = 4, .no_coalesce = 1}, 3 + 1 + 3, &ref, &ref},
        {{.mesh = "dp=2,tp=2", .ranks = 4}, 26, &ref, &per_param},
        /* HSDP: units over dp_shard, each unit's reduce_scatter on its own (its reduced shards
         * are all_reduced over dp_replicate, packed: 1 + 1 + 3), and that all_reduce (3) */
        {{.mesh = "dp_replicate=2,dp_shard=2", .ranks = 4}, 5 + 3, &ref, &ref, 3},
        /* plus one reduce_scatter per parameter (21) at the synced backward: the micro-batch's
         * gradients, which grad sync off left on the leaves (dtensor/fsdp.h) */
        {{.mesh = "dp=4", .ranks = 4, .accum = 1}, 3 + 21, &ref_acc, &ref_acc},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run *r = &cases[c].r;
        t_run(r->ranks, body, r);
        cr_assert(r->has_fsdp, "%s: no units", r->mesh);
        for (int s = 0; s < STEPS; s++) {
            cr_expect_eq(r->colls[s], cases[c].colls, "%s%s step %d: %llu collectives, want %llu",
                         r->mesh, r->accum ? " accum" : "", s, (unsigned long long)r->colls[s],
                         (unsigned long long)cases[c].colls);
            const dt_fsdp_stats *fs = &r->fs[s];
            cr_expect(fs->forward_gathers == 3 && fs->backward_gathers == 1 &&
                          fs->reduce_scatters == 3 && fs->all_reduces == cases[c].unit_all_reduces,
                      "%s step %d: unit gathers %lld + %lld, reduce_scatters %lld, all_reduces "
                      "%lld (want 3 + 1, 3, %lld)",
                      r->mesh, s, (long long)fs->forward_gathers, (long long)fs->backward_gathers,
                      (long long)fs->reduce_scatters, (long long)fs->all_reduces,
                      (long long)cases[c].unit_all_reduces);
        }
        expect_losses(r, cases[c].ref);
        expect_grads(r, cases[c].ref, 1);
        expect_grads(r, cases[c].grad_ref, STEPS);
        cr_log_info("%s%s: %llu collectives per step, loss %.7g -> %.7g as on one rank", r->mesh,
                    r->accum ? " accum" : "", (unsigned long long)r->colls[0], r->loss[0],
                    r->loss[STEPS - 1]);
        free_run(r);
    }
    free_run(&per_param);
    free_run(&ref), free_run(&ref_acc);
}

/* ---- wrong declarations ------------------------------------------------------------------ */

/* A small model on mesh: groups "embed", "layers.0", "layers.1" (with an expert bank when
 * experts), "head". */
static dt_status small(dt_mesh *mesh, int experts, dt_params **out) {
    dt_params *p;
    dt_module m;
    dt_init init = {DT_INIT_NORMAL, 0.5};
    R_OK(dt_params_create(mesh, DT_F32, &p));
    R_OK(dt_params_begin_group(p, "embed"));
    R_OK(dt_nn_embedding_create(p, "tok", 8, 4, init, &m));
    for (int b = 0; b < 2; b++) {
        char g[16], n[32];
        snprintf(g, sizeof g, "layers.%d", b);
        snprintf(n, sizeof n, "layers.%d.w", b);
        R_OK(dt_params_begin_group(p, g));
        R_OK(dt_nn_linear_create(p, n, 4, 4, 0, init, &m));
    }
    if (experts) {
        int64_t shape[3] = {2, 4, 4};
        R_OK(dt_params_module(p, "layers.1.experts", DT_MODULE_EXPERTS, &m));
        R_OK(dt_params_declare(m, "w1", 3, shape, init, NULL));
    }
    R_OK(dt_params_begin_group(p, "head"));
    R_OK(dt_nn_rms_norm_create(p, "norm", 4, 1e-5, &m));
    R_OK(dt_nn_linear_create(p, "out", 4, 8, 0, init, &m));
    *out = p;
    return DT_OK;
}

static dt_status no_hook(void *user, dt_params *params, int i, dt_tensor *stored, int ncompute,
                         const dt_placement *compute, dt_tensor **out) {
    (void)user, (void)params, (void)i;
    return dt_tensor_redistribute(stored, ncompute, compute, out);
}

/* Every rank runs every wrong declaration and checks its status and message; t_run passes
 * only when all four ranks did. */
static dt_status errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh, *other, *pp, *stage;
    dt_params *p;
    dt_module m;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    R_OK(small(mesh, 0, &p));
    R_ERR(dt_fully_shard(p, "blocks.*", NULL), DT_ERR_ARG, "\"blocks.*\" matches no group");
    R_ERR(dt_fully_shard(NULL, "layers.*", NULL), DT_ERR_ARG, "params");
    dt_fully_shard_options bad = {.reshard_after_forward = (dt_reshard)7};
    R_ERR(dt_fully_shard(p, "layers.*", &bad), DT_ERR_ARG, "reshard_after_forward = 7");
    bad = (dt_fully_shard_options){.dp_dim = "ep"};
    R_ERR(dt_fully_shard(p, "layers.*", &bad), DT_ERR_ARG, "dp_dim = \"ep\" names no dim");
    R_OK(dt_fully_shard(p, "layers.*", NULL));
    /* the declaration shows in the placements at once: Shard(0) over dp, Replicate over tp */
    int w;
    dt_placement stored[2];
    R_OK(dt_params_find(p, "layers.0.w.weight", &w));
    R_OK(dt_params_placements(p, w, stored, NULL));
    R_CHECK(dt_placement_equal(stored[0], dt_shard(0)) &&
                dt_placement_equal(stored[1], dt_replicate()),
            "layers.0.w.weight is not stored S(0),R after its unit's declaration");
    /* a parameter in two units */
    R_ERR(dt_fully_shard(p, "layers.1", NULL), DT_ERR_ARG, "group \"layers.1\" is a unit already");
    R_OK(dt_fully_shard(p, NULL, NULL));
    R_ERR(dt_fully_shard(p, NULL, NULL), DT_ERR_ARG, "root unit (pattern NULL) is declared");
    bad = (dt_fully_shard_options){.no_prefetch = 1};
    R_ERR(dt_fully_shard(p, "embed", &bad), DT_ERR_ARG, "no_prefetch = 1");
    bad = (dt_fully_shard_options){.no_coalesce = 1};
    R_ERR(dt_fully_shard(p, "embed", &bad), DT_ERR_ARG, "no_coalesce = 1");
    /* the order: the model, its plan, the units, then materialize */
    R_ERR(dt_params_module(p, "extra", DT_MODULE_NORM, &m), DT_ERR_ARG,
          "FSDP units are declared already");
    dt_parallelize_options plan = {.tp_dim = 1, .dp_dim = -1};
    R_ERR(dt_parallelize(p, &plan), DT_ERR_ARG, "FSDP units are declared already");
    R_ERR(dt_params_set_use_hook(p, no_hook, NULL), DT_ERR_ARG, "FSDP units");
    dt_generator gen = dt_generator_make(1);
    R_OK(dt_params_materialize(p, &gen));
    R_CHECK(dt_params_fsdp(p) != NULL, "no FSDP state after materialize");
    R_ERR(dt_fully_shard(p, "head", NULL), DT_ERR_ARG, "materialized already");
    R_OK(dt_params_destroy(p));
    /* the dp dim: not the tp dim, dt_parallelize's DT_DP_SHARD dim, one per registry */
    R_OK(small(mesh, 0, &p));
    R_OK(dt_parallelize(p, &plan));
    bad = (dt_fully_shard_options){.dp_dim = "tp"};
    R_ERR(dt_fully_shard(p, "layers.*", &bad), DT_ERR_ARG, "\"tp\" is dt_parallelize's tp_dim");
    R_OK(dt_params_set_use_hook(p, no_hook, NULL));
    R_ERR(dt_fully_shard(p, "layers.*", NULL), DT_ERR_ARG, "use hook");
    R_OK(dt_params_destroy(p));
    R_OK(dt_mesh_create_str(ctx, "dp_replicate=2,dp_shard=2", &other));
    R_OK(small(other, 0, &p));
    plan = (dt_parallelize_options){.tp_dim = -1, .dp_dim = 1, .dp_mode = DT_DP_SHARD};
    R_OK(dt_parallelize(p, &plan));
    bad = (dt_fully_shard_options){.dp_dim = "dp_replicate"};
    R_ERR(dt_fully_shard(p, "layers.*", &bad), DT_ERR_ARG, "DT_DP_SHARD");
    R_OK(dt_params_destroy(p));
    R_OK(small(other, 0, &p));
    R_OK(dt_fully_shard(p, "layers.*", NULL)); /* "dp_shard", the default */
    R_ERR(dt_fully_shard(p, NULL, &bad), DT_ERR_ARG,
          "earlier call declared units over \"dp_shard\"");
    R_OK(dt_params_destroy(p));
    R_OK(dt_mesh_release(other));
    /* a mesh with no dp dim */
    R_OK(dt_mesh_create_str(ctx, "x=2,tp=2", &other));
    R_OK(small(other, 0, &p));
    R_ERR(dt_fully_shard(p, NULL, NULL), DT_ERR_ARG, "no dim named \"dp_shard\" or \"dp\"");
    R_OK(dt_params_destroy(p));
    R_OK(dt_mesh_release(other));
    /* a pipeline stage's mesh (dt_pipeline_stage_mesh cuts the pp dim off so) */
    const char *dp_name = "dp";
    R_OK(dt_mesh_create_str(ctx, "pp=2,dp=2", &pp));
    R_OK(dt_mesh_submesh(pp, &dp_name, 1, &stage));
    R_OK(small(stage, 0, &p));
    R_ERR(dt_fully_shard(p, "layers.*", NULL), DT_ERR_UNSUPPORTED, "pipeline stage");
    R_OK(dt_params_destroy(p));
    R_OK(dt_mesh_release(stage));
    R_OK(dt_mesh_release(pp));
    /* expert banks */
    R_OK(small(mesh, 1, &p));
    R_ERR(dt_fully_shard(p, "layers.*", NULL), DT_ERR_UNSUPPORTED,
          "\"layers.1.experts.w1\" is in an expert bank");
    R_ERR(dt_fully_shard(p, NULL, NULL), DT_ERR_UNSUPPORTED, "expert bank");
    R_OK(dt_params_destroy(p));
    return dt_mesh_release(mesh);
}

Test(fully_shard, wrong_declarations_fail_on_every_rank) {
    t_run(4, errors_body, NULL);
}

/* ---- forwards without a backward --------------------------------------------------------- */

static uint64_t all_gathers(dt_ctx *ctx) {
    dt_comm_stats cs;
    return dt_comm_stats_get(ctx, &cs) == DT_OK ? cs.calls[DT_COLL_ALL_GATHER] : 0;
}

/* dp=4: a forward with grad mode off gathers each parameter at its use (21 all_gathers, the
 * units untouched); the first forward gathers the three units in one collective (the root's
 * carries the blocks', DT_FSDP_COALESCE_BYTES); a forward no backward followed leaves the
 * root and the last block gathered, so the next forward gathers only the first block again
 * (1: nothing prefetches a unit still held), unless dt_params_reshard made it gather all
 * three: the root's gather carries the first block's, and the last block, still held (so
 * nothing gathers it ahead), gathers at its use (2); the losses stay the same. */
static dt_status no_backward_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=4", &mesh));
    tl_layout l = {.fsdp = 1, .fsdp_units = 1};
    tl_layout_find_dims(mesh, &l);
    tl_model m;
    R_OK(tl_model_init(&m, mesh, &cfg, &l, 1234));
    dt_fsdp *f = dt_params_fsdp(m.params);
    dt_tensor *tok, *tgt, *loss;
    float v[4];
    dt_fsdp_stats fs;
    R_OK(tl_batch(&m, NULL, 0, 0, &tok, &tgt));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_no_grad_enter(ctx));
    R_OK(tl_loss(&m, tok, tgt, &loss));
    R_OK(dt_no_grad_exit(ctx));
    R_OK(dt_fsdp_stats_get(f, &fs));
    R_CHECK(all_gathers(ctx) == 21 && fs.forward_gathers == 0,
            "no-grad forward: %llu all_gathers, %lld by units (want 21, 0)",
            (unsigned long long)all_gathers(ctx), (long long)fs.forward_gathers);
    R_OK(dt_tensor_full_tensor(loss, &v[0], sizeof v[0]));
    dt_tensor_release(loss);
    uint64_t want[3] = {1, 1, 2};
    for (int k = 1; k < 4; k++) {
        if (k == 3) R_OK(dt_params_reshard(m.params));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_CHECK(all_gathers(ctx) == want[k - 1], "forward %d: %llu all_gathers, want %llu", k,
                (unsigned long long)all_gathers(ctx), (unsigned long long)want[k - 1]);
        R_OK(dt_tensor_full_tensor(loss, &v[k], sizeof v[k]));
        R_CHECK(v[k] == v[0], "forward %d: loss %.9g, the no-grad forward's %.9g", k, v[k], v[0]);
        if (k < 3) dt_tensor_release(loss);
    }
    R_OK(dt_backward(loss)); /* the last forward's graph backwards through its units */
    R_OK(dt_fsdp_stats_get(f, &fs));
    R_CHECK(fs.reduce_scatters == 3, "%lld unit reduce_scatters", (long long)fs.reduce_scatters);
    dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    tl_model_free(&m);
    return dt_mesh_release(mesh);
}

Test(fully_shard, forwards_without_backward) {
    t_run(4, no_backward_body, NULL);
}

/* ---- reshard_after_forward --------------------------------------------------------------- */

typedef struct reshard_run {
    dt_reshard root, blocks;
    dt_fsdp_stats fs;
    float grads[128]; /* rank 0: every parameter's full gradient */
} reshard_run;

/* small()'s model on dp=4, its blocks and root declared with r's choices: embedding, the two
 * linears, norm, output, the sum of squares; one forward and backward. */
static dt_status reshard_body(dt_ctx *ctx, void *arg) {
    reshard_run *r = arg;
    dt_mesh *mesh;
    dt_params *p;
    R_OK(dt_mesh_create_str(ctx, "dp=4", &mesh));
    R_OK(small(mesh, 0, &p));
    dt_fully_shard_options o = {.reshard_after_forward = r->blocks};
    R_OK(dt_fully_shard(p, "layers.*", &o));
    o.reshard_after_forward = r->root;
    R_OK(dt_fully_shard(p, NULL, &o));
    dt_generator gen = dt_generator_make(5);
    R_OK(dt_params_materialize(p, &gen));
    int64_t tok[12], shape[2] = {4, 3};
    for (int i = 0; i < 12; i++)
        tok[i] = (i * 5 + 1) % 8;
    dt_placement s0 = dt_shard(0);
    dt_tensor *tokens, *loss;
    R_OK(dt_tensor_distribute(mesh, tok, DT_I64, 2, shape, 1, &s0, DT_ALL_RANKS, &tokens));
    dt_scope *s;
    R_OK(dt_scope_create(&s));
    /* modules in declaration order: tok, layers.0.w, layers.1.w, norm, out */
    dt_tensor *x = dt_nn_embedding_forward(s, (dt_module){p, 0}, tokens);
    x = dt_nn_linear_forward(s, (dt_module){p, 1}, x);
    x = dt_nn_linear_forward(s, (dt_module){p, 2}, x);
    x = dt_nn_rms_norm_forward(s, (dt_module){p, 3}, x);
    x = dt_nn_linear_forward(s, (dt_module){p, 4}, x);
    x = DT_DO(s, dt_mul, x, x);
    R_OK(dt_scope_end(s, DT_DO(s, dt_sum, x, NULL, 0, 0), &loss));
    R_OK(dt_backward(loss));
    R_OK(dt_fsdp_stats_get(dt_params_fsdp(p), &r->fs));
    float *at = r->grads;
    for (int i = 0; i < dt_params_count(p); i++) {
        dt_tensor *w;
        dt_tensor_info info;
        R_OK(dt_params_at(p, i, NULL, &w));
        R_OK(dt_tensor_info_get(w, &info));
        size_t k = numel(&info);
        R_CHECK(at + k <= r->grads + 128, "gradients outgrow the buffer");
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(w), at, sizeof *at * k));
        at += k;
    }
    dt_tensor_release(loss), dt_tensor_release(tokens);
    R_OK(dt_params_destroy(p));
    return dt_mesh_release(mesh);
}

/* Units: root (tok, norm, out), layers.0, layers.1; forward gathers each once (3). Backward
 * gathers again what resharded after forward: AUTO, layers.0 (1); the root resharding too
 * (ON), which its forward spans whole, ending when backward begins: 2; nothing (OFF): 0;
 * everything: 3. The gradients are the same bits each way. */
Test(fully_shard, reshard_after_forward) {
    reshard_run runs[] = {{DT_RESHARD_AUTO, DT_RESHARD_AUTO},
                          {DT_RESHARD_ON, DT_RESHARD_AUTO},
                          {DT_RESHARD_OFF, DT_RESHARD_OFF},
                          {DT_RESHARD_ON, DT_RESHARD_ON}};
    const int64_t want[] = {1, 2, 0, 3};
    for (int k = 0; k < 4; k++) {
        t_run(4, reshard_body, &runs[k]);
        cr_expect(runs[k].fs.forward_gathers == 3 && runs[k].fs.backward_gathers == want[k] &&
                      runs[k].fs.reduce_scatters == 3,
                  "root %d blocks %d: gathers %lld + %lld, reduce_scatters %lld (want 3 + %lld, 3)",
                  (int)runs[k].root, (int)runs[k].blocks, (long long)runs[k].fs.forward_gathers,
                  (long long)runs[k].fs.backward_gathers, (long long)runs[k].fs.reduce_scatters,
                  (long long)want[k]);
        cr_expect(!memcmp(runs[k].grads, runs[0].grads, sizeof runs[0].grads),
                  "root %d blocks %d: other gradients than AUTO's", (int)runs[k].root,
                  (int)runs[k].blocks);
    }
}
