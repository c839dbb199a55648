/* Loss parity as torchtitan checks it: the model of examples/tiny_llama.c (2 blocks,
 * grouped-query attention with RoPE, SwiGLU), defined once and parallelized by a plan, trained
 * for 10 AdamW steps on one rank and on dp=4 (FSDP: Shard(0) parameters gathered at use), DDP
 * over 2, HSDP on 2x2, tp=4, dp=2 x tp=2 (FSDP + TP), tp=2 with sequence parallelism, and 3 ranks
 * (uneven everything). Every loss curve must equal the one-rank curve within 1e-5 relative in f32,
 * and each configuration issues exactly the collectives per step written below (counted per
 * kind on rank 0 for forward + backward + optimizer step; the same every step). The whole
 * grid: dp=2 x pp=2 x tp=2 on 8 ranks (examples/tiny_llama_pp.c, both schedules, DDP and
 * FSDP + sequence parallel stages) trains with the same losses, with the pipeline's hand-offs
 * counted per step; interleaved 1F1B (2 virtual stages per rank) on pp=2 and dp=2 x pp=2 trains
 * with the one-rank losses. */
#include <math.h>
#include <string.h>

#include "../../examples/tiny_llama_pp.h"
#include "helpers.h"
#include "op_cases.h"

enum { STEPS = 10 };

static const tl_config cfg = {.vocab = 256,
                              .seq = 32,
                              .batch = 12,
                              .dim = 32,
                              .layers = 2,
                              .heads = 8,
                              .kv_heads = 4,
                              .hidden = 40};

typedef struct config {
    const char *name, *mesh;
    tl_layout l;
    /* collectives per step: all_reduce, all_gather, reduce_scatter, all_to_all */
    int want[4];
    const tl_config *cfg; /* NULL: cfg */
    /* per step, calls of one kind over one group (its mesh dims' label, "d1"); group NULL:
     * none checked */
    struct {
        dt_coll_kind kind;
        const char *group;
        int calls;
    } on[2];
    int sends; /* point-to-point sends per step (async tensor parallelism); recvs as many */
} config;

typedef struct run {
    const config *c;
    float loss[STEPS];
    uint64_t calls[STEPS][4];
    int64_t peak; /* rank 0's most tensor bytes at once over a step, above the bytes before */
    int64_t held; /* rank 0's most tensor bytes alive after a forward, above the bytes before */
    dt_comm_stats last; /* rank 0's, of the last step */
} run;

static const dt_coll_kind kinds[4] = {DT_COLL_ALL_REDUCE, DT_COLL_ALL_GATHER,
                                      DT_COLL_REDUCE_SCATTER, DT_COLL_ALL_TO_ALL};

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->c->mesh, &mesh));
    tl_model m;
    R_OK(tl_model_init(&m, mesh, r->c->cfg ? r->c->cfg : &cfg, &r->c->l, 99));
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        R_OK(dt_comm_stats_reset(ctx));
        dt_tensor_memory before, after;
        R_OK(dt_ctx_reset_peak(ctx));
        R_OK(dt_ctx_tensor_memory(ctx, &before));
        /* DT_PRINT_COMMS=1: step 0's redistributions and collectives of rank 0 */
        if (s == 0 && dt_ctx_rank(ctx) == 0 && getenv("DT_PRINT_COMMS"))
            R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_LOG));
        if (s == 1) R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_IMPLICIT));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_OK(dt_ctx_tensor_memory(ctx, &after));
        if (after.bytes - before.bytes > r->held) r->held = after.bytes - before.bytes;
        R_OK(dt_backward(loss));
        R_OK(dt_ctx_tensor_memory(ctx, &after));
        if (after.peak_bytes - before.bytes > r->peak) r->peak = after.peak_bytes - before.bytes;
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        dt_comm_stats cs;
        R_OK(dt_comm_stats_get(ctx, &cs));
        if (dt_ctx_rank(ctx) == 0) {
            for (int k = 0; k < 4; k++)
                r->calls[s][k] = cs.calls[kinds[k]];
            uint64_t other = 0;
            for (int k = 0; k < DT_COLL_KIND_COUNT; k++)
                other += cs.calls[k];
            for (int k = 0; k < 4; k++)
                other -= cs.calls[kinds[k]];
            uint64_t p2p = cs.calls[DT_COLL_SEND] + cs.calls[DT_COLL_RECV];
            R_CHECK(cs.calls[DT_COLL_SEND] == (uint64_t)r->c->sends &&
                        cs.calls[DT_COLL_RECV] == (uint64_t)r->c->sends && other == p2p,
                    "%s step %d: %llu sends, %llu recvs (want %d each), %llu collectives of "
                    "other kinds (broadcast, barrier)",
                    r->c->name, s, (unsigned long long)cs.calls[DT_COLL_SEND],
                    (unsigned long long)cs.calls[DT_COLL_RECV], r->c->sends,
                    (unsigned long long)(other - p2p));
            if (s == 0 && getenv("DT_PRINT_COMMS")) dt_comm_stats_print(&cs, r->c->name, stderr);
            r->last = cs;
        }
        R_OK(dt_tensor_full_tensor(loss, &r->loss[s], sizeof r->loss[s]));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    R_OK(dt_optim_destroy(opt));
    tl_model_free(&m);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* The same 10 steps compared one curve against another, with each config's collectives. */
