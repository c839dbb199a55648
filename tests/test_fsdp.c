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

enum { NB = 3, BP = 9, NP = 1 + NB * BP + 2, NU = NB + 2, STEPS = 3, MAXR = 4 };

static const int vocab = 11, seq = 6, batch = 4, dim = 8, heads = 2, hidden = 16;

/* Parameter i's tp split and shape: per block attn_norm, wq, wk, wv, wo, mlp_norm, w1, w3, w2. */
enum { REP, COL, ROW };
static const int block_split[BP] = {REP, COL, COL, COL, ROW, REP, COL, COL, ROW};

static int param_split(int i) {
    if (i == 0 || i == NP - 2) return REP;
    if (i == NP - 1) return COL;
    return block_split[(i - 1) % BP];
}

static int param_shape(int i, int64_t *shape) {
    if (i == 0 || i == NP - 1) return shape[0] = vocab, shape[1] = dim, 2;
    if (i == NP - 2) return shape[0] = dim, 1;
    switch ((i - 1) % BP) {
    case 0:
    case 5: return shape[0] = dim, 1;
    case 6:
    case 7: return shape[0] = hidden, shape[1] = dim, 2;
    case 8: return shape[0] = dim, shape[1] = hidden, 2;
    default: return shape[0] = dim, shape[1] = dim, 2;
    }
}

typedef struct layout {
    const char *name;
    int ndim, shape[2];
    const char *names[2];
    int fsdp_dim, rep_dim, tp_dim; /* -1: none; rep_dim: HSDP's replicate dim */
    int reshard, prefetch;
    int replicated; /* plain data parallelism over fsdp_dim: no FSDP */
    dt_ac_mode ac;
} layout;

typedef struct run {
    layout l;
    float loss[STEPS];
    int64_t ag[STEPS], rs[STEPS]; /* all_gathers and reduce_scatters on the fsdp dim, rank 0 */
    dt_fsdp_stats fs;
    int64_t param_bytes, act_peak[MAXR];
    float *grads[MAXR]; /* every parameter's local gradient after step 0, per rank */
    size_t ngrads[MAXR];
} run;

typedef struct model {
    dt_mesh *mesh;
    const layout *l;
    dt_tensor *p[NP]; /* leaves (sharded over fsdp_dim under FSDP) */
    dt_fsdp *fsdp;    /* NULL without FSDP; units: embedding, blocks, head */
} model;

/* A forward's temporaries, released together; the first failure skips the later calls. */
typedef struct scope {
    dt_tensor *t[48], *last;
    int n;
    dt_status st;
} scope;

#define DO(s, call)                                                                                \
    ((s)->st == DT_OK && ((s)->st = (call)) == DT_OK ? ((s)->t[(s)->n++] = (s)->last) : NULL)

static dt_status scope_end(scope *s, dt_tensor *keep, dt_tensor **out) {
    if (s->st == DT_OK) dt_tensor_retain(*out = keep);
    for (int i = 0; i < s->n; i++) dt_tensor_release(s->t[i]);
    return s->st;
}

static dt_status model_init(model *m, dt_mesh *mesh, const layout *l) {
    *m = (model){.mesh = mesh, .l = l};
    dt_generator gen = dt_generator_make(77);
    if (l->fsdp_dim >= 0 && !l->replicated) {
        dt_fsdp_options o = dt_fsdp_options_default();
        o.dp_dim = l->fsdp_dim, o.reshard_after_forward = l->reshard, o.prefetch = l->prefetch;
        DT_CHECK(dt_fsdp_create(mesh, &o, &m->fsdp));
    }
    for (int i = 0; i < NP; i++) {
        int64_t shape[2];
        int nd = param_shape(i, shape);
        dt_placement pl[2] = {dt_replicate(), dt_replicate()};
        if (l->tp_dim >= 0 && param_split(i) != REP)
            pl[l->tp_dim] = dt_shard(param_split(i) == COL ? 0 : 1);
        dt_tensor *r, *w;
        if (nd == 1) DT_CHECK(dt_tensor_ones(mesh, DT_F32, 1, shape, l->ndim, pl, &w));
        else {
            DT_CHECK(dt_tensor_randn(mesh, DT_F32, 2, shape, l->ndim, pl, &gen, &r));
            DT_CHECK(dt_mul_scalar(r, i == 0 ? 1.0 : 1.0 / sqrt((double)shape[1]), &w));
            dt_tensor_release(r);
        }
        DT_CHECK(dt_tensor_set_requires_grad(w, 1));
        if (m->fsdp) {
            DT_CHECK(dt_fsdp_shard_param(m->fsdp, w, &m->p[i]));
            dt_tensor_release(w);
        } else m->p[i] = w;
    }
    if (m->fsdp) {
        DT_CHECK(dt_fsdp_add_unit(m->fsdp, 1, m->p, NULL));
        for (int b = 0; b < NB; b++) DT_CHECK(dt_fsdp_add_unit(m->fsdp, BP, m->p + 1 + b * BP, NULL));
        DT_CHECK(dt_fsdp_add_unit(m->fsdp, 2, m->p + NP - 2, NULL));
    }
    return DT_OK;
}

