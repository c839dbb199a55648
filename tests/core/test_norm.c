/* Pending norms (Partial(norm), "NormP(p)"): text, plans, and their reduction on real ranks
 * against the same combination computed in double; errors for what cannot be one. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

/* ---- text and equality ------------------------------------------------------------------- */

Test(norm, placement_text_round_trips) {
    static const char *const texts[] = {"NormP(2)", "NormP(1)", "NormP(inf)", "NormP(-inf)",
                                        "NormP(0.5)", "NormP(0)", "S(0),NormP(3)",
                                        "NormP(2),NormP(2)"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        dt_placement p[4];
        int n;
        char back[128];
        cr_assert_eq(dt_placements_parse(texts[i], p, 4, &n), DT_OK, "%s: %s", texts[i],
                     dt_last_error());
        cr_assert_eq(dt_placements_format(p, n, back, sizeof back), DT_OK);
        cr_assert_str_eq(back, texts[i]);
    }
    dt_placement p[2];
    int n;
    cr_assert_eq(dt_placements_parse("NormPartial(2), Replicate()", p, 2, &n), DT_OK);
    cr_assert(p[0].kind == DT_PLACEMENT_PARTIAL && p[0].op == DT_REDUCE_NORM && p[0].norm_ord == 2);
    cr_assert(dt_placement_equal(dt_norm_partial(2), p[0]));
    cr_assert(!dt_placement_equal(dt_norm_partial(2), dt_norm_partial(1)));
    cr_assert(!dt_placement_equal(dt_norm_partial(1), dt_partial(DT_REDUCE_SUM)));
    cr_assert_str_eq(dt_reduce_op_name(DT_REDUCE_NORM), "norm");
    T_ERR(dt_placements_parse("NormP()", p, 2, &n), DT_ERR_PARSE, "expected a number");
    T_ERR(dt_placements_parse("NormP(nan)", p, 2, &n), DT_ERR_PARSE, "expected a number");
    T_ERR(dt_placements_parse("NormP(2", p, 2, &n), DT_ERR_PARSE, "expected ')'");
    dt_placement bad = dt_norm_partial(NAN);
    T_ERR(dt_placements_normalize(&bad, 1, 2), DT_ERR_PLACEMENT, "NormP(nan)");
}

/* ---- plans ------------------------------------------------------------------------------ */

static void plan_has(const char *mesh, const char *src, const char *dst, dt_dtype dtype,
                     int ncoll, dt_step_kind kind, unsigned mask) {
    int ms[4], mnd, n;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    cr_assert_eq(dt_mesh_parse(mesh, ms, names, &mnd), DT_OK);
    dt_placement s[4], d[4];
    cr_assert_eq(dt_placements_parse(src, s, 4, &n), DT_OK);
    cr_assert_eq(dt_placements_parse(dst, d, 4, &n), DT_OK);
    int64_t shape[2] = {16, 8};
    dt_plan *plan;
    cr_assert_eq(dt_plan_create(mnd, ms, 2, shape, dtype, s, d, NULL, &plan), DT_OK, "%s -> %s: %s",
                 src, dst, dt_last_error());
    cr_assert_eq(dt_plan_ncollectives(plan), ncoll, "%s -> %s on %s", src, dst, mesh);
    int found = 0;
    for (int i = 0; i < dt_plan_nsteps(plan); i++) {
        dt_plan_step st;
        dt_plan_step_get(plan, i, &st);
        found |= st.kind == kind && st.mesh_mask == mask;
    }
    cr_assert(found, "%s -> %s on %s: no %s over mesh dims 0x%x", src, dst, mesh,
              dt_step_kind_name(kind), mask);
    dt_plan_release(plan);
}