static void expect_parity(const run *ref, const config *configs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const config *c = &configs[i];
        run r = {.c = c};
        t_run(op_mesh_ranks(c->mesh), body, &r);
        for (int s = 0; s < STEPS; s++)
            cr_expect(fabsf(r.loss[s] - ref->loss[s]) <= 1e-5f * fabsf(ref->loss[s]),
                      "%s step %d: loss %.8g, one rank %.8g", c->name, s, r.loss[s], ref->loss[s]);
        for (int s = 0; s < STEPS; s++)
            for (int k = 0; k < 4; k++)
                cr_expect(r.calls[s][k] == (uint64_t)c->want[k],
                          "%s step %d: %llu %s per step, want %d", c->name, s,
                          (unsigned long long)r.calls[s][k], dt_coll_kind_name(kinds[k]),
                          c->want[k]);
        for (int k = 0; k < 2 && c->on[k].group; k++) {
            uint64_t n = 0;
            for (int e = 0; e < r.last.nentries; e++)
                if (r.last.entries[e].kind == c->on[k].kind &&
                    !strcmp(r.last.entries[e].group, c->on[k].group))
                    n += r.last.entries[e].calls;
            cr_expect(n == (uint64_t)c->on[k].calls, "%s: %llu %s over %s per step, want %d",
                      c->name, (unsigned long long)n, dt_coll_kind_name(c->on[k].kind),
                      c->on[k].group, c->on[k].calls);
        }
        cr_log_info("%s: loss %.6g -> %.6g as on one rank; per step %llu all_reduce, %llu "
                    "all_gather, %llu reduce_scatter, %llu all_to_all",
                    c->name, r.loss[0], r.loss[STEPS - 1], (unsigned long long)r.calls[0][0],
                    (unsigned long long)r.calls[0][1], (unsigned long long)r.calls[0][2],
                    (unsigned long long)r.calls[0][3]);
    }
}

