/* The five dimensions composed: the model of examples/tiny_llama.c (its MoE form wherever the
 * mesh has an ep dim) trained for a few AdamW steps on every pair and triple of dp, pp, cp, tp
 * and ep, HSDP, the dense 4-D grid dp=2 x pp=2 x cp=2 x tp=2 (16 ranks), each with one
 * activation-checkpointing policy and a mix of DDP/FSDP, sequence parallel and the two
 * schedules, and the 5-D grid dp=2 x pp=2 x cp=2 x tp=2 x ep=2 on the MoE model (32 ranks). The
 * layers find their mesh dims by name on the mesh they run on
 * (tl_layout_find_dims: a pipeline stage's sub-mesh has no pp dim).
 *
 * Every loss curve equals one rank's within 1e-5 relative. The one-rank run is the same model
 * and batches on mesh "1" ("ep=1" for MoE); with MoE under a pipeline it accumulates the
 * gradients of the pipeline's micro-batches (samples [i B / m, (i + 1) B / m), which
 * tl_batch_micro puts in micro-batch i on any mesh), since the load-balancing loss is a
 * product of means over the tokens it sees.
 *
 * Collectives per step, per rank, against what each layer's design predicts (the counts these
 * headers state):
 *   - the pipeline (dtensor/pipeline.h, 2 stages, m micro-batches): 2m sends and 2m receives
 *     on the pair communicator ("group": a header and a data message per activation or
 *     gradient), and one broadcast of the loss over pp, an all_reduce instead when the stages
 *     hand back MoE aux losses;
 *   - ring attention (dtensor/context.h): per attention call cp - 1 shifts forward and
 *     (cp - 1) + cp backward, each one send and one receive over cp; its node keeps its
 *     output, so no policy recomputes it;
 *   - MoE (dtensor/moe.h): per layer call 3 all_to_alls over ep forward (counts, rows there and
 *     back) and 2 backward; the routing plan lives in the experts' node, so checkpointing
 *     replays it rather than routing again.
 * Calls per layer are blocks on the rank's stage times micro-batches. The other collectives
 * (tp's, dp's gradient sync and FSDP's gathers, the aux loss's) have no predictor here: they
 * must be the same every step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/tiny_llama_pp.h"
#include "helpers.h"

enum { STEPS = 3, MAX_RANKS = 32 };

static const tl_config dense = {.vocab = 64,
                                .seq = 16,
                                .batch = 8,
                                .dim = 32,
                                .layers = 2,
                                .heads = 4,
                                .kv_heads = 2,
                                .hidden = 40};

typedef struct grid_config {
    const char *mesh; /* named dims: dp, dp_replicate, pp, cp, tp, ep (ep: the MoE model) */
    int fsdp, sp;
    dt_ac_mode ac;
    dt_pipeline_schedule schedule;
    int nmicro; /* under a pipeline */
} grid_config;

typedef struct counts {
    uint64_t kind[DT_COLL_KIND_COUNT];
    uint64_t pipe_send, pipe_recv, cp_send, cp_recv, ep_all_to_all, pp_bcast, pp_all_reduce;
} counts;

typedef struct grid_run {
    const grid_config *c;
    int moe;
    float loss[STEPS];
    counts got[MAX_RANKS][STEPS];
    int stage[MAX_RANKS]; /* -1 without a pipeline */
} grid_run;

static tl_config model_of(int moe) {
    tl_config c = dense;
    if (moe) c.experts = 4, c.top_k = 2;
    return c;
}

static uint64_t on(const dt_comm_stats *cs, dt_coll_kind kind, const char *group) {
    uint64_t n = 0;
    for (int e = 0; e < cs->nentries; e++)
        if (cs->entries[e].kind == kind && !strcmp(cs->entries[e].group, group))
            n += cs->entries[e].calls;
    return n;
}

static counts count(const dt_comm_stats *cs) {
    counts k = {.pipe_send = on(cs, DT_COLL_SEND, "group"),
                .pipe_recv = on(cs, DT_COLL_RECV, "group"),
                .cp_send = on(cs, DT_COLL_SEND, "cp"),
                .cp_recv = on(cs, DT_COLL_RECV, "cp"),
                .ep_all_to_all = on(cs, DT_COLL_ALL_TO_ALL, "ep"),
                .pp_bcast = on(cs, DT_COLL_BROADCAST, "pp"),
                .pp_all_reduce = on(cs, DT_COLL_ALL_REDUCE, "pp")};
    for (int i = 0; i < DT_COLL_KIND_COUNT; i++)
        k.kind[i] = cs->calls[i];
    return k;
}

