/* Regression tests for silent wrong results: each computes the expected value independently on
 * the host (plain loops over the full tensors) and compares the sharded result with it. The
 * invalid calls themselves are in test_bad_input.c. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

static uint64_t collectives(dt_ctx *ctx) {
    dt_comm_stats st;
    if (dt_comm_stats_get(ctx, &st) != DT_OK) return UINT64_MAX;
    uint64_t n = 0;
    for (int k = 0; k < DT_COLL_KIND_COUNT; k++) n += st.calls[k];
    return n;
}

/* argmax over dims={1} of a 2x3 input gives 2 indices (it reduced dim 0 before), on a 1-D and
 * a 2-D mesh, with the input sharded along the kept dim. */
static dt_status argmax_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    float x[6] = {1, 5, 2, 9, 3, 4};
    int64_t s[2] = {2, 3};
    dt_placement s0[1] = {dt_shard(0)};
    dt_tensor *t, *am, *amin;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, 1, s0, DT_ALL_RANKS, &t));
    int dim = 1, last = -1;
    R_OK(dt_reduce(DT_OP_ARGMAX, t, &dim, 1, 0, &am));
    R_OK(dt_reduce(DT_OP_ARGMIN, t, &last, 1, 0, &amin));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(am, &info));
    R_CHECK(info.ndim == 1 && info.shape[0] == 2, "argmax(dim=1) of 2x3 has %d dims, shape[0] %lld",
            info.ndim, (long long)info.shape[0]);
    int64_t got[2], gotmin[2];
    R_OK(dt_tensor_full_tensor(am, got, sizeof got));
    R_OK(dt_tensor_full_tensor(amin, gotmin, sizeof gotmin));
    for (int r = 0; r < 2; r++) {
        int64_t hi = 0, lo = 0;
        for (int c = 1; c < 3; c++) {
            if (x[r * 3 + c] > x[r * 3 + hi]) hi = c;
            if (x[r * 3 + c] < x[r * 3 + lo]) lo = c;
        }
        R_CHECK(got[r] == hi && gotmin[r] == lo, "row %d: argmax %lld (want %lld), argmin %lld "
                "(want %lld)", r, (long long)got[r], (long long)hi, (long long)gotmin[r],
                (long long)lo);
    }
    dt_tensor_release(t), dt_tensor_release(am), dt_tensor_release(amin);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, argmax_reduces_the_dim_it_is_given) { t_run(2, argmax_body, NULL); }

/* add/sub of P(max), P(min) or P(avg) with a replicated tensor: no collective, and the full
 * value is op(reduce_i(a_i), r) computed on the host. */
static dt_status partial_plus_replicate_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int me = dt_ctx_rank(ctx);
    enum { N = 6 };
    int64_t s[1] = {N};
    double mine[N], r[N], all[4][N];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < N; i++) all[k][i] = (double)((k * 7 + i * 3) % 11) - 5;
    for (int i = 0; i < N; i++) mine[i] = all[me][i], r[i] = (double)(i * i) - 4;
    static const dt_reduce_op kinds[] = {DT_REDUCE_MAX, DT_REDUCE_MIN, DT_REDUCE_AVG};
    dt_placement rep[1] = {dt_replicate()};
    dt_tensor *tr;
    R_OK(dt_tensor_distribute(mesh, r, DT_F64, 1, s, 1, rep, DT_ALL_RANKS, &tr));
    for (int k = 0; k < 3; k++) {
        dt_placement p[1] = {dt_partial(kinds[k])};
        dt_tensor *tp, *sum, *diff;
        R_OK(dt_tensor_from_local(mesh, mine, DT_F64, 1, s, 1, p, s, 0, &tp));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_add(tp, tr, &sum));
        R_OK(dt_sub(tr, tp, &diff));
        R_CHECK(collectives(ctx) == 0, "%s: add/sub with a replicated tensor communicated",
                kinds[k] == DT_REDUCE_AVG ? "P(avg)" : "P(max|min)");
        double gs[N], gd[N];
        R_OK(dt_tensor_full_tensor(sum, gs, sizeof gs));
        R_OK(dt_tensor_full_tensor(diff, gd, sizeof gd));
        for (int i = 0; i < N; i++) {
            double red = all[0][i];
            for (int q = 1; q < 4; q++)
                red = kinds[k] == DT_REDUCE_MAX   ? fmax(red, all[q][i])
                      : kinds[k] == DT_REDUCE_MIN ? fmin(red, all[q][i])
                                                  : red + all[q][i];
            if (kinds[k] == DT_REDUCE_AVG) red /= 4;
            R_CHECK(fabs(gs[i] - (red + r[i])) < 1e-12 && fabs(gd[i] - (r[i] - red)) < 1e-12,
                    "kind %d element %d: add %g (want %g), sub %g (want %g)", k, i, gs[i],
                    red + r[i], gd[i], r[i] - red);
        }
        dt_tensor_release(tp), dt_tensor_release(sum), dt_tensor_release(diff);
    }
    dt_tensor_release(tr);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, partial_max_min_avg_plus_replicate_stays_partial) {
    t_run(4, partial_plus_replicate_body, NULL);
}

