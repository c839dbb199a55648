/* SGD and AdamW: parameters on meshes 4, 3 and 2x2 in different placements (uneven shards
 * included) follow a naive double implementation of torch's formulas step by step and equal the
 * same run on one rank; a step issues no collective; state lives in the parameter's placements;
 * errors name the parameter; the schedule against its formula; f32 master weights for bf16
 * parameters; a linear model trained 20 steps on a 2x2 mesh equals one rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

enum { NP = 4, STEPS = 4 };
static const int p_ndim[NP] = {2, 1, 2, 2};
static const int64_t p_shape[NP][2] = {{5, 7}, {6, 0}, {3, 5}, {4, 2}};
/* Optimizer settings under test. */
enum { SGD_MOMENTUM, SGD_NESTEROV, SGD_PLAIN, ADAMW, NRULES };
static const char *const rule_name[NRULES] = {"sgd momentum", "sgd nesterov", "sgd", "adamw"};
static const dt_sgd_options sgd_opts[3] = {
    {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
    {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = 1},
    {.lr = 0.05, .weight_decay = 0.03},
};
static const dt_adamw_options adamw_opts = {
    .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
static const dt_lr_schedule sched = {
    .lr = 1, .lr_min = 0.1, .warmup_steps = 1, .stable_steps = 1, .decay_steps = 2};
static const double group1_wd = 0; /* parameters 2 and 3 */

static size_t numel(int k) {
    return (size_t)(p_shape[k][0] * (p_ndim[k] == 2 ? p_shape[k][1] : 1));
}
static double init_v(int k, size_t i) { return t_value(100 + (uint64_t)k, i) / 8; }
static double grad_v(int k, int s, size_t i) {
    return t_value(200 + 10 * (uint64_t)k + (uint64_t)s, i) / 4;
}
/* Which parameters get a gradient at step s: 3 never, 1 skips step 1. */
static int has_grad(int k, int s) { return k != 3 && !(k == 1 && s == 1); }

static double sched_f(int s) { /* torchtitan's formula, restated */
    if (s < 1) return (s + 1) / 2.0;
    if (s < 2) return 1;
    if (s > 4) s = 4;
    double p = (s + 1 - 2) / 3.0;
    return 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * p));
}

/* Parameter k, element i after STEPS steps of rule, in double, torch's formulas. */
static double naive(int rule, int k, size_t i) {
    double p = init_v(k, i), buf = 0, m = 0, v = 0;
    int steps = 0;
    for (int s = 0; s < STEPS; s++) {
        if (!has_grad(k, s)) continue;
        double g = grad_v(k, s, i);
        if (rule == ADAMW) {
            double lr = adamw_opts.lr * sched_f(s);
            double wd = k < 2 ? adamw_opts.weight_decay : group1_wd;
            double b1 = adamw_opts.beta1, b2 = adamw_opts.beta2, t = steps + 1;
            p *= 1 - lr * wd;
            m = b1 * m + (1 - b1) * g;
            v = b2 * v + (1 - b2) * g * g;
            p -= lr / (1 - pow(b1, t)) * m / (sqrt(v) / sqrt(1 - pow(b2, t)) + adamw_opts.eps);
        } else {
            const dt_sgd_options *o = &sgd_opts[rule];
            double lr = o->lr * sched_f(s), wd = k < 2 ? o->weight_decay : group1_wd;
            g += wd * p;
            if (o->momentum != 0) {
                buf = steps == 0 ? g : o->momentum * buf + (1 - o->dampening) * g;
                g = o->nesterov ? g + o->momentum * buf : buf;
            }
            p -= lr * g;
        }
        steps++;
    }
    return p;
}

typedef struct urun {
    const char *mesh;
    int rule;
    dt_placement pl[NP][2];
    double *full[NP]; /* rank 0's result */
} urun;

static dt_status make_optim(int rule, dt_tensor **p, dt_optim **o) {
    dt_param_group g[2] = {{.params = p, .n = 2},
                           {.params = p + 2, .n = 2, .weight_decay = &group1_wd}};
    return rule == ADAMW ? dt_optim_adamw_create(&adamw_opts, g, 2, o)
                         : dt_optim_sgd_create(&sgd_opts[rule], g, 2, o);
}

