/* FSDP units and activation checkpointing on a small transformer (an embedding, NB pre-norm
 * blocks of attention and a SwiGLU MLP, a final norm and a vocabulary head) trained a few AdamW
 * steps: FSDP on dp=4, FSDP x TP on 2x2 and HSDP on 2x2 give the one-rank loss curve within
 * 1e-5 relative (f32); resharding after forward or not, and prefetching or not, give the same
 * bits; each unit costs one all_gather in forward, one in backward when resharded and one
 * reduce_scatter; a rank holds a quarter of the parameter bytes on dp=4; and each activation
 * checkpointing policy gives the gradients of none bit for bit, full with a lower activation
 * peak than none. */
#include <math.h>
#include <stdlib.h>

#include "dtensor/tensor_impl.h"
#include "helpers.h"

#include "../../examples/fsdp_model.h"

enum { NB = 3, NP = 1 + NB * FM_BLOCK_PARAMS + 2, NU = NB + 2, STEPS = 3, MAXR = 4 };

static const fm_config cfg = {.vocab = 11, .seq = 6, .batch = 4, .dim = 8, .heads = 2,
                              .hidden = 16, .blocks = NB};

typedef struct layout {
    const char *name;
    fm_layout m;
} layout;

typedef struct run {
    layout l;
    int accum;     /* a micro-batch before each step's batch, its backward with grad sync off */
    int keep_last; /* the last unit stays gathered after its forward */
    float loss[STEPS];
    int64_t ag[STEPS], rs[STEPS]; /* all_gathers and reduce_scatters on the dp group, rank 0 */
    dt_fsdp_stats fs;
    int64_t param_bytes, act_peak[MAXR];
    float *grads[MAXR]; /* every parameter's local gradient after step 0, per rank */
    size_t ngrads[MAXR];
} run;

/* fsdp: 0 none (replicated), 1 resharding after forward, 2 kept, 3 without prefetch, 4 the last
 * unit kept */
static layout mk(const char *name, int n0, int n1, const char *d0, const char *d1, int dp,
                 int rep, int tp, int fsdp) {
    layout l = {name, {.ndim = n1 ? 2 : 1, .shape = {n0, n1}, .names = {d0, d1}, .dp_dim = dp,
                       .rep_dim = rep, .tp_dim = tp, .fsdp = fsdp != 0,
                       .fsdp_options = dt_fsdp_options_default(), .ac = DT_AC_NONE}};
    l.m.fsdp_options.dp_dim = dp < 0 ? 0 : dp;
    l.m.fsdp_options.reshard_after_forward = fsdp != 2;
    l.m.fsdp_options.prefetch = fsdp != 3;
    return l;
}

static dt_status grads_keep(run *r, fm_model *m, int rank) {
    size_t n = 0;
    for (int i = 0; i < NP; i++) n += m->p[i]->local_numel;
    r->grads[rank] = malloc(sizeof(float) * (n ? n : 1));
    R_CHECK(r->grads[rank], "out of memory");
    r->ngrads[rank] = n;
    float *g = r->grads[rank];
    for (int i = 0; i < NP; i++) {
        dt_tensor *gi = dt_tensor_grad(m->p[i]);
        R_CHECK(gi, "parameter %d has no gradient", i);
        for (int d = 0; d < m->l.ndim; d++)
            R_CHECK(dt_placement_equal(gi->placements[d], m->p[i]->placements[d]),
                    "parameter %d's gradient is not in its placements", i);
        R_OK(dt_tensor_local_to_host(gi, g, gi->local_numel * sizeof(float)));
        g += gi->local_numel;
    }
    return DT_OK;
}

