/* The fused ops on one rank next to the sequences of existing ops they replace, in the same
 * rounds (medians of interleaved repeats, with min and max): silu_mul and its backward, and
 * log_softmax_pick and its backward, and rms_norm_residual, at the shapes of make train's model
 * scaled up. Each row also runs the fused kernel on each SIMD path this CPU has (DT_SIMD caps the
 * default). */
#include <math.h>

#include "bench_util.h"
#include "ops/cpu/simd.h"

#define ROWS  4096 /* tokens */
#define HID   1024 /* MLP hidden width */
#define VOCAB 256

typedef struct inputs {
    dt_tensor *g, *u, *dy, *x, *t, *stats, *gr, *w;
} inputs;

typedef dt_status (*run_fn)(inputs *in);

static dt_status keep(dt_status st, dt_tensor **t, int n) {
    for (int i = 0; i < n; i++)
        dt_tensor_release(t[i]);
    return st;
}

static dt_status swiglu_fused(inputs *in) {
    dt_tensor *o = NULL;
    return keep(dt_silu_mul(in->g, in->u, &o), &o, 1);
}

static dt_status swiglu_unfused(inputs *in) {
    dt_tensor *t[2] = {0};
    dt_status st = dt_silu(in->g, &t[0]);
    if (st == DT_OK) st = dt_mul(t[0], in->u, &t[1]);
    return keep(st, t, 2);
}

static dt_status swiglu_bwd_fused(inputs *in) {
    dt_tensor *t[2] = {0};
    return keep(dt_silu_mul_backward(in->g, in->u, in->dy, &t[0], &t[1]), t, 2);
}

/* The rules' sequence: du = dy silu(g); dg = (dy u) (s (1 + g (1 - s))), s = sigmoid(g). */
static dt_status swiglu_bwd_unfused(inputs *in) {
    dt_tensor *t[9] = {0};
    dt_status st = dt_silu(in->g, &t[0]);
    if (st == DT_OK) st = dt_mul(in->dy, t[0], &t[1]);
    if (st == DT_OK) st = dt_sigmoid(in->g, &t[2]);
    if (st == DT_OK) st = dt_mul_scalar(t[2], -1, &t[3]);
    if (st == DT_OK) st = dt_add_scalar(t[3], 1, &t[4]);
    if (st == DT_OK) st = dt_mul(in->g, t[4], &t[5]);
    if (st == DT_OK) st = dt_add_scalar(t[5], 1, &t[6]);
    if (st == DT_OK) st = dt_mul(t[2], t[6], &t[7]);
    if (st == DT_OK) st = dt_mul(in->dy, in->u, &t[8]);
    dt_tensor *dg = NULL;
    if (st == DT_OK) st = dt_mul(t[8], t[7], &dg);
    dt_tensor_release(dg);
    return keep(st, t, 9);
}

static dt_status xent_fused(inputs *in) {
    dt_tensor *t[2] = {0};
    return keep(dt_log_softmax_pick(in->x, in->t, &t[0], &t[1]), t, 2);
}

/* The unfused forward: a logits-sized log_softmax (kept for its backward), then pick. */
static dt_status xent_unfused(inputs *in) {
    dt_tensor *t[2] = {0};
    dt_status st = dt_log_softmax(in->x, 1, &t[0]);
    if (st == DT_OK) st = dt_pick(t[0], in->t, &t[1]);
    return keep(st, t, 2);
}

static dt_status xent_bwd_fused(inputs *in) {
    dt_tensor *o = NULL;
    return keep(dt_log_softmax_pick_backward(in->x, in->t, in->stats, in->gr, &o), &o, 1);
}

/* A lower bound of the unfused backward: log_softmax's rule (softmax, times the row's
 * gradient, subtracted from the scattered one-hot gradient), without pick's scatter. */
static dt_status xent_bwd_unfused(inputs *in) {
    dt_tensor *t[3] = {0}, *g2 = NULL;
    int64_t col[2] = {ROWS, 1};
    dt_status st = dt_view(in->gr, 2, col, &g2);
    if (st == DT_OK) st = dt_softmax(in->x, 1, &t[0]);
    if (st == DT_OK) st = dt_mul(t[0], g2, &t[1]);
    if (st == DT_OK) st = dt_sub(in->x, t[1], &t[2]);
    dt_tensor_release(g2);
    return keep(st, t, 3);
}

/* A block's residual add and ffn_norm: (4096, 1024) rows. */
static dt_status rms_fused(inputs *in) {
    dt_tensor *t[2] = {0};
    return keep(dt_rms_norm_residual(in->g, in->u, in->w, 1e-5, &t[0], &t[1]), t, 2);
}

static dt_status rms_unfused(inputs *in) {
    dt_tensor *t[2] = {0};
    dt_status st = dt_add(in->g, in->u, &t[0]);
    if (st == DT_OK) st = dt_rms_norm(t[0], in->w, 1e-5, &t[1]);
    return keep(st, t, 2);
}

