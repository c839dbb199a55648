/* The fused kernels (silu_mul, log_softmax_pick, their backward kernels, rms_norm_residual and
 * the gradients of both its outputs) against naive f64 loops written here, on every SIMD path this
 * CPU runs (forced through dt_simd_set_cap): the elementwise ones bit-identical across paths, the
 * row reductions within 1e-6 relative; the f64 backward against central differences of the f64
 * forward; bad inputs named. Sharded against unsharded runs in test_ops (op_cases.c), gradients in
 * test_autograd. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"

static uint64_t rng = 0x5eed2024u;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static dt_local blk(void *data, dt_dtype t, int nd, const int64_t *shape) {
    dt_local b = {.data = data, .dtype = t, .ndim = nd};
    memcpy(b.shape, shape, sizeof(int64_t) * (size_t)nd);
    return b;
}

static int close_rel(double got, double want, double tol) {
    return fabs(got - want) <= tol * (1 + fabs(want));
}

static double silu(double x) {
    return x / (1 + exp(-x));
}

/* Lengths around every lane count, tails included. */
static const int64_t LENS[] = {1, 3, 4, 7, 8, 15, 16, 17, 33, 1000};
#define NLENS (sizeof LENS / sizeof LENS[0])

Test(fused, silu_mul_paths_identical_and_match_f64) {
    int best = (int)dt_simd_cpu_best();
    for (size_t li = 0; li < NLENS; li++) {
        int64_t n = LENS[li];
        float *g = malloc(sizeof(float) * (size_t)n), *u = malloc(sizeof(float) * (size_t)n);
        float *dy = malloc(sizeof(float) * (size_t)n), *out[DT_SIMD_COUNT], *dg[DT_SIMD_COUNT],
              *du[DT_SIMD_COUNT];
        for (int64_t i = 0; i < n; i++) {
            g[i] = (float)(urand() * 24 - 12), u[i] = (float)(urand() * 4 - 2);
            dy[i] = (float)(urand() * 2 - 1);
        }
        g[0] = n > 1 ? -100.0f : g[0]; /* exp(-g) overflows: silu -> -0 */
        dt_local G = blk(g, DT_F32, 1, &n), U = blk(u, DT_F32, 1, &n), D = blk(dy, DT_F32, 1, &n);
        for (int p = 0; p <= best; p++) {
            out[p] = malloc(sizeof(float) * (size_t)n), dg[p] = malloc(sizeof(float) * (size_t)n);
            du[p] = malloc(sizeof(float) * (size_t)n);
            dt_simd_set_cap((dt_simd)p);
            cr_assert_eq(dt_simd_level(), (dt_simd)p);
            dt_local O = blk(out[p], DT_F32, 1, &n), DG = blk(dg[p], DT_F32, 1, &n),
                     DU = blk(du[p], DT_F32, 1, &n);
            cr_assert_eq(dt_cpu_silu_mul(&G, &U, &O), DT_OK);
            cr_assert_eq(dt_cpu_silu_mul_backward(&G, &U, &D, &DG, &DU), DT_OK);
            for (int64_t i = 0; i < n; i++) {
                double x = g[i], s = 1 / (1 + exp(-x));
                double want = silu(x) * u[i], wg = dy[i] * u[i] * s * (1 + x * (1 - s));
                double wu = dy[i] * silu(x);
                cr_assert(close_rel(out[p][i], want, 1e-6), "%s n %lld [%lld]: %g, want %g",
                          dt_simd_name((dt_simd)p), (long long)n, (long long)i, out[p][i], want);
                cr_assert(close_rel(dg[p][i], wg, 1e-6) && close_rel(du[p][i], wu, 1e-6),
                          "%s n %lld backward [%lld]: %g %g, want %g %g", dt_simd_name((dt_simd)p),
                          (long long)n, (long long)i, dg[p][i], du[p][i], wg, wu);
            }
            /* the same per-lane arithmetic on every path: the same bits */
            cr_assert(!memcmp(out[p], out[0], sizeof(float) * (size_t)n) &&
                          !memcmp(dg[p], dg[0], sizeof(float) * (size_t)n) &&
                          !memcmp(du[p], du[0], sizeof(float) * (size_t)n),
                      "%s differs from scalar at n %lld", dt_simd_name((dt_simd)p), (long long)n);
        }
        dt_simd_set_cap(DT_SIMD_COUNT);
        for (int p = 0; p <= best; p++)
            free(out[p]), free(dg[p]), free(du[p]);
        free(g), free(u), free(dy);
    }
}