static dt_status grid_body(dt_ctx *ctx, void *arg) {
    grid_run *r = arg;
    const grid_config *c = r->c;
    int rank = dt_ctx_rank(ctx), pp_dim;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    tl_config cfg = model_of(r->moe);
    tl_layout l = {.fsdp = c->fsdp, .ac = c->ac};
    tl_layout_find_dims(mesh, &l);
    l.sequence_parallel = c->sp && l.tp_dim >= 0, l.loss_parallel = l.tp_dim >= 0;
    int piped = dt_mesh_dim_index(mesh, "pp", &pp_dim) == DT_OK;
    tl_model one;
    tl_pp pp;
    dt_optim *opt;
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    if (piped) {
        R_OK(tl_pp_init(&pp, mesh, pp_dim, c->nmicro, c->schedule, &cfg, &l, 7));
        R_OK(tl_pp_adamw(&pp, &adamw, &opt));
    } else {
        R_OK(tl_model_init(&one, mesh, &cfg, &l, 7));
        R_OK(dt_optim_adamw_create_params(&adamw, one.params, &opt));
    }
    r->stage[rank] = piped ? pp.stage : -1;
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss = NULL;
        double v = 0;
        if (piped)
            R_OK(tl_pp_batch(&pp, NULL, 0, s, &tok, &tgt));
        else
            R_OK(tl_batch(&one, NULL, 0, s, &tok, &tgt));
        R_OK(dt_comm_stats_reset(ctx));
        if (s == 1) R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_IMPLICIT));
        if (piped) {
            R_OK(tl_pp_step(&pp, tok, tgt, &v));
        } else {
            R_OK(tl_loss(&one, tok, tgt, &loss));
            R_OK(dt_backward(loss));
        }
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        dt_comm_stats cs;
        R_OK(dt_comm_stats_get(ctx, &cs));
        r->got[rank][s] = count(&cs);
        if (s == 0 && getenv("DT_PRINT_COMMS") && rank == 0)
            dt_comm_stats_print(&cs, c->mesh, stderr);
        if (loss) {
            float f;
            R_OK(dt_tensor_full_tensor(loss, &f, sizeof f));
            v = f;
        }
        if (rank == 0) r->loss[s] = (float)v;
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    R_OK(dt_optim_destroy(opt));
    if (piped)
        tl_pp_free(&pp);
    else
        tl_model_free(&one);
    return dt_mesh_release(mesh);
}

/* ---- one rank ----------------------------------------------------------------------------- */

typedef struct ref_run {
    int moe, nmicro; /* nmicro > 1: gradients accumulated over micro-batches of the batch */
    float loss[STEPS];
} ref_run;

/* Rows [first, first + rows) of a one-rank (batch, seq) tensor. */
static dt_status rows_of(dt_mesh *mesh, dt_tensor *t, int first, int rows, dt_tensor **out) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    int64_t *all = malloc(sizeof *all * info.numel), seq = info.shape[1];
    if (!all) return DT_ERR_NOMEM;
    dt_status st = dt_tensor_full_tensor(t, all, sizeof *all * info.numel);
    int64_t shape[2] = {rows, seq};
    dt_placement rep[1] = {dt_replicate()};
    if (st == DT_OK)
        st = dt_tensor_distribute(mesh, all + first * seq, DT_I64, 2, shape, 1, rep, DT_ALL_RANKS,
                                  out);
    free(all);
    return st;
}

static dt_status ref_body(dt_ctx *ctx, void *arg) {
    ref_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->moe ? "ep=1" : "1", &mesh));
    tl_config cfg = model_of(r->moe);
    tl_layout l = {0};
    tl_layout_find_dims(mesh, &l);
    tl_model m;
    R_OK(tl_model_init(&m, mesh, &cfg, &l, 7));
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    int per = cfg.batch / r->nmicro;
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        double total = 0;
        for (int i = 0; i < r->nmicro; i++) {
            dt_tensor *mt, *mg, *loss, *scaled;
            R_OK(rows_of(mesh, tok, i * per, per, &mt));
            R_OK(rows_of(mesh, tgt, i * per, per, &mg));
            R_OK(tl_loss(&m, mt, mg, &loss));
            R_OK(dt_mul_scalar(loss, 1.0 / r->nmicro, &scaled));
            R_OK(dt_backward(scaled));
            float f;
            R_OK(dt_tensor_full_tensor(scaled, &f, sizeof f));
            total += f;
            dt_tensor_release(mt), dt_tensor_release(mg), dt_tensor_release(loss);
            dt_tensor_release(scaled);
        }
        r->loss[s] = (float)total;
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    R_OK(dt_optim_destroy(opt));
    tl_model_free(&m);
    return dt_mesh_release(mesh);
}

