/* The gradient of redistribute, on every row of tests/conformance/redistribute_cases.tsv in
 * f64 on real local ranks: x (requires grad) in the row's source placements, y =
 * redistribute(x, dst), loss = sum(y * w). Autograd differentiates the tensor's value (what
 * dt_tensor_full_tensor gathers), so d loss / d x is w for every source, Partial ones included; the
 * backward's collectives must be no more than the dual of the forward's plan needs. Also: a
 * Partial leaf whose parts differ gets the same gradient through an explicit redistribute as
 * through the move dispatch makes by itself, and slice's gradient pads in the gradient's own
 * layout. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

/* Collectives by kind: all_gather, all_to_all, all_reduce, reduce_scatter. */
enum { AG, A2A, AR, RS, NK };
static const char *const kind_name[NK] = {"all_gather", "all_to_all", "all_reduce",
                                          "reduce_scatter"};
static const dt_coll_kind coll_of[NK] = {DT_COLL_ALL_GATHER, DT_COLL_ALL_TO_ALL,
                                         DT_COLL_ALL_REDUCE, DT_COLL_REDUCE_SCATTER};

typedef struct row_run {
    char id[16], mesh[32], src_text[64], dst_text[64];
    int mnd, ms[DT_MESH_MAX_NDIM], nd;
    int64_t shape[DT_MAX_NDIM];
    dt_placement src[DT_MESH_MAX_NDIM], dst[DT_MESH_MAX_NDIM];
    int sync; /* grad sync on */
    /* out, rank 0: */
    uint64_t fwd[NK], bwd[NK], other_bwd;
} row_run;

static dt_placement unpartial(dt_placement p) {
    return p.kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : p;
}

static dt_status row_body(dt_ctx *ctx, void *arg) {
    row_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    R_OK(dt_ctx_set_grad_sync(ctx, r->sync));
    size_t n = 1;
    for (int d = 0; d < r->nd; d++) n *= (size_t)r->shape[d];
    double *xb = malloc(n * 8 + 8), *wb = malloc(n * 8 + 8), *gb = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++) xb[i] = t_value(7, i), wb[i] = t_value(11, i);
    dt_placement wpl[DT_MESH_MAX_NDIM]; /* w laid out like y, Replicate where y is Partial */
    for (int m = 0; m < r->mnd; m++) wpl[m] = unpartial(r->dst[m]);
    dt_tensor *x, *y, *w, *prod, *loss;
    R_OK(dt_tensor_distribute(mesh, xb, DT_F64, r->nd, r->shape, r->mnd, r->src, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, wb, DT_F64, r->nd, r->shape, r->mnd, wpl, DT_ALL_RANKS, &w));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_tensor_redistribute(x, r->mnd, r->dst, &y));
    for (int k = 0; k < NK; k++) r->fwd[k] = t_issued(ctx, coll_of[k]);
    R_OK(dt_mul(y, w, &prod));
    R_OK(dt_sum(prod, NULL, 0, 0, &loss));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_backward(loss));
    uint64_t all = t_issued_total(ctx), kinds = 0;
    for (int k = 0; k < NK; k++) kinds += r->bwd[k] = t_issued(ctx, coll_of[k]);
    r->other_bwd = all - kinds;
    dt_tensor *g = dt_tensor_grad(x);
    R_CHECK(g != NULL, "%s: x got no gradient", r->id);
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(g, &info));
    /* Synced, the gradient is in x's placements; unsynced it stays as the backward left it
     * (a leaf's gradient passes the redistribute unmoved), so only its value is checked. */
    for (int m = 0; r->sync && m < r->mnd; m++) {
        dt_placement want = r->src[m];
        char have[32], wanted[32];
        dt_placements_format(&info.placements[m], 1, have, sizeof have);
        dt_placements_format(&want, 1, wanted, sizeof wanted);
        R_CHECK(dt_placement_equal(info.placements[m], want),
                "%s (sync %d): the gradient is %s on mesh dim %d, want %s", r->id, r->sync, have,
                m, wanted);
    }
    R_OK(dt_tensor_full_tensor(g, gb, n * 8));
    for (size_t i = 0; i < n; i++)
        R_CHECK(gb[i] == wb[i], "%s (sync %d): d loss / d x [%zu] = %g, want w = %g", r->id,
                r->sync, i, gb[i], wb[i]);
    dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(w);
    dt_tensor_release(prod), dt_tensor_release(loss);
    free(xb), free(wb), free(gb);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* What the dual of the forward plan issues, step by step: the gradient arrives in y's
 * placements (Replicate where y is Partial) and goes back to x's (Replicate where x is
 * Partial). A gather's dual is a local slice, a local slice's an all_gather, an all_to_all's
 * an all_to_all, a reduce_scatter's (P -> S) an all_gather (S -> R); all_reduce, to_partial
 * and scale become R -> R: nothing. */
