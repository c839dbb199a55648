/* make train: the Llama-style model of tiny_llama.h trained on the bytes of a text every Debian
 * system ships (the GPL-3 in /usr/share/common-licenses), on in-process ranks laid out as a
 * named mesh: "dp" shards the batch (parameters replicated, or FSDP-sharded with --fsdp),
 * "tp" runs torchtitan's tensor-parallel plan (sequence parallel and loss parallel by
 * default). One progress line per step (loss, tokens/s, step time, rank 0's peak tensor
 * memory, collectives issued by rank 0), then a trace of the last steps (Perfetto /
 * chrome://tracing) and its timeline page; --comms 1 prints step 1's collectives by kind.
 *
 * Mesh dims by name: dp (or dp_shard), dp_replicate (HSDP), tp, cp (context parallel: the
 * sequence sharded in the load-balanced order, ring attention; e.g. --mesh cp=2,tp=2 --seq 256),
 * ep (MoE: --experts E puts E experts in each block's feed-forward, top-k routed, Shard(0) over
 * ep; the batch is split over ep too), pp (pipeline stages, tiny_llama_pp.h: --pp N names its
 * size, --micro the micro-batches per step, --schedule afab|1f1b; FSDP units are off under a
 * pipeline; MoE's aux losses are per micro-batch there, so --mesh pp=1,ep=1 is its one-rank
 * reference: a one-stage pipeline, gradients accumulated over the same micro-batches). Any
 * combination composes (README.md: the 16-rank dp=2,pp=2,cp=2,tp=2); each stage finds its
 * dims by name on its own sub-mesh.
 * train [--ranks N] [--mesh dp=2,tp=2] [--steps N] [--fsdp 0|1] [--fsdp-units 0|1] [--sp 0|1]
 *       [--pp N --micro N --schedule afab|1f1b (with a pp dim: --mesh dp=2,pp=2,tp=2)]
 *       [--ac none|full|selective] [--ucx 0|1 (under dtrun: a process per rank)]
 *       [--text PATH] [--out PREFIX] [--dim N --layers N --heads N --kv-heads N --hidden N
 *       --seq N --batch N] [--bucket-kb N: grad sync's bucket cap, 0 = one collective per
 *       gradient] [--experts E --top-k K] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tiny_llama_pp.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) {                                                                        \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", dt_ctx_rank(ctx), #call,               \
                    dt_status_str(st_), dt_last_error());                                          \
            return st_;                                                                            \
        }                                                                                          \
    } while (0)

typedef struct options {
    int ranks, steps, trace_steps;
    char mesh[64];
    int fsdp, fsdp_units, sp, comms, print_params;
    int ucx; /* one process per rank over UCX (dtrun -n N train --ucx 1) instead of threads */
    int loss_digits; /* decimals of the printed loss (tests compare runs with 8) */
    int bucket_kb; /* grad sync's bucket cap in KiB (0: per gradient); -1: the default */
    dt_ac_mode ac; /* activation checkpointing per block: none, full, selective */
    int pp, micro; /* pipeline stages (the mesh's pp dim; 0: none) and micro-batches */
    dt_pipeline_schedule schedule;
    const char *text_path, *out;
    tl_config cfg;
    double lr;
} options;

