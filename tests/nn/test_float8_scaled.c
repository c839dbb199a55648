/* dtensor/float8.h against naive references computed here: global amax scales (tensorwise and
 * axiswise) under sharding with their one all_reduce, scaled casts both ways, the scaled
 * float8 matmul (f64 loop over the decoded codes), the float8 and bf16 linears' forward values
 * and their straight-through gradients, and bad input. */
#include <math.h>
#include <stdlib.h>

#include "float8_ref.h"
#include "helpers.h"

#define M 6
#define K 10

/* x[i] spans several binades, signs, a zero; the largest |x| sits in the last rank's shard. */
static void fill_x(float *x, int n, float big) {
    for (int i = 0; i < n; i++) x[i] = (float)(sin(1.3 * i + 0.2) * ldexp(1.0, i % 7 - 3));
    x[3] = 0.0f;
    x[n - 2] = big;
}

static float ref_scale(double amax, double max) { return (float)(max / fmax(amax, 1e-12)); }

static uint64_t all_reduces(dt_ctx *ctx) {
    dt_comm_stats s;
    dt_comm_stats_get(ctx, &s);
    return s.calls[DT_COLL_ALL_REDUCE];
}

typedef struct layout {
    dt_placement pl[2];
    int sharded;
} layout;

static const layout layouts[] = {
    {{{.kind = DT_PLACEMENT_SHARD, .dim = 0}, {.kind = DT_PLACEMENT_SHARD, .dim = 1}}, 1},
    {{{.kind = DT_PLACEMENT_REPLICATE}, {.kind = DT_PLACEMENT_SHARD, .dim = 0}}, 1},
    {{{.kind = DT_PLACEMENT_REPLICATE}, {.kind = DT_PLACEMENT_REPLICATE}}, 0},
};

static dt_status scales_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int64_t shape[2] = {M, K};
    float x[M * K];
    fill_x(x, M * K, -37.5f);
    double amax = 0, row[M] = {0}, col[K] = {0};
    for (int i = 0; i < M * K; i++) {
        amax = fmax(amax, fabs(x[i]));
        row[i / K] = fmax(row[i / K], fabs(x[i]));
        col[i % K] = fmax(col[i % K], fabs(x[i]));
    }
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        dt_tensor *t, *s, *sr, *sc;
        R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 2, layouts[l].pl, DT_ALL_RANKS, &t));
        uint64_t before = all_reduces(ctx);
        R_OK(dt_float8_scale_tensorwise(t, DT_F8E4M3, &s));
        uint64_t calls = all_reduces(ctx) - before;
        R_CHECK(calls == (uint64_t)layouts[l].sharded, "layout %zu: %llu all_reduces for the "
                "amax, want %d", l, (unsigned long long)calls, layouts[l].sharded);
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(s, &info));
        R_CHECK(info.ndim == 0 && info.dtype == DT_F32, "scale is %d-D %s", info.ndim,
                dt_dtype_name(info.dtype));
        for (int m = 0; m < 2; m++)
            R_CHECK(info.placements[m].kind == DT_PLACEMENT_REPLICATE, "scale not replicated");
        float got;
        R_OK(dt_tensor_full_tensor(s, &got, sizeof got));
        R_CHECK(got == ref_scale(amax, 448.0), "tensorwise scale %.9g, want %.9g", (double)got,
                (double)ref_scale(amax, 448.0));
        R_OK(dt_float8_scale_axiswise(t, DT_F8E5M2, -1, &sr));
        R_OK(dt_float8_scale_axiswise(t, DT_F8E4M3, 0, &sc));
        float gr[M], gc[K];
        R_OK(dt_tensor_full_tensor(sr, gr, sizeof gr));
        R_OK(dt_tensor_full_tensor(sc, gc, sizeof gc));
        for (int i = 0; i < M; i++)
            R_CHECK(gr[i] == ref_scale(row[i], 57344.0), "row %d scale %.9g", i, (double)gr[i]);
        for (int j = 0; j < K; j++)
            R_CHECK(gc[j] == ref_scale(col[j], 448.0), "column %d scale %.9g", j, (double)gc[j]);
        dt_tensor_release(t), dt_tensor_release(s), dt_tensor_release(sr), dt_tensor_release(sc);
    }
    /* all zeros: amax clamped to 1e-12, a finite scale */
    dt_tensor *z, *s;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, 2, layouts[0].pl, &z));
    R_OK(dt_float8_scale_tensorwise(z, DT_F8E4M3, &s));
    float got;
    R_OK(dt_tensor_full_tensor(s, &got, sizeof got));
    R_CHECK(got == ref_scale(0, 448.0), "zeros: scale %g", (double)got);
    dt_tensor_release(z), dt_tensor_release(s);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(float8_scaled, global_amax_scales) { t_run(4, scales_body, NULL); }