/* add_(weight [R,S(0)], grad [P(sum),S(0)]) keeps the weight [R,S(0)] and its value is
 * weight + sum over dp of the grads. */
static dt_status in_place_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    enum { R = 4, C = 3 };
    int64_t s[2] = {R, C};
    double w[R * C], g[2][R * C];
    for (int i = 0; i < R * C; i++) w[i] = i, g[0][i] = 0.5 * i - 1, g[1][i] = 2 - i;
    dt_placement wp[2] = {dt_replicate(), dt_shard(0)}, gp[2] = {dt_partial(DT_REDUCE_SUM),
                                                                  dt_shard(0)};
    dt_tensor *tw, *tg;
    R_OK(dt_tensor_distribute(mesh, w, DT_F64, 2, s, 2, wp, DT_ALL_RANKS, &tw));
    int coord[2];
    R_OK(dt_mesh_coord_of(mesh, dt_mesh_rank(mesh), coord));
    /* Each dp rank holds its own gradient for its tp rows. */
    int64_t ls[2] = {R / 2, C};
    R_OK(dt_tensor_from_local(mesh, g[coord[0]] + coord[1] * (R / 2) * C, DT_F64, 2, ls, 2, gp, s,
                              0, &tg));
    R_OK(dt_add_(tw, tg));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(tw, &info));
    for (int m = 0; m < 2; m++)
        R_CHECK(dt_placement_equal(info.placements[m], wp[m]),
                "add_ changed the weight's placement on mesh dim %d", m);
    double got[R * C];
    R_OK(dt_tensor_full_tensor(tw, got, sizeof got));
    for (int i = 0; i < R * C; i++)
        R_CHECK(got[i] == w[i] + g[0][i] + g[1][i], "element %d: %g, want %g", i, got[i],
                w[i] + g[0][i] + g[1][i]);
    dt_tensor_release(tw), dt_tensor_release(tg);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, in_place_add_keeps_the_destination_placements) { t_run(4, in_place_body, NULL); }

/* cross_entropy with ignore_index: ignored rows count 0 and leave the mean; with the target
 * sharded, the ignored rows live on one rank only and every rank agrees. */
typedef struct ce_run {
    const char *mesh;
    dt_placement logits_pl, target_pl;
    int64_t ignore; /* 0 = dt_cross_entropy's default (-100) */
} ce_run;