typedef struct shared {
    const options *o;
    unsigned char *text;
    size_t n;
} shared;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static dt_status train(dt_ctx *ctx, void *arg) {
    const shared *sh = arg;
    const options *o = sh->o;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, o->mesh, &mesh));
    if (o->bucket_kb >= 0) TRY(dt_ctx_set_grad_bucket_bytes(ctx, (size_t)o->bucket_kb << 10));
    tl_layout l = {.fsdp = o->fsdp, .fsdp_units = o->fsdp_units, .ac = o->ac};
    /* torchtitan's names: dp (or dp_shard) shards parameters under FSDP, dp_replicate keeps
     * them replicated (HSDP with both); the batch is split over all of them. Under a pipeline
     * tl_pp_init finds them again on the stage mesh (the mesh without pp). */
    tl_layout_find_dims(mesh, &l);
    l.sequence_parallel = o->sp && l.tp_dim >= 0, l.loss_parallel = l.tp_dim >= 0;
    int pp_dim = -1;
    if (o->pp && dt_mesh_dim_index(mesh, "pp", &pp_dim) != DT_OK) pp_dim = -1;
    tl_model one, *mp = &one;
    tl_pp pipe;
    dt_adamw_options adamw = {
        .lr = o->lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01};
    dt_optim *opt;
    if (pp_dim >= 0) {
        TRY(tl_pp_init(&pipe, mesh, pp_dim, o->micro, o->schedule, &o->cfg, &l, 1234));
        TRY(tl_pp_adamw(&pipe, &adamw, &opt));
        mp = &pipe.model;
    } else {
        TRY(tl_model_init(&one, mesh, &o->cfg, &l, 1234));
        TRY(dt_optim_adamw_create_params(&adamw, one.params, &opt));
    }
    if (rank == 0 && o->print_params) TRY(dt_params_print(mp->params, stdout));
    double tokens = (double)o->cfg.batch * o->cfg.seq, total = 0;
    for (int s = 0; s < o->steps; s++) {
        if (s == o->steps - o->trace_steps) TRY(dt_trace_start(ctx));
        dt_tensor *tok, *tgt, *loss = NULL;
        double v;
        if (pp_dim >= 0)
            TRY(tl_pp_batch(&pipe, sh->text, sh->n, s, &tok, &tgt));
        else
            TRY(tl_batch(&one, sh->text, sh->n, s, &tok, &tgt));
        TRY(dt_ctx_reset_peak(ctx));
        TRY(dt_comm_stats_reset(ctx));
        double t0 = now_s();
        if (pp_dim >= 0) { /* the step's forwards and backwards, micro-batch by micro-batch */
            TRY(tl_pp_step(&pipe, tok, tgt, &v));
        } else {
            TRY(tl_loss(&one, tok, tgt, &loss));
            TRY(dt_backward(loss));
        }
        TRY(dt_optim_step(opt));
        TRY(dt_optim_zero_grad(opt));
        double dt = now_s() - t0;
        dt_tensor_memory mem;
        dt_comm_stats cs;
        TRY(dt_ctx_tensor_memory(ctx, &mem));
        TRY(dt_comm_stats_get(ctx, &cs));
        uint64_t colls = 0;
        for (int k = 0; k < DT_COLL_KIND_COUNT; k++)
            colls += cs.calls[k];
        if (rank == 0 && s == 0 && o->comms) dt_comm_stats_print(&cs, "rank 0, step 1", stdout);
        if (loss) {
            float f;
            TRY(dt_tensor_full_tensor(loss, &f, sizeof f));
            v = f;
        }
        if (s > 0) total += dt;
        if (rank == 0)
            printf("step %3d/%d  loss %.*f  %8.0f tokens/s  step %7.1f ms  peak %6.2f MiB  %3llu "
                   "collectives\n",
                   s + 1, o->steps, o->loss_digits, v, tokens / dt, dt * 1e3,
                   (double)mem.peak_bytes / (1 << 20),
                   (unsigned long long)colls),
                fflush(stdout);
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    if (rank == 0 && o->steps > 1)
        printf("mean step %.1f ms (steps 2..%d), %.0f tokens/s\n", total / (o->steps - 1) * 1e3,
               o->steps, tokens * (o->steps - 1) / total);
    if (o->trace_steps > 0) {
        char path[4096];
        TRY(dt_trace_stop(ctx));
        snprintf(path, sizeof path, "%s.rank%d.json", o->out, rank);
        TRY(dt_trace_write(ctx, path));
    }
    TRY(dt_optim_destroy(opt));
    if (pp_dim >= 0)
        tl_pp_free(&pipe);
    else
        tl_model_free(&one);
    return dt_mesh_release(mesh);
}

static int read_text(const char *path, unsigned char **out, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "train: cannot open %s (--text PATH picks another)\n", path), 1;
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
    if (!buf) return fprintf(stderr, "train: out of memory reading %s\n", path), 1;
    *out = buf, *n = len;
    return 0;
}

static int usage(const char *bad) {
    fprintf(stderr,
            "train: bad argument %s\nusage: train [--ranks N] [--mesh dp=2,tp=2] "
            "[--steps N] [--fsdp 0|1] [--fsdp-units 0|1] [--sp 0|1] [--ac none|full|selective] "
            "[--pp N] [--micro N] [--schedule afab|1f1b] [--text PATH] [--ucx 0|1] "
            "[--out PREFIX] [--trace-steps N] [--comms 0|1] [--params 0|1] [--bucket-kb N] "
            "[--dim N] [--layers N] [--heads N] "
            "[--kv-heads N] [--hidden N] [--seq N] [--batch N] [--lr X] "
            "[--experts E --top-k K (MoE; the mesh needs an ep dim)]\n",
            bad);
    return 2;
}

