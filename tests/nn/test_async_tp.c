/* Async tensor parallelism's collective matmuls (dtensor/async_tp.h) on real local ranks:
 * dt_all_gather_linear (one weight and two sharing the gather) and dt_linear_reduce_scatter,
 * in both reduce modes, forward and backward, for tp = 2, 3, 4 with sequence lengths tp does
 * not divide (one where a rank holds no rows), the batch sharded over dp in one case, f64 and
 * f32. Each result is checked against a naive f64 loop on one rank and against the
 * synchronous form (redistribute + dt_linear) run beside it. The ordered mode sums as the
 * local runtime's reduce_scatter does: where the GEMMs cannot round differently (K == N == tp)
 * linear_reduce_scatter's output must equal the synchronous form's bitwise. The point-to-point
 * calls and bytes of each pass are derived here from the chunk sizes: tp - 1 sends and receives per
 * collective matmul, no all_gather or reduce_scatter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"

typedef struct acase {
    const char *mesh; /* tp is the last dim; a first dim (dp) shards the batch */
    int64_t B, T, K, N;
    int f32;
    int exact; /* K == N == tp: every rank's partial product is one rounded multiply, the same
                  whatever GEMM kernel runs, so only the order of the tp-way sums can differ */
} acase;

static const acase cases[] = {
    {"tp=2", 2, 7, 5, 6, 0},      {"tp=3", 2, 10, 6, 7, 0},    {"tp=4", 1, 13, 9, 7, 0},
    {"tp=4", 2, 3, 4, 5, 0}, /* a rank with no rows */
    {"dp=2,tp=2", 4, 9, 6, 5, 0}, {"tp=3", 2, 11, 8, 9, 1},    {"tp=4", 2, 13, 16, 12, 1},
    {"tp=2", 3, 9, 12, 10, 1},    {"tp=3", 2, 10, 3, 3, 0, 1}, {"tp=4", 2, 13, 4, 4, 1, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef enum which { AG1, AG2, RS } which;
static const char *const which_name[] = {"all_gather_linear", "all_gather_linear x2",
                                         "linear_reduce_scatter"};

/* torch.chunk's rows of member o of n over T */
static int64_t rows_of(int64_t T, int n, int o) {
    int64_t c = (T + n - 1) / n, lo = c * o < T ? c * o : T, hi = c * (o + 1) < T ? c * (o + 1) : T;
    return hi - lo;
}

/* The naive f64 reference: y = x w^T, dx = g w, dw = g^T x (x (R, K), w (N, K), g (R, N)). */
static void ref_forward(const double *x, const double *w, int64_t R, int64_t K, int64_t N,
                        double *y) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += x[r * K + k] * w[n * K + k];
            y[r * N + n] = s;
        }
}

static void ref_backward(const double *x, const double *w, const double *g, int64_t R, int64_t K,
                         int64_t N, double *dx, double *dw) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++)
                s += g[r * N + n] * w[n * K + k];
            dx[r * K + k] += s;
        }
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t r = 0; r < R; r++)
                s += g[r * N + n] * x[r * K + k];
            dw[n * K + k] = s;
        }
}

static dt_status make(dt_mesh *m, const double *h, size_t n, dt_dtype dt, int ndim,
                      const int64_t *shape, const dt_placement *pl, dt_tensor **out) {
    float *f = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)h[i];
    dt_status st = dt_tensor_distribute(m, dt == DT_F32 ? (const void *)f : (const void *)h, dt,
                                        ndim, shape, dt_mesh_ndim(m), pl, DT_ALL_RANKS, out);
    free(f);
    return st;
}

static dt_status full_f64(dt_tensor *t, double *out, size_t n) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    if (info.dtype == DT_F64) return dt_tensor_full_tensor(t, out, n * 8);
    float *f = malloc(n * sizeof(float) + 4);
    dt_status st = dt_tensor_full_tensor(t, f, n * sizeof(float));
    for (size_t i = 0; st == DT_OK && i < n; i++)
        out[i] = f[i];
    free(f);
    return st;
}