static dt_status update_body(dt_ctx *ctx, void *arg) {
    urun *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    dt_tensor *p[NP];
    for (int k = 0; k < NP; k++) {
        double buf[64];
        for (size_t i = 0; i < numel(k); i++) buf[i] = init_v(k, i);
        R_OK(dt_tensor_distribute(mesh, buf, DT_F64, p_ndim[k], p_shape[k], mnd, r->pl[k],
                                  DT_ALL_RANKS, &p[k]));
        R_OK(dt_tensor_set_requires_grad(p[k], 1));
    }
    dt_optim *o;
    R_OK(make_optim(r->rule, p, &o));
    for (int k = 0; k < NP; k++) { /* state in the parameter's placements and device */
        dt_tensor_info pi, si;
        R_OK(dt_tensor_info_get(p[k], &pi));
        for (int w = 0; w < 2; w++) {
            dt_tensor *s;
            R_OK(dt_optim_state(o, k, w, &s));
            int want = r->rule == ADAMW || (w == 0 && sgd_opts[r->rule].momentum != 0);
            R_CHECK((s != NULL) == want, "parameter %d state %d: %p", k, w, (void *)s);
            if (!s) continue;
            R_OK(dt_tensor_info_get(s, &si));
            R_CHECK(si.local_numel == pi.local_numel && si.device.kind == pi.device.kind,
                    "parameter %d state %d: local numel %zu, parameter's %zu", k, w,
                    si.local_numel, pi.local_numel);
            for (int m = 0; m < mnd; m++)
                R_CHECK(dt_placement_equal(si.placements[m], pi.placements[m]),
                        "parameter %d state %d: placement %d differs", k, w, m);
        }
    }
    for (int s = 0; s < STEPS; s++) {
        R_OK(dt_optim_zero_grad(o));
        for (int k = 0; k < NP; k++) {
            if (!has_grad(k, s)) continue;
            double buf[64];
            for (size_t i = 0; i < numel(k); i++) buf[i] = grad_v(k, s, i);
            dt_tensor *g;
            R_OK(dt_tensor_distribute(mesh, buf, DT_F64, p_ndim[k], p_shape[k], mnd, rep,
                                      DT_ALL_RANKS, &g));
            R_OK(dt_backward_with(p[k], g)); /* a leaf: its gradient, in its placements */
            dt_tensor_release(g);
        }
        double lr;
        R_OK(dt_lr_warmup_cosine(&sched, s, &lr));
        R_OK(dt_optim_set_lr(o, lr * (r->rule == ADAMW ? adamw_opts.lr : sgd_opts[r->rule].lr)));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_optim_step(o));
        R_CHECK(t_issued_total(ctx) == 0, "step %d issued %llu collectives", s,
                (unsigned long long)t_issued_total(ctx));
    }
    for (int k = 0; k < NP; k++) {
        double *full = malloc(numel(k) * 8);
        R_OK(dt_tensor_full_tensor(p[k], full, numel(k) * 8));
        if (dt_ctx_rank(ctx) == 0) r->full[k] = full;
        else free(full);
        dt_tensor_release(p[k]);
    }
    R_OK(dt_optim_destroy(o));
    dt_mesh_release(mesh);
    return DT_OK;
}

static int mesh_ranks(const char *m) { return !strcmp(m, "2x2") ? 4 : atoi(m); }