int main(int argc, char **argv) {
    options o = {.ranks = 4,
                 .steps = 20,
                 .trace_steps = 3,
                 .fsdp = 1,
                 .fsdp_units = -1, /* on for a dense model, but off under a pipeline */
                 .micro = 2,
                 .schedule = DT_PIPELINE_1F1B,
                 .loss_digits = 4,
                 .sp = 1,
                 .bucket_kb = -1,
                 .text_path = "/usr/share/common-licenses/GPL-3",
                 .out = "train_trace",
                 .lr = 3e-3,
                 .cfg = {.vocab = 256,
                         .seq = 64,
                         .batch = 8,
                         .dim = 128,
                         .layers = 2,
                         .heads = 4,
                         .kv_heads = 2,
                         .hidden = 384,
                         .top_k = 2}};
    int mesh_set = 0;
    struct {
        const char *flag;
        int *v;
    } ints[] = {{"--ranks", &o.ranks},       {"--steps", &o.steps},
                {"--fsdp", &o.fsdp},         {"--fsdp-units", &o.fsdp_units},
                {"--sp", &o.sp},             {"--ucx", &o.ucx},
                {"--loss-digits", &o.loss_digits},
                {"--dim", &o.cfg.dim},       {"--layers", &o.cfg.layers},
                {"--heads", &o.cfg.heads},   {"--kv-heads", &o.cfg.kv_heads},
                {"--hidden", &o.cfg.hidden}, {"--seq", &o.cfg.seq},
                {"--batch", &o.cfg.batch},   {"--trace-steps", &o.trace_steps},
                {"--comms", &o.comms},       {"--params", &o.print_params},
                {"--bucket-kb", &o.bucket_kb}, {"--pp", &o.pp},
                {"--micro", &o.micro},         {"--experts", &o.cfg.experts},
                {"--top-k", &o.cfg.top_k}};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) return usage(argv[i]);
        const char *a = argv[i], *v = argv[++i];
        int done = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !done; k++)
            if (!strcmp(a, ints[k].flag)) {
                char *end;
                long x = strtol(v, &end, 10);
                if (*end || x < 0 || x > 1 << 20) return usage(v);
                *ints[k].v = (int)x, done = 1;
            }
        if (done) continue;
        if (!strcmp(a, "--mesh")) {
            snprintf(o.mesh, sizeof o.mesh, "%s", v), mesh_set = 1;
        } else if (!strcmp(a, "--text")) {
            o.text_path = v;
        } else if (!strcmp(a, "--out")) {
            o.out = v;
        } else if (!strcmp(a, "--lr")) {
            o.lr = atof(v);
        } else if (!strcmp(a, "--schedule")) {
            if (!strcmp(v, "afab"))
                o.schedule = DT_PIPELINE_AFAB;
            else if (!strcmp(v, "1f1b"))
                o.schedule = DT_PIPELINE_1F1B;
            else
                return fprintf(stderr, "train: --schedule %s: want afab or 1f1b\n", v), 2;
        } else if (!strcmp(a, "--ac")) {
            if (dt_ac_mode_parse(v, &o.ac) != DT_OK)
                return fprintf(stderr, "train: --ac: %s\n", dt_last_error()), 2;
        } else {
            return usage(a);
        }
    }
    if (o.loss_digits < 0 || o.loss_digits > 12)
        return fprintf(stderr, "train: --loss-digits %d is not in [0, 12]\n", o.loss_digits), 2;
    if (!mesh_set) {
        if (o.ranks == 4)
            snprintf(o.mesh, sizeof o.mesh, "dp=2,tp=2");
        else
            snprintf(o.mesh, sizeof o.mesh, "dp=%d", o.ranks);
    }
    int shape[DT_MESH_MAX_NDIM], nd, product = 1, pp_size = 0, has_pp = 0;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    if (dt_mesh_parse(o.mesh, shape, names, &nd) != DT_OK)
        return fprintf(stderr, "train: --mesh %s: %s\n", o.mesh, dt_last_error()), 2;
    for (int d = 0; d < nd; d++) {
        product *= shape[d];
        if (!strcmp(names[d], "pp")) pp_size = shape[d], has_pp = 1;
    }
    /* --pp N (optional) is the size of the mesh's pp dim; a pp dim of one stage runs the
     * pipeline too (one rank's gradient accumulation over the same micro-batches) */
    if (o.pp > 1 || has_pp) {
        if (o.pp && o.pp != pp_size)
            return fprintf(stderr, "train: --pp %d but --mesh %s has %s%.0d\n", o.pp, o.mesh,
                           pp_size ? "a pp dim of size " : "no pp dim", pp_size),
                   2;
        o.pp = pp_size;
        if (o.micro < 1 || o.cfg.batch % o.micro)
            return fprintf(stderr, "train: --micro %d does not divide --batch %d\n", o.micro,
                           o.cfg.batch),
                   2;
        if (o.fsdp_units == 1)
            return fprintf(stderr, "train: --fsdp-units 1 does not run under a pipeline\n"), 2;
        o.fsdp_units = 0;
    }
    if (o.fsdp_units < 0) o.fsdp_units = !o.cfg.experts; /* units take no experts (yet) */
    if (product != o.ranks) {
        if (mesh_set && o.ranks == 4)
            o.ranks = product; /* --mesh alone sets the rank count */
        else
            return fprintf(stderr, "train: --mesh %s has %d ranks, --ranks %d\n", o.mesh, product,
                           o.ranks),
                   2;
    }
    if (o.trace_steps > o.steps) o.trace_steps = o.steps;
    const char *rank_env = getenv("RANK"), *world_env = getenv("WORLD_SIZE");
    int rank0 = !o.ucx || !rank_env || !strcmp(rank_env, "0");
    if (o.ucx) { /* the launcher's world; each process traces nothing (no merge across them) */
        if (world_env) o.ranks = atoi(world_env);
        o.trace_steps = 0;
    }
    shared sh = {.o = &o};
    if (read_text(o.text_path, &sh.text, &sh.n)) return 1;
    char moe[64] = "";
    if (o.cfg.experts)
        snprintf(moe, sizeof moe, ", MoE: %d experts, top-%d", o.cfg.experts, o.cfg.top_k);
    if (rank0)
        printf("training on %s (%zu bytes): vocab %d, dim %d, %d layers, %d heads (%d kv), "
           "hidden %d, seq %d, batch %d%s; %d ranks as %s%s%s%s",
           o.text_path, sh.n, o.cfg.vocab, o.cfg.dim, o.cfg.layers, o.cfg.heads, o.cfg.kv_heads,
           o.cfg.hidden, o.cfg.seq, o.cfg.batch, moe, o.ranks, o.mesh,
           o.fsdp && strstr(o.mesh, "dp") ? (o.fsdp_units ? ", FSDP units" : ", FSDP") : "",
           o.sp && strstr(o.mesh, "tp") ? ", sequence parallel" : "",
           strstr(o.mesh, "cp") ? ", context parallel (ring attention)" : "");
    if (rank0 && o.pp > 1)
        printf(", %d pipeline stages, %d micro-batches, %s", o.pp, o.micro,
               dt_pipeline_schedule_name(o.schedule));
    if (rank0) printf("\n");
    dt_status st = o.ucx ? dt_ucx_run(train, &sh) : dt_local_run(o.ranks, train, &sh, NULL);
    free(sh.text);
    if (st != DT_OK) return fprintf(stderr, "train: %s\n", dt_last_error()), 1;
    if (o.trace_steps > 0) {
        char(*paths)[4096] = malloc(sizeof *paths * (size_t)o.ranks);
        const char **p = malloc(sizeof *p * (size_t)o.ranks);
        char trace[4096], html[4096];
        if (!paths || !p) return fprintf(stderr, "train: out of memory\n"), 1;
        for (int r = 0; r < o.ranks; r++) {
            snprintf(paths[r], sizeof paths[r], "%s.rank%d.json", o.out, r);
            p[r] = paths[r];
        }
        snprintf(trace, sizeof trace, "%s.json", o.out);
        snprintf(html, sizeof html, "%s.html", o.out);
        st = dt_trace_merge(p, o.ranks, trace);
        if (st == DT_OK) st = dt_trace_render_html(trace, html);
        for (int r = 0; r < o.ranks; r++)
            remove(paths[r]);
        free(paths), free(p);
        if (st != DT_OK) return fprintf(stderr, "train: %s\n", dt_last_error()), 1;
        printf("trace of the last %d steps: %s (Perfetto, chrome://tracing), timeline: %s\n",
               o.trace_steps, trace, html);
    }
    return 0;
}