static void dual_of(const dt_plan *plan, uint64_t *dual) {
    for (int k = 0; k < NK; k++) dual[k] = 0;
    for (int i = 0; i < dt_plan_nsteps(plan); i++) {
        dt_plan_step s;
        dt_plan_step_get(plan, i, &s);
        if (s.kind == DT_STEP_ALL_TO_ALL) dual[A2A]++;
        if (s.kind == DT_STEP_SLICE || s.kind == DT_STEP_REDUCE_SCATTER) dual[AG]++;
    }
}

static void counts_text(const uint64_t *c, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < NK; k++)
        if (c[k])
            o += (size_t)snprintf(buf + o, cap - o, "%s%s x%llu", o ? " + " : "", kind_name[k],
                                  (unsigned long long)c[k]);
    if (!o) snprintf(buf, cap, "none");
}

Test(autograd_redistribute, every_conformance_row_forward_and_backward) {
    char path[512], line[4096];
    FILE *f = t_open_conformance("redistribute_cases.tsv", path, sizeof path);
    cr_assert(f, "cannot open the conformance cases (%s)", path);
    fgets(line, sizeof line, f); /* header */
    int rows = 0, fwd_total = 0, bwd_total = 0, dual_total = 0;
    while (fgets(line, sizeof line, f)) {
        char *cols[8] = {0};
        if (t_split_tabs(line, cols, 8) < 6) continue;
        row_run r = {0};
        snprintf(r.id, sizeof r.id, "%s", cols[0]);
        snprintf(r.mesh, sizeof r.mesh, "%s", cols[1]);
        snprintf(r.src_text, sizeof r.src_text, "%s", cols[3]);
        snprintf(r.dst_text, sizeof r.dst_text, "%s", cols[4]);
        r.mnd = t_parse_dims(cols[1], r.ms, DT_MESH_MAX_NDIM);
        int dims[DT_MAX_NDIM], np;
        r.nd = t_parse_dims(cols[2], dims, DT_MAX_NDIM);
        cr_assert(r.mnd > 0 && r.nd > 0, "%s: mesh %s shape %s", r.id, cols[1], cols[2]);
        for (int d = 0; d < r.nd; d++) r.shape[d] = dims[d];
        cr_assert_eq(dt_placements_parse(r.src_text, r.src, DT_MESH_MAX_NDIM, &np), DT_OK, "%s",
                     r.id);
        cr_assert_eq(dt_placements_parse(r.dst_text, r.dst, DT_MESH_MAX_NDIM, &np), DT_OK, "%s",
                     r.id);
        dt_plan *plan;
        cr_assert_eq(dt_plan_create(r.mnd, r.ms, r.nd, r.shape, DT_F64, r.src, r.dst, NULL, &plan),
                     DT_OK, "%s: %s", r.id, dt_last_error());
        uint64_t dual[NK];
        dual_of(plan, dual);
        dt_plan_release(plan);
        /* A P(max) or P(min) y cannot be multiplied by w as it is: dispatch moves it for the
         * loss's mul (a reduce_scatter or all_reduce), and that move's dual may add one
         * collective per such mesh dim to the backward. */
        uint64_t moved = 0;
        for (int m = 0; m < r.mnd; m++)
            moved += r.dst[m].kind == DT_PLACEMENT_PARTIAL &&
                     (r.dst[m].op == DT_REDUCE_MAX || r.dst[m].op == DT_REDUCE_MIN);
        int nranks = 1;
        for (int m = 0; m < r.mnd; m++) nranks *= r.ms[m];
        for (r.sync = 0; r.sync < 2; r.sync++) {
            t_run(nranks, row_body, &r);
            uint64_t bwd = 0, dn = 0;
            for (int k = 0; k < NK; k++) bwd += r.bwd[k], dn += dual[k];
            cr_assert_eq(r.other_bwd, 0, "%s: the backward issued %llu other collectives", r.id,
                         (unsigned long long)r.other_bwd);
            cr_assert(bwd <= dn + moved, "%s: the backward issued %llu collectives, the dual plan "
                                         "needs %llu (+%llu for dispatch's move of y)", r.id,
                      (unsigned long long)bwd, (unsigned long long)dn, (unsigned long long)moved);
            /* the gradient is never Partial here (w is not): nothing to reduce */
            cr_assert(r.bwd[AR] == 0 && r.bwd[RS] == 0, "%s: the backward reduced (%llu "
                      "all_reduce, %llu reduce_scatter)", r.id, (unsigned long long)r.bwd[AR],
                      (unsigned long long)r.bwd[RS]);
            if (!r.sync) continue; /* with sync on, the leaf's own placements are reached too */
            char a[128], b[128], c[128];
            counts_text(r.fwd, a, sizeof a);
            counts_text(r.bwd, b, sizeof b);
            counts_text(dual, c, sizeof c);
            cr_log_info("%s mesh %s %s -> %s: forward %s; backward %s (dual bound %s)", r.id,
                        r.mesh, r.src_text, r.dst_text, a, b, c);
            for (int k = 0; k < NK; k++)
                fwd_total += (int)r.fwd[k], bwd_total += (int)r.bwd[k];
            dual_total += (int)dn;
        }
        rows++;
    }
    fclose(f);
    cr_assert_gt(rows, 10, "only %d conformance rows (%s)", rows, path);
    cr_log_info("%d rows: gradients equal w; %d collectives forward, %d backward (dual bound %d)",
                rows, fwd_total, bwd_total, dual_total);
}