static dt_status ce_body(dt_ctx *ctx, void *arg) {
    const ce_run *c = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    enum { N = 6, K = 5 };
    int64_t ignore = c->ignore ? c->ignore : DT_IGNORE_INDEX;
    double x[N * K];
    for (int i = 0; i < N * K; i++) x[i] = t_value(3, (size_t)i);
    int64_t lab[N] = {1, 4, 0, 2, ignore, ignore}, ls[2] = {N, K}, ts[1] = {N};
    double want_sum = 0, kept = 0, want_rows[N];
    for (int i = 0; i < N; i++) {
        want_rows[i] = 0;
        if (lab[i] == ignore) continue;
        double m = x[i * K], z = 0;
        for (int k = 1; k < K; k++) m = fmax(m, x[i * K + k]);
        for (int k = 0; k < K; k++) z += exp(x[i * K + k] - m);
        want_rows[i] = -(x[i * K + lab[i]] - m - log(z));
        want_sum += want_rows[i], kept++;
    }
    dt_placement lp[1] = {c->logits_pl}, tp[1] = {c->target_pl};
    dt_tensor *tl, *tt, *mean, *rows;
    R_OK(dt_tensor_distribute(mesh, x, DT_F64, 2, ls, 1, lp, DT_ALL_RANKS, &tl));
    R_OK(dt_tensor_distribute(mesh, lab, DT_I64, 1, ts, 1, tp, DT_ALL_RANKS, &tt));
    if (c->ignore) {
        R_OK(dt_cross_entropy_ignore(tl, tt, 1, c->ignore, &mean));
        R_OK(dt_cross_entropy_ignore(tl, tt, 0, c->ignore, &rows));
    } else {
        R_OK(dt_cross_entropy(tl, tt, 1, &mean));
        R_OK(dt_cross_entropy(tl, tt, 0, &rows));
    }
    double got, got_rows[N];
    R_OK(dt_tensor_full_tensor(mean, &got, sizeof got));
    R_OK(dt_tensor_full_tensor(rows, got_rows, sizeof got_rows));
    R_CHECK(fabs(got - want_sum / kept) < 1e-12, "mean %.15g, want %.15g", got, want_sum / kept);
    for (int i = 0; i < N; i++)
        R_CHECK(fabs(got_rows[i] - want_rows[i]) < 1e-12, "row %d: %.15g, want %.15g", i,
                got_rows[i], want_rows[i]);
    dt_tensor_release(tl), dt_tensor_release(tt), dt_tensor_release(mean), dt_tensor_release(rows);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, cross_entropy_skips_ignored_rows) {
    const ce_run runs[] = {
        {"1", dt_replicate(), dt_replicate(), 0},
        {"3", dt_shard(0), dt_shard(0), 0},        /* rows 4, 5 (ignored) on rank 2 only */
        {"2", dt_shard(1), dt_replicate(), 3},     /* class-sharded logits, ignore class 3 */
        {"4", dt_replicate(), dt_shard(0), -7},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
        t_run(runs[i].mesh[0] - '0', ce_body, (void *)&runs[i]);
}

/* A label out of range on one rank's shard fails on every rank, naming the same element. */
static dt_status ce_bad_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int64_t lab[8] = {0, 1, 2, 3, 0, 1, 40, 2}, ls[2] = {8, 40}, ts[1] = {8};
    float *x = calloc(8 * 40, sizeof(float));
    dt_placement s0[1] = {dt_shard(0)};
    dt_tensor *tl, *tt, *out = NULL;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, ls, 1, s0, DT_ALL_RANKS, &tl));
    R_OK(dt_tensor_distribute(mesh, lab, DT_I64, 1, ts, 1, s0, DT_ALL_RANKS, &tt));
    R_ERR(dt_cross_entropy(tl, tt, 1, &out), DT_ERR_ARG, "target element 6 (flat, row-major) = 40");
    R_CHECK(out == NULL, "out written on failure");
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    R_OK(dt_barrier(world)); /* every rank returned: the world still works */
    dt_tensor_release(tl), dt_tensor_release(tt);
    free(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, cross_entropy_label_out_of_range_fails_on_every_rank) {
    t_run(4, ce_bad_body, NULL);
}

