/* The norms' fused backward (layer_norm_backward, rms_norm_backward): the CPU kernel against a
 * naive f64 loop written here (every SIMD path, f32 and f64, with and without weight, rows
 * across the fixed sum blocks), the f64 kernel against central differences of a naive f64
 * forward, the same bits for 1 to 4 pool threads, and through autograd on meshes of 2 to 4
 * ranks with the rows sharded (gx, and gw / gb Partial where the rows are, gathered against the
 * naive loop), and with grad Partial (every output stays Partial); bad inputs named. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/pool.h"
#include "helpers.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"

static uint64_t rng = 0x6e6f726du;
static double urand(void) { /* [0, 1) */
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

/* The naive f64 backward of rows (rows, H): gx, gw, gb (each sized), and per element a scale
 * (the sum of the magnitudes the result is made of) for the tolerance. w NULL: no weight. */
typedef struct naive {
    double *gx, *gw, *gb, *sx, *sw;
} naive;

static void naive_backward(int rms, double eps, int64_t rows, int64_t H, const double *x,
                           const double *w, const double *g, naive *o) {
    for (int64_t c = 0; c < H; c++)
        o->gw[c] = o->gb[c] = o->sw[c] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * H, *gr = g + r * H;
        double mean = 0, var = 0, m1 = 0, m2 = 0, a1 = 0, a2 = 0;
        if (!rms) {
            for (int64_t j = 0; j < H; j++)
                mean += xr[j];
            mean /= (double)H;
        }
        for (int64_t j = 0; j < H; j++)
            var += (xr[j] - mean) * (xr[j] - mean);
        double rstd = 1 / sqrt(var / (double)H + eps);
        for (int64_t j = 0; j < H; j++) {
            double xh = (xr[j] - mean) * rstd, h = gr[j] * (w ? w[j] : 1);
            m1 += h, m2 += h * xh, a1 += fabs(h), a2 += fabs(h * xh);
        }
        m1 = rms ? 0 : m1 / (double)H, m2 /= (double)H, a1 /= (double)H, a2 /= (double)H;
        for (int64_t j = 0; j < H; j++) {
            double xh = (xr[j] - mean) * rstd, h = gr[j] * (w ? w[j] : 1);
            o->gx[r * H + j] = rstd * (h - xh * m2 - m1);
            o->sx[r * H + j] = rstd * (fabs(h) + fabs(xh) * a2 + (rms ? 0 : a1));
            o->gw[j] += gr[j] * xh, o->gb[j] += gr[j], o->sw[j] += fabs(gr[j]) * (1 + fabs(xh));
        }
    }
}

static naive naive_alloc(int64_t rows, int64_t H) {
    size_t n = (size_t)(rows * H) + 1, h = (size_t)H + 1;
    naive o = {malloc(8 * n), malloc(8 * h), malloc(8 * h), malloc(8 * n), malloc(8 * h)};
    cr_assert(o.gx && o.gw && o.gb && o.sx && o.sw);
    return o;
}

static void naive_free(naive *o) {
    free(o->gx), free(o->gw), free(o->gb), free(o->sx), free(o->sw);
}

static const int64_t HS[] = {1, 5, 16, 17, 40, 128, 300, 1500};
static const int64_t ROWS[] = {1, 3, 33, 70};

/* Each (rows, H), rms or not, with and without a weight, f32 on every SIMD path this CPU runs
 * and f64: gx, gw and gb against the naive loop on the same (rounded) inputs. */
