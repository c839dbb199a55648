/* One rank of the NCCL runtime's checks (run under dtrun, one process per GPU; exits 77 when no
 * GPU is visible or the build has no NCCL runtime). Modes:
 *   collectives  every collective on device buffers (f32, i32, i64; uneven and empty counts,
 *                gaps that must survive), the same on host buffers (staged), send/recv, barrier,
 *                and the communicators of a 2-D mesh (sub-communicators through the store)
 *   mesh         mesh, flattened and sub-mesh communicators made, used by barriers, destroyed
 *   async_tp     async tensor parallelism's collective matmuls (dtensor/async_tp.h: two
 *                weights on one gather, then a reduce_scatter, both modes) on device tensors,
 *                forward and backward, against the synchronous form on the same ranks
 *   fault, hang, peer-exit   the failure modes of rank_faults.h, on device buffers
 * Prints "[ok] <mode>" and exits 0; failure modes print "<mode>: failed cleanly" and exit 3,
 * or "FAILED BADLY" and exit 1. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dtensor.h>
#include <dtensor/nccl.h>

#include "rank_faults.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) return dt_error_set(DT_ERR_ARG, __VA_ARGS__);                                 \
    } while (0)
#define OK(call)                                                                                   \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static const dt_dtype dtypes[] = {DT_F32, DT_I32, DT_I64};

static double get(dt_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case DT_F32:
        return ((const float *)p)[i];
    case DT_I32:
        return ((const int32_t *)p)[i];
    default:
        return (double)((const int64_t *)p)[i];
    }
}

static void put(dt_dtype dt, void *p, size_t i, double v) {
    switch (dt) {
    case DT_F32:
        ((float *)p)[i] = (float)v;
        break;
    case DT_I32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    default:
        ((int64_t *)p)[i] = (int64_t)v;
        break;
    }
}

/* Rank r's value at i: small integers, exact in every dtype. */
static double val(int r, size_t i) {
    return (double)(r + 1 + (int)(i % 7));
}

static dt_status to_host(dt_ctx *ctx, void *h, const void *d, size_t bytes) {
    OK(dt_ctx_synchronize(ctx));
    CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy D2H");
    return DT_OK;
}

static dt_status from_host(void *d, const void *h, size_t bytes) {
    CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy H2D");
    /* From pageable memory cudaMemcpy may return before the DMA lands, and the collectives run
     * on non-blocking streams that do not wait for the legacy stream. */
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
    return DT_OK;
}

/* Buffers: device (dev = 1) or host. */
static void *buf_new(int dev, size_t bytes) {
    void *p = NULL;
    if (dev) return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
    return calloc(1, bytes ? bytes : 1);
}

static void buf_free(int dev, void *p) {
    if (dev)
        cudaFree(p);
    else
        free(p);
}

static dt_status fill(int dev, dt_dtype dt, void *b, size_t n, int r, double sentinel) {
    size_t es = dt_dtype_size(dt);
    char *h = malloc(n * es + 1);
    CHECK(h, "out of memory");
    for (size_t i = 0; i < n; i++)
        put(dt, h, i, r >= 0 ? val(r, i) : sentinel);
    dt_status st = dev ? from_host(b, h, n * es) : (memcpy(b, h, n * es), DT_OK);
    free(h);
    return st;
}

static dt_status read_back(dt_ctx *ctx, int dev, dt_dtype dt, const void *b, size_t n, void *h) {
    if (dev) return to_host(ctx, h, b, n * dt_dtype_size(dt));
    memcpy(h, b, n * dt_dtype_size(dt));
    return DT_OK;
}

