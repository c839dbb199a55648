/* cross_entropy's reductions (none, mean, sum), ignore_index and label smoothing, on meshes
 * 4, 3 and 2x2 with uneven shapes, against torch's formula computed here in double; and loss
 * parallel (class dim sharded) with smoothing, which must not move the logits. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"
#include "op_cases.h"
#include "ops/grad.h"

/* torch: per sample, -((1 - eps) * lsm[t] + eps * mean_c lsm[c]), 0 where ignored; mean
 * divides the sum by the not-ignored count. logits (N, C, D) row-major, target (N, D). */
static void naive(const double *x, const int64_t *t, int N, int C, int D, double eps,
                  dt_reduction how, double *out, int *nout) {
    double sum = 0;
    int kept = 0;
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) {
            double mx = -INFINITY, se = 0, mean = 0;
            for (int c = 0; c < C; c++) mx = fmax(mx, x[(n * C + c) * D + d]);
            for (int c = 0; c < C; c++) se += exp(x[(n * C + c) * D + d] - mx);
            double lse = mx + log(se);
            for (int c = 0; c < C; c++) mean += (x[(n * C + c) * D + d] - lse) / C;
            int64_t tt = t[n * D + d];
            double l = 0;
            if (tt != DT_IGNORE_INDEX) {
                l = -((1 - eps) * (x[(n * C + tt) * D + d] - lse) + eps * mean);
                kept++;
            }
            out[n * D + d] = l;
            sum += l;
        }
    *nout = how == DT_REDUCTION_NONE ? N * D : 1;
    if (how == DT_REDUCTION_SUM) out[0] = sum;
    if (how == DT_REDUCTION_MEAN) out[0] = sum / kept;
}

typedef struct xent_arg {
    const char *mesh;
} xent_arg;

static dt_status xent_body(dt_ctx *ctx, void *arg) {
    const xent_arg *xa = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, xa->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    static const int shapes[][3] = {{7, 5, 1}, {3, 6, 2}}; /* N, C, D (D 1: 2-D logits) */
    static const double eps[] = {0, 0.1, 1};
    for (size_t si = 0; si < 2; si++) {
        int N = shapes[si][0], C = shapes[si][1], D = shapes[si][2], nd = D > 1 ? 3 : 2;
        int64_t ls[3] = {N, C, D}, ts[2] = {N, D};
        double *x = malloc(sizeof(double) * (size_t)(N * C * D)), want[64], got[64];
        float *xf = malloc(sizeof(float) * (size_t)(N * C * D));
        int64_t t[64];
        for (int e = 0; e < N * C * D; e++) xf[e] = (float)(x[e] = t_value(90 + si, (size_t)e) / 4);
        for (int e = 0; e < N * D; e++) t[e] = e % 4 == 2 ? DT_IGNORE_INDEX : (e * 7 + 3) % C;
        for (int lp = 0; lp < 4; lp++)
            for (int tp = 0; tp < 2; tp++) {
                dt_placement lpl[2], tpl[2];
                for (int m = 0; m < mnd; m++) { /* logits R, S(0), S(1), P(sum); target R/S(0) */
                    int k = (lp + m) % 4;
                    lpl[m] = k == 0 ? dt_replicate() : k == 3 ? dt_partial(DT_REDUCE_SUM)
                                                              : dt_shard(k - 1);
                    tpl[m] = tp && lpl[m].kind == DT_PLACEMENT_SHARD && lpl[m].dim == 0
                                 ? dt_shard(0) : dt_replicate();
                }
                dt_tensor *lg, *tg;
                R_OK(dt_tensor_distribute(mesh, xf, DT_F32, nd, ls, mnd, lpl, DT_ALL_RANKS, &lg));
                R_OK(dt_tensor_distribute(mesh, t, DT_I64, nd - 1, ts, mnd, tpl, DT_ALL_RANKS,
                                          &tg));
                for (int how = 0; how < 3; how++)
                    for (size_t ei = 0; ei < DT_COUNT_OF(eps); ei++) {
                        dt_xent_opts o = DT_XENT_DEFAULTS;
                        o.reduction = (dt_reduction)how, o.label_smoothing = eps[ei];
                        dt_tensor *loss;
                        R_OK(dt_cross_entropy_ex(lg, tg, &o, &loss));
                        int nw;
                        naive(x, t, N, C, D, eps[ei], o.reduction, want, &nw);
                        dt_tensor_info li;
                        R_OK(dt_tensor_info_get(loss, &li));
                        R_CHECK((int)li.numel == nw, "xent %d: %zu elements, want %d", how,
                                li.numel, nw);
                        float gf[64];
                        R_OK(dt_tensor_full_tensor(loss, gf, sizeof(float) * li.numel));
                        for (int e = 0; e < nw; e++) {
                            got[e] = gf[e];
                            R_CHECK(fabs(got[e] - want[e]) <= 2e-5 * (1 + fabs(want[e])),
                                    "xent N%d C%d D%d on %s logits set %d target %d reduction %d "
                                    "eps %g: [%d] = %.8g, want %.8g", N, C, D, xa->mesh, lp, tp,
                                    how, eps[ei], e, got[e], want[e]);
                        }
                        dt_tensor_release(loss);
                    }
                dt_xent_opts bad = DT_XENT_DEFAULTS;
                dt_tensor *loss = NULL;
                bad.label_smoothing = 1.5;
                R_ERR(dt_cross_entropy_ex(lg, tg, &bad, &loss), DT_ERR_ARG, "label_smoothing");
                bad.label_smoothing = NAN;
                R_ERR(dt_cross_entropy_ex(lg, tg, &bad, &loss), DT_ERR_ARG, "label_smoothing");
                bad = DT_XENT_DEFAULTS, bad.reduction = (dt_reduction)9;
                R_ERR(dt_cross_entropy_ex(lg, tg, &bad, &loss), DT_ERR_ARG, "reduction");
                R_CHECK(loss == NULL, "written on failure");
                dt_tensor_release(lg), dt_tensor_release(tg);
            }
        free(x), free(xf);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(xent, reductions_ignore_and_smoothing_equal_naive) {
    static const char *const meshes[] = {"4", "3", "2x2"};
    for (int m = 0; m < 3; m++) {
        xent_arg a = {meshes[m]};
        t_run(op_mesh_ranks(meshes[m]), xent_body, &a);
    }
}

/* Loss parallel with smoothing and ignored rows: the logits stay sharded on the class dim;
 * only values per sample are reduced. */
static dt_status parallel_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=4", &mesh));
    enum { N = 16, C = 16387 };
    int64_t ls[2] = {N, C}, ts[1] = {N};
    float *x = malloc(sizeof(float) * N * C);
    double *xd = malloc(sizeof(double) * N * C), want[N];
    int64_t t[N];
    for (int i = 0; i < N * C; i++) xd[i] = x[i] = (float)(t_value(12, (size_t)i) / 4);
    for (int i = 0; i < N; i++) t[i] = i % 5 == 1 ? DT_IGNORE_INDEX : (i * 977) % C;
    dt_placement cls[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    dt_tensor *lg, *tg, *loss;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, ls, 1, cls, DT_ALL_RANKS, &lg));
    R_OK(dt_tensor_distribute(mesh, t, DT_I64, 1, ts, 1, rep, DT_ALL_RANKS, &tg));
    for (int how = 1; how <= 2; how++) {
        dt_xent_opts o = DT_XENT_DEFAULTS;
        o.reduction = (dt_reduction)how, o.label_smoothing = 0.2;
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_cross_entropy_ex(lg, tg, &o, &loss));
        R_CHECK(t_issued(ctx, DT_COLL_ALL_GATHER) == 0 && t_issued(ctx, DT_COLL_ALL_TO_ALL) == 0,
                "loss parallel moved the logits: %llu all_gather, %llu all_to_all",
                (unsigned long long)t_issued(ctx, DT_COLL_ALL_GATHER),
                (unsigned long long)t_issued(ctx, DT_COLL_ALL_TO_ALL));
        int nw;
        naive(xd, t, N, C, 1, 0.2, o.reduction, want, &nw);
        float got;
        R_OK(dt_tensor_full_tensor(loss, &got, sizeof got));
        R_CHECK(fabs(got - want[0]) <= 1e-4 * (1 + fabs(want[0])), "loss %g, want %g", got,
                want[0]);
        dt_tensor_release(loss);
    }
    dt_tensor_release(lg), dt_tensor_release(tg);
    free(x), free(xd);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(xent, loss_parallel_with_smoothing_keeps_logits_in_place) { t_run(4, parallel_body, NULL); }

