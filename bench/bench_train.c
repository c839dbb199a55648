/* make train's configurations (examples/train.c's defaults: the model of examples/tiny_llama.c
 * with vocab 256, dim 128, 2 layers, 4 query and 2 kv heads, SwiGLU hidden 384, sequence 64,
 * batch 8, AdamW lr 3e-3 betas 0.9/0.95, on the bytes of the GPL-3 text) on 1 rank and 4
 * in-process ranks as dp=4 FSDP units, dp=4 DDP, tp=4 with sequence and loss parallel and
 * dp=2 x tp=2 FSDP units + TP, each next to the same model in PyTorch run by the same bench
 * right after it (bench/train_torch.py: eager on one process; DDP, FSDP2, TP with
 * SequenceParallel and loss_parallel, FSDP2 x TP on 4 gloo processes, parallelized as
 * torchtitan does). Per configuration and side: the median (min-max) step time over STEPS
 * steps after WARMUP, tokens/s, collectives per step (dtensor: rank 0's dt_comm_stats over a
 * step, every kind; PyTorch: rank 0's gloo collectives over a step, from torch.profiler), and
 * the loss curve's largest relative distance from the same side's one-rank curve.
 *
 * PyTorch runs only when DT_TORCH_PYTHON names a python with torch (the PyTorch columns say
 * "-" otherwise); DT_SOURCE_DIR locates bench/train_torch.py (default "."). BENCH_QUICK=1
 * (make bench QUICK=1): fewer steps. --table prints make bench's rows; --only NAME runs one
 * configuration (e.g. --only "1 rank, small model"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../examples/tiny_llama.h"

enum { WARMUP = 2, MAXSTEPS = 20, NCONF = 6 };
static const tl_config cfg = {.vocab = 256, .seq = 64, .batch = 8, .dim = 128, .layers = 2,
                              .heads = 4, .kv_heads = 2, .hidden = 384};
/* A small model (one block, dim 64): where per-op overhead weighs most */
static const tl_config small = {.vocab = 256, .seq = 64, .batch = 4, .dim = 64, .layers = 1,
                                .heads = 4, .kv_heads = 4, .hidden = 172};
static const char *text_path = "/usr/share/common-licenses/GPL-3";

typedef struct conf {
    const char *name, *mesh, *torch_mode, *torch_name;
    int ranks;
    tl_layout l;
    const tl_config *model; /* NULL: make train's */
} conf;

static const tl_config *model_of(const conf *c) { return c->model ? c->model : &cfg; }

static const conf confs[NCONF] = {
    {"1 rank", "1", "eager", "eager, 1 process", 1, {.dp_dim = -1, .tp_dim = -1}, NULL},
    {"dp=4 FSDP", "dp=4", "fsdp", "FSDP2", 4,
     {.dp_dim = 0, .tp_dim = -1, .fsdp = 1, .fsdp_units = 1}, NULL},
    {"dp=4 DDP", "dp=4", "ddp", "DDP", 4, {.dp_dim = 0, .tp_dim = -1}, NULL},
    {"tp=4 SP", "tp=4", "tp", "TP + SP + loss parallel", 4,
     {.dp_dim = -1, .tp_dim = 0, .sequence_parallel = 1, .loss_parallel = 1}, NULL},
    {"dp=2 x tp=2 FSDP+TP", "dp=2,tp=2", "fsdp_tp", "FSDP2 x TP (2x2)", 4,
     {.dp_dim = 0, .tp_dim = 1, .fsdp = 1, .fsdp_units = 1, .sequence_parallel = 1,
      .loss_parallel = 1},
     NULL},
    {"1 rank, small model", "1", "eager", "eager, 1 process", 1, {.dp_dim = -1, .tp_dim = -1},
     &small},
};

/* One side's result for one configuration. */
typedef struct result {
    int ok;
    double ms[3]; /* median, min, max */
    long long colls;
    float loss[WARMUP + MAXSTEPS];
} result;

