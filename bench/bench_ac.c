/* Activation checkpointing on make train's model (examples/tiny_llama.c with the trainer's
 * defaults: vocab 256, dim 128, 2 layers, 4 query / 2 kv heads, SwiGLU hidden 384, sequence 64,
 * batch 8, AdamW) on dp=2 x tp=2 (FSDP units, TP with sequence and loss parallel; 4 in-process
 * ranks): none, full, selective (the fixed list: matmuls and attention) and measured (the
 * policy of dtensor/ac.h, measuring 1 step) at two budgets per block: what selective keeps,
 * and half of it. Selective's bytes come from a calibration run of the measured policy (its
 * minimum plus its matmul and attention candidates). Per mode: rank 0's peak tensor bytes over
 * a step above those alive before it (the same every step after warm-up), and the step time:
 * median (min-max) of STEPS steps after WARMUP in each of ROUNDS rounds, the modes interleaved
 * round by round; then rank 0's choices (dt_ac_policy_print). --table prints make bench's rows
 * (each mode against none, same run); BENCH_QUICK=1: fewer rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../examples/tiny_llama.h"

enum { WARMUP = 2, STEPS = 5, MAXROUNDS = 7, NMODE = 5 };
static const tl_config cfg = {.vocab = 256,
                              .seq = 64,
                              .batch = 8,
                              .dim = 128,
                              .layers = 2,
                              .heads = 4,
                              .kv_heads = 2,
                              .hidden = 384};
static const tl_layout base = {.dp_dim = 0,
                               .tp_dim = 1,
                               .fsdp = 1,
                               .fsdp_units = 1,
                               .sequence_parallel = 1,
                               .loss_parallel = 1};

typedef struct mode {
    const char *name;
    dt_ac_mode ac;
    int budget_div; /* measured: selective's bytes / budget_div */
    double ms[MAXROUNDS * STEPS];
    int n;
    int64_t peak;
    dt_ac_policy_block b; /* measured: rank 0's choice */
} mode;