static dt_status train_body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    const fm_layout *l = &r->l.m;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, l->ndim, l->shape, l->names, &mesh));
    fm_model m;
    R_OK(fm_init(&m, mesh, &cfg, l, 77));
    if (r->keep_last) R_OK(dt_fsdp_unit_set_reshard_after_forward(m.fsdp, NU - 1, 0));
    dt_adamw_options adamw = {.lr = 0.02, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                              .weight_decay = 0.1};
    dt_param_group all = {.params = m.p, .n = NP};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create(&adamw, &all, 1, &opt));
    int64_t pb = 0;
    for (int i = 0; i < NP; i++) pb += (int64_t)(m.p[i]->local_numel * sizeof(float));
    if (rank == 0) r->param_bytes = pb;
    if (m.fsdp) R_OK(dt_fsdp_stats_reset(m.fsdp));
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss = NULL;
        if (r->accum) { /* gradient accumulation: reduced once, by the synced backward */
            dt_tensor *mt, *mg, *ml;
            R_OK(fm_batch(&m, 100 + s, &mt, &mg));
            R_OK(dt_ctx_set_grad_sync(ctx, 0));
            R_OK(fm_loss(&m, mt, mg, &ml));
            R_OK(dt_backward(ml));
            R_OK(dt_ctx_set_grad_sync(ctx, 1));
            dt_tensor_release(ml), dt_tensor_release(mt), dt_tensor_release(mg);
        }
        R_OK(fm_batch(&m, s, &tok, &tgt));
        dt_tensor_memory mem;
        R_OK(dt_ctx_tensor_memory(ctx, &mem));
        int64_t base = mem.bytes;
        R_OK(dt_ctx_reset_peak(ctx));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(fm_loss(&m, tok, tgt, &loss));
        R_OK(dt_backward(loss));
        R_OK(dt_ctx_tensor_memory(ctx, &mem));
        int64_t peak = mem.peak_bytes - base;
        if (peak > r->act_peak[rank]) r->act_peak[rank] = peak;
        if (rank == 0) {
            r->ag[s] = fm_issued_on_dp(ctx, l, DT_COLL_ALL_GATHER);
            r->rs[s] = fm_issued_on_dp(ctx, l, DT_COLL_REDUCE_SCATTER);
        }
        R_OK(dt_tensor_full_tensor(loss, &r->loss[s], sizeof r->loss[s]));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
        if (s == 0) R_OK(grads_keep(r, &m, rank));
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
    }
    if (m.fsdp && rank == 0) R_OK(dt_fsdp_stats_get(m.fsdp, &r->fs));
    R_OK(dt_optim_destroy(opt));
    fm_free(&m);
    dt_mesh_release(mesh);
    /* Everything went: parameters, gathered copies, optimizer state, the graph */
    dt_tensor_memory left;
    R_OK(dt_ctx_tensor_memory(ctx, &left));
    int64_t live = left.tensors, bytes = left.bytes;
    R_CHECK(live == 0 && bytes == 0, "%lld tensors (%lld bytes) outlive the run",
            (long long)live, (long long)bytes);
    return DT_OK;
}

static void train(run *r) {
    const fm_layout *l = &r->l.m;
    t_run(l->ndim == 1 ? l->shape[0] : l->shape[0] * l->shape[1], train_body, r);
}

static void run_free(run *r) {
    for (int i = 0; i < MAXR; i++) free(r->grads[i]);
}

static void assert_close(const run *r, const run *ref) {
    for (int s = 0; s < STEPS; s++)
        cr_assert(fabsf(r->loss[s] - ref->loss[s]) <= 1e-5f * fabsf(ref->loss[s]),
                  "%s step %d: loss %.8g, one rank %.8g", r->l.name, s, r->loss[s], ref->loss[s]);
}

static void assert_same_bits(const run *a, const run *b) {
    cr_assert(!memcmp(a->loss, b->loss, sizeof a->loss), "%s and %s: loss curves differ",
              a->l.name, b->l.name);
    for (int k = 0; k < MAXR; k++) {
        cr_assert_eq(a->ngrads[k], b->ngrads[k]);
        if (a->ngrads[k])
            cr_assert(!memcmp(a->grads[k], b->grads[k], a->ngrads[k] * sizeof(float)),
                      "%s and %s: rank %d's gradients differ", a->l.name, b->l.name, k);
    }
}

