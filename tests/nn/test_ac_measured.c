/* Activation checkpointing chosen by measurement (dtensor/ac.h, DT_AC_MEASURED) on the model of
 * examples/tiny_llama.c: the choice is the knapsack by ratio, recomputed here by a naive
 * loop, on synthetic candidates and on the figures the policy measured; losses and gradients
 * are bitwise those of no checkpointing on 1 rank and on dp=2 x tp=2 (FSDP units, sequence
 * and loss parallel); the step's peak tensor bytes lie between full's and none's and within
 * full's plus what the budget lets each block keep beyond its output; bad budgets fail with a
 * message naming them, on every rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/tiny_llama.h"
#include "autograd/ac_policy.h"
#include "helpers.h"
#include "op_cases.h"

enum { STEPS = 4, MAXC = 64, MAXG = 1 << 16 };

static const tl_config cfg = {.vocab = 64,
                              .seq = 32,
                              .batch = 12,
                              .dim = 32,
                              .layers = 2,
                              .heads = 8,
                              .kv_heads = 4,
                              .hidden = 40};

/* The independent choice: repeatedly the best remaining ratio us / bytes (zero bytes: best;
 * equal ratios: the lower index), kept when it fits. O(n^2), by division. */
static void naive_choice(int n, const double *us, const int64_t *bytes, int64_t room, bool *keep) {
    bool seen[MAXC] = {0};
    for (int i = 0; i < n; i++)
        keep[i] = false;
    for (;;) {
        int best = -1;
        double br = 0;
        for (int i = 0; i < n; i++) {
            if (seen[i] || !(us[i] > 0)) continue;
            double r = bytes[i] ? us[i] / (double)bytes[i] : INFINITY;
            if (best < 0 || r > br) best = i, br = r;
        }
        if (best < 0) return;
        seen[best] = true;
        if (bytes[best] <= room) keep[best] = true, room -= bytes[best];
    }
}

Test(ac_measured, choice_is_the_knapsack_by_ratio) {
    /* by hand: ratios 1, 3, 1, 0.5 -> #1 (3 bytes of 4), #0 (10: does not fit), #2 (1 fits) */
    double us[4] = {10, 9, 1, 2};
    int64_t bytes[4] = {10, 3, 1, 4};
    bool keep[4];
    dt_ac_choose(4, us, bytes, 4, keep);
    cr_assert(!keep[0] && keep[1] && keep[2] && !keep[3]);
    /* random candidates: small integers make equal ratios (ties) common; some never measured
     * (us 0 or -1), some of zero bytes */
    unsigned seed = 20261206;
    cr_log_info("seed %u", seed);
    srand(seed);
    for (int rep = 0; rep < 2000; rep++) {
        int n = 1 + rand() % 40;
        double u[MAXC];
        int64_t b[MAXC], total = 0;
        for (int i = 0; i < n; i++) {
            u[i] = rand() % 10 == 0 ? -(rand() % 2) : 1 + rand() % 8;
            b[i] = rand() % 12 == 0 ? 0 : 1 + rand() % 16;
            total += b[i];
        }
        int64_t room = rand() % (total + 2);
        bool got[MAXC], want[MAXC];
        dt_ac_choose(n, u, b, room, got);
        naive_choice(n, u, b, room, want);
        int64_t used = 0;
        for (int i = 0; i < n; i++) {
            cr_assert_eq(got[i], want[i],
                         "seed %u rep %d: candidate %d of %d (us %g, %lld "
                         "bytes, room %lld): kept %d, want %d",
                         seed, rep, i, n, u[i], (long long)b[i], (long long)room, got[i], want[i]);
            used += got[i] ? b[i] : 0;
        }
        cr_assert(used <= room);
    }
}

typedef struct config {
    const char *name, *mesh;
    tl_layout l;
    int64_t out_bytes; /* a block's output on one rank: (B, T, dim) f32 over the shards */
} config;

