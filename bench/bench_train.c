/* One training step (forward, backward, SGD) of the model of examples/tiny_llama.c, on one
 * rank and on 4 in-process tensor-parallel ranks, next to the same model in PyTorch run in the
 * same benchmark: eager on one process, and DTensor tensor parallelism on 4 gloo processes
 * (bench/train_torch.py). PyTorch is optional: its python is DT_TORCH_PYTHON, else python3;
 * without torch the reference columns say so. Each figure is the median step time over STEPS
 * steps after 3 warm-up steps, with min and max; the two sides run one after the other, each
 * on the whole machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../examples/tiny_llama.h"

#define STEPS 20
static const tl_config cfg = {.vocab = 256, .seq = 64, .batch = 4, .dim = 64, .layers = 1,
                              .heads = 4, .kv_heads = 4, .hidden = 172};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct run {
    const char *mesh;
    int tp_dim;
    double ms[STEPS];
} run;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static dt_status sgd(dt_ctx *ctx, const tl_model *m) {
    TRY(dt_no_grad_enter(ctx));
    for (int i = 0; i < dt_params_count(m->params); i++) {
        dt_tensor *w, *d;
        TRY(dt_params_at(m->params, i, NULL, &w));
        TRY(dt_mul_scalar(dt_tensor_grad(w), -0.1, &d));
        TRY(dt_add_(w, d));
        dt_tensor_release(d);
        TRY(dt_tensor_zero_grad(w));
    }
    return dt_no_grad_exit(ctx);
}

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    dt_mesh *mesh;
    dt_comm *world;
    TRY(dt_mesh_create_str(ctx, r->mesh, &mesh));
    TRY(dt_ctx_world_comm(ctx, &world));
    tl_model m;
    tl_layout l = {.dp_dim = -1, .tp_dim = r->tp_dim, .loss_parallel = 1};
    TRY(tl_model_init(&m, mesh, &cfg, &l, 7));
    for (int s = 0; s < STEPS + 3; s++) {
        dt_tensor *tok, *tgt, *loss;
        TRY(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        TRY(dt_barrier(world));
        double t0 = now_ms();
        TRY(tl_loss(&m, tok, tgt, &loss));
        TRY(dt_backward(loss));
        TRY(sgd(ctx, &m));
        TRY(dt_barrier(world));
        if (s >= 3 && dt_ctx_rank(ctx) == 0) r->ms[s - 3] = now_ms() - t0;
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    tl_model_free(&m);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* median, min, max of n values (sorted in place). */
static void stats(double *v, int n, double out[3]) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    out[0] = v[n / 2], out[1] = v[0], out[2] = v[n - 1];
}

/* The PyTorch side: median min max, or 0 when torch is missing. */
static int torch_ms(const char *mode, int nproc, double out[3]) {
    const char *py = getenv("DT_TORCH_PYTHON");
    const char *src = getenv("DT_SOURCE_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s %s/bench/train_torch.py %s %d %d %d %d %d %d %d %d 2>/dev/null", py ? py : "python3",
             src ? src : ".", mode, cfg.vocab, cfg.seq, cfg.batch, cfg.dim, cfg.heads, cfg.hidden,
             STEPS, nproc);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    int n = fscanf(p, "%lf %lf %lf", &out[0], &out[1], &out[2]);
    return pclose(p) == 0 && n == 3;
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    run one = {.mesh = "1", .tp_dim = -1}, four = {.mesh = "4", .tp_dim = 0};
    if (dt_local_run(1, body, &one, NULL) != DT_OK || dt_local_run(4, body, &four, NULL) != DT_OK) {
        fprintf(stderr, "bench_train: %s\n", dt_last_error());
        return 1;
    }
    double d1[3], d4[3], t1[3], t4[3];
    stats(one.ms, STEPS, d1);
    stats(four.ms, STEPS, d4);
    int h1 = torch_ms("eager", 1, t1), h4 = torch_ms("dtensor", 4, t4);
    char r1[96] = "torch not found", r4[96] = "torch not found", q1[32] = "-", q4[32] = "-";
    if (h1) snprintf(r1, sizeof r1, "eager %.2f ms (%.2f-%.2f)", t1[0], t1[1], t1[2]);
    if (h4) snprintf(r4, sizeof r4, "DTensor gloo %.2f ms (%.2f-%.2f)", t4[0], t4[1], t4[2]);
    if (h1) snprintf(q1, sizeof q1, "%.2fx faster", t1[0] / d1[0]);
    if (h4) snprintf(q4, sizeof q4, "%.1fx faster", t4[0] / d4[0]);
    if (table) {
        printf("train step 1 rank\t%.2f ms (%.2f-%.2f)\t%s\t%s\n", d1[0], d1[1], d1[2], r1, q1);
        printf("train step 4 tp ranks\t%.2f ms (%.2f-%.2f)\t%s\t%s\n", d4[0], d4[1], d4[2], r4, q4);
        return 0;
    }
    printf("one training step of examples/tiny_llama (V %d, T %d, B %d, C %d, %d heads, MLP %d), "
           "median (min-max) of %d steps\n", cfg.vocab, cfg.seq, cfg.batch, cfg.dim, cfg.heads,
           cfg.hidden, STEPS);
    printf("  1 rank:        dtensor %.2f ms (%.2f-%.2f)   PyTorch %s   %s\n", d1[0], d1[1], d1[2],
           r1, q1);
    printf("  4 tp ranks:    dtensor %.2f ms (%.2f-%.2f)   PyTorch %s   %s\n", d4[0], d4[1], d4[2],
           r4, q4);
    return 0;
}
