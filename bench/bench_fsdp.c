/* FSDP and activation checkpointing on the model of examples/fsdp_model.c (vocab 256, dim 128,
 * 2 blocks, 4 heads, SwiGLU hidden 384, sequence 64, batch 8, AdamW), on 4 in-process ranks
 * against one rank: step time (median of STEPS after 2 warm-up steps), collectives per step
 * on the dp group, parameter bytes per rank, the most gathered bytes, peak activation bytes
 * per checkpointing policy (dt_ctx_tensor_memory's peak over forward and backward above the
 * bytes alive before: parameters and optimizer state), and from a trace of one step on rank 0 how much of the
 * FSDP all_gathers' time overlapped computation (the trace is written to
 * bench_fsdp_trace.json, its timeline to bench_fsdp_trace.html, in $DT_BENCH_OUT, default the
 * current directory; make bench sets the build's bench directory). --table prints rows for
 * make bench: case, figure, reference, ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the trace of one FSDP step goes (main: $DT_BENCH_OUT). */
static char trace_json[1024] = "bench_fsdp_trace.json";
static char trace_html[1024] = "bench_fsdp_trace.html";
#include <time.h>

#include "../examples/fsdp_model.h"

enum { STEPS = 8, WARMUP = 2 };
static const fm_config cfg = {.vocab = 256, .seq = 64, .batch = 8, .dim = 128, .heads = 4,
                              .hidden = 384, .blocks = 2};

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

typedef struct run {
    const char *name;
    fm_layout l;
    int trace;
    double ms[STEPS], cpu[STEPS]; /* wall, and CPU of the whole process (every rank) */
    double med, cpu_med;
    int64_t ag, rs, act_peak, param_bytes, gathered;
    double gather_us, overlap_us; /* from the trace */
} run;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int64_t param_bytes(fm_model *m) {
    int64_t b = 0;
    for (int i = 0; i < m->np; i++) {
        dt_tensor_info info;
        if (dt_tensor_info_get(m->p[i], &info) == DT_OK) b += (int64_t)info.local_bytes;
    }
    return b;
}

/* all_gather time on the comm row of rank 0 and the part of it that computation overlapped. */
static void trace_overlap(const char *path, double *gather_us, double *overlap_us) {
    FILE *f = fopen(path, "r");
    *gather_us = *overlap_us = 0;
    if (!f) return;
    enum { MAXEV = 1 << 16 };
    static double ts[MAXEV], dur[MAXEV];
    static int tid[MAXEV], gather[MAXEV];
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof line, f) && n < MAXEV) {
        const char *x = strstr(line, "\"ph\":\"X\"");
        if (!x) continue;
        const char *p = strstr(line, "\"ts\":"), *d = strstr(line, "\"dur\":"),
                   *t = strstr(line, "\"tid\":"), *pid = strstr(line, "\"pid\":");
        if (!p || !d || !t || !pid || atoi(pid + 6) != 0) continue;
        ts[n] = atof(p + 5), dur[n] = atof(d + 6), tid[n] = atoi(t + 6);
        gather[n] = !strncmp(line + 10, "all_gather", 10) || strstr(line, "\"name\":\"all_gather\"");
        n++;
    }
    fclose(f);
    for (int i = 0; i < n; i++) {
        if (tid[i] != 2 || !gather[i]) continue;
        *gather_us += dur[i];
        for (int j = 0; j < n; j++) {
            if (tid[j] != 1) continue;
            double lo = ts[i] > ts[j] ? ts[i] : ts[j];
            double hi = ts[i] + dur[i] < ts[j] + dur[j] ? ts[i] + dur[i] : ts[j] + dur[j];
            if (hi > lo) *overlap_us += hi - lo;
        }
    }
}

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    TRY(dt_mesh_create(ctx, r->l.ndim, r->l.shape, r->l.names, &mesh));
    fm_model m;
    TRY(fm_init(&m, mesh, &cfg, &r->l, 7));
    dt_adamw_options adamw = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                              .weight_decay = 0.1};
    dt_param_group all = {.params = m.p, .n = m.np};
    dt_optim *opt;
    TRY(dt_optim_adamw_create(&adamw, &all, 1, &opt));
    if (rank == 0) r->param_bytes = param_bytes(&m);
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    for (int s = 0; s < WARMUP + STEPS; s++) {
        int last = s == WARMUP + STEPS - 1;
        dt_tensor *tok, *tgt, *loss;
        TRY(fm_batch(&m, s, &tok, &tgt));
        TRY(dt_barrier(world));
        TRY(dt_comm_stats_reset(ctx));
        dt_tensor_memory mem;
        TRY(dt_ctx_tensor_memory(ctx, &mem));
        TRY(dt_ctx_reset_peak(ctx));
        if (last && r->trace && rank == 0) TRY(dt_trace_start(ctx));
        double t0 = now_ms(), c0 = cpu_ms();
        TRY(fm_loss(&m, tok, tgt, &loss));
        TRY(dt_backward(loss));
        dt_tensor_memory after;
        TRY(dt_ctx_tensor_memory(ctx, &after));
        if (rank == 0 && after.peak_bytes - mem.bytes > r->act_peak)
            r->act_peak = after.peak_bytes - mem.bytes;
        TRY(dt_optim_step(opt));
        TRY(dt_optim_zero_grad(opt));
        TRY(dt_barrier(world));
        if (s >= WARMUP && rank == 0)
            r->ms[s - WARMUP] = now_ms() - t0, r->cpu[s - WARMUP] = cpu_ms() - c0;
        if (last && r->trace && rank == 0) {
            TRY(dt_trace_stop(ctx));
            TRY(dt_trace_write(ctx, trace_json));
        }
        if (rank == 0) {
            r->ag = fm_issued_on_dp(ctx, &r->l, DT_COLL_ALL_GATHER);
            r->rs = fm_issued_on_dp(ctx, &r->l, DT_COLL_REDUCE_SCATTER);
        }
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    if (m.fsdp && rank == 0) {
        dt_fsdp_stats fs;
        TRY(dt_fsdp_stats_get(m.fsdp, &fs));
        r->gathered = fs.max_gathered_bytes;
    }
    TRY(dt_optim_destroy(opt));
    fm_free(&m);
    return dt_mesh_release(mesh);
}