static dt_status near(const char *what, int k, const char *op, const double *got,
                      const double *want, size_t n, double tol) {
    for (size_t i = 0; i < n; i++)
        R_CHECK(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                "case %d, %s: %s[%zu] = %.17g, want %.17g", k, op, what, i, got[i], want[i]);
    return DT_OK;
}

static int bitwise(const double *a, const double *b, size_t n) {
    return memcmp(a, b, n * sizeof(double)) == 0;
}

/* sum(y * g) */
static dt_status dot_loss(dt_tensor *y, dt_tensor *g, dt_tensor **out) {
    dt_tensor *p;
    R_OK(dt_mul(y, g, &p));
    dt_status st = dt_sum(p, NULL, 0, 0, out);
    dt_tensor_release(p);
    return st;
}

typedef struct arg {
    int k;
} arg;

/* One op in one mode: async and synchronous side by side. */
static dt_status run_one(dt_ctx *ctx, dt_mesh *mesh, int k, which op, dt_async_tp_mode mode,
                         const double *hx, const double *const *hw, const double *const *hg) {
    const acase *c = &cases[k];
    int mnd = dt_mesh_ndim(mesh), tpd = mnd - 1, n = dt_mesh_dim_size(mesh, tpd);
    int me = dt_mesh_coord(mesh, tpd), nw = op == AG2 ? 2 : 1;
    dt_dtype dt = c->f32 ? DT_F32 : DT_F64;
    size_t es = c->f32 ? 4 : 8;
    int64_t B = c->B, T = c->T, K = c->K, N = c->N, Bl = mnd == 2 ? B / 2 : B;
    int64_t sx[3] = {B, T, K}, sw[2] = {N, K}, sy[3] = {B, T, N};
    size_t nx = (size_t)(B * T * K), nwt = (size_t)(N * K), ny = (size_t)(B * T * N);
    dt_placement px[2], pw[2], py[2];
    px[0] = pw[0] = py[0] = mnd == 2 ? dt_shard(0) : dt_replicate();
    pw[0] = mnd == 2 ? dt_replicate() : pw[0];
    px[tpd] = dt_shard(op == RS ? 2 : 1), pw[tpd] = dt_shard(op == RS ? 1 : 0);
    py[tpd] = dt_shard(op == RS ? 1 : 2);
    double tol = c->f32 ? 2e-5 : 1e-12;
    double *want = malloc(ny * 8), *got = malloc((ny > nx ? ny : nx) * 8);
    double *sync = malloc((ny > nx ? ny : nx) * 8), *rdx = calloc(nx, 8), *rdw = malloc(nwt * 8);
    /* the async form (a) and the synchronous one (s), each on its own leaves */
    dt_tensor *x[2], *w[2][2], *g[2], *y[2][2] = {{0}}, *loss[2] = {0};
    for (int f = 0; f < 2; f++) {
        R_OK(make(mesh, hx, nx, dt, 3, sx, px, &x[f]));
        R_OK(dt_tensor_set_requires_grad(x[f], 1));
        for (int i = 0; i < nw; i++) {
            R_OK(make(mesh, hw[i], nwt, dt, 2, sw, pw, &w[f][i]));
            R_OK(dt_tensor_set_requires_grad(w[f][i], 1));
        }
    }
    for (int i = 0; i < nw; i++)
        R_OK(make(mesh, hg[i], ny, dt, 3, sy, py, &g[i]));
    /* async forward, its transfers counted */
    R_OK(dt_comm_stats_reset(ctx));
    if (op == RS)
        R_OK(dt_linear_reduce_scatter(x[0], w[0][0], tpd, mode, &y[0][0]));
    else
        R_OK(dt_all_gather_linear(x[0], nw, w[0], tpd, mode, y[0]));
    dt_comm_stats st;
    R_OK(dt_comm_stats_get(ctx, &st));
    uint64_t bytes = 0; /* what this member sends, step by step */
    for (int s = 0; s < n - 1; s++) {
        int o = op != RS                   ? (me - s + n) % n
                : mode == DT_ASYNC_TP_RING ? (me - s - 1 + 2 * n) % n
                                           : (me + s + 1) % n;
        bytes += (uint64_t)(Bl * rows_of(T, n, o) * (op == RS ? N : K)) * es;
    }
    R_CHECK(st.calls[DT_COLL_SEND] == (uint64_t)(n - 1) &&
                st.calls[DT_COLL_RECV] == (uint64_t)(n - 1) && st.calls[DT_COLL_ALL_GATHER] == 0 &&
                st.calls[DT_COLL_REDUCE_SCATTER] == 0 && st.calls[DT_COLL_ALL_REDUCE] == 0,
            "case %d, %s: forward made %llu sends, %llu receives, %llu all_gathers, %llu "
            "reduce_scatters; want %d, %d, 0, 0",
            k, which_name[op], (unsigned long long)st.calls[DT_COLL_SEND],
            (unsigned long long)st.calls[DT_COLL_RECV],
            (unsigned long long)st.calls[DT_COLL_ALL_GATHER],
            (unsigned long long)st.calls[DT_COLL_REDUCE_SCATTER], n - 1, n - 1);
    R_CHECK(st.bytes_in[DT_COLL_SEND] == bytes, "case %d, %s: forward sent %llu bytes, want %llu",
            k, which_name[op], (unsigned long long)st.bytes_in[DT_COLL_SEND],
            (unsigned long long)bytes);
    /* the synchronous form */
    dt_placement rep[2] = {px[0], dt_replicate()};
    if (op == RS) {
        dt_tensor *part;
        R_OK(dt_linear(x[1], w[1][0], NULL, &part));
        R_OK(dt_tensor_redistribute(part, mnd, py, &y[1][0]));
        dt_tensor_release(part);
    } else {
        dt_tensor *xr;
        R_OK(dt_tensor_redistribute(x[1], mnd, rep, &xr));
        for (int i = 0; i < nw; i++)
            R_OK(dt_linear(xr, w[1][i], NULL, &y[1][i]));
        dt_tensor_release(xr);
    }
    for (int i = 0; i < nw; i++) {
        ref_forward(hx, hw[i], B * T, K, N, want);
        R_OK(full_f64(y[0][i], got, ny));
        R_OK(full_f64(y[1][i], sync, ny));
        R_OK(near("y", k, which_name[op], got, want, ny, tol));
        R_OK(near("y (synchronous)", k, which_name[op], got, sync, ny, tol));
        R_CHECK(!c->exact || mode != DT_ASYNC_TP_ORDERED || op != RS || bitwise(got, sync, ny),
                "case %d, %s: the ordered mode's y differs from the synchronous form's", k,
                which_name[op]);
    }
    /* backward: loss = sum_i sum(y_i * g_i) */
    for (int f = 0; f < 2; f++) {
        R_OK(dot_loss(y[f][0], g[0], &loss[f]));
        if (nw == 2) {
            dt_tensor *l2, *sum;
            R_OK(dot_loss(y[f][1], g[1], &l2));
            R_OK(dt_add(loss[f], l2, &sum));
            dt_tensor_release(l2), dt_tensor_release(loss[f]);
            loss[f] = sum;
        }
        if (f == 0) R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_backward(loss[f]));
        if (f == 0) {
            /* the dual collective matmul (n - 1 steps; two weights' gradients summed into
             * one), no all_gather or reduce_scatter */
            uint64_t sends = t_issued(ctx, DT_COLL_SEND), ag = t_issued(ctx, DT_COLL_ALL_GATHER);
            uint64_t rs = t_issued(ctx, DT_COLL_REDUCE_SCATTER);
            R_CHECK(sends == (uint64_t)(n - 1) && ag == 0 && rs == 0,
                    "case %d, %s: backward made %llu sends, %llu all_gathers, %llu "
                    "reduce_scatters; want %d, 0, 0",
                    k, which_name[op], (unsigned long long)sends, (unsigned long long)ag,
                    (unsigned long long)rs, n - 1);
        }
    }
    for (int i = 0; i < nw; i++) {
        ref_backward(hx, hw[i], hg[i], B * T, K, N, rdx, rdw);
        R_OK(full_f64(dt_tensor_grad(w[0][i]), got, nwt));
        R_OK(full_f64(dt_tensor_grad(w[1][i]), sync, nwt));
        R_OK(near("dw", k, which_name[op], got, rdw, nwt, tol));
        R_OK(near("dw (synchronous)", k, which_name[op], got, sync, nwt, tol));
    }
    R_OK(full_f64(dt_tensor_grad(x[0]), got, nx));
    R_OK(full_f64(dt_tensor_grad(x[1]), sync, nx));
    R_OK(near("dx", k, which_name[op], got, rdx, nx, tol * 4));
    R_OK(near("dx (synchronous)", k, which_name[op], got, sync, nx, tol * 4));
    for (int f = 0; f < 2; f++) {
        dt_tensor_release(x[f]), dt_tensor_release(loss[f]);
        for (int i = 0; i < nw; i++)
            dt_tensor_release(w[f][i]), dt_tensor_release(y[f][i]);
    }
    for (int i = 0; i < nw; i++)
        dt_tensor_release(g[i]);
    free(want), free(got), free(sync), free(rdx), free(rdw);
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *p) {
    int k = ((arg *)p)->k;
    const acase *c = &cases[k];
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    size_t nx = (size_t)(c->B * c->T * c->K), nw = (size_t)(c->N * c->K);
    size_t ny = (size_t)(c->B * c->T * c->N);
    double *hx = malloc(nx * 8), *hw[2] = {malloc(nw * 8), malloc(nw * 8)};
    double *hg[2] = {malloc(ny * 8), malloc(ny * 8)};
    /* fractions no float holds exactly, so that the order of a sum shows in its bits */
    for (size_t i = 0; i < nx; i++)
        hx[i] = t_value(10 + (uint64_t)k, i) / 7 + 0.1;
    for (int j = 0; j < 2; j++) {
        for (size_t i = 0; i < nw; i++)
            hw[j][i] = t_value(20 + (uint64_t)j, i) / 13;
        for (size_t i = 0; i < ny; i++)
            hg[j][i] = t_value(30 + (uint64_t)j, i) / 11 - 0.3;
    }
    dt_status st = DT_OK;
    for (int op = AG1; op <= RS && st == DT_OK; op++)
        for (int m = DT_ASYNC_TP_RING; m <= DT_ASYNC_TP_ORDERED && st == DT_OK; m++)
            st = run_one(ctx, mesh, k, (which)op, (dt_async_tp_mode)m, hx,
                         (const double *const *)hw, (const double *const *)hg);
    free(hx), free(hw[0]), free(hw[1]), free(hg[0]), free(hg[1]);
    dt_mesh_release(mesh);
    return st;
}

