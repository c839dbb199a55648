/* Ops made of copies and other ops (stack, unbind, swiglu, cross_entropy's sum and label
 * smoothing, the like-factories, reshape and the view rule), each on meshes 4, 3 and 2x2 with
 * uneven shapes, against values computed here by naive loops in double. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"
#include "op_cases.h"

static const char *const meshes[] = {"4", "3", "2x2"};

/* Placements tried on a mesh: set k of a 1-D or a 2-D mesh. */
#define NSETS 5
static void placements(int mnd, int k, dt_placement *pl) {
    static const dt_placement one[NSETS][1] = {
        {{DT_PLACEMENT_REPLICATE}}, {{DT_PLACEMENT_SHARD, 0}}, {{DT_PLACEMENT_SHARD, 1}},
        {{DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_SUM}}, {{DT_PLACEMENT_SHARD, -1}}};
    static const dt_placement two[NSETS][2] = {
        {{DT_PLACEMENT_SHARD, 0}, {DT_PLACEMENT_SHARD, 1}},
        {{DT_PLACEMENT_SHARD, 1}, {DT_PLACEMENT_REPLICATE}},
        {{DT_PLACEMENT_REPLICATE}, {DT_PLACEMENT_SHARD, 0}},
        {{DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 0}},
        {{DT_PLACEMENT_SHARD, 0}, {DT_PLACEMENT_SHARD, 0}}};
    for (int m = 0; m < mnd; m++) pl[m] = mnd == 1 ? one[k][0] : two[k][m];
}

static size_t count(int nd, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)shape[d];
    return n;
}

/* A tensor of dtype holding vals (doubles, exact in dtype) with placements pl. */
static dt_status put(dt_mesh *mesh, const double *vals, dt_dtype dtype, int nd,
                     const int64_t *shape, const dt_placement *pl, dt_tensor **out) {
    size_t n = count(nd, shape);
    char *buf = malloc(n * 8 + 8);
    dt_convert_from_f64(dtype, vals, buf, n);
    dt_status st = dt_tensor_distribute(mesh, buf, dtype, nd, shape, dt_mesh_ndim(mesh), pl,
                                        DT_ALL_RANKS, out);
    free(buf);
    return st;
}

/* The full value of t as doubles (n elements). */
static dt_status get(dt_tensor *t, double *vals, size_t n) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    if (info.numel != n) return t_fail(__FILE__, __LINE__, "%zu elements, want %zu", info.numel, n);
    size_t es = dt_dtype_size(info.dtype);
    char *buf = malloc(n * es + 8);
    dt_status st = dt_tensor_full_tensor(t, buf, n * es);
    if (st == DT_OK) dt_convert_to_f64(info.dtype, buf, vals, n);
    free(buf);
    return st;
}

static int close_to(double got, double want, double tol) {
    return fabs(got - want) <= tol * (1 + fabs(want));
}

/* ---- stack -------------------------------------------------------------------------------- */

typedef struct mesh_arg {
    const char *mesh;
} mesh_arg;