typedef struct run {
    const conf *c;
    int steps;
    const unsigned char *text;
    size_t n;
    double ms[MAXSTEPS];
    result *r;
} run;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    dt_comm *world;
    TRY(dt_mesh_create_str(ctx, r->c->mesh, &mesh));
    TRY(dt_ctx_world_comm(ctx, &world));
    tl_model m;
    TRY(tl_model_init(&m, mesh, model_of(r->c), &r->c->l, 1234));
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01};
    dt_optim *opt;
    TRY(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    for (int s = 0; s < WARMUP + r->steps; s++) {
        dt_tensor *tok, *tgt, *loss;
        TRY(tl_batch(&m, r->text, r->n, s, &tok, &tgt));
        TRY(dt_barrier(world));
        TRY(dt_comm_stats_reset(ctx));
        double t0 = now_ms();
        TRY(tl_loss(&m, tok, tgt, &loss));
        TRY(dt_backward(loss));
        TRY(dt_optim_step(opt));
        TRY(dt_optim_zero_grad(opt));
        double t1 = now_ms();
        dt_comm_stats cs;
        TRY(dt_comm_stats_get(ctx, &cs));
        float v;
        TRY(dt_tensor_full_tensor(loss, &v, sizeof v));
        if (rank == 0) {
            if (s >= WARMUP) r->ms[s - WARMUP] = t1 - t0;
            if (s == WARMUP) {
                r->r->colls = 0;
                for (int k = 0; k < DT_COLL_KIND_COUNT; k++)
                    r->r->colls += (long long)cs.calls[k];
            }
            r->r->loss[s] = v;
        }
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    TRY(dt_optim_destroy(opt));
    tl_model_free(&m);
    return dt_mesh_release(mesh);
}

static void stats(double *v, int n, double out[3]) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    out[0] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, out[1] = v[0], out[2] = v[n - 1];
}

static void run_dtensor(const conf *c, int steps, const unsigned char *text, size_t n,
                        result *out) {
    run r = {.c = c, .steps = steps, .text = text, .n = n, .r = out};
    if (dt_local_run(c->ranks, body, &r, NULL) != DT_OK) {
        fprintf(stderr, "bench_train: %s: %s\n", c->name, dt_last_error());
        return;
    }
    stats(r.ms, steps, out->ms);
    out->ok = 1;
}

/* The PyTorch side: one line "median min max collectives loss...", 0 when it fails. */
static void run_torch(const char *py, const conf *c, int steps, int have_text, result *out) {
    const char *src = getenv("DT_SOURCE_DIR");
    const tl_config *mc = model_of(c);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s %s/bench/train_torch.py %s %d %d %d %d %d %d %d %d %d %d %s 2>/dev/null", py,
             src ? src : ".", c->torch_mode, mc->vocab, mc->seq, mc->batch, mc->dim, mc->layers,
             mc->heads, mc->kv_heads, mc->hidden, steps, c->ranks, have_text ? text_path : "");
    FILE *p = popen(cmd, "r");
    if (!p) return;
    int got = fscanf(p, "%lf %lf %lf %lld", &out->ms[0], &out->ms[1], &out->ms[2], &out->colls);
    /* train_torch.py runs one more step than it times: the one it counts collectives on */
    int nloss = 0;
    for (; nloss < WARMUP + 1 + steps && nloss < WARMUP + MAXSTEPS; nloss++)
        if (fscanf(p, "%f", &out->loss[nloss]) != 1) break;
    out->ok = pclose(p) == 0 && got == 4 && nloss > 0;
}

/* The largest relative distance of a loss curve from the one-rank curve (n steps). */
static double loss_dist(const result *a, const result *one, int n) {
    double d = 0;
    for (int s = 0; s < n; s++)
        d = fmax(d, fabs((double)a->loss[s] - one->loss[s]) / fabs((double)one->loss[s]));
    return d;
}