static void model_free(model *m) {
    dt_fsdp_destroy(m->fsdp);
    for (int i = 0; i < NP; i++) dt_tensor_release(m->p[i]);
}

/* Unit u's parameters as its forward uses them. */
static dt_status unit_begin(model *m, int u, int first, int n, dt_tensor **w) {
    if (m->fsdp) return dt_fsdp_unit_begin(m->fsdp, u, w);
    for (int i = 0; i < n; i++) w[i] = m->p[first + i];
    return DT_OK;
}

static dt_status unit_end(model *m, int u) { return m->fsdp ? dt_fsdp_unit_end(m->fsdp, u) : DT_OK; }

static dt_status block(model *m, int b, dt_tensor *x, dt_tensor **out) {
    int64_t B = batch, T = seq, hd = dim / heads;
    int64_t split_heads[4] = {B, T, heads, hd}, merged[3] = {B, T, dim};
    dt_tensor *w[BP];
    DT_CHECK(unit_begin(m, 1 + b, 1 + b * BP, BP, w));
    dt_ac_region *region;
    DT_CHECK(dt_ac_begin(dt_mesh_ctx(m->mesh), m->l->ac, &region));
    scope s = {0};
    dt_tensor *h = DO(&s, dt_rms_norm(x, w[0], 1e-5, &s.last)), *qkv[3];
    for (int i = 0; i < 3; i++) {
        dt_tensor *p = DO(&s, dt_linear(h, w[1 + i], NULL, &s.last));
        dt_tensor *p4 = DO(&s, dt_view(p, 4, split_heads, &s.last));
        qkv[i] = DO(&s, dt_transpose(p4, 1, 2, &s.last)); /* (B, heads, T, hd) */
    }
    dt_tensor *a = DO(&s, dt_sdpa(qkv[0], qkv[1], qkv[2], 1, &s.last));
    dt_tensor *a4 = DO(&s, dt_transpose(a, 1, 2, &s.last));
    dt_tensor *a3 = DO(&s, dt_view(a4, 3, merged, &s.last));
    dt_tensor *o = DO(&s, dt_linear(a3, w[4], NULL, &s.last));
    dt_tensor *x1 = DO(&s, dt_add(x, o, &s.last));
    dt_tensor *h2 = DO(&s, dt_rms_norm(x1, w[5], 1e-5, &s.last));
    dt_tensor *gate = DO(&s, dt_linear(h2, w[6], NULL, &s.last));
    dt_tensor *up = DO(&s, dt_linear(h2, w[7], NULL, &s.last));
    dt_tensor *mlp = DO(&s, dt_swiglu(gate, up, &s.last));
    dt_tensor *down = DO(&s, dt_linear(mlp, w[8], NULL, &s.last));
    dt_tensor *x2 = DO(&s, dt_add(x1, down, &s.last));
    dt_status st = dt_ac_end(region, x2 ? 1 : 0, &x2);
    if (s.st == DT_OK) s.st = st;
    DT_CHECK(scope_end(&s, x2, out));
    return unit_end(m, 1 + b);
}