/* A Partial leaf whose parts differ, x = reduce(parts): loss = sum(exp(x) * w) through an
 * explicit redistribute to Replicate and through the move dispatch makes for exp by itself
 * (which records nothing). Both give d loss / d x = exp(x) w, computed here from the parts:
 * the gradient of the value, the same for every reduce op. (A per-part rule for the explicit
 * move, w / n for avg or w where the part is the max, would make the two disagree.) */
typedef struct partial_run {
    dt_reduce_op op;
    int explicit_move;
} partial_run;

static dt_status partial_body(dt_ctx *ctx, void *arg) {
    partial_run *p = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    enum { N = 12 };
    int64_t shape[1] = {N};
    double part[4][N], local[N], wb[N], gb[N];
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < N; i++) part[r][i] = t_value(31 + (uint64_t)r, (size_t)i) / 16;
    for (int i = 0; i < N; i++) wb[i] = t_value(5, (size_t)i);
    memcpy(local, part[dt_ctx_rank(ctx)], sizeof local);
    dt_placement pl[1] = {dt_partial(p->op)}, rep[1] = {dt_replicate()};
    dt_tensor *x, *w, *xr = NULL, *e, *prod, *loss;
    R_OK(dt_tensor_from_local(mesh, local, DT_F64, 1, shape, 1, pl, shape, 0, &x));
    R_OK(dt_tensor_distribute(mesh, wb, DT_F64, 1, shape, 1, rep, DT_ALL_RANKS, &w));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    if (p->explicit_move) R_OK(dt_tensor_redistribute(x, 1, rep, &xr));
    R_OK(dt_exp(xr ? xr : x, &e));
    R_OK(dt_mul(e, w, &prod));
    R_OK(dt_sum(prod, NULL, 0, 0, &loss));
    R_OK(dt_backward(loss));
    R_CHECK(dt_tensor_grad(x) != NULL, "no gradient");
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(x), gb, sizeof gb));
    for (int i = 0; i < N; i++) {
        double v = part[0][i];
        for (int r = 1; r < 4; r++) {
            double q = part[r][i];
            v = p->op == DT_REDUCE_MAX ? fmax(v, q) : p->op == DT_REDUCE_MIN ? fmin(v, q) : v + q;
        }
        if (p->op == DT_REDUCE_AVG) v /= 4;
        double want = exp(v) * wb[i];
        R_CHECK(fabs(gb[i] - want) <= 1e-12 * (1 + fabs(want)),
                "P(op %d) %s: gradient [%d] = %.15g, want exp(x) w = %.15g", (int)p->op,
                p->explicit_move ? "explicit" : "implicit", i, gb[i], want);
    }
    dt_tensor_release(x), dt_tensor_release(w), dt_tensor_release(xr), dt_tensor_release(e);
    dt_tensor_release(prod), dt_tensor_release(loss);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd_redistribute, partial_sources_give_the_values_gradient_either_way) {
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX,
                                       DT_REDUCE_MIN};
    for (int o = 0; o < 4; o++)
        for (int e = 0; e < 2; e++) {
            partial_run p = {.op = ops[o], .explicit_move = e};
            t_run(4, partial_body, &p);
        }
}