/* x -> float8 codes == encode(x * scale) (f32 product); back == decode(code) / scale (f32). */
static dt_status casts_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int64_t shape[2] = {M, K};
    float x[M * K];
    fill_x(x, M * K, 1e4f);
    for (int e5 = 0; e5 < 2; e5++)
        for (int axis = 0; axis < 2; axis++) {
            dt_dtype d8 = e5 ? DT_F8E5M2 : DT_F8E4M3;
            dt_tensor *t, *s, *x8, *back;
            R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 2, layouts[0].pl, DT_ALL_RANKS,
                                      &t));
            R_OK(axis ? dt_float8_scale_axiswise(t, d8, 1, &s)
                      : dt_float8_scale_tensorwise(t, d8, &s));
            R_OK(dt_cast_scaled(t, d8, s, &x8));
            R_OK(dt_cast_scaled(x8, DT_F32, s, &back));
            float sc[M];
            uint8_t codes[M * K];
            float got[M * K];
            R_OK(dt_tensor_full_tensor(s, sc, axis ? sizeof sc : sizeof sc[0]));
            R_OK(dt_tensor_full_tensor(x8, codes, sizeof codes));
            R_OK(dt_tensor_full_tensor(back, got, sizeof got));
            for (int i = 0; i < M * K; i++) {
                float si = sc[axis ? i / K : 0];
                unsigned want = t_f8_encode(e5, (float)(x[i] * si));
                R_CHECK(codes[i] == want, "%s element %d: code 0x%02x, want 0x%02x",
                        dt_dtype_name(d8), i, codes[i], want);
                float wb = (float)t_f8_decode(e5, want) / si;
                R_CHECK(got[i] == wb, "element %d back %.9g, want %.9g", i, (double)got[i],
                        (double)wb);
            }
            dt_tensor_release(t), dt_tensor_release(s), dt_tensor_release(x8);
            dt_tensor_release(back);
        }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(float8_scaled, casts_match_reference) { t_run(4, casts_body, NULL); }

/* (5, 12) @ (12, 7) through float8, sharded on M/N or on K, tensorwise and axiswise, e4m3 and
 * a mixed e4m3 x e5m2: against an f64 loop over the decoded codes. */
static dt_status mm_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    enum { MM = 5, KK = 12, NN = 7 };
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    float a[MM * KK], b[KK * NN];
    fill_x(a, MM * KK, 3.0f);
    fill_x(b, KK * NN, -0.01f);
    int64_t sa_shape[2] = {MM, KK}, sb_shape[2] = {KK, NN};
    dt_placement pls[][2] = {{dt_shard(0), dt_shard(1)}, {dt_shard(1), dt_shard(0)},
                             {dt_replicate(), dt_replicate()}};
    for (int k = 0; k < 3; k++)
        for (int axis = 0; axis < 2; axis++)
            for (int mix = 0; mix < 2; mix++) {
                dt_dtype db8 = mix ? DT_F8E5M2 : DT_F8E4M3;
                dt_tensor *ta, *tb, *sa, *sb, *a8, *b8, *out;
                R_OK(dt_tensor_distribute(mesh, a, DT_F32, 2, sa_shape, 1, &pls[k][0],
                                          DT_ALL_RANKS, &ta));
                R_OK(dt_tensor_distribute(mesh, b, DT_F32, 2, sb_shape, 1, &pls[k][1],
                                          DT_ALL_RANKS, &tb));
                R_OK(axis ? dt_float8_scale_axiswise(ta, DT_F8E4M3, -1, &sa)
                          : dt_float8_scale_tensorwise(ta, DT_F8E4M3, &sa));
                R_OK(axis ? dt_float8_scale_axiswise(tb, db8, 0, &sb)
                          : dt_float8_scale_tensorwise(tb, db8, &sb));
                R_OK(dt_cast_scaled(ta, DT_F8E4M3, sa, &a8));
                R_OK(dt_cast_scaled(tb, db8, sb, &b8));
                R_OK(dt_mm_scaled(a8, sa, b8, sb, &out));
                uint8_t ca[MM * KK], cb[KK * NN];
                float fa[MM], fb[NN], got[MM * NN];
                R_OK(dt_tensor_full_tensor(a8, ca, sizeof ca));
                R_OK(dt_tensor_full_tensor(b8, cb, sizeof cb));
                R_OK(dt_tensor_full_tensor(sa, fa, axis ? sizeof fa : sizeof fa[0]));
                R_OK(dt_tensor_full_tensor(sb, fb, axis ? sizeof fb : sizeof fb[0]));
                R_OK(dt_tensor_full_tensor(out, got, sizeof got));
                for (int i = 0; i < MM; i++)
                    for (int j = 0; j < NN; j++) {
                        double acc = 0;
                        for (int q = 0; q < KK; q++)
                            acc += t_f8_decode(0, ca[i * KK + q]) * t_f8_decode(mix, cb[q * NN + j]);
                        double want = acc / fa[axis ? i : 0] / fb[axis ? j : 0];
                        double g = got[i * NN + j];
                        R_CHECK(fabs(g - want) <= 1e-5 * fabs(want) + 1e-30, "layout %d axis %d "
                                "mix %d (%d, %d): %.9g, want %.9g", k, axis, mix, i, j, g, want);
                    }
                dt_tensor *all[] = {ta, tb, sa, sb, a8, b8, out};
                for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) dt_tensor_release(all[t]);
            }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(float8_scaled, mm_matches_f64_loop) { t_run(4, mm_body, NULL); }

