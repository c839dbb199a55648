/* 1F1B against interleaved 1F1B on examples/tiny_llama_pp (vocab 256, dim 64, 8 blocks, 4 heads,
 * 2 kv heads, SwiGLU hidden 160, sequence 64, batch 16) over p in-process ranks ("pp=p,dp=1"),
 * m micro-batches: the same model and batch in both pipelines, built side by side in one run,
 * their steps (dt_pipeline_step's forwards and backwards, barrier to barrier) taken in turn,
 * BENCH_REPS each after 2 warm-up steps. Prints the median step with min and max, and rank 0's
 * idle fraction of its step (dt_pipeline_stats) next to the schedule's (p - 1) / (v m + p - 1).
 * The same on a sleep model, where a stage's forward sleeps F = 8 ms and its backward 2F
 * (each chunk 1/v of that), so that the schedules are timed without the ranks needing cores of
 * this shared machine. --table prints rows for make bench: case, figure, reference (1F1B, same
 * run), ratio; an argument "sleep" or "tiny_llama" runs that model only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/tiny_llama_pp.h"
#include "autograd/autograd_impl.h"
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
    int sleep;                    /* the sleep model instead of tiny_llama */
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

/* ---- the sleep model: out = x, forward sleeping F / v ms, backward 2 F / v --------------- */
enum { SLEEP_F_US = 8000 };

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, us % 1000000 * 1000};
    nanosleep(&t, NULL);
}

static dt_status sleep_backward(void *state, dt_tensor *const *in, const bool *need,
                                dt_tensor *grad, dt_tensor **in_grad) {
    (void)in;
    sleep_us(2 * (long)(size_t)state);
    if (need[0]) dt_tensor_retain(in_grad[0] = grad);
    return need[1] ? dt_tensor_zeros_like(in[1], &in_grad[1]) : DT_OK;
}

/* user: the chunks' weight, a leaf that makes every output require grad (as parameters do) */
static dt_status sleep_stage(void *user, const dt_pipeline_stage_call *c, dt_tensor **out) {
    long us = SLEEP_F_US / (c->nchunks / c->nstages);
    sleep_us(us);
    dt_ctx *ctx = dt_mesh_ctx(c->mesh);
    dt_tensor *y = NULL, *loss = NULL;
    TRY(dt_no_grad_enter(ctx));
    dt_status st = dt_mul_scalar(c->input, 1.0, &y);
    TRY(dt_no_grad_exit(ctx));
    dt_tensor *in[2] = {c->input, *(dt_tensor **)user};
    if (st == DT_OK)
        st = dt_autograd_record_custom("sleep", in, 2, y, sleep_backward, (void *)(size_t)us, NULL);
    if (st == DT_OK && c->chunk == c->nchunks - 1) st = dt_mean(y, NULL, 0, 0, &loss);
    if (loss) dt_tensor_release(y), y = loss;
    if (st != DT_OK) dt_tensor_release(y), y = NULL;
    *out = y;
    return st;
}

static dt_status sleep_body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    char shape[32];
    snprintf(shape, sizeof shape, "pp=%d,dp=1", r->p);
    dt_mesh *mesh;
    dt_comm *world;
    TRY(dt_mesh_create_str(ctx, shape, &mesh));
    TRY(dt_ctx_world_comm(ctx, &world));
    dt_pipeline *pl[NSCHED];
    dt_tensor *w = NULL;
    for (int k = 0; k < r->nsched; k++) {
        dt_pipeline_config c = {.nmicro = r->m,
                                .schedule =
                                    nvirt[k] > 1 ? DT_PIPELINE_INTERLEAVED_1F1B : DT_PIPELINE_1F1B,
                                .nvirtual = nvirt[k],
                                .loss_reduction = DT_REDUCTION_MEAN,
                                .stage_fn = sleep_stage,
                                .user = &w};
        TRY(dt_pipeline_create(mesh, &c, &pl[k]));
    }
    int64_t shape2[2] = {r->m, 4};
    dt_placement rp = dt_replicate();
    dt_tensor *x;
    int64_t one = 1;
    TRY(dt_tensor_zeros(dt_pipeline_stage_mesh(pl[0]), DT_F32, 2, shape2, 1, &rp, &x));
    TRY(dt_tensor_zeros(dt_pipeline_stage_mesh(pl[0]), DT_F32, 1, &one, 1, &rp, &w));
    TRY(dt_tensor_set_requires_grad(w, 1));
    for (int rep = -WARMUP; rep < BENCH_REPS; rep++)
        for (int k = 0; k < r->nsched; k++) {
            TRY(dt_barrier(world));
            double t0 = bench_now();
            TRY(dt_pipeline_step(pl[k], x, NULL, NULL));
            TRY(dt_barrier(world));
            double t = bench_now() - t0;
            dt_pipeline_stats st;
            TRY(dt_pipeline_stats_get(pl[k], &st));
            TRY(dt_tensor_zero_grad(w));
            if (rep >= 0 && dt_ctx_rank(ctx) == 0)
                r->s[k][rep] = t, r->idle[k][rep] = st.idle_us / st.step_us;
        }
    dt_tensor_release(x), dt_tensor_release(w);
    for (int k = 0; k < r->nsched; k++)
        TRY(dt_pipeline_destroy(pl[k]));
    return dt_mesh_release(mesh);
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    const char *only = argc > 1 && !table ? argv[1] : NULL; /* "sleep" or "tiny_llama" */
    run runs[] = {{.p = 2, .m = 8, .nsched = 3},
                  {.p = 4, .m = 8, .nsched = 2},
                  {.p = 2, .m = 8, .nsched = 3, .sleep = 1},
                  {.p = 4, .m = 8, .nsched = 3, .sleep = 1}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        run *r = &runs[i];
        if (only && strcmp(only, r->sleep ? "sleep" : "tiny_llama")) continue;
        dt_status st[4] = {DT_OK};
        if (dt_local_run(r->p, r->sleep ? sleep_body : body, r, st) != DT_OK) {
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
                    printf("pipeline %s interleaved 1F1B v=%d p=%d m=%d step ms (min-max)\t%.2f "
                           "(%.2f-%.2f)\t%.2f (%.2f-%.2f) (1F1B)\t%.2f\n",
                           r->sleep ? "sleep model" : "tiny_llama", v, r->p, r->m, s.med * 1e3,
                           s.min * 1e3, s.max * 1e3, ref.med * 1e3, ref.min * 1e3, ref.max * 1e3,
                           s.med / ref.med);
                continue;
            }
            printf("%-10s p=%d m=%d %-16s v=%d step %7.2f ms (min %.2f max %.2f; x%.2f of 1F1B)  "
                   "rank 0 "
                   "idle %.3f (min %.3f max %.3f; schedule %.3f)\n",
                   r->sleep ? "sleep" : "tiny_llama", r->p, r->m,
                   v > 1 ? "interleaved_1f1b" : "1f1b", v, s.med * 1e3, s.min * 1e3, s.max * 1e3,
                   s.med / ref.med, idle.med, idle.min, idle.max, want);
        }
    }
    return 0;
}
