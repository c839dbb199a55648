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
 * "group", "self", ...), all of them, against what the model's structure and each layer's
 * design predict (predict(), which states each rule and where it is documented): the
 * pipeline's sends, receives and loss read-out; ring attention's shifts; MoE's all_to_alls
 * and load-balancing loss; FSDP's gathers; tensor parallel with and without sequence
 * parallel (on the MoE model tl_moe_plan's: the tokens enter the MoE replicated over tp);
 * cross_entropy's choice between loss parallel and moving the logits, priced by the
 * documented cost model; the loss mean's gathers; and gradient sync's buckets. Calls per
 * layer are blocks on the rank's stage times micro-batches. A (kind, group) the rules do not
 * name fails the test. */
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

/* The data and model dims by bit, for sets of them (DPR: dp_replicate). */
enum { DPR = 1, DP = 2, CP = 4, TP = 8, EP = 16 };
static const char *const dim_names[] = {"dp_replicate", "dp", "cp", "tp", "ep"};

/* The group label of the dims in set (as group_of; "" when none has more than one rank). */
static void label(const grid_config *c, unsigned set, char out[32]) {
    const char *list[6];
    int n = 0;
    for (int b = 0; b < 5; b++)
        if (set & (1u << b)) list[n++] = dim_names[b];
    list[n] = NULL;
    group_of(c, list, out);
}

static void expect_on(counts *k, const grid_config *c, dt_coll_kind kind, unsigned set,
                      uint64_t n) {
    char g[32];
    label(c, set, g);
    expect(k, kind, g, n);
}

/* The product of the sizes of the dims in set. */
static int ranks_of(const grid_config *c, unsigned set) {
    int n = 1;
    for (int b = 0; b < 5; b++)
        if (set & (1u << b)) n *= dim_size(c, dim_names[b]);
    return n;
}

/* Whether cross_entropy keeps the logits vocab-sharded over tp (src/ops/composite.c,
 * loss_parallel_cheaper: when two reductions of one value per row cost less than re-sharding
 * the logits for log_softmax). Each is priced by the redistribute cost model as
 * dtensor/redistribute.h documents it, with its defaults: latency_us 5 + step_us 1 x
 * ceil(log2 n) + bytes received per rank / 10 GB/s. A ring all_reduce of this rank's rows'
 * values receives 2 (n - 1) / n of them; moving the class shards to the rows (an all_to_all)
 * receives the new block, `after` rows of V classes, but for the V / n classes it held. */
static int loss_parallel(int64_t rows, int64_t after, int64_t vocab, int n) {
    double step = 5.0 + ceil(log2((double)n)), per_us = 10e9 / 1e6, f32 = 4;
    double reduce = step + f32 * 2.0 * (double)rows * (n - 1) / n / per_us;
    double move = step + f32 * (double)(after * (vocab - vocab / n)) / per_us;
    return 2 * reduce < move;
}

/* What rank's step should count, per (kind, group): every collective the model's structure
 * and c's plan determine, each rule with where it is documented. */
static counts predict(const grid_run *r, int rank) {
    const grid_config *c = r->c;
    int pp = dim_size(c, "pp"), cp = dim_size(c, "cp"), ep = dim_size(c, "ep");
    int tp = dim_size(c, "tp"), dp = dim_size(c, "dp"), moe = r->moe;
    int m = pp > 1 ? c->nmicro : 1, stage = r->stage[rank];
    int blocks =
        pp > 1 ? (stage + 1) * dense.layers / pp - stage * dense.layers / pp : dense.layers;
    int embed = pp == 1 || stage == 0, head = pp == 1 || stage == pp - 1;
    int calls = blocks * m; /* block (attention, feed-forward) calls per step */
    /* Activation checkpointing, full or selective, recomputes every redistribute of a block in
     * backward (dtensor/ac.h: selective keeps only matmul and attention outputs), so a block's
     * forward collectives happen twice; the embedding and head run outside the regions. */
    int fwd = c->ac != DT_AC_NONE ? 2 : 1;
    int fsdp = c->fsdp && dp > 1;
    /* The tokens are sharded over the batch dims B (dp_replicate, dp, and ep on the MoE model:
     * tiny_llama.h) and the sequence over cp: every parameter's gradient is Partial over D =
     * B + cp, where it is not sharded. */
    unsigned B = DPR | DP | (moe ? EP : 0), D = B | CP;
    counts k = {0};

    /* pipeline (dtensor/pipeline.h) */
    expect(&k, DT_COLL_SEND, "group", pp > 1 ? (uint64_t)(2 * m) : 0);
    expect(&k, DT_COLL_RECV, "group", pp > 1 ? (uint64_t)(2 * m) : 0);
    if (pp > 1) {
        expect(&k, DT_COLL_BROADCAST, "pp", moe ? 0 : 1);
        expect(&k, DT_COLL_ALL_REDUCE, "pp", moe ? 1 : 0);
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
        int per_block = 2 + (moe ? 8 : 7);
        uint64_t gathers = (uint64_t)(m * (embed + 2 * head + fwd * blocks * per_block));
        expect(&k, DT_COLL_ALL_GATHER, "dp", fsdp ? gathers : 0);
    }
    /* The pipeline reads each micro-batch's loss on the last stage, and with MoE each other
     * stage's aux-loss term too (pipeline.c, scale_loss): dt_tensor_full_tensor of one
     * element, whose closing all_gather is over its sharded dims, of which a one-element
     * tensor has none: the one-rank group "self" (distribute.c). */
    expect(&k, DT_COLL_ALL_GATHER, "self", pp > 1 && (head || moe) ? (uint64_t)m : 0);

    /* Tensor parallel (tl_plan, torchtitan's Llama plan; parallel.h's styles). Per block call
     * the attention is one colwise group (wq, wk, wv) into one rowwise linear (wo), and the
     * dense MLP another (w1, w3; w2). With sequence parallel each group gathers the sequence
     * once on the way in (prepare_input Replicate: one all_gather) and the rowwise output goes
     * to Shard(1) (one reduce_scatter); backward runs the reverse of each (one reduce_scatter,
     * one all_gather). The embedding (rowwise_to Shard(1)) reduce_scatters in forward and
     * all_gathers in backward; the head gathers the final norm's output (sequence parallel
     * norm) into the output projection in forward and reduce_scatters its gradient in
     * backward. Without sequence parallel the rowwise outputs (wo, w2, the embedding) are
     * all_reduced in forward instead, and backward is below. The MoE (tl_moe_plan) takes its
     * tokens replicated over tp and computes whole there (dtensor/moe.h; its router and aux
     * loss keep the tokens' placements): with sequence parallel one all_gather in
     * (prepare_input), and its whole output enters the sequence-sharded residual by a local
     * slice, whose backward gathers the gradient (one all_gather); its input gradient is
     * whole (a local slice back). */
    if (tp > 1 && c->sp) {
        uint64_t ends = (uint64_t)(embed + head), mlp = moe ? 0 : 1, in = moe ? 1 : 0;
        uint64_t groups = (uint64_t)calls * ((1 + mlp) * (fwd + 1));
        expect(&k, DT_COLL_ALL_GATHER, "tp", groups + (uint64_t)calls * in * (fwd + 1) + m * ends);
        expect(&k, DT_COLL_REDUCE_SCATTER, "tp", groups + m * ends);
    }
    /* Without sequence parallel, backward reduces a gradient where an op reads it whole: a
     * Partial gradient passes the residual adds and the norms' backward (linear in it) as it
     * is. So, walking a micro-batch's backward with the residual gradient Partial or whole:
     * the head hands it Partial (the output projection's input gradient); per block the MLP's
     * w2 (rowwise: its backward reads the gradient whole) reduces it if Partial, and its w1/w3
     * input gradients leave it Partial; the MoE reads its output's gradient whole (reduces it
     * if Partial) and hands back a whole input gradient; the attention's wo reduces it if
     * Partial and its q/k/v input gradients leave it Partial; the embedding's backward reads
     * it whole. A stage's input gradient goes to the stage before as it is (pipeline_wire.c:
     * the spec travels): Partial, but for the step's last micro-batch, whose backward ends
     * with grad sync, which reduces every leaf's gradient to the leaf's placements, the
     * received input among them (pipeline.c: "the last reduces them once"): one all_reduce
     * over tp in grad sync on every stage but the first. */
    int leaf_tp = !c->sp && tp > 1 && pp > 1 && stage > 0;
    if (tp > 1 && !c->sp) {
        uint64_t ar = (uint64_t)(m * embed) + (uint64_t)calls * fwd * (moe ? 1 : 2);
        for (int i = 0; i < m; i++) {
            int partial = head || i < m - 1;
            for (int b = 0; b < blocks; b++)
                ar += moe ? 2u * partial : (uint64_t)partial + 1, partial = 1;
            ar += (uint64_t)(embed && partial);
        }
        expect(&k, DT_COLL_ALL_REDUCE, "tp", ar);
    }
    /* cross_entropy on the head, per micro-batch (src/ops/composite.c). Its logits are the
     * rows of this micro-batch (Bm T of them, sharded over B; with cp (Bm, V, T), the sequence
     * over cp: tiny_llama.c), vocab-sharded over tp (loss parallel). Loss parallel
     * (loss_parallel above) all_reduces the row max and the row sums over tp in forward
     * (backward reduces nothing: composite.c's `reduced`); otherwise log_softmax moves the
     * class shards to a row dim (one all_to_all over tp) and backward moves the gradient back
     * (one more). The row dim is the one whose new block is smallest (the cost model prices
     * bytes received), the batch on a tie (the softmax strategy's first row). */
    int bm = dense.batch / m, lp = 0, to_seq = 0;
    int64_t bl = bm / ranks_of(c, B), tl = dense.seq / cp, rows = bl * tl;
    int64_t by_b = (bl + tp - 1) / tp * tl, by_t = bl * ((tl + tp - 1) / tp);
    to_seq = cp > 1 && by_t < by_b; /* without cp the rows are one dim */
    int64_t after = cp > 1 ? (to_seq ? by_t : by_b) : (rows + tp - 1) / tp;
    if (head && tp > 1) {
        lp = loss_parallel(rows, after, dense.vocab, tp);
        expect(&k, lp ? DT_COLL_ALL_REDUCE : DT_COLL_ALL_TO_ALL, "tp", (uint64_t)(2 * m));
    }
    /* The loss is the mean of the per-row losses, (Bm T) or with cp (Bm, T), sharded as the
     * logits' rows (tp too where the class shards moved). The mean (reduce.c) averages a
     * sharded dim where it lies (Partial(avg)) only when its size divides the (stage) mesh's
     * rank count; the other sharded dims' shards are gathered first (one all_gather over the
     * dims that shard them). */
    unsigned moved = tp > 1 && !lp ? TP : 0, gathered = 0;
    unsigned d0 = B | (to_seq ? 0 : moved), d1 = cp > 1 ? CP | (to_seq ? moved : 0) : 0;
    int stage_ranks = dim_size(c, NULL) / pp;
    if ((cp > 1 ? bm : bm * dense.seq) % stage_ranks) gathered |= d0;
    if (d1 && dense.seq % stage_ranks) gathered |= d1;
    if (head) expect_on(&k, c, DT_COLL_ALL_GATHER, gathered, (uint64_t)m);
    /* The pipeline's last stage, per micro-batch. Its targets take the tokens' placements
     * (tl_pp_batch: sharded over B and cp), and cross_entropy on a target that is not
     * replicated all_gathers every rank's label summary over all of the stage mesh's dims
     * (composite.c, check_labels; tl_batch's comment: a sharded target costs one all_gather
     * per step); without them the target is replicated. The pipeline reads each micro-batch's
     * loss (dt_tensor_full_tensor, distribute.c): one all_reduce per mesh dim the loss is
     * Partial on, dim by dim (the averaged dims, and tp with loss parallel; the MoE aux term
     * it adds is replicated: dtensor/moe.h), then the all_gather over "self" above. */
    if (pp > 1 && head) {
        if (ranks_of(c, D) > 1) expect_on(&k, c, DT_COLL_ALL_GATHER, D | TP, (uint64_t)m);
        unsigned partial = ((d0 | d1) & ~gathered) | (lp ? TP : 0);
        for (int b = 0; b < 5; b++)
            if (partial & (1u << b)) expect_on(&k, c, DT_COLL_ALL_REDUCE, 1u << b, (uint64_t)m);
    }

    /* MoE's load-balancing loss (dtensor/moe.h, dt_moe_aux_loss): per layer call f_e and P_e,
     * each a sum over every token of the mesh, made whole by one all_reduce over the token dims
     * D + ep in forward. When checkpointing recomputes the block, P_e's again; f_e comes from
     * the expert ids, which need no gradient, so no op records it and the region keeps it
     * (dtensor/ac.h: only what recorded ops make is dropped). Backward reduces nothing. */
    if (moe) expect_on(&k, c, DT_COLL_ALL_REDUCE, D, (uint64_t)(calls * (2 + (fwd - 1))));

    /* Gradient sync (dtensor/autograd.h, dt_ctx_set_grad_bucket_bytes): after backward the
     * leaves whose gradients need the same collective are packed into buckets of at most
     * 25 MiB (the default, DDP's bucket_cap_mb); this model's gradients are a few KiB, so each
     * distinct collective is one call. A parameter's gradient is Partial over D, and the norms'
     * (attention_norm, ffn_norm, norm) over tp too: their input is sequence-sharded with
     * sequence parallel; without it the gradient reaching them from a colwise group is Partial
     * over tp (the MoE's, whole: dtensor/moe.h, takes ffn_norm's out of that). The MoE's
     * experts are Shard(0) over ep, their gradients Partial over D less ep (dt_moe_experts).
     * DDP: one all_reduce per distinct group. FSDP (parameters Shard over dp): the plan
     * reduce_scatters over dp first (every leaf in one bucket), then, in a second round
     * (autograd.h: "in rounds, each shared with the leaves taking the same one next"),
     * all_reduces over the rest. And the received stage input's (above). */
    unsigned rest = fsdp ? ~(unsigned)DP : ~0u;
    if (fsdp) expect(&k, DT_COLL_REDUCE_SCATTER, "dp", 1);
    char groups[4][32] = {{0}}; /* the others', the experts', the norms', the stage input's */
    label(c, D & rest, groups[0]);
    if (moe) label(c, D & ~(unsigned)EP & rest, groups[1]);
    if (tp > 1) label(c, (D | TP) & rest, groups[2]);
    if (leaf_tp) snprintf(groups[3], sizeof groups[3], "tp");
    for (int g = 0; g < 4; g++) {
        int seen = 0;
        for (int h = 0; h < g; h++)
            seen |= !strcmp(groups[h], groups[g]);
        if (!seen) expect(&k, DT_COLL_ALL_REDUCE, groups[g], 1);
    }
    return k;
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
                 c->sp ? " sp" : "", dt_ac_mode_name(c->ac),
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
                /* and nothing that was not predicted */
                for (int i = 0; i < g->n; i++) {
                    const key_count *e = &g->e[i];
                    int known = key_of(&want, e->kind, e->group, 0) != NULL;
                    cr_expect(known, "%s rank %d step %d: %llu %s over %s, not predicted", name, q,
                              s, (unsigned long long)e->calls, dt_coll_kind_name(e->kind),
                              e->group);
                    if (q == 0 && s == 0) predicted += known ? e->calls : 0, all += e->calls;
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