/* the product of the sizes in "dp=2,tp=2" */
static int world_of(const char *mesh) {
    int w = 1;
    for (const char *p = strchr(mesh, '='); p; p = strchr(p + 1, '='))
        w *= atoi(p + 1);
    return w;
}

static arg args[NCASES];

Test(async_tp, equals_one_rank_f64_and_the_synchronous_form) {
    for (int k = 0; k < NCASES; k++) {
        args[k].k = k;
        t_run(world_of(cases[k].mesh), body, &args[k]);
    }
}

/* Bad input: every rank fails the same way, naming the argument and its value, with no
 * collective started (the checks read only the specs) and the output left alone. */
static dt_status errors_body(dt_ctx *ctx, void *p) {
    (void)p;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=2", &mesh));
    int64_t sx[3] = {2, 5, 4}, sw[2] = {6, 4}, s2[2] = {6, 4}, sbad[2] = {6, 3};
    dt_placement seq = dt_shard(1), col = dt_shard(0), rep = dt_replicate(), row = dt_shard(1);
    dt_tensor *x, *w, *wr, *xr, *wbad, *w64, *x2;
    R_OK(dt_tensor_ones(mesh, DT_F32, 3, sx, 1, &seq, &x));
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, sw, 1, &col, &w));
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, s2, 1, &row, &wr));
    R_OK(dt_tensor_ones(mesh, DT_F32, 3, sx, 1, &rep, &xr));
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, sbad, 1, &col, &wbad));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, sw, 1, &col, &w64));
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, sw, 1, &seq, &x2));
    dt_tensor *out = T_SENTINEL(dt_tensor *);
    R_OK(dt_comm_stats_reset(ctx));
    R_ERR(dt_all_gather_linear(xr, 1, &w, 0, DT_ASYNC_TP_RING, &out), DT_ERR_PLACEMENT,
          "x is R over mesh dim 0 (tp); it must be S(1)");
    R_ERR(dt_all_gather_linear(x, 1, &wr, 0, DT_ASYNC_TP_RING, &out), DT_ERR_PLACEMENT,
          "w[0] is S(1) over mesh dim 0; it must be S(0)");
    R_ERR(dt_all_gather_linear(x, 0, &w, 0, DT_ASYNC_TP_RING, &out), DT_ERR_ARG, "nw = 0");
    R_ERR(dt_all_gather_linear(x, 1, &w, 1, DT_ASYNC_TP_RING, &out), DT_ERR_ARG, "tp_dim = 1");
    R_ERR(dt_all_gather_linear(x, 1, &w, 0, (dt_async_tp_mode)7, &out), DT_ERR_ARG, "mode = 7");
    R_ERR(dt_all_gather_linear(x, 1, &wbad, 0, DT_ASYNC_TP_RING, &out), DT_ERR_SHAPE,
          "w[0] must be (N, 4)");
    R_ERR(dt_all_gather_linear(x, 1, &w64, 0, DT_ASYNC_TP_RING, &out), DT_ERR_DTYPE,
          "w[0] is f64, x is f32");
    R_ERR(dt_all_gather_linear(x2, 1, &w, 0, DT_ASYNC_TP_RING, &out), DT_ERR_SHAPE, "x has 2 dims");
    R_ERR(dt_linear_reduce_scatter(x, wr, 0, DT_ASYNC_TP_RING, &out), DT_ERR_PLACEMENT,
          "x is S(1) over mesh dim 0 (tp); it must be S(2)");
    R_ERR(dt_all_gather_linear(x, 1, &w, 0, DT_ASYNC_TP_RING, NULL), DT_ERR_ARG, "outs");
    R_CHECK(out == T_SENTINEL(dt_tensor *), "a failed call wrote its output");
    R_CHECK(t_issued_total(ctx) == 0, "a failed call communicated");
    dt_params *params;
    dt_module m;
    R_OK(dt_params_create(mesh, DT_F32, &params));
    R_OK(dt_nn_linear_create(params, "fc", 4, 6, 0, (dt_init){DT_INIT_ZEROS, 0}, &m));
    dt_parallelize_options o = {.tp_dim = 0, .dp_dim = -1, .async_tp = (dt_async_tp_mode)9};
    R_ERR(dt_parallelize(params, &o), DT_ERR_ARG, "unknown async_tp mode 9");
    R_OK(dt_params_destroy(params));
    dt_tensor *all[] = {x, w, wr, xr, wbad, w64, x2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(async_tp, bad_input_fails_alike_on_every_rank) {
    t_run(2, errors_body, NULL);
}

/* The trace of one dt_all_gather_linear and one dt_linear_reduce_scatter on tp = 3: each rank
 * records one GEMM event per step and one send and one receive (on the tp group) per
 * transfer, ordered as the schedules say: the gather's chunk for step s + 1 has arrived (its
 * transfer ended) before that step's GEMM begins; the reduce_scatter's partial sum of step s
 * leaves only after that step's GEMM made it. The transfers run on the communication thread
 * while the caller's GEMM runs; how much they overlap is timing, logged, not asserted. */
typedef struct span {
    double t0, t1;
} span;

static int read_spans(const char *path, const char *name, const char *detail, span *out, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *ts = strstr(line, "\"ts\":"), *dur = strstr(line, "\"dur\":");
        char want[64];
        snprintf(want, sizeof want, "\"name\":\"%s\"", name);
        if (!ts || !dur || !strstr(line, want) || (detail && !strstr(line, detail))) continue;
        if (n < cap) out[n] = (span){atof(ts + 5), atof(ts + 5) + atof(dur + 6)};
        n++;
    }
    fclose(f);
    return n;
}