Test(norm_backward, kernel_matches_naive_f64) {
    int best = (int)dt_simd_cpu_best();
    for (size_t hi = 0; hi < sizeof HS / sizeof HS[0]; hi++)
        for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++) {
            int64_t H = HS[hi], rows = ROWS[ri], n = rows * H, shape[2] = {rows, H};
            double *x = malloc(8 * (size_t)n), *g = malloc(8 * (size_t)n), *w = malloc(8 * H);
            float *xf = malloc(4 * (size_t)n), *gf = malloc(4 * (size_t)n), *wf = malloc(4 * H);
            float *gxf = malloc(4 * (size_t)n), gwf[1500], gbf[1500];
            double *gxd = malloc(8 * (size_t)n), gwd[1500], gbd[1500];
            for (int64_t i = 0; i < n; i++) {
                xf[i] = (float)(urand() * 4 - 1.5), gf[i] = (float)(urand() * 2 - 1);
                x[i] = xf[i], g[i] = gf[i];
            }
            for (int64_t j = 0; j < H; j++)
                wf[j] = (float)(urand() + 0.5), w[j] = wf[j];
            naive o = naive_alloc(rows, H);
            for (int rms = 0; rms < 2; rms++)
                for (int hw = 0; hw < 2; hw++) {
                    naive_backward(rms, 1e-5, rows, H, x, hw ? w : NULL, g, &o);
                    for (int p = -1; p <= best; p++) { /* -1: f64 */
                        int f64 = p < 0;
                        dt_dtype t = f64 ? DT_F64 : DT_F32;
                        if (!f64) dt_simd_set_cap((dt_simd)p);
                        dt_local X = blk(f64 ? (void *)x : xf, t, 2, shape),
                                 G = blk(f64 ? (void *)g : gf, t, 2, shape),
                                 W = blk(f64 ? (void *)w : wf, t, 1, &H),
                                 GX = blk(f64 ? (void *)gxd : gxf, t, 2, shape),
                                 GW = blk(f64 ? (void *)gwd : gwf, t, 1, &H),
                                 GB = blk(f64 ? (void *)gbd : gbf, t, 1, &H);
                        cr_assert_eq(dt_cpu_layer_norm_backward(rms, 1e-5, &X, hw ? &W : NULL, &G,
                                                                &GX, &GW, rms ? NULL : &GB),
                                     DT_OK, "%s", dt_last_error());
                        double tol = f64 ? 1e-12 : 2e-6;
                        const char *path = f64 ? "f64" : dt_simd_name((dt_simd)p);
                        for (int64_t i = 0; i < n; i++) {
                            double got = f64 ? gxd[i] : gxf[i];
                            cr_assert(fabs(got - o.gx[i]) <= tol * (1 + o.sx[i]),
                                      "%s rms %d w %d (%lld, %lld) gx[%lld] %.9g, want %.9g", path,
                                      rms, hw, (long long)rows, (long long)H, (long long)i, got,
                                      o.gx[i]);
                        }
                        for (int64_t j = 0; j < H; j++) {
                            double gw1 = f64 ? gwd[j] : gwf[j], gb1 = f64 ? gbd[j] : gbf[j];
                            cr_assert(fabs(gw1 - o.gw[j]) <= tol * (1 + o.sw[j]),
                                      "%s rms %d w %d (%lld, %lld) gw[%lld] %.9g, want %.9g", path,
                                      rms, hw, (long long)rows, (long long)H, (long long)j, gw1,
                                      o.gw[j]);
                            cr_assert(rms || fabs(gb1 - o.gb[j]) <= tol * (1 + o.sw[j]),
                                      "%s w %d (%lld, %lld) gb[%lld] %.9g, want %.9g", path, hw,
                                      (long long)rows, (long long)H, (long long)j, gb1, o.gb[j]);
                        }
                    }
                    dt_simd_set_cap(DT_SIMD_COUNT);
                }
            naive_free(&o);
            free(x), free(g), free(w), free(xf), free(gf), free(wf), free(gxf), free(gxd);
        }
}

/* loss = sum(G y(x, w, b)) with y the naive f64 forward. */
static double forward_loss(int rms, int64_t rows, int64_t H, const double *x, const double *w,
                           const double *b, const double *G) {
    double loss = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * H;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < H && !rms; j++)
            mean += xr[j] / (double)H;
        for (int64_t j = 0; j < H; j++)
            var += (xr[j] - mean) * (xr[j] - mean) / (double)H;
        for (int64_t j = 0; j < H; j++)
            loss += G[r * H + j] * ((xr[j] - mean) / sqrt(var + 1e-5) * w[j] + (rms ? 0 : b[j]));
    }
    return loss;
}

