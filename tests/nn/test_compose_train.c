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
 * Collectives per step, per rank, by kind and group label (dt_comm_stats' keys: "tp", "dp+cp",
 * "group", "self", ...), against what the model's structure and each layer's design predict
 * (predict(), which states each rule and where it is documented):
 *   - the pipeline (dtensor/pipeline.h, 2 stages, m micro-batches): 2m sends and 2m receives
 *     on the pair communicator ("group": a header and a data message per activation or
 *     gradient), and one broadcast of the loss over pp, an all_reduce instead when the stages
 *     hand back MoE aux losses; on the last stage, per micro-batch, the loss
 *     read out (an all_reduce per Partial dim, an all_gather over "self") and the sharded
 *     target's label check (an all_gather over the stage mesh);
 *   - ring attention (dtensor/context.h): per attention call cp - 1 shifts forward and
 *     (cp - 1) + cp backward, each one send and one receive over cp; its node keeps its
 *     output, so no policy recomputes it;
 *   - MoE (dtensor/moe.h): per layer call 3 all_to_alls over ep forward (counts, rows there and
 *     back) and 2 backward; the routing plan lives in the experts' node, so checkpointing
 *     replays it rather than routing again;
 *   - FSDP (both models): one all_gather over dp per parameter use in forward, again for the
 *     blocks' parameters when checkpointing recomputes;
 *   - the dense model's tensor parallel (tl_plan): with sequence parallel an all_gather and a
 *     reduce_scatter over tp per colwise -> rowwise pair, the embedding and the head, each
 *     side of forward and backward; without it an all_reduce instead;
 *   - the dense model's gradient sync: one all_reduce (DDP) or reduce_scatter then all_reduce
 *     (FSDP, HSDP) per distinct group, the norms' over tp too; the MoE model's (DDP) the same
 *     with the experts on their own group, and its load-balancing loss's all_reduces.
 * Calls per layer are blocks on the rank's stage times micro-batches. The rest is checked only
 * for being the same every step, and is not derived here:
 *   - cross_entropy's all_to_alls over tp and cp (it moves the logits or stays loss parallel
 *     as a cost model decides: loss_parallel_cheaper in src/ops/composite.c);
 *   - on the MoE model with cp or tp, or with FSDP, everything but the pipeline's, ring's and
 *     ep's collectives, FSDP's gathers and the loss read-out's all_gather over "self": cp adds
 *     gathers and all_to_alls over cp and an all_reduce over ep to the MoE blocks, and
 *     tl_moe_plan's tensor parallel is another plan, neither derived here; on DDP without
 *     them (dp=2,ep=2, pp=2,ep=2, dp=2,pp=2,ep=2) everything is predicted but the
 *     cross_entropy all_to_alls above (there are none there);
 *   - FSDP with cp and tp together (dp=2,cp=2,tp=2 and the 4-D grid): tp's all_gathers, the
 *     gradient sync and the last stage's loss read-out, which take collectives more than the
 *     rules above (one all_gather over tp, one reduce_scatter over dp and one all_reduce over
 *     cp a step, among others). */
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

/* A step's collectives on one rank, by (kind, group label) as dt_comm_stats keys them. */
enum { MAX_KEYS = DT_COMM_STATS_MAX };
typedef struct key_count {
    dt_coll_kind kind;
    char group[32];
    uint64_t calls;
} key_count;