static int go(run *r) {
    dt_status st[4] = {DT_OK};
    int n = r->l.ndim == 1 ? r->l.shape[0] : r->l.shape[0] * r->l.shape[1];
    if (dt_local_run(n, body, r, st) != DT_OK) {
        fprintf(stderr, "bench_fsdp %s: %s\n", r->name, dt_last_error());
        return 1;
    }
    qsort(r->ms, STEPS, sizeof r->ms[0], cmp);
    r->med = r->ms[STEPS / 2];
    qsort(r->cpu, STEPS, sizeof r->cpu[0], cmp);
    r->cpu_med = r->cpu[STEPS / 2];
    if (r->trace) {
        trace_overlap(trace_json, &r->gather_us, &r->overlap_us);
        dt_trace_render_html(trace_json, trace_html);
    }
    return 0;
}

static fm_layout lay(int n0, int n1, const char *d0, const char *d1, int dp, int tp, int fsdp,
                     int reshard, int prefetch, dt_ac_mode ac) {
    fm_layout l = {.ndim = n1 ? 2 : 1, .shape = {n0, n1}, .names = {d0, d1}, .dp_dim = dp,
                   .rep_dim = -1, .tp_dim = tp, .fsdp = fsdp,
                   .fsdp_options = dt_fsdp_options_default(), .ac = ac};
    l.fsdp_options.dp_dim = dp < 0 ? 0 : dp;
    l.fsdp_options.reshard_after_forward = reshard;
    l.fsdp_options.prefetch = prefetch;
    return l;
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    const char *only = argc > 1 && !table ? argv[1] : NULL; /* runs whose name holds it */
    const char *dir = getenv("DT_BENCH_OUT");
    if (dir && *dir) {
        snprintf(trace_json, sizeof trace_json, "%s/bench_fsdp_trace.json", dir);
        snprintf(trace_html, sizeof trace_html, "%s/bench_fsdp_trace.html", dir);
    }
    run runs[] = {
        {.name = "1 rank", .l = lay(1, 0, "dp", NULL, -1, -1, 0, 1, 1, DT_AC_NONE)},
        {.name = "ddp dp=4", .l = lay(4, 0, "dp", NULL, 0, -1, 0, 1, 1, DT_AC_NONE)},
        {.name = "fsdp dp=4", .l = lay(4, 0, "dp", NULL, 0, -1, 1, 1, 1, DT_AC_NONE), .trace = 1},
        {.name = "fsdp dp=4 no prefetch", .l = lay(4, 0, "dp", NULL, 0, -1, 1, 1, 0, DT_AC_NONE)},
        {.name = "fsdp dp=4 kept", .l = lay(4, 0, "dp", NULL, 0, -1, 1, 0, 1, DT_AC_NONE)},
        {.name = "fsdp x tp 2x2", .l = lay(2, 2, "dp", "tp", 0, 1, 1, 1, 1, DT_AC_NONE)},
        {.name = "1 rank ac full", .l = lay(1, 0, "dp", NULL, -1, -1, 0, 1, 1, DT_AC_FULL)},
        {.name = "1 rank ac selective",
         .l = lay(1, 0, "dp", NULL, -1, -1, 0, 1, 1, DT_AC_SELECTIVE)},
        {.name = "fsdp dp=4 ac full", .l = lay(4, 0, "dp", NULL, 0, -1, 1, 1, 1, DT_AC_FULL)},
        {.name = "fsdp dp=4 ac selective",
         .l = lay(4, 0, "dp", NULL, 0, -1, 1, 1, 1, DT_AC_SELECTIVE)},
    };
    int n = (int)(sizeof runs / sizeof runs[0]);
    for (int i = 0; i < n; i++)
        if ((i == 0 || !only || strstr(runs[i].name, only)) && go(&runs[i])) return 1;
    double one = runs[0].med;
    for (int i = 0; i < n; i++) {
        run *r = &runs[i];
        if (i && only && !strstr(r->name, only)) continue;
        if (table) {
            printf("fsdp %s step ms\t%.2f\t%.2f (1 rank)\t%.2f\n", r->name, r->med, one,
                   r->med / one);
            continue;
        }
        printf("%-24s step %7.2f ms (x%.2f of 1 rank; min %.2f max %.2f; cpu %.1f ms)  dp group: "
               "%lld all_gather, %lld reduce_scatter  params/rank %lld B  gathered max %lld B  peak "
               "activations %lld B\n",
               r->name, r->med, r->med / one, r->ms[0], r->ms[STEPS - 1], r->cpu_med,
               (long long)r->ag,
               (long long)r->rs, (long long)r->param_bytes, (long long)r->gathered,
               (long long)r->act_peak);
        if (r->trace)
            printf("%-24s trace of one step, rank 0: all_gathers %.0f us, %.0f us of it "
                   "overlapped by computation (bench_fsdp_trace.json / .html)\n",
                   "", r->gather_us, r->overlap_us);
    }
    return 0;
}