/* The f64 kernel's gx, gw and gb against central differences of the forward's loss. */
Test(norm_backward, f64_matches_finite_differences) {
    enum { R = 4, H = 7 };
    double x[R * H], g[R * H], w[H], b[H], gx[R * H], gw[H], gb[H];
    for (int i = 0; i < R * H; i++)
        x[i] = urand() * 3 - 1, g[i] = urand() * 2 - 1;
    for (int j = 0; j < H; j++)
        w[j] = urand() + 0.5, b[j] = urand() - 0.5;
    int64_t shape[2] = {R, H}, h = H;
    for (int rms = 0; rms < 2; rms++) {
        dt_local X = blk(x, DT_F64, 2, shape), G = blk(g, DT_F64, 2, shape),
                 W = blk(w, DT_F64, 1, &h), GX = blk(gx, DT_F64, 2, shape),
                 GW = blk(gw, DT_F64, 1, &h), GB = blk(gb, DT_F64, 1, &h);
        cr_assert_eq(dt_cpu_layer_norm_backward(rms, 1e-5, &X, &W, &G, &GX, &GW, &GB), DT_OK);
        double step = 1e-6;
        double *vars[3] = {x, w, b}, *grads[3] = {gx, gw, gb};
        int counts[3] = {R * H, H, rms ? 0 : H};
        for (int v = 0; v < 3; v++)
            for (int i = 0; i < counts[v]; i++) {
                double keep = vars[v][i];
                vars[v][i] = keep + step;
                double up = forward_loss(rms, R, H, x, w, b, g);
                vars[v][i] = keep - step;
                double dn = forward_loss(rms, R, H, x, w, b, g);
                vars[v][i] = keep;
                double fd = (up - dn) / (2 * step);
                cr_assert(fabs(grads[v][i] - fd) <= 1e-7 * (1 + fabs(fd)),
                          "rms %d: d loss / d %s[%d] = %.12g, central difference %.12g", rms,
                          v == 0   ? "x"
                          : v == 1 ? "w"
                                   : "b",
                          i, grads[v][i], fd);
            }
    }
}

/* gx, gw and gb of one call, packed, for the thread-count check. */
static void run_packed(dt_dtype t, int rms, int64_t rows, int64_t H, const void *x, const void *w,
                       const void *g, char *out) {
    size_t es = dt_dtype_size(t), n = (size_t)(rows * H);
    int64_t shape[2] = {rows, H};
    dt_local X = blk((void *)x, t, 2, shape), G = blk((void *)g, t, 2, shape),
             W = blk((void *)w, t, 1, &H), GX = blk(out, t, 2, shape),
             GW = blk(out + n * es, t, 1, &H), GB = blk(out + (n + (size_t)H) * es, t, 1, &H);
    cr_assert_eq(dt_cpu_layer_norm_backward(rms, 1e-5, &X, &W, &G, &GX, &GW, &GB), DT_OK, "%s",
                 dt_last_error());
}

/* The bits of gx, gw and gb with 1, 2, 3 and 4 pool threads: the row sums' blocks are fixed. */
Test(norm_backward, same_bits_for_1_to_4_threads) {
    const dt_dtype types[] = {DT_F32, DT_F64, DT_BF16};
    const int64_t shapes[][2] = {{300, 128}, {517, 40}, {1000, 17}};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < 3; si++)
            for (int rms = 0; rms < 2; rms++) {
                dt_dtype t = types[ti];
                int64_t rows = shapes[si][0], H = shapes[si][1];
                size_t es = dt_dtype_size(t), n = (size_t)(rows * H);
                size_t bytes = (n + 2 * (size_t)H) * es;
                char *x = malloc(n * es), *g = malloc(n * es), *w = malloc((size_t)H * es);
                char *ref = malloc(bytes), *out = malloc(bytes);
                for (size_t i = 0; i < n + (size_t)H; i++) {
                    double v = urand() * 4 - 2;
                    char *p = i < n ? x + i * es : w + (i - n) * es;
                    if (t == DT_F32) *(float *)p = (float)v;
                    if (t == DT_F64) *(double *)p = v;
                    if (t == DT_BF16) *(uint16_t *)p = dt_f32_to_bf16((float)v);
                }
                for (size_t i = 0; i < n; i++) {
                    double v = urand() - 0.5;
                    if (t == DT_F32) ((float *)g)[i] = (float)v;
                    if (t == DT_F64) ((double *)g)[i] = v;
                    if (t == DT_BF16) ((uint16_t *)g)[i] = dt_f32_to_bf16((float)v);
                }
                for (int th = 1; th <= 4; th++) {
                    cr_assert_eq(dt_pool_set_threads(th), DT_OK);
                    memset(th == 1 ? ref : out, 0xa5, bytes); /* rms leaves gb's bytes */
                    run_packed(t, rms, rows, H, x, w, g, th == 1 ? ref : out);
                    if (th > 1)
                        cr_assert(!memcmp(ref, out, bytes),
                                  "%s rms %d (%lld, %lld): %d threads give other bits than 1",
                                  dt_dtype_name(t), rms, (long long)rows, (long long)H, th);
                }
                free(x), free(g), free(w), free(ref), free(out);
            }
    cr_assert_eq(dt_pool_set_threads(1), DT_OK);
}