Test(optim, updates_follow_torch_formulas_on_every_mesh) {
    dt_placement R = dt_replicate(), S0 = dt_shard(0), S1 = dt_shard(1);
    struct { const char *mesh; dt_placement pl[NP][2]; } layouts[] = {
        {"1", {{R}, {R}, {R}, {R}}},
        {"4", {{S0}, {R}, {S1}, {S0}}},       /* 5 rows and 5 columns over 4: uneven */
        {"3", {{S1}, {S0}, {R}, {S1}}},       /* 7 columns over 3; 2 columns over 3: one empty */
        {"2x2", {{S0, S1}, {R, S0}, {S1, R}, {R, R}}},
        {"2x2", {{R, S0}, {S0, S0}, {S0, S1}, {S1, S0}}},
    };
    int nl = (int)(sizeof layouts / sizeof layouts[0]);
    for (int rule = 0; rule < NRULES; rule++) {
        urun one = {.mesh = "1", .rule = rule};
        memcpy(one.pl, layouts[0].pl, sizeof one.pl);
        t_run(1, update_body, &one);
        for (int k = 0; k < NP; k++)
            for (size_t i = 0; i < numel(k); i++) {
                double want = naive(rule, k, i), got = one.full[k][i];
                cr_assert(fabs(got - want) <= 1e-12 * (1 + fabs(want)),
                          "%s: parameter %d [%zu] is %.15g, torch's formulas give %.15g",
                          rule_name[rule], k, i, got, want);
            }
        for (int l = 1; l < nl; l++) {
            urun r = {.mesh = layouts[l].mesh, .rule = rule};
            memcpy(r.pl, layouts[l].pl, sizeof r.pl);
            t_run(mesh_ranks(r.mesh), update_body, &r);
            for (int k = 0; k < NP; k++) {
                for (size_t i = 0; i < numel(k); i++)
                    cr_assert(fabs(r.full[k][i] - one.full[k][i]) <=
                                  1e-14 * (1 + fabs(one.full[k][i])),
                              "%s on %s (layout %d): parameter %d [%zu] is %.15g, one rank "
                              "%.15g", rule_name[rule], r.mesh, l, k, i, r.full[k][i],
                              one.full[k][i]);
                free(r.full[k]);
            }
        }
        for (int k = 0; k < NP; k++) free(one.full[k]);
    }
}

/* ---- errors --------------------------------------------------------------------------------- */