Test(norm, plans) {
    plan_has("4", "NormP(2)", "R", DT_F32, 1, DT_STEP_ALL_REDUCE, 1);
    plan_has("4", "NormP(inf)", "S(0)", DT_F64, 1, DT_STEP_REDUCE_SCATTER, 1);
    plan_has("4", "NormP(2)", "S(1)", DT_BF16, 1, DT_STEP_REDUCE_SCATTER, 1);
    plan_has("2x2", "NormP(2),NormP(2)", "R,R", DT_F32, 1, DT_STEP_ALL_REDUCE, 3); /* fused */
    plan_has("2x2", "S(0),NormP(1)", "S(0),R", DT_F32, 1, DT_STEP_ALL_REDUCE, 2);
    plan_has("2x2", "NormP(2),S(1)", "R,R", DT_F32, 2, DT_STEP_ALL_REDUCE, 1);
    int ms[1] = {4};
    int64_t shape[2] = {16, 8};
    dt_placement n2 = dt_norm_partial(2);
    dt_plan *plan;
    cr_assert_eq(dt_plan_create(1, ms, 2, shape, DT_F32, &n2, &n2, NULL, &plan), DT_OK);
    cr_assert_eq(dt_plan_nsteps(plan), 0);
    dt_plan_release(plan);
}

Test(norm, plan_errors) {
    int ms[1] = {4};
    int64_t shape[2] = {16, 8};
    dt_placement r = dt_replicate(), s0 = dt_shard(0), n2 = dt_norm_partial(2),
                 n1 = dt_norm_partial(1), sum = dt_partial(DT_REDUCE_SUM);
    dt_plan *plan;
    T_ERR(dt_plan_create(1, ms, 2, shape, DT_F32, &r, &n2, NULL, &plan), DT_ERR_PLACEMENT,
          "never made");
    T_ERR(dt_plan_create(1, ms, 2, shape, DT_F32, &s0, &n2, NULL, &plan), DT_ERR_PLACEMENT,
          "no route from S(0) to NormP(2)");
    T_ERR(dt_plan_create(1, ms, 2, shape, DT_F32, &n1, &n2, NULL, &plan), DT_ERR_PLACEMENT,
          "NormP(1) to NormP(2)");
    /* through R: reduced, then split as any replicated value */
    cr_assert_eq(dt_plan_create(1, ms, 2, shape, DT_F32, &n2, &sum, NULL, &plan), DT_OK);
    cr_assert_eq(dt_plan_ncollectives(plan), 1);
    dt_plan_release(plan);
    T_ERR(dt_plan_create(1, ms, 2, shape, DT_I32, &n2, &r, NULL, &plan), DT_ERR_DTYPE,
          "needs a float dtype, not i32");
    T_ERR(dt_plan_create(1, ms, 2, shape, DT_I64, &r, &n2, NULL, &plan), DT_ERR_DTYPE,
          "NormP(2) needs a float dtype");
}

/* ---- on ranks --------------------------------------------------------------------------- */

/* The value rank r holds at element i: non-negative (it is a norm), some zeros. */
static double part(int r, size_t i) {
    return fabs(t_value(31 + (uint64_t)r, i)) / 4;
}

/* The p-norm of the parts of element i over ranks [0, nranks), in double. */
static double combined(double p, int nranks, size_t i) {
    double acc = p == -INFINITY ? INFINITY : 0;
    for (int r = 0; r < nranks; r++) {
        double v = part(r, i);
        if (p == INFINITY) acc = fmax(acc, v);
        else if (p == -INFINITY) acc = fmin(acc, v);
        else if (p == 0 || p == 1) acc += v;
        else acc += pow(v, p);
    }
    return isfinite(p) && p != 0 && p != 1 ? pow(acc, 1 / p) : acc;
}

typedef struct redist_case {
    const char *mesh, *src, *dst;
    double ord;
    dt_dtype dtype;
} redist_case;

