/* The intra-op pool against one thread on the same kernels: a large pointwise add, a softmax
 * and an AdamW step, each timed with 1 thread and with the pool's threads (DT_NUM_THREADS, else
 * the usable cores), with memcpy of the add's bytes as the same run's reference. Medians of
 * interleaved repetitions, with min and max. Usage: bench_pool [elements, default 4M]. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "core/pool.h"
#include "core/spin.h"
#include "ops/kernels.h"

#define NCASES 4

static float *filled(size_t n, float lo, float hi) {
    float *p = malloc(n * sizeof *p);
    if (!p) return NULL;
    uint64_t s = 0x1234567u;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = lo + (hi - lo) * (float)(s >> 40) / 16777216.0f;
    }
    return p;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)4 << 20;
    const int64_t H = 1024, R = (int64_t)(n / (size_t)H);
    n = (size_t)(R * H);
    int pool = dt_pool_share(1);
    float *a = filled(n, -1, 1), *b = filled(n, -1, 1), *y = filled(n, 0, 0);
    float *p = filled(n, -1, 1), *m = filled(n, -0.1f, 0.1f), *v = filled(n, 0, 0.01f);
    if (!a || !b || !y || !p || !m || !v) {
        fprintf(stderr, "bench_pool: out of memory for %zu elements\n", n);
        return 1;
    }
    dt_local la = {.data = a, .dtype = DT_F32, .ndim = 2, .shape = {R, H}};
    dt_local lb = la, ly = la;
    lb.data = b, ly.data = y;
    dt_optim_hyper hy = {.rule = DT_OPTIM_RULE_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    dt_optim_item it = {.param = p,
                        .grad = b,
                        .state = {m, v},
                        .numel = n,
                        .param_dtype = DT_F32,
                        .grad_dtype = DT_F32,
                        .state_dtype = DT_F32,
                        .lr = 1e-4,
                        .weight_decay = 0.1,
                        .step_size = 1e-4,
                        .bc2_sqrt = 0.5};
    static const char *names[NCASES] = {"add", "softmax", "adamw", "memcpy"};
    double t[NCASES][2][BENCH_REPS];
    for (int rep = -1; rep < BENCH_REPS; rep++) { /* rep -1 warms the pages and the pool */
        for (int c = 0; c < NCASES; c++) {
            for (int k = 0; k < 2; k++) {
                if (dt_pool_set_threads(k ? pool : 1) != DT_OK) {
                    fprintf(stderr, "bench_pool: %s\n", dt_last_error());
                    return 1;
                }
                double t0 = bench_now();
                dt_status st = DT_OK;
                switch (c) {
                case 0:
                    st = dt_cpu_binary(DT_BINARY_ADD, &la, &lb, &ly);
                    break;
                case 1:
                    st = dt_cpu_softmax(0, 1, &la, &ly);
                    break;
                case 2:
                    st = dt_cpu_optim_step(&hy, &it, 1);
                    break;
                default:
                    memcpy(y, a, n * sizeof *a);
                    break;
                }
                double dt = bench_now() - t0;
                if (st != DT_OK) {
                    fprintf(stderr, "bench_pool: %s: %s\n", names[c], dt_last_error());
                    return 1;
                }
                if (rep >= 0) t[c][k][rep] = dt;
            }
        }
    }
    printf("# bench_pool: %zu f32 elements (%lld x %lld), 1 thread vs the pool's %d (of %d "
           "usable cores); median [min, max] of %d interleaved reps; memcpy is one thread "
           "both times (the same run's reference)\n",
           n, (long long)R, (long long)H, pool, dt_usable_cores(), BENCH_REPS);
    printf("%-8s %26s %26s %8s\n", "kernel", "1 thread ms", "pool ms", "speedup");
    for (int c = 0; c < NCASES; c++) {
        bench_stat s1 = bench_stat_of(t[c][0], BENCH_REPS), sp = bench_stat_of(t[c][1], BENCH_REPS);
        printf("%-8s %8.3f [%7.3f, %7.3f] %8.3f [%7.3f, %7.3f] %7.2fx\n", names[c], s1.med * 1e3,
               s1.min * 1e3, s1.max * 1e3, sp.med * 1e3, sp.min * 1e3, sp.max * 1e3,
               s1.med / sp.med);
    }
    dt_pool_release();
    free(a), free(b), free(y), free(p), free(m), free(v);
    return 0;
}