Test(fsdp, loss_curves_counts_and_memory) {
    run ref = {.l = mk("one", 1, 0, "dp", NULL, -1, -1, -1, 0)};
    train(&ref);
    cr_assert(ref.loss[STEPS - 1] < ref.loss[0], "one rank did not learn: %g -> %g", ref.loss[0],
              ref.loss[STEPS - 1]);
    const layout layouts[] = {
        mk("fsdp dp=4", 4, 0, "dp", NULL, 0, -1, -1, 1),
        mk("fsdp dp=4 kept", 4, 0, "dp", NULL, 0, -1, -1, 2),
        mk("fsdp dp=4 no prefetch", 4, 0, "dp", NULL, 0, -1, -1, 3),
        mk("fsdp x tp 2x2", 2, 2, "dp", "tp", 0, -1, 1, 1),
        mk("hsdp 2x2", 2, 2, "rep", "dp", 1, 0, -1, 1),
        mk("fsdp dp=3", 3, 0, "dp", NULL, 0, -1, -1, 1),
        mk("fsdp dp=4 last kept", 4, 0, "dp", NULL, 0, -1, -1, 1),
    };
    /* The same meshes with replicated parameters: the collectives the model itself issues on
     * the dp group (dispatch's choices for batch-sharded activations) */
    const layout plain[] = {
        mk("ddp dp=4", 4, 0, "dp", NULL, 0, -1, -1, 0),
        mk("ddp x tp 2x2", 2, 2, "dp", "tp", 0, -1, 1, 0),
        mk("ddp 2x2", 2, 2, "rep", "dp", 1, 0, -1, 0),
        mk("ddp dp=3", 3, 0, "dp", NULL, 0, -1, -1, 0),
    };
    static const int plain_of[7] = {0, 0, 0, 1, 2, 3, 0};
    run base[4];
    for (int i = 0; i < 4; i++) {
        base[i] = (run){.l = plain[i]};
        train(&base[i]);
        assert_close(&base[i], &ref);
    }
    run rs[7];
    for (int i = 0; i < 7; i++) {
        rs[i] = (run){.l = layouts[i], .keep_last = i == 6};
        train(&rs[i]);
        assert_close(&rs[i], &ref);
        const run *r = &rs[i], *b = &base[plain_of[i]];
        for (int s = 0; s < STEPS; s++) {
            /* one all_gather per unit forward, one more in backward when resharded; one
             * reduce_scatter per unit: on top of what the model issues with replicated
             * parameters */
            cr_assert_eq(r->ag[s] - b->ag[s],
                         NU * (r->l.m.fsdp_options.reshard_after_forward ? 2 : 1) - r->keep_last,
                         "%s step %d: %lld all_gathers, %lld with replicated parameters",
                         r->l.name, s, (long long)r->ag[s], (long long)b->ag[s]);
            cr_assert_eq(r->rs[s] - b->rs[s], NU, "%s step %d: %lld reduce_scatters, %lld with "
                         "replicated parameters", r->l.name, s, (long long)r->rs[s],
                         (long long)b->rs[s]);
        }
        cr_assert_eq(r->fs.reduce_scatters, STEPS * NU);
        /* HSDP: one all_reduce per unit over the replicate dim; FSDP x TP: one for each unit
         * whose gradients are all Partial over tp (the embedding's) */
        if (r->l.m.tp_dim < 0)
            cr_assert_eq(r->fs.all_reduces, r->l.m.rep_dim >= 0 ? STEPS * NU : 0,
                         "%s: %lld all_reduces", r->l.name, (long long)r->fs.all_reduces);
        cr_assert_eq(r->fs.forward_gathers + r->fs.backward_gathers,
                     (r->ag[0] - b->ag[0]) * STEPS);
        cr_log_info("%s: loss %.6g -> %.6g as on one rank; per step %lld all_gathers, %lld "
                    "reduce_scatters on the dp group (replicated: %lld, %lld); %lld prefetched in %d steps; parameters "
                    "%lld bytes per rank (one rank %lld), gathered at most %lld; %lld unit "
                    "all_reduces",
                    r->l.name, r->loss[0], r->loss[STEPS - 1], (long long)r->ag[0],
                    (long long)r->rs[0], (long long)b->ag[0], (long long)b->rs[0],
                    (long long)r->fs.prefetches, STEPS,
                    (long long)r->param_bytes, (long long)ref.param_bytes,
                    (long long)r->fs.max_gathered_bytes, (long long)r->fs.all_reduces);
    }
    /* resharding and prefetching change where the bytes are, not the values */
    assert_same_bits(&rs[0], &rs[1]);
    assert_same_bits(&rs[0], &rs[2]);
    cr_assert_eq(rs[1].fs.prefetches > 0, 1);
    cr_assert_eq(rs[2].fs.prefetches, 0);
    /* Every gather but the first unit's forward one is issued ahead of its use: each unit's
     * forward issues the next unit's, and each unit's backward the previous one's, also after
     * a last unit kept gathered (never refilled; its first gradient issues it). */
    for (int i = 0; i < 7; i += 6)
        cr_assert_eq(rs[i].fs.prefetches, (int64_t)STEPS * 2 * (NU - 1),
                     "%s: %lld gathers prefetched in %d steps, want %d", rs[i].l.name,
                     (long long)rs[i].fs.prefetches, STEPS, STEPS * 2 * (NU - 1));
    /* dp=4: rank 0 holds its torch.chunk of each parameter's first dim (3 of the 11 rows of
     * the embedding and the head, a quarter of the others) */
    int64_t want = 0;
    for (int i = 0; i < NP; i++) {
        int64_t shape[2];
        int nd = fm_param_shape(&cfg, i, shape);
        want += (shape[0] + 3) / 4 * (nd == 2 ? shape[1] : 1) * (int64_t)sizeof(float);
    }
    cr_assert_eq(rs[0].param_bytes, want, "dp=4: %lld parameter bytes on rank 0, want %lld (one "
                 "rank: %lld)", (long long)rs[0].param_bytes, (long long)want,
                 (long long)ref.param_bytes);
    /* at most the current unit and the prefetched one are gathered at once */
    cr_assert(rs[0].fs.max_gathered_bytes < ref.param_bytes / 2, "dp=4: %lld bytes gathered",
              (long long)rs[0].fs.max_gathered_bytes);
    assert_same_bits(&rs[0], &rs[6]);
    for (int i = 0; i < 7; i++) run_free(&rs[i]);
    for (int i = 0; i < 4; i++) run_free(&base[i]);
    run_free(&ref);
}