static dt_status loss_of(model *m, dt_tensor *tok, dt_tensor *tgt, dt_tensor **out) {
    int64_t rows[2] = {batch * seq, vocab}, flat[1] = {batch * seq};
    dt_tensor *w[2], *x, *y = NULL;
    DT_CHECK(unit_begin(m, 0, 0, 1, w));
    DT_CHECK(dt_embedding(w[0], tok, &x));
    DT_CHECK(unit_end(m, 0));
    for (int b = 0; b < NB; b++) {
        dt_status st = block(m, b, x, &y);
        dt_tensor_release(x);
        DT_CHECK(st);
        x = y;
    }
    DT_CHECK(unit_begin(m, NU - 1, NP - 2, 2, w));
    scope s = {0};
    dt_tensor *h = DO(&s, dt_rms_norm(x, w[0], 1e-5, &s.last));
    dt_tensor *logits = DO(&s, dt_linear(h, w[1], NULL, &s.last));
    dt_tensor *lg = DO(&s, dt_view(logits, 2, rows, &s.last));
    dt_tensor *tg = DO(&s, dt_view(tgt, 1, flat, &s.last));
    dt_tensor *loss = DO(&s, dt_cross_entropy(lg, tg, DT_REDUCTION_MEAN, &s.last));
    dt_tensor_release(x);
    DT_CHECK(scope_end(&s, loss, out));
    return unit_end(m, NU - 1);
}

static dt_status batch_of(model *m, int step, dt_tensor **tok, dt_tensor **tgt) {
    int64_t n = (int64_t)batch * seq, shape[2] = {batch, seq}, buf[2 * 4 * 6];
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
    for (int b = 0; b < batch; b++) {
        int64_t prev = 0;
        for (int t = 0; t <= seq; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int64_t v = x % 4 ? (prev + 1) % vocab : (int64_t)(x >> 8) % vocab;
            if (t < seq) buf[b * seq + t] = v;
            if (t > 0) buf[n + b * seq + t - 1] = v;
            prev = v;
        }
    }
    dt_placement pl[2] = {dt_replicate(), dt_replicate()};
    if (m->l->fsdp_dim >= 0) pl[m->l->fsdp_dim] = dt_shard(0);
    if (m->l->rep_dim >= 0) pl[m->l->rep_dim] = dt_shard(0);
    DT_CHECK(dt_tensor_distribute(m->mesh, buf, DT_I64, 2, shape, m->l->ndim, pl, DT_ALL_RANKS, tok));
    return dt_tensor_distribute(m->mesh, buf + n, DT_I64, 2, shape, m->l->ndim, pl, DT_ALL_RANKS,
                                tgt);
}

/* Collectives of one kind on the group of the fsdp dim. */
static int64_t issued_on(dt_ctx *ctx, const layout *l, dt_coll_kind kind) {
    dt_comm_stats cs;
    dt_comm_stats_get(ctx, &cs);
    int64_t n = 0;
    for (int e = 0; e < cs.nentries; e++)
        if (cs.entries[e].kind == kind && l->fsdp_dim >= 0 &&
            !strcmp(cs.entries[e].group, l->names[l->fsdp_dim]))
            n += (int64_t)cs.entries[e].calls;
    return n;
}

static dt_status grads_keep(run *r, model *m, int rank) {
    size_t n = 0;
    for (int i = 0; i < NP; i++) n += m->p[i]->local_numel;
    r->grads[rank] = malloc(sizeof(float) * (n ? n : 1));
    R_CHECK(r->grads[rank], "out of memory");
    r->ngrads[rank] = n;
    float *g = r->grads[rank];
    for (int i = 0; i < NP; i++) {
        dt_tensor *gi = dt_tensor_grad(m->p[i]);
        R_CHECK(gi, "parameter %d has no gradient", i);
        for (int d = 0; d < m->l->ndim; d++)
            R_CHECK(dt_placement_equal(gi->placements[d], m->p[i]->placements[d]),
                    "parameter %d's gradient is not in its placements", i);
        R_OK(dt_tensor_local_to_host(gi, g, gi->local_numel * sizeof(float)));
        g += gi->local_numel;
    }
    return DT_OK;
}