static dt_status redist_body(dt_ctx *ctx, void *arg) {
    const redist_case *c = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh), n, me = dt_mesh_rank(mesh), ms[4];
    for (int m = 0; m < mnd; m++) ms[m] = dt_mesh_dim_size(mesh, m);
    char src_text[64], dst_text[64];
    snprintf(src_text, sizeof src_text, c->src, c->ord, c->ord);
    snprintf(dst_text, sizeof dst_text, c->dst, c->ord, c->ord);
    dt_placement src[4], dst[4];
    R_OK(dt_placements_parse(src_text, src, 4, &n));
    R_OK(dt_placements_parse(dst_text, dst, 4, &n));
    /* Every rank holds a (12, 5) block: the NormP dims are not sharded; a shard dim splits
     * rows, and each rank's rows are its own parts of them. */
    enum { ROWS = 12, COLS = 5 };
    int64_t gshape[2] = {ROWS, COLS}, lshape[2], off[2] = {0, 0};
    double local[ROWS * COLS];
    dt_tensor *t, *u;
    {   /* a zeros tensor with the spec gives this rank's block */
        dt_tensor *z;
        R_OK(dt_tensor_zeros(mesh, c->dtype, 2, gshape, mnd, src, &z));
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(z, &info));
        memcpy(lshape, info.local_shape, sizeof lshape);
        memcpy(off, info.local_offset, sizeof off);
        dt_tensor_release(z);
    }
    /* Which ranks hold parts of one element: those that differ only on NormP dims. Part
     * index = the rank's position among them (row-major over the NormP dims). */
    int pidx = 0, nparts = 1;
    for (int m = 0; m < mnd; m++)
        if (src[m].kind == DT_PLACEMENT_PARTIAL) {
            pidx = pidx * dt_mesh_dim_size(mesh, m) + dt_mesh_coord(mesh, m);
            nparts *= dt_mesh_dim_size(mesh, m);
        }
    size_t nloc = (size_t)(lshape[0] * lshape[1]);
    for (size_t k = 0; k < nloc; k++) {
        int64_t row = off[0] + (int64_t)k / lshape[1], col = off[1] + (int64_t)k % lshape[1];
        size_t gi = (size_t)(row * COLS + col);
        local[k] = part(pidx, gi);
    }
    char buf[ROWS * COLS * 8];
    R_OK(dt_convert_from_f64(c->dtype, local, buf, nloc));
    R_OK(dt_tensor_from_local(mesh, buf, c->dtype, 2, lshape, mnd, src, gshape, 0, &t));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_tensor_redistribute(t, mnd, dst, &u));
    dt_plan *plan;
    R_OK(dt_plan_create(mnd, ms, 2, gshape, c->dtype, src, dst, NULL, &plan));
    R_CHECK(t_issued_total(ctx) == (uint64_t)dt_plan_ncollectives(plan),
            "%s -> %s: %llu collectives issued, the plan has %d", src_text, dst_text,
            (unsigned long long)t_issued_total(ctx), dt_plan_ncollectives(plan));
    R_CHECK(dt_plan_ncollectives(plan) <= 2, "%s -> %s: %d collectives", src_text, dst_text,
            dt_plan_ncollectives(plan));
    dt_plan_release(plan);
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(u, &info));
    R_OK(dt_tensor_local_to_host(u, buf, sizeof buf));
    double tol = c->dtype == DT_F64 ? 1e-12 : c->dtype == DT_F32 ? 1e-5 : 1e-2;
    for (int64_t a = 0; a < info.local_shape[0]; a++)
        for (int64_t b = 0; b < info.local_shape[1]; b++) {
            size_t gi = (size_t)((info.local_offset[0] + a) * COLS + info.local_offset[1] + b);
            double want = combined(c->ord, nparts, gi),
                   got = t_get(c->dtype, buf, (size_t)(a * info.local_shape[1] + b));
            R_CHECK(fabs(got - want) <= tol * (1 + fabs(want)),
                    "rank %d %s -> %s (%s): element %zu is %.9g, want %.9g", me, src_text,
                    dst_text, dt_dtype_name(c->dtype), gi, got, want);
        }
    /* full_tensor reduces a pending norm too */
    double full[ROWS * COLS];
    dt_tensor *f64;
    R_OK(dt_cast(t, DT_F64, &f64));
    R_OK(dt_tensor_full_tensor(f64, full, sizeof full));
    for (size_t gi = 0; gi < ROWS * COLS; gi++)
        R_CHECK(fabs(full[gi] - combined(c->ord, nparts, gi)) <= tol * (1 + full[gi]),
                "full_tensor of %s: element %zu is %.9g, want %.9g", src_text, gi, full[gi],
                combined(c->ord, nparts, gi));
    dt_tensor_release(f64);
    dt_tensor_release(t);
    dt_tensor_release(u);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm, redistribute_on_ranks) {
    static const double ords[] = {2, 1, 3, 0.5, INFINITY, -INFINITY, 0, -1};
    static const redist_case shapes[] = {
        {"4", "NormP(%g)", "R", 0, DT_F32},
        {"4", "NormP(%g)", "S(0)", 0, DT_F64},
        {"4", "NormP(%g)", "S(1)", 0, DT_F32},
        {"2x2", "NormP(%g),NormP(%g)", "R,R", 0, DT_F64},
        {"2x2", "NormP(%g),NormP(%g)", "S(0),R", 0, DT_F32},
        {"2x2", "S(0),NormP(%g)", "S(0),S(1)", 0, DT_F64},
        {"2x2", "NormP(%g),S(1)", "R,R", 0, DT_F32},
    };
    for (size_t k = 0; k < sizeof ords / sizeof ords[0]; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            redist_case c = shapes[s];
            c.ord = ords[k];
            t_run(4, redist_body, &c);
        }
    redist_case half = {"4", "NormP(%g)", "R", 2, DT_BF16};
    t_run(4, redist_body, &half);
}

