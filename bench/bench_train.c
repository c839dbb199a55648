/* make train's configurations (examples/train.c's defaults: the model of examples/tiny_llama.c
 * with vocab 256, dim 128, 2 layers, 4 query and 2 kv heads, SwiGLU hidden 384, sequence 64,
 * batch 8, AdamW lr 3e-3 betas 0.9/0.95, on the bytes of the GPL-3 text) on 1 rank and 4
 * in-process ranks as dp=4 FSDP units, dp=4 DDP, tp=4 with sequence and loss parallel and
 * dp=2 x tp=2 FSDP units + TP, each next to the same model in PyTorch run by the same bench
 * right after it (bench/train_torch.py: eager on one process; DDP, FSDP2, TP with
 * SequenceParallel and loss_parallel, FSDP2 x TP on 4 gloo processes, parallelized as
 * torchtitan does). Per configuration and side: the median (min-max) step time over STEPS
 * steps after WARMUP (a step runs from the first rank's start to the last rank's end),
 * tokens/s, collectives per step (dtensor: rank 0's dt_comm_stats over a step, every kind;
 * PyTorch: rank 0's gloo collectives over a step, from torch.profiler), and
 * the loss curve's largest relative distance from the same side's one-rank curve. Also per
 * configuration: the model's GFLOP/s, its fraction of the machine's peak (a 2048^3 OpenBLAS
 * sgemm on all cores, best of 3 before each configuration, the best of the run; the steps
 * start once OpenBLAS's threads, polling after it, have gone to sleep), and rank
 * threads' minor page faults per step (getrusage RUSAGE_THREAD, the most of any rank, mean
 * over the timed steps; ranks that outnumber the cores share a thread, and count together).
 * Per side, the host's steal time over that side's run (a share of the CPUs' time, from
 * /proc/stat): on a shared virtual machine a row with much of it says
 * the host, not the code, set its time.
 * Model FLOPs per step: 6 x P x B x T (P: every parameter, embedding and output included;
 * forward 2, backward 4 per parameter and token) plus 12 x L x T x C x B x T for attention's
 * two T x T products (forward and backward, causal counted as full). When the PyTorch side
 * fails, its reason (the last line it wrote to stderr) is printed.
 *
 * PyTorch runs only when DT_TORCH_PYTHON names a python with torch (the PyTorch columns say
 * "-" otherwise); DT_SOURCE_DIR locates bench/train_torch.py (default "."). BENCH_QUICK=1
 * (make bench QUICK=1): fewer steps. --table prints make bench's rows; --only NAME runs one
 * configuration (e.g. --only "1 rank, small model"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../examples/cpu_quiet.h"
#include "../examples/tiny_llama.h"
#include "dt_config.h"
#if DT_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* 4 warm-up steps: from the fifth on, a rank's arena holds every block a step asks for (none
 * faults a page in), and PyTorch's allocator is as warm (train_torch.py warms up as long). */
enum { WARMUP = 4, MAXSTEPS = 20, NCONF = 7 };
static const tl_config cfg = {.vocab = 256,
                              .seq = 64,
                              .batch = 8,
                              .dim = 128,
                              .layers = 2,
                              .heads = 4,
                              .kv_heads = 2,
                              .hidden = 384};
/* make train's model at sequence 256: attention's T x T products and every GEMM's rows grow */
static const tl_config long_seq = {.vocab = 256,
                                   .seq = 256,
                                   .batch = 8,
                                   .dim = 128,
                                   .layers = 2,
                                   .heads = 4,
                                   .kv_heads = 2,
                                   .hidden = 384};
/* A small model (one block, dim 64): where per-op overhead weighs most */
static const tl_config small = {.vocab = 256,
                                .seq = 64,
                                .batch = 4,
                                .dim = 64,
                                .layers = 1,
                                .heads = 4,
                                .kv_heads = 4,
                                .hidden = 172};
static const char *text_path = "/usr/share/common-licenses/GPL-3";

typedef struct conf {
    const char *name, *mesh, *torch_mode, *torch_name;
    int ranks;
    tl_layout l;
    const tl_config *model; /* NULL: make train's */
} conf;

static const tl_config *model_of(const conf *c) {
    return c->model ? c->model : &cfg;
}

