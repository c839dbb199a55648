/* Attention's forward + backward on one rank's CPU: the flash kernels (dt_cpu_sdpa,
 * dt_cpu_sdpa_backward) next to the GEMM kernels they replaced (attention_gemm_ref.c, kept here
 * only), causal, f32, make train's heads (4 query / 2 kv, head dim 32), batch 4, at T = 64, 256
 * and 1024. Median (min-max) wall ms of interleaved repeats, the median CPU ms of the process
 * (every thread: on a loaded machine the fairer figure, and OpenBLAS's threads count), and the
 * largest difference between the two outputs. --reps N sets the repeats (default 11; T = 1024
 * takes a third). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_gemm_ref.h"
#include "bench_util.h"
#include "core/pool.h"
#include "ops/kernels.h"

enum { B = 4, HQ = 4, HKV = 2, D = 32, NT = 3 };

static dt_local mk(int64_t h, int64_t T, int64_t cols, float **buf, unsigned seed) {
    size_t n = (size_t)(B * h * T * (cols ? cols : 1)); /* cols 0: the lse rows */
    *buf = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        (*buf)[i] = (float)(seed >> 8) / (float)(1u << 24) * 2 - 1;
    }
    dt_local t = {.data = *buf, .dtype = DT_F32, .ndim = cols ? 4 : 3};
    int64_t s[4] = {B, h, T, cols};
    memcpy(t.shape, s, sizeof s);
    return t;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef dt_status (*fwd_fn)(const dt_local *, const dt_local *, const dt_local *, int, double,
                            dt_local *, dt_local *);
typedef dt_status (*bwd_fn)(const dt_local *, const dt_local *, const dt_local *, const dt_local *,
                            const dt_local *, int, double, dt_local *, dt_local *, dt_local *);

/* The flash kernels on heads-first blocks, as the reference takes them. */
static dt_status cpu_fwd(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                         double scale, dt_local *out, dt_local *lse) {
    return dt_cpu_sdpa(q, k, v, causal, 0, DT_SDPA_ALL_HEADS, scale, out, lse);
}
static dt_status cpu_bwd(const dt_local *g, const dt_local *q, const dt_local *k, const dt_local *v,
                         const dt_local *lse, int causal, double scale, dt_local *dq, dt_local *dk,
                         dt_local *dv) {
    return dt_cpu_sdpa_backward(g, q, k, v, lse, causal, 0, DT_SDPA_ALL_HEADS, scale, dq, dk, dv);
}

int main(int argc, char **argv) {
    int reps = argc > 2 && !strcmp(argv[1], "--reps") ? atoi(argv[2]) : 11;
    if (reps < 1 || reps > 256) reps = 11;
    const int64_t Ts[NT] = {64, 256, 1024};
    printf("attention forward + backward, CPU f32, causal, B %d, heads %d / %d kv, head dim %d, "
           "%d pool thread(s); median (min-max) ms of interleaved repeats\n",
           B, HQ, HKV, D, dt_parallel_threads());
    printf("%6s | %-26s | %-26s | %7s | %-17s | %s\n", "T", "GEMM kernels (before)",
           "flash kernels", "speedup", "CPU ms GEMM/flash", "max |diff| out, dq");
    for (int ti = 0; ti < NT; ti++) {
        int64_t T = Ts[ti];
        int n = T >= 1024 ? (reps + 2) / 3 : reps;
        float *buf[2][9];
        dt_local t[2][9]; /* q, k, v, g, out, lse, dq, dk, dv per side */
        for (int s = 0; s < 2; s++) {
            t[s][0] = mk(HQ, T, D, &buf[s][0], 1), t[s][1] = mk(HKV, T, D, &buf[s][1], 2);
            t[s][2] = mk(HKV, T, D, &buf[s][2], 3), t[s][3] = mk(HQ, T, D, &buf[s][3], 4);
            t[s][4] = mk(HQ, T, D, &buf[s][4], 5), t[s][5] = mk(HQ, T, 0, &buf[s][5], 6);
            t[s][6] = mk(HQ, T, D, &buf[s][6], 7), t[s][7] = mk(HKV, T, D, &buf[s][7], 8);
            t[s][8] = mk(HKV, T, D, &buf[s][8], 9);
        }
        fwd_fn fwd[2] = {ref_gemm_sdpa, cpu_fwd};
        bwd_fn bwd[2] = {ref_gemm_sdpa_backward, cpu_bwd};
        double ms[2][256], cpu[2][256], scale = 1.0 / sqrt((double)D);
        for (int r = 0; r < n + 1; r++) /* the first round warms up */
            for (int s = 0; s < 2; s++) {
                dt_local *x = t[s];
                double t0 = bench_now(), c0 = cpu_now();
                dt_status st = fwd[s](&x[0], &x[1], &x[2], 1, scale, &x[4], &x[5]);
                if (st == DT_OK)
                    st = bwd[s](&x[3], &x[0], &x[1], &x[2], &x[5], 1, scale, &x[6], &x[7], &x[8]);
                if (st != DT_OK) {
                    fprintf(stderr, "bench_attention: %s\n", dt_last_error());
                    return 1;
                }
                if (r)
                    ms[s][r - 1] = (bench_now() - t0) * 1e3, cpu[s][r - 1] = (cpu_now() - c0) * 1e3;
            }
        double dout = 0, ddq = 0;
        size_t nq = (size_t)(B * HQ * T * D);
        for (size_t i = 0; i < nq; i++) {
            dout = fmax(dout, fabs(buf[0][4][i] - buf[1][4][i]));
            ddq = fmax(ddq, fabs(buf[0][6][i] - buf[1][6][i]));
        }
        bench_stat a = bench_stat_of(ms[0], n), f = bench_stat_of(ms[1], n);
        bench_stat ac = bench_stat_of(cpu[0], n), fc = bench_stat_of(cpu[1], n);
        char ca[64], cf[64];
        snprintf(ca, sizeof ca, "%.2f (%.2f-%.2f)", a.med, a.min, a.max);
        snprintf(cf, sizeof cf, "%.2f (%.2f-%.2f)", f.med, f.min, f.max);
        char cc[64];
        snprintf(cc, sizeof cc, "%.1f / %.1f", ac.med, fc.med);
        printf("%6lld | %-26s | %-26s | %6.2fx | %-17s | %.2g, %.2g (%d repeats)\n", (long long)T,
               ca, cf, a.med / f.med, cc, dout, ddq, n);
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 9; i++)
                free(buf[s][i]);
    }
    return 0;
}