typedef struct row {
    const char *name;
    run_fn fused, unfused;
} row;

static const row rows[] = {
    {"swiglu forward (4096x1024 f32)", swiglu_fused, swiglu_unfused},
    {"swiglu backward", swiglu_bwd_fused, swiglu_bwd_unfused},
    {"cross_entropy forward (4096x256)", xent_fused, xent_unfused},
    {"cross_entropy backward", xent_bwd_fused, xent_bwd_unfused},
    {"residual add + rms_norm (4096x1024)", rms_fused, rms_unfused},
};
#define NROWS (sizeof rows / sizeof rows[0])

static double timed(run_fn f, inputs *in, dt_status *st) {
    double t0 = bench_now();
    dt_status s = f(in);
    if (s != DT_OK) *st = s;
    return bench_now() - t0;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    dt_status mst = dt_mesh_create_str(ctx, "1", &mesh);
    if (mst != DT_OK) return mst;
    dt_placement r = dt_replicate();
    dt_generator gen0 = dt_generator_make(7), *gen = &gen0;
    inputs in = {0};
    int64_t hs[2] = {ROWS, HID}, xs[2] = {ROWS, VOCAB}, ts[1] = {ROWS};
    dt_status st = dt_tensor_randn(mesh, DT_F32, 2, hs, 1, &r, gen, &in.g);
    if (st == DT_OK) st = dt_tensor_randn(mesh, DT_F32, 2, hs, 1, &r, gen, &in.u);
    if (st == DT_OK) st = dt_tensor_randn(mesh, DT_F32, 2, hs, 1, &r, gen, &in.dy);
    if (st == DT_OK) st = dt_tensor_randn(mesh, DT_F32, 2, xs, 1, &r, gen, &in.x);
    if (st == DT_OK) st = dt_tensor_randn(mesh, DT_F32, 1, ts, 1, &r, gen, &in.gr);
    int64_t ws[1] = {HID};
    if (st == DT_OK) st = dt_tensor_randn(mesh, DT_F32, 1, ws, 1, &r, gen, &in.w);
    dt_tensor *lp = NULL;
    if (st == DT_OK) { /* spread targets */
        int64_t *host = malloc(sizeof(int64_t) * ROWS);
        for (int i = 0; i < ROWS; i++)
            host[i] = (i * 37) % VOCAB;
        st = dt_tensor_from_local(mesh, host, DT_I64, 1, ts, 1, &r, ts, 0, &in.t);
        free(host);
    }
    if (st == DT_OK) st = dt_log_softmax_pick(in.x, in.t, &lp, &in.stats);
    dt_tensor_release(lp);
    dt_simd best = dt_simd_cpu_best();
    printf("# one rank, f32; fused kernels on SIMD path %s (CPU best %s); medians of %d "
           "interleaved repeats [min, max], ms\n",
           dt_simd_name(dt_simd_level()), dt_simd_name(best), BENCH_REPS);
    printf("%-38s %24s %24s %24s\n", "op", "unfused (existing ops)", "fused", "fused, scalar path");
    for (size_t k = 0; st == DT_OK && k < NROWS; k++) {
        double a[BENCH_REPS], b[BENCH_REPS], c[BENCH_REPS];
        for (int rep = -1; rep < BENCH_REPS && st == DT_OK; rep++) { /* rep -1 warms up */
            double tu = timed(rows[k].unfused, &in, &st), tf = timed(rows[k].fused, &in, &st);
            dt_simd_set_cap(DT_SIMD_SCALAR);
            double ts1 = timed(rows[k].fused, &in, &st);
            dt_simd_set_cap(DT_SIMD_COUNT);
            if (rep >= 0) a[rep] = tu * 1e3, b[rep] = tf * 1e3, c[rep] = ts1 * 1e3;
        }
        bench_stat su = bench_stat_of(a, BENCH_REPS), sf = bench_stat_of(b, BENCH_REPS),
                   sc = bench_stat_of(c, BENCH_REPS);
        printf("%-38s %7.3f [%6.3f, %6.3f] %7.3f [%6.3f, %6.3f] %7.3f [%6.3f, %6.3f]\n",
               rows[k].name, su.med, su.min, su.max, sf.med, sf.min, sf.max, sc.med, sc.min,
               sc.max);
    }
    dt_tensor *all[] = {in.g, in.u, in.dy, in.x, in.t, in.stats, in.gr, in.w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return st;
}

int main(void) {
    dt_status st = dt_local_run(1, body, NULL, NULL);
    if (st != DT_OK) {
        fprintf(stderr, "bench_fused: %s: %s\n", dt_status_str(st), dt_last_error());
        return 1;
    }
    return 0;
}
