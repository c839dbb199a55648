/* CPU layer norm and RMS norm backward over the last dim in one pass per row: gx, and the
 * weight's and bias's gradients summed over the rows. rstd is recomputed from x as the forward
 * (ops/cpu/norm.c) computes it; f32 rows take a SIMD path chosen at run time (ops/cpu/simd.h's
 * level), other dtypes a plain loop. The row sums are cut into fixed blocks of rows, so the
 * bits do not depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/cpu/norm_backward.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"

#define ID(v) (v)

typedef struct bwd_job {
    int rms;
    double eps;
    int64_t H, rows;
    dt_dtype dtype;
    const void *x, *w, *g;
    void *gx;
    double *part; /* per block of DT_NORM_BWD_BLOCK rows: H sums of g xhat, then H of g */
    int sums;     /* whether the weight's or bias's gradient is wanted */
} bwd_job;

/* Per row, with xhat = (x - mean) rstd and h = g w (g without a weight), CT the compute type:
 *   gx = rstd ((h - xhat mean(h xhat)) - mean(h)) (no mean(h) for rms),
 * and, when pw is not NULL, pw += g xhat and pb += g in double. The statistics are the
 * forward's: mean and variance in double, two passes. */
#define DEFINE_BWD(SUF, T, CT, LOAD, STORE)                                                        \
    static void bwd_rows_##SUF(const bwd_job *a, int64_t r0, int64_t r1, double *pw, double *pb) { \
        const int64_t H = a->H;                                                                    \
        const T *w = a->w;                                                                         \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *xr = (const T *)a->x + r * H, *gr = (const T *)a->g + r * H;                  \
            T *yr = (T *)a->gx + r * H;                                                            \
            double mean = 0.0, var = 0.0, s1 = 0.0, s2 = 0.0;                                      \
            if (!a->rms) {                                                                         \
                for (int64_t j = 0; j < H; j++)                                                    \
                    mean += (double)LOAD(xr[j]);                                                   \
                mean /= (double)H;                                                                 \
            }                                                                                      \
            for (int64_t j = 0; j < H; j++) {                                                      \
                double d = (double)LOAD(xr[j]) - mean;                                             \
                var += d * d;                                                                      \
            }                                                                                      \
            var /= (double)H;                                                                      \
            CT m = (CT)mean, rstd = (CT)(1.0 / sqrt(var + a->eps));                                \
            for (int64_t j = 0; j < H; j++) {                                                      \
                CT xh = (LOAD(xr[j]) - m) * rstd, h = LOAD(gr[j]);                                 \
                if (w) h *= LOAD(w[j]);                                                            \
                s1 += (double)h;                                                                   \
                s2 += (double)(h * xh);                                                            \
            }                                                                                      \
            CT c1 = a->rms ? (CT)0 : (CT)(s1 / (double)H), c2 = (CT)(s2 / (double)H);              \
            for (int64_t j = 0; j < H; j++) {                                                      \
                CT g = LOAD(gr[j]), xh = (LOAD(xr[j]) - m) * rstd, h = w ? g * LOAD(w[j]) : g;     \
                yr[j] = STORE(rstd * ((h - xh * c2) - c1));                                        \
                if (pw) pw[j] += (double)(g * xh), pb[j] += (double)g;                             \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_BWD(f32, float, float, ID, ID)
DEFINE_BWD(f64, double, double, ID, ID)
DEFINE_BWD(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_BWD(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16)

/* ---- f32 rows on vectors of L lanes ---------------------------------------------------------
 * The arithmetic of bwd_rows_f32 lane by lane; the row sums add per lane in double (the tail
 * past the last whole vector into lanes 0..), then the lanes in order: the same bits for a
 * given path, whatever the thread count. */
#define DEFINE_BWD_VEC(SUF, VF, L, ATTR)                                                           \
    static ATTR void bwd_rows_f32_##SUF(const bwd_job *a, int64_t r0, int64_t r1, double *pw,      \
                                        double *pb) {                                              \
        const int64_t H = a->H, Hv = H / L * L;                                                    \
        const float *w = a->w;                                                                     \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const float *xr = (const float *)a->x + r * H, *gr = (const float *)a->g + r * H;      \
            float *yr = (float *)a->gx + r * H;                                                    \
            double acc[L], acc2[L], mean = 0.0, var = 0.0, s1 = 0.0, s2 = 0.0;                     \
            VF v, gv, wv, xh, h;                                                                   \
            if (!a->rms) {                                                                         \
                memset(acc, 0, sizeof acc);                                                        \
                for (int64_t i = 0; i < Hv; i += L) {                                              \
                    memcpy(&v, xr + i, sizeof v);                                                  \
                    for (int l = 0; l < L; l++)                                                    \
                        acc[l] += (double)v[l];                                                    \
                }                                                                                  \
                for (int64_t i = Hv; i < H; i++)                                                   \
                    acc[i - Hv] += (double)xr[i];                                                  \
                for (int l = 0; l < L; l++)                                                        \
                    mean += acc[l];                                                                \
                mean /= (double)H;                                                                 \
            }                                                                                      \
            memset(acc, 0, sizeof acc);                                                            \
            for (int64_t i = 0; i < Hv; i += L) {                                                  \
                memcpy(&v, xr + i, sizeof v);                                                      \
                for (int l = 0; l < L; l++) {                                                      \
                    double d = (double)v[l] - mean;                                                \
                    acc[l] += d * d;                                                               \
                }                                                                                  \
            }                                                                                      \
            for (int64_t i = Hv; i < H; i++) {                                                     \
                double d = (double)xr[i] - mean;                                                   \
                acc[i - Hv] += d * d;                                                              \
            }                                                                                      \
            for (int l = 0; l < L; l++)                                                            \
                var += acc[l];                                                                     \
            var /= (double)H;                                                                      \
            float m = (float)mean, rstd = (float)(1.0 / sqrt(var + a->eps));                       \
            memset(acc, 0, sizeof acc), memset(acc2, 0, sizeof acc2);                              \
            for (int64_t i = 0; i < Hv; i += L) {                                                  \
                memcpy(&v, xr + i, sizeof v), memcpy(&gv, gr + i, sizeof gv);                      \
                xh = (v - m) * rstd, h = gv;                                                       \
                if (w) memcpy(&wv, w + i, sizeof wv), h = gv * wv;                                 \
                VF hx = h * xh;                                                                    \
                for (int l = 0; l < L; l++)                                                        \
                    acc[l] += (double)h[l], acc2[l] += (double)hx[l];                              \
            }                                                                                      \
            for (int64_t i = Hv; i < H; i++) {                                                     \
                float x1 = (xr[i] - m) * rstd, h1 = w ? gr[i] * w[i] : gr[i];                      \
                acc[i - Hv] += (double)h1, acc2[i - Hv] += (double)(h1 * x1);                      \
            }                                                                                      \
            for (int l = 0; l < L; l++)                                                            \
                s1 += acc[l], s2 += acc2[l];                                                       \
            float c1 = a->rms ? 0.0f : (float)(s1 / (double)H), c2 = (float)(s2 / (double)H);      \
            for (int64_t i = 0; i < Hv; i += L) {                                                  \
                memcpy(&v, xr + i, sizeof v), memcpy(&gv, gr + i, sizeof gv);                      \
                xh = (v - m) * rstd, h = gv;                                                       \
                if (w) memcpy(&wv, w + i, sizeof wv), h = gv * wv;                                 \
                VF y = rstd * ((h - xh * c2) - c1);                                                \
                memcpy(yr + i, &y, sizeof y);                                                      \
                if (pw) {                                                                          \
                    VF gx = gv * xh;                                                               \
                    for (int l = 0; l < L; l++)                                                    \
                        pw[i + l] += (double)gx[l], pb[i + l] += (double)gv[l];                    \
                }                                                                                  \
            }                                                                                      \
            for (int64_t i = Hv; i < H; i++) {                                                     \
                float g = gr[i], x1 = (xr[i] - m) * rstd, h1 = w ? g * w[i] : g;                   \
                yr[i] = rstd * ((h1 - x1 * c2) - c1);                                              \
                if (pw) pw[i] += (double)(g * x1), pb[i] += (double)g;                             \
            }                                                                                      \
        }                                                                                          \
    }

