/* Context parallelism in training: the model of examples/tiny_llama.c with a long sequence
 * (256, four times make train's default) sharded over a cp mesh dim in the load-balanced order
 * (tokens, targets and rope rows permuted alike), attention by ring (dt_ring_sdpa), parameters
 * replicated over cp with their gradients all_reduced there, trained for 10 AdamW steps on
 * cp=2, cp=2 x tp=2 (heads over tp), the same with sequence parallelism, cp=3 (uneven
 * chunks) and dp=2 (FSDP units) x cp=2. Every loss curve must equal the one-rank curve (plain
 * order, dt_sdpa) within 1e-5 relative in f32, and each step issues exactly the collectives written
 * below (counted per kind on rank 0; the ring's point-to-point transfers are cp - 1 key/value
 * blocks forward and 2 cp - 1 backward per layer). */
#include <math.h>

#include "../../examples/tiny_llama.h"
#include "helpers.h"

enum { STEPS = 10 };

static const tl_config cfg = {.vocab = 256,
                              .seq = 256,
                              .batch = 2,
                              .dim = 32,
                              .layers = 2,
                              .heads = 8,
                              .kv_heads = 4,
                              .hidden = 40};

typedef struct config {
    const char *name, *mesh;
    int ranks, cp;
    tl_layout l;
    /* collectives per step: all_reduce, all_gather, reduce_scatter, all_to_all (the ring's
     * sends and receives follow from cp) */
    int want[4];
} config;

static const dt_coll_kind kinds[4] = {DT_COLL_ALL_REDUCE, DT_COLL_ALL_GATHER,
                                      DT_COLL_REDUCE_SCATTER, DT_COLL_ALL_TO_ALL};