static dt_status check_all_reduce(dt_ctx *ctx, dt_comm *c, int dev, dt_dtype dt) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    size_t cnt = 1000, es = dt_dtype_size(dt);
    void *b = buf_new(dev, cnt * es), *h = malloc(cnt * es);
    CHECK(b && h, "out of memory");
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN,
                                       DT_REDUCE_PROD};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        OK(fill(dev, dt, b, cnt, me, 0));
        OK(dt_all_reduce(c, b, b, cnt, dt, ops[k]));
        OK(read_back(ctx, dev, dt, b, cnt, h));
        for (size_t i = 0; i < cnt; i++) {
            double s = 0, p = 1, mx = -1e300, mn = 1e300;
            for (int r = 0; r < n; r++) {
                double v = val(r, i);
                s += v;
                p *= v;
                mx = v > mx ? v : mx;
                mn = v < mn ? v : mn;
            }
            double want = ops[k] == DT_REDUCE_SUM ? s
                          : ops[k] == DT_REDUCE_AVG
                              ? (dt == DT_F32 ? s / n : (double)((int64_t)s / n))
                          : ops[k] == DT_REDUCE_MAX ? mx
                          : ops[k] == DT_REDUCE_MIN ? mn
                                                    : p;
            double got = get(dt, h, i), tol = dt == DT_F32 ? 1e-5 * (want < 0 ? -want : want) : 0;
            double exact = dt == DT_F32 ? 16777216.0 : dt == DT_I32 ? 2147483647.0 : 9e15;
            if (ops[k] == DT_REDUCE_PROD && p > exact) continue; /* overflows or rounds */
            CHECK(got >= want - tol && got <= want + tol,
                  "all_reduce op %d dtype %d (%s buffers) at %zu: got %g, want %g", (int)ops[k],
                  (int)dt, dev ? "device" : "host", i, got, want);
        }
    }
    buf_free(dev, b);
    free(h);
    return DT_OK;
}

/* Uneven counts (rank r holds (r + 1) % 3 elements: some hold none) at displacements with
 * gaps. */
static dt_status check_gather_scatter(dt_ctx *ctx, dt_comm *c, int dev, dt_dtype dt) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    size_t es = dt_dtype_size(dt), *counts = calloc((size_t)n, sizeof(size_t)),
           *displs = calloc((size_t)n, sizeof(size_t)), total = 0, span = 0;
    CHECK(counts && displs, "out of memory");
    for (int r = 0; r < n; r++) {
        counts[r] = (size_t)((r + 1) % 3);
        displs[r] = span + 1; /* one element of gap before each block */
        span = displs[r] + counts[r];
        total += counts[r];
    }
    void *s = buf_new(dev, (counts[me] + 1) * es), *g = buf_new(dev, span * es),
         *h = malloc(span * es + total * es + 8);
    CHECK(s && g && h, "out of memory");
    OK(fill(dev, dt, s, counts[me], me, 0));
    OK(fill(dev, dt, g, span, -1, -5));
    OK(dt_all_gatherv(c, s, g, counts, displs, dt));
    OK(read_back(ctx, dev, dt, g, span, h));
    for (int r = 0; r < n; r++) {
        CHECK(get(dt, h, displs[r] - 1) == -5, "all_gatherv wrote into the gap before block %d", r);
        for (size_t i = 0; i < counts[r]; i++)
            CHECK(get(dt, h, displs[r] + i) == val(r, i), "all_gatherv block %d element %zu", r, i);
    }
    /* reduce_scatterv: every rank sends the packed blocks; block r's element i sums val(q, i). */
    void *rs = buf_new(dev, total * es), *rr = buf_new(dev, (counts[me] + 1) * es);
    CHECK(rs && rr, "out of memory");
    OK(fill(dev, dt, rs, total, me, 0));
    OK(dt_reduce_scatterv(c, rs, rr, counts, dt, DT_REDUCE_SUM));
    OK(read_back(ctx, dev, dt, rr, counts[me], h));
    size_t off = 0;
    for (int r = 0; r < me; r++)
        off += counts[r];
    for (size_t i = 0; i < counts[me]; i++) {
        double want = 0;
        for (int q = 0; q < n; q++)
            want += val(q, off + i);
        CHECK(get(dt, h, i) == want, "reduce_scatterv element %zu: got %g, want %g", i,
              get(dt, h, i), want);
    }
    buf_free(dev, s);
    buf_free(dev, g);
    buf_free(dev, rs);
    buf_free(dev, rr);
    free(h);
    free(counts);
    free(displs);
    return DT_OK;
}

