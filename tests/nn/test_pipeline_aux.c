/* A stage's own loss terms (dtensor/pipeline.h, config.stage_aux, call->aux), as MoE's
 * load-balancing loss: the model h = tanh(h @ W_k) for k < L blocks, loss = mean((h - y)^2),
 * and each stage hands back 0.1 x mean(h_k0^2), h_k0 its first block's output. The pipeline's
 * step loss and every weight's gradient equal the unpipelined model's on one rank with the same
 * terms (f64, to rounding; a mean over the rows of a micro-batch averages to the batch's), for
 * both schedules and 1, 2 and 4 micro-batches, with dp and tp; the loss then reaches every stage
 * by one all_reduce over pp instead of the broadcast. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

enum { B = 8, D = 4, L = 4, P = 2 };

static double xs[B * D], ys[B * D], ws[L][D * D];
static double ref_loss, ref_grad[L][D * D];

/* tanh(h @ w), and with aux, *aux += 0.1 x mean(out^2). */
static dt_status block(dt_tensor *h, dt_tensor *w, dt_tensor **aux, dt_tensor **out) {
    dt_tensor *mm, *sq, *mean, *term;
    R_OK(dt_mm(h, w, &mm));
    R_OK(dt_tanh(mm, out));
    dt_tensor_release(mm);
    if (!aux) return DT_OK;
    R_OK(dt_mul(*out, *out, &sq));
    R_OK(dt_mean(sq, NULL, 0, 0, &mean));
    R_OK(dt_mul_scalar(mean, 0.1, &term));
    dt_tensor_release(sq), dt_tensor_release(mean);
    if (*aux) {
        dt_tensor *sum;
        R_OK(dt_add(*aux, term, &sum));
        dt_tensor_release(*aux), dt_tensor_release(term);
        term = sum;
    }
    *aux = term;
    return DT_OK;
}

/* Blocks [k0, k1) on h, a term from each block that starts a stage of P; with target, the
 * loss (without the terms). */
static dt_status model(dt_tensor *h, dt_tensor **w, int k0, int k1, dt_tensor *target,
                       dt_tensor **aux, dt_tensor **out) {
    dt_tensor *cur = h;
    dt_tensor_retain(cur);
    for (int k = k0; k < k1; k++) {
        dt_tensor *t;
        R_OK(block(cur, w[k], k % (L / P) == 0 ? aux : NULL, &t));
        dt_tensor_release(cur);
        cur = t;
    }
    if (target) {
        dt_tensor *diff, *sq, *loss;
        R_OK(dt_sub(cur, target, &diff));
        R_OK(dt_mul(diff, diff, &sq));
        R_OK(dt_mean(sq, NULL, 0, 0, &loss));
        dt_tensor_release(diff), dt_tensor_release(sq), dt_tensor_release(cur);
        cur = loss;
    }
    *out = cur;
    return DT_OK;
}

static dt_status ref_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "w=1", &mesh));
    dt_placement r = dt_replicate();
    int64_t sb[2] = {B, D}, sw[2] = {D, D};
    dt_tensor *x, *y, *w[L], *loss, *aux = NULL, *total;
    R_OK(dt_tensor_distribute(mesh, xs, DT_F64, 2, sb, 1, &r, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, ys, DT_F64, 2, sb, 1, &r, DT_ALL_RANKS, &y));
    for (int k = 0; k < L; k++) {
        R_OK(dt_tensor_distribute(mesh, ws[k], DT_F64, 2, sw, 1, &r, DT_ALL_RANKS, &w[k]));
        R_OK(dt_tensor_set_requires_grad(w[k], 1));
    }
    R_OK(model(x, w, 0, L, y, &aux, &loss));
    R_OK(dt_add(loss, aux, &total));
    R_OK(dt_tensor_full_tensor(total, &ref_loss, sizeof ref_loss));
    R_OK(dt_backward(total));
    for (int k = 0; k < L; k++) {
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(w[k]), ref_grad[k], sizeof ref_grad[k]));
        dt_tensor_release(w[k]);
    }
    dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(loss);
    dt_tensor_release(aux), dt_tensor_release(total);
    return dt_mesh_release(mesh);
}

typedef struct rank_state {
    dt_tensor *w[L];
} rank_state;

static dt_status stage_fn(void *user, const dt_pipeline_stage_call *c, dt_tensor **out) {
    rank_state *rs = user;
    int per = L / c->nstages;
    R_CHECK(c->aux && !*c->aux, "stage_aux is set: call->aux must point at NULL");
    return model(c->input, rs->w, c->stage * per, (c->stage + 1) * per, c->target, c->aux, out);
}

/* The batch S(0) over dp, weights S(1) over tp (the blocks' outputs sharded over tp), else
 * replicated. */
