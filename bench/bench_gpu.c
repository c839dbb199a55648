/* GPU benchmarks, each next to a reference measured in the same run:
 *   bf16 GEMM 8192^3 through dispatch   vs the bare cuBLAS call, and the device's peak
 *   pointwise add (1 and 4 ranks of one GPU)        vs device-to-device copy bandwidth
 *   all_gather / reduce_scatter (4 ranks, one GPU)  vs device-to-device copy bandwidth
 *   cached dispatch of a tiny add on GPU tensors    vs launching the bare kernel
 *   tensor-parallel MLP forward on 4 ranks of one GPU vs the same MLP on one rank
 * Times are wall clock around a synchronised loop, best of 5. Prints nothing to the table
 * (and says why on stderr) without a GPU. --table: tab-separated rows for make bench;
 * --smoke: tiny sizes, to check that every case runs (make test runs it on cudasim). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dtensor.h>

#include "core/cuda/cuda_rt.h"
#include "ops/cuda/cuda_kernels.h"

static int table, smoke;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A 2-D f32 block of rows x cols at data. */
static dt_block f32_block(void *data, int64_t rows, int64_t cols) {
    return (dt_block){.data = data, .dtype = DT_F32, .ndim = 2, .shape = {rows, cols}};
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) {                                                                        \
            fprintf(stderr, "bench_gpu: %s: %s\n", #call, dt_last_error());                        \
            return st_;                                                                            \
        }                                                                                          \
    } while (0)

static void row(const char *name, const char *figure, const char *ref, double ratio) {
    if (table) printf("%s\t%s\t%s\t%.0f%%\n", name, figure, ref, ratio * 100);
    else printf("%-44s %-22s %-28s %5.0f%%\n", name, figure, ref, ratio * 100);
}

static const dt_device gpu = {DT_DEVICE_CUDA, -1};

/* Peak dense bf16 tensor throughput: SMs x clock x FLOPs per SM per clock (Hopper: 4096). */
static double peak_bf16_tflops(int dev) {
    int sms = 0, khz = 0, major = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    double per_clk = major >= 9 ? 4096 : major == 8 ? 2048 : 1024;
    return (double)sms * khz * 1e3 * per_clk / 1e12;
}

/* ---- GEMM ------------------------------------------------------------------------------- */

static dt_status gemm_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    TRY(dt_ctx_set_device(ctx, gpu));
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, "1", &mesh));
    const int64_t n = smoke ? 64 : 8192;
    int64_t shape[2] = {n, n};
    dt_placement rep[1] = {dt_replicate()};
    dt_tensor *a, *b, *c = NULL;
    TRY(dt_tensor_zeros(mesh, DT_BF16, 2, shape, DT_COUNT_OF(rep), rep, &a));
    TRY(dt_tensor_zeros(mesh, DT_BF16, 2, shape, DT_COUNT_OF(rep), rep, &b));
    dt_tensor_info ia, ib;
    dt_tensor_info_get(a, &ia), dt_tensor_info_get(b, &ib);
    dt_cuda_rank *r = dt_cuda_current();
    void *cbuf = dt_cuda_alloc((size_t)n * n * 2);
    const float one = 1, zero = 0;
    double best_bare = 1e30, best_disp = 1e30;
    for (int rep_i = 0; rep_i < 5; rep_i++) {
        TRY(dt_ctx_synchronize(ctx));
        double t0 = now();
        for (int i = 0; i < 5; i++)
            TRY(dt_cublas_status(cublasGemmEx(r->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n,
                                              (int)n, &one, ib.local_data, CUDA_R_16BF, (int)n,
                                              ia.local_data, CUDA_R_16BF, (int)n, &zero, cbuf,
                                              CUDA_R_16BF, (int)n, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT), "cublasGemmEx"));
        TRY(dt_ctx_synchronize(ctx));
        double t1 = now();
        for (int i = 0; i < 5; i++) {
            dt_tensor_release(c);
            TRY(dt_mm(a, b, &c));
        }
        TRY(dt_ctx_synchronize(ctx));
        double t2 = now();
        if ((t1 - t0) / 5 < best_bare) best_bare = (t1 - t0) / 5;
        if ((t2 - t1) / 5 < best_disp) best_disp = (t2 - t1) / 5;
    }
    double flop = 2.0 * n * n * n, bare = flop / best_bare / 1e12, disp = flop / best_disp / 1e12;
    double peak = peak_bf16_tflops(r->device);
    char f[64], ref[64];
    snprintf(f, sizeof f, "%.0f TFLOP/s", disp);
    snprintf(ref, sizeof ref, "cuBLAS %.0f TFLOP/s", bare);
    row("bf16 GEMM 8192^3 through dispatch", f, ref, disp / bare);
    snprintf(ref, sizeof ref, "peak %.0f TFLOP/s", peak);
    row("bf16 GEMM 8192^3 through dispatch", f, ref, disp / peak);
    dt_cuda_free(cbuf);
    dt_tensor_release(c), dt_tensor_release(a), dt_tensor_release(b);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* ---- bandwidth: copy, pointwise, collectives -------------------------------------------- */