/* all_to_allv: rank me sends me + j + 1 elements (value 1000 me + j) to rank j. */
static dt_status check_all_to_all(dt_ctx *ctx, dt_comm *c, int dev) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    size_t *sc = calloc((size_t)n, sizeof(size_t)), *rc = calloc((size_t)n, sizeof(size_t)), st = 0,
           rt = 0;
    CHECK(sc && rc, "out of memory");
    for (int j = 0; j < n; j++) {
        st += sc[j] = (size_t)(me + j + 1);
        rt += rc[j] = (size_t)(j + me + 1);
    }
    int32_t *hs = malloc(st * 4), *hr = malloc(rt * 4);
    void *s = buf_new(dev, st * 4), *r = buf_new(dev, rt * 4);
    CHECK(hs && hr && s && r, "out of memory");
    for (int j = 0, o = 0; j < n; o += (int)sc[j], j++)
        for (size_t i = 0; i < sc[j]; i++)
            hs[o + (int)i] = 1000 * me + j;
    if (dev)
        OK(from_host(s, hs, st * 4));
    else
        memcpy(s, hs, st * 4);
    OK(dt_all_to_allv(c, s, sc, NULL, r, rc, NULL, DT_I32));
    OK(read_back(ctx, dev, DT_I32, r, rt, hr));
    for (int j = 0, o = 0; j < n; o += (int)rc[j], j++)
        for (size_t i = 0; i < rc[j]; i++)
            CHECK(hr[o + (int)i] == 1000 * j + me, "all_to_allv from %d: got %d", j,
                  hr[o + (int)i]);
    buf_free(dev, s);
    buf_free(dev, r);
    free(hs);
    free(hr);
    free(sc);
    free(rc);
    return DT_OK;
}

static dt_status check_p2p(dt_ctx *ctx, dt_comm *c, int dev) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    int64_t h[64];
    void *b = buf_new(dev, sizeof h);
    CHECK(b, "out of memory");
    /* broadcast from the last rank */
    OK(fill(dev, DT_I64, b, 64, me == n - 1 ? me : -1, -1));
    OK(dt_broadcast(c, b, 64, DT_I64, n - 1));
    OK(read_back(ctx, dev, DT_I64, b, 64, h));
    for (int i = 0; i < 64; i++)
        CHECK(h[i] == (int64_t)val(n - 1, (size_t)i), "broadcast element %d", i);
    if (n >= 2) { /* a ring: even ranks send first */
        int to = (me + 1) % n, from = (me + n - 1) % n;
        void *in = buf_new(dev, sizeof h);
        CHECK(in, "out of memory");
        OK(fill(dev, DT_I64, b, 64, me, 0));
        if (me % 2 == 0) {
            OK(dt_send(c, b, 64, DT_I64, to));
            OK(dt_recv(c, in, 64, DT_I64, from));
        } else {
            OK(dt_recv(c, in, 64, DT_I64, from));
            OK(dt_send(c, b, 64, DT_I64, to));
        }
        OK(read_back(ctx, dev, DT_I64, in, 64, h));
        for (int i = 0; i < 64; i++)
            CHECK(h[i] == (int64_t)val(from, (size_t)i), "recv from %d element %d", from, i);
        buf_free(dev, in);
    }
    OK(dt_barrier(c));
    buf_free(dev, b);
    return DT_OK;
}

static dt_status check_comm(dt_ctx *ctx, dt_comm *c) {
    for (int dev = 1; dev >= 0; dev--) {
        for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
            OK(check_all_reduce(ctx, c, dev, dtypes[k]));
            OK(check_gather_scatter(ctx, c, dev, dtypes[k]));
        }
        OK(check_all_to_all(ctx, c, dev));
        OK(check_p2p(ctx, c, dev));
    }
    return DT_OK;
}

static dt_status mode_collectives(dt_ctx *ctx) {
    dt_device d = dt_ctx_device(ctx);
    CHECK(d.kind == DT_DEVICE_CUDA, "the NCCL runtime did not set a CUDA device");
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *world;
    OK(dt_ctx_world_comm(ctx, &world));
    OK(check_comm(ctx, world));
    /* The communicators of a 2-D mesh: each made by its members only. */
    int shape[2] = {n % 2 == 0 ? 2 : 1, n % 2 == 0 ? n / 2 : n};
    const char *names[2] = {"dp", "tp"};
    dt_mesh *mesh;
    OK(dt_mesh_create(ctx, 2, shape, names, &mesh));
    for (int dim = 1; dim >= 0; dim--) {
        dt_comm *c;
        OK(dt_mesh_dim_comm(mesh, dim, &c));
        OK(check_comm(ctx, c));
    }
    dt_mesh_release(mesh);
    OK(dt_barrier(world));
    printf("[ok] collectives on %d ranks (this rank on GPU %d)\n", n, d.index);
    (void)me;
    return DT_OK;
}

/* The communicators of a 2-D mesh, a flattened pair and a sub-mesh: made by their members
 * (through rank 0's store), used by a barrier each, destroyed with the mesh. */