typedef struct run {
    const config *c;
    float loss[STEPS];
    float *grad; /* every parameter's gradient after the last backward, in registry order */
    size_t ngrad;
    int64_t peak[STEPS]; /* rank 0: most tensor bytes over a step above those before it */
    /* rank 0's policy, at the end */
    int nkinds;
    dt_ac_policy_block b;
    dt_ac_policy_tensor t[MAXC];
} run;

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    int rank0 = dt_ctx_rank(ctx) == 0;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->c->mesh, &mesh));
    tl_model m;
    R_OK(tl_model_init(&m, mesh, &cfg, &r->c->l, 7));
    dt_adamw_options adamw = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        dt_tensor_memory before, after;
        R_OK(dt_ctx_reset_peak(ctx));
        R_OK(dt_ctx_tensor_memory(ctx, &before));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_OK(dt_backward(loss));
        R_OK(dt_ctx_tensor_memory(ctx, &after));
        if (rank0) r->peak[s] = after.peak_bytes - before.bytes;
        R_OK(dt_tensor_full_tensor(loss, &r->loss[s], sizeof r->loss[s]));
        /* the gradients whole (collective), into rank 0's buffer; the others' go to scratch */
        size_t off = 0;
        for (int i = 0; s == STEPS - 1 && i < dt_params_count(m.params); i++) {
            dt_tensor *p, *g;
            dt_tensor_info info;
            R_OK(dt_params_at(m.params, i, NULL, &p));
            R_CHECK((g = dt_tensor_grad(p)) != NULL, "parameter %d has no gradient", i);
            R_OK(dt_tensor_info_get(g, &info));
            R_CHECK(off + info.numel <= MAXG, "gradients outgrow the buffer");
            float *dst = rank0 ? r->grad + off : malloc(info.numel * sizeof(float));
            R_CHECK(dst != NULL, "out of memory");
            dt_status st = dt_tensor_full_tensor(g, dst, info.numel * sizeof(float));
            if (!rank0) free(dst);
            R_OK(st);
            off += info.numel;
        }
        if (rank0 && s == STEPS - 1) r->ngrad = off;
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    if (rank0 && m.ac) {
        r->nkinds = dt_ac_policy_nblocks(m.ac);
        R_OK(dt_ac_policy_block_get(m.ac, 0, &r->b));
        R_CHECK(r->b.ntensors <= MAXC, "%d tensors", r->b.ntensors);
        for (int k = 0; k < r->b.ntensors; k++)
            R_OK(dt_ac_policy_tensor_get(m.ac, 0, k, &r->t[k]));
        if (getenv("DT_PRINT_AC")) R_OK(dt_ac_policy_print(m.ac, stderr));
    }
    R_OK(dt_optim_destroy(opt));
    tl_model_free(&m);
    return dt_mesh_release(mesh);
}

static int64_t max_peak(const run *r, int from) {
    int64_t p = 0;
    for (int s = from; s < STEPS; s++)
        p = r->peak[s] > p ? r->peak[s] : p;
    return p;
}

static void train(const config *c, dt_ac_mode ac, int64_t budget, int measure, run *r) {
    config *cc = malloc(sizeof *cc);
    *cc = *c;
    cc->l.ac = ac, cc->l.ac_budget = budget, cc->l.ac_measure_steps = measure;
    *r = (run){.c = cc, .grad = calloc(MAXG, sizeof(float))};
    t_run(op_mesh_ranks(c->mesh), body, r);
}

static void run_free(run *r) {
    free(r->grad);
    free((void *)r->c);
}

/* None, full and measured (measuring `measure` steps, then a budget of 4 block outputs) */
static void compare(const config *c, int measure) {
    int64_t budget = 4 * c->out_bytes;
    run none, full, meas;
    train(c, DT_AC_NONE, 0, 0, &none);
    train(c, DT_AC_FULL, 0, 0, &full);
    train(c, DT_AC_MEASURED, budget, measure, &meas);
    /* bitwise: every step's loss, every gradient of the last step */
    cr_assert(!memcmp(meas.loss, none.loss, sizeof none.loss),
              "%s: losses differ (last %.9g, "
              "none %.9g)",
              c->name, meas.loss[STEPS - 1], none.loss[STEPS - 1]);
    cr_assert(meas.ngrad == none.ngrad && none.ngrad > 0);
    cr_assert(!memcmp(meas.grad, none.grad, none.ngrad * sizeof(float)), "%s: gradients differ",
              c->name);
    /* it decided, and not trivially: some candidates kept, some recomputed */
    const dt_ac_policy_block *b = &meas.b;
    cr_assert_eq(meas.nkinds, 1, "%s: %d kinds of block (the blocks are identical)", c->name,
                 meas.nkinds);
    cr_assert(b->decided && b->nkept > 0 && b->nkept < b->ncandidates,
              "%s: decided %d, kept %d of %d candidates", c->name, b->decided, b->nkept,
              b->ncandidates);
    cr_assert(b->min_bytes >= c->out_bytes && b->kept_bytes <= budget,
              "%s: minimum %lld (output %lld), kept %lld, budget %lld", c->name,
              (long long)b->min_bytes, (long long)c->out_bytes, (long long)b->kept_bytes,
              (long long)budget);
    /* the choice is the naive knapsack by ratio on the figures the policy measured */
    double us[MAXC] = {0};
    int64_t bytes[MAXC] = {0}, kept = b->min_bytes;
    bool want[MAXC];
    for (int k = 0; k < b->ntensors; k++) {
        us[k] = meas.t[k].candidate ? meas.t[k].us : -1;
        bytes[k] = meas.t[k].bytes;
    }
    naive_choice(b->ntensors, us, bytes, budget - b->min_bytes, want);
    for (int k = 0; k < b->ntensors; k++) {
        cr_assert_eq(meas.t[k].kept, want[k],
                     "%s: tensor %d (%s, %lld bytes, %.1f us) kept %d, "
                     "want %d",
                     c->name, k, meas.t[k].op, (long long)bytes[k], us[k], meas.t[k].kept, want[k]);
        kept += want[k] ? bytes[k] : 0;
    }
    cr_assert_eq(kept, b->kept_bytes);
    /* peaks: full <= measured <= none, and within full's plus what each block may keep
     * beyond its output (the budget's bound: a block keeps at least its output) */
    int64_t pf = max_peak(&full, 0), pn = max_peak(&none, 0), pm = max_peak(&meas, measure);
    int64_t bound = pf + cfg.layers * (budget - c->out_bytes);
    cr_log_info("%s: peak bytes full %lld, measured %lld (bound %lld), none %lld; kept %d of %d "
                "candidates, %lld of %lld bytes, saving %.0f of %.0f us per block",
                c->name, (long long)pf, (long long)pm, (long long)bound, (long long)pn, b->nkept,
                b->ncandidates, (long long)b->kept_bytes,
                (long long)(b->min_bytes + b->candidate_bytes), b->saved_us,
                b->saved_us + b->recompute_us);
    cr_assert(pf <= pm && pm <= pn && pm <= bound,
              "%s: peak bytes full %lld, measured %lld, "
              "none %lld, bound %lld",
              c->name, (long long)pf, (long long)pm, (long long)pn, (long long)bound);
    run_free(&none), run_free(&full), run_free(&meas);
}

