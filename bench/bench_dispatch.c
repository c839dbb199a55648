/* Cached dispatch overhead: a pointwise add and a matmul on tiny tensors (kernel time next to
 * nothing), on 1 and 4 ranks, next to calling the bare local kernel on the same blocks; then
 * CPU matmul GFLOP/s through dispatch next to the bare GEMM call on one rank. Overhead loops
 * are timed in each rank's own CPU time (4 ranks share 2 cores here, so wall time would
 * count the other ranks' turns); the figure is rank 0's, best of 5 repetitions. Where valgrind
 * is installed, the cached add's instructions per call too: this program run under callgrind
 * with --calls N and with --calls 2N (N cached adds on 1 rank), the difference over N (start-up
 * and warm-up cancel; instruction counts do not move with the machine's load). Where
 * DT_TORCH_PYTHON names a python with torch, PyTorch DTensor's add of the same case too
 * (bench/dispatch_torch.py, found under DT_SOURCE_DIR, default "."), timed the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dtensor.h>

#include "dt_config.h"
#include "ops/kernels.h"
#if DT_HAVE_OPENBLAS
#include <cblas.h>
#endif

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double now(void) {
    return clock_s(CLOCK_MONOTONIC);
}
static double cpu_now(void) {
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

/* A 2-D f32 block of rows x cols at data. */
static dt_block f32_block(void *data, int64_t rows, int64_t cols) {
    return (dt_block){.data = data, .dtype = DT_F32, .ndim = 2, .shape = {rows, cols}};
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

typedef struct result {
    double add_ns, add_kernel_ns, mm_ns, mm_kernel_ns, add_traced_ns;
} result;

static result results[2];

static dt_status overhead_body(dt_ctx *ctx, void *arg) {
    result *r = arg;
    dt_mesh *mesh;
    TRY(dt_mesh_create(ctx, 1, (int[]){dt_ctx_size(ctx)}, NULL, &mesh));
    int64_t shape[2] = {4 * (int64_t)dt_ctx_size(ctx), 4};
    dt_placement s0[1] = {dt_shard(0)};
    float x[64] = {0}, w[16] = {0};
    for (int i = 0; i < 64; i++)
        x[i] = (float)i;
    dt_tensor *a, *b, *wt;
    TRY(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &a));
    TRY(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &b));
    int64_t ws[2] = {4, 4};
    dt_placement rep[1] = {dt_replicate()};
    TRY(dt_tensor_distribute(mesh, w, DT_F32, 2, ws, DT_COUNT_OF(rep), rep, DT_ALL_RANKS, &wt));
    dt_tensor_info ia, ib, iw;
    dt_tensor_info_get(a, &ia), dt_tensor_info_get(b, &ib), dt_tensor_info_get(wt, &iw);
    dt_block la = f32_block(ia.local_data, 4, 4), lb = f32_block(ib.local_data, 4, 4);
    dt_block lw = f32_block(iw.local_data, 4, 4);
    float out[16];
    dt_block lo = f32_block(out, 4, 4);
    const int iters = 100000;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int rep_i = 0; rep_i < 5; rep_i++) {
        double t0 = cpu_now();
        for (int i = 0; i < iters; i++) {
            dt_tensor *c;
            TRY(dt_add(a, b, &c));
            dt_tensor_release(c);
        }
        double t1 = cpu_now();
        for (int i = 0; i < iters; i++)
            dt_cpu_binary(DT_BINARY_ADD, &la, &lb, &lo);
        double t2 = cpu_now();
        for (int i = 0; i < iters; i++) {
            dt_tensor *c;
            TRY(dt_mm(a, wt, &c));
            dt_tensor_release(c);
        }
        double t3 = cpu_now();
        for (int i = 0; i < iters; i++)
            dt_cpu_matmul(&la, &lw, 0, &lo);
        double t4 = cpu_now();
        double t[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int k = 0; k < 4; k++)
            if (t[k] < best[k]) best[k] = t[k];
    }
    /* The same add with tracing on (events are appended; the buffer is reset each round). */
    double traced = 1e30;
    for (int rep_i = 0; rep_i < 5; rep_i++) {
        TRY(dt_trace_start(ctx));
        double t0 = cpu_now();
        for (int i = 0; i < iters; i++) {
            dt_tensor *c;
            TRY(dt_add(a, b, &c));
            dt_tensor_release(c);
        }
        double t = cpu_now() - t0;
        if (t < traced) traced = t;
    }
    TRY(dt_trace_stop(ctx));
    if (dt_ctx_rank(ctx) == 0)
        *r = (result){best[0] / iters * 1e9, best[1] / iters * 1e9, best[2] / iters * 1e9,
                      best[3] / iters * 1e9, traced / iters * 1e9};
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(wt);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* --calls N: N cached adds of 4x4 blocks on 1 rank after a few warm-up calls, nothing else
 * (what callgrind counts). */
