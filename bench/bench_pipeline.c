/* 1F1B against interleaved 1F1B on examples/tiny_llama_pp (vocab 256, dim 64, 8 blocks, 4 heads,
 * 2 kv heads, SwiGLU hidden 160, sequence 64, batch 16) over p in-process ranks ("pp=p,dp=1"),
 * m micro-batches: the same model and batch in both pipelines, built side by side in one run,
 * their steps (dt_pipeline_step's forwards and backwards, barrier to barrier) taken in turn,
 * BENCH_REPS each after 2 warm-up steps. Prints the median step with min and max, and rank 0's
 * idle fraction of its step (dt_pipeline_stats) next to the schedule's (p - 1) / (v m + p - 1).
 * --table prints rows for make bench: case, figure, reference (1F1B, same run), ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/tiny_llama_pp.h"
#include "bench_util.h"

enum { WARMUP = 2, NSCHED = 3 };
static const tl_config cfg = {.vocab = 256,
                              .seq = 64,
                              .batch = 16,
                              .dim = 64,
                              .layers = 8,
                              .heads = 4,
                              .kv_heads = 2,
                              .hidden = 160};
static const int nvirt[NSCHED] = {1, 2, 4}; /* 1: plain 1F1B, the reference */

typedef struct run {
    int p, m, nsched;             /* the first nsched of nvirt (v p chunks of at least one block) */
    double s[NSCHED][BENCH_REPS]; /* step seconds */
    double idle[NSCHED][BENCH_REPS]; /* rank 0's idle fraction */
} run;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    char shape[32];
    snprintf(shape, sizeof shape, "pp=%d,dp=1", r->p);
    dt_mesh *mesh;
    dt_comm *world;
    TRY(dt_mesh_create_str(ctx, shape, &mesh));
    TRY(dt_ctx_world_comm(ctx, &world));
    tl_layout l = {.dp_dim = -1, .tp_dim = -1};
    tl_pp pp[NSCHED];
    dt_optim *opt[NSCHED]; /* only to drop the gradients between steps */
    dt_adamw_options adamw = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    dt_tensor *tok[NSCHED], *tgt[NSCHED];
    for (int k = 0; k < r->nsched; k++) {
        dt_pipeline_schedule sc = nvirt[k] > 1 ? DT_PIPELINE_INTERLEAVED_1F1B : DT_PIPELINE_1F1B;
        TRY(tl_pp_init_virtual(&pp[k], mesh, 0, r->m, sc, nvirt[k], &cfg, &l, 7));
        TRY(tl_pp_batch(&pp[k], NULL, 0, 0, &tok[k], &tgt[k]));
        TRY(tl_pp_adamw(&pp[k], &adamw, &opt[k]));
    }
    for (int rep = -WARMUP; rep < BENCH_REPS; rep++)
        for (int k = 0; k < r->nsched; k++) {
            TRY(dt_barrier(world));
            double t0 = bench_now();
            TRY(tl_pp_step(&pp[k], tok[k], tgt[k], NULL));
            TRY(dt_barrier(world));
            double t = bench_now() - t0;
            dt_pipeline_stats st;
            TRY(dt_pipeline_stats_get(pp[k].pipe, &st));
            TRY(dt_optim_zero_grad(opt[k])); /* not timed */
            if (rep >= 0 && dt_ctx_rank(ctx) == 0)
                r->s[k][rep] = t, r->idle[k][rep] = st.idle_us / st.step_us;
        }
    for (int k = 0; k < r->nsched; k++) {
        dt_tensor_release(tok[k]), dt_tensor_release(tgt[k]);
        TRY(dt_optim_destroy(opt[k]));
        tl_pp_free(&pp[k]);
    }
    return dt_mesh_release(mesh);
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    run runs[] = {{.p = 2, .m = 8, .nsched = 3}, {.p = 4, .m = 8, .nsched = 2}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        run *r = &runs[i];
        dt_status st[4] = {DT_OK};
        if (dt_local_run(r->p, body, r, st) != DT_OK) {
            fprintf(stderr, "bench_pipeline p=%d: %s\n", r->p, dt_last_error());
            return 1;
        }
        bench_stat ref = bench_stat_of(r->s[0], BENCH_REPS);
        for (int k = 0; k < r->nsched; k++) {
            bench_stat s = bench_stat_of(r->s[k], BENCH_REPS),
                       idle = bench_stat_of(r->idle[k], BENCH_REPS);
            int v = nvirt[k];
            double want = (double)(r->p - 1) / (v * r->m + r->p - 1);
            if (table) {
                if (v > 1)
                    printf("pipeline interleaved 1F1B v=%d p=%d m=%d step ms (min-max)\t%.2f "
                           "(%.2f-%.2f)\t%.2f (%.2f-%.2f) (1F1B)\t%.2f\n",
                           v, r->p, r->m, s.med * 1e3, s.min * 1e3, s.max * 1e3, ref.med * 1e3,
                           ref.min * 1e3, ref.max * 1e3, s.med / ref.med);
                continue;
            }
            printf("p=%d m=%d %-20s v=%d step %7.2f ms (min %.2f max %.2f; x%.2f of 1F1B)  rank 0 "
                   "idle %.3f (min %.3f max %.3f; schedule %.3f)\n",
                   r->p, r->m, v > 1 ? "interleaved_1f1b" : "1f1b", v, s.med * 1e3, s.min * 1e3,
                   s.max * 1e3, s.med / ref.med, idle.med, idle.min, idle.max, want);
        }
    }
    return 0;
}