Test(parallel_train, loss_parity_and_collectives) {
    /* 21 parameters: tok_embeddings, 9 per block (2 norms, wq wk wv wo, w1 w2 w3), norm,
     * output. Grad sync is coalesced (autograd/grad_sync.c): the gradients needing the same
     * collective share one per bucket (25 MiB, far above this model). Per step:
     * - FSDP over dp: one all_gather per parameter at its use in forward (21; the gathered
     *   weight stays in the graph for backward: no reshard after forward), one reduce_scatter
     *   of all the gradients into their shards. The targets are replicated (tl_batch), so
     *   cross_entropy checks the labels on every rank with no collective.
     * - DDP: one all_reduce of all the gradients.
     * - HSDP (batch over both dims of 2x2, parameters sharded over d1 and replicated over d0):
     *   FSDP's all_gathers and reduce_scatter over d1, then one all_reduce of the gradient
     *   shards over d0.
     * - TP (tp=4, and the tp dim of dp x tp): forward all_reduces the rowwise outputs
     *   (embedding, wo and w2 of each block: 5); backward all_reduces the gradient flowing
     *   into each norm from its colwise consumers (attention and mlp of each block, output: 5)
     *   and, once, the 5 norm weights' Partial gradients (grad sync). The logits (384 x 256)
     *   reach cross_entropy by one all_to_all each way: on 4 ranks the cost model finds that
     *   cheaper than loss parallel's two all_reduces of per-row statistics. Under FSDP x TP the
     *   one reduce_scatter over dp takes every gradient, the norm weights' included (their
     *   all_reduce over tp follows it).
     * - SP (tp=2): each all_reduce of TP becomes a reduce_scatter and its gather an
     *   all_gather: the embedding, wo and w2 outputs reduce_scatter (5) and the attention, mlp
     *   and output inputs all_gather (5), the same mirrored in backward; the 5 norm weights'
     *   gradients are Partial over tp (sequence-sharded inputs) and all_reduced together. On 2
     *   ranks loss parallel wins: the vocab-sharded logits are never moved, cross_entropy
     *   all_reduces the row max and the sum of exponentials (2) instead.
     * - Uneven (3 ranks): FSDP over 3 is as over 4 (uneven shards gather and scatter in one
     *   collective each); tp=3 splits 8 query and 4 kv heads unevenly: k and v, split inside
     *   a head, are gathered whole (an all_gather each per block, and their gradients' in
     *   backward: 8 per step) and q and the output re-shard by all_to_all (12 per step) where
     *   tp=2 and tp=4 keep q's heads sharded. */
    static const config configs[] = {
        {"dp=4 fsdp", "4", {.dp_dim = 0, .tp_dim = -1, .fsdp = 1}, {0, 21, 1, 0}},
        {"dp=2 ddp", "2", {.dp_dim = 0, .tp_dim = -1}, {1, 0, 0, 0}},
        {"tp=4", "4", {.dp_dim = -1, .tp_dim = 0, .loss_parallel = 1}, {11, 0, 0, 2}},
        {"dp=2 fsdp x tp=2",
         "2x2",
         {.dp_dim = 0, .tp_dim = 1, .fsdp = 1, .loss_parallel = 1},
         {11, 21, 1, 2}},
        {"tp=2 sp",
         "2",
         {.dp_dim = -1, .tp_dim = 0, .sequence_parallel = 1, .loss_parallel = 1},
         {3, 10, 10, 0}},
        {"tp=3 sp (uneven)",
         "3",
         {.dp_dim = -1, .tp_dim = 0, .sequence_parallel = 1, .loss_parallel = 1},
         {3, 18, 10, 12}},
        {"hsdp 2x2",
         "2x2",
         {.dp_dim = 1, .tp_dim = -1, .fsdp = 1, .dp_replicate_dim = 1},
         {1, 21, 1, 0}},
        {"dp=3 fsdp (uneven)", "3", {.dp_dim = 0, .tp_dim = -1, .fsdp = 1}, {0, 21, 1, 0}},
        /* FSDP units declared as torchtitan's (dt_fully_shard): a root unit (tok_embeddings, norm,
         * output) and one per block, 3 units, together far under DT_FSDP_COALESCE_BYTES.
         * Forward gathers each once, in one collective (1: the root's carries the blocks'; the
         * output finds the root still gathered); backward gathers again only the units
         * resharded after forward, every block but the last (1: the root and the last block
         * stay gathered); one reduce_scatter per unit, all three as one at the end of backward
         * (1) */
        {"dp=4 fsdp units",
         "4",
         {.dp_dim = 0, .tp_dim = -1, .fsdp = 1, .fsdp_units = 1},
         {0, 2, 1, 0}},
        {"dp=2 fsdp units x tp=2",
         "2x2",
         {.dp_dim = 0, .tp_dim = 1, .fsdp = 1, .fsdp_units = 1, .loss_parallel = 1},
         {11, 2, 1, 2}},
    };
    static const config one = {"1 rank", "1", {.dp_dim = -1, .tp_dim = -1}, {0, 0, 0, 0}};
    run ref = {.c = &one};
    t_run(1, body, &ref);
    cr_assert(ref.loss[STEPS - 1] < ref.loss[0], "one rank did not learn: %g -> %g", ref.loss[0],
              ref.loss[STEPS - 1]);
    expect_parity(&ref, configs, sizeof configs / sizeof configs[0]);
}