static void ac_policies(layout l) {
    /* the fixed modes (fm_model opens its regions with dt_ac_begin) */
    run r[DT_AC_MEASURED];
    for (int a = 0; a < DT_AC_MEASURED; a++) {
        l.m.ac = (dt_ac_mode)a;
        r[a] = (run){.l = l};
        train(&r[a]);
    }
    for (int a = 1; a < DT_AC_MEASURED; a++) assert_same_bits(&r[a], &r[0]);
    cr_log_info("%s: peak activation bytes on rank 0 (forward + backward, above parameters and "
                "optimizer state): none %lld, full %lld, selective %lld", l.name,
                (long long)r[0].act_peak[0], (long long)r[1].act_peak[0],
                (long long)r[2].act_peak[0]);
    /* byte counts, not timings: the same on every run */
    cr_assert(r[DT_AC_FULL].act_peak[0] < r[DT_AC_SELECTIVE].act_peak[0]);
    cr_assert(r[DT_AC_SELECTIVE].act_peak[0] < r[DT_AC_NONE].act_peak[0]);
    for (int a = 0; a < DT_AC_MEASURED; a++) run_free(&r[a]);
}

Test(fsdp, checkpointing_one_rank) { ac_policies(mk("one", 1, 0, "dp", NULL, -1, -1, -1, 0)); }

Test(fsdp, checkpointing_fsdp_x_tp) {
    ac_policies(mk("fsdp x tp 2x2", 2, 2, "dp", "tp", 0, -1, 1, 1));
}