typedef struct run {
    const config *c;
    float loss[STEPS];
    uint64_t calls[STEPS][DT_COLL_KIND_COUNT];
} run;

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->c->mesh, &mesh));
    tl_model m;
    R_OK(tl_model_init(&m, mesh, &cfg, &r->c->l, 7));
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        R_OK(dt_comm_stats_reset(ctx));
        /* DT_PRINT_COMMS=1: step 0's redistributions and collectives of rank 0 */
        if (s == 0 && dt_ctx_rank(ctx) == 0 && getenv("DT_PRINT_COMMS"))
            R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_LOG));
        if (s == 1) R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_IMPLICIT));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_OK(dt_backward(loss));
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        dt_comm_stats cs;
        R_OK(dt_comm_stats_get(ctx, &cs));
        if (dt_ctx_rank(ctx) == 0) {
            memcpy(r->calls[s], cs.calls, sizeof r->calls[s]);
            if (s == 0 && getenv("DT_PRINT_COMMS")) dt_comm_stats_print(&cs, r->c->name, stderr);
        }
        R_OK(dt_tensor_full_tensor(loss, &r->loss[s], sizeof r->loss[s]));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    }
    R_OK(dt_optim_destroy(opt));
    tl_model_free(&m);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(context_train, loss_parity_and_collectives) {
    /* Per step, on rank 0, besides the ring (2 layers x (cp - 1 + 2 cp - 1) sends and as many
     * receives over cp):
     * - cp=2: grad sync's one all_reduce over cp of every gradient (each Partial there: each
     *   rank saw part of the sequence); the targets are replicated, so cross_entropy checks the
     *   labels with no collective. Nothing else moves: the linears' weight gradients sum g^T x per batch row over the
     *   local sequence (the sequence is never flattened into rows), the embedding's gradient
     *   flattens the tokens sequence-first, and cross_entropy takes (B, vocab, T) logits.
     * - cp=2 x tp=2 (heads over tp): as test_parallel_train's tp, 5 forward all_reduces of the
     *   rowwise outputs, 5 backward into the norms, 2 of loss parallel's row statistics, over
     *   tp; grad sync's all_reduce over cp, and one over cp+tp for the norm weights' gradients
     *   (Partial over both).
     * - with sequence parallelism: each tp all_reduce becomes a reduce_scatter and an
     *   all_gather (the sequence sharded over tp inside each cp shard), 10 of each; loss
     *   parallel's 2, grad sync's 2.
     * - cp=3: 256 rows in 6 chunks of 43 and 41 rows are uneven shards, which a mean and a view
     *   cannot keep: the per-token losses' mean gathers them (1 all_gather), and in backward
     *   the embedding gradient's sequence-first flatten re-shards the tokens and the gradient
     *   (2 all_gathers, 1 all_to_all); grad sync's all_reduce.
     * - dp=2 with FSDP units x cp=2: FSDP's 3 units (the root, kept gathered, and one per
     *   block, the last kept gathered) gathered in forward as one (1: the root's carries the
     *   blocks', DT_FSDP_COALESCE_BYTES) and block 0 again in backward (1), one reduce_scatter
     *   each (3) over dp (each alone: the unit's reduced shards are all_reduced over cp, as
     *   HSDP's over dp_replicate), the gradient shards all_reduced over cp (3 buckets); the
     *   loss mean over the two sharded dims gathers the per-token losses over dp, and the
     *   embedding gradient of tokens sharded on both dims moves nothing (each rank adds its
     *   own block of rows: a Partial sum over dp and cp, reduced with the others). */
    static const config configs[] = {
        {"cp=2", "cp=2", 2, 2, {.dp_dim = -1, .tp_dim = -1, .cp_dim = 1}, {1, 0, 0, 0}},
        {"cp=2 x tp=2",
         "cp=2,tp=2",
         4,
         2,
         {.dp_dim = -1, .tp_dim = 1, .cp_dim = 1, .loss_parallel = 1},
         {14, 0, 0, 0}},
        {"cp=2 x tp=2 sp",
         "cp=2,tp=2",
         4,
         2,
         {.dp_dim = -1, .tp_dim = 1, .cp_dim = 1, .sequence_parallel = 1, .loss_parallel = 1},
         {4, 10, 10, 0}},
        {"cp=3 (uneven)", "cp=3", 3, 3, {.dp_dim = -1, .tp_dim = -1, .cp_dim = 1}, {1, 3, 0, 1}},
        {"dp=2 fsdp units x cp=2",
         "dp=2,cp=2",
         4,
         2,
         {.dp_dim = 0, .tp_dim = -1, .cp_dim = 2, .fsdp = 1, .fsdp_units = 1},
         {3, 3, 3, 0}},
    };
    static const config one = {"1 rank", "1", 1, 1, {.dp_dim = -1, .tp_dim = -1}, {0}};
    run ref = {.c = &one};
    t_run(1, body, &ref);
    cr_assert(ref.loss[STEPS - 1] < ref.loss[0], "one rank did not learn: %g -> %g", ref.loss[0],
              ref.loss[STEPS - 1]);
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        const config *c = &configs[i];
        run r = {.c = c};
        t_run(c->ranks, body, &r);
        uint64_t sends = (uint64_t)(cfg.layers * (c->cp - 1 + 2 * c->cp - 1));
        for (int s = 0; s < STEPS; s++)
            cr_expect(fabsf(r.loss[s] - ref.loss[s]) <= 1e-5f * fabsf(ref.loss[s]),
                      "%s step %d: loss %.8g, one rank %.8g", c->name, s, r.loss[s], ref.loss[s]);
        for (int s = 0; s < STEPS; s++) {
            const uint64_t *n = r.calls[s];
            cr_expect(n[DT_COLL_SEND] == sends && n[DT_COLL_RECV] == sends,
                      "%s step %d: %llu sends, %llu receives, want %llu each", c->name, s,
                      (unsigned long long)n[DT_COLL_SEND], (unsigned long long)n[DT_COLL_RECV],
                      (unsigned long long)sends);
            for (int k = 0; k < 4; k++)
                cr_expect(n[kinds[k]] == (uint64_t)c->want[k], "%s step %d: %llu %s, want %d",
                          c->name, s, (unsigned long long)n[kinds[k]], dt_coll_kind_name(kinds[k]),
                          c->want[k]);
            cr_expect(n[DT_COLL_BROADCAST] == 0 && n[DT_COLL_BARRIER] == 0,
                      "%s step %d: %llu broadcasts, %llu barriers", c->name, s,
                      (unsigned long long)n[DT_COLL_BROADCAST],
                      (unsigned long long)n[DT_COLL_BARRIER]);
        }
        cr_log_info("%s: loss %.6g -> %.6g as on one rank; per step %llu sends, %llu "
                    "all_reduce, %llu all_gather, %llu reduce_scatter, %llu all_to_all",
                    c->name, r.loss[0], r.loss[STEPS - 1],
                    (unsigned long long)r.calls[0][DT_COLL_SEND],
                    (unsigned long long)r.calls[0][DT_COLL_ALL_REDUCE],
                    (unsigned long long)r.calls[0][DT_COLL_ALL_GATHER],
                    (unsigned long long)r.calls[0][DT_COLL_REDUCE_SCATTER],
                    (unsigned long long)r.calls[0][DT_COLL_ALL_TO_ALL]);
    }
}