typedef struct run {
    tl_layout l;
    mode *m;           /* NULL: calibration */
    int64_t selective; /* calibration: what selective keeps per block on rank 0 */
    int print;         /* print rank 0's policy at the end */
} run;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The bytes a selective region keeps of the kind of region 0: its minimum and its matmul and
 * attention candidates (recompute.c's fixed list). */
static dt_status selective_bytes(const dt_ac_policy *p, int64_t *out) {
    static const char *const fixed[] = {"mm",    "bmm",    "matmul",
                                        "addmm", "linear", "scaled_dot_product_attention"};
    dt_ac_policy_block b;
    TRY(dt_ac_policy_block_get(p, 0, &b));
    int64_t s = b.min_bytes;
    for (int k = 0; k < b.ntensors; k++) {
        dt_ac_policy_tensor t;
        TRY(dt_ac_policy_tensor_get(p, 0, k, &t));
        for (size_t f = 0; t.candidate && f < sizeof fixed / sizeof *fixed; f++)
            if (!strcmp(t.op, fixed[f])) s += t.bytes;
    }
    *out = s;
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    int rank0 = dt_ctx_rank(ctx) == 0;
    dt_mesh *mesh;
    dt_comm *world;
    TRY(dt_mesh_create_str(ctx, "2x2", &mesh));
    TRY(dt_ctx_world_comm(ctx, &world));
    tl_model m;
    TRY(tl_model_init(&m, mesh, &cfg, &r->l, 1234));
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01};
    dt_optim *opt;
    TRY(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    int steps = r->m ? WARMUP + STEPS : WARMUP;
    for (int s = 0; s < steps; s++) {
        dt_tensor *tok, *tgt, *loss;
        TRY(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        TRY(dt_barrier(world));
        dt_tensor_memory before, after;
        TRY(dt_ctx_reset_peak(ctx));
        TRY(dt_ctx_tensor_memory(ctx, &before));
        double t0 = now_ms();
        TRY(tl_loss(&m, tok, tgt, &loss));
        TRY(dt_backward(loss));
        TRY(dt_optim_step(opt));
        TRY(dt_optim_zero_grad(opt));
        double t1 = now_ms();
        TRY(dt_ctx_tensor_memory(ctx, &after));
        if (rank0 && r->m && s >= WARMUP) {
            r->m->ms[r->m->n++] = t1 - t0;
            if (after.peak_bytes - before.bytes > r->m->peak)
                r->m->peak = after.peak_bytes - before.bytes;
        }
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    if (rank0 && m.ac && !r->m) TRY(selective_bytes(m.ac, &r->selective));
    if (rank0 && m.ac && r->m) TRY(dt_ac_policy_block_get(m.ac, 0, &r->m->b));
    if (rank0 && m.ac && r->print) TRY(dt_ac_policy_print(m.ac, stdout));
    TRY(dt_optim_destroy(opt));
    tl_model_free(&m);
    return dt_mesh_release(mesh);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int go(run *r) {
    if (dt_local_run(4, body, r, NULL) == DT_OK) return 0;
    fprintf(stderr, "bench_ac: %s: %s\n", r->m ? r->m->name : "calibration", dt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    const char *quick = getenv("BENCH_QUICK");
    int rounds = quick && *quick && strcmp(quick, "0") ? 3 : MAXROUNDS;
    mode modes[NMODE] = {{.name = "none", .ac = DT_AC_NONE},
                         {.name = "full", .ac = DT_AC_FULL},
                         {.name = "selective", .ac = DT_AC_SELECTIVE},
                         {.name = "measured", .ac = DT_AC_MEASURED, .budget_div = 1},
                         {.name = "measured half", .ac = DT_AC_MEASURED, .budget_div = 2}};
    /* calibration: a generous budget; only the candidates' bytes are read */
    run cal = {.l = base};
    cal.l.ac = DT_AC_MEASURED, cal.l.ac_budget = (int64_t)1 << 40;
    if (go(&cal)) return 1;
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < NMODE; i++) {
            run r = {.l = base,
                     .m = &modes[i],
                     .print = !table && k == rounds - 1 && modes[i].ac == DT_AC_MEASURED};
            r.l.ac = modes[i].ac;
            if (modes[i].budget_div) r.l.ac_budget = cal.selective / modes[i].budget_div;
            if (go(&r)) return 1;
        }
    double med[NMODE], lo[NMODE], hi[NMODE];
    for (int i = 0; i < NMODE; i++) {
        mode *m = &modes[i];
        qsort(m->ms, (size_t)m->n, sizeof *m->ms, cmp);
        med[i] = m->n % 2 ? m->ms[m->n / 2] : (m->ms[m->n / 2 - 1] + m->ms[m->n / 2]) / 2;
        lo[i] = m->ms[0], hi[i] = m->ms[m->n - 1];
    }
    if (!table)
        printf("activation checkpointing, make train's model on dp=2 x tp=2 FSDP units + TP + SP "
               "(4 in-process ranks); selective keeps %lld bytes per block on rank 0; step time "
               "median (min-max) of %d rounds x %d steps, interleaved\n",
               (long long)cal.selective, rounds, STEPS);
    for (int i = 0; i < NMODE; i++) {
        const mode *m = &modes[i];
        char extra[160] = "";
        if (m->budget_div)
            snprintf(extra, sizeof extra, ", budget %lld B/block: kept %d of %d",
                     (long long)(cal.selective / m->budget_div), m->b.nkept, m->b.ncandidates);
        if (table)
            printf("ac %s (dp=2 x tp=2) step, peak\t%.1f ms (%.1f-%.1f), %.2f MiB%s\tnone %.1f ms, "
                   "%.2f MiB\t%.2fx time, %.2fx peak\n",
                   m->name, med[i], lo[i], hi[i], (double)m->peak / (1 << 20), extra, med[0],
                   (double)modes[0].peak / (1 << 20), med[i] / med[0],
                   (double)m->peak / (double)modes[0].peak);
        else
            printf("%-14s step %6.1f ms (%.1f-%.1f, x%.2f of none)  peak %9lld B (x%.2f of "
                   "none)%s\n",
                   m->name, med[i], lo[i], hi[i], med[i] / med[0], (long long)m->peak,
                   (double)m->peak / (double)modes[0].peak, extra);
    }
    return 0;
}