static dt_status train_body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    const layout *l = &r->l;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, l->ndim, l->shape, l->names, &mesh));
    if (getenv("FSDP_DEBUG") && rank == 0) dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_LOG);
    model m;
    R_OK(model_init(&m, mesh, l));
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
        R_OK(batch_of(&m, s, &tok, &tgt));
        int64_t live, base;
        dt_ctx_live(ctx, &live, &base);
        dt_ctx_live_peak_reset(ctx);
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(loss_of(&m, tok, tgt, &loss));
        R_OK(dt_backward(loss));
        int64_t peak = dt_ctx_live_peak(ctx) - base;
        if (peak > r->act_peak[rank]) r->act_peak[rank] = peak;
        if (rank == 0 && getenv("FSDP_DEBUG")) {
            dt_comm_stats cs;
            dt_comm_stats_get(ctx, &cs);
            dt_comm_stats_print(&cs, l->name, stderr);
            dt_fsdp_stats fs = {0};
            if (m.fsdp) dt_fsdp_stats_get(m.fsdp, &fs);
            fprintf(stderr, "fsdp: fwd %lld bwd %lld pre %lld rs %lld\n", (long long)fs.forward_gathers,
                    (long long)fs.backward_gathers, (long long)fs.prefetches, (long long)fs.reduce_scatters);
        }
        if (rank == 0) {
            r->ag[s] = issued_on(ctx, l, DT_COLL_ALL_GATHER);
            r->rs[s] = issued_on(ctx, l, DT_COLL_REDUCE_SCATTER);
        }
        R_OK(dt_tensor_full(loss, &r->loss[s], sizeof r->loss[s]));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
        if (s == 0) R_OK(grads_keep(r, &m, rank));
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
    }
    if (m.fsdp && rank == 0) R_OK(dt_fsdp_stats_get(m.fsdp, &r->fs));
    R_OK(dt_optim_destroy(opt));
    model_free(&m);
    dt_mesh_release(mesh);
    /* Everything went: parameters, gathered copies, optimizer state, the graph */
    int64_t live, bytes;
    dt_ctx_live(ctx, &live, &bytes);
    R_CHECK(live == 0 && bytes == 0, "%lld tensors (%lld bytes) outlive the run",
            (long long)live, (long long)bytes);
    return DT_OK;
}

static int ranks_of(const layout *l) { return l->ndim == 1 ? l->shape[0] : l->shape[0] * l->shape[1]; }

static void train(run *r) {
    t_run(ranks_of(&r->l), train_body, r);
}

static void run_free(run *r) {
    for (int i = 0; i < MAXR; i++) free(r->grads[i]);
}

