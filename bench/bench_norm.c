/* The norms' backward on one rank: the fused layer_norm_backward / rms_norm_backward next to the
 * sequence of existing ops the backward rule ran before (mean, sub, mul, rsqrt, ...: about 12
 * ops, each a full temporary), in the same rounds (medians of interleaved repeats, with min and
 * max), at make train's shape (B T = 512 rows of C = 128) and a larger one. */
#include <math.h>

#include "bench_util.h"
#include "core/pool.h"

typedef struct inputs {
    dt_tensor *x, *w, *g;
    int rms;
} inputs;

static void drop(dt_tensor **t, int n) {
    for (int i = 0; i < n; i++)
        dt_tensor_release(t[i]), t[i] = NULL;
}

#define DO(x)                                                                                      \
    do {                                                                                           \
        if (st == DT_OK) st = (x);                                                                 \
    } while (0)

/* The unfused rule: xhat = xc rstd, h = g w, gx = rstd (h - mean(h) - xhat mean(h xhat)) (no
 * mean(h) for rms), gw = sum over the rows of g xhat. */
static dt_status unfused(inputs *in) {
    enum { MU, XC, SQ, VAR, VE, RSTD, XHAT, H, HX, M2, XM2, A, M1, A2, GX, GWR, GW, N };
    dt_tensor *t[N] = {0};
    int dim = 1, rows = 0;
    dt_status st = DT_OK;
    if (!in->rms) {
        DO(dt_mean(in->x, &dim, 1, 1, &t[MU]));
        DO(dt_sub(in->x, t[MU], &t[XC]));
    }
    dt_tensor *xc = in->rms ? in->x : t[XC];
    DO(dt_mul(xc, xc, &t[SQ]));
    DO(dt_mean(t[SQ], &dim, 1, 1, &t[VAR]));
    DO(dt_add_scalar(t[VAR], 1e-5, &t[VE]));
    DO(dt_rsqrt(t[VE], &t[RSTD]));
    DO(dt_mul(xc, t[RSTD], &t[XHAT]));
    DO(dt_mul(in->g, in->w, &t[H]));
    DO(dt_mul(t[H], t[XHAT], &t[HX]));
    DO(dt_mean(t[HX], &dim, 1, 1, &t[M2]));
    DO(dt_mul(t[XHAT], t[M2], &t[XM2]));
    DO(dt_sub(t[H], t[XM2], &t[A]));
    if (!in->rms) {
        DO(dt_mean(t[H], &dim, 1, 1, &t[M1]));
        DO(dt_sub(t[A], t[M1], &t[A2]));
        DO(dt_mul(t[A2], t[RSTD], &t[GX]));
    } else {
        DO(dt_mul(t[A], t[RSTD], &t[GX]));
    }
    DO(dt_mul(in->g, t[XHAT], &t[GWR]));
    DO(dt_sum(t[GWR], &rows, 1, 0, &t[GW]));
    drop(t, N);
    return st;
}

static dt_status fused(inputs *in) {
    dt_tensor *t[3] = {0};
    dt_status st = in->rms
                       ? dt_rms_norm_backward(in->x, in->w, in->g, 1e-5, 1, &t[0], &t[1])
                       : dt_layer_norm_backward(in->x, in->w, in->g, 1e-5, 1, &t[0], &t[1], &t[2]);
    drop(t, 3);
    return st;
}

static double timed(dt_status (*f)(inputs *), inputs *in, int reps, dt_status *st) {
    double t0 = bench_now();
    for (int i = 0; i < reps && *st == DT_OK; i++)
        *st = f(in);
    return (bench_now() - t0) / reps;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    dt_status st = dt_mesh_create_str(ctx, "1", &mesh);
    if (st != DT_OK) return st;
    dt_placement r = dt_replicate();
    dt_generator gen0 = dt_generator_make(11), *gen = &gen0;
    static const int64_t shapes[][2] = {{512, 128}, {4096, 1024}};
    printf("# one rank, f32, %d pool threads; us per backward call, medians of %d interleaved "
           "repeats [min, max]\n",
           dt_parallel_threads(), BENCH_REPS);
    printf("%-28s %28s %28s %8s\n", "backward", "unfused (existing ops)", "fused", "ratio");
    for (int si = 0; si < 2 && st == DT_OK; si++)
        for (int rms = 1; rms >= 0 && st == DT_OK; rms--) {
            inputs in = {.rms = rms};
            int64_t ws[1] = {shapes[si][1]};
            DO(dt_tensor_randn(mesh, DT_F32, 2, shapes[si], 1, &r, gen, &in.x));
            DO(dt_tensor_randn(mesh, DT_F32, 2, shapes[si], 1, &r, gen, &in.g));
            DO(dt_tensor_randn(mesh, DT_F32, 1, ws, 1, &r, gen, &in.w));
            int reps = si == 0 ? 50 : 4;
            double a[BENCH_REPS], b[BENCH_REPS];
            for (int rep = -1; rep < BENCH_REPS && st == DT_OK; rep++) { /* -1 warms up */
                double tu = timed(unfused, &in, reps, &st), tf = timed(fused, &in, reps, &st);
                if (rep >= 0) a[rep] = tu * 1e6, b[rep] = tf * 1e6;
            }
            if (st == DT_OK) {
                bench_stat su = bench_stat_of(a, BENCH_REPS), sf = bench_stat_of(b, BENCH_REPS);
                char name[64];
                snprintf(name, sizeof name, "%s (%lld, %lld)", rms ? "rms_norm" : "layer_norm",
                         (long long)shapes[si][0], (long long)shapes[si][1]);
                printf("%-28s %9.1f [%7.1f, %7.1f] %9.1f [%7.1f, %7.1f] %7.2fx\n", name, su.med,
                       su.min, su.max, sf.med, sf.min, sf.max, su.med / sf.med);
            }
            dt_tensor *all[] = {in.x, in.g, in.w};
            drop(all, 3);
        }
    dt_mesh_release(mesh);
    return st;
}

int main(void) {
    dt_status st = dt_local_run(1, body, NULL, NULL);
    if (st != DT_OK) {
        fprintf(stderr, "bench_norm: %s: %s\n", dt_status_str(st), dt_last_error());
        return 1;
    }
    return 0;
}