/* t() of a 1-D tensor is the tensor itself; of a 2-D one the transpose. */
static dt_status t_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    float x[6] = {1, 2, 3, 4, 5, 6}, got[6];
    int64_t v[1] = {6}, m[2] = {2, 3};
    dt_placement s0[1] = {dt_shard(0)};
    dt_tensor *tv, *tm, *a, *b;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 1, v, 1, s0, DT_ALL_RANKS, &tv));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, m, 1, s0, DT_ALL_RANKS, &tm));
    R_OK(dt_t(tv, &a));
    R_OK(dt_tensor_full_tensor(a, got, sizeof got));
    for (int i = 0; i < 6; i++) R_CHECK(got[i] == x[i], "t() of 1-D changed element %d", i);
    R_OK(dt_t(tm, &b));
    R_OK(dt_tensor_full_tensor(b, got, sizeof got));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            R_CHECK(got[i * 2 + j] == x[j * 3 + i], "t() of 2x3 at (%d,%d)", i, j);
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(tv), dt_tensor_release(tm);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, t_of_a_vector_is_the_identity) { t_run(2, t_body, NULL); }

/* exchange_boxes picks its protocol the same way on every rank: with a non-blocking request
 * in flight on the comm, one rank could see it finished and go direct while another queued
 * the packed all_to_allv (a valid program failing as "all_to_all vs exchange_boxes"). */
static dt_status exchange_after_request_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    dt_comm *comm;
    R_OK(dt_mesh_dim_comm(mesh, 0, &comm));
    float x[8 * 8], back[8 * 8];
    t_fill(DT_F32, x, 64, 4);
    int64_t s[2] = {8, 8};
    dt_placement s0[1] = {dt_shard(0)}, s1[1] = {dt_shard(1)};
    dt_tensor *t;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, 1, s0, DT_ALL_RANKS, &t));
    for (int it = 0; it < 50; it++) {
        int v = dt_ctx_rank(ctx) + it, sum = 0;
        dt_request *req;
        R_OK(dt_all_reduce_start(comm, &v, &sum, 1, DT_I32, DT_REDUCE_SUM, &req));
        dt_tensor *u;
        R_OK(dt_tensor_redistribute(t, 1, s1, &u)); /* an all_to_all of boxes */
        R_OK(dt_request_wait(req, NULL));
        R_CHECK(sum == 6 + 4 * it, "iteration %d: all_reduce gave %d", it, sum);
        R_OK(dt_tensor_full_tensor(u, back, sizeof back));
        for (int i = 0; i < 64; i++) R_CHECK(back[i] == x[i], "iteration %d element %d", it, i);
        dt_tensor_release(u);
    }
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, exchange_boxes_after_a_request_agrees_on_every_rank) {
    t_run(4, exchange_after_request_body, NULL);
}

/* Integer P(avg) + P(avg): the reduction truncates, so adding the partial values first is
 * not the sum of the averages; the result must equal trunc(A/n) + trunc(B/n) computed here. */
static dt_status int_avg_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int me = dt_ctx_rank(ctx);
    int64_t s[1] = {2}, a[2][2] = {{1, -3}, {0, 2}}, b[2][2] = {{1, 1}, {0, -2}};
    dt_placement p[1] = {dt_partial(DT_REDUCE_AVG)};
    dt_tensor *ta, *tb, *sum;
    R_OK(dt_tensor_from_local(mesh, a[me], DT_I64, 1, s, 1, p, s, 0, &ta));
    R_OK(dt_tensor_from_local(mesh, b[me], DT_I64, 1, s, 1, p, s, 0, &tb));
    R_OK(dt_add(ta, tb, &sum));
    int64_t got[2];
    R_OK(dt_tensor_full_tensor(sum, got, sizeof got));
    for (int i = 0; i < 2; i++) {
        int64_t want = (a[0][i] + a[1][i]) / 2 + (b[0][i] + b[1][i]) / 2; /* C truncates */
        R_CHECK(got[i] == want, "element %d: %lld, want %lld", i, (long long)got[i],
                (long long)want);
    }
    dt_tensor_release(ta), dt_tensor_release(tb), dt_tensor_release(sum);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(hardening, integer_partial_avg_is_reduced_before_adding) { t_run(2, int_avg_body, NULL); }