typedef struct counts {
    int n;
    key_count e[MAX_KEYS];
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

/* The entry of (kind, group) in k, added (with no calls) when add and k lacks it. */
static key_count *key_of(counts *k, dt_coll_kind kind, const char *group, int add) {
    for (int i = 0; i < k->n; i++)
        if (k->e[i].kind == kind && !strcmp(k->e[i].group, group)) return &k->e[i];
    if (!add || k->n == MAX_KEYS) return NULL;
    key_count *e = &k->e[k->n++];
    *e = (key_count){.kind = kind};
    snprintf(e->group, sizeof e->group, "%s", group);
    return e;
}

static uint64_t calls_of(const counts *k, dt_coll_kind kind, const char *group) {
    const key_count *e = key_of((counts *)k, kind, group, 0);
    return e ? e->calls : 0;
}

static counts count(const dt_comm_stats *cs) {
    counts k = {0};
    for (int e = 0; e < cs->nentries; e++) {
        key_count *c = key_of(&k, cs->entries[e].kind, cs->entries[e].group, 1);
        if (c) c->calls += cs->entries[e].calls;
    }
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

/* The label of the communicator over the dims of c's mesh named in set (a NULL-terminated
 * list), as dt_comm_stats writes it: those of more than one rank joined by '+' in the mesh's
 * order ("dp+tp"); "" when none is. */
static void group_of(const grid_config *c, const char *const *set, char out[32]) {
    int shape[DT_MESH_MAX_NDIM], nd;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    out[0] = 0;
    if (dt_mesh_parse(c->mesh, shape, names, &nd) != DT_OK) return;
    for (int d = 0; d < nd; d++)
        for (const char *const *s = set; *s; s++)
            if (shape[d] > 1 && !strcmp(names[d], *s)) {
                if (out[0]) strcat(out, "+");
                strcat(out, names[d]);
            }
}

/* Predicts n more calls of kind on group (kept as a prediction, with n = 0 too). */
static void expect(counts *k, dt_coll_kind kind, const char *group, uint64_t n) {
    key_count *e = group[0] ? key_of(k, kind, group, 1) : NULL;
    if (e) e->calls += (uint64_t)n;
}

/* What rank's step should count, per (kind, group), for the collectives the model's structure
 * and c's plan determine; the (kind, group) pairs it leaves out are checked only for staying
 * what step 0 counted (see the header comment for which and why). */
static counts predict(const grid_run *r, int rank) {
    const grid_config *c = r->c;
    int pp = dim_size(c, "pp"), cp = dim_size(c, "cp"), ep = dim_size(c, "ep");
    int tp = dim_size(c, "tp"), dp = dim_size(c, "dp");
    int m = pp > 1 ? c->nmicro : 1, stage = r->stage[rank];
    int blocks =
        pp > 1 ? (stage + 1) * dense.layers / pp - stage * dense.layers / pp : dense.layers;
    int embed = pp == 1 || stage == 0, head = pp == 1 || stage == pp - 1;
    int calls = blocks * m; /* block (attention, feed-forward) calls per step */
    /* Activation checkpointing, full or selective, recomputes every redistribute of a block in
     * backward (dtensor/ac.h: selective keeps only matmul and attention outputs), so a block's
     * forward collectives happen twice; the embedding and head run outside the regions. */
    int fwd = c->ac != DT_AC_NONE ? 2 : 1;
    counts k = {0};

    /* pipeline (dtensor/pipeline.h) */
    expect(&k, DT_COLL_SEND, "group", pp > 1 ? (uint64_t)(2 * m) : 0);
    expect(&k, DT_COLL_RECV, "group", pp > 1 ? (uint64_t)(2 * m) : 0);
    if (pp > 1) {
        expect(&k, DT_COLL_BROADCAST, "pp", r->moe ? 0 : 1);
        expect(&k, DT_COLL_ALL_REDUCE, "pp", r->moe ? 1 : 0);
    }
    /* ring attention (dtensor/context.h) */
    expect(&k, DT_COLL_SEND, "cp", cp > 1 ? (uint64_t)((3 * cp - 2) * calls) : 0);
    expect(&k, DT_COLL_RECV, "cp", cp > 1 ? (uint64_t)((3 * cp - 2) * calls) : 0);
    /* MoE dispatch and combine (dtensor/moe.h) */
    expect(&k, DT_COLL_ALL_TO_ALL, "ep", ep > 1 ? (uint64_t)(5 * calls) : 0);

    /* FSDP without units (tl_layout.fsdp_units = 0): every parameter is Shard over dp and the
     * op that reads it gathers it (one all_gather over dp per use; backward reuses the gathered
     * tensor its node saved, so a forward's gathers are not repeated unless activation
     * checkpointing recomputes them). Uses per forward: the embedding (1), per block its two
     * norms and its linears (dense: wq, wk, wv, wo, w1, w2, w3 = 7; MoE: wq, wk, wv, wo, the
     * router and the experts' w1, w2, w3 = 8), the head (final norm, output = 2). DDP
     * gathers nothing over dp. */
    if (dp > 1) {
        int per_block = 2 + (r->moe ? 8 : 7);
        uint64_t gathers = (uint64_t)(m * (embed + 2 * head + fwd * blocks * per_block));
        expect(&k, DT_COLL_ALL_GATHER, "dp", c->fsdp ? gathers : 0);
    }
    /* The pipeline reads each micro-batch's loss on the last stage, and with MoE each other
     * stage's aux-loss term too (pipeline.c, scale_loss): dt_tensor_full_tensor of one
     * element, whose closing all_gather is over its sharded dims, of which a one-element
     * tensor has none: the one-rank group "self" (distribute.c). */
    expect(&k, DT_COLL_ALL_GATHER, "self", pp > 1 && (head || r->moe) ? (uint64_t)m : 0);
    /* FSDP with cp and tp together (dp=2,cp=2,tp=2 and the 4-D grid) adds collectives over tp,
     * cp and dp that the rules below do not derive, and so does MoE with cp or tp (see the
     * header comment) */
    int unruled = (c->fsdp && dp > 1 && cp > 1 && tp > 1) || (r->moe && (cp > 1 || tp > 1));

    /* The pipeline's last stage, per micro-batch. Its targets take the tokens' placements
     * (tl_pp_batch: sharded over the token dims D = dp_replicate, dp, cp, and ep on the MoE
     * model), and cross_entropy on a target that is not replicated all_gathers every rank's
     * label summary over all of the stage mesh's dims (src/ops/composite.c, check_labels;
     * tl_batch's comment: a sharded target costs one all_gather per step); without D the
     * target is replicated. The pipeline reads each micro-batch's loss (dt_tensor_full_tensor,
     * distribute.c): one all_reduce per mesh dim the loss is Partial on, dim by dim (the mean
     * over D's shards, and over tp with loss parallel; the MoE aux term it adds is
     * replicated: dtensor/moe.h), then the all_gather over "self" above. */
    static const char *const stage_dims[] = {"dp_replicate", "dp", "cp", "tp", "ep", NULL};
    static const char *const each_dim[] = {"dp_replicate", "dp", "cp", "tp", "ep"};
    static const char *const tok_dims[] = {"dp_replicate", "dp", "cp", NULL};
    static const char *const tok_ep[] = {"dp_replicate", "dp", "cp", "ep", NULL};
    char g[32], gn[32];
    if (pp > 1 && head && !unruled) {
        group_of(c, r->moe ? tok_ep : tok_dims, g);
        group_of(c, stage_dims, gn);
        if (g[0]) expect(&k, DT_COLL_ALL_GATHER, gn, (uint64_t)m);
        for (int d = 0; d < 5; d++)
            if (dim_size(c, each_dim[d]) > 1)
                expect(&k, DT_COLL_ALL_REDUCE, each_dim[d], (uint64_t)m);
    }

    if (r->moe) {
        if (unruled || (c->fsdp && dp > 1)) return k;
        /* MoE without cp and tp, DDP. Per layer call the load-balancing loss (dtensor/moe.h,
         * dt_moe_aux_loss) takes two means over every token of the mesh, f_e and P_e, each one
         * all_reduce over the token dims D + ep in forward (again when checkpointing
         * recomputes the block), and one in backward, where only P_e carries a gradient.
         * Gradient sync (the bucket rule below): the experts are Shard(0) over ep and
         * Partial over D (dt_moe_experts), one all_reduce over D; every other parameter is
         * replicated and Partial over D + ep, one all_reduce there. */
        group_of(c, tok_ep, g);
        group_of(c, tok_dims, gn);
        expect(&k, DT_COLL_ALL_REDUCE, g, (uint64_t)(calls * (2 * fwd + 1) + 1));
        expect(&k, DT_COLL_ALL_REDUCE, gn, 1);
        return k;
    }

    /* Tensor parallel on the dense model (tl_plan, torchtitan's Llama plan; parallel.h's
     * styles). Per block call the attention and the MLP are each one colwise group (wq, wk,
     * wv; w1, w3) into one rowwise linear (wo; w2). With sequence parallel each gathers the
     * sequence once on the way in (prepare_input Replicate: one all_gather) and the rowwise
     * output goes to Shard(1) (one reduce_scatter); backward runs the reverse of each (one
     * reduce_scatter, one all_gather). The embedding (rowwise_to Shard(1)) reduce_scatters in
     * forward and all_gathers in backward; the head gathers the final norm's output (sequence
     * parallel norm) into the output projection in forward and reduce_scatters its gradient in
     * backward. Without sequence parallel each of those becomes one all_reduce: the rowwise
     * outputs (wo, w2, the embedding) Partial -> Replicate in forward, and in backward the
     * Partial input gradients of the colwise groups (q/k/v, w1/w3, the output projection). */
    uint64_t tp_acts = (uint64_t)(m * (blocks * (2 * fwd + 2) + embed + head));
    if (tp > 1) {
        if (c->sp) {
            expect(&k, DT_COLL_REDUCE_SCATTER, "tp", tp_acts);
            if (!unruled) expect(&k, DT_COLL_ALL_GATHER, "tp", tp_acts);
        } else {
            expect(&k, DT_COLL_ALL_REDUCE, "tp", tp_acts);
        }
    }

    /* Gradient sync (dtensor/autograd.h, dt_ctx_set_grad_bucket_bytes): after backward the
     * leaves whose gradients need the same collective are packed into buckets of at most
     * 25 MiB (the default, DDP's bucket_cap_mb); this model's gradients are a few KiB, so each
     * distinct collective is one call. A parameter's gradient is Partial over the data dims D
     * (dp_replicate, dp, cp: the batch or the sequence is sharded there, the parameter is
     * not), and the norms' over tp too (their input is sequence-sharded with sequence
     * parallel; without it the gradient reaching them from the colwise projections is
     * Partial over tp). DDP: one all_reduce over D, and with tp one over D + tp for the norms.
     * FSDP (parameters Shard over dp): the plan reduce_scatters over dp first (every leaf in
     * one bucket), then, in a second round (autograd.h: "in rounds, each shared with the
     * leaves taking the same one next"), all_reduces over the rest: D - dp, and D - dp + tp
     * for the norms. */
    static const char *const data_dims[] = {"dp_replicate", "dp", "cp", NULL};
    static const char *const data_tp[] = {"dp_replicate", "dp", "cp", "tp", NULL};
    static const char *const rest[] = {"dp_replicate", "cp", NULL};
    static const char *const rest_tp[] = {"dp_replicate", "cp", "tp", NULL};
    int fsdp = c->fsdp && dp > 1;
    group_of(c, fsdp ? rest : data_dims, g);
    group_of(c, fsdp ? rest_tp : data_tp, gn);
    if (unruled) return k;
    if (fsdp) expect(&k, DT_COLL_REDUCE_SCATTER, "dp", 1);
    expect(&k, DT_COLL_ALL_REDUCE, g, 1);
    if (tp > 1) expect(&k, DT_COLL_ALL_REDUCE, gn, 1);
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
        uint64_t predicted = 0, all = 0; /* rank 0's calls at step 0 */
        for (int q = 0; q < ranks; q++) {
            counts want = predict(r, q);
            for (int s = 0; s < STEPS; s++) {
                const counts *g = &r->got[q][s];
                for (int i = 0; i < want.n; i++) {
                    const key_count *w = &want.e[i];
                    uint64_t n = calls_of(g, w->kind, w->group);
                    cr_expect(n == w->calls, "%s rank %d step %d: %llu %s over %s, want %llu", name,
                              q, s, (unsigned long long)n, dt_coll_kind_name(w->kind), w->group,
                              (unsigned long long)w->calls);
                }
                for (int i = 0; i < g->n; i++) {
                    const key_count *e = &g->e[i];
                    if (key_of(&want, e->kind, e->group, 0)) {
                        if (q == 0 && s == 0) predicted += e->calls;
                    } else {
                        uint64_t first = calls_of(&r->got[q][0], e->kind, e->group);
                        cr_expect(e->calls == first,
                                  "%s rank %d step %d: %llu %s over %s, step 0 %llu", name, q, s,
                                  (unsigned long long)e->calls, dt_coll_kind_name(e->kind),
                                  e->group, (unsigned long long)first);
                    }
                    if (q == 0 && s == 0) all += e->calls;
                }
                /* and nothing unpredicted that step 0 had is gone */
                const counts *first = &r->got[q][0];
                for (int i = 0; i < first->n; i++) {
                    const key_count *e = &first->e[i];
                    cr_expect(key_of(&want, e->kind, e->group, 0) ||
                                  key_of((counts *)g, e->kind, e->group, 0),
                              "%s rank %d step %d: no %s over %s, step 0 %llu", name, q, s,
                              dt_coll_kind_name(e->kind), e->group, (unsigned long long)e->calls);
                }
            }
        }
        cr_log_info("%-52s loss %.6f -> %.6f, max rel delta %.1e; rank 0: %llu of %llu "
                    "collectives a step predicted",
                    name, r->loss[0], r->loss[STEPS - 1], worst, (unsigned long long)predicted,
                    (unsigned long long)all);
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