/* Async tensor parallelism (dtensor/async_tp.h) on sequence parallelism, tp = 2, 3 (uneven:
 * 32 positions over 3) and 4: the loss curve within 1e-5 relative of the synchronous run's on
 * the same mesh (and of one rank's), the ordered mode too on tp=3, and with full activation
 * checkpointing on tp=2. Per step on rank 0, with
 * L = 2 blocks: forward runs the collective matmuls q/k/v (one gather), wo, w1/w3 (one
 * gather), w2 and the output projection, 4L + 1, each tp - 1 sends; backward their duals,
 * 4L + 1 more (x's gradient reduce_scattered from the q/k/v and w1/w3 gradients summed, the
 * wo and w2 output gradients gathered). What stays synchronous: the embedding's output
 * reduce_scatter and its gradient's all_gather, the norm weights' all_reduce and loss
 * parallel's two (tp=4: the logits go by an all_to_all each way instead, as the cost model
 * picks without async); tp=3's uneven heads gather k and v whole and re-shard q by all_to_all as
 * without async. */
Test(parallel_train, async_tp_loss_parity) {
    enum { L = 2 };
#define SP(mode) {.dp_dim = -1, .tp_dim = 0, .sequence_parallel = 1, .loss_parallel = 1, \
                     .async_tp = mode}
    /* the same meshes without async (their collectives are loss_parity_and_collectives') */
    static const config sync[] = {
        {"tp=2 sp", "2", SP(0), {0}},
        {"tp=3 sp", "3", SP(0), {0}},
        {"tp=4 sp", "4", SP(0), {0}},
        {"tp=3 sp", "3", SP(0), {0}},
        {"tp=2 sp, full ac", "2",
         {.dp_dim = -1, .tp_dim = 0, .sequence_parallel = 1, .loss_parallel = 1,
          .ac = DT_AC_FULL}, {0}},
    };
    static const config async[] = {
        {"tp=2 sp async", "2", SP(DT_ASYNC_TP_RING), {3, 1, 1, 0}, .sends = 1 * 2 * (4 * L + 1)},
        {"tp=3 sp async", "3", SP(DT_ASYNC_TP_RING), {3, 9, 1, 12}, .sends = 2 * 2 * (4 * L + 1)},
        {"tp=4 sp async", "4", SP(DT_ASYNC_TP_RING), {1, 1, 1, 2}, .sends = 3 * 2 * (4 * L + 1)},
        {"tp=3 sp async ordered", "3", SP(DT_ASYNC_TP_ORDERED), {3, 9, 1, 12},
         .sends = 2 * 2 * (4 * L + 1)},
        /* full activation checkpointing: the region keeps the collective matmuls' outputs
         * (custom nodes are not replayed), so backward recomputes the rest of each block and
         * sends as without it */
        {"tp=2 sp async, full ac", "2",
         {.dp_dim = -1, .tp_dim = 0, .sequence_parallel = 1, .loss_parallel = 1,
          .async_tp = DT_ASYNC_TP_RING, .ac = DT_AC_FULL},
         {3, 1, 1, 0}, .sends = 1 * 2 * (4 * L + 1)},
    };
#undef SP
    static const config one = {"1 rank", "1", {.dp_dim = -1, .tp_dim = -1}, {0, 0, 0, 0}};
    run ref = {.c = &one};
    t_run(1, body, &ref);
    expect_parity(&ref, async, sizeof async / sizeof async[0]);
    for (size_t i = 0; i < sizeof async / sizeof async[0]; i++) {
        run a = {.c = &async[i]}, b = {.c = &sync[i]};
        t_run(op_mesh_ranks(a.c->mesh), body, &a);
        t_run(op_mesh_ranks(b.c->mesh), body, &b);
        for (int s = 0; s < STEPS; s++)
            cr_expect(fabsf(a.loss[s] - b.loss[s]) <= 1e-5f * fabsf(b.loss[s]),
                      "%s step %d: loss %.8g, synchronous %.8g", a.c->name, s, a.loss[s],
                      b.loss[s]);
    }
}