/* The f64 reference of one row set: logits (N, C, I), targets (N, I); stats = (max, 1 / sum). */
static void xent_naive(const double *x, const int64_t *t, int64_t N, int64_t C, int64_t I,
                       const double *g, double *lp, double *st, double *gx) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < I; i++) {
            double mx = -INFINITY, s = 0;
            for (int64_t c = 0; c < C; c++)
                mx = fmax(mx, x[(n * C + c) * I + i]);
            for (int64_t c = 0; c < C; c++)
                s += exp(x[(n * C + c) * I + i] - mx);
            double l = mx + log(s);
            int64_t r = n * I + i, tt = t[r];
            int in = tt >= 0 && tt < C;
            st[2 * r] = mx, st[2 * r + 1] = 1 / s;
            lp[r] = in ? x[(n * C + tt) * I + i] - l : 0;
            for (int64_t c = 0; c < C; c++)
                gx[(n * C + c) * I + i] =
                    in ? g[r] * ((c == tt) - exp(x[(n * C + c) * I + i] - l)) : 0;
        }
}

#define AT(p, i) (dt == DT_F32 ? (double)((float *)(p))[i] : ((double *)(p))[i])

static void xent_case(int64_t N, int64_t C, int64_t I, dt_dtype dt) {
    int64_t nx = N * C * I, nr = N * I, xs[3] = {N, C, I}, ts[2] = {N, I}, ss[3] = {N, I, 2};
    double *x = malloc(sizeof(double) * (size_t)nx), *g = malloc(sizeof(double) * (size_t)nr);
    double *lp = malloc(sizeof(double) * (size_t)nr), *st = malloc(sizeof(double) * 2 * (size_t)nr);
    double *gx = malloc(sizeof(double) * (size_t)nx);
    int64_t *t = malloc(sizeof(int64_t) * (size_t)nr);
    size_t es = dt == DT_F32 ? 4 : 8;
    void *xd = malloc(es * (size_t)nx), *gd = malloc(es * (size_t)nr);
    for (int64_t e = 0; e < nx; e++) {
        double v = urand() * 20 - 10;
        if (dt == DT_F32)
            ((float *)xd)[e] = (float)v;
        else
            ((double *)xd)[e] = v;
        x[e] = AT(xd, e); /* the reference reads the rounded inputs */
    }
    for (int64_t r = 0; r < nr; r++) {
        t[r] = r % 5 == 3 ? -100 : (int64_t)(urand() * (double)C); /* some ignored rows */
        double v = urand() * 2 - 1;
        if (dt == DT_F32)
            ((float *)gd)[r] = (float)v;
        else
            ((double *)gd)[r] = v;
        g[r] = AT(gd, r);
    }
    xent_naive(x, t, N, C, I, g, lp, st, gx);
    int nd = I > 1 ? 3 : 2;
    dt_local X = blk(xd, dt, nd, xs), T = blk(t, DT_I64, nd - 1, ts), Gd = blk(gd, dt, nd - 1, ts);
    int best = dt == DT_F32 ? (int)dt_simd_cpu_best() : 0;
    double tol = dt == DT_F32 ? 1e-5 : 1e-12;
    void *ref[3] = {0};
    for (int p = 0; p <= best; p++) {
        if (dt == DT_F32) dt_simd_set_cap((dt_simd)p);
        void *o = malloc(es * (size_t)nr), *l = malloc(es * 2 * (size_t)nr);
        void *y = malloc(es * (size_t)nx);
        dt_local O = blk(o, dt, nd - 1, ts), L = blk(l, dt, nd, ss), Y = blk(y, dt, nd, xs);
        if (nd == 2) L.shape[1] = 2;
        cr_assert_eq(dt_cpu_log_softmax_pick(&X, &T, &O, &L), DT_OK, "%s", dt_last_error());
        cr_assert_eq(dt_cpu_log_softmax_pick_backward(&X, &T, &L, &Gd, &Y), DT_OK, "%s",
                     dt_last_error());
        for (int64_t r = 0; r < nr; r++)
            cr_assert(close_rel(AT(o, r), lp[r], tol) && AT(l, 2 * r) == st[2 * r] &&
                          close_rel(AT(l, 2 * r + 1), st[2 * r + 1], tol),
                      "%s %s (%lld,%lld,%lld) row %lld: lp %g stats %g %g, want %g %g %g",
                      dt_dtype_name(dt), dt_simd_name((dt_simd)p), (long long)N, (long long)C,
                      (long long)I, (long long)r, AT(o, r), AT(l, 2 * r), AT(l, 2 * r + 1), lp[r],
                      st[2 * r], st[2 * r + 1]);
        for (int64_t e = 0; e < nx; e++)
            cr_assert(fabs(AT(y, e) - gx[e]) <= tol, "%s %s grad [%lld]: %g, want %g",
                      dt_dtype_name(dt), dt_simd_name((dt_simd)p), (long long)e, AT(y, e), gx[e]);
        /* the same exps added in one fixed order on every path: the same bits */
        if (p == 0) {
            ref[0] = o, ref[1] = l, ref[2] = y;
            continue;
        }
        cr_assert(!memcmp(o, ref[0], es * (size_t)nr) && !memcmp(l, ref[1], es * 2 * (size_t)nr) &&
                      !memcmp(y, ref[2], es * (size_t)nx),
                  "%s differs from scalar (C %lld)", dt_simd_name((dt_simd)p), (long long)C);
        free(o), free(l), free(y);
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
    free(ref[0]), free(ref[1]), free(ref[2]);
    free(x), free(g), free(lp), free(st), free(gx), free(t), free(xd), free(gd);
}

Test(fused, log_softmax_pick_matches_f64_on_every_path) {
    xent_case(37, 256, 1, DT_F32); /* the model's vocabulary */
    xent_case(5, 13, 1, DT_F32);   /* a tail on every lane count */
    xent_case(4, 601, 1, DT_F32);  /* rows of several chunks */
    xent_case(3, 7, 4, DT_F32);    /* class dim not last */
    xent_case(6, 33, 1, DT_F64);
    xent_case(2, 5, 3, DT_F64);
}

/* The fused forward and backward give the bits of the unfused kernels: log_softmax then the
 * target's entry, and log_softmax's rule (onehot g - softmax (sum of onehot g)). */
static void xent_bits_case(int64_t N, int64_t C, int64_t I, dt_dtype dt) {
    int64_t nx = N * C * I, nr = N * I, xs[3] = {N, C, I}, ts[2] = {N, I}, ss[3] = {N, I, 2};
    size_t es = dt == DT_F32 ? 4 : 8;
    void *xd = malloc(es * (size_t)nx), *gd = malloc(es * (size_t)nr), *o = malloc(es * (size_t)nr);
    void *l = malloc(es * 2 * (size_t)nr), *y = malloc(es * (size_t)nx);
    void *lsm = malloc(es * (size_t)nx), *sm = malloc(es * (size_t)nx);
    int64_t *t = malloc(sizeof(int64_t) * (size_t)nr);
    for (int64_t e = 0; e < nx; e++)
        if (dt == DT_F32)
            ((float *)xd)[e] = (float)(urand() * 30 - 15);
        else
            ((double *)xd)[e] = urand() * 30 - 15;
    for (int64_t r = 0; r < nr; r++) {
        t[r] = (int64_t)(urand() * (double)C);
        if (dt == DT_F32)
            ((float *)gd)[r] = (float)(urand() * 2 - 1);
        else
            ((double *)gd)[r] = urand() * 2 - 1;
    }
    int nd = I > 1 ? 3 : 2;
    dt_local X = blk(xd, dt, nd, xs), T = blk(t, DT_I64, nd - 1, ts), G = blk(gd, dt, nd - 1, ts),
             O = blk(o, dt, nd - 1, ts), L = blk(l, dt, nd, ss), Y = blk(y, dt, nd, xs),
             LSM = blk(lsm, dt, nd, xs), SM = blk(sm, dt, nd, xs);
    if (nd == 2) L.shape[1] = 2;
    cr_assert_eq(dt_cpu_log_softmax_pick(&X, &T, &O, &L), DT_OK);
    cr_assert_eq(dt_cpu_log_softmax_pick_backward(&X, &T, &L, &G, &Y), DT_OK);
    cr_assert_eq(dt_cpu_softmax(1, 1, &X, &LSM), DT_OK);
    cr_assert_eq(dt_cpu_softmax(0, 1, &X, &SM), DT_OK);
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < I; i++) {
            int64_t r = n * I + i;
            cr_assert(AT(o, r) == AT(lsm, (n * C + t[r]) * I + i),
                      "%s C %lld row %lld: %.9g, "
                      "log_softmax %.9g",
                      dt_dtype_name(dt), (long long)C, (long long)r, AT(o, r),
                      AT(lsm, (n * C + t[r]) * I + i));
            for (int64_t c = 0; c < C; c++) {
                int64_t e = (n * C + c) * I + i;
                double want;
                if (dt == DT_F32) {
                    float gr = ((float *)gd)[r], oh = c == t[r] ? gr : 0.0f;
                    want = oh - ((float *)sm)[e] * gr;
                } else {
                    double gr = ((double *)gd)[r], oh = c == t[r] ? gr : 0.0;
                    want = oh - ((double *)sm)[e] * gr;
                }
                cr_assert(AT(y, e) == want, "%s C %lld grad [%lld]: %.9g, unfused %.9g",
                          dt_dtype_name(dt), (long long)C, (long long)e, AT(y, e), want);
            }
        }
    free(xd), free(gd), free(o), free(l), free(y), free(lsm), free(sm), free(t);
}