static dt_status create_errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    dt_placement n2 = dt_norm_partial(2);
    int64_t shape[1] = {8};
    dt_tensor *t = T_SENTINEL(dt_tensor *);
    R_ERR(dt_tensor_ones(mesh, DT_F32, 1, shape, 1, &n2, &t), DT_ERR_PLACEMENT, "made by norm ops");
    R_ERR(dt_tensor_zeros(mesh, DT_I32, 1, shape, 1, &n2, &t), DT_ERR_DTYPE, "float dtype");
    float full[8] = {0};
    R_ERR(dt_tensor_distribute(mesh, full, DT_F32, 1, shape, 1, &n2, DT_ALL_RANKS, &t),
          DT_ERR_PLACEMENT, "not distributed");
    R_CHECK(t == T_SENTINEL(dt_tensor *), "an output was set on failure");
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, shape, 1, &n2, &t)); /* zeros are every part's norm */
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm, creation_errors) {
    t_run(4, create_errors_body, NULL);
}

/* ---- the kernel, against naive loops ------------------------------------------------------ */

#include "ops/kernels.h"

/* ord-norm of the elements of x (shape sh, nd dims) whose kept dims equal those of out index
 * oi, by walking every element and comparing indices: slow and plain. */
static double naive_norm(double ord, const double *x, const int64_t *sh, int nd, unsigned mask,
                         const int64_t *oi) {
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)sh[d];
    double s = 0, best = ord > 0 ? 0 : INFINITY;
    for (size_t i = 0; i < n; i++) {
        size_t rest = i;
        int match = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t id = (int64_t)(rest % (size_t)sh[d]);
            rest /= (size_t)sh[d];
            if (!((mask >> d) & 1u) && id != oi[d]) match = 0;
        }
        if (!match) continue;
        double v = fabs(x[i]);
        if (ord == INFINITY) best = v > best ? v : best;
        else if (ord == -INFINITY) best = v < best ? v : best;
        else if (ord == 0) s += v != 0;
        else s += pow(v, ord);
    }
    if (isinf(ord)) return best;
    return ord == 0 ? s : pow(s, 1 / ord);
}