/* The two gradients context parallelism changed: linear's weight gradient and embedding's
 * table gradient for an input (B, T, ...) sharded on T. On cp=2 (T even and odd) and dp x cp
 * 2x2 (batch and sequence both sharded), f64 integer data, so every sum is exact: the
 * gradients of loss = sum(linear(x, w) * r) + sum(embedding(table, idx) * r2) equal naive loops
 * exactly; on cp=2 with T even the only collective is grad sync's all_reduce of the two Partial
 * gradients, one bucket (nothing re-shards: without the sequence-first rules, 4 re-sharding
 * collectives more). */
typedef struct gcase {
    const char *mesh;
    int64_t B, T;         /* on 2 mesh dims: the first shards the batch, the second T */
    int only_grad_reduce; /* assert: no collective but grad sync's */
} gcase;

enum { IN = 5, OUT = 3, V = 7, E = 4 };

static dt_status grads_body(dt_ctx *ctx, void *arg) {
    const gcase *c = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    int64_t B = c->B, T = c->T, N = B * T;
    int64_t sx[3] = {B, T, IN}, sw[2] = {OUT, IN}, sr[3] = {B, T, OUT}, st2[2] = {V, E};
    int64_t si[2] = {B, T}, sr2[3] = {B, T, E};
    double *x = malloc(sizeof(double) * (size_t)(N * IN)), w[OUT * IN], table[V * E];
    double *r = malloc(sizeof(double) * (size_t)(N * OUT)),
           *r2 = malloc(sizeof(double) * (size_t)(N * E));
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)N);
    for (int64_t i = 0; i < N * IN; i++)
        x[i] = t_value(1, (size_t)i);
    for (int64_t i = 0; i < N * OUT; i++)
        r[i] = t_value(2, (size_t)i);
    for (int64_t i = 0; i < N * E; i++)
        r2[i] = t_value(3, (size_t)i);
    for (int i = 0; i < OUT * IN; i++)
        w[i] = t_value(4, (size_t)i);
    for (int i = 0; i < V * E; i++)
        table[i] = t_value(5, (size_t)i);
    for (int64_t i = 0; i < N; i++)
        idx[i] = (i * 5 + i / 3) % V; /* repeats: sums per row */
    dt_placement act[2], rep[2] = {dt_replicate(), dt_replicate()};
    if (mnd == 2)
        act[0] = dt_shard(0), act[1] = dt_shard(1);
    else
        act[0] = dt_shard(1);
    dt_tensor *tx, *tw, *tr, *tt, *ti, *tr2, *y, *p, *l1, *emb, *p2, *l2, *loss;
    R_OK(dt_tensor_distribute(mesh, x, DT_F64, 3, sx, mnd, act, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, r, DT_F64, 3, sr, mnd, act, DT_ALL_RANKS, &tr));
    R_OK(dt_tensor_distribute(mesh, r2, DT_F64, 3, sr2, mnd, act, DT_ALL_RANKS, &tr2));
    R_OK(dt_tensor_distribute(mesh, idx, DT_I64, 2, si, mnd, act, DT_ALL_RANKS, &ti));
    R_OK(dt_tensor_distribute(mesh, w, DT_F64, 2, sw, mnd, rep, DT_ALL_RANKS, &tw));
    R_OK(dt_tensor_distribute(mesh, table, DT_F64, 2, st2, mnd, rep, DT_ALL_RANKS, &tt));
    R_OK(dt_tensor_set_requires_grad(tx, 1));
    R_OK(dt_tensor_set_requires_grad(tw, 1));
    R_OK(dt_tensor_set_requires_grad(tt, 1));
    R_OK(dt_linear(tx, tw, NULL, &y));
    R_OK(dt_mul(y, tr, &p));
    R_OK(dt_sum(p, NULL, 0, 0, &l1));
    R_OK(dt_embedding(tt, ti, &emb));
    R_OK(dt_mul(emb, tr2, &p2));
    R_OK(dt_sum(p2, NULL, 0, 0, &l2));
    R_OK(dt_add(l1, l2, &loss));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_backward(loss));
    if (c->only_grad_reduce) {
        uint64_t ar = t_issued(ctx, DT_COLL_ALL_REDUCE), all = t_issued_total(ctx);
        R_CHECK(ar == 1 && all == 1,
                "%s T %lld: backward issued %llu collectives, %llu of them all_reduce (grad "
                "sync only)",
                c->mesh, (long long)T, (unsigned long long)all, (unsigned long long)ar);
    }
    double gw[OUT * IN], gt[V * E], *gx = malloc(sizeof(double) * (size_t)(N * IN));
    double want_gw[OUT * IN] = {0}, want_gt[V * E] = {0};
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(tw), gw, sizeof gw));
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(tt), gt, sizeof gt));
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(tx), gx, sizeof(double) * (size_t)(N * IN)));
    for (int64_t n = 0; n < N; n++) {
        for (int o = 0; o < OUT; o++)
            for (int i = 0; i < IN; i++) {
                want_gw[o * IN + i] += r[n * OUT + o] * x[n * IN + i];
                double gxi = 0;
                for (int oo = 0; oo < OUT; oo++)
                    gxi += r[n * OUT + oo] * w[oo * IN + i];
                R_CHECK(o > 0 || gx[n * IN + i] == gxi, "%s: dx[%lld] = %g, want %g", c->mesh,
                        (long long)(n * IN + i), gx[n * IN + i], gxi);
            }
        for (int e = 0; e < E; e++)
            want_gt[idx[n] * E + e] += r2[n * E + e];
    }
    for (int i = 0; i < OUT * IN; i++)
        R_CHECK(gw[i] == want_gw[i], "%s T %lld: dw[%d] = %g, want %g", c->mesh, (long long)T, i,
                gw[i], want_gw[i]);
    for (int i = 0; i < V * E; i++)
        R_CHECK(gt[i] == want_gt[i], "%s T %lld: dtable[%d] = %g, want %g", c->mesh, (long long)T,
                i, gt[i], want_gt[i]);
    dt_tensor *all[] = {tx, tw, tr, tt, ti, tr2, y, p, l1, emb, p2, l2, loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    free(x), free(r), free(r2), free(idx), free(gx);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(context_train, sequence_sharded_linear_and_embedding_gradients) {
    static const gcase cases[] = {
        {"cp=2", 2, 6, 1},
        {"cp=2", 3, 5, 0},
        {"dp=2,cp=2", 2, 6, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        t_run(cases[i].mesh[0] == 'd' ? 4 : 2, grads_body, (void *)&cases[i]);
}

/* Activation checkpointing around blocks that hold ring attention: its node is the caller's
 * code (dt_autograd_record_custom), which recomputation cannot replay, so its output is kept
 * while the rest of the block is dropped and replayed; full, selective and measured train with
 * losses bitwise those of none on cp=2 (replaying an op other than ring attention's failed here). */
Test(context_train, activation_checkpointing_keeps_the_ring) {
    run r[DT_AC_MODE_COUNT];
    config c[DT_AC_MODE_COUNT];
    for (int a = 0; a < DT_AC_MODE_COUNT; a++) {
        c[a] = (config){"cp=2", "cp=2", 2, 2, {.dp_dim = -1, .tp_dim = -1, .cp_dim = 1}, {0}};
        c[a].l.ac = (dt_ac_mode)a;
        c[a].l.ac_budget = 256 << 10; /* measured: about 8 of its (B, T/cp, dim) tensors */
        r[a] = (run){.c = &c[a]};
        t_run(2, body, &r[a]);
    }
    for (int a = 1; a < DT_AC_MODE_COUNT; a++)
        cr_expect(!memcmp(r[a].loss, r[0].loss, sizeof r[0].loss),
                  "ac %s: the losses differ from no checkpointing (last %.9g, %.9g)",
                  dt_ac_mode_name((dt_ac_mode)a), r[a].loss[STEPS - 1], r[0].loss[STEPS - 1]);
}