/* The whole grid for MoE (examples/tiny_llama_moe.c: each block's MLP a top-2 router over 4
 * SwiGLU experts, the loss plus 1e-2 x each block's load-balancing loss): trained on one rank
 * (mesh "1", an ep dim of one rank) and on 8 ranks as dp=2 x ep=2 x tp=2, the experts Shard(0)
 * over ep, the batch over dp and ep, the tokens entering the layer replicated over tp; also on
 * ep=2 alone and with FSDP and sequence parallelism on the grid. The loss curves agree within
 * 1e-5 relative in f32: the routing is the one rank's (same router weights, same tokens, ties
 * to the lower expert). Per step on rank 0 (mesh dims d0 = dp, d1 = ep, d2 = tp):
 * - the layer: forward all_to_alls the counts, the rows there and back (3), backward the
 *   output gradient rows there and the token gradients back (2), over ep: 10 for 2 blocks;
 * - DDP: the experts' gradients (Shard(0) over ep, Partial over dp) in one all_reduce over
 *   dp; the dense gradients (Partial over dp and ep) in one all_reduce over dp+ep, the 5 norm
 *   weights' also Partial over tp (1 over dp+ep+tp): grad sync's 3;
 * - tp as in the dense dp x tp run less the MLPs' linears: forward all_reduces the embedding's
 *   and the wo's outputs (3), backward the gradients into the attention and output inputs (3),
 *   the logits go to cross_entropy by one all_to_all each way (2); the targets are
 *   replicated, so cross_entropy checks the labels with no collective;
 * - the aux loss, per block (dt_moe_aux_loss makes f and P whole before their product, each
 *   a sum over the tokens: one all_reduce over dp+ep each); backward reduces nothing for it.
 *   Without sequence parallel a gradient stays Partial over tp until an op reads it whole:
 *   the head hands the last block a Partial one, which the MoE (its output's gradient) and
 *   wo's backward each reduce, and q/k/v's input gradients leave it Partial for the block
 *   below (1 all_reduce more per block than the dense run's rule): 15 all_reduce, 12
 *   all_to_all in all.
 * - ep=2: the layer's 10, one grad sync all_reduce, the aux loss's 2 per block (f and P).
 * - FSDP x SP on the grid: each of the 23 parameters all_gathered over dp at use (the experts
 *   along dim 1), their gradients reduce_scattered there (1) and all_reduced over ep (1) or
 *   ep+tp (1, the norms); SP's 6 reduce_scatters and 10 all_gathers over tp (the MoE takes
 *   its tokens gathered and hands back its output's gradient gathered); the aux loss's 2
 *   all_reduces per block as above. */
static const tl_config moe = {.vocab = 256,
                              .seq = 32,
                              .batch = 12,
                              .dim = 32,
                              .layers = 2,
                              .heads = 8,
                              .kv_heads = 4,
                              .hidden = 40,
                              .experts = 4,
                              .top_k = 2};

Test(parallel_train, moe_grid_loss_parity) {
    static const config one = {
        "moe 1 rank", "1", {.dp_dim = -1, .tp_dim = -1, .ep_dim = 1}, {0, 0, 0, 0}, &moe};
    static const config configs[] = {
        {"moe dp=2 x ep=2 x tp=2",
         "2x2x2",
         {.dp_dim = 0, .ep_dim = 2, .tp_dim = 2, .loss_parallel = 1},
         {15, 0, 0, 12},
         &moe,
         {{DT_COLL_ALL_TO_ALL, "d1", 10}, {DT_COLL_ALL_REDUCE, "d0", 1}}},
        {"moe ep=2",
         "2",
         {.dp_dim = -1, .ep_dim = 1, .tp_dim = -1},
         {5, 0, 0, 10},
         &moe,
         {{DT_COLL_ALL_TO_ALL, "d0", 10}}},
        {"moe dp=2 fsdp x ep=2 x tp=2 sp",
         "2x2x2",
         {.dp_dim = 0,
          .ep_dim = 2,
          .tp_dim = 2,
          .fsdp = 1,
          .sequence_parallel = 1,
          .loss_parallel = 1},
         {6, 33, 7, 12},
         &moe,
         {{DT_COLL_ALL_TO_ALL, "d1", 10}, {DT_COLL_ALL_GATHER, "d0", 23}}},
    };
    run ref = {.c = &one};
    t_run(1, body, &ref);
    cr_assert(ref.loss[STEPS - 1] < ref.loss[0], "one rank did not learn: %g -> %g", ref.loss[0],
              ref.loss[STEPS - 1]);
    cr_log_info("moe 1 rank: loss %.8g -> %.8g", ref.loss[0], ref.loss[STEPS - 1]);
    expect_parity(&ref, configs, sizeof configs / sizeof configs[0]);
}