static dt_status stack_body(dt_ctx *ctx, void *arg) {
    const mesh_arg *ma = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, ma->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    enum { A = 5, B = 3, N = 3 };
    int64_t shape[2] = {A, B};
    double v[N][A * B], got[N * A * B];
    for (int i = 0; i < N; i++)
        for (int e = 0; e < A * B; e++) v[i][e] = t_value(40 + (uint64_t)i, (size_t)e);
    for (int k = 0; k < NSETS; k++)
        for (int mixed = 0; mixed < 2; mixed++)
            for (int dim = -3; dim <= 2; dim++) {
                dt_tensor *x[N], *out;
                for (int i = 0; i < N; i++) {
                    dt_placement pl[2];
                    placements(mnd, mixed ? (k + i) % NSETS : k, pl);
                    R_OK(put(mesh, v[i], DT_F32, 2, shape, pl, &x[i]));
                }
                R_OK(dt_stack(x, N, dim, &out));
                R_OK(get(out, got, N * A * B));
                int d = dim < 0 ? dim + 3 : dim;
                int64_t os[3];
                for (int q = 0, j = 0; q < 3; q++) os[q] = q == d ? N : shape[j++];
                for (int64_t p = 0; p < os[0]; p++) /* out[p][q][r] from the naive index map */
                    for (int64_t q = 0; q < os[1]; q++)
                        for (int64_t r = 0; r < os[2]; r++) {
                            int64_t idx[3] = {p, q, r}, in[2];
                            for (int s = 0, j = 0; s < 3; s++)
                                if (s != d) in[j++] = idx[s];
                            double want = v[idx[d]][in[0] * B + in[1]];
                            double g = got[(p * os[1] + q) * os[2] + r];
                            R_CHECK(g == want, "stack dim %d on %s set %d mixed %d: out[%lld][%lld]"
                                    "[%lld] = %g, want %g", dim, ma->mesh, k, mixed, (long long)p,
                                    (long long)q, (long long)r, g, want);
                        }
                dt_tensor_release(out);
                for (int i = 0; i < N; i++) dt_tensor_release(x[i]);
            }
    dt_tensor *x[2], *out = NULL;
    int64_t other[2] = {A, B + 1};
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    R_OK(put(mesh, v[0], DT_F32, 2, shape, rep, &x[0]));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, other, mnd, rep, &x[1]));
    R_ERR(dt_stack(x, 2, 0, &out), DT_ERR_SHAPE, "input 1 has size 4");
    R_ERR(dt_stack(x, 1, 3, &out), DT_ERR_ARG, "dim = 3");
    R_CHECK(out == NULL, "out written on failure");
    dt_tensor_release(x[0]), dt_tensor_release(x[1]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(compose, stack_equals_naive) {
    for (int m = 0; m < 3; m++) {
        mesh_arg a = {meshes[m]};
        t_run(op_mesh_ranks(meshes[m]), stack_body, &a);
    }
}

/* ---- unbind ------------------------------------------------------------------------------- */

static dt_status unbind_body(dt_ctx *ctx, void *arg) {
    const mesh_arg *ma = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, ma->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    enum { A = 5, B = 3, C = 4 };
    int64_t shape[3] = {A, B, C};
    double v[A * B * C], got[A * B * C];
    for (int e = 0; e < A * B * C; e++) v[e] = t_value(50, (size_t)e);
    for (int k = 0; k < NSETS; k++)
        for (int dim = -1; dim <= 2; dim++) {
            dt_placement pl[2];
            placements(mnd, k, pl);
            dt_tensor *x, *outs[A];
            R_OK(put(mesh, v, DT_F32, 3, shape, pl, &x));
            int d = dim < 0 ? dim + 3 : dim, n = (int)shape[d];
            R_OK(dt_comm_stats_reset(ctx));
            R_OK(dt_unbind(x, dim, n, outs));
            /* A sharded dim is placed once for all pieces, not once per piece. */
            if (mnd == 1 && pl[0].kind == DT_PLACEMENT_SHARD && (pl[0].dim + 3) % 3 == d)
                R_CHECK(t_issued_total(ctx) == 1, "unbind of sharded dim %d: %llu collectives", d,
                        (unsigned long long)t_issued_total(ctx));
            for (int i = 0; i < n; i++) {
                int64_t rs[2];
                for (int s = 0, j = 0; s < 3; s++)
                    if (s != d) rs[j++] = shape[s];
                R_OK(get(outs[i], got, (size_t)(rs[0] * rs[1])));
                for (int64_t p = 0; p < rs[0]; p++)
                    for (int64_t q = 0; q < rs[1]; q++) {
                        int64_t idx[3], in[2] = {p, q};
                        for (int s = 0, j = 0; s < 3; s++) idx[s] = s == d ? i : in[j++];
                        double want = v[(idx[0] * B + idx[1]) * C + idx[2]];
                        R_CHECK(got[p * rs[1] + q] == want, "unbind dim %d piece %d on %s set %d: "
                                "[%lld][%lld] = %g, want %g", dim, i, ma->mesh, k, (long long)p,
                                (long long)q, got[p * rs[1] + q], want);
                    }
                dt_tensor_release(outs[i]);
            }
            if (k == 0 && dim == 0) {
                outs[0] = NULL;
                R_ERR(dt_unbind(x, 0, 4, outs), DT_ERR_ARG, "n = 4");
                R_ERR(dt_unbind(x, 3, 4, outs), DT_ERR_ARG, "dim = 3");
                R_CHECK(outs[0] == NULL, "outs written on failure");
            }
            dt_tensor_release(x);
        }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(compose, unbind_equals_naive) {
    for (int m = 0; m < 3; m++) {
        mesh_arg a = {meshes[m]};
        t_run(op_mesh_ranks(meshes[m]), unbind_body, &a);
    }
}

/* ---- swiglu ------------------------------------------------------------------------------- */

static dt_status swiglu_body(dt_ctx *ctx, void *arg) {
    const mesh_arg *ma = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, ma->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    enum { T = 5, H = 7 };
    int64_t shape[2] = {T, H}, row[1] = {H};
    double g[T * H], u[T * H], got[T * H];
    for (int e = 0; e < T * H; e++)
        g[e] = t_value(60, (size_t)e) / 4, u[e] = t_value(61, (size_t)e);
    for (int k = 0; k < NSETS; k++)
        for (int bcast = 0; bcast < 2; bcast++) {
            dt_placement pg[2], pu[2];
            placements(mnd, k, pg);
            placements(mnd, (k + 2) % NSETS, pu);
            if (bcast)
                for (int m = 0; m < mnd; m++)
                    if (pu[m].kind == DT_PLACEMENT_SHARD) pu[m] = dt_shard(0);
            dt_tensor *tg, *tu, *out;
            R_OK(put(mesh, g, DT_F32, 2, shape, pg, &tg));
            R_OK(put(mesh, u, DT_F32, bcast ? 1 : 2, bcast ? row : shape, pu, &tu));
            R_OK(dt_swiglu(tg, tu, &out));
            R_OK(get(out, got, T * H));
            for (int e = 0; e < T * H; e++) {
                double want = g[e] / (1 + exp(-g[e])) * (bcast ? u[e % H] : u[e]);
                R_CHECK(close_to(got[e], want, 1e-5), "swiglu on %s set %d bcast %d: [%d] = %g, "
                        "want %g", ma->mesh, k, bcast, e, got[e], want);
            }
            dt_tensor_release(tg), dt_tensor_release(tu), dt_tensor_release(out);
        }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(compose, swiglu_equals_naive) {
    for (int m = 0; m < 3; m++) {
        mesh_arg a = {meshes[m]};
        t_run(op_mesh_ranks(meshes[m]), swiglu_body, &a);
    }
}

/* ---- like-factories ----------------------------------------------------------------------- */

static dt_status like_body(dt_ctx *ctx, void *arg) {
    const mesh_arg *ma = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, ma->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    enum { A = 5, B = 3 };
    int64_t shape[2] = {A, B}, other[3] = {2, 3, 4};
    static const dt_dtype dtypes[] = {DT_F32, DT_I64, DT_BF16, DT_F64};
    double v[A * B], got[A * B * 2];
    for (int e = 0; e < A * B; e++) v[e] = t_value(70, (size_t)e);
    for (int k = 0; k < NSETS; k++)
        for (size_t di = 0; di < DT_COUNT_OF(dtypes); di++) {
            dt_placement pl[2];
            placements(mnd, k, pl);
            if (k == NSETS - 1 && mnd == 1) pl[0] = dt_partial(DT_REDUCE_MAX);
            dt_tensor *x;
            R_OK(put(mesh, v, dtypes[di], 2, shape, pl, &x));
            dt_tensor_info xi;
            R_OK(dt_tensor_info_get(x, &xi));
            for (int kind = 0; kind < 5; kind++) {
                dt_tensor *y = NULL;
                double want = kind == 0 ? 0 : kind == 1 ? 1 : -2.5;
                if (kind == 0) R_OK(dt_tensor_zeros_like(x, &y));
                if (kind == 1) R_OK(dt_tensor_ones_like(x, &y));
                if (kind == 2) R_OK(dt_tensor_full_like(x, -2.5, &y));
                if (kind == 3) R_OK(dt_tensor_empty_like(x, &y));
                if (kind == 4) R_OK(dt_tensor_new_full(x, 2, shape, -2.5, &y));
                if (dtypes[di] == DT_I64) want = trunc(want); /* torch: toward zero */
                dt_tensor_info yi;
                R_OK(dt_tensor_info_get(y, &yi));
                R_CHECK(yi.dtype == xi.dtype && yi.ndim == 2 && yi.shape[0] == A &&
                            yi.shape[1] == B && yi.device.kind == xi.device.kind,
                        "like %d on %s: spec differs", kind, ma->mesh);
                for (int m = 0; m < mnd; m++) {
                    dt_placement w = xi.placements[m].kind == DT_PLACEMENT_PARTIAL
                                         ? dt_replicate() : xi.placements[m];
                    R_CHECK(dt_placement_equal(yi.placements[m], w),
                            "like %d on %s set %d: mesh dim %d placement differs", kind, ma->mesh,
                            k, m);
                }
                R_CHECK(!memcmp(yi.local_shape, xi.local_shape, sizeof(int64_t) * 2),
                        "like %d: local shape differs", kind); /* only its own shard */
                if (kind != 3) {
                    R_OK(get(y, got, A * B));
                    for (int e = 0; e < A * B; e++)
                        R_CHECK(got[e] == want, "like %d %s on %s set %d: [%d] = %g, want %g", kind,
                                dt_dtype_name(dtypes[di]), ma->mesh, k, e, got[e], want);
                }
                dt_tensor_release(y);
            }
            dt_tensor *y = NULL;
            R_OK(dt_tensor_new_full(x, 3, other, 7, &y)); /* another shape: replicated */
            dt_tensor_info yi;
            R_OK(dt_tensor_info_get(y, &yi));
            for (int m = 0; m < mnd; m++)
                R_CHECK(yi.placements[m].kind == DT_PLACEMENT_REPLICATE, "new_full: not R");
            R_OK(get(y, got, 24));
            for (int e = 0; e < 24; e++) R_CHECK(got[e] == 7, "new_full [%d] = %g", e, got[e]);
            dt_tensor_release(y);
            y = NULL;
            if (dtypes[di] == DT_I64) R_ERR(dt_tensor_full_like(x, 1e300, &y), DT_ERR_ARG, "value");
            R_ERR(dt_tensor_new_full(x, -1, other, 1, &y), DT_ERR_ARG, "ndim");
            R_CHECK(y == NULL, "written on failure");
            dt_tensor_release(x);
        }
    dt_tensor *y = NULL;
    R_ERR(dt_tensor_zeros_like(NULL, &y), DT_ERR_ARG, "x");
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(compose, like_factories_keep_spec_and_replicate_partial) {
    for (int m = 0; m < 3; m++) {
        mesh_arg a = {meshes[m]};
        t_run(op_mesh_ranks(meshes[m]), like_body, &a);
    }
}

/* ---- view / reshape ----------------------------------------------------------------------- */

typedef struct view_case {
    const char *mesh;
    int nd, out_nd;
    int64_t shape[3], out_shape[3];
    dt_placement pl[2], want[2]; /* want kind 0xff: anything but pl (must redistribute) */
    int comm;                    /* collectives: exactly this many, -1 any */
} view_case;

#define S(d) {DT_PLACEMENT_SHARD, d}
#define R {DT_PLACEMENT_REPLICATE}
#define MOVED {{(dt_placement_kind)0xff}}
static const view_case view_cases[] = {
    {"2x2", 3, 2, {2, 8, 16}, {16, 16}, {S(0), R}, {S(0), R}, 0},       /* flatten, 2 % 2 */
    {"2x2", 3, 2, {4, 8, 16}, {32, 16}, {S(0), R}, {S(0), R}, 0},
    {"2x2", 2, 3, {16, 16}, {2, 8, 16}, {S(0), R}, {S(0), R}, 0},       /* split, 2 % 2 */
    {"2x2", 3, 2, {4, 8, 16}, {32, 16}, {S(0), S(0)}, {S(0), S(0)}, 0}, /* nested, 4 % 4 */
    {"2x2", 3, 2, {2, 8, 16}, {16, 16}, {S(0), S(0)}, MOVED, -1},       /* nested, 2 % 4 */
    {"2x2", 2, 3, {6, 16}, {2, 3, 16}, {S(0), S(0)}, MOVED, -1},        /* split, 2 % 4 */
    {"4", 2, 1, {6, 4}, {24}, {S(0)}, {R}, 1},                           /* 6 rows over 4 */
    {"3", 2, 1, {6, 4}, {24}, {S(0)}, {S(0)}, 0},                        /* 6 rows over 3 */
    {"4", 2, 3, {6, 4}, {6, 2, 2}, {S(0)}, {S(0)}, 0},                   /* dim kept whole */
    {"4", 1, 2, {10}, {2, 5}, {S(0)}, MOVED, -1},                        /* 2 % 4 */
};
#undef S
#undef R

static dt_status view_body(dt_ctx *ctx, void *arg) {
    const view_case *c = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    size_t n = count(c->nd, c->shape);
    double *v = malloc(sizeof(double) * n), *got = malloc(sizeof(double) * n);
    for (size_t e = 0; e < n; e++) v[e] = t_value(80, e);
    dt_tensor *x, *y;
    R_OK(put(mesh, v, DT_F32, c->nd, c->shape, c->pl, &x));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_reshape(x, c->out_nd, c->out_shape, &y));
    uint64_t comm = t_issued_total(ctx);
    char have[64], want[64];
    dt_tensor_info yi;
    R_OK(dt_tensor_info_get(y, &yi));
    dt_placements_format(yi.placements, mnd, have, sizeof have);
    dt_placements_format(c->pl, mnd, want, sizeof want);
    if (c->want[0].kind == (dt_placement_kind)0xff) {
        int same = 1;
        for (int m = 0; m < mnd; m++) same &= dt_placement_equal(yi.placements[m], c->pl[m]);
        R_CHECK(!same, "view on %s of %s: kept %s, whose pieces differ", c->mesh, want, have);
    } else {
        for (int m = 0; m < mnd; m++)
            R_CHECK(dt_placement_equal(yi.placements[m], c->want[m]), "view on %s of %s gave %s",
                    c->mesh, want, have);
    }
    R_CHECK(c->comm < 0 || comm == (uint64_t)c->comm, "view on %s of %s: %llu collectives, want "
            "%d", c->mesh, want, (unsigned long long)comm, c->comm);
    R_OK(get(y, got, n)); /* a view keeps the row-major order */
    for (size_t e = 0; e < n; e++)
        R_CHECK(got[e] == v[e], "view on %s of %s: [%zu] = %g, want %g", c->mesh, want, e, got[e],
                v[e]);
    dt_tensor_release(x), dt_tensor_release(y);
    free(v), free(got);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(compose, view_keeps_even_shards_and_moves_uneven_ones) {
    for (size_t i = 0; i < DT_COUNT_OF(view_cases); i++)
        t_run(op_mesh_ranks(view_cases[i].mesh), view_body, (void *)&view_cases[i]);
}

/* ---- var / std: the fewest collectives a single op would issue ---------------------------- */

/* Run as it comes, std of a reduced dim that is sharded costs an all_reduce for the mean and
 * another before the sqrt; one all_gather of that dim first leaves the rest local. Where x is
 * large the gather costs more than the two small reductions, and the pieces run as they come. */
typedef struct var_case {
    dt_op op;
    const char *mesh;
    int64_t shape[2];
    dt_placement pl[2];
    int ndims, dims[2];
    int gathers, reduces; /* collectives issued: all_gather, all_reduce (-1: any), and */
    int total;            /* in all */
} var_case;

#define S(d) {DT_PLACEMENT_SHARD, d}
#define R {DT_PLACEMENT_REPLICATE}
static const var_case var_cases[] = {
    {DT_OP_STD, "2x2", {2, 4}, {S(0), S(1)}, 1, {1}, 1, 0, 1},      /* the issue's case */
    {DT_OP_VAR, "2x2", {2, 4}, {S(0), S(1)}, 1, {1}, 0, 1, 1},      /* output P(sum) pending */
    {DT_OP_STD, "2x2", {2, 4}, {S(0), S(1)}, 2, {0, 1}, -1, -1, 2}, /* one per mesh dim */
    {DT_OP_STD, "4", {6, 10}, {S(1)}, 1, {-1}, 1, 0, 1},            /* uneven shards */
    {DT_OP_STD, "2x2", {6, 4}, {S(0), R}, 1, {1}, 0, 0, 0},         /* reduced dim whole */
    {DT_OP_STD, "2x2", {64, 4096}, {S(0), S(1)}, 1, {1}, 0, -1, 2}, /* large: x stays put */
};
#undef S
#undef R

static dt_status var_body(dt_ctx *ctx, void *arg) {
    const var_case *c = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int64_t rows = c->shape[0], cols = c->shape[1];
    size_t n = (size_t)(rows * cols);
    double *v = malloc(sizeof(double) * n), *got = malloc(sizeof(double) * n);
    for (size_t e = 0; e < n; e++)
        v[e] = t_value(90, e) / 4;
    dt_tensor *x, *y;
    R_OK(put(mesh, v, DT_F32, 2, c->shape, c->pl, &x));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(c->op == DT_OP_STD ? dt_std(x, c->dims, c->ndims, 0, &y)
                            : dt_var(x, c->dims, c->ndims, 0, &y));
    uint64_t gathers = t_issued(ctx, DT_COLL_ALL_GATHER),
             reduces = t_issued(ctx, DT_COLL_ALL_REDUCE);
    R_CHECK((c->gathers < 0 || gathers == (uint64_t)c->gathers) &&
                (c->reduces < 0 || reduces == (uint64_t)c->reduces) &&
                t_issued_total(ctx) == (uint64_t)c->total,
            "%s of %lldx%lld on %s: %llu all_gathers, %llu all_reduces, %llu in all; want %d, %d "
            "and %d",
            dt_op_name(c->op), (long long)rows, (long long)cols, c->mesh,
            (unsigned long long)gathers, (unsigned long long)reduces,
            (unsigned long long)t_issued_total(ctx), c->gathers, c->reduces, c->total);
    /* The route is priced once per spec: a second call finds every choice cached. */
    dt_tensor *again;
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(c->op == DT_OP_STD ? dt_std(x, c->dims, c->ndims, 0, &again)
                            : dt_var(x, c->dims, c->ndims, 0, &again));
    dt_comm_stats cs;
    R_OK(dt_comm_stats_get(ctx, &cs));
    R_CHECK(cs.caches[DT_CACHE_STRATEGY].misses == 0 && cs.caches[DT_CACHE_PLAN].misses == 0,
            "%s on %s, called again: %llu strategy and %llu plan cache misses", dt_op_name(c->op),
            c->mesh, (unsigned long long)cs.caches[DT_CACHE_STRATEGY].misses,
            (unsigned long long)cs.caches[DT_CACHE_PLAN].misses);
    dt_tensor_release(again);
    /* One rank's f64 loop: over rows (dim 1 reduced), or over everything. */
    int all = c->ndims == 2;
    int64_t groups = all ? 1 : rows, per = all ? rows * cols : cols;
    R_OK(get(y, got, (size_t)groups));
    for (int64_t g = 0; g < groups; g++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < per; i++)
            sum += v[g * per + i];
        for (int64_t i = 0; i < per; i++)
            sq += (v[g * per + i] - sum / (double)per) * (v[g * per + i] - sum / (double)per);
        double want = sq / (double)(per - 1);
        if (c->op == DT_OP_STD) want = sqrt(want);
        R_CHECK(close_to(got[g], want, 1e-5), "%s on %s: [%lld] = %.9g, want %.9g",
                dt_op_name(c->op), c->mesh, (long long)g, got[g], want);
    }
    dt_tensor_release(x), dt_tensor_release(y);
    free(v), free(got);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(compose, var_std_issue_the_fewest_collectives) {
    for (size_t i = 0; i < DT_COUNT_OF(var_cases); i++)
        t_run(op_mesh_ranks(var_cases[i].mesh), var_body, (void *)&var_cases[i]);
}