static dt_status errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t shape[2] = {4, 3};
    dt_placement s0[1] = {dt_shard(0)}, r1[1] = {dt_replicate()};
    dt_placement ps[1] = {dt_partial(DT_REDUCE_SUM)};
    dt_tensor *a, *b, *part, *ints, *plain, *g;
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, shape, 1, s0, &a));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, shape, 1, r1, &b));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, shape, 1, ps, &part));
    R_OK(dt_tensor_zeros(mesh, DT_I32, 2, shape, 1, r1, &ints));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, shape, 1, r1, &plain));
    R_OK(dt_tensor_set_requires_grad(a, 1));
    R_OK(dt_tensor_set_requires_grad(b, 1));
    R_OK(dt_tensor_set_requires_grad(part, 1));
    dt_optim *o = T_SENTINEL(dt_optim *);
    dt_sgd_options so = {.lr = 0.1};
    dt_tensor *list[3] = {a, b, a};
    dt_param_group g1 = {.params = list, .n = 2};
    /* options */
    dt_sgd_options bad = {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .nesterov = 1};
    R_ERR(dt_optim_sgd_create(&bad, &g1, 1, &o), DT_ERR_ARG, "nesterov");
    bad = (dt_sgd_options){.lr = -1};
    R_ERR(dt_optim_sgd_create(&bad, &g1, 1, &o), DT_ERR_ARG, "options->lr");
    dt_adamw_options ab = {.lr = 0.1, .beta1 = 1, .beta2 = 0.9};
    R_ERR(dt_optim_adamw_create(&ab, &g1, 1, &o), DT_ERR_ARG, "beta1");
    R_ERR(dt_optim_sgd_create(NULL, &g1, 1, &o), DT_ERR_ARG, "options");
    /* parameters */
    dt_param_group dup = {.params = list, .n = 3};
    R_ERR(dt_optim_sgd_create(&so, &dup, 1, &o), DT_ERR_ARG, "parameter 2");
    R_MSG("parameter 0 again");
    dt_tensor *pl_list[2] = {a, plain};
    dt_param_group gp = {.params = pl_list, .n = 2};
    R_ERR(dt_optim_sgd_create(&so, &gp, 1, &o), DT_ERR_ARG, "parameter 1");
    R_MSG("requires grad");
    dt_tensor *part_list[2] = {a, part};
    dt_param_group gpart = {.params = part_list, .n = 2};
    R_ERR(dt_optim_sgd_create(&so, &gpart, 1, &o), DT_ERR_PLACEMENT, "parameter 1");
    R_MSG("Partial");
    dt_tensor *int_list[1] = {ints};
    dt_param_group gi = {.params = int_list, .n = 1};
    R_ERR(dt_optim_sgd_create(&so, &gi, 1, &o), DT_ERR_ARG, "parameter 0");
    R_CHECK(o == T_SENTINEL(dt_optim *), "a failed create wrote out");
    /* a Partial gradient (grad sync off) is refused, naming the parameter, before any change */
    R_OK(dt_optim_sgd_create(&so, &g1, 1, &o));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, shape, 1, r1, &g));
    R_OK(dt_backward_with(a, g));
    dt_tensor *gp2;
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, shape, 1, ps, &gp2));
    R_OK(dt_ctx_set_grad_sync(ctx, 0));
    R_OK(dt_backward_with(b, gp2));
    R_OK(dt_ctx_set_grad_sync(ctx, 1));
    R_ERR(dt_optim_step(o), DT_ERR_PLACEMENT, "parameter 1");
    R_MSG("P(sum)");
    double va[12];
    R_OK(dt_tensor_full_tensor(a, va, sizeof va));
    R_CHECK(va[0] == 1 && va[11] == 1, "parameter 0 changed by a step that failed: %g", va[0]);
    R_OK(dt_optim_zero_grad(o));
    R_CHECK(!dt_tensor_grad(a) && !dt_tensor_grad(b), "zero_grad left a gradient");
    R_OK(dt_optim_step(o)); /* no gradients: nothing to do */
    R_ERR(dt_optim_set_lr(o, -0.5), DT_ERR_ARG, "lr");
    dt_tensor *st;
    R_ERR(dt_optim_state(o, 2, 0, &st), DT_ERR_ARG, "k = 2");
    /* its parameters and kind, for a checkpoint of the training state */
    const char *kind;
    R_OK(dt_optim_param(o, 1, &st));
    R_OK(dt_optim_kind(o, &kind));
    R_CHECK(st == b && strcmp(kind, "SGD") == 0, "parameter 1 %p (b %p), kind %s", (void *)st,
            (void *)b, kind);
    R_ERR(dt_optim_param(o, 2, &st), DT_ERR_ARG, "k = 2");
    R_ERR(dt_optim_kind(o, NULL), DT_ERR_ARG, "out");
    R_OK(dt_optim_destroy(o));
    R_OK(dt_optim_adamw_create(&(dt_adamw_options){.lr = 0.1}, &g1, 1, &o));
    R_OK(dt_optim_kind(o, &kind));
    R_CHECK(strcmp(kind, "AdamW") == 0, "kind %s", kind);
    R_OK(dt_optim_destroy(o));
    R_ERR(dt_optim_step(NULL), DT_ERR_ARG, "optim");
    dt_tensor_release(g), dt_tensor_release(gp2);
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(part);
    dt_tensor_release(ints), dt_tensor_release(plain);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(optim, errors_name_the_argument) { t_run(2, errors_body, NULL); }

/* Mixed precision per group on dp = 2: two bf16 weights replicated, each rank's gradient
 * contribution 1 and 2^-9 (the batch is sharded). The reduce_f32 group's gradient is f32 and
 * exactly 1 + 2^-9; the other group's is bf16, where 1 + 2^-9 rounds to 1. */