/* ---- through autograd, sharded ------------------------------------------------------------ */

typedef struct shard_case {
    const char *mesh;
    int rms, k, weight, bias; /* k: normalised trailing dims */
    dt_placement pl[2];       /* x's placements */
    int64_t shape[3];         /* x (B, T, C) */
} shard_case;

static void fill(double *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = t_value(seed, i);
}

static dt_status shard_body(dt_ctx *ctx, void *arg) {
    const shard_case *c = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    int64_t rows = 1, H = 1, n;
    for (int d = 0; d < 3; d++)
        *(d < 3 - c->k ? &rows : &H) *= c->shape[d];
    n = rows * H;
    double *x = malloc(8 * (size_t)n), *G = malloc(8 * (size_t)n), *w = malloc(8 * (size_t)H);
    double *b = malloc(8 * (size_t)H), *got = malloc(8 * (size_t)n);
    fill(x, (size_t)n, 11), fill(G, (size_t)n, 12), fill(w, (size_t)H, 13), fill(b, (size_t)H, 14);
    for (int64_t j = 0; j < H; j++)
        w[j] += 1.5;
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    const int64_t *wshape = c->shape + 3 - c->k;
    dt_tensor *X, *W = NULL, *B = NULL, *GT, *y, *prod, *loss;
    R_OK(dt_tensor_distribute(mesh, x, DT_F64, 3, c->shape, mnd, c->pl, DT_ALL_RANKS, &X));
    R_OK(dt_tensor_distribute(mesh, G, DT_F64, 3, c->shape, mnd, c->pl, DT_ALL_RANKS, &GT));
    if (c->weight)
        R_OK(dt_tensor_distribute(mesh, w, DT_F64, c->k, wshape, mnd, rep, DT_ALL_RANKS, &W));
    if (c->bias)
        R_OK(dt_tensor_distribute(mesh, b, DT_F64, c->k, wshape, mnd, rep, DT_ALL_RANKS, &B));
    R_OK(dt_tensor_set_requires_grad(X, 1));
    if (W) R_OK(dt_tensor_set_requires_grad(W, 1));
    if (B) R_OK(dt_tensor_set_requires_grad(B, 1));
    if (c->rms)
        R_OK(dt_rms_norm(X, W, 1e-5, &y));
    else
        R_OK(dt_layer_norm(X, W, B, 1e-5, &y));
    R_OK(dt_mul(y, GT, &prod));
    R_OK(dt_sum(prod, NULL, 0, 0, &loss));
    R_OK(dt_backward(loss));
    naive o = naive_alloc(rows, H);
    naive_backward(c->rms, 1e-5, rows, H, x, c->weight ? w : NULL, G, &o);
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(X), got, 8 * (size_t)n));
    for (int64_t i = 0; i < n; i++)
        R_CHECK(fabs(got[i] - o.gx[i]) <= 1e-12 * (1 + o.sx[i]), "%s: gx[%lld] %.15g, want %.15g",
                c->mesh, (long long)i, got[i], o.gx[i]);
    dt_tensor *wb[2] = {W, B};
    const double *want[2] = {o.gw, o.gb};
    for (int t = 0; t < 2; t++) {
        if (!wb[t]) continue;
        dt_tensor *gt = dt_tensor_grad(wb[t]);
        R_CHECK(gt != NULL, "%s: the %s got no gradient", c->mesh, t ? "bias" : "weight");
        R_OK(dt_tensor_full_tensor(gt, got, 8 * (size_t)H));
        for (int64_t j = 0; j < H; j++)
            R_CHECK(fabs(got[j] - want[t][j]) <= 1e-12 * (1 + o.sw[j]),
                    "%s: %s grad[%lld] %.15g, want %.15g", c->mesh, t ? "bias" : "weight",
                    (long long)j, got[j], want[t][j]);
    }
    /* The op itself: gw Partial(sum) wherever x's rows are sharded, R where x is. */
    dt_tensor *gx, *gw, *gb = NULL;
    if (c->rms)
        R_OK(dt_rms_norm_backward(X, W, GT, 1e-5, c->k, &gx, &gw));
    else
        R_OK(dt_layer_norm_backward(X, W, GT, 1e-5, c->k, &gx, &gw, &gb));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(gw, &info));
    for (int m = 0; m < mnd; m++) {
        int sharded = c->pl[m].kind == DT_PLACEMENT_SHARD;
        R_CHECK(sharded ? info.placements[m].kind == DT_PLACEMENT_PARTIAL &&
                              info.placements[m].op == DT_REDUCE_SUM
                        : info.placements[m].kind == DT_PLACEMENT_REPLICATE,
                "%s: gw's placement on mesh dim %d is kind %d", c->mesh, m,
                (int)info.placements[m].kind);
    }
    dt_tensor_release(gx), dt_tensor_release(gw), dt_tensor_release(gb);
    naive_free(&o);
    dt_tensor_release(loss), dt_tensor_release(prod), dt_tensor_release(y);
    dt_tensor_release(X), dt_tensor_release(GT), dt_tensor_release(W), dt_tensor_release(B);
    free(x), free(G), free(w), free(b), free(got);
    dt_mesh_release(mesh);
    return DT_OK;
}