typedef struct bw {
    double copy_gbs, add_gbs[2], ag_gbs, rs_gbs; /* [0]: 1 rank, [1]: 4 ranks */
} bw;

#define BW_BYTES (smoke ? (size_t)1 << 16 : (size_t)256 << 20) /* per tensor, whole */

static dt_status copy_ref(dt_ctx *ctx, bw *out) {
    dt_cuda_rank *r = dt_cuda_current();
    void *a = dt_cuda_alloc(BW_BYTES), *b = dt_cuda_alloc(BW_BYTES);
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        TRY(dt_ctx_synchronize(ctx));
        double t0 = now();
        for (int i = 0; i < 10; i++)
            cudaMemcpyAsync(b, a, BW_BYTES, cudaMemcpyDeviceToDevice, r->compute);
        TRY(dt_ctx_synchronize(ctx));
        if ((now() - t0) / 10 < best) best = (now() - t0) / 10;
    }
    out->copy_gbs = 2.0 * BW_BYTES / best / 1e9; /* read + write */
    dt_cuda_free(a), dt_cuda_free(b);
    return DT_OK;
}

static dt_status bw_body(dt_ctx *ctx, void *arg) {
    bw *out = arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    TRY(dt_ctx_set_device(ctx, gpu));
    if (n == 1) TRY(copy_ref(ctx, out));
    dt_mesh *mesh;
    TRY(dt_mesh_create(ctx, 1, &n, NULL, &mesh));
    int64_t shape[1] = {(int64_t)(BW_BYTES / 4)};
    dt_placement s0[1] = {dt_shard(0)}, rep[1] = {dt_replicate()},
                 p[1] = {dt_partial(DT_REDUCE_SUM)};
    dt_tensor *x, *y, *z = NULL;
    TRY(dt_tensor_zeros(mesh, DT_F32, 1, shape, DT_COUNT_OF(s0), s0, &x));
    TRY(dt_tensor_zeros(mesh, DT_F32, 1, shape, DT_COUNT_OF(s0), s0, &y));
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        dt_comm *world;
        TRY(dt_ctx_world_comm(ctx, &world));
        TRY(dt_ctx_synchronize(ctx));
        TRY(dt_barrier(world));
        double t0 = now();
        for (int i = 0; i < 10; i++) {
            dt_tensor_release(z);
            TRY(dt_add(x, y, &z));
        }
        TRY(dt_ctx_synchronize(ctx));
        TRY(dt_barrier(world));
        if ((now() - t0) / 10 < best) best = (now() - t0) / 10;
    }
    if (me == 0) out->add_gbs[n > 1] = 3.0 * BW_BYTES / best / 1e9;
    if (n > 1) { /* S(0) -> R is an all_gather, P -> S(0) a reduce_scatter of the same bytes */
        dt_tensor *pz, *g = NULL;
        TRY(dt_tensor_zeros(mesh, DT_F32, 1, shape, DT_COUNT_OF(p), p, &pz));
        for (int which = 0; which < 2; which++) {
            best = 1e30;
            for (int k = 0; k < 5; k++) {
                TRY(dt_ctx_synchronize(ctx));
                double t0 = now();
                for (int i = 0; i < 5; i++) {
                    dt_tensor_release(g);
                    TRY(dt_tensor_redistribute(which ? pz : x, dt_mesh_ndim(mesh), which ? s0 : rep,
                                               &g));
                }
                TRY(dt_ctx_synchronize(ctx));
                if ((now() - t0) / 5 < best) best = (now() - t0) / 5;
            }
            /* bytes each rank moves: (n-1)/n of the whole tensor in, like a ring */
            double gbs = (double)BW_BYTES * (n - 1) / n / best / 1e9 * 2;
            if (me == 0) *(which ? &out->rs_gbs : &out->ag_gbs) = gbs;
        }
        dt_tensor_release(g), dt_tensor_release(pz);
    }
    dt_tensor_release(z), dt_tensor_release(x), dt_tensor_release(y);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* ---- dispatch overhead ------------------------------------------------------------------ */