static const conf confs[NCONF] = {
    {"1 rank", "1", "eager", "eager, 1 process", 1, {.dp_dim = -1, .tp_dim = -1}, NULL},
    {"dp=4 FSDP",
     "dp=4",
     "fsdp",
     "FSDP2",
     4,
     {.dp_dim = 0, .tp_dim = -1, .fsdp = 1, .fsdp_units = 1},
     NULL},
    {"dp=4 DDP", "dp=4", "ddp", "DDP", 4, {.dp_dim = 0, .tp_dim = -1}, NULL},
    {"tp=4 SP",
     "tp=4",
     "tp",
     "TP + SP + loss parallel",
     4,
     {.dp_dim = -1, .tp_dim = 0, .sequence_parallel = 1, .loss_parallel = 1},
     NULL},
    {"dp=2 x tp=2 FSDP+TP",
     "dp=2,tp=2",
     "fsdp_tp",
     "FSDP2 x TP (2x2)",
     4,
     {.dp_dim = 0,
      .tp_dim = 1,
      .fsdp = 1,
      .fsdp_units = 1,
      .sequence_parallel = 1,
      .loss_parallel = 1},
     NULL},
    {"1 rank, T 256", "1", "eager", "eager, 1 process", 1, {.dp_dim = -1, .tp_dim = -1}, &long_seq},
    {"1 rank, small model",
     "1",
     "eager",
     "eager, 1 process",
     1,
     {.dp_dim = -1, .tp_dim = -1},
     &small},
};

/* One side's result for one configuration. */
typedef struct result {
    int ok;
    double ms[3]; /* median, min, max */
    long long colls;
    float loss[WARMUP + MAXSTEPS];
    double params; /* the model's parameters (global), dtensor side */
    double faults; /* minor faults per timed step, the most of any rank */
    double steal;  /* % of the machine's CPU time the host took during the run; -1 unknown */
    char why[160]; /* PyTorch: the last line of its stderr when it failed */
} result;

enum { MAXRANKS = 4 };

typedef struct run {
    const conf *c;
    int steps;
    const unsigned char *text;
    size_t n;
    double t0[MAXRANKS][MAXSTEPS], t1[MAXRANKS][MAXSTEPS]; /* each rank's timed steps */
    long faults[MAXRANKS]; /* per rank, over the timed steps */
    result *r;
} run;

static long thread_faults(void) {
    struct rusage u;
    return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_minflt : 0;
}

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
    if (rank == 0) {
        r->r->params = 0;
        for (int i = 0; i < dt_params_count(m.params); i++) {
            dt_tensor *w;
            dt_tensor_info info;
            TRY(dt_params_at(m.params, i, NULL, &w));
            TRY(dt_tensor_info_get(w, &info));
            r->r->params += (double)info.numel;
        }
    }
    for (int s = 0; s < WARMUP + r->steps; s++) {
        dt_tensor *tok, *tgt, *loss;
        TRY(tl_batch(&m, r->text, r->n, s, &tok, &tgt));
        TRY(dt_barrier(world));
        TRY(dt_comm_stats_reset(ctx));
        long f0 = thread_faults();
        double t0 = now_ms();
        TRY(tl_loss(&m, tok, tgt, &loss));
        TRY(dt_backward(loss));
        TRY(dt_optim_step(opt));
        TRY(dt_optim_zero_grad(opt));
        double t1 = now_ms();
        if (s >= WARMUP) {
            r->faults[rank] += thread_faults() - f0;
            r->t0[rank][s - WARMUP] = t0, r->t1[rank][s - WARMUP] = t1;
        }
        dt_comm_stats cs;
        TRY(dt_comm_stats_get(ctx, &cs));
        float v;
        TRY(dt_tensor_full_tensor(loss, &v, sizeof v));
        if (rank == 0) {
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

/* A step on every rank: from the first rank's start to the last rank's end (one clock for the
 * process's threads). Rank 0's own time would leave out what the others still run after it
 * ends: DDP's AdamW after the all_reduce ran up to a fifth longer than rank 0's step. */
static void step_spans(const run *r, double *ms) {
    for (int s = 0; s < r->steps; s++) {
        double first = r->t0[0][s], last = r->t1[0][s];
        for (int k = 1; k < r->c->ranks; k++)
            first = fmin(first, r->t0[k][s]), last = fmax(last, r->t1[k][s]);
        ms[s] = last - first;
    }
}

static void run_dtensor(const conf *c, int steps, const unsigned char *text, size_t n,
                        result *out) {
    run r = {.c = c, .steps = steps, .text = text, .n = n, .r = out};
    if (c->ranks > MAXRANKS) {
        fprintf(stderr, "bench_train: %s: %d ranks, MAXRANKS is %d\n", c->name, c->ranks,
                MAXRANKS);
        return;
    }
    if (dt_local_run(c->ranks, body, &r, NULL) != DT_OK) {
        fprintf(stderr, "bench_train: %s: %s\n", c->name, dt_last_error());
        return;
    }
    double ms[MAXSTEPS];
    step_spans(&r, ms);
    stats(ms, steps, out->ms);
    out->faults = 0;
    for (int k = 0; k < c->ranks; k++)
        out->faults = fmax(out->faults, (double)r.faults[k] / steps);
    out->ok = 1;
}

/* Model FLOPs of one step (the formula in the header comment). */
static double step_flops(const tl_config *m, double params) {
    double tokens = (double)m->batch * m->seq;
    return 6 * params * tokens + 12.0 * m->layers * m->seq * m->dim * tokens;
}

/* The machine's peak as this bench sees it: GFLOP/s of a 2048^3 sgemm, all cores, best of 3;
 * 0 without OpenBLAS. */
static double sgemm_peak(void) {
#if DT_HAVE_OPENBLAS
    const int n = 2048;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    double best = 1e30;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++)
            a[i] = 1.0f / (float)(i % 7 + 1), b[i] = 1.0f / (float)(i % 5 + 1);
        for (int r = 0; r < 4; r++) { /* the first warms OpenBLAS's threads and buffers */
            double t0 = now_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                        c, n);
            double t = now_ms() - t0;
            if (r && t < best) best = t;
        }
    }
    free(a), free(b), free(c);
    return best < 1e30 ? 2.0 * n * n * n / (best * 1e-3) / 1e9 : 0;
