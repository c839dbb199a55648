/* dt_cast: round trips between dtypes keeping placements, the element rules (rounding,
 * saturation, wrap), and Partial inputs: widening casts keep Partial, narrowing ones of
 * P(sum)/P(avg) reduce first so the global value is the cast of the global value. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

static int same_placements(dt_tensor *a, dt_tensor *b) {
    dt_tensor_info ia, ib;
    if (dt_tensor_info_get(a, &ia) != DT_OK || dt_tensor_info_get(b, &ib) != DT_OK) return 0;
    for (int m = 0; m < ia.mesh_ndim; m++)
        if (!dt_placement_equal(ia.placements[m], ib.placements[m])) return 0;
    return ia.ndim == ib.ndim && memcmp(ia.local_shape, ib.local_shape, sizeof ia.local_shape) == 0;
}

/* Small integers survive every dtype: x -> mid -> x is the identity, placements kept. */
static dt_status round_trip_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    static const dt_dtype pairs[][2] = {{DT_F32, DT_F64}, {DT_BF16, DT_F32}, {DT_F16, DT_F64},
                                        {DT_I32, DT_I64}, {DT_I64, DT_F64},  {DT_F32, DT_BF16},
                                        {DT_F16, DT_I32}, {DT_BF16, DT_F16}};
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    dt_placement pls[][2] = {
        {dt_shard(0), dt_shard(1)}, {dt_replicate(), dt_shard(0)}, {dt_shard(1), dt_replicate()}};
    int64_t shape[2] = {5, 7};
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (size_t k = 0; k < sizeof pls / sizeof pls[0]; k++) {
            dt_dtype a = pairs[p][0], b = pairs[p][1];
            char full[35 * 8], back[35 * 8];
            t_fill(a, full, 35, 40 + p);
            dt_tensor *x, *y, *z;
            R_OK(dt_tensor_distribute(mesh, full, a, 2, shape, 2, pls[k], DT_ALL_RANKS, &x));
            R_OK(dt_cast(x, b, &y));
            R_OK(dt_cast(y, a, &z));
            R_CHECK(same_placements(x, y) && same_placements(x, z), "placements changed");
            R_OK(dt_tensor_full_tensor(z, back, sizeof back));
            R_CHECK(memcmp(full, back, 35 * dt_dtype_size(a)) == 0, "%s -> %s -> %s changed data",
                    dt_dtype_name(a), dt_dtype_name(b), dt_dtype_name(a));
            dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(z);
        }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cast, round_trips_keep_placements) {
    t_run(4, round_trip_body, NULL);
}

/* One element at a time: the rules of dtensor/create.h, against values worked out here. */
typedef struct one_cast {
    dt_dtype from, to;
    double in, want; /* in as from, want as to (exactly representable) */
} one_cast;

static dt_status elements_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    static const one_cast cases[] = {
        {DT_F32, DT_I32, NAN, 0},
        {DT_F32, DT_I32, 1e10, 2147483647.0},
        {DT_F32, DT_I32, -1e10, -2147483648.0},
        {DT_F32, DT_I32, -2.75, -2},
        {DT_F64, DT_I64, 1e300, 9223372036854775807.0},
        {DT_F64, DT_I64, -INFINITY, -9223372036854775808.0},
        {DT_I64, DT_I32, 4294967301.0, 5},                        /* 2^32 + 5 wraps */
        {DT_I64, DT_F32, 9007199254740993.0, 9007199254740992.0}, /* 2^53 + 1: as i64 */
        {DT_F32, DT_BF16, 1.00390625, 1},                         /* 1 + 2^-8: a tie, to even */
        {DT_F32, DT_BF16, 1.01171875, 1.015625}, /* 1 + 3 * 2^-8: tie, to even (up) */
        {DT_F64, DT_F16, 65520, INFINITY},       /* past f16's largest */
        {DT_F64, DT_F32, 0.1, 0.100000001490116119384765625},
        {DT_BF16, DT_F16, 1e-8, 0}, /* under f16's smallest subnormal */
        {DT_F16, DT_BF16, 65504, 65536},
    };
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "1", &mesh));
    dt_placement r[1] = {dt_replicate()};
    int64_t shape[1] = {1};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const one_cast *c = &cases[i];
        char in[8] = {0}, got[8] = {0};
        if (c->from == DT_I64) {
            int64_t v = (int64_t)c->in;
            if (c->in == 9007199254740993.0) v = (1LL << 53) + 1; /* not a double */
            memcpy(in, &v, 8);
        } else {
            R_OK(dt_convert_from_f64(c->from, &c->in, in, 1));
        }
        dt_tensor *x, *y;
        R_OK(dt_tensor_distribute(mesh, in, c->from, 1, shape, 1, r, DT_ALL_RANKS, &x));
        R_OK(dt_cast(x, c->to, &y));
        R_OK(dt_tensor_full_tensor(y, got, 8));
        double v = t_get(c->to, got, 0);
        R_CHECK(v == c->want || (isnan(v) && isnan(c->want)),
                "case %zu: %s %.17g -> %s %.17g, "
                "want %.17g",
                i, dt_dtype_name(c->from), c->in, dt_dtype_name(c->to), v, c->want);
        dt_tensor_release(x), dt_tensor_release(y);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cast, element_rules) {
    t_run(1, elements_body, NULL);
}

/* ---- Partial -------------------------------------------------------------------------------- */

/* Each rank's part of a 3-element P tensor on mesh "2x2"; see partial_body. */
static float part(int rank, int i) {
    static const float parts[4][3] = {
        {1.00390625f, 3.0f, -1.0f}, /* 1 + 2^-8 */
        {0.00390625f, 0.0078125f, 0.5f},
        {0.0f, 0.00390625f, 0.25f},
        {0.0f, 0.0f, 0.125f},
    };
    return parts[rank][i];
}