static dt_status overhead_body(dt_ctx *ctx, void *arg) {
    double *ns = arg; /* [0] dispatch, [1] bare kernel */
    TRY(dt_ctx_set_device(ctx, gpu));
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, "1", &mesh));
    int64_t shape[2] = {4, 4};
    dt_placement rep[1] = {dt_replicate()};
    dt_tensor *a, *b, *c = NULL;
    TRY(dt_tensor_zeros(mesh, DT_F32, 2, shape, DT_COUNT_OF(rep), rep, &a));
    TRY(dt_tensor_zeros(mesh, DT_F32, 2, shape, DT_COUNT_OF(rep), rep, &b));
    dt_tensor_info ia, ib;
    dt_tensor_info_get(a, &ia), dt_tensor_info_get(b, &ib);
    void *o = dt_cuda_alloc(64);
    dt_block la = f32_block(ia.local_data, 4, 4), lb = f32_block(ib.local_data, 4, 4),
             lo = f32_block(o, 4, 4);
    const int iters = smoke ? 20 : 20000;
    ns[0] = ns[1] = 1e30;
    for (int k = 0; k < 5; k++) {
        TRY(dt_ctx_synchronize(ctx));
        double t0 = now();
        for (int i = 0; i < iters; i++) TRY(dt_cuda_binary(DT_BINARY_ADD, &la, &lb, &lo));
        TRY(dt_ctx_synchronize(ctx));
        double t1 = now();
        for (int i = 0; i < iters; i++) {
            dt_tensor_release(c);
            TRY(dt_add(a, b, &c));
        }
        TRY(dt_ctx_synchronize(ctx));
        double t2 = now();
        if ((t1 - t0) / iters * 1e9 < ns[1]) ns[1] = (t1 - t0) / iters * 1e9;
        if ((t2 - t1) / iters * 1e9 < ns[0]) ns[0] = (t2 - t1) / iters * 1e9;
    }
    dt_cuda_free(o);
    dt_tensor_release(c), dt_tensor_release(a), dt_tensor_release(b);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* ---- tensor-parallel MLP ---------------------------------------------------------------- */

#define MLP_T (smoke ? 32 : 4096)
#define MLP_C (smoke ? 32 : 4096)
#define MLP_H (smoke ? 128 : 16384)