/* Activation checkpointing per block (tiny_llama's layout.ac): full and selective train with
 * losses bitwise those of none on the same mesh (recomputation replays the same kernels on the
 * same values), on one rank and on FSDP x TP 2x2, and hold fewer activation bytes at the
 * step's peak (full fewest: only the blocks' inputs and outputs stay). The MoE model too, on
 * dp=2 x ep=2: its block outputs are the hidden state and the running aux loss; the routing
 * plan stays in the experts' node (kept by the region), so backward replays the forward's
 * routing and its all_to_all buckets. */
Test(parallel_train, activation_checkpointing_is_bitwise_none) {
    static const config base[] = {
        {"1 rank", "1", {.dp_dim = -1, .tp_dim = -1}, {0}},
        {"dp=2 fsdp x tp=2", "2x2", {.dp_dim = 0, .tp_dim = 1, .fsdp = 1, .loss_parallel = 1}, {0}},
        {"moe dp=2 x ep=2", "2x2", {.dp_dim = 0, .ep_dim = 2, .tp_dim = -1}, {0}, &moe},
    };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        /* the fixed modes (measured: tests/nn/test_ac_measured.c) */
        run r[DT_AC_MEASURED];
        config c[DT_AC_MEASURED];
        for (int a = 0; a < DT_AC_MEASURED; a++) {
            c[a] = base[i];
            c[a].l.ac = (dt_ac_mode)a;
            r[a] = (run){.c = &c[a]};
            t_run(op_mesh_ranks(c[a].mesh), body, &r[a]);
        }
        for (int a = 1; a < DT_AC_MEASURED; a++)
            cr_expect(!memcmp(r[a].loss, r[0].loss, sizeof r[0].loss),
                      "%s, ac %s: the losses differ from no checkpointing (last %.9g, %.9g)",
                      base[i].name, dt_ac_mode_name((dt_ac_mode)a), r[a].loss[STEPS - 1],
                      r[0].loss[STEPS - 1]);
        /* the MoE's step peak is its experts' backward (their f64 rows), not the activations:
         * what checkpointing saves shows in the bytes held from forward into backward */
        const run *f = &r[DT_AC_FULL], *sel = &r[DT_AC_SELECTIVE], *none = &r[DT_AC_NONE];
        int64_t fp = base[i].cfg ? f->held : f->peak, sp = base[i].cfg ? sel->held : sel->peak,
                np = base[i].cfg ? none->held : none->peak;
        cr_expect(fp < sp && sp < np, "%s: %s bytes full %lld, selective %lld, none %lld",
                  base[i].name, base[i].cfg ? "held" : "peak", (long long)fp, (long long)sp,
                  (long long)np);
        cr_log_info("%s: %s activation bytes none %lld, selective %lld, full %lld", base[i].name,
                    base[i].cfg ? "held" : "peak", (long long)np, (long long)sp, (long long)fp);
    }
}

/* ---- the whole grid: dp=2 x pp=2 x tp=2 -------------------------------------------------- */

enum { GRID = 8 };

typedef struct pp_run {
    const char *name;
    dt_pipeline_schedule schedule;
    int nmicro;
    tl_layout l; /* dims of the stage mesh dp=2 x tp=2 */
    float loss[STEPS];
    uint64_t calls[GRID][STEPS][DT_COLL_KIND_COUNT]; /* per rank */
} pp_run;

/* tl_pp's stages on "dp=2,pp=2,tp=2" (stage 0: ranks 0, 1, 4, 5; stage 1: 2, 3, 6, 7), trained
 * as body trains one rank: the same seed, batches and AdamW, each step one dt_pipeline_step. */