static dt_status mixed_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t shape[1] = {3};
    dt_placement r1[1] = {dt_replicate()}, ps[1] = {dt_partial(DT_REDUCE_SUM)};
    dt_tensor *w[2], *g;
    for (int i = 0; i < 2; i++) {
        R_OK(dt_tensor_ones(mesh, DT_BF16, 1, shape, 1, r1, &w[i]));
        R_OK(dt_tensor_set_requires_grad(w[i], 1));
    }
    dt_param_group groups[2] = {{.params = w, .n = 1, .master_weights = 1, .reduce_f32 = 1},
                                {.params = w + 1, .n = 1, .master_weights = 1}};
    dt_adamw_options ao = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    dt_optim *o = T_SENTINEL(dt_optim *);
    dt_param_group bad = {.params = w, .n = 1, .reduce_f32 = 1};
    R_ERR(dt_optim_adamw_create(&ao, &bad, 1, &o), DT_ERR_ARG, "groups[0].reduce_f32");
    R_OK(dt_optim_adamw_create(&ao, groups, 2, &o));
    uint16_t local[3];
    double mine[3] = {dt_ctx_rank(ctx) ? ldexp(1, -9) : 1, 0, 0};
    R_OK(dt_convert_from_f64(DT_BF16, mine, local, 3));
    R_OK(dt_tensor_from_local(mesh, local, DT_BF16, 1, shape, 1, ps, shape, 0, &g));
    for (int i = 0; i < 2; i++) R_OK(dt_backward_with(w[i], g));
    dt_tensor_info info[2];
    double got[2][3];
    for (int i = 0; i < 2; i++) {
        R_OK(dt_tensor_info_get(dt_tensor_grad(w[i]), &info[i]));
        R_CHECK(info[i].placements[0].kind == DT_PLACEMENT_REPLICATE, "gradient %d not R", i);
        dt_tensor *g64;
        R_OK(dt_cast(dt_tensor_grad(w[i]), DT_F64, &g64));
        R_OK(dt_tensor_full_tensor(g64, got[i], sizeof got[i]));
        dt_tensor_release(g64);
    }
    R_CHECK(info[0].dtype == DT_F32 && info[1].dtype == DT_BF16, "gradient dtypes %s, %s",
            dt_dtype_name(info[0].dtype), dt_dtype_name(info[1].dtype));
    R_CHECK(got[0][0] == 1 + ldexp(1, -9) && got[1][0] == 1, "gradients %.12g, %.12g",
            got[0][0], got[1][0]);
    R_OK(dt_optim_step(o));
    R_OK(dt_optim_destroy(o));
    dt_tensor_release(g), dt_tensor_release(w[0]), dt_tensor_release(w[1]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(optim, mixed_precision_is_chosen_per_group) { t_run(2, mixed_body, NULL); }

/* ---- the schedule --------------------------------------------------------------------------- */

Test(optim, schedule_follows_its_formula) {
    dt_lr_schedule s = {.lr = 3e-4, .lr_min = 0.1, .warmup_steps = 3, .stable_steps = 2,
                        .decay_steps = 5};
    for (int step = 0; step < 14; step++) {
        double want, got;
        if (step < 3) want = (step + 1) / 4.0;
        else if (step < 5) want = 1;
        else {
            int t = step > 10 ? 10 : step;
            want = 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * (t + 1 - 5) / 6.0));
        }
        cr_assert_eq(dt_lr_warmup_cosine(&s, step, &got), DT_OK);
        cr_assert(fabs(got - 3e-4 * want) <= 1e-18, "step %d: %.17g, formula %.17g", step, got,
                  3e-4 * want);
    }
    for (int step = 0; step < 5; step++) {
        double got;
        cr_assert_eq(dt_lr_warmup_cosine(&sched, step, &got), DT_OK);
        cr_assert(fabs(got - sched_f(step)) <= 1e-15, "test schedule step %d", step);
    }
    double v;
    dt_lr_schedule bad = s;
    bad.lr_min = 2;
    T_ERR(dt_lr_warmup_cosine(&bad, 0, &v), DT_ERR_ARG, "lr_min");
    T_ERR(dt_lr_warmup_cosine(&s, -1, &v), DT_ERR_ARG, "step");
    bad = s, bad.decay_steps = -1;
    T_ERR(dt_lr_warmup_cosine(&bad, 0, &v), DT_ERR_ARG, "negative");
}

/* ---- end to end: y = x @ W^T, MSE, 20 steps ------------------------------------------------- */

enum { B = 8, IN = 6, OUT = 4, E2E_STEPS = 20 };

typedef struct e2e {
    const char *mesh;
    int adamw;
    double w[OUT * IN];  /* rank 0's result */
    uint64_t step_colls; /* collectives issued by the steps */
} e2e;