typedef struct pcase {
    dt_placement pl[2];
    dt_dtype to;
    int reduces; /* expected: cast reduces first (collectives issued) */
} pcase;

static dt_status partial_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const pcase cases[] = {
        {{dt_partial(DT_REDUCE_SUM), dt_replicate()}, DT_BF16, 1},
        {{dt_partial(DT_REDUCE_SUM), dt_partial(DT_REDUCE_SUM)}, DT_BF16, 1},
        {{dt_partial(DT_REDUCE_MAX), dt_partial(DT_REDUCE_SUM)}, DT_F16, 1},
        {{dt_partial(DT_REDUCE_AVG), dt_shard(0)}, DT_I32, 1},
        {{dt_partial(DT_REDUCE_MAX), dt_partial(DT_REDUCE_MIN)}, DT_BF16, 0},
        {{dt_partial(DT_REDUCE_SUM), dt_partial(DT_REDUCE_AVG)}, DT_F64, 0},
    };
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int c0 = dt_mesh_coord(mesh, 0), c1 = dt_mesh_coord(mesh, 1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const pcase *pc = &cases[c];
        /* Ranks differ only along Partial dims; a Shard dim slices the part. */
        int key = (pc->pl[0].kind == DT_PLACEMENT_PARTIAL ? c0 : 0) +
                  (pc->pl[1].kind == DT_PLACEMENT_PARTIAL ? 2 * c1 : 0);
        float mine[3];
        for (int i = 0; i < 3; i++)
            mine[i] = part(key, i);
        dt_tensor *x, *y;
        int64_t shape[1] = {3}, ls[1] = {3}, first = 0;
        if (pc->pl[1].kind == DT_PLACEMENT_SHARD) {
            ls[0] = c1 ? 1 : 2; /* torch.chunk of 3 over 2 */
            first = c1 ? 2 : 0;
        }
        R_OK(dt_tensor_from_local(mesh, mine + first, DT_F32, 1, ls, 2, pc->pl, shape, 0, &x));
        float xf[3];
        char want[3 * 8], got[3 * 8];
        R_OK(dt_tensor_full_tensor(x, xf, sizeof xf));
        for (int i = 0; i < 3; i++) {
            double v = xf[i];
            R_OK(dt_convert_from_f64(pc->to, &v, want + i * dt_dtype_size(pc->to), 1));
        }
        dt_comm_stats_reset(ctx);
        R_OK(dt_cast(x, pc->to, &y));
        uint64_t issued = t_issued_total(ctx);
        R_CHECK(same_placements(x, y), "case %zu: placements changed", c);
        R_CHECK((issued > 0) == pc->reduces, "case %zu: %llu collectives", c,
                (unsigned long long)issued);
        R_OK(dt_tensor_full_tensor(y, got, sizeof got));
        if (pc->reduces) { /* exactly the cast of the global value */
            R_CHECK(memcmp(got, want, 3 * dt_dtype_size(pc->to)) == 0,
                    "case %zu: full(cast(x)) = %g %g %g, cast(full(x)) = %g %g %g", c,
                    t_get(pc->to, got, 0), t_get(pc->to, got, 1), t_get(pc->to, got, 2),
                    t_get(pc->to, want, 0), t_get(pc->to, want, 1), t_get(pc->to, want, 2));
        } else { /* the parts, cast: max/min exact; the f64 sum is the exact sum */
            for (int i = 0; i < 3; i++)
                R_CHECK(t_get(pc->to, got, i) == t_get(pc->to, want, i) ||
                            (pc->to == DT_F64 && t_get(pc->to, got, i) == xf[i]),
                        "case %zu [%d]: %g, want %g", c, i, t_get(pc->to, got, i), xf[i]);
        }
        dt_tensor_release(x), dt_tensor_release(y);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cast, partial_reduces_before_narrowing) {
    t_run(4, partial_body, NULL);
}

/* The example of dtensor/create.h: bf16 parts 1 + 2^-8 and 2^-8 would sum to 1. */
static dt_status naive_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    float mine = dt_mesh_rank(mesh) ? 0.00390625f : 1.00390625f;
    int64_t one[1] = {1};
    dt_placement p[1] = {dt_partial(DT_REDUCE_SUM)};
    dt_tensor *x, *y;
    R_OK(dt_tensor_from_local(mesh, &mine, DT_F32, 1, one, 1, p, one, 0, &x));
    R_OK(dt_cast(x, DT_BF16, &y));
    uint16_t h;
    R_OK(dt_tensor_full_tensor(y, &h, sizeof h));
    R_CHECK(t_get(DT_BF16, &h, 0) == 1.0078125, "bf16 sum %g, want 1 + 2^-7",
            t_get(DT_BF16, &h, 0));
    uint16_t local;
    R_OK(dt_tensor_local_to_host(y, &local, sizeof local));
    R_CHECK(t_get(DT_BF16, &local, 0) == (dt_mesh_rank(mesh) ? 0.0 : 1.0078125), "rank %d holds %g",
            dt_mesh_rank(mesh), t_get(DT_BF16, &local, 0));
    dt_tensor_release(x), dt_tensor_release(y);
    R_ERR(dt_cast(NULL, DT_F32, &y), DT_ERR_ARG, "x");
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cast, partial_sum_is_rounded_once) {
    t_run(2, naive_body, NULL);
}

Test(cast, bad_input) {
    T_ERR(dt_cast(NULL, DT_F32, &(dt_tensor *){NULL}), DT_ERR_ARG, "x");
}