static dt_status pp_body(dt_ctx *ctx, void *arg) {
    pp_run *r = arg;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,pp=2,tp=2", &mesh));
    tl_pp pp;
    R_OK(tl_pp_init(&pp, mesh, 1, r->nmicro, r->schedule, &cfg, &r->l, 99));
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *opt;
    R_OK(tl_pp_adamw(&pp, &adamw, &opt));
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt;
        double loss;
        R_OK(tl_pp_batch(&pp, NULL, 0, s, &tok, &tgt));
        R_OK(dt_comm_stats_reset(ctx));
        if (s == 0 && rank == 0 && getenv("DT_PRINT_COMMS"))
            R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_LOG));
        if (s == 1) R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_IMPLICIT));
        R_OK(tl_pp_step(&pp, tok, tgt, &loss));
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        dt_comm_stats cs;
        R_OK(dt_comm_stats_get(ctx, &cs));
        for (int k = 0; k < DT_COLL_KIND_COUNT; k++)
            r->calls[rank][s][k] = cs.calls[k];
        /* DT_PRINT_COMMS=1: step 0's collectives on a rank of each stage */
        if (s == 0 && (rank == 0 || rank == 2) && getenv("DT_PRINT_COMMS"))
            dt_comm_stats_print(&cs, r->name, stderr);
        if (rank == 0) r->loss[s] = (float)loss;
        dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    R_OK(dt_optim_destroy(opt));
    tl_pp_free(&pp);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(parallel_train, grid_dp_pp_tp) {
    static pp_run runs[] = {
        {.name = "dp=2 x pp=2 x tp=2, 1f1b, m=2",
         .schedule = DT_PIPELINE_1F1B,
         .nmicro = 2,
         .l = {.dp_dim = 0, .tp_dim = 1, .loss_parallel = 1}},
        {.name = "dp=2 x pp=2 x tp=2, afab, m=3",
         .schedule = DT_PIPELINE_AFAB,
         .nmicro = 3,
         .l = {.dp_dim = 0, .tp_dim = 1, .loss_parallel = 1}},
        {.name = "dp=2 fsdp x pp=2 x tp=2 sp, 1f1b, m=3",
         .schedule = DT_PIPELINE_1F1B,
         .nmicro = 3,
         .l = {.dp_dim = 0, .tp_dim = 1, .fsdp = 1, .sequence_parallel = 1, .loss_parallel = 1}},
    };
    static const config one = {"1 rank", "1", {.dp_dim = -1, .tp_dim = -1}, {0, 0, 0, 0}};
    run ref = {.c = &one};
    t_run(1, body, &ref);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        pp_run *r = &runs[i];
        t_run(GRID, pp_body, r);
        for (int s = 0; s < STEPS; s++)
            cr_expect(fabsf(r->loss[s] - ref.loss[s]) <= 1e-5f * fabsf(ref.loss[s]),
                      "%s step %d: loss %.8g, one rank %.8g", r->name, s, r->loss[s], ref.loss[s]);
        /* Per step and rank: the stage boundary carries m activations forward and m
         * gradients back, each a header and a data message (no shard is empty here): 2m sends
         * and 2m receives on every rank; one broadcast hands the loss to stage 0. The other
         * collectives (the stage's tp, dp and loss collectives) are the same every step and on
         * every rank of a stage (ranks 0, 1, 4, 5 and 2, 3, 6, 7). */
        int m = r->nmicro;
        for (int q = 0; q < GRID; q++)
            for (int s = 0; s < STEPS; s++) {
                const uint64_t *c = r->calls[q][s], *c0 = r->calls[(q / 2) % 2 * 2][0];
                cr_expect(c[DT_COLL_SEND] == (uint64_t)(2 * m) &&
                              c[DT_COLL_RECV] == (uint64_t)(2 * m) && c[DT_COLL_BROADCAST] == 1,
                          "%s rank %d step %d: %llu sends, %llu receives, %llu broadcasts; "
                          "want %d, %d, 1",
                          r->name, q, s, (unsigned long long)c[DT_COLL_SEND],
                          (unsigned long long)c[DT_COLL_RECV],
                          (unsigned long long)c[DT_COLL_BROADCAST], 2 * m, 2 * m);
                for (int k = 0; k < DT_COLL_KIND_COUNT; k++)
                    cr_expect(c[k] == c0[k], "%s rank %d step %d: %llu %s, its stage's step 0 %llu",
                              r->name, q, s, (unsigned long long)c[k],
                              dt_coll_kind_name((dt_coll_kind)k), (unsigned long long)c0[k]);
            }
        for (int q = 0; q < 4; q += 2)
            cr_log_info("%s, stage %d: per step %llu all_reduce, %llu all_gather, %llu "
                        "reduce_scatter, %llu all_to_all, %llu send, %llu recv, %llu broadcast",
                        r->name, q / 2, (unsigned long long)r->calls[q][0][DT_COLL_ALL_REDUCE],
                        (unsigned long long)r->calls[q][0][DT_COLL_ALL_GATHER],
                        (unsigned long long)r->calls[q][0][DT_COLL_REDUCE_SCATTER],
                        (unsigned long long)r->calls[q][0][DT_COLL_ALL_TO_ALL],
                        (unsigned long long)r->calls[q][0][DT_COLL_SEND],
                        (unsigned long long)r->calls[q][0][DT_COLL_RECV],
                        (unsigned long long)r->calls[q][0][DT_COLL_BROADCAST]);
        cr_log_info("%s: loss %.6g -> %.6g as on one rank (%.6g -> %.6g)", r->name, r->loss[0],
                    r->loss[STEPS - 1], ref.loss[0], ref.loss[STEPS - 1]);
    }
}