/* ---- predictions -------------------------------------------------------------------------- */

/* The size of c's mesh dim name (1 when it has none); name NULL: the number of ranks. */
static int dim_size(const grid_config *c, const char *name) {
    int shape[DT_MESH_MAX_NDIM], nd, all = 1;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    if (dt_mesh_parse(c->mesh, shape, names, &nd) != DT_OK) return 0;
    for (int d = 0; d < nd; d++) {
        if (name && !strcmp(names[d], name)) return shape[d];
        all *= shape[d];
    }
    return name ? 1 : all;
}

/* What rank's step should count on the groups with a predictor. */
static counts predict(const grid_run *r, int rank) {
    const grid_config *c = r->c;
    int pp = dim_size(c, "pp"), cp = dim_size(c, "cp"), ep = dim_size(c, "ep");
    int m = pp > 1 ? c->nmicro : 1, stage = r->stage[rank];
    int blocks =
        pp > 1 ? (stage + 1) * dense.layers / pp - stage * dense.layers / pp : dense.layers;
    int calls = blocks * m; /* attention and MoE layer calls per step */
    counts k = {0};
    if (pp > 1) {
        k.pipe_send = k.pipe_recv = (uint64_t)(2 * m);
        if (r->moe)
            k.pp_all_reduce = 1;
        else
            k.pp_bcast = 1;
    }
    if (cp > 1) k.cp_send = k.cp_recv = (uint64_t)((3 * cp - 2) * calls);
    if (ep > 1) k.ep_all_to_all = (uint64_t)(5 * calls);
    return k;
}

static const char *ac_name(dt_ac_mode a) {
    return dt_ac_mode_name(a);
}

static void run_grid(const grid_config *configs, size_t n) {
    ref_run refs[2][3] = {{{0}}}; /* [moe][nmicro: 1 or 2, 3] */
    int have[2][3] = {{0}};
    for (size_t i = 0; i < n; i++) {
        const grid_config *c = &configs[i];
        grid_run *r = calloc(1, sizeof *r);
        cr_assert(r);
        r->c = c, r->moe = strstr(c->mesh, "ep=") != NULL;
        int pp = dim_size(c, "pp");
        /* one rank: the whole batch, or the pipeline's micro-batches for MoE */
        int mi = r->moe && pp > 1 ? c->nmicro - 1 : 0;
        cr_assert(mi >= 0 && mi < 3, "%s: nmicro %d", c->mesh, c->nmicro);
        ref_run *ref = &refs[r->moe][mi];
        if (!have[r->moe][mi]) {
            *ref = (ref_run){.moe = r->moe, .nmicro = mi + 1};
            t_run(1, ref_body, ref);
            cr_assert(ref->loss[STEPS - 1] < ref->loss[0], "one rank did not learn: %g -> %g",
                      ref->loss[0], ref->loss[STEPS - 1]);
            have[r->moe][mi] = 1;
        }
        int ranks = dim_size(c, NULL);
        cr_assert(ranks <= MAX_RANKS, "%s: %d ranks", c->mesh, ranks);
        t_run(ranks, grid_body, r);
        char name[160];
        snprintf(name, sizeof name, "%s%s%s, ac %s%s%s", c->mesh, c->fsdp ? " fsdp" : "",
                 c->sp ? " sp" : "", ac_name(c->ac),
                 pp > 1 ? (c->schedule == DT_PIPELINE_AFAB ? ", afab" : ", 1f1b") : "",
                 r->moe ? ", moe" : "");
        double worst = 0;
        for (int s = 0; s < STEPS; s++) {
            double d = fabs((double)r->loss[s] - ref->loss[s]) / fabs((double)ref->loss[s]);
            worst = d > worst ? d : worst;
            cr_expect(d <= 1e-5, "%s step %d: loss %.8g, one rank %.8g", name, s, r->loss[s],
                      ref->loss[s]);
        }
        for (int q = 0; q < ranks; q++) {
            counts want = predict(r, q);
            for (int s = 0; s < STEPS; s++) {
                const counts *g = &r->got[q][s];
                struct {
                    const char *what;
                    uint64_t got, want;
                } rows[] = {
                    {"pipeline sends", g->pipe_send, want.pipe_send},
                    {"pipeline receives", g->pipe_recv, want.pipe_recv},
                    {"ring sends over cp", g->cp_send, want.cp_send},
                    {"ring receives over cp", g->cp_recv, want.cp_recv},
                    {"all_to_alls over ep", g->ep_all_to_all, want.ep_all_to_all},
                    {"broadcasts over pp", g->pp_bcast, want.pp_bcast},
                    {"all_reduces over pp", g->pp_all_reduce, want.pp_all_reduce},
                };
                for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
                    cr_expect(rows[k].got == rows[k].want, "%s rank %d step %d: %llu %s, want %llu",
                              name, q, s, (unsigned long long)rows[k].got, rows[k].what,
                              (unsigned long long)rows[k].want);
                for (int k = 0; k < DT_COLL_KIND_COUNT; k++)
                    cr_expect(g->kind[k] == r->got[q][0].kind[k],
                              "%s rank %d step %d: %llu %s, step 0 %llu", name, q, s,
                              (unsigned long long)g->kind[k], dt_coll_kind_name((dt_coll_kind)k),
                              (unsigned long long)r->got[q][0].kind[k]);
            }
        }
        const counts *g = &r->got[0][0];
        cr_log_info("%-52s loss %.6f -> %.6f, max rel delta %.1e; rank 0 per step: %llu "
                    "all_reduce, %llu all_gather, %llu reduce_scatter, %llu all_to_all, %llu send",
                    name, r->loss[0], r->loss[STEPS - 1], worst,
                    (unsigned long long)g->kind[DT_COLL_ALL_REDUCE],
                    (unsigned long long)g->kind[DT_COLL_ALL_GATHER],
                    (unsigned long long)g->kind[DT_COLL_REDUCE_SCATTER],
                    (unsigned long long)g->kind[DT_COLL_ALL_TO_ALL],
                    (unsigned long long)g->kind[DT_COLL_SEND]);
        free(r);
    }
}