/* x rounded to bf16 by bits: nearest, ties to even (no NaN here). */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

typedef struct linear_arg {
    int ranks, bf16; /* bf16: dt_linear_bf16, else dt_linear_float8 */
} linear_arg;

/* y = xq @ wq^T with xq, wq the tensorwise e4m3 rounding (or the bf16 rounding) of x and w;
 * sum(y)'s gradients straight through: dx[i][k] = sum_j wq[j][k], dw[j][k] = sum_i xq[i][k]. */
static dt_status linear_body(dt_ctx *ctx, void *arg) {
    const linear_arg *a = arg;
    int n = a->ranks;
    enum { B = 4, IN = 12, OUT = 7 };
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, n == 1 ? "1" : "2", &mesh));
    float x[B * IN], w[OUT * IN];
    fill_x(x, B * IN, 2.5f);
    fill_x(w, OUT * IN, 0.3f);
    double ax = 0, aw = 0;
    for (int i = 0; i < B * IN; i++) ax = fmax(ax, fabs(x[i]));
    for (int i = 0; i < OUT * IN; i++) aw = fmax(aw, fabs(w[i]));
    float sx = ref_scale(ax, 448.0), sw = ref_scale(aw, 448.0), xq[B * IN], wq[OUT * IN];
    for (int i = 0; i < B * IN; i++)
        xq[i] = a->bf16 ? bf16_round(x[i]) : (float)t_f8_round(0, (float)(x[i] * sx)) / sx;
    for (int i = 0; i < OUT * IN; i++)
        wq[i] = a->bf16 ? bf16_round(w[i]) : (float)t_f8_round(0, (float)(w[i] * sw)) / sw;
    int64_t xs[2] = {B, IN}, ws[2] = {OUT, IN};
    dt_placement px = n == 1 ? dt_replicate() : dt_shard(0), pw = dt_replicate();
    dt_tensor *tx, *tw, *y, *loss;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, 1, &px, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, w, DT_F32, 2, ws, 1, &pw, DT_ALL_RANKS, &tw));
    R_OK(dt_tensor_set_requires_grad(tx, 1));
    R_OK(dt_tensor_set_requires_grad(tw, 1));
    R_OK((a->bf16 ? dt_linear_bf16 : dt_linear_float8)(tx, tw, NULL, &y));
    R_OK(dt_sum(y, NULL, 0, 0, &loss));
    R_OK(dt_backward(loss));
    float gy[B * OUT], gx[B * IN], gw[OUT * IN];
    R_OK(dt_tensor_full_tensor(y, gy, sizeof gy));
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(tx), gx, sizeof gx));
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(tw), gw, sizeof gw));
    for (int i = 0; i < B; i++)
        for (int j = 0; j < OUT; j++) {
            double acc = 0;
            for (int k = 0; k < IN; k++) acc += (double)xq[i * IN + k] * wq[j * IN + k];
            R_CHECK(fabs(gy[i * OUT + j] - acc) <= 1e-5 * fabs(acc) + 1e-6, "y[%d][%d] %.9g, "
                    "want %.9g", i, j, (double)gy[i * OUT + j], acc);
        }
    for (int k = 0; k < IN; k++) {
        double sxk = 0, swk = 0;
        for (int i = 0; i < B; i++) sxk += xq[i * IN + k];
        for (int j = 0; j < OUT; j++) swk += wq[j * IN + k];
        for (int i = 0; i < B; i++)
            R_CHECK(fabs(gx[i * IN + k] - swk) <= 1e-5 * fabs(swk) + 1e-6, "dx[%d][%d] %.9g, "
                    "want %.9g", i, k, (double)gx[i * IN + k], swk);
        for (int j = 0; j < OUT; j++)
            R_CHECK(fabs(gw[j * IN + k] - sxk) <= 1e-5 * fabs(sxk) + 1e-6, "dw[%d][%d] %.9g, "
                    "want %.9g", j, k, (double)gw[j * IN + k], sxk);
    }
    dt_tensor_release(tx), dt_tensor_release(tw), dt_tensor_release(y), dt_tensor_release(loss);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(float8_scaled, linear_forward_and_straight_through_grads) {
    linear_arg one = {1, 0}, two = {2, 0};
    t_run(1, linear_body, &one);
    t_run(2, linear_body, &two);
}