static int mesh_ranks(const char *m) {
    return strcmp(m, "2x2") == 0 ? 4 : atoi(m);
}

/* Rows sharded on the batch or the sequence dim (uneven: 5 and 7 over 2, 3, 4 ranks), on 1-D
 * and 2-D meshes; both norms, with and without weight and bias, over 1 and 2 trailing dims. */
Test(norm_backward, sharded_rows_give_one_rank_gradients) {
    const shard_case cases[] = {
        {"2", 1, 1, 1, 0, {dt_shard(0)}, {5, 7, 16}},
        {"3", 1, 1, 1, 0, {dt_shard(1)}, {5, 7, 16}},
        {"4", 0, 1, 1, 1, {dt_shard(1)}, {5, 7, 16}},
        {"4", 0, 1, 0, 0, {dt_shard(0)}, {5, 7, 16}},
        {"3", 1, 1, 0, 0, {dt_shard(0)}, {5, 7, 16}},
        {"2x2", 0, 1, 1, 1, {dt_shard(0), dt_shard(1)}, {5, 7, 16}},
        {"2x2", 1, 1, 1, 0, {dt_replicate(), dt_shard(1)}, {5, 7, 16}},
        {"3", 0, 2, 1, 1, {dt_shard(0)}, {5, 6, 8}},
        {"2", 1, 2, 1, 0, {dt_shard(0)}, {5, 6, 8}},
        {"4", 1, 1, 1, 0, {dt_replicate()}, {3, 4, 20}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        t_run(mesh_ranks(cases[i].mesh), shard_body, (void *)&cases[i]);
}

/* grad pending (Partial(sum) over the mesh, rank r holding (r + 1) / 10 of it), x and the
 * weight replicated: gx, gw and gb stay Partial(sum), no collective, and reduce to the naive
 * loop's. */
static dt_status partial_body(dt_ctx *ctx, void *arg) {
    int rms = *(const int *)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    enum { R = 9, H = 24 };
    int64_t shape[2] = {R, H}, wshape[1] = {H};
    double x[R * H], G[R * H], part[R * H], w[H], got[R * H];
    fill(x, R * H, 21), fill(G, R * H, 22), fill(w, H, 23);
    double share = (dt_ctx_rank(ctx) + 1) / 10.0; /* 1 + 2 + 3 + 4 = 10 */
    for (int i = 0; i < R * H; i++)
        part[i] = G[i] * share;
    dt_placement r[1] = {dt_replicate()}, p[1] = {{DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_SUM, 0}};
    dt_tensor *X, *W, *GT, *gx, *gw, *gb = NULL;
    R_OK(dt_tensor_distribute(mesh, x, DT_F64, 2, shape, 1, r, DT_ALL_RANKS, &X));
    R_OK(dt_tensor_distribute(mesh, w, DT_F64, 1, wshape, 1, r, DT_ALL_RANKS, &W));
    R_OK(dt_tensor_from_local(mesh, part, DT_F64, 2, shape, 1, p, shape, 0, &GT));
    if (rms)
        R_OK(dt_rms_norm_backward(X, W, GT, 1e-5, 0, &gx, &gw));
    else
        R_OK(dt_layer_norm_backward(X, W, GT, 1e-5, 0, &gx, &gw, &gb));
    naive o = naive_alloc(R, H);
    naive_backward(rms, 1e-5, R, H, x, w, G, &o);
    dt_tensor *outs[3] = {gx, gw, gb};
    const double *want[3] = {o.gx, o.gw, o.gb}, *scale[3] = {o.sx, o.sw, o.sw};
    for (int t = 0; t < 3; t++) {
        if (!outs[t]) continue;
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(outs[t], &info));
        R_CHECK(info.placements[0].kind == DT_PLACEMENT_PARTIAL &&
                    info.placements[0].op == DT_REDUCE_SUM,
                "output %d is not Partial(sum) (no scaling or reduction on the way)", t);
        R_OK(dt_tensor_full_tensor(outs[t], got, sizeof got));
        for (size_t i = 0; i < info.numel; i++)
            R_CHECK(fabs(got[i] - want[t][i]) <= 1e-12 * (1 + scale[t][i]),
                    "rms %d: output %d [%zu] %.15g, want %.15g", rms, t, i, got[i], want[t][i]);
    }
    naive_free(&o);
    dt_tensor_release(gx), dt_tensor_release(gw), dt_tensor_release(gb);
    dt_tensor_release(X), dt_tensor_release(W), dt_tensor_release(GT);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm_backward, pending_grad_stays_pending) {
    for (int rms = 0; rms < 2; rms++)
        t_run(4, partial_body, &rms);
}

/* ---- bad input ------------------------------------------------------------------------------ */

Test(norm_backward, bad_input_is_named) {
    int64_t shape[2] = {3, 4}, h = 4, h5 = 5, other[2] = {3, 5};
    float x[12] = {0}, g[12] = {0}, gx[12], gw[5], w[5] = {0};
    int32_t xi[12] = {0};
    dt_local X = blk(x, DT_F32, 2, shape), G = blk(g, DT_F32, 2, shape),
             GX = blk(gx, DT_F32, 2, shape), GW = blk(gw, DT_F32, 1, &h);
    dt_local XI = blk(xi, DT_I32, 2, shape), G5 = blk(g, DT_F32, 2, other),
             W5 = blk(w, DT_F32, 1, &h5);
    T_ERR(dt_cpu_layer_norm_backward(0, 1e-5, &XI, NULL, &G, &GX, NULL, NULL), DT_ERR_DTYPE, "i32");
    T_ERR(dt_cpu_layer_norm_backward(0, 1e-5, &X, NULL, &G5, &GX, NULL, NULL), DT_ERR_SHAPE,
          "grad");
    T_ERR(dt_cpu_layer_norm_backward(1, 1e-5, &X, &W5, &G, &GX, &GW, NULL), DT_ERR_SHAPE, "weight");
}

static dt_status bad_ops_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    dt_placement s0[1] = {dt_shard(0)}, r[1] = {dt_replicate()};
    int64_t shape[2] = {4, 6}, wshape[1] = {5};
    double buf[24] = {0};
    dt_tensor *x, *w, *gx = NULL, *gw = NULL, *gb = NULL;
    R_OK(dt_tensor_distribute(mesh, buf, DT_F64, 2, shape, 1, s0, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, buf, DT_F64, 1, wshape, 1, r, DT_ALL_RANKS, &w));
    R_ERR(dt_rms_norm_backward(x, NULL, x, 1e-5, -1, &gx, &gw), DT_ERR_ARG, "ndims = -1");
    R_ERR(dt_rms_norm_backward(x, NULL, x, -1.0, 0, &gx, &gw), DT_ERR_ARG, "eps = -1");
    R_ERR(dt_layer_norm_backward(x, w, x, 1e-5, 0, &gx, &gw, &gb), DT_ERR_SHAPE, "weight");
    R_ERR(dt_rms_norm_backward(x, NULL, x, 1e-5, 3, &gx, &gw), DT_ERR_SHAPE, "ndims = 3");
    R_ERR(dt_rms_norm_backward(x, NULL, NULL, 1e-5, 0, &gx, &gw), DT_ERR_ARG, "grad");
    R_ERR(dt_layer_norm_backward(x, NULL, x, 1e-5, 0, &gx, &gw, NULL), DT_ERR_ARG, "gb");
    R_CHECK(!gx && !gw && !gb, "a failed call returned an output");
    dt_tensor_release(x), dt_tensor_release(w);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(norm_backward, bad_op_input_is_named) {
    t_run(2, bad_ops_body, NULL);
}