/* The backward of a sum (or mean) over the class dim of class-sharded x, loss parallel's sum
 * of exponentials: the gradient comes out in x's class shards (uneven: 10 classes over 4
 * ranks, 3, 3, 3, 1), every element its row's upstream gradient (over C for the mean), never
 * a Replicate expand of every class; keepdim or not. */
static dt_status unreduce_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=4", &mesh));
    enum { N = 5, C = 10 };
    int64_t xs[2] = {N, C}, gs[2] = {N, 1};
    double xv[N * C], gv[N], got[N * C];
    for (int i = 0; i < N * C; i++)
        xv[i] = t_value(41, (size_t)i);
    for (int i = 0; i < N; i++)
        gv[i] = t_value(42, (size_t)i);
    dt_placement cls[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    dt_tensor *x;
    R_OK(dt_tensor_distribute(mesh, xv, DT_F64, 2, xs, 1, cls, DT_ALL_RANKS, &x));
    for (int mean = 0; mean < 2; mean++)
        for (int keepdim = 0; keepdim < 2; keepdim++) {
            dt_tensor *g, *gin[1] = {NULL};
            R_OK(dt_tensor_distribute(mesh, gv, DT_F64, keepdim ? 2 : 1, gs, 1, rep, DT_ALL_RANKS,
                                      &g));
            dt_op_args a = {.ndims = 1, .dims = {1}, .keepdim = keepdim};
            bool need[1] = {true};
            dt_grad_call c = {.op = mean ? DT_OP_MEAN : DT_OP_SUM,
                              .args = &a,
                              .n = 1,
                              .in = &x,
                              .need = need,
                              .grad = g};
            R_OK(mean ? dt_grad_mean(&c, gin) : dt_grad_sum(&c, gin));
            dt_tensor_info info;
            R_OK(dt_tensor_info_get(gin[0], &info));
            R_CHECK(info.placements[0].kind == DT_PLACEMENT_SHARD && info.placements[0].dim == 1,
                    "mean %d keepdim %d: the gradient is not in x's class shards", mean, keepdim);
            R_OK(dt_tensor_full_tensor(gin[0], got, sizeof got));
            for (int i = 0; i < N * C; i++)
                R_CHECK(got[i] == (mean ? gv[i / C] / C : gv[i / C]),
                        "mean %d keepdim %d element %d: %g, want %g", mean, keepdim, i, got[i],
                        mean ? gv[i / C] / C : gv[i / C]);
            dt_tensor_release(gin[0]), dt_tensor_release(g);
        }
    dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(xent, class_sum_backward_lands_in_the_class_shards) {
    t_run(4, unreduce_body, NULL);
}