Test(fused, log_softmax_pick_gives_the_unfused_bits) {
    xent_bits_case(9, 256, 1, DT_F32);
    xent_bits_case(3, 601, 1, DT_F32);
    xent_bits_case(4, 7, 5, DT_F32);
    xent_bits_case(5, 19, 1, DT_F64);
}
#undef AT

/* The f64 backward against central differences of the f64 forward: d/dx of sum_r g_r lp_r. */
Test(fused, log_softmax_pick_backward_is_the_derivative) {
    enum { N = 3, C = 5 };
    double x[N * C], g[N] = {0.7, -1.3, 0.4}, o[N], l[2 * N], y[N * C];
    int64_t t[N] = {2, 0, 4}, xs[2] = {N, C}, ts[1] = {N}, ss[2] = {N, 2};
    for (int e = 0; e < N * C; e++)
        x[e] = urand() * 6 - 3;
    dt_local X = blk(x, DT_F64, 2, xs), T = blk(t, DT_I64, 1, ts), G = blk(g, DT_F64, 1, ts),
             O = blk(o, DT_F64, 1, ts), L = blk(l, DT_F64, 2, ss), Y = blk(y, DT_F64, 2, xs);
    cr_assert_eq(dt_cpu_log_softmax_pick(&X, &T, &O, &L), DT_OK);
    cr_assert_eq(dt_cpu_log_softmax_pick_backward(&X, &T, &L, &G, &Y), DT_OK);
    for (int e = 0; e < N * C; e++) {
        double h = 1e-6, keep = x[e], f[2];
        for (int s = 0; s < 2; s++) {
            x[e] = keep + (s ? -h : h);
            cr_assert_eq(dt_cpu_log_softmax_pick(&X, &T, &O, NULL), DT_OK);
            f[s] = 0;
            for (int r = 0; r < N; r++)
                f[s] += g[r] * o[r];
        }
        x[e] = keep;
        double fd = (f[0] - f[1]) / (2 * h);
        cr_assert(fabs(fd - y[e]) < 1e-7, "grad [%d] = %g, central difference %g", e, y[e], fd);
    }
    /* silu_mul likewise: d/dgate and d/dup of sum dy silu(gate) up */
    double gt[4] = {-2, -0.3, 0.5, 3}, up[4] = {1.5, -2, 0.25, 1}, dy[4] = {1, -0.5, 2, 0.3};
    double out[4], dgt[4], dup[4];
    int64_t n4 = 4;
    dt_local Gt = blk(gt, DT_F64, 1, &n4), Up = blk(up, DT_F64, 1, &n4),
             Dy = blk(dy, DT_F64, 1, &n4), Out = blk(out, DT_F64, 1, &n4),
             Dg = blk(dgt, DT_F64, 1, &n4), Du = blk(dup, DT_F64, 1, &n4);
    cr_assert_eq(dt_cpu_silu_mul_backward(&Gt, &Up, &Dy, &Dg, &Du), DT_OK);
    for (int e = 0; e < 8; e++) {
        double *v = e < 4 ? &gt[e] : &up[e - 4], keep = *v, h = 1e-6, f[2];
        for (int s = 0; s < 2; s++) {
            *v = keep + (s ? -h : h);
            cr_assert_eq(dt_cpu_silu_mul(&Gt, &Up, &Out), DT_OK);
            f[s] = 0;
            for (int i = 0; i < 4; i++)
                f[s] += dy[i] * out[i];
        }
        *v = keep;
        double fd = (f[0] - f[1]) / (2 * h), an = e < 4 ? dgt[e] : dup[e - 4];
        cr_assert(fabs(fd - an) < 1e-7, "silu_mul grad %d = %g, central difference %g", e, an, fd);
    }
}