static dt_status mode_mesh(dt_ctx *ctx) {
    int n = dt_ctx_size(ctx);
    int shape[2] = {n % 2 == 0 ? 2 : 1, n % 2 == 0 ? n / 2 : n};
    const char *names[2] = {"dp", "tp"};
    for (int round = 0; round < 2; round++) {
        dt_mesh *mesh, *sub;
        OK(dt_mesh_create(ctx, 2, shape, names, &mesh));
        dt_comm *c;
        for (int dim = 0; dim < 2; dim++) {
            OK(dt_mesh_dim_comm(mesh, dim, &c));
            OK(dt_barrier(c));
        }
        OK(dt_mesh_group_comm(mesh, names, 2, &c));
        OK(dt_barrier(c));
        OK(dt_mesh_submesh(mesh, names + 1, 1, &sub));
        OK(dt_mesh_dim_comm(sub, 0, &c));
        OK(dt_barrier(c));
        dt_mesh_release(sub);
        dt_mesh_release(mesh);
    }
    dt_comm *world;
    OK(dt_ctx_world_comm(ctx, &world));
    OK(dt_barrier(world));
    printf("[ok] mesh on %d ranks\n", n);
    return DT_OK;
}

/* x (2, T, 12) S(1) over tp -> h_i = all_gather(x) @ w_i^T (i = 1, 3; 10 features) -> y =
 * reduce_scatter((h1 * h3) @ w2^T) S(1); backward from g. sync: redistribute + dt_linear.
 * out[0..5): y, dx, dw1, dw3, dw2 gathered to host f32; in[0..5): x, w1, w3, w2, g (the caller
 * frees them all). The async form also checks its transfers: per collective matmul tp - 1 sends
 * and receives of the chunks' sizes, no all_gather or reduce_scatter, forward and backward. */
#define TP_B 2
#define TP_D 12 /* x's and y's features */
#define TP_H 10 /* h's features */

static int64_t rows_of(int64_t T, int n, int o) {
    int64_t c = (T + n - 1) / n, lo = c * o < T ? c * o : T, hi = c * (o + 1) < T ? c * (o + 1) : T;
    return hi - lo;
}

static dt_status check_transfers(dt_ctx *ctx, const char *pass, int64_t want_bytes) {
    dt_comm_stats st;
    OK(dt_comm_stats_get(ctx, &st));
    int n = dt_ctx_size(ctx);
    uint64_t want = 2 * (uint64_t)(n - 1); /* two collective matmuls */
    CHECK(st.calls[DT_COLL_SEND] == want && st.calls[DT_COLL_RECV] == want &&
              st.calls[DT_COLL_ALL_GATHER] == 0 && st.calls[DT_COLL_REDUCE_SCATTER] == 0,
          "async_tp %s: %llu sends, %llu receives, %llu all_gathers, %llu reduce_scatters; "
          "want %llu, %llu, 0, 0",
          pass, (unsigned long long)st.calls[DT_COLL_SEND],
          (unsigned long long)st.calls[DT_COLL_RECV],
          (unsigned long long)st.calls[DT_COLL_ALL_GATHER],
          (unsigned long long)st.calls[DT_COLL_REDUCE_SCATTER], (unsigned long long)want,
          (unsigned long long)want);
    CHECK(want_bytes < 0 || st.bytes_in[DT_COLL_SEND] == (uint64_t)want_bytes,
          "async_tp %s: sent %llu bytes, want %lld", pass,
          (unsigned long long)st.bytes_in[DT_COLL_SEND], (long long)want_bytes);
    return DT_OK;
}

/* What this rank sends in the forward: the gather passes on every chunk but the one of rank
 * me + 1 (it starts with its own), the reduce_scatter every partial sum but its own. */
static int64_t forward_bytes(int64_t T, int n, int me) {
    return (int64_t)sizeof(float) * TP_B *
           ((T - rows_of(T, n, (me + 1) % n)) * TP_D + (T - rows_of(T, n, me)) * TP_D);
}