#else
    return 0;
#endif
}

/* The last non-empty line of the file at path into why (cut to fit), "" when none; the torch
 * profiler's own log lines ("ERROR:2026-... gpuGetDeviceCount failed", "USDT:...") are
 * skipped, they come with every CPU run and are not why a run failed. */
static void last_line(const char *path, char *why, size_t cap) {
    char line[1024];
    why[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        size_t caps = strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        int profiler =
            caps > 0 && line[caps] == ':' && line[caps + 1] >= '0' && line[caps + 1] <= '9';
        if (line[0] && !profiler) snprintf(why, cap, "%.150s", line);
    }
    fclose(f);
}

/* The PyTorch side: one line "median min max collectives loss...", 0 when it fails (with the
 * last line of its stderr in out->why). */
static void run_torch(const char *py, const conf *c, int steps, int have_text, result *out) {
    const char *src = getenv("DT_SOURCE_DIR");
    const tl_config *mc = model_of(c);
    char cmd[2048], err[64];
    snprintf(err, sizeof err, "/tmp/bench_train_torch.%d.err", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s %s/bench/train_torch.py %s %d %d %d %d %d %d %d %d %d %d %s 2>%s",
             py, src ? src : ".", c->torch_mode, mc->vocab, mc->seq, mc->batch, mc->dim, mc->layers,
             mc->heads, mc->kv_heads, mc->hidden, steps, c->ranks, have_text ? text_path : "", err);
    snprintf(out->why, sizeof out->why, "could not start %s", py);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    int got = fscanf(p, "%lf %lf %lf %lld", &out->ms[0], &out->ms[1], &out->ms[2], &out->colls);
    /* train_torch.py runs one more step than it times: the one it counts collectives on */
    int nloss = 0;
    for (; nloss < WARMUP + 1 + steps && nloss < WARMUP + MAXSTEPS; nloss++)
        if (fscanf(p, "%f", &out->loss[nloss]) != 1) break;
    int rc = pclose(p);
    out->ok = rc == 0 && got == 4 && nloss > 0;
    last_line(err, out->why, sizeof out->why);
    if (!out->ok && !out->why[0])
        snprintf(out->why, sizeof out->why, "exit status %d, %d numbers read, nothing on stderr",
                 rc, got);
    remove(err);
}