Test(norm, kernel_against_naive_loops) {
    static const double ords[] = {2, 1, 3, 0.5, -1, INFINITY, -INFINITY, 0};
    static const struct { int nd; int64_t sh[3]; unsigned mask; } shapes[] = {
        {2, {5, 7}, 3}, {2, {5, 7}, 1}, {2, {5, 7}, 2}, {3, {3, 4, 5}, 5}, {3, {3, 4, 5}, 2},
        {3, {2, 1, 6}, 4}, {1, {9}, 1}, {2, {0, 3}, 1}, {2, {4, 0}, 1},
    };
    static const dt_dtype dts[] = {DT_F32, DT_F64, DT_BF16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t k = 0; k < sizeof ords / sizeof ords[0]; k++)
            for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
                int nd = shapes[s].nd;
                unsigned mask = shapes[s].mask;
                dt_dtype dt = dts[t];
                size_t n = 1, nout = 1;
                int64_t osh[3];
                for (int d = 0; d < nd; d++) {
                    n *= (size_t)shapes[s].sh[d];
                    osh[d] = (mask >> d) & 1u ? 1 : shapes[s].sh[d];
                    nout *= (size_t)osh[d];
                }
                double x[64], got[64];
                char xb[64 * 8], ob[64 * 8];
                for (size_t i = 0; i < n; i++) x[i] = t_value(5 + s, i) / 3; /* some zeros */
                dt_convert_from_f64(dt, x, xb, n);
                dt_convert_to_f64(dt, xb, x, n); /* what the kernel sees */
                dt_local xl = {.data = xb, .dtype = dt, .ndim = nd}, ol = {.data = ob, .dtype = dt,
                                                                          .ndim = nd};
                memcpy(xl.shape, shapes[s].sh, sizeof(int64_t) * (size_t)nd);
                memcpy(ol.shape, osh, sizeof(int64_t) * (size_t)nd);
                cr_assert_eq(dt_cpu_vector_norm(ords[k], mask, &xl, &ol), DT_OK, "%s",
                             dt_last_error());
                dt_convert_to_f64(dt, ob, got, nout);
                double tol = dt == DT_F64 ? 1e-12 : dt == DT_F32 ? 1e-6 : 8e-3;
                for (size_t o = 0; o < nout; o++) {
                    int64_t oi[3];
                    size_t rest = o;
                    for (int d = nd - 1; d >= 0; d--)
                        oi[d] = (int64_t)(rest % (size_t)osh[d]), rest /= (size_t)osh[d];
                    double want = naive_norm(ords[k], x, shapes[s].sh, nd, mask, oi);
                    cr_assert(got[o] == want || fabs(got[o] - want) <= tol * fabs(want),
                              "shape %zu mask 0x%x ord %g %s: out %zu = %.9g, want %.9g", s, mask,
                              ords[k], dt_dtype_name(dt), o, got[o], want);
                }
            }
    int32_t xi[4] = {1, 2, 3, 4}, oi32[1];
    dt_local a = {.data = xi, .dtype = DT_I32, .ndim = 1, .shape = {4}},
             b = {.data = oi32, .dtype = DT_I32, .ndim = 1, .shape = {1}};
    T_ERR(dt_cpu_vector_norm(2, 1, &a, &b), DT_ERR_DTYPE, "not a float dtype");
}

/* ---- total norm and clipping on ranks ---------------------------------------------------- */

typedef struct total_case {
    const char *mesh;
    int n;
    const char *pl[5];
    int nd[5];
    int64_t shape[5][2];
    dt_dtype dtype[5];
    int reductions; /* collectives the Partial inputs need before the norm */
    int unions;     /* all_reduces of the total: 0 when nothing is sharded, else 1 */
} total_case;

static const total_case total_cases[] = {
    {"4", 4, {"S(0)", "R", "S(1)", "S(0)"}, {2, 1, 2, 2}, {{10, 6}, {7}, {5, 4}, {6, 3}},
     {DT_F32, DT_F32, DT_F64, DT_F32}, 0, 1},
    {"4", 3, {"R", "P(sum)", "S(0)"}, {2, 2, 1}, {{3, 3}, {8, 5}, {9}},
     {DT_F64, DT_F32, DT_F32}, 1, 1},
    {"4", 2, {"R", "R"}, {2, 1}, {{3, 3}, {5}}, {DT_F32, DT_F64}, 0, 0},
    {"2x2", 5, {"S(0),S(1)", "R,S(0)", "S(0),R", "R,R", "S(0),S(0)"}, {2, 1, 2, 2, 2},
     {{6, 6}, {9}, {5, 3}, {2, 2}, {11, 4}}, {DT_F32, DT_F32, DT_F64, DT_F32, DT_BF16}, 0, 1},
    {"2x2", 3, {"R,S(0)", "R,S(1)", "R,R"}, {2, 2, 1}, {{6, 6}, {4, 7}, {5}},
     {DT_F32, DT_F64, DT_F32}, 0, 1},
    {"2x2", 2, {"P(sum),S(1)", "S(0),R"}, {2, 2}, {{6, 6}, {4, 7}}, {DT_F32, DT_F32}, 1, 1},
};