static dt_status tp_step(dt_mesh *mesh, int64_t T, int sync, dt_async_tp_mode mode, float **in,
                         float **out) {
    dt_ctx *ctx = dt_mesh_ctx(mesh);
    int64_t sx[3] = {TP_B, T, TP_D}, sw[2] = {TP_H, TP_D}, s2[2] = {TP_D, TP_H};
    dt_placement seq = dt_shard(1), col = dt_shard(0), row = dt_shard(1);
    dt_generator gen = dt_generator_make(5);
    dt_tensor *x, *w[3], *g, *h[2], *p, *y;
    OK(dt_tensor_randn(mesh, DT_F32, 3, sx, 1, &seq, &gen, &x));
    OK(dt_tensor_randn(mesh, DT_F32, 2, sw, 1, &col, &gen, &w[0]));
    OK(dt_tensor_randn(mesh, DT_F32, 2, sw, 1, &col, &gen, &w[1]));
    OK(dt_tensor_randn(mesh, DT_F32, 2, s2, 1, &row, &gen, &w[2]));
    OK(dt_tensor_randn(mesh, DT_F32, 3, sx, 1, &seq, &gen, &g));
    dt_tensor *leaves[4] = {x, w[0], w[1], w[2]};
    for (int i = 0; i < 4; i++)
        OK(dt_tensor_set_requires_grad(leaves[i], 1));
    if (!sync) {
        OK(dt_comm_stats_reset(ctx));
        OK(dt_all_gather_linear(x, 2, w, 0, mode, h));
        OK(dt_mul(h[0], h[1], &p));
        OK(dt_linear_reduce_scatter(p, w[2], 0, mode, &y));
        OK(check_transfers(ctx, "forward",
                           forward_bytes(T, dt_ctx_size(ctx), dt_mesh_coord(mesh, 0))));
        OK(dt_comm_stats_reset(ctx));
    } else {
        dt_tensor *xr, *q;
        dt_placement rep = dt_replicate();
        OK(dt_tensor_redistribute(x, 1, &rep, &xr));
        OK(dt_linear(xr, w[0], NULL, &h[0]));
        OK(dt_linear(xr, w[1], NULL, &h[1]));
        OK(dt_mul(h[0], h[1], &p));
        OK(dt_linear(p, w[2], NULL, &q));
        OK(dt_tensor_redistribute(q, 1, &seq, &y));
        dt_tensor_release(xr), dt_tensor_release(q);
    }
    OK(dt_backward_with(y, g));
    if (!sync) OK(check_transfers(ctx, "backward", -1));
    dt_tensor *t[5] = {y, dt_tensor_grad(x), dt_tensor_grad(w[0]), dt_tensor_grad(w[1]),
                       dt_tensor_grad(w[2])};
    dt_tensor *src[5] = {x, w[0], w[1], w[2], g};
    for (int i = 0; i < 5; i++) {
        dt_tensor_info info;
        CHECK(t[i], "async_tp: gradient %d missing", i);
        OK(dt_tensor_info_get(t[i], &info));
        out[i] = malloc(info.numel * sizeof(float) + 4);
        OK(dt_tensor_full_tensor(t[i], out[i], info.numel * sizeof(float)));
        if (!in) continue;
        OK(dt_tensor_info_get(src[i], &info));
        in[i] = malloc(info.numel * sizeof(float) + 4);
        OK(dt_tensor_full_tensor(src[i], in[i], info.numel * sizeof(float)));
    }
    dt_tensor *all[] = {x, w[0], w[1], w[2], g, h[0], h[1], p, y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    return DT_OK;
}

/* The same step on one rank, naive loops in f64, from the inputs' values: out as tp_step's. */
static void tp_reference(int64_t T, float *const *in, double **out) {
    int64_t R = TP_B * T, D = TP_D, H = TP_H;
    const float *x = in[0], *w1 = in[1], *w3 = in[2], *w2 = in[3], *g = in[4];
    double *h1 = calloc((size_t)(R * H), 8), *h3 = calloc((size_t)(R * H), 8);
    double *dp = calloc((size_t)(R * H), 8);
    for (int i = 0; i < 5; i++)
        out[i] = calloc((size_t)(i == 0 || i == 1 ? R * D : H * D), 8);
    double *y = out[0], *dx = out[1], *dw1 = out[2], *dw3 = out[3], *dw2 = out[4];
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < H; j++)
            for (int64_t k = 0; k < D; k++) {
                h1[r * H + j] += (double)x[r * D + k] * w1[j * D + k];
                h3[r * H + j] += (double)x[r * D + k] * w3[j * D + k];
            }
    for (int64_t r = 0; r < R; r++)
        for (int64_t o = 0; o < D; o++)
            for (int64_t j = 0; j < H; j++) {
                double pj = h1[r * H + j] * h3[r * H + j];
                y[r * D + o] += pj * w2[o * H + j];
                dp[r * H + j] += (double)g[r * D + o] * w2[o * H + j];
                dw2[o * H + j] += (double)g[r * D + o] * pj;
            }
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < H; j++) {
            double d1 = dp[r * H + j] * h3[r * H + j], d3 = dp[r * H + j] * h1[r * H + j];
            for (int64_t k = 0; k < D; k++) {
                dx[r * D + k] += d1 * w1[j * D + k] + d3 * w3[j * D + k];
                dw1[j * D + k] += d1 * x[r * D + k];
                dw3[j * D + k] += d3 * x[r * D + k];
            }
        }
    free(h1), free(h3), free(dp);
}