/* The largest relative distance of a loss curve from the one-rank curve (n steps). */
static double loss_dist(const result *a, const result *one, int n) {
    double d = 0;
    for (int s = 0; s < n; s++)
        d = fmax(d, fabs((double)a->loss[s] - one->loss[s]) / fabs((double)one->loss[s]));
    return d;
}

/* The host's steal time so far over every CPU (/proc/stat's eighth "cpu" field, in clock
 * ticks), -1 where unknown. */
static long long steal_ticks(void) {
    long long v[8];
    FILE *f = fopen("/proc/stat", "r");
    int got = f ? fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2],
                         &v[3], &v[4], &v[5], &v[6], &v[7])
                : 0;
    if (f) fclose(f);
    return got == 8 ? v[7] : -1;
}

/* Steal ticks s1 - s0 over ms of wall time, as a percent of the CPUs' time; -1 unknown. */
static double steal_pct(long long s0, long long s1, double ms) {
    long hz = sysconf(_SC_CLK_TCK), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (s0 < 0 || s1 < s0 || ms <= 0 || hz <= 0 || cpus <= 0) return -1;
    return 100.0 * (double)(s1 - s0) / ((double)hz * (double)cpus * ms / 1e3);
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
        if (n <= (size_t)long_seq.seq + 1) free(text), text = NULL, n = 0;
    }
    double load_start = load1();
    /* The peak: the best sgemm of the run, one measured before each configuration, so that a
     * busy moment at the start does not make a small peak (and fractions over 100%). */
    double peak = 0;
    result dt[NCONF] = {{0}}, pt[NCONF] = {{0}};
    for (int i = 0; i < NCONF; i++) { /* each configuration: dtensor, then PyTorch */
        if (only && strcmp(only, confs[i].name)) continue;
        peak = fmax(peak, sgemm_peak());
        cpu_quiet_wait(); /* OpenBLAS's threads asleep before dtensor's steps, not polling */
        long long s0 = steal_ticks();
        double t0 = now_ms();
        run_dtensor(&confs[i], steps, text, n, &dt[i]);
        long long s1 = steal_ticks();
        double t1 = now_ms();
        dt[i].steal = steal_pct(s0, s1, t1 - t0);
        if (py) run_torch(py, &confs[i], steps, text != NULL, &pt[i]);
        pt[i].steal = steal_pct(s1, steal_ticks(), now_ms() - t1);
    }
    double load_end = load1();
    free(text);
    if (!table)
        printf("make train's model (V %d, C %d, %d layers, %d heads / %d kv, hidden %d, T %d, "
               "B %d, AdamW) on %s; \"T 256\": the same model at sequence 256; the last row: the "
               "small model (V 256, C 64, 1 layer, 4 heads, hidden 172, T 64, B 4); median "
               "(min-max) of %d steps after %d warm-up; load "
               "average %.2f at start, %.2f at end\n",
               cfg.vocab, cfg.dim, cfg.layers, cfg.heads, cfg.kv_heads, cfg.hidden, cfg.seq,
               cfg.batch, text ? text_path : "synthetic tokens", steps, WARMUP, load_start,
               load_end);
    if (!table)
        printf("model GFLOP/s: (6 x parameters x B x T + 12 x layers x T x C x B x T) per step "
               "over the median step; %% peak: of a 2048^3 OpenBLAS sgemm on all cores in this "
               "run (%.1f GFLOP/s); faults: minor page faults per step, the most of any rank; "
               "steal: %% of the CPUs' time the host took during that side's run (/proc/stat: "
               "rows with much of it are not comparable)\n",
               peak);
    if (!table)
        printf("%-20s %-26s %6s %9s %9s %8s %6s %6s %5s | %-26s %6s %9s %8s %5s | %-8s\n",
               "configuration", "dtensor step ms", "coll", "vs 1 rank", "loss dist", "GFLOP/s",
               "%peak", "faults", "steal", "PyTorch step ms", "coll", "loss dist", "GFLOP/s",
               "steal", "dt/torch");
    int fail = 0;
    for (int i = 0; i < NCONF; i++) {
        const conf *c = &confs[i];
        char d[64] = "failed", p[96] = "-", ratio[32] = "-", pcoll[16] = "-", pdist[16] = "-";
        char dcoll[16] = "-", ddist[16] = "-", vs1[16] = "-", dgf[16] = "-", dpk[16] = "-";
        char dflt[16] = "-", pgf[16] = "-", dst[16] = "-", pst[16] = "-";
        double flops = step_flops(model_of(c), dt[i].params);
        if (only && strcmp(only, c->name)) continue;
        if (!dt[i].ok) fail = 1;
        if (dt[i].ok) {
            snprintf(d, sizeof d, "%.1f (%.1f-%.1f)", dt[i].ms[0], dt[i].ms[1], dt[i].ms[2]);
            snprintf(dcoll, sizeof dcoll, "%lld", dt[i].colls);
            snprintf(dgf, sizeof dgf, "%.2f", flops / dt[i].ms[0] / 1e6);
            if (peak > 0)
                snprintf(dpk, sizeof dpk, "%.1f%%", 100 * flops / dt[i].ms[0] / 1e6 / peak);
            snprintf(dflt, sizeof dflt, "%.1f", dt[i].faults);
            if (dt[i].steal >= 0) snprintf(dst, sizeof dst, "%.0f%%", dt[i].steal);
            if (dt[0].ok && !c->model) {
                snprintf(vs1, sizeof vs1, "%.2fx", dt[i].ms[0] / dt[0].ms[0]);
                snprintf(ddist, sizeof ddist, "%.1e", loss_dist(&dt[i], &dt[0], WARMUP + steps));
            }
        }
        if (py && !pt[i].ok) snprintf(p, sizeof p, "failed");
        if (pt[i].ok) {
            snprintf(p, sizeof p, "%.1f (%.1f-%.1f)", pt[i].ms[0], pt[i].ms[1], pt[i].ms[2]);
            snprintf(pcoll, sizeof pcoll, "%lld", pt[i].colls);
            if (dt[i].ok) snprintf(pgf, sizeof pgf, "%.2f", flops / pt[i].ms[0] / 1e6);
            if (pt[0].ok && !c->model)
                snprintf(pdist, sizeof pdist, "%.1e", loss_dist(&pt[i], &pt[0], WARMUP + steps));
            if (dt[i].ok) snprintf(ratio, sizeof ratio, "%.2fx", pt[i].ms[0] / dt[i].ms[0]);
            if (pt[i].steal >= 0) snprintf(pst, sizeof pst, "%.0f%%", pt[i].steal);
        }
        if (table) {
            const tl_config *mc = model_of(c);
            double tokens = (double)mc->batch * mc->seq;
            char what[64] = "make train";
            if (c->model)
                snprintf(what, sizeof what, "V %d, C %d, %d layer%s, T %d, B %d", mc->vocab,
                         mc->dim, mc->layers, mc->layers > 1 ? "s" : "", mc->seq, mc->batch);
            printf("train step %s (%s)\t%s ms, %.0f tokens/s, %s coll/step, %s of 1 rank, %s "
                   "model GFLOP/s (%s of sgemm peak %.1f), %s faults/step, %s steal\t",
                   c->name, what, d, dt[i].ok ? tokens / dt[i].ms[0] * 1e3 : 0.0, dcoll, vs1, dgf,
                   dpk, peak, dflt, dst);
            if (pt[i].ok)
                printf("PyTorch %s %s ms, %s coll/step, %s GFLOP/s\t%s\n", c->torch_name, p, pcoll,
                       pgf, ratio);
            else if (py)
                printf("PyTorch %s failed: %s\t-\n", c->torch_name, pt[i].why);
            else
                printf("PyTorch not run (DT_TORCH_PYTHON unset)\t-\n");
            continue;
        }
        printf("%-20s %-26s %6s %9s %9s %8s %6s %6s %5s | %-26s %6s %9s %8s %5s | %-8s\n",
               c->name, d, dcoll, vs1, ddist, dgf, dpk, dflt, dst, p, pcoll, pdist, pgf, pst,
               ratio);
        if (py && !pt[i].ok) printf("  PyTorch %s failed: %s\n", c->torch_name, pt[i].why);
    }
    if (!table && !py) printf("(PyTorch not run: set DT_TORCH_PYTHON to a python with torch)\n");
    if (!table)
        printf("dt/torch: PyTorch's step time over dtensor's (throughput ratio); loss dist: the "
               "largest relative distance of the loss curve from the same side's 1-rank curve\n");
    return fail;
}