typedef float v4f __attribute__((vector_size(16)));
DEFINE_BWD_VEC(sse, v4f, 4, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_WIDE 1
typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
DEFINE_BWD_VEC(avx2, v8f, 8, __attribute__((target("avx2"))))
DEFINE_BWD_VEC(avx512, v16f, 16, __attribute__((target("avx512f"))))
#else
#define HAVE_WIDE 0
#endif

typedef void (*bwd_rows_fn)(const bwd_job *, int64_t, int64_t, double *, double *);

static bwd_rows_fn rows_fn(dt_dtype t) {
    switch (t) {
    case DT_F64:
        return bwd_rows_f64;
    case DT_BF16:
        return bwd_rows_bf16;
    case DT_F16:
        return bwd_rows_f16;
    default:
        break;
    }
    switch (dt_simd_level()) {
#if HAVE_WIDE
    case DT_SIMD_AVX512:
        return bwd_rows_f32_avx512;
    case DT_SIMD_AVX2:
        return bwd_rows_f32_avx2;
#endif
    case DT_SIMD_SCALAR:
        return bwd_rows_f32;
    default:
        return bwd_rows_f32_sse;
    }
}

/* Blocks [b, e) of DT_NORM_BWD_BLOCK rows, each summing into its own part. */
typedef struct {
    const bwd_job *job;
    bwd_rows_fn fn;
} blocks_arg;

static void bwd_blocks(void *arg, int64_t b, int64_t e) {
    const blocks_arg *ba = arg;
    const bwd_job *a = ba->job;
    for (int64_t k = b; k < e; k++) {
        int64_t r0 = k * DT_NORM_BWD_BLOCK, r1 = r0 + DT_NORM_BWD_BLOCK;
        double *pw = a->sums ? a->part + k * 2 * a->H : NULL;
        if (pw) memset(pw, 0, sizeof(double) * 2 * (size_t)a->H);
        ba->fn(a, r0, r1 < a->rows ? r1 : a->rows, pw, pw ? pw + a->H : NULL);
    }
}

static void store_sum(dt_dtype t, void *dst, int64_t j, double s) {
    switch (t) {
    case DT_F32:
        ((float *)dst)[j] = (float)s;
        break;
    case DT_F64:
        ((double *)dst)[j] = s;
        break;
    case DT_BF16:
        ((uint16_t *)dst)[j] = dt_f32_to_bf16((float)s);
        break;
    default:
        ((uint16_t *)dst)[j] = dt_f32_to_f16((float)s);
        break;
    }
}

dt_status dt_cpu_layer_norm_backward(int rms, double eps, const dt_local *x, const dt_local *weight,
                                     const dt_local *grad, dt_local *gx, dt_local *gw,
                                     dt_local *gb) {
    const char *fn = rms ? "dt_cpu_layer_norm_backward (rms)" : "dt_cpu_layer_norm_backward";
    dt_dtype dt = x->dtype;
    int64_t H = 0, rows = 0;
    DT_CHECK(dt_norm_bwd_check(fn, x, weight, grad, gx, gw, gb, &H, &rows));
    if (rms) gb = NULL;
    int64_t nblk = H ? (rows + DT_NORM_BWD_BLOCK - 1) / DT_NORM_BWD_BLOCK : 0;
    bwd_job j = {.rms = rms,
                 .eps = eps,
                 .H = H,
                 .rows = rows,
                 .dtype = dt,
                 .x = x->data,
                 .w = weight ? weight->data : NULL,
                 .g = grad->data,
                 .gx = gx->data,
                 .sums = (gw || gb) && nblk > 0};
    if (j.sums && !(j.part = dt_host_alloc(sizeof(double) * 2 * (size_t)H * (size_t)nblk)))
        return dt_error(DT_ERR_NOMEM, "%s: out of memory for %lld partial sums", fn,
                        (long long)(2 * H * nblk));
    blocks_arg ba = {.job = &j, .fn = rows_fn(dt)};
    /* A chunk of at least ~16k elements: smaller pieces cost the pool more than they save. */
    int64_t per = DT_NORM_BWD_BLOCK * H, grain = per >= 16384 ? 1 : 16384 / (per ? per : 1);
    if (nblk) dt_parallel_for(nblk, grain, bwd_blocks, &ba);
    /* The blocks' sums added in block order; an empty x (a rank's empty shard) gives zeros. */
    for (int64_t c = 0; c < H; c++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t k = 0; k < nblk && j.sums; k++)
            sw += j.part[k * 2 * H + c], sb += j.part[k * 2 * H + H + c];
        if (gw) store_sum(dt, gw->data, c, sw);
        if (gb) store_sum(dt, gb->data, c, sb);
    }
    dt_host_free(j.part);
    return DT_OK;
}