typedef struct total_arg {
    const total_case *c;
    double ord;
    int clip; /* 0: total only; 1: clip to half the total; 2: max_norm above the total */
} total_arg;

static double elem(int k, size_t i) {
    return t_value(100 + (uint64_t)k, i) / 2;
}

/* The norm of all elements of every tensor of c, computed in double from the full arrays. */
static double reference_total(const total_case *c, double ord) {
    double acc = ord == -INFINITY ? INFINITY : 0;
    for (int k = 0; k < c->n; k++) {
        size_t n = 1;
        for (int d = 0; d < c->nd[k]; d++) n *= (size_t)c->shape[k][d];
        for (size_t i = 0; i < n; i++) {
            double v = fabs(elem(k, i));
            if (ord == INFINITY) acc = fmax(acc, v);
            else if (ord == -INFINITY) acc = fmin(acc, v);
            else if (ord == 0) acc += v != 0;
            else acc += pow(v, ord);
        }
    }
    return isfinite(ord) && ord != 0 ? pow(acc, 1 / ord) : acc;
}

static dt_status total_body(dt_ctx *ctx, void *arg) {
    const total_arg *a = arg;
    const total_case *c = a->c;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh), np;
    dt_tensor *t[5];
    double full[5][128];
    for (int k = 0; k < c->n; k++) {
        dt_placement pl[4];
        R_OK(dt_placements_parse(c->pl[k], pl, 4, &np));
        size_t n = 1;
        for (int d = 0; d < c->nd[k]; d++) n *= (size_t)c->shape[k][d];
        char buf[128 * 8];
        for (size_t i = 0; i < n; i++) full[k][i] = elem(k, i);
        R_OK(dt_convert_from_f64(c->dtype[k], full[k], buf, n));
        R_OK(dt_tensor_distribute(mesh, buf, c->dtype[k], c->nd[k], c->shape[k], mnd, pl,
                                  DT_ALL_RANKS, &t[k]));
    }
    double want = reference_total(c, a->ord), total = -1;
    double tol = 1e-5;
    for (int k = 0; k < c->n; k++) tol = c->dtype[k] == DT_BF16 ? 1e-2 : tol;
    R_OK(dt_comm_stats_reset(ctx));
    if (!a->clip) {
        R_OK(dt_total_norm(t, c->n, a->ord, &total));
    } else {
        double max_norm = a->clip == 1 ? want / 2 : want * 2 + 1;
        R_OK(dt_clip_grad_norm_(t, c->n, max_norm, a->ord, &total));
        double coef = max_norm / (total + 1e-6);
        if (coef > 1) coef = 1;
        for (int k = 0; k < c->n; k++) { /* every element scaled, by coef */
            size_t n = 1;
            for (int d = 0; d < c->nd[k]; d++) n *= (size_t)c->shape[k][d];
            char buf[128 * 8];
            R_OK(dt_tensor_full_tensor(t[k], buf, sizeof buf));
            for (size_t i = 0; i < n; i++) {
                double got = t_get(c->dtype[k], buf, i), w = full[k][i] * coef;
                if (a->clip == 2) R_CHECK(got == full[k][i], "max_norm above the total changed "
                                                              "tensor %d element %zu", k, i);
                R_CHECK(fabs(got - w) <= tol * (1 + fabs(w)), "clip %s: tensor %d element %zu "
                        "is %g, want %g", c->mesh, k, i, got, w);
            }
        }
        R_OK(dt_comm_stats_reset(ctx));
        double after;
        R_OK(dt_total_norm(t, c->n, a->ord, &after));
        if (a->clip == 1)
            R_CHECK(fabs(after - max_norm) <= tol * (1 + max_norm),
                    "after clipping to %g the total is %g", max_norm, after);
    }
    R_CHECK(fabs(total - want) <= tol * (1 + want), "%s ord %g: total %.9g, want %.9g", c->mesh,
            a->ord, total, want);
    dt_comm_stats st;
    R_OK(dt_comm_stats_get(ctx, &st));
    uint64_t all = t_issued_total(ctx), ar = st.calls[DT_COLL_ALL_REDUCE];
    R_CHECK(all == (uint64_t)(c->reductions + c->unions) && ar >= (uint64_t)c->unions,
            "%s ord %g: %llu collectives (%llu all_reduce), want %d reductions + %d for the "
            "total", c->mesh, a->ord, (unsigned long long)all, (unsigned long long)ar,
            c->reductions, c->unions);
    for (int k = 0; k < c->n; k++) dt_tensor_release(t[k]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm, total_norm_mixed_placements) {
    static const double ords[] = {2, 1, 3, INFINITY, -INFINITY, 0};
    for (size_t i = 0; i < sizeof total_cases / sizeof total_cases[0]; i++)
        for (size_t k = 0; k < sizeof ords / sizeof ords[0]; k++) {
            total_arg a = {&total_cases[i], ords[k], 0};
            t_run(4, total_body, &a);
        }
}