static dt_status mlp_body(dt_ctx *ctx, void *arg) {
    double *secs = arg;
    int n = dt_ctx_size(ctx);
    TRY(dt_ctx_set_device(ctx, gpu));
    dt_mesh *mesh;
    TRY(dt_mesh_create(ctx, 1, &n, NULL, &mesh));
    int64_t xs[2] = {MLP_T, MLP_C}, w1s[2] = {MLP_H, MLP_C}, w2s[2] = {MLP_C, MLP_H};
    dt_placement col[1] = {dt_shard(0)}, row_[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    dt_tensor *x, *w1, *w2;
    TRY(dt_tensor_zeros(mesh, DT_BF16, 2, xs, DT_COUNT_OF(rep), rep, &x));
    TRY(dt_tensor_zeros(mesh, DT_BF16, 2, w1s, DT_COUNT_OF(col), col, &w1));
    TRY(dt_tensor_zeros(mesh, DT_BF16, 2, w2s, DT_COUNT_OF(row_), row_, &w2));
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        TRY(dt_ctx_synchronize(ctx));
        double t0 = now();
        dt_tensor *h, *g, *o, *y;
        TRY(dt_linear(x, w1, NULL, &h));
        TRY(dt_unary_op(DT_OP_GELU, h, &g));
        TRY(dt_linear(g, w2, NULL, &o));
        TRY(dt_tensor_redistribute(o, DT_COUNT_OF(rep), rep, &y));
        TRY(dt_ctx_synchronize(ctx));
        if (now() - t0 < best) best = now() - t0;
        dt_tensor_release(h), dt_tensor_release(g), dt_tensor_release(o), dt_tensor_release(y);
    }
    if (dt_ctx_rank(ctx) == 0) *secs = best;
    dt_tensor_release(x), dt_tensor_release(w1), dt_tensor_release(w2);
    dt_mesh_release(mesh);
    return DT_OK;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        table |= strcmp(argv[i], "--table") == 0;
        smoke |= strcmp(argv[i], "--smoke") == 0;
    }
    if (dt_cuda_device_count() == 0) {
        fprintf(stderr, "bench_gpu: no CUDA device visible: skipped\n");
        return 0;
    }
    char f[64], ref[64];
    if (dt_local_run(1, gemm_body, NULL, NULL) != DT_OK) return 1;
    bw b = {0};
    if (dt_local_run(1, bw_body, &b, NULL) != DT_OK || dt_local_run(4, bw_body, &b, NULL) != DT_OK)
        return 1;
    snprintf(ref, sizeof ref, "D2D copy %.0f GB/s", b.copy_gbs);
    snprintf(f, sizeof f, "%.0f GB/s", b.add_gbs[0]);
    row("add f32 256 MiB, 1 rank", f, ref, b.add_gbs[0] / b.copy_gbs);
    snprintf(f, sizeof f, "%.0f GB/s", b.add_gbs[1]);
    row("add f32 256 MiB, 4 ranks of one GPU", f, ref, b.add_gbs[1] / b.copy_gbs);
    snprintf(f, sizeof f, "%.0f GB/s", b.ag_gbs);
    row("all_gather 256 MiB, 4 ranks of one GPU", f, ref, b.ag_gbs / b.copy_gbs);
    snprintf(f, sizeof f, "%.0f GB/s", b.rs_gbs);
    row("reduce_scatter 256 MiB, 4 ranks of one GPU", f, ref, b.rs_gbs / b.copy_gbs);
    double ns[2];
    if (dt_local_run(1, overhead_body, ns, NULL) != DT_OK) return 1;
    snprintf(f, sizeof f, "%.0f ns/op", ns[0]);
    snprintf(ref, sizeof ref, "bare kernel %.0f ns", ns[1]);
    row("cached dispatch, add 4x4 on GPU", f, ref, ns[1] / ns[0]);
    double one = 0, four = 0;
    if (dt_local_run(1, mlp_body, &one, NULL) != DT_OK ||
        dt_local_run(4, mlp_body, &four, NULL) != DT_OK)
        return 1;
    snprintf(f, sizeof f, "%.2f ms", four * 1e3);
    snprintf(ref, sizeof ref, "unsharded %.2f ms", one * 1e3);
    row("TP MLP fwd bf16 4096x4096x16384, 4 ranks/1 GPU", f, ref, one / four);
    return 0;
}