static dt_status e2e_body(dt_ctx *ctx, void *arg) {
    e2e *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    int two = mnd == 2;
    /* W (OUT, IN) sharded over both mesh dims; x and y split by batch over mesh dim 0 */
    dt_placement wpl[2] = {two ? dt_shard(0) : dt_replicate(), dt_shard(1)};
    dt_placement dpl[2] = {two ? dt_shard(0) : dt_replicate(), dt_replicate()};
    double wb[OUT * IN], xb[B * IN], yb[B * OUT];
    for (int i = 0; i < OUT * IN; i++) wb[i] = t_value(7, (size_t)i) / 16;
    for (int i = 0; i < B * IN; i++) xb[i] = t_value(8, (size_t)i) / 8;
    for (int i = 0; i < B * OUT; i++) yb[i] = t_value(9, (size_t)i) / 4;
    int64_t ws[2] = {OUT, IN}, xs[2] = {B, IN}, ys[2] = {B, OUT};
    dt_tensor *w, *x, *y;
    R_OK(dt_tensor_distribute(mesh, wb, DT_F64, 2, ws, mnd, wpl, DT_ALL_RANKS, &w));
    R_OK(dt_tensor_distribute(mesh, xb, DT_F64, 2, xs, mnd, dpl, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, yb, DT_F64, 2, ys, mnd, dpl, DT_ALL_RANKS, &y));
    R_OK(dt_tensor_set_requires_grad(w, 1));
    dt_param_group g = {.params = &w, .n = 1};
    dt_sgd_options so = {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
    dt_adamw_options ao = {.lr = 0.02, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8,
                           .weight_decay = 0.05};
    dt_optim *o;
    R_OK(r->adamw ? dt_optim_adamw_create(&ao, &g, 1, &o) : dt_optim_sgd_create(&so, &g, 1, &o));
    dt_lr_schedule s = {.lr = r->adamw ? ao.lr : so.lr, .lr_min = 0.1, .warmup_steps = 3,
                        .decay_steps = E2E_STEPS - 3};
    r->step_colls = 0;
    for (int step = 0; step < E2E_STEPS; step++) {
        dt_tensor *wt, *pred, *d, *sq, *loss;
        R_OK(dt_transpose(w, 0, 1, &wt));
        R_OK(dt_mm(x, wt, &pred)); /* (B, IN) @ (IN, OUT) -> (B, OUT) */
        R_OK(dt_sub(pred, y, &d));
        R_OK(dt_mul(d, d, &sq));
        R_OK(dt_mean(sq, NULL, 0, 0, &loss));
        R_OK(dt_backward(loss));
        double lr;
        R_OK(dt_lr_warmup_cosine(&s, step, &lr));
        R_OK(dt_optim_set_lr(o, lr));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_optim_step(o));
        r->step_colls += t_issued_total(ctx);
        R_OK(dt_optim_zero_grad(o));
        dt_tensor_release(wt), dt_tensor_release(pred), dt_tensor_release(d);
        dt_tensor_release(sq), dt_tensor_release(loss);
    }
    double full[OUT * IN];
    R_OK(dt_tensor_full_tensor(w, full, sizeof full));
    if (dt_ctx_rank(ctx) == 0) memcpy(r->w, full, sizeof full);
    R_OK(dt_optim_destroy(o));
    dt_tensor_release(w), dt_tensor_release(x), dt_tensor_release(y);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(optim, linear_model_on_2x2_equals_one_rank) {
    for (int adamw = 0; adamw < 2; adamw++) {
        e2e one = {.mesh = "1", .adamw = adamw}, four = {.mesh = "2x2", .adamw = adamw};
        t_run(1, e2e_body, &one);
        t_run(4, e2e_body, &four);
        cr_assert_eq(four.step_colls, 0, "the steps issued %llu collectives",
                     (unsigned long long)four.step_colls);
        double moved = 0;
        for (int i = 0; i < OUT * IN; i++) {
            moved += fabs(one.w[i] - t_value(7, (size_t)i) / 16);
            cr_assert(fabs(four.w[i] - one.w[i]) <= 1e-9 * fabs(one.w[i]) + 1e-15,
                      "%s: W[%d] on 2x2 is %.15g, one rank %.15g", adamw ? "AdamW" : "SGD", i,
                      four.w[i], one.w[i]);
        }
        cr_assert(moved > 1e-3, "%s: 20 steps left W where it was", adamw ? "AdamW" : "SGD");
    }
}
