/* Creation without a full copy, random numbers and casts: Philox's known answers; every
 * creation and random call under every placement on 1-, 2- and 3-D meshes against the
 * one-rank tensor, bit for bit (each rank checks its own shard, then the gathered tensor);
 * the documented draw layout, recomputed here; moment sanity of rand/randn; generator
 * offsets; casts and their Partial rule; bad input. */
#include <math.h>
#include <stdlib.h>

#include "core/philox.h"
#include "helpers.h"

/* ---- Philox4x32-10 known answers (Random123, tests/kat_vectors) --------------------------- */

Test(philox, known_answers) {
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        dt_philox4 c = {{kat[i][0], kat[i][1], kat[i][2], kat[i][3]}};
        dt_philox4 x = dt_philox4x32_10(c, kat[i][4], kat[i][5]);
        for (int w = 0; w < 4; w++)
            cr_assert_eq(x.v[w], kat[i][6 + w], "vector %d word %d: %08x, want %08x", i, w, x.v[w],
                         kat[i][6 + w]);
    }
}

/* The library's log and sin/cos against libm over their whole input range (sin/cos within
 * 2e-15: libm's argument 2 pi u is itself rounded; against long double both are within
 * 2.3e-16, measured). */
Test(philox, box_muller_math) {
    for (int k = 0; k < 100000; k++) {
        double u = (k + 1) / 100000.0, s, c;
        cr_assert_leq(fabs(dt_rng_log(u) - log(u)), 4e-16 * (1 + fabs(log(u))), "log(%.17g)", u);
        dt_rng_sincos2pi(k / 100000.0, &s, &c);
        cr_assert_leq(fabs(s - sin(2 * M_PI * k / 100000.0)), 2e-15, "sin(2 pi %d/1e5)", k);
        cr_assert_leq(fabs(c - cos(2 * M_PI * k / 100000.0)), 2e-15, "cos(2 pi %d/1e5)", k);
    }
    cr_assert_leq(fabs(dt_rng_log(ldexp(1, -53)) - log(ldexp(1, -53))), 1e-14);
}

/* ---- every placement against one rank ------------------------------------------------------ */

enum { F_ONES, F_FULL, F_ARANGE, F_EYE, F_RAND, F_RANDN, F_UNIFORM, F_NORMAL, F_COUNT };
static const char *const fnames[] = {"ones", "full_value", "arange",   "eye",
                                     "rand", "randn",      "uniform_", "normal_"};
static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_I64};
#define NDT  6
#define SEED 0x5eed1234abcdULL

static int is_random(int f) {
    return f >= F_RAND;
}

static dt_status make(dt_mesh *mesh, int f, dt_dtype dt, const dt_placement *pl, int np,
                      dt_generator *g, dt_tensor **out) {
    int64_t shape[2] = {5, 7};
    switch (f) {
    case F_ONES:
        return dt_tensor_ones(mesh, dt, 2, shape, np, pl, out);
    case F_FULL:
        return dt_tensor_full_value(mesh, dt, 2, shape, np, pl, -2.75, out);
    case F_ARANGE:
        return dt_tensor_arange(mesh, dt, dt >= DT_I32 ? -3 : -2.5, 19, dt >= DT_I32 ? 2 : 0.75, np,
                                pl, out);
    case F_EYE:
        return dt_tensor_eye(mesh, dt, 5, 7, np, pl, out);
    case F_RAND:
        return dt_tensor_rand(mesh, dt, 2, shape, np, pl, g, out);
    case F_RANDN:
        return dt_tensor_randn(mesh, dt, 2, shape, np, pl, g, out);
    default: {
        dt_status st = dt_tensor_zeros(mesh, dt, 2, shape, np, pl, out);
        if (st != DT_OK) return st;
        st = f == F_UNIFORM ? dt_tensor_uniform_(*out, -2, 3, g)
                            : dt_tensor_normal_(*out, 1.5, 0.25, g);
        if (st != DT_OK) dt_tensor_release(*out);
        return st;
    }
    }
}

/* The one-rank tensors, [f][dtype], host bytes (NULL for random calls on integer dtypes). */
static void *ref[F_COUNT][NDT];
static size_t ref_numel[F_COUNT][NDT];