static dt_status calls_body(dt_ctx *ctx, void *arg) {
    long n = *(long *)arg;
    dt_mesh *mesh;
    TRY(dt_mesh_create(ctx, 1, (int[]){1}, NULL, &mesh));
    int64_t shape[2] = {4, 4};
    dt_placement s0[1] = {dt_shard(0)};
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    dt_tensor *a, *b;
    TRY(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, s0, DT_ALL_RANKS, &a));
    TRY(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, s0, DT_ALL_RANKS, &b));
    for (long i = 0; i < n + 1000; i++) {
        dt_tensor *c;
        TRY(dt_add(a, b, &c));
        dt_tensor_release(c);
    }
    dt_tensor_release(a), dt_tensor_release(b);
    return dt_mesh_release(mesh);
}

/* The instructions callgrind counts for this program with --calls n; -1 when it cannot run. */
static double callgrind_count(long n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "valgrind --tool=callgrind --callgrind-out-file=/dev/null /proc/%d/exe --calls %ld "
             "2>&1 >/dev/null",
             (int)getpid(), n);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512];
    double got = -1;
    while (fgets(line, sizeof line, p)) {
        const char *at = strstr(line, "Collected : ");
        if (at) got = strtod(at + 12, NULL);
    }
    return pclose(p) == 0 ? got : -1;
}

/* Instructions per cached add: (count(2n) - count(n)) / n; -1 without valgrind. */
static double instructions_per_add(void) {
    if (system("valgrind --version >/dev/null 2>&1") != 0) return -1;
    const long n = 20000;
    double one = callgrind_count(n), two = callgrind_count(2 * n);
    return one < 0 || two < 0 ? -1 : (two - one) / (double)n;
}

/* PyTorch DTensor's cached 4x4 add and plain torch's add, ns per call in the thread's CPU time
 * (best of 5), from bench/dispatch_torch.py; 0 when it did not run (why says why). */
static int torch_add(double *dtensor_ns, double *torch_ns, char *why, size_t cap) {
    const char *py = getenv("DT_TORCH_PYTHON"), *src = getenv("DT_SOURCE_DIR");
    if (!py || !*py) {
        snprintf(why, cap, "DT_TORCH_PYTHON unset");
        return 0;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s/bench/dispatch_torch.py 2>/dev/null", py, src ? src : ".");
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, cap, "could not start %s", py);
        return 0;
    }
    int got = fscanf(p, "%lf %lf", dtensor_ns, torch_ns);
    int rc = pclose(p);
    if (rc != 0 || got != 2) {
        snprintf(why, cap, "%s/bench/dispatch_torch.py failed (exit status %d)", src ? src : ".",
                 rc);
        return 0;
    }
    return 1;
}

static double gflops[2];

static dt_status gemm_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int n = 1024, ranks = dt_ctx_size(ctx);
    dt_mesh *mesh;
    TRY(dt_mesh_create(ctx, 1, &ranks, NULL, &mesh));
    int64_t as[2] = {n, n}, bs[2] = {n, n};
    dt_placement s0[1] = {dt_shard(0)}, rep[1] = {dt_replicate()};
    dt_tensor *a, *b, *c;
    TRY(dt_tensor_zeros(mesh, DT_F32, 2, as, DT_COUNT_OF(s0), s0, &a));
    TRY(dt_tensor_zeros(mesh, DT_F32, 2, bs, DT_COUNT_OF(rep), rep, &b));
    dt_tensor_info ia, ib;
    dt_tensor_info_get(a, &ia), dt_tensor_info_get(b, &ib);
    for (size_t i = 0; i < ia.local_numel; i++)
        ((float *)ia.local_data)[i] = 1.0f / (float)(i % 7 + 1);
    for (size_t i = 0; i < ib.local_numel; i++)
        ((float *)ib.local_data)[i] = 1.0f / (float)(i % 5 + 1);
    float *out = malloc(ia.local_numel * sizeof(float));
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    double best_d = 1e30, best_k = 1e30;
    int64_t m = ia.local_shape[0];
    for (int r = 0; r < 3; r++) {
        TRY(dt_barrier(world));
        double t0 = now();
        TRY(dt_mm(a, b, &c));
        double t1 = now();
        dt_tensor_release(c);
        TRY(dt_barrier(world));
        double t2 = now();
#if DT_HAVE_OPENBLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, n, n, 1.0f, ia.local_data, n,
                    ib.local_data, n, 0.0f, out, n);
#else
        dt_block la = f32_block(ia.local_data, m, n), lb = f32_block(ib.local_data, n, n);
        dt_block lo = f32_block(out, m, n);
        dt_cpu_matmul(&la, &lb, 0, &lo);
#endif
        double t3 = now();
        if (t1 - t0 < best_d) best_d = t1 - t0;
        if (t3 - t2 < best_k) best_k = t3 - t2;
    }
    if (dt_ctx_rank(ctx) == 0) {
        gflops[0] = 2.0 * (double)m * n * n / best_d / 1e9;
        gflops[1] = 2.0 * (double)m * n * n / best_k / 1e9;
    }
    free(out);
    dt_tensor_release(a), dt_tensor_release(b);
    dt_mesh_release(mesh);
    return DT_OK;
}