Test(float8_scaled, bf16_linear_forward_and_straight_through_grads) {
    linear_arg one = {1, 1}, two = {2, 1};
    t_run(1, linear_body, &one);
    t_run(2, linear_body, &two);
}

static dt_status bad_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t shape[2] = {4, 4};
    dt_placement r = dt_replicate();
    dt_tensor *x, *s, *x8, *out = NULL, *i32;
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, shape, 1, &r, &x));
    R_OK(dt_tensor_ones(mesh, DT_I32, 2, shape, 1, &r, &i32));
    R_ERR(dt_float8_scale_tensorwise(x, DT_F32, &s), DT_ERR_ARG, "dtype is f32");
    R_ERR(dt_float8_scale_tensorwise(i32, DT_F8E4M3, &s), DT_ERR_DTYPE, "argument x is i32");
    R_ERR(dt_float8_scale_axiswise(x, DT_F8E4M3, 2, &s), DT_ERR_ARG, "dim 2");
    R_OK(dt_float8_scale_tensorwise(x, DT_F8E4M3, &s));
    R_ERR(dt_cast_scaled(x, DT_I32, s, &out), DT_ERR_DTYPE, "f32 to i32");
    R_ERR(dt_cast_scaled(x, DT_F8E4M3, i32, &out), DT_ERR_DTYPE, "scale is i32");
    R_OK(dt_cast_scaled(x, DT_F8E4M3, s, &x8));
    R_ERR(dt_mm_scaled(x, s, x8, s, &out), DT_ERR_DTYPE, "both must be float8");
    R_ERR(dt_add(x8, x8, &out), DT_ERR_DTYPE, "f8e4m3");
    R_CHECK(out == NULL, "an output was set on failure");
    uint8_t buf[4] = {0};
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    R_ERR(dt_all_reduce(world, buf, buf, 4, DT_F8E4M3, DT_REDUCE_SUM), DT_ERR_ARG,
          "float8 tensors are not reduced");
    R_ERR(dt_linear_bf16(i32, x, NULL, &out), DT_ERR_DTYPE, "x and w are i32 and f32, not f32");
    /* a linear is float8 or bf16 */
    dt_params *p;
    dt_module lin;
    R_OK(dt_params_create(mesh, DT_F32, &p));
    R_OK(dt_nn_linear_create(p, "proj", 4, 4, 0, (dt_init){DT_INIT_NORMAL, 1.0}, &lin));
    R_OK(dt_module_set_float8(lin, 1));
    R_ERR(dt_module_set_bf16(lin, 1), DT_ERR_ARG, "\"proj\" is a float8 linear");
    R_OK(dt_module_set_float8(lin, 0));
    R_OK(dt_module_set_bf16(lin, 1));
    R_ERR(dt_module_set_float8(lin, 1), DT_ERR_ARG, "\"proj\" is a bf16 linear");
    R_OK(dt_params_destroy(p));
    dt_tensor_release(x), dt_tensor_release(s), dt_tensor_release(x8), dt_tensor_release(i32);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(float8_scaled, bad_input_named) { t_run(2, bad_body, NULL); }