Test(fsdp, gradient_accumulation) {
    run ref = {.l = mk("one", 1, 0, "dp", NULL, -1, -1, -1, 0), .accum = 1};
    train(&ref);
    const layout ls[] = {mk("fsdp dp=4 accumulating", 4, 0, "dp", NULL, 0, -1, -1, 1),
                         mk("fsdp x tp 2x2 accumulating", 2, 2, "dp", "tp", 0, -1, 1, 1)};
    for (int i = 0; i < 2; i++) {
        run r = {.l = ls[i], .accum = 1};
        train(&r);
        assert_close(&r, &ref);
        /* the unsynced backward reduces nothing: one reduce_scatter per unit per step */
        cr_assert_eq(r.fs.reduce_scatters, STEPS * NU);
        run_free(&r);
    }
    run_free(&ref);
}

static dt_status errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t shape[2] = {4, 3};
    dt_placement rep = dt_replicate(), s0 = dt_shard(0);
    dt_generator gen = dt_generator_make(5);
    dt_tensor *x, *y, *z, *o;
    R_OK(dt_tensor_randn(mesh, DT_F32, 2, shape, 1, &rep, &gen, &x));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    /* a tensor a region dropped is backward's alone */
    dt_ac_region *region, *second;
    R_OK(dt_ac_begin(ctx, DT_AC_FULL, &region));
    R_ERR(dt_ac_begin(ctx, DT_AC_FULL, &second), DT_ERR_ARG, "already open");
    R_OK(dt_exp(x, &y));
    R_OK(dt_mul(y, y, &z));
    R_OK(dt_ac_end(region, 1, &z));
    R_ERR(dt_add(y, y, &o), DT_ERR_ARG, "dropped");
    R_ERR(dt_tensor_redistribute(y, 1, &s0, &o), DT_ERR_ARG, "dropped");
    dt_tensor_release(y);
    dt_tensor *loss;
    R_OK(dt_sum(z, NULL, 0, 0, &loss));
    R_OK(dt_backward(loss)); /* y comes back for mul's rule */
    dt_tensor_release(loss), dt_tensor_release(z);
    dt_ac_mode mode;
    R_ERR(dt_ac_mode_parse("partial", &mode), DT_ERR_ARG, "partial");
    R_OK(dt_ac_mode_parse("selective", &mode));
    R_CHECK(mode == DT_AC_SELECTIVE && !strcmp(dt_ac_mode_name(mode), "selective"), "mode");
    /* FSDP arguments */
    dt_fsdp *f;
    dt_fsdp_options o3 = dt_fsdp_options_default();
    o3.dp_dim = 3;
    R_ERR(dt_fsdp_create(mesh, &o3, &f), DT_ERR_ARG, "dp_dim = 3");
    R_OK(dt_fsdp_create(mesh, NULL, &f));
    R_ERR(dt_fsdp_add_unit(f, 1, &x, NULL), DT_ERR_ARG, "params[0]");
    dt_tensor *full[1], *w, *w2;
    R_ERR(dt_fsdp_unit_begin(f, 0, full), DT_ERR_ARG, "unit = 0");
    R_OK(dt_fsdp_shard_param(f, x, &w));
    R_ERR(dt_fsdp_shard_param(f, w, &w2), DT_ERR_ARG, "not Replicate");
    R_OK(dt_fsdp_add_unit(f, 1, &w, NULL));
    /* a unit begun again before the backward of its last forward: that graph can no longer get
     * its gathered parameters back, and says so */
    R_OK(dt_fsdp_unit_begin(f, 0, full));
    R_OK(dt_sum(full[0], NULL, 0, 0, &loss));
    R_OK(dt_fsdp_unit_end(f, 0));
    R_OK(dt_fsdp_unit_begin(f, 0, full));
    R_OK(dt_fsdp_unit_end(f, 0));
    dt_tensor *sq;
    R_OK(dt_mul(loss, loss, &sq));
    R_ERR(dt_backward(sq), DT_ERR_ARG, "dropped");
    dt_tensor_release(sq), dt_tensor_release(loss);
    R_OK(dt_fsdp_destroy(f));
    dt_tensor_release(w), dt_tensor_release(x);
    return dt_mesh_release(mesh);
}

Test(fsdp, errors) { t_run(2, errors_body, NULL); }