Test(norm, clip_grad_norm) {
    for (size_t i = 0; i < sizeof total_cases / sizeof total_cases[0]; i++)
        for (int clip = 1; clip <= 2; clip++) {
            total_arg a = {&total_cases[i], 2, clip};
            t_run(4, total_body, &a);
        }
    total_arg inf = {&total_cases[3], INFINITY, 1};
    t_run(4, total_body, &inf);
}

static dt_status total_errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *m4, *m2;
    R_OK(dt_mesh_create_str(ctx, "4", &m4));
    R_OK(dt_mesh_create_str(ctx, "2x2", &m2));
    dt_placement r = dt_replicate(), rr[2] = {dt_replicate(), dt_replicate()};
    int64_t shape[1] = {4};
    dt_tensor *a, *b, *i;
    R_OK(dt_tensor_zeros(m4, DT_F32, 1, shape, 1, &r, &a));
    R_OK(dt_tensor_zeros(m2, DT_F32, 1, shape, 2, rr, &b));
    R_OK(dt_tensor_zeros(m4, DT_I32, 1, shape, 1, &r, &i));
    double v = -7;
    dt_tensor *ab[2] = {a, b}, *ai[2] = {a, i};
    R_ERR(dt_total_norm(ab, 2, 2, &v), DT_ERR_MESH, "tensors[1] is on another mesh");
    R_ERR(dt_total_norm(ai, 2, 2, &v), DT_ERR_DTYPE, "tensors[1] has dtype i32");
    R_ERR(dt_total_norm(&a, 1, NAN, &v), DT_ERR_ARG, "ord is NaN");
    R_ERR(dt_clip_grad_norm_(&a, 1, -1, 2, &v), DT_ERR_ARG, "max_norm = -1");
    R_CHECK(v == -7, "norm_out set on failure");
    R_OK(dt_total_norm(NULL, 0, 2, &v));
    R_CHECK(v == 0, "the norm of no tensors is %g", v);
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(i);
    dt_mesh_release(m4), dt_mesh_release(m2);
    return DT_OK;
}

Test(norm, total_norm_errors) {
    t_run(4, total_errors_body, NULL);
}