/* ---- bad input, through the public calls (dispatch checks, naming the argument) ----------- */

static dt_status bad_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    dt_placement r = dt_replicate();
    int64_t s56[2] = {5, 6}, s57[2] = {5, 7}, s5[1] = {5}, s4[1] = {4};
    dt_tensor *a, *b, *ti, *tf, *t4, *out = NULL;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, s56, 1, &r, &a));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, s57, 1, &r, &b));
    R_OK(dt_tensor_zeros(mesh, DT_I64, 1, s5, 1, &r, &ti));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, s5, 1, &r, &tf));
    R_OK(dt_tensor_zeros(mesh, DT_I64, 1, s4, 1, &r, &t4));
    R_ERR(dt_silu_mul(a, b, &out), DT_ERR_SHAPE, "up must have gate's shape");
    R_ERR(dt_silu_mul(ti, ti, &out), DT_ERR_DTYPE, "gate must be a float dtype, got i64");
    R_ERR(dt_log_softmax_pick(a, tf, &out, NULL), DT_ERR_DTYPE, "target must be i32 or i64");
    R_ERR(dt_log_softmax_pick(ti, ti, &out, NULL), DT_ERR_DTYPE, "logits must be f32 or f64");
    R_ERR(dt_log_softmax_pick(a, t4, &out, NULL), DT_ERR_SHAPE, "do not match");
    R_ERR(dt_log_softmax_pick_backward(a, ti, tf, tf, &out), DT_ERR_SHAPE,
          "stats must be (target's shape..., 2)");
    int64_t s52[2] = {5, 2};
    dt_tensor *st;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, s52, 1, &r, &st));
    R_ERR(dt_log_softmax_pick_backward(a, ti, st, a, &out), DT_ERR_SHAPE,
          "grad must be target's shape");
    dt_tensor_release(st);
    dt_tensor *sum = NULL;
    R_ERR(dt_rms_norm_residual(a, b, tf, 1e-5, &out, &sum), DT_ERR_SHAPE,
          "residual must have x's shape");
    R_ERR(dt_rms_norm_residual(a, a, tf, 1e-5, &out, &sum), DT_ERR_SHAPE, "weight must be (6)");
    R_ERR(dt_rms_norm_residual(a, a, tf, 0, &out, &sum), DT_ERR_ARG, "eps = 0 must be > 0");
    R_CHECK(out == NULL && sum == NULL, "a failed call returned a tensor");
    dt_tensor *all[] = {a, b, ti, tf, t4};
    for (int i = 0; i < 5; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(fused, bad_input_is_named) {
    t_run(2, bad_body, NULL);
}

/* The DT_SIMD variable caps the path; an unknown value leaves it uncapped. */
Test(fused, simd_names_and_cap) {
    dt_simd best = dt_simd_cpu_best();
    cr_assert(best >= DT_SIMD_SSE && best < DT_SIMD_COUNT);
    cr_log_info("this CPU's best SIMD path: %s", dt_simd_name(best));
    dt_simd_set_cap(DT_SIMD_SCALAR);
    cr_assert_eq(dt_simd_level(), DT_SIMD_SCALAR);
    dt_simd_set_cap(DT_SIMD_COUNT);
    cr_assert_eq(dt_simd_level(), best);
    cr_assert_str_eq(dt_simd_name(DT_SIMD_AVX512), "avx512");
}

/* ---- rms_norm_residual -------------------------------------------------------------------- */

/* f64 reference: h = x + r, y = h rstd w per row of H. */
static void rms_naive(const double *x, const double *r, const double *w, int64_t rows, int64_t H,
                      double *h, double *y) {
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0;
        for (int64_t j = 0; j < H; j++) {
            h[i * H + j] = x[i * H + j] + r[i * H + j];
            ss += h[i * H + j] * h[i * H + j];
        }
        double rstd = 1 / sqrt(ss / (double)H + 1e-5);
        for (int64_t j = 0; j < H; j++)
            y[i * H + j] = h[i * H + j] * rstd * w[j];
    }
}