static dt_status ref_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "1", &mesh));
    dt_placement r[1] = {dt_replicate()};
    for (int f = 0; f < F_COUNT; f++)
        for (int d = 0; d < NDT; d++) {
            if (is_random(f) && dtypes[d] >= DT_I32) continue;
            dt_generator g = {SEED, 7};
            dt_tensor *t;
            dt_tensor_info info;
            R_OK(make(mesh, f, dtypes[d], r, 1, &g, &t));
            R_OK(dt_tensor_info_get(t, &info));
            ref_numel[f][d] = info.numel;
            ref[f][d] = malloc(info.local_bytes);
            R_OK(dt_tensor_local_to_host(t, ref[f][d], info.local_bytes));
            dt_tensor_release(t);
        }
    dt_mesh_release(mesh);
    return DT_OK;
}

static void make_refs(void) {
    if (!ref[0][0]) t_run(1, ref_body, NULL);
}

/* Placement option o for a tensor: R, S(0), S(-1), P(sum), P(avg), P(max), P(min). */
#define NOPT 7
static dt_placement option(int o) {
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN};
    return o == 0   ? dt_replicate()
           : o == 1 ? dt_shard(0)
           : o == 2 ? dt_shard(-1)
                    : dt_partial(ops[o - 3]);
}

typedef struct sweep_arg {
    const char *mesh;
    int gather; /* also compare the gathered tensor (collective) */
} sweep_arg;

/* This rank's shard against the reference's box (or zeros off coordinate 0 of P(sum)). */
static dt_status check_shard(dt_mesh *mesh, dt_tensor *t, const void *want, const char *what) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    int zeros = 0;
    for (int m = 0; m < info.mesh_ndim; m++)
        zeros |= info.placements[m].kind == DT_PLACEMENT_PARTIAL &&
                 info.placements[m].op == DT_REDUCE_SUM && dt_mesh_coord(mesh, m) != 0;
    size_t es = dt_dtype_size(info.dtype);
    char *got = malloc(info.local_bytes + 1), *exp = calloc(info.local_bytes + 1, 1);
    R_OK(dt_tensor_local_to_host(t, got, info.local_bytes));
    int64_t cols = info.ndim == 2 ? info.local_shape[1] : info.local_shape[0];
    int64_t rows = info.ndim == 2 ? info.local_shape[0] : 1;
    int64_t gcols = info.shape[info.ndim - 1];
    for (int64_t r = 0; !zeros && r < rows; r++) {
        int64_t g = (info.ndim == 2 ? (info.local_offset[0] + r) * gcols : 0) +
                    info.local_offset[info.ndim - 1];
        memcpy(exp + (size_t)(r * cols) * es, (const char *)want + (size_t)g * es,
               (size_t)cols * es);
    }
    int same = memcmp(got, exp, info.local_bytes) == 0;
    free(got), free(exp);
    R_CHECK(same, "%s: rank %d's shard differs from the one-rank tensor", what, dt_mesh_rank(mesh));
    return DT_OK;
}