static const int64_t out1 = (int64_t)12 * 32 * 32 * 4; /* (B, T, dim) f32 */

Test(ac_measured, one_rank_is_bitwise_none) {
    config c = {"1 rank", "1", {.dp_dim = -1, .tp_dim = -1}, out1};
    compare(&c, 1);
}

Test(ac_measured, fsdp_x_tp_is_bitwise_none) {
    /* x sharded over the batch on dp and the sequence on tp: a quarter of it per rank */
    config c = {"dp=2 x tp=2 FSDP units + TP",
                "2x2",
                {.dp_dim = 0,
                 .tp_dim = 1,
                 .fsdp = 1,
                 .fsdp_units = 1,
                 .sequence_parallel = 1,
                 .loss_parallel = 1},
                out1 / 4};
    compare(&c, 2);
}

/* Bad budgets: named at creation (negative, zero) or, below the block's minimum, at the first
 * block after the measured step, on every rank alike; measured needs a policy. */
static dt_status budget_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_ac_policy *p;
    dt_ac_policy_options o = dt_ac_policy_options_default();
    o.budget_bytes = -5;
    R_ERR(dt_ac_policy_create(&o, &p), DT_ERR_ARG, "budget_bytes = -5");
    o.budget_bytes = 0;
    R_ERR(dt_ac_policy_create(&o, &p), DT_ERR_ARG, "budget_bytes = 0");
    o.budget_bytes = 1 << 20, o.measure_steps = 0;
    R_ERR(dt_ac_policy_create(&o, &p), DT_ERR_ARG, "measure_steps = 0");
    dt_ac_region *r;
    R_ERR(dt_ac_begin(ctx, DT_AC_MEASURED, &r), DT_ERR_ARG, "dt_ac_begin_measured");
    dt_ac_mode mode;
    R_OK(dt_ac_mode_parse("measured", &mode));
    R_CHECK(mode == DT_AC_MEASURED && !strcmp(dt_ac_mode_name(mode), "measured"), "mode");
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    tl_model m;
    tl_layout l = {.dp_dim = 0, .tp_dim = 1, .ac = DT_AC_MEASURED};
    R_ERR(tl_model_init(&m, mesh, &cfg, &l, 7), DT_ERR_ARG, "budget_bytes = 0");
    /* 1000 bytes: below a block's output alone (12288 bytes per rank here) */
    l.ac_budget = 1000;
    R_OK(tl_model_init(&m, mesh, &cfg, &l, 7));
    for (int s = 0; s < 2; s++) {
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        if (s == 0) {
            R_OK(tl_loss(&m, tok, tgt, &loss));
            R_OK(dt_backward(loss));
            dt_tensor_release(loss);
        } else {
            R_ERR(tl_loss(&m, tok, tgt, &loss), DT_ERR_ARG, "budget_bytes = 1000 is below");
        }
        dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    tl_model_free(&m);
    return dt_mesh_release(mesh);
}

Test(ac_measured, bad_budgets) {
    t_run(4, budget_body, NULL);
}

/* A policy serves one rank: the first whose region uses it. */
static dt_status owner_body(dt_ctx *ctx, void *arg) {
    dt_ac_policy **p = arg;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    dt_ac_region *r;
    if (dt_ctx_rank(ctx) == 0) {
        dt_ac_policy_options o = dt_ac_policy_options_default();
        o.budget_bytes = 1 << 20;
        R_OK(dt_ac_policy_create(&o, p));
        R_OK(dt_ac_begin_measured(ctx, *p, &r));
        R_OK(dt_ac_end(r, 0, NULL));
    }
    R_OK(dt_barrier(world));
    if (dt_ctx_rank(ctx) == 1)
        R_ERR(dt_ac_begin_measured(ctx, *p, &r), DT_ERR_ARG, "serves rank 0's context, not rank 1");
    R_OK(dt_barrier(world));
    if (dt_ctx_rank(ctx) == 0) R_OK(dt_ac_policy_destroy(*p));
    return DT_OK;
}

Test(ac_measured, one_policy_per_rank) {
    dt_ac_policy *p = NULL;
    t_run(2, owner_body, &p);
}