Test(fused, rms_norm_residual_kernel_on_every_path) {
    int best = (int)dt_simd_cpu_best();
    static const int64_t Hs[] = {1, 7, 16, 33, 128};
    for (size_t hi = 0; hi < sizeof Hs / sizeof Hs[0]; hi++) {
        int64_t rows = 5, H = Hs[hi], n = rows * H, shape[2] = {rows, H};
        float *x = malloc(sizeof(float) * (size_t)n), *r = malloc(sizeof(float) * (size_t)n);
        float *w = malloc(sizeof(float) * (size_t)H), *h0 = malloc(sizeof(float) * (size_t)n);
        float *h = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        double *xd = malloc(sizeof(double) * (size_t)n), *rd = malloc(sizeof(double) * (size_t)n);
        double *wd = malloc(sizeof(double) * (size_t)H), *hd = malloc(sizeof(double) * (size_t)n);
        double *yd = malloc(sizeof(double) * (size_t)n);
        for (int64_t e = 0; e < n; e++) {
            xd[e] = x[e] = (float)(urand() * 4 - 2);
            rd[e] = r[e] = (float)(urand() * 4 - 2);
        }
        for (int64_t j = 0; j < H; j++)
            wd[j] = w[j] = (float)(urand() + 0.5);
        /* the reference adds in f32 as the kernel does, then normalises in f64 */
        for (int64_t e = 0; e < n; e++)
            rd[e] = (double)(x[e] + r[e]) - xd[e];
        rms_naive(xd, rd, wd, rows, H, hd, yd);
        dt_local X = blk(x, DT_F32, 2, shape), R = blk(r, DT_F32, 2, shape),
                 W = blk(w, DT_F32, 1, &H), Hb = blk(h, DT_F32, 2, shape),
                 Y = blk(y, DT_F32, 2, shape);
        for (int p = 0; p <= best; p++) {
            dt_simd_set_cap((dt_simd)p);
            cr_assert_eq(dt_cpu_rms_norm_residual(1e-5, &X, &R, &W, &Y, &Hb), DT_OK);
            for (int64_t e = 0; e < n; e++) {
                cr_assert(h[e] == x[e] + r[e], "%s H %lld: sum [%lld] is not x + r",
                          dt_simd_name((dt_simd)p), (long long)H, (long long)e);
                cr_assert(close_rel(y[e], yd[e], 2e-6), "%s H %lld: [%lld] = %g, want %g",
                          dt_simd_name((dt_simd)p), (long long)H, (long long)e, y[e], yd[e]);
            }
            if (p == 0) memcpy(h0, h, sizeof(float) * (size_t)n);
            cr_assert(!memcmp(h, h0, sizeof(float) * (size_t)n));
        }
        dt_simd_set_cap(DT_SIMD_COUNT);
        free(x), free(r), free(w), free(h0), free(h), free(y);
        free(xd), free(rd), free(wd), free(hd), free(yd);
    }
}