/* Uneven sequence lengths: T = 11 (tp = 2, 3, 4 divide none) and T = 3 (on tp = 4 a rank
 * holds no rows). Each async form against the synchronous one on the same ranks and against
 * tp_reference. */
static dt_status mode_async_tp(dt_ctx *ctx) {
    int n = dt_ctx_size(ctx);
    dt_mesh *mesh;
    OK(dt_mesh_create(ctx, 1, &n, (const char *const[]){"tp"}, &mesh));
    static const char *const name[5] = {"y", "dx", "dw1", "dw3", "dw2"};
    static const int64_t Ts[2] = {11, 3};
    for (int ti = 0; ti < 2; ti++) {
        int64_t T = Ts[ti];
        size_t len[5] = {TP_B * T * TP_D, TP_B * T * TP_D, TP_H * TP_D, TP_H * TP_D, TP_H * TP_D};
        for (int m = DT_ASYNC_TP_RING; m <= DT_ASYNC_TP_ORDERED; m++) {
            float *a[5] = {0}, *s[5] = {0}, *in[5] = {0};
            double *ref[5] = {0};
            OK(tp_step(mesh, T, 0, (dt_async_tp_mode)m, in, a));
            OK(tp_step(mesh, T, 1, (dt_async_tp_mode)m, NULL, s));
            tp_reference(T, in, ref);
            for (int i = 0; i < 5; i++) {
                for (size_t k = 0; k < len[i]; k++) {
                    if (!(fabsf(a[i][k] - s[i][k]) <= 1e-4f * (1 + fabsf(s[i][k]))))
                        return dt_error_set(DT_ERR_ARG,
                                            "async_tp T %lld mode %d: %s[%zu] is %.9g, "
                                            "synchronous %.9g",
                                            (long long)T, m, name[i], k, a[i][k], s[i][k]);
                    if (!(fabs(a[i][k] - ref[i][k]) <= 1e-4 * (1 + fabs(ref[i][k]))))
                        return dt_error_set(DT_ERR_ARG,
                                            "async_tp T %lld mode %d: %s[%zu] is %.9g, one rank "
                                            "in f64 %.9g",
                                            (long long)T, m, name[i], k, a[i][k], ref[i][k]);
                }
                free(a[i]), free(s[i]), free(in[i]), free(ref[i]);
            }
        }
    }
    dt_mesh_release(mesh);
    printf("[ok] async_tp on %d ranks\n", n);
    return DT_OK;
}

/* The failure modes' buffers, on the GPU (zeroed: the sums must stay finite). */
static void *dev_alloc(size_t bytes) {
    void *p = buf_new(1, bytes);
    if (p && (cudaMemset(p, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)) {
        buf_free(1, p);
        p = NULL;
    }
    return p;
}

static void dev_free(void *p) {
    buf_free(1, p);
}

static dt_status body(dt_ctx *ctx, void *arg) {
    const char *mode = arg;
    if (!strcmp(mode, "collectives")) return mode_collectives(ctx);
    if (!strcmp(mode, "mesh")) return mode_mesh(ctx);
    if (!strcmp(mode, "async_tp")) return mode_async_tp(ctx);
    if (rank_fault_mode(mode)) {
        rank_fault_buffers dev = {.alloc = dev_alloc, .release = dev_free};
        return rank_fault_run(ctx, mode, &dev);
    }
    return dt_error_set(DT_ERR_ARG, "unknown mode %s", mode);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "collectives";
    if (!dt_nccl_available() || dt_cuda_device_count() == 0) {
        printf("skip: no NCCL runtime or no GPU\n");
        return 77;
    }
    dt_status st = dt_nccl_run(body, (void *)mode);
    if (!strcmp(mode, "collectives") || !strcmp(mode, "mesh") || !strcmp(mode, "async_tp")) {
        if (st == DT_OK) return 0;
        printf("%s: FAILED BADLY: %s: %s\n", mode, dt_status_str(st), dt_last_error());
        return 1;
    }
    return rank_fault_judge(mode, st);
}