/* slice's gradient arriving sharded along the sliced dim: padded with zeros sharded on the
 * other dim, it reaches the input by one all_to_all, not an all_gather; with grad sync off the
 * gradient stays there. Gathered: zeros with g at [start, end). */
static dt_status slice_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    R_OK(dt_ctx_set_grad_sync(ctx, 0));
    int64_t xs[2] = {8, 12}, ys[2] = {8, 8};
    double xb[96], gy[64], gb[96];
    for (int i = 0; i < 96; i++) xb[i] = t_value(3, (size_t)i);
    for (int i = 0; i < 64; i++) gy[i] = t_value(9, (size_t)i);
    dt_placement rep[1] = {dt_replicate()}, s1[1] = {dt_shard(1)};
    dt_tensor *x, *y, *g;
    R_OK(dt_tensor_distribute(mesh, xb, DT_F64, 2, xs, 1, rep, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    R_OK(dt_slice(x, 1, 2, 10, &y));
    R_OK(dt_tensor_distribute(mesh, gy, DT_F64, 2, ys, 1, s1, DT_ALL_RANKS, &g));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_backward_with(y, g));
    R_CHECK(t_issued(ctx, DT_COLL_ALL_TO_ALL) == 1 && t_issued_total(ctx) == 1,
            "slice backward: %llu collectives, %llu all_to_all; want one all_to_all",
            (unsigned long long)t_issued_total(ctx),
            (unsigned long long)t_issued(ctx, DT_COLL_ALL_TO_ALL));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(dt_tensor_grad(x), &info));
    R_CHECK(dt_placement_equal(info.placements[0], dt_shard(0)), "gradient not S(0)");
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(x), gb, sizeof gb));
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 12; j++) {
            double want = j >= 2 && j < 10 ? gy[i * 8 + j - 2] : 0;
            R_CHECK(gb[i * 12 + j] == want, "gradient [%d, %d] = %g, want %g", i, j,
                    gb[i * 12 + j], want);
        }
    dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(g);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd_redistribute, slice_pads_in_the_gradients_layout) { t_run(4, slice_body, NULL); }