/* Both outputs carry gradients: L = sum(gy y) + sum(gh sum) on a 2-rank mesh with the rows
 * sharded, against the f64 derivative written out here. */
enum { RR = 5, RH = 6 };
static dt_status rms_grad_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    double x[RR * RH], r[RR * RH], w[RH], gy[RR * RH], gh[RR * RH], h[RR * RH], y[RR * RH];
    uint64_t s = 0x1234;
    for (int e = 0; e < RR * RH; e++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        x[e] = (double)(s >> 11) / 9007199254740992.0 * 2 - 1;
        r[e] = sin(e * 0.7), gy[e] = cos(e * 1.3), gh[e] = sin(e * 0.31 + 1);
    }
    for (int j = 0; j < RH; j++)
        w[j] = 0.5 + j * 0.25;
    rms_naive(x, r, w, RR, RH, h, y);
    int64_t sh[2] = {RR, RH}, wsh[1] = {RH};
    dt_placement rows = dt_shard(0), rep = dt_replicate();
    dt_tensor *tx, *tr, *tw, *tgy, *tgh, *out, *sum, *a, *b, *sa, *sb, *loss;
    R_OK(dt_tensor_distribute(mesh, x, DT_F64, 2, sh, 1, &rows, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, r, DT_F64, 2, sh, 1, &rows, DT_ALL_RANKS, &tr));
    R_OK(dt_tensor_distribute(mesh, w, DT_F64, 1, wsh, 1, &rep, DT_ALL_RANKS, &tw));
    R_OK(dt_tensor_distribute(mesh, gy, DT_F64, 2, sh, 1, &rows, DT_ALL_RANKS, &tgy));
    R_OK(dt_tensor_distribute(mesh, gh, DT_F64, 2, sh, 1, &rows, DT_ALL_RANKS, &tgh));
    R_OK(dt_tensor_set_requires_grad(tx, 1));
    R_OK(dt_tensor_set_requires_grad(tr, 1));
    R_OK(dt_tensor_set_requires_grad(tw, 1));
    R_OK(dt_rms_norm_residual(tx, tr, tw, 1e-5, &out, &sum));
    double got[RR * RH];
    R_OK(dt_tensor_full_tensor(out, got, sizeof got));
    for (int e = 0; e < RR * RH; e++)
        R_CHECK(fabs(got[e] - y[e]) < 1e-12, "out [%d] = %g, want %g", e, got[e], y[e]);
    R_OK(dt_tensor_full_tensor(sum, got, sizeof got));
    for (int e = 0; e < RR * RH; e++)
        R_CHECK(got[e] == x[e] + r[e], "sum [%d] = %g, want %g", e, got[e], x[e] + r[e]);
    R_OK(dt_mul(out, tgy, &a));
    R_OK(dt_mul(sum, tgh, &b));
    R_OK(dt_sum(a, NULL, 0, 0, &sa));
    R_OK(dt_sum(b, NULL, 0, 0, &sb));
    R_OK(dt_add(sa, sb, &loss));
    R_OK(dt_backward(loss));
    /* dL/dh_k = gh_k + rstd gy_k w_k - rstd^3 h_k / H sum_j gy_j w_j h_j; dL/dw_j = sum_rows
     * gy_j h_j rstd */
    double gx[RR * RH], gw[RH] = {0};
    for (int i = 0; i < RR; i++) {
        double ss = 0, dot = 0;
        for (int j = 0; j < RH; j++) {
            ss += h[i * RH + j] * h[i * RH + j];
            dot += gy[i * RH + j] * w[j] * h[i * RH + j];
        }
        double rs = 1 / sqrt(ss / RH + 1e-5);
        for (int j = 0; j < RH; j++) {
            int e = i * RH + j;
            gx[e] = gh[e] + rs * gy[e] * w[j] - rs * rs * rs * h[e] / RH * dot;
            gw[j] += gy[e] * h[e] * rs;
        }
    }
    dt_tensor *leaves[3] = {tx, tr, tw};
    for (int l = 0; l < 3; l++) {
        dt_tensor *g = dt_tensor_grad(leaves[l]);
        R_CHECK(g != NULL, "leaf %d has no gradient", l);
        int n = l < 2 ? RR * RH : RH;
        R_OK(dt_tensor_full_tensor(g, got, sizeof(double) * (size_t)n));
        for (int e = 0; e < n; e++) {
            double want = l < 2 ? gx[e] : gw[e];
            R_CHECK(fabs(got[e] - want) < 1e-10, "grad of %s [%d] = %.12g, want %.12g",
                    l == 0   ? "x"
                    : l == 1 ? "residual"
                             : "weight",
                    e, got[e], want);
        }
    }
    dt_tensor *all[] = {tx, tr, tw, tgy, tgh, out, sum, a, b, sa, sb, loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(fused, rms_norm_residual_gradients_of_both_outputs) {
    t_run(2, rms_grad_body, NULL);
}
