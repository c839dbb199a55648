/* The norms' f32 forward (dt_cpu_layer_norm, rms and not): on every SIMD path this CPU runs,
 * within a few f32 roundings of a naive two-pass f64 loop written here (odd widths, tails past
 * the 16 summing lanes, with and without weight and bias), the same bits on every path and with
 * 1 to 3 pool threads. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"

static uint64_t rng;
static double urand(void) { /* [0, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static dt_local blk(void *data, int nd, const int64_t *shape) {
    dt_local b = {.data = data, .dtype = DT_F32, .ndim = nd};
    memcpy(b.shape, shape, sizeof(int64_t) * (size_t)nd);
    return b;
}

/* y of rows x H through dt_cpu_layer_norm on the path capped at p */
static void run(dt_simd p, int rms, int64_t rows, int64_t H, float *x, float *w, float *b,
                float *y) {
    int64_t shape[2] = {rows, H};
    dt_local X = blk(x, 2, shape), Y = blk(y, 2, shape), W = blk(w, 1, &H), B = blk(b, 1, &H);
    dt_simd_set_cap(p);
    cr_assert_eq(dt_cpu_layer_norm(rms, 1e-5, &X, w ? &W : NULL, b ? &B : NULL, &Y), DT_OK, "%s",
                 dt_last_error());
    dt_simd_set_cap(DT_SIMD_COUNT);
}

Test(norm_forward, f32_every_path_matches_naive_f64_with_the_same_bits) {
    rng = (uint64_t)time(NULL) | 1;
    cr_log_info("seed %llu", (unsigned long long)rng);
    static const int64_t HS[] = {1, 5, 15, 16, 17, 40, 128, 133, 300};
    static const int64_t ROWS[] = {1, 3, 33};
    int best = (int)dt_simd_cpu_best();
    for (size_t hi = 0; hi < sizeof HS / sizeof HS[0]; hi++)
        for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++) {
            int64_t H = HS[hi], rows = ROWS[ri], n = rows * H;
            float *x = malloc(4 * (size_t)n), *w = malloc(4 * (size_t)H),
                  *b = malloc(4 * (size_t)H);
            float *y = malloc(4 * (size_t)n), *y0 = malloc(4 * (size_t)n);
            double *want = malloc(8 * (size_t)n), *tol = malloc(8 * (size_t)n);
            cr_assert(x && w && b && y && y0 && want && tol);
            for (int64_t i = 0; i < n; i++) /* an offset mean, so layer norm's centring counts */
                x[i] = (float)(urand() * 4 - 1.5);
            for (int64_t j = 0; j < H; j++)
                w[j] = (float)(urand() + 0.5), b[j] = (float)(urand() * 2 - 1);
            for (int rms = 0; rms < 2; rms++)
                for (int wb = 0; wb < 4; wb++) { /* bit 0: weight, bit 1: bias */
                    float *pw = wb & 1 ? w : NULL, *pb = wb & 2 ? b : NULL;
                    for (int64_t r = 0; r < rows; r++) {
                        const float *xr = x + r * H;
                        double mean = 0, var = 0;
                        for (int64_t j = 0; j < H && !rms; j++)
                            mean += xr[j];
                        mean /= (double)H;
                        for (int64_t j = 0; j < H; j++)
                            var += (xr[j] - mean) * (xr[j] - mean);
                        double rstd = 1 / sqrt(var / (double)H + 1e-5);
                        for (int64_t j = 0; j < H; j++) {
                            double wj = pw ? pw[j] : 1, bj = pb && !rms ? pb[j] : 0;
                            double xh = (xr[j] - mean) * rstd;
                            want[r * H + j] = xh * wj + bj;
                            /* f32 steps: mean rounded (its error times rstd w), then four
                             * roundings of the terms' sizes */
                            tol[r * H + j] = 1e-6 * (1 + fabs(mean) * rstd * fabs(wj)) +
                                             5e-7 * (fabs(xh * wj) + fabs(bj));
                        }
                    }
                    for (int p = 0; p <= best; p++) {
                        float *out = p == 0 ? y0 : y;
                        run((dt_simd)p, rms, rows, H, x, pw, pb, out);
                        for (int64_t i = 0; i < n; i++) {
                            cr_assert(fabs(out[i] - want[i]) <= tol[i],
                                      "%s rms %d wb %d (%lld, %lld) y[%lld] %.9g, f64 %.9g",
                                      dt_simd_name((dt_simd)p), rms, wb, (long long)rows,
                                      (long long)H, (long long)i, out[i], want[i]);
                            cr_assert(memcmp(&out[i], &y0[i], sizeof(float)) == 0,
                                      "%s rms %d wb %d (%lld, %lld) y[%lld] %a, scalar path %a",
                                      dt_simd_name((dt_simd)p), rms, wb, (long long)rows,
                                      (long long)H, (long long)i, (double)out[i], (double)y0[i]);
                        }
                    }
                }
            free(x), free(w), free(b), free(y), free(y0), free(want), free(tol);
        }
}

/* Rows cut into several pool chunks (H 300: 27 rows a chunk): 1 to 3 threads, the same bits. */
Test(norm_forward, f32_same_bits_with_any_thread_count) {
    rng = 77;
    const int64_t rows = 101, H = 300, n = rows * H;
    float *x = malloc(4 * (size_t)n), *w = malloc(4 * (size_t)H), *y[3];
    cr_assert(x && w);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(urand() * 6 - 2);
    for (int64_t j = 0; j < H; j++)
        w[j] = (float)(urand() + 0.5);
    for (int rms = 0; rms < 2; rms++)
        for (int t = 1; t <= 3; t++) {
            cr_assert_eq(dt_pool_set_threads(t), DT_OK);
            y[t - 1] = malloc(4 * (size_t)n);
            cr_assert(y[t - 1]);
            run(DT_SIMD_COUNT, rms, rows, H, x, w, NULL, y[t - 1]);
            if (t > 1)
                cr_assert(memcmp(y[0], y[t - 1], 4 * (size_t)n) == 0,
                          "rms %d: %d threads differ from 1", rms, t);
            if (t == 3)
                for (int k = 0; k < 3; k++)
                    free(y[k]);
        }
    free(x), free(w);
}