static void placements(dt_mesh *m, int weight, dt_placement *pl) {
    for (int d = 0; d < dt_mesh_ndim(m); d++) {
        const char *n = dt_mesh_dim_name(m, d);
        pl[d] = dt_replicate();
        if (!weight && !strcmp(n, "dp")) pl[d] = dt_shard(0);
        if (weight && !strcmp(n, "tp")) pl[d] = dt_shard(1);
    }
}

static dt_status aux_body(dt_ctx *ctx, void *arg) {
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, (const char *)arg, &mesh));
    int pp;
    R_OK(dt_mesh_dim_index(mesh, "pp", &pp));
    const int micros[3] = {1, 2, 4};
    for (int sched = 0; sched < DT_PIPELINE_SCHEDULE_COUNT; sched++)
        for (int mi = 0; mi < 3; mi++) {
            rank_state rs = {{0}};
            dt_pipeline_config cfg = {.pp_dim = pp,
                                      .nmicro = micros[mi],
                                      .schedule = (dt_pipeline_schedule)sched,
                                      .loss_reduction = DT_REDUCTION_MEAN,
                                      .stage_fn = stage_fn,
                                      .user = &rs,
                                      .stage_aux = 1};
            dt_pipeline *pl;
            R_OK(dt_pipeline_create(mesh, &cfg, &pl));
            dt_mesh *m = dt_pipeline_stage_mesh(pl);
            int s = dt_pipeline_stage(pl), nd = dt_mesh_ndim(m), per = L / P;
            int64_t sb[2] = {B, D}, sw[2] = {D, D};
            dt_placement pw[DT_MESH_MAX_NDIM], pb[DT_MESH_MAX_NDIM];
            placements(m, 1, pw), placements(m, 0, pb);
            for (int k = s * per; k < (s + 1) * per; k++) {
                R_OK(dt_tensor_distribute(m, ws[k], DT_F64, 2, sw, nd, pw, DT_ALL_RANKS, &rs.w[k]));
                R_OK(dt_tensor_set_requires_grad(rs.w[k], 1));
            }
            dt_tensor *x = NULL, *y = NULL;
            if (s == 0) R_OK(dt_tensor_distribute(m, xs, DT_F64, 2, sb, nd, pb, DT_ALL_RANKS, &x));
            if (s == P - 1)
                R_OK(dt_tensor_distribute(m, ys, DT_F64, 2, sb, nd, pb, DT_ALL_RANKS, &y));
            double loss = -1;
            R_OK(dt_comm_stats_reset(ctx));
            R_OK(dt_pipeline_step(pl, x, y, &loss));
            dt_comm_stats cs;
            R_OK(dt_comm_stats_get(ctx, &cs));
            R_CHECK(fabs(loss - ref_loss) <= 1e-12 * fabs(ref_loss),
                    "%s, %s, m = %d: loss %.17g, want %.17g", (const char *)arg,
                    dt_pipeline_schedule_name(cfg.schedule), cfg.nmicro, loss, ref_loss);
            R_CHECK(cs.calls[DT_COLL_BROADCAST] == 0,
                    "%llu broadcasts: the loss goes by all_reduce with stage terms",
                    (unsigned long long)cs.calls[DT_COLL_BROADCAST]);
            for (int k = s * per; k < (s + 1) * per; k++) {
                double g[D * D];
                R_OK(dt_tensor_full_tensor(dt_tensor_grad(rs.w[k]), g, sizeof g));
                for (int i = 0; i < D * D; i++)
                    R_CHECK(fabs(g[i] - ref_grad[k][i]) <= 1e-12 * (1 + fabs(ref_grad[k][i])),
                            "%s, %s, m = %d: dW%d[%d] = %.17g, want %.17g", (const char *)arg,
                            dt_pipeline_schedule_name(cfg.schedule), cfg.nmicro, k, i, g[i],
                            ref_grad[k][i]);
                dt_tensor_release(rs.w[k]);
            }
            dt_tensor_release(x), dt_tensor_release(y);
            R_OK(dt_pipeline_destroy(pl));
        }
    return dt_mesh_release(mesh);
}

static void reference(void) {
    for (int i = 0; i < B * D; i++)
        xs[i] = 0.5 * t_value(1, (size_t)i), ys[i] = 0.05 * t_value(2, (size_t)i);
    for (int k = 0; k < L; k++)
        for (int i = 0; i < D * D; i++)
            ws[k][i] = 0.4 * t_value(10 + (uint64_t)k, (size_t)i);
    t_run(1, ref_body, NULL);
}

Test(pipeline_aux, stage_terms_equal_unpipelined) {
    reference();
    t_run(2, aux_body, "pp=2,dp=1");
    t_run(4, aux_body, "dp=2,pp=2");
    t_run(4, aux_body, "pp=2,tp=2");
}
