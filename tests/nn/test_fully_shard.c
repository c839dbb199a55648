/* FSDP units by declaration (dtensor/fsdp.h's dt_fully_shard) on the model of make train
 * (examples/tiny_llama.c with train.c's default sizes): the collectives per step equal the
 * hand-written units' (30 on dp=2 x tp=2 with sequence and loss parallelism, 7 on dp=4), the
 * losses and every gradient of a few AdamW steps equal the one-rank model's within 1e-5
 * relative (f32), also with a gradient-accumulation micro-batch (grad sync off) before each
 * step's, and every wrong declaration fails with its argument named, on every rank alike. */
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
    for (int d = 0; d < info->ndim; d++) n *= (size_t)info->shape[d];
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
    tl_layout l = {.fsdp = 1, .fsdp_units = !r->per_param};
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
        if (rank == 0 && s == 0 && getenv("DT_PRINT_COMMS")) dt_comm_stats_print(&cs, r->mesh, stderr);
        for (int k = 0; k < DT_COLL_KIND_COUNT && rank == 0; k++) r->colls[s] += cs.calls[k];
        float *g = NULL;
        size_t n = 0;
        R_OK(grads(&m, r, &g, &n));
        if (rank == 0) r->grad[s] = g, r->ngrad = n;
        else free(g);
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
    for (int s = 0; s < STEPS; s++) free(r->grad[s]);
}

/* Collectives per step of make train's model, derived from its units, not from the code:
 * units U = 3 (the root: tok_embeddings, norm, output; one per block). Forward gathers each
 * unit once (3: the output finds the root still gathered); backward gathers again the units
 * resharded after forward, all but the root and the last block (1); one reduce_scatter per
 * unit (3); no gradient all_reduce over dp (every parameter is in a unit, its gradient left
 * Shard over dp). dp=4: 3 + 1 + 3 = 7.
 * dp=2 x tp=2 adds tp's: with sequence parallelism each block all_gathers the sequence before
 * attention and before the feed-forward and reduce_scatters wo's and w2's outputs (2 + 2),
 * the embedding reduce_scatters its output (1) and the output projection all_gathers its
 * input (1): 5 + 5 in forward and their duals 5 + 5 in backward; loss parallelism
 * all_reduces two per-row statistics of the vocab-sharded logits (2), and grad sync one
 * bucket of the norms' weight gradients, Partial over tp (1). 7 + 20 + 3 = 30. */
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
    } cases[] = {
        {{.mesh = "dp=4", .ranks = 4}, 7, &ref, &ref},
        {{.mesh = "dp=2,tp=2", .ranks = 4}, 30, &ref, &per_param},
        /* plus one reduce_scatter per parameter (21) at the synced backward: the micro-batch's
         * gradients, which grad sync off left on the leaves (dtensor/fsdp.h) */
        {{.mesh = "dp=4", .ranks = 4, .accum = 1}, 7 + 21, &ref_acc, &ref_acc},
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
                          fs->reduce_scatters == 3 && fs->all_reduces == 0,
                      "%s step %d: unit gathers %lld + %lld, reduce_scatters %lld, all_reduces "
                      "%lld (want 3 + 1, 3, 0)",
                      r->mesh, s, (long long)fs->forward_gathers, (long long)fs->backward_gathers,
                      (long long)fs->reduce_scatters, (long long)fs->all_reduces);
        }
        expect_losses(r, cases[c].ref);
        expect_grads(r, cases[c].ref, 1);
        expect_grads(r, cases[c].grad_ref, STEPS);
        cr_log_info("%s%s: %llu collectives per step, loss %.7g -> %.7g as on one rank",
                    r->mesh, r->accum ? " accum" : "", (unsigned long long)r->colls[0],
                    r->loss[0], r->loss[STEPS - 1]);
        free_run(r);
    }
    free_run(&per_param);
    free_run(&ref), free_run(&ref_acc);
}