/* from_local checks that ranks agree on p; the layout picture names the pending norm. */
static dt_status from_local_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    float local[3] = {1, 2, 3};
    int64_t shape[1] = {3};
    dt_placement same = dt_norm_partial(2), mine = dt_norm_partial(dt_mesh_rank(mesh) == 2 ? 1 : 2);
    dt_tensor *t;
    R_OK(dt_tensor_from_local(mesh, local, DT_F32, 1, shape, 1, &same, shape, DT_FROM_LOCAL_CHECK,
                              &t));
    char pic[1024];
    R_OK(dt_tensor_visualize(t, pic, sizeof pic, NULL));
    R_CHECK(strstr(pic, "NormP(2)"), "the picture does not name NormP(2):\n%s", pic);
    float full[3];
    R_OK(dt_tensor_full_tensor(t, full, sizeof full)); /* 4 ranks each holding v: 2v */
    R_CHECK(fabsf(full[2] - 6) < 1e-5f, "full_tensor of NormP(2) parts 3,3,3,3 is %g, want 6",
            full[2]);
    dt_tensor_release(t);
    dt_tensor *u = T_SENTINEL(dt_tensor *);
    R_ERR(dt_tensor_from_local(mesh, local, DT_F32, 1, shape, 1, &mine, shape, DT_FROM_LOCAL_CHECK,
                               &u), DT_ERR_COMM, "different");
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm, from_local_and_picture) {
    t_run(4, from_local_body, NULL);
}

/* A registered op whose row keeps a pending norm (doubling commutes with a norm): used when
 * the input holds that NormP, skipped (not an error) when the input could never become one. */
static dt_status twice_infer(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    *out = in[0];
    return DT_OK;
}

static dt_status twice_kernel(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    size_t count = 1;
    for (int d = 0; d < in[0].ndim; d++) count *= (size_t)in[0].shape[d];
    for (size_t i = 0; i < count; i++) ((float *)out->data)[i] = 2 * ((const float *)in[0].data)[i];
    return DT_OK;
}

static dt_status registered_body(dt_ctx *ctx, void *arg) {
    dt_op op = *(const dt_op *)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    float x[8] = {3, -4, 0, 1, 2, 2, -1, 5};
    int64_t shape[1] = {8};
    dt_placement s0 = dt_shard(0), r = dt_replicate();
    dt_tensor *t, *n, *y, *z;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 1, shape, 1, &s0, DT_ALL_RANKS, &t));
    R_OK(dt_vector_norm(t, 2, NULL, 0, 0, &n));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_op_call(op, &n, 1, NULL, &y)); /* NormP(2) row: no communication */
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(y, &info));
    R_CHECK(dt_placement_equal(info.placements[0], dt_norm_partial(2)) && t_issued_total(ctx) == 0,
            "twice of a NormP(2) tensor moved data or lost the placement");
    float v;
    R_OK(dt_tensor_full_tensor(y, &v, sizeof v));
    R_CHECK(fabsf(v - 2 * sqrtf(60)) < 1e-4f, "twice(norm) = %g, want %g", v, 2 * sqrtf(60));
    dt_tensor *rt;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 1, shape, 1, &r, DT_ALL_RANKS, &rt));
    R_OK(dt_op_call(op, &rt, 1, NULL, &z)); /* R input: the R row, not an unreachable NormP */
    R_OK(dt_tensor_info_get(z, &info));
    R_CHECK(info.placements[0].kind == DT_PLACEMENT_REPLICATE, "R input gave another placement");
    dt_tensor_release(t), dt_tensor_release(n), dt_tensor_release(y), dt_tensor_release(rt),
        dt_tensor_release(z);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm, registered_op_with_norm_row) {
    static const dt_placement rows[][DT_OP_MAX_USER_INPUTS + 1] = {
        {{DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_NORM, 2},
         {DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_NORM, 2}},
    };
    dt_op_def def = {.name = "twice_norm_test", .ninputs = 1, .rows = rows, .nrows = 1,
                     .infer = twice_infer, .kernel = twice_kernel};
    dt_op op;
    cr_assert_eq(dt_op_register(&def, &op), DT_OK, "%s", dt_last_error());
    t_run(4, registered_body, &op);
}

static dt_status comm_rejects_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    dt_comm *c;
    R_OK(dt_mesh_dim_comm(mesh, 0, &c));
    float v = 1;
    R_ERR(dt_all_reduce(c, &v, &v, 1, DT_F32, DT_REDUCE_NORM), DT_ERR_ARG, "placement-only");
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm, collectives_reject_the_norm_op) {
    t_run(4, comm_rejects_body, NULL);
}