static dt_status sweep_body(dt_ctx *ctx, void *arg) {
    const sweep_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, a->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh), ncombo = 1;
    for (int m = 0; m < mnd; m++)
        ncombo *= NOPT;
    for (int c = 0; c < ncombo; c++) {
        dt_placement pl[3];
        char text[64], what[160];
        for (int m = 0, k = c; m < mnd; m++, k /= NOPT)
            pl[m] = option(k % NOPT);
        R_OK(dt_placements_format(pl, mnd, text, sizeof text));
        for (int f = 0; f < F_COUNT; f++)
            for (int d = 0; d < NDT; d++) {
                if (is_random(f) && dtypes[d] >= DT_I32) continue;
                dt_generator g = {SEED, 7};
                dt_tensor *t;
                snprintf(what, sizeof what, "%s %s on mesh %s [%s]", fnames[f],
                         dt_dtype_name(dtypes[d]), a->mesh, text);
                R_OK(make(mesh, f, dtypes[d], pl, mnd, &g, &t));
                uint64_t per = dtypes[d] == DT_F64 ? 2 : 4;
                R_CHECK(!is_random(f) || g.offset == 7 + (35 + per - 1) / per,
                        "%s: generator offset %llu", what, (unsigned long long)g.offset);
                R_OK(check_shard(mesh, t, ref[f][d], what));
                if (a->gather) {
                    size_t bytes = ref_numel[f][d] * dt_dtype_size(dtypes[d]);
                    char *full = malloc(bytes);
                    R_OK(dt_tensor_full_tensor(t, full, bytes));
                    int same = memcmp(full, ref[f][d], bytes) == 0;
                    free(full);
                    R_CHECK(same, "%s: the gathered tensor differs from the one-rank tensor", what);
                }
                dt_tensor_release(t);
            }
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(create, every_placement_matches_one_rank) {
    make_refs();
    sweep_arg meshes[] = {{"4", 1}, {"2x2", 1}, {"2x2x2", 0}};
    for (size_t i = 0; i < 3; i++)
        t_run(i == 2 ? 8 : 4, sweep_body, &meshes[i]);
}

/* ---- the one-rank tensors themselves ------------------------------------------------------ */

Test(create, values_follow_the_documented_layout) {
    make_refs();
    for (int d = 0; d < NDT; d++) {
        dt_dtype dt = dtypes[d];
        for (size_t i = 0; i < 35; i++) {
            int64_t r = (int64_t)i / 7, c = (int64_t)i % 7;
            cr_assert_eq(t_get(dt, ref[F_ONES][d], i), 1.0);
            cr_assert_eq(t_get(dt, ref[F_FULL][d], i), dt >= DT_I32 ? -2.0 : -2.75);
            cr_assert_eq(t_get(dt, ref[F_EYE][d], i), r == c ? 1.0 : 0.0);
        }
        /* ceil(21.5 / 0.75) = 29; integers: ceil(22 / 2) = 11 */
        cr_assert_eq(ref_numel[F_ARANGE][d], dt >= DT_I32 ? 11u : 29u);
        for (size_t i = 0; i < (dt >= DT_I32 ? 11u : 29u); i++) {
            double want = dt >= DT_I32 ? -3.0 + 2.0 * (double)i : -2.5 + 0.75 * (double)i, w;
            char buf[8];
            dt_convert_from_f64(dt, &want, buf, 1); /* rounded once, as documented */
            dt_convert_to_f64(dt, buf, &w, 1);
            cr_assert_eq(t_get(dt, ref[F_ARANGE][d], i), w, "arange %s [%zu]", dt_dtype_name(dt),
                         i);
        }
        if (dt >= DT_I32) continue;
        /* rand: element i is block 7 + i/4 (f64: i/2), lane i%4, top bits scaled. */
        int bits = dt == DT_F64 ? 53 : dt == DT_BF16 ? 8 : dt == DT_F16 ? 11 : 24;
        for (size_t i = 0; i < 35; i++) {
            uint64_t per = dt == DT_F64 ? 2 : 4, lane = i % per;
            dt_philox4 c = {{(uint32_t)(7 + i / per), 0, 0, 0}};
            dt_philox4 x = dt_philox4x32_10(c, (uint32_t)SEED, (uint32_t)(SEED >> 32));
            uint64_t w = per == 2 ? (uint64_t)x.v[2 * lane] | (uint64_t)x.v[2 * lane + 1] << 32
                                  : (uint64_t)x.v[lane] << 32;
            double u = ldexp((double)(w >> (64 - bits)), -bits);
            cr_assert_eq(t_get(dt, ref[F_RAND][d], i), u, "rand %s [%zu]", dt_dtype_name(dt), i);
            /* Box-Muller on the pair (2k, 2k+1) with libm, within the dtype's rounding. */
            uint64_t w1 = per == 2 ? (uint64_t)x.v[0] | (uint64_t)x.v[1] << 32
                                   : (uint64_t)x.v[lane & 2] << 32;
            uint64_t w2 = per == 2 ? (uint64_t)x.v[2] | (uint64_t)x.v[3] << 32
                                   : (uint64_t)x.v[lane | 1] << 32;
            int nb = per == 2 ? 53 : 24;
            double u1 = ldexp((double)((w1 >> (64 - nb)) + 1), -nb);
            double u2 = ldexp((double)(w2 >> (64 - nb)), -nb);
            double z = sqrt(-2 * log(u1)) * ((i & 1) ? sin(2 * M_PI * u2) : cos(2 * M_PI * u2));
            double tol = (dt == DT_F64 ? 1e-13 : dt == DT_F32 ? 1e-6 : dt == DT_F16 ? 2e-3 : 1e-2);
            cr_assert_leq(fabs(t_get(dt, ref[F_RANDN][d], i) - z), tol * (1 + fabs(z)),
                          "randn %s [%zu]: %g, want %g", dt_dtype_name(dt), i,
                          t_get(dt, ref[F_RANDN][d], i), z);
            cr_assert_leq(fabs(t_get(dt, ref[F_NORMAL][d], i) - (1.5 + 0.25 * z)),
                          tol * (2 + fabs(z)), "normal_ %s [%zu]", dt_dtype_name(dt), i);
            double uu = t_get(dt, ref[F_UNIFORM][d], i);
            cr_assert(uu >= -2 && uu <= 3 && fabs(uu - (-2 + 5 * u)) <= 5 * tol,
                      "uniform_ %s [%zu]: %g", dt_dtype_name(dt), i, uu);
        }
    }
}

/* ---- moments, generator ----------------------------------------------------------------- */

typedef struct moments {
    dt_dtype dtype;
    double mean[2], var[2], lo, hi; /* rand, randn; range of rand */
} moments;

/* Mean and variance of 1e5 draws on 4 ranks (S(0)), gathered; the seed is fixed, so the
 * bounds (over 5 standard errors wide) are a property of these draws, not a chance. */
static dt_status moments_body(dt_ctx *ctx, void *arg) {
    moments *mo = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    dt_placement s0[1] = {dt_shard(0)};
    int64_t shape[1] = {100000};
    dt_generator g = dt_generator_make(2024);
    size_t es = dt_dtype_size(mo->dtype);
    char *buf = malloc(100000 * es);
    for (int k = 0; k < 2; k++) {
        dt_tensor *t;
        R_OK((k ? dt_tensor_randn : dt_tensor_rand)(mesh, mo->dtype, 1, shape, 1, s0, &g, &t));
        R_OK(dt_tensor_full_tensor(t, buf, 100000 * es));
        double sum = 0, sq = 0;
        mo->lo = 1, mo->hi = 0;
        for (size_t i = 0; i < 100000; i++) {
            double v = t_get(mo->dtype, buf, i);
            sum += v;
            sq += v * v;
            if (!k && v < mo->lo) mo->lo = v;
            if (!k && v > mo->hi) mo->hi = v;
        }
        mo->mean[k] = sum / 1e5;
        mo->var[k] = sq / 1e5 - mo->mean[k] * mo->mean[k];
        dt_tensor_release(t);
    }
    free(buf);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(random, moments_of_1e5_draws) {
    for (int d = 0; d < 4; d++) {
        moments mo = {.dtype = dtypes[d]};
        t_run(4, moments_body, &mo);
        const char *n = dt_dtype_name(mo.dtype);
        /* standard errors: rand mean 0.0009, var 0.0002; randn mean 0.003, var 0.0045 */
        cr_assert_leq(fabs(mo.mean[0] - 0.5), 0.005, "%s rand mean %g", n, mo.mean[0]);
        cr_assert_leq(fabs(mo.var[0] - 1.0 / 12), 0.002, "%s rand var %g", n, mo.var[0]);
        cr_assert(mo.lo >= 0 && mo.hi < 1, "%s rand range [%g, %g]", n, mo.lo, mo.hi);
        cr_assert_leq(fabs(mo.mean[1]), 0.02, "%s randn mean %g", n, mo.mean[1]);
        cr_assert_leq(fabs(mo.var[1] - 1), 0.03, "%s randn var %g", n, mo.var[1]);
    }
}

/* Two draws in a row equal one draw of both sizes (block-aligned), as torch's offsets. */
static dt_status generator_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    dt_placement s0[1] = {dt_shard(0)};
    for (int f64 = 0; f64 < 2; f64++) {
        dt_dtype dt = f64 ? DT_F64 : DT_F32;
        size_t es = dt_dtype_size(dt);
        int64_t n1[1] = {8}, n2[1] = {13}, n12[1] = {21};
        dt_generator g = dt_generator_make(99), h = dt_generator_make(99);
        dt_tensor *a, *b, *ab;
        R_OK(dt_tensor_randn(mesh, dt, 1, n1, 1, s0, &g, &a));
        R_OK(dt_tensor_randn(mesh, dt, 1, n2, 1, s0, &g, &b));
        R_OK(dt_tensor_randn(mesh, dt, 1, n12, 1, s0, &h, &ab));
        R_CHECK(g.offset == (f64 ? 4u + 7u : 2u + 4u) && h.offset == (f64 ? 11u : 6u),
                "offsets %llu %llu", (unsigned long long)g.offset, (unsigned long long)h.offset);
        char x[21 * 8], y[21 * 8];
        R_OK(dt_tensor_full_tensor(a, x, 8 * es));
        R_OK(dt_tensor_full_tensor(b, x + 8 * es, 13 * es));
        R_OK(dt_tensor_full_tensor(ab, y, 21 * es));
        R_CHECK(memcmp(x, y, 21 * es) == 0, "%s: randn(8), randn(13) != randn(21)",
                dt_dtype_name(dt));
        /* An explicit position: uniform_ at the generator's starting point is rand's. */
        dt_tensor *u;
        R_OK(dt_tensor_zeros(mesh, dt, 1, n12, 1, s0, &u));
        R_OK(dt_tensor_uniform_(u, 0, 1, &(dt_generator){99, 0}));
        dt_generator k = dt_generator_make(99);
        dt_tensor *r;
        R_OK(dt_tensor_rand(mesh, dt, 1, n12, 1, s0, &k, &r));
        R_OK(dt_tensor_full_tensor(u, x, 21 * es));
        R_OK(dt_tensor_full_tensor(r, y, 21 * es));
        R_CHECK(memcmp(x, y, 21 * es) == 0, "uniform_(0, 1) at offset 0 != rand");
        dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(ab);
        dt_tensor_release(u), dt_tensor_release(r);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(random, generator_offsets_advance_like_torch) {
    t_run(2, generator_body, NULL);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static dt_status bad_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    dt_placement r[1] = {dt_replicate()};
    int64_t shape[1] = {4};
    dt_tensor *t = T_SENTINEL(dt_tensor *);
    dt_generator g = dt_generator_make(1);
    R_ERR(dt_tensor_rand(mesh, DT_F32, 1, shape, 1, r, NULL, &t), DT_ERR_ARG, "gen");
    R_ERR(dt_tensor_randn(mesh, DT_I32, 1, shape, 1, r, &g, &t), DT_ERR_DTYPE, "i32");
    R_ERR(dt_tensor_rand(mesh, DT_F32, 1, shape, 2, r, &g, &t), DT_ERR_PLACEMENT, "2");
    R_CHECK(g.offset == 0, "a failed draw advanced the generator to %llu",
            (unsigned long long)g.offset);
    R_ERR(dt_tensor_arange(mesh, DT_F32, 0, 4, 0, 1, r, &t), DT_ERR_ARG, "step");
    R_ERR(dt_tensor_arange(mesh, DT_F32, 0, 4, -1, 1, r, &t), DT_ERR_ARG, "step");
    R_ERR(dt_tensor_arange(mesh, DT_I32, 0, 4, 0.5, 1, r, &t), DT_ERR_ARG, "whole");
    R_ERR(dt_tensor_arange(mesh, DT_I32, 0, 4e9, 1e9, 1, r, &t), DT_ERR_ARG, "i32");
    R_ERR(dt_tensor_arange(mesh, DT_F32, 0, INFINITY, 1, 1, r, &t), DT_ERR_ARG, "finite");
    R_ERR(dt_tensor_full_value(mesh, DT_I32, 1, shape, 1, r, 3e9, &t), DT_ERR_ARG, "i32");
    R_ERR(dt_tensor_full_value(mesh, DT_I64, 1, shape, 1, r, NAN, &t), DT_ERR_ARG, "value");
    R_ERR(dt_tensor_ones(mesh, (dt_dtype)42, 1, shape, 1, r, &t), DT_ERR_DTYPE, "dtype");
    R_ERR(dt_tensor_eye(mesh, DT_F32, -1, 3, 1, r, &t), DT_ERR_ARG, "n = -1");
    R_ERR(dt_tensor_eye(mesh, DT_F32, 2, 2, 1, r, NULL), DT_ERR_ARG, "argument out");
    R_ERR(dt_tensor_ones(NULL, DT_F32, 1, shape, 1, r, &t), DT_ERR_ARG, "mesh");
    R_CHECK(t == T_SENTINEL(dt_tensor *), "a failed call wrote tensor_out");
    dt_tensor *z;
    R_OK(dt_tensor_zeros(mesh, DT_I64, 1, shape, 1, r, &z));
    R_ERR(dt_tensor_uniform_(z, 0, 1, &g), DT_ERR_DTYPE, "i64");
    dt_tensor_release(z);
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, shape, 1, r, &z));
    R_ERR(dt_tensor_uniform_(z, 1, 0, &g), DT_ERR_ARG, "lo <= hi");
    R_ERR(dt_tensor_normal_(z, 0, -1, &g), DT_ERR_ARG, "std");
    R_ERR(dt_tensor_normal_(NULL, 0, 1, &g), DT_ERR_ARG, "tensor");
    R_CHECK(g.offset == 0, "failed calls advanced the generator");
    dt_tensor_release(z);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(create, bad_input_is_a_clear_error) {
    t_run(2, bad_body, NULL);
}