#define ONE {"one", 1, {1, 1}, {"dp", NULL}, -1, -1, -1, 1, 1, 0, DT_AC_NONE}

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
    run ref = {.l = ONE};
    train(&ref);
    cr_assert(ref.loss[STEPS - 1] < ref.loss[0], "one rank did not learn: %g -> %g", ref.loss[0],
              ref.loss[STEPS - 1]);
    static const layout layouts[] = {
        {"fsdp dp=4", 1, {4, 1}, {"dp", NULL}, 0, -1, -1, 1, 1, 0, DT_AC_NONE},
        {"fsdp dp=4 kept", 1, {4, 1}, {"dp", NULL}, 0, -1, -1, 0, 1, 0, DT_AC_NONE},
        {"fsdp dp=4 no prefetch", 1, {4, 1}, {"dp", NULL}, 0, -1, -1, 1, 0, 0, DT_AC_NONE},
        {"fsdp x tp 2x2", 2, {2, 2}, {"dp", "tp"}, 0, -1, 1, 1, 1, 0, DT_AC_NONE},
        {"hsdp 2x2", 2, {2, 2}, {"rep", "dp"}, 1, 0, -1, 1, 1, 0, DT_AC_NONE},
    };
    /* The same meshes with replicated parameters: the collectives the model itself issues on
     * the dp group (dispatch's choices for batch-sharded activations) */
    static const layout plain[] = {
        {"ddp dp=4", 1, {4, 1}, {"dp", NULL}, 0, -1, -1, 1, 1, 1, DT_AC_NONE},
        {"ddp x tp 2x2", 2, {2, 2}, {"dp", "tp"}, 0, -1, 1, 1, 1, 1, DT_AC_NONE},
        {"ddp 2x2", 2, {2, 2}, {"rep", "dp"}, 1, 0, -1, 1, 1, 1, DT_AC_NONE},
    };
    static const int plain_of[5] = {0, 0, 0, 1, 2};
    run base[3];
    for (int i = 0; i < 3; i++) {
        base[i] = (run){.l = plain[i]};
        train(&base[i]);
        assert_close(&base[i], &ref);
    }
    run rs[5];
    for (int i = 0; i < 5; i++) {
        rs[i] = (run){.l = layouts[i]};
        train(&rs[i]);
        assert_close(&rs[i], &ref);
        const run *r = &rs[i], *b = &base[plain_of[i]];
        for (int s = 0; s < STEPS; s++) {
            /* one all_gather per unit forward, one more in backward when resharded; one
             * reduce_scatter per unit: on top of what the model issues with replicated
             * parameters */
            cr_assert_eq(r->ag[s] - b->ag[s], NU * (r->l.reshard ? 2 : 1),
                         "%s step %d: %lld all_gathers, %lld with replicated parameters",
                         r->l.name, s, (long long)r->ag[s], (long long)b->ag[s]);
            cr_assert_eq(r->rs[s] - b->rs[s], NU, "%s step %d: %lld reduce_scatters, %lld with "
                         "replicated parameters", r->l.name, s, (long long)r->rs[s],
                         (long long)b->rs[s]);
        }
        cr_assert_eq(r->fs.reduce_scatters, STEPS * NU);
        cr_assert_eq(r->fs.forward_gathers + r->fs.backward_gathers,
                     (r->ag[0] - b->ag[0]) * STEPS);
        cr_log_info("%s: loss %.6g -> %.6g as on one rank; per step %lld all_gathers, %lld "
                    "reduce_scatters on the dp group (replicated: %lld, %lld); %lld prefetched in %d steps; parameters "
                    "%lld bytes per rank (one rank %lld), gathered at most %lld",
                    r->l.name, r->loss[0], r->loss[STEPS - 1], (long long)r->ag[0],
                    (long long)r->rs[0], (long long)b->ag[0], (long long)b->rs[0],
                    (long long)r->fs.prefetches, STEPS,
                    (long long)r->param_bytes, (long long)ref.param_bytes,
                    (long long)r->fs.max_gathered_bytes);
    }
    /* resharding and prefetching change where the bytes are, not the values */
    assert_same_bits(&rs[0], &rs[1]);
    assert_same_bits(&rs[0], &rs[2]);
    cr_assert_eq(rs[1].fs.prefetches > 0, 1);
    cr_assert_eq(rs[2].fs.prefetches, 0);
    /* dp=4: rank 0 holds its torch.chunk of each parameter's first dim (3 of the 11 rows of
     * the embedding and the head, a quarter of the others) */
    int64_t want = 0;
    for (int i = 0; i < NP; i++) {
        int64_t shape[2];
        int nd = param_shape(i, shape);
        want += (shape[0] + 3) / 4 * (nd == 2 ? shape[1] : 1) * (int64_t)sizeof(float);
    }
    cr_assert_eq(rs[0].param_bytes, want, "dp=4: %lld parameter bytes on rank 0, want %lld (one "
                 "rank: %lld)", (long long)rs[0].param_bytes, (long long)want,
                 (long long)ref.param_bytes);
    /* at most the current unit and the prefetched one are gathered at once */
    cr_assert(rs[0].fs.max_gathered_bytes < ref.param_bytes / 2, "dp=4: %lld bytes gathered",
              (long long)rs[0].fs.max_gathered_bytes);
    for (int i = 0; i < 5; i++) run_free(&rs[i]);
    for (int i = 0; i < 3; i++) run_free(&base[i]);
    run_free(&ref);
}

static void ac_policies(layout l) {
    run r[DT_AC_MODE_COUNT];
    for (int a = 0; a < DT_AC_MODE_COUNT; a++) {
        l.ac = (dt_ac_mode)a;
        r[a] = (run){.l = l};
        train(&r[a]);
    }
    for (int a = 1; a < DT_AC_MODE_COUNT; a++) assert_same_bits(&r[a], &r[0]);
    cr_log_info("%s: peak activation bytes on rank 0 (forward + backward, above parameters and "
                "optimizer state): none %lld, full %lld, selective %lld", l.name,
                (long long)r[0].act_peak[0], (long long)r[1].act_peak[0],
                (long long)r[2].act_peak[0]);
    cr_assert(r[DT_AC_FULL].act_peak[0] < r[DT_AC_NONE].act_peak[0]);
    cr_assert(r[DT_AC_SELECTIVE].act_peak[0] <= r[DT_AC_NONE].act_peak[0]);
    for (int a = 0; a < DT_AC_MODE_COUNT; a++) run_free(&r[a]);
}

Test(fsdp, checkpointing_one_rank) { ac_policies((layout)ONE); }

Test(fsdp, checkpointing_fsdp_x_tp) {
    ac_policies((layout){"fsdp x tp 2x2", 2, {2, 2}, {"dp", "tp"}, 0, -1, 1, 1, 1, 0, DT_AC_NONE});
}