/* ---- interleaved 1F1B: 4 blocks in v p = 4 chunks, 2 per rank ------------------------------
 * tl_pp with 2 virtual stages per rank (rank 0: the embedding and blocks 0 and 2, rank 1:
 * blocks 1 and 3 and the head) trains with the one-rank losses, alone and with dp = 2. */
static const tl_config cfg4 = {.vocab = 256,
                               .seq = 32,
                               .batch = 12,
                               .dim = 32,
                               .layers = 4,
                               .heads = 8,
                               .kv_heads = 4,
                               .hidden = 40};

typedef struct ipp_run {
    const char *mesh;
    int nmicro;
    float loss[STEPS];
} ipp_run;

static dt_status ipp_body(dt_ctx *ctx, void *arg) {
    ipp_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int pp_dim;
    R_OK(dt_mesh_dim_index(mesh, "pp", &pp_dim));
    tl_layout l = {.dp_dim = -1, .tp_dim = -1}; /* dp found by name on the stage mesh */
    tl_pp pp;
    tl_config three = cfg4;
    three.layers = 3;
    R_ERR(tl_pp_init_virtual(&pp, mesh, pp_dim, r->nmicro, DT_PIPELINE_INTERLEAVED_1F1B, 2, &three,
                             &l, 99),
          DT_ERR_ARG, "cfg->layers = 3 does not split into nvirtual x stages = 2 x 2");
    R_OK(tl_pp_init_virtual(&pp, mesh, pp_dim, r->nmicro, DT_PIPELINE_INTERLEAVED_1F1B, 2, &cfg4,
                            &l, 99));
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *opt;
    R_OK(tl_pp_adamw(&pp, &adamw, &opt));
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt;
        double loss;
        R_OK(tl_pp_batch(&pp, NULL, 0, s, &tok, &tgt));
        R_OK(tl_pp_step(&pp, tok, tgt, &loss));
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        if (dt_ctx_rank(ctx) == 0) r->loss[s] = (float)loss;
        dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    R_OK(dt_optim_destroy(opt));
    tl_pp_free(&pp);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(parallel_train, interleaved_1f1b_v2_equals_one_rank) {
    static const config one = {"1 rank", "1", {.dp_dim = -1, .tp_dim = -1}, {0, 0, 0, 0}, &cfg4};
    run ref = {.c = &one};
    t_run(1, body, &ref);
    ipp_run runs[] = {{"pp=2,dp=1", 2, {0}}, {"pp=2,dp=1", 4, {0}}, {"dp=2,pp=2", 2, {0}}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        ipp_run *r = &runs[i];
        int n = r->mesh[0] == 'd' ? 4 : 2;
        t_run(n, ipp_body, r);
        for (int s = 0; s < STEPS; s++)
            cr_expect(fabsf(r->loss[s] - ref.loss[s]) <= 1e-5f * fabsf(ref.loss[s]),
                      "%s m=%d step %d: loss %.8g, one rank %.8g", r->mesh, r->nmicro, s,
                      r->loss[s], ref.loss[s]);
        cr_log_info("interleaved %s m=%d: loss %.6g -> %.6g as on one rank (%.6g -> %.6g)", r->mesh,
                    r->nmicro, r->loss[0], r->loss[STEPS - 1], ref.loss[0], ref.loss[STEPS - 1]);
    }
}