static int overlaps(span a, span b) {
    return a.t0 < b.t1 && b.t0 < a.t1;
}

static dt_status trace_body(dt_ctx *ctx, void *p) {
    (void)p;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=3", &mesh));
    int64_t sx[3] = {2, 300, 256}, sw[2] = {256, 256};
    dt_placement seq = dt_shard(1), col = dt_shard(0), feat = dt_shard(2), row = dt_shard(1);
    dt_tensor *x, *w, *y, *xf, *wr, *z;
    R_OK(dt_tensor_ones(mesh, DT_F32, 3, sx, 1, &seq, &x));
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, sw, 1, &col, &w));
    R_OK(dt_tensor_ones(mesh, DT_F32, 3, sx, 1, &feat, &xf));
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, sw, 1, &row, &wr));
    const char *what[2] = {"all_gather_mm", "mm_reduce_scatter"};
    for (int op = 0; op < 2; op++) {
        R_OK(dt_trace_start(ctx));
        if (op == 0)
            R_OK(dt_all_gather_linear(x, 1, &w, 0, DT_ASYNC_TP_RING, &y));
        else
            R_OK(dt_linear_reduce_scatter(xf, wr, 0, DT_ASYNC_TP_RING, &z));
        R_OK(dt_trace_stop(ctx));
        char path[96]; /* the context's address and the clock keep concurrent runs apart */
        snprintf(path, sizeof path, "/tmp/dt_async_tp_trace_%lld_%p_%d.json", (long long)time(NULL),
                 (void *)ctx, dt_ctx_rank(ctx));
        R_OK(dt_trace_write(ctx, path));
        span gemm[4], send[4], recv[4];
        int ng = read_spans(path, "async_tp_gemm", what[op], gemm, 4);
        int ns = read_spans(path, "send", "group tp", send, 4);
        int nr = read_spans(path, "recv", "group tp", recv, 4);
        remove(path);
        R_CHECK(ng == 3 && ns == 2 && nr == 2, "%s: %d GEMM steps, %d sends, %d receives", what[op],
                ng, ns, nr);
        int overlapped = 0;
        for (int s = 0; s < 2; s++) {
            if (op == 0)
                R_CHECK(send[s].t1 <= gemm[s + 1].t0 + 1e-3 && recv[s].t1 <= gemm[s + 1].t0 + 1e-3,
                        "%s: transfer %d ends at %.3f / %.3f, after step %d's GEMM begins at "
                        "%.3f",
                        what[op], s, send[s].t1, recv[s].t1, s + 1, gemm[s + 1].t0);
            else
                R_CHECK(send[s].t0 >= gemm[s].t1 - 1e-3,
                        "%s: step %d's partial sum leaves at %.3f, before its GEMM ends at %.3f",
                        what[op], s, send[s].t0, gemm[s].t1);
            overlapped += overlaps(send[s], gemm[op == 0 ? s : s + 1]) ||
                          overlaps(recv[s], gemm[op == 0 ? s : s + 1]);
        }
        cr_log_info("rank %d, %s: %d of 2 transfers overlap a GEMM", dt_ctx_rank(ctx), what[op],
                    overlapped);
    }
    dt_tensor *all[] = {x, w, y, xf, wr, z};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(async_tp, trace_shows_the_schedule) {
    t_run(3, trace_body, NULL);
}
