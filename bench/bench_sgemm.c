/* The library's packed sgemm (ops/cpu/sgemm.h) against OpenBLAS's cblas_sgemm on the GEMMs of
 * make train's model step (rows = B x T = 512 at T 64, 2048 at T 256: forward NT x W^T, backward
 * NN g W, and the weight gradients TN g^T x with g read transposed in place, as the model's
 * backward passes it) and on squares up to 2048, with 1 and 2 threads (the pool's and OpenBLAS's
 * set alike). Per shape and thread count: the median (min-max) wall ms of BENCH_REPS calls, ours
 * and OpenBLAS's interleaved call by call, and the process CPU ms per call (every thread's, so
 * OpenBLAS's yield-spinning workers count: at 2 threads they share the cores with the pool's
 * worker, so this bench's 2-thread column understates the packed sgemm inside a model step). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_util.h"
#include "core/pool.h"
#include "ops/cpu/sgemm.h"
#include "ops/kernels.h"

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

typedef struct shape {
    const char *what;
    int M, N, K, ta, tb; /* ta: A stored as (K, M), read transposed (g^T: the weight gradients) */
} shape;

int main(int argc, char **argv) {
    int only_model = argc > 1 && !strcmp(argv[1], "--model");
    static const shape shapes[] = {
        {"x Wqo^T", 512, 128, 128, 0, 1},   {"x Wkv^T", 512, 64, 128, 0, 1},
        {"x W13^T", 512, 384, 128, 0, 1},   {"h W2^T", 512, 128, 384, 0, 1},
        {"x Wout^T", 512, 256, 128, 0, 1},  {"g W13", 512, 128, 384, 0, 0},
        {"g^T x 13", 384, 128, 512, 1, 0},  {"g^T x 2", 128, 384, 512, 1, 0},
        {"g^T x qo", 128, 128, 512, 1, 0},  {"x W13^T", 2048, 384, 128, 0, 1},
        {"h W2^T", 2048, 128, 384, 0, 1},   {"g^T x 13", 384, 128, 2048, 1, 0},
        {"g^T x qo", 128, 128, 2048, 1, 0}, {"square", 256, 256, 256, 0, 0},
        {"square", 512, 512, 512, 0, 0},    {"square", 1024, 1024, 1024, 0, 0},
        {"square", 2048, 2048, 2048, 0, 0},
    };
    int nshape = (int)(sizeof shapes / sizeof shapes[0]);
    /* One GEMM through the library first: it links (and runs) the library's choice of
     * OpenBLAS's kernels for this CPU (ops/cpu/matmul.c), as every dtensor program gets. */
    float one = 1, out;
    dt_local l1 = {.data = &one, .dtype = DT_F32, .ndim = 2, .shape = {1, 1}}, lo = l1;
    lo.data = &out;
    if (dt_cpu_matmul(&l1, &l1, 0, &lo) != DT_OK) return 1;
    printf("packed sgemm (path %s) vs OpenBLAS cblas_sgemm; median (min-max) ms of %d calls "
           "interleaved; cpu: process CPU ms per call (all threads)\n",
           dt_simd_name(dt_sgemm_path()), BENCH_REPS);
    printf("%-10s %5s %5s %5s %2s %3s | %-22s %7s %6s | %-22s %7s %6s | %6s\n", "GEMM", "M", "N",
           "K", "op", "thr", "packed ms", "GFLOP/s", "cpu", "OpenBLAS ms", "GFLOP/s", "cpu",
           "speed");
    for (int s = 0; s < nshape; s++) {
        const shape *x = &shapes[s];
        if (only_model && !strcmp(x->what, "square")) continue;
        size_t na = (size_t)x->M * x->K, nb = (size_t)x->K * x->N, nc = (size_t)x->M * x->N;
        float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float)),
              *c = malloc(nc * sizeof(float));
        if (!a || !b || !c) return 1;
        for (size_t i = 0; i < na; i++)
            a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        for (size_t i = 0; i < nb; i++)
            b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
        double flop = 2.0 * x->M * x->N * x->K;
        int reps = x->M >= 1024 && x->N >= 1024 ? 5 : BENCH_REPS;
        for (int thr = 1; thr <= 2; thr++) {
            dt_pool_set_threads(thr);
            openblas_set_num_threads(thr);
            double t[2][BENCH_REPS], cpu[2] = {0, 0};
            dt_sgemm_mat ma = {a, x->ta ? 1 : x->K, x->ta ? x->M : 1},
                         mb = {b, x->tb ? 1 : x->N, x->tb ? x->K : 1};
            for (int r = -1; r < reps; r++) { /* r = -1 warms both */
                for (int w = 0; w < 2; w++) {
                    double c0 = cpu_s(), t0 = bench_now();
                    if (w == 0)
                        dt_sgemm(x->M, x->N, x->K, ma, mb, c, x->N);
                    else
                        cblas_sgemm(CblasRowMajor, x->ta ? CblasTrans : CblasNoTrans,
                                    x->tb ? CblasTrans : CblasNoTrans, x->M, x->N, x->K, 1.0f, a,
                                    x->ta ? x->M : x->K, b, x->tb ? x->K : x->N, 0.0f, c, x->N);
                    double t1 = bench_now(), c1 = cpu_s();
                    if (r >= 0) t[w][r] = t1 - t0, cpu[w] += c1 - c0;
                }
            }
            bench_stat p = bench_stat_of(t[0], reps), o = bench_stat_of(t[1], reps);
            char ps[40], os[40];
            snprintf(ps, sizeof ps, "%.3f (%.3f-%.3f)", p.med * 1e3, p.min * 1e3, p.max * 1e3);
            snprintf(os, sizeof os, "%.3f (%.3f-%.3f)", o.med * 1e3, o.min * 1e3, o.max * 1e3);
            printf("%-10s %5d %5d %5d %2s %3d | %-22s %7.1f %6.3f | %-22s %7.1f %6.3f | %5.2fx\n",
                   x->what, x->M, x->N, x->K,
                   x->ta   ? "TN"
                   : x->tb ? "NT"
                           : "NN",
                   thr, ps, flop / p.med / 1e9, cpu[0] / reps * 1e3, os, flop / o.med / 1e9,
                   cpu[1] / reps * 1e3, o.med / p.med);
        }
        free(a), free(b), free(c);
    }
    return 0;
}