static double load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    const char *only = argc > 2 && !strcmp(argv[1], "--only") ? argv[2] : NULL;
    const char *quick = getenv("BENCH_QUICK");
    int steps = quick && *quick && strcmp(quick, "0") ? 5 : 10;
    const char *py = getenv("DT_TORCH_PYTHON");
    if (py && !*py) py = NULL;
    unsigned char *text = NULL;
    size_t n = 0;
    FILE *f = fopen(text_path, "rb");
    if (f) {
        text = malloc(1 << 20);
        n = text ? fread(text, 1, 1 << 20, f) : 0;
        fclose(f);
        if (n <= (size_t)cfg.seq + 1) free(text), text = NULL, n = 0;
    }
    double load_start = load1();
    result dt[NCONF] = {{0}}, pt[NCONF] = {{0}};
    for (int i = 0; i < NCONF; i++) { /* each configuration: dtensor, then PyTorch */
        if (only && strcmp(only, confs[i].name)) continue;
        run_dtensor(&confs[i], steps, text, n, &dt[i]);
        if (py) run_torch(py, &confs[i], steps, text != NULL, &pt[i]);
    }
    double load_end = load1();
    free(text);
    if (!table)
        printf("make train's model (V %d, C %d, %d layers, %d heads / %d kv, hidden %d, T %d, "
               "B %d, AdamW) on %s; the last row: the small model (V 256, C 64, 1 layer, 4 heads, "
               "hidden 172, T 64, B 4); median (min-max) of %d steps after %d warm-up; load "
               "average %.2f at start, %.2f at end\n",
               cfg.vocab, cfg.dim, cfg.layers, cfg.heads, cfg.kv_heads, cfg.hidden, cfg.seq,
               cfg.batch, text ? text_path : "synthetic tokens", steps, WARMUP, load_start,
               load_end);
    if (!table)
        printf("%-20s %-26s %6s %9s %9s | %-26s %6s %9s | %-8s\n", "configuration",
               "dtensor step ms", "coll", "vs 1 rank", "loss dist", "PyTorch step ms", "coll",
               "loss dist", "dt/torch");
    int fail = 0;
    for (int i = 0; i < NCONF; i++) {
        const conf *c = &confs[i];
        char d[64] = "failed", p[96] = "-", ratio[32] = "-", pcoll[16] = "-", pdist[16] = "-";
        char dcoll[16] = "-", ddist[16] = "-", vs1[16] = "-";
        if (only && strcmp(only, c->name)) continue;
        if (!dt[i].ok) fail = 1;
        if (dt[i].ok) {
            snprintf(d, sizeof d, "%.1f (%.1f-%.1f)", dt[i].ms[0], dt[i].ms[1], dt[i].ms[2]);
            snprintf(dcoll, sizeof dcoll, "%lld", dt[i].colls);
            if (dt[0].ok && !c->model) {
                snprintf(vs1, sizeof vs1, "%.2fx", dt[i].ms[0] / dt[0].ms[0]);
                snprintf(ddist, sizeof ddist, "%.1e", loss_dist(&dt[i], &dt[0], WARMUP + steps));
            }
        }
        if (py && !pt[i].ok) snprintf(p, sizeof p, "failed");
        if (pt[i].ok) {
            snprintf(p, sizeof p, "%.1f (%.1f-%.1f)", pt[i].ms[0], pt[i].ms[1], pt[i].ms[2]);
            snprintf(pcoll, sizeof pcoll, "%lld", pt[i].colls);
            if (pt[0].ok && !c->model)
                snprintf(pdist, sizeof pdist, "%.1e", loss_dist(&pt[i], &pt[0], WARMUP + steps));
            if (dt[i].ok) snprintf(ratio, sizeof ratio, "%.2fx", pt[i].ms[0] / dt[i].ms[0]);
        }
        if (table) {
            double tokens = (double)model_of(c)->batch * model_of(c)->seq;
            printf("train step %s (%s)\t%s ms, %.0f tokens/s, %s coll/step, %s of 1 rank\t",
                   c->name, c->model ? "V 256, C 64, 1 layer, T 64, B 4" : "make train", d,
                   dt[i].ok ? tokens / dt[i].ms[0] * 1e3 : 0.0, dcoll, vs1);
            if (pt[i].ok)
                printf("PyTorch %s %s ms, %s coll/step\t%s\n", c->torch_name, p, pcoll, ratio);
            else
                printf("%s\t-\n",
                       py ? "PyTorch failed" : "PyTorch not run (DT_TORCH_PYTHON unset)");
            continue;
        }
        printf("%-20s %-26s %6s %9s %9s | %-26s %6s %9s | %-8s\n", c->name, d, dcoll, vs1, ddist,
               p, pcoll, pdist, ratio);
    }
    if (!table && !py)
        printf("(PyTorch not run: set DT_TORCH_PYTHON to a python with torch)\n");
    if (!table)
        printf("dt/torch: PyTorch's step time over dtensor's (throughput ratio); loss dist: the "
               "largest relative distance of the loss curve from the same side's 1-rank curve\n");
    return fail;
}
