/* make train's program: the config read, the text loaded, the machine's sgemm rate measured,
 * the ranks started (in-process, or this process's under a launcher), the trace merged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_quiet.h"
#include "trainer.h"

int tr_data_load(const tr_config *c, tr_data *out) {
    FILE *f = fopen(c->text, "rb");
    if (!f) return fprintf(stderr, "train: cannot open training.text = %s\n", c->text), 1;
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            unsigned char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf) return fprintf(stderr, "train: out of memory reading %s\n", c->text), 1;
    size_t train_n = len - (size_t)((double)len * c->eval_fraction),
           need = (size_t)c->model.seq + 2;
    if (train_n < need || (c->eval_every && len - train_n < need)) {
        free(buf);
        return fprintf(stderr,
                       "train: training.text = %s has %zu bytes: with training.seq = %d "
                       "and training.eval_fraction = %g a part is under %zu bytes\n",
                       c->text, len, c->model.seq, c->eval_fraction, need),
               2;
    }
    *out = (tr_data){.text = buf, .n = len, .train_n = train_n};
    return 0;
}

/* The machine's sgemm rate in GFLOP/s: the best of a few 1024^3 products on one rank holding
 * the whole machine (OpenBLAS's threads). 0 when it cannot be measured. */
static dt_status sgemm_rate(dt_ctx *ctx, void *arg) {
    double *gflops = arg;
    dt_mesh *mesh;
    dt_tensor *a, *b, *y;
    int64_t shape[2] = {1024, 1024};
    dt_placement rep = dt_replicate();
    if (dt_mesh_create_str(ctx, "1", &mesh) != DT_OK) return DT_OK;
    dt_status st = dt_tensor_ones(mesh, DT_F32, 2, shape, 1, &rep, &a);
    if (st == DT_OK) st = dt_tensor_ones(mesh, DT_F32, 2, shape, 1, &rep, &b);
    for (int i = 0; i < 4 && st == DT_OK; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        st = dt_mm(a, b, &y);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        double r = 2.0 * 1024 * 1024 * 1024 / s * 1e-9;
        if (st == DT_OK && i > 0 && r > *gflops) *gflops = r;
        if (st == DT_OK) dt_tensor_release(y);
    }
    dt_tensor_release(a), dt_tensor_release(b), dt_mesh_release(mesh);
    return DT_OK;
}

int tr_main(int argc, char **argv, const tr_model *custom) {
    tr_config c;
    int rc = tr_config_parse(argc, argv, &c);
    if (rc) return rc == 1 ? 0 : 2;
    int world = tr_config_world(&c);
    const char *rank_env = getenv("RANK"), *world_env = getenv("WORLD_SIZE");
    int rank0 = !c.ucx || !rank_env || !strcmp(rank_env, "0");
    if (c.ucx) { /* the launcher's world; each process traces nothing (no merge across them) */
        if (world_env && atoi(world_env) != world)
            return fprintf(stderr, "train: the mesh %s has %d ranks, the launcher's world %s\n",
                           c.mesh, world, world_env),
                   2;
        c.trace_steps = 0;
    }
    tr_run run = {.c = &c, .custom = custom};
    if ((rc = tr_data_load(&c, &run.data))) return rc;
    unsigned char *text = (unsigned char *)run.data.text;
    size_t n = run.data.n;
    if (!c.ucx) {
        dt_local_run(1, sgemm_rate, &run.peak_gflops, NULL);
        cpu_quiet_wait(); /* OpenBLAS's threads asleep before step 1 */
    }
    if (rank0) {
        char moe[64] = "";
        if (c.model.experts)
            snprintf(moe, sizeof moe, ", MoE: %d experts, top-%d", c.model.experts, c.model.top_k);
        printf("training %s on %s (%zu bytes): vocab %d, dim %d, %d layers, %d heads (%d kv), "
               "hidden %d, seq %d, batch %d%s; %d ranks as %s%s%s%s",
               custom ? custom->name : "tiny_llama", c.text, n, c.model.vocab, c.model.dim,
               c.model.layers, c.model.heads, c.model.kv_heads, c.model.hidden, c.model.seq,
               c.model.batch, moe, world, c.mesh,
               c.fsdp && strstr(c.mesh, "dp") ? (c.fsdp_units ? ", FSDP units" : ", FSDP") : "",
               c.sequence_parallel && strstr(c.mesh, "tp") ? ", sequence parallel" : "",
               strstr(c.mesh, "cp") ? ", context parallel (ring attention)" : "");
        if (c.pp > 1)
            printf(", %d pipeline stages, %d micro-batches, %s", c.pp, c.microbatches,
                   dt_pipeline_schedule_name(c.schedule));
        if (run.peak_gflops > 0) printf("; sgemm %.1f GFLOP/s", run.peak_gflops);
        printf("\n");
        fflush(stdout);
    }
    dt_status st = c.ucx ? dt_ucx_run(tr_train, &run) : dt_local_run(world, tr_train, &run, NULL);
    free(text);
    if (st != DT_OK) return fprintf(stderr, "train: %s\n", dt_last_error()), 1;
    if (c.trace_steps > 0) {
        char(*paths)[TR_PATH_MAX + 32] = malloc(sizeof *paths * (size_t)world);
        const char **p = malloc(sizeof *p * (size_t)world);
        char trace[TR_PATH_MAX + 8], html[TR_PATH_MAX + 8];
        if (!paths || !p) return fprintf(stderr, "train: out of memory\n"), 1;
        for (int r = 0; r < world; r++) {
            snprintf(paths[r], sizeof paths[r], "%s.rank%d.json", c.trace_out, r);
            p[r] = paths[r];
        }
        snprintf(trace, sizeof trace, "%s.json", c.trace_out);
        snprintf(html, sizeof html, "%s.html", c.trace_out);
        st = dt_trace_merge(p, world, trace);
        if (st == DT_OK) st = dt_trace_render_html(trace, html);
        for (int r = 0; r < world; r++)
            remove(paths[r]);
        free(paths), free(p);
        if (st != DT_OK) return fprintf(stderr, "train: %s\n", dt_last_error()), 1;
        printf("trace of the last %d steps: %s (Perfetto, chrome://tracing), timeline: %s\n",
               c.trace_steps, trace, html);
    }
    return 0;
}