#define AFAB DT_PIPELINE_AFAB
#define F1B  DT_PIPELINE_1F1B

Test(compose_train, pairs, .timeout = 240) {
    static const grid_config configs[] = {
        {"dp=2,pp=2", 1, 0, DT_AC_FULL, F1B, 2},
        {"dp=2,cp=2", 0, 0, DT_AC_SELECTIVE},
        {"dp=2,tp=2", 1, 1, DT_AC_NONE},
        {"dp=2,ep=2", 0, 0, DT_AC_FULL},
        {"pp=2,cp=2", 0, 0, DT_AC_SELECTIVE, AFAB, 2},
        {"pp=2,tp=2", 0, 1, DT_AC_FULL, F1B, 2},
        {"pp=2,ep=2", 0, 0, DT_AC_NONE, AFAB, 2},
        {"cp=2,tp=2", 0, 0, DT_AC_FULL},
        {"cp=2,ep=2", 0, 0, DT_AC_SELECTIVE},
        {"ep=2,tp=2", 0, 1, DT_AC_NONE},
    };
    run_grid(configs, sizeof configs / sizeof configs[0]);
}

Test(compose_train, triples_and_hsdp, .timeout = 240) {
    static const grid_config configs[] = {
        {"dp=2,pp=2,cp=2", 1, 0, DT_AC_NONE, F1B, 2},
        {"dp=2,pp=2,tp=2", 0, 1, DT_AC_SELECTIVE, AFAB, 2},
        {"dp=2,cp=2,tp=2", 1, 1, DT_AC_FULL},
        {"dp=2,pp=2,ep=2", 0, 0, DT_AC_SELECTIVE, F1B, 2},
        {"dp=2,cp=2,ep=2", 1, 0, DT_AC_NONE},
        {"dp=2,ep=2,tp=2", 1, 1, DT_AC_FULL},
        {"pp=2,cp=2,tp=2", 0, 1, DT_AC_FULL, AFAB, 2},
        {"pp=2,cp=2,ep=2", 0, 0, DT_AC_FULL, F1B, 2},
        {"pp=2,ep=2,tp=2", 0, 0, DT_AC_SELECTIVE, AFAB, 2},
        {"cp=2,ep=2,tp=2", 0, 1, DT_AC_NONE},
        {"dp_replicate=2,dp=2,cp=2", 1, 0, DT_AC_SELECTIVE}, /* HSDP */
    };
    run_grid(configs, sizeof configs / sizeof configs[0]);
}

Test(compose_train, dense_4d_grid, .timeout = 240) {
    static const grid_config configs[] = {
        {"dp=2,pp=2,cp=2,tp=2", 1, 1, DT_AC_SELECTIVE, F1B, 2},
    };
    run_grid(configs, sizeof configs / sizeof configs[0]);
}

/* 32 ranks on the MoE model (about 7 s on 2 cores). */
Test(compose_train, moe_5d_grid, .timeout = 240) {
    static const grid_config configs[] = {
        {"dp=2,pp=2,cp=2,tp=2,ep=2", 0, 1, DT_AC_FULL, AFAB, 2},
    };
    run_grid(configs, sizeof configs / sizeof configs[0]);
}