int main(int argc, char **argv) {
    /* --table: rows of "case<TAB>figure<TAB>reference<TAB>ratio" for make bench */
    if (argc > 2 && !strcmp(argv[1], "--calls")) {
        long n = strtol(argv[2], NULL, 10);
        if (dt_local_run(1, calls_body, &n, NULL) != DT_OK) {
            fprintf(stderr, "bench failed: %s\n", dt_last_error());
            return 1;
        }
        return 0;
    }
    int table = argc > 1 && !strcmp(argv[1], "--table");
    if (!table) {
        printf("cached dispatch overhead (f32 4x4 blocks per rank, best of 5 x 100000 calls)\n");
        printf("%-8s %-6s %12s %12s %12s\n", "ranks", "op", "dispatch ns", "kernel ns",
               "overhead ns");
    }
    int ranks[2] = {1, 4};
    for (int i = 0; i < 2; i++) {
        if (dt_local_run(ranks[i], overhead_body, &results[i], NULL) != DT_OK) {
            fprintf(stderr, "bench failed: %s\n", dt_last_error());
            return 1;
        }
        result *r = &results[i];
        if (table) {
            printf("cached dispatch add, %d rank(s)\t%.0f ns (overhead %.0f ns)\tbare kernel %.0f "
                   "ns\t%.1fx\n",
                   ranks[i], r->add_ns, r->add_ns - r->add_kernel_ns, r->add_kernel_ns,
                   r->add_ns / r->add_kernel_ns);
            printf("cached dispatch mm, %d rank(s)\t%.0f ns (overhead %.0f ns)\tbare kernel %.0f "
                   "ns\t%.1fx\n",
                   ranks[i], r->mm_ns, r->mm_ns - r->mm_kernel_ns, r->mm_kernel_ns,
                   r->mm_ns / r->mm_kernel_ns);
            printf("cached dispatch add traced, %d rank(s)\t%.0f ns\tuntraced %.0f ns\t%.2fx\n",
                   ranks[i], r->add_traced_ns, r->add_ns, r->add_traced_ns / r->add_ns);
            continue;
        }
        printf("%-8d %-6s %12.0f %12.0f %12.0f\n", ranks[i], "add", r->add_ns, r->add_kernel_ns,
               r->add_ns - r->add_kernel_ns);
        printf("%-8d %-6s %12.0f %12.0f %12.0f\n", ranks[i], "mm", r->mm_ns, r->mm_kernel_ns,
               r->mm_ns - r->mm_kernel_ns);
        printf("%-8d %-6s %12.0f %12s %12s  (tracing on)\n", ranks[i], "add", r->add_traced_ns, "",
               "");
    }
    double instr = instructions_per_add();
    if (table && instr > 0)
        printf("cached dispatch add, instructions per call (callgrind), 1 rank\t%.0f "
               "instructions\t-\t-\n",
               instr);
    else if (instr > 0)
        printf("cached add, 1 rank: %.0f instructions per call (callgrind, (2N - N calls) / N)\n",
               instr);
    else if (!table)
        printf("cached add instructions per call: - (valgrind not found)\n");
    double pt_dt, pt_plain;
    char why[256];
    if (torch_add(&pt_dt, &pt_plain, why, sizeof why)) {
        if (table)
            printf("cached dispatch add, 1 rank, vs PyTorch DTensor\t%.0f ns\tPyTorch DTensor "
                   "%.0f ns (plain torch %.0f ns)\t%.1fx\n",
                   results[0].add_ns, pt_dt, pt_plain, pt_dt / results[0].add_ns);
        else
            printf("PyTorch DTensor add, 1 rank: %.0f ns per call (plain torch %.0f ns); dtensor's "
                   "%.0f ns is %.1fx faster\n",
                   pt_dt, pt_plain, results[0].add_ns, pt_dt / results[0].add_ns);
    } else if (!table) {
        printf("PyTorch DTensor add: not run (%s)\n", why);
    }
    if (dt_local_run(1, gemm_body, NULL, NULL) != DT_OK) {
        fprintf(stderr, "bench failed: %s\n", dt_last_error());
        return 1;
    }
    const char *gemm = DT_HAVE_OPENBLAS ? "OpenBLAS sgemm" : "built-in blocked loop";
    if (table) {
        printf("mm 1024^3 f32 through dispatch\t%.1f GFLOP/s\tbare %s %.1f GFLOP/s\t%.0f%%\n",
               gflops[0], gemm, gflops[1], 100 * gflops[0] / gflops[1]);
        return 0;
    }
    printf("\nCPU matmul 1024x1024x1024 f32 (%s), 1 rank, best of 3\n", gemm);
    printf("%14s %14s %7s\n", "dispatch GF/s", "bare GF/s", "ratio");
    printf("%14.1f %14.1f %6.0f%%\n", gflops[0], gflops[1], 100 * gflops[0] / gflops[1]);
    return 0;
}
