/* FSDP's coalescing of small units (dt_fsdp_options.coalesce_bytes) on the model of
 * examples/fsdp_model.c, dp = 2, 3 and 4 (the embedding's and the head's 11 rows split
 * unevenly): every limit gives the loss curve and every rank's gradients of no coalescing bit
 * for bit, and the collectives on the dp group follow from the units' sizes by the rule (a
 * forward gather carries the next units' while their gathered bytes total at most the limit;
 * a unit's reduce waits for the end of backward while the deferred bytes stay within it, and
 * the deferred ones go as one), simulated here from the parameter shapes. */
#include <stdlib.h>
#include <string.h>

#include "dtensor/tensor_impl.h"
#include "helpers.h"

#include "../../examples/fsdp_model.h"

enum { NB = 3, NP = 1 + NB * FM_BLOCK_PARAMS + 2, NU = NB + 2, STEPS = 3, MAXR = 4 };

static const fm_config cfg = {
    .vocab = 11, .seq = 6, .batch = 4, .dim = 8, .heads = 2, .hidden = 16, .blocks = NB};

typedef struct run {
    int dp;
    int64_t limit;
    float loss[STEPS];
    int64_t ag[STEPS], rs[STEPS]; /* all_gathers and reduce_scatters on the dp group, rank 0 */
    float *grads[MAXR];           /* every parameter's local gradient after each step, per rank */
    size_t ngrads[MAXR];
} run;

static dt_status keep_grads(run *r, fm_model *m, int rank, int step) {
    size_t n = 0;
    for (int i = 0; i < NP; i++)
        n += m->p[i]->local_numel;
    if (!r->grads[rank]) r->grads[rank] = malloc(sizeof(float) * (n * STEPS + 1));
    R_CHECK(r->grads[rank], "out of memory");
    r->ngrads[rank] = n * STEPS;
    float *g = r->grads[rank] + n * (size_t)step;
    for (int i = 0; i < NP; i++) {
        dt_tensor *gi = dt_tensor_grad(m->p[i]);
        R_CHECK(gi, "parameter %d has no gradient", i);
        R_OK(dt_tensor_local_to_host(gi, g, gi->local_numel * sizeof(float)));
        g += gi->local_numel;
    }
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    int rank = dt_ctx_rank(ctx);
    fm_layout l = {.ndim = 1,
                   .shape = {r->dp},
                   .names = {"dp"},
                   .dp_dim = 0,
                   .rep_dim = -1,
                   .tp_dim = -1,
                   .fsdp = 1,
                   .fsdp_options = dt_fsdp_options_default(),
                   .ac = DT_AC_NONE};
    l.fsdp_options.coalesce_bytes = r->limit;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, l.ndim, l.shape, l.names, &mesh));
    fm_model m;
    R_OK(fm_init(&m, mesh, &cfg, &l, 77));
    dt_adamw_options adamw = {
        .lr = 0.02, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_param_group all = {.params = m.p, .n = NP};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create(&adamw, &all, 1, &opt));
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss;
        R_OK(fm_batch(&m, s, &tok, &tgt));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(fm_loss(&m, tok, tgt, &loss));
        R_OK(dt_backward(loss));
        if (rank == 0) {
            r->ag[s] = fm_issued_on_dp(ctx, &l, DT_COLL_ALL_GATHER);
            r->rs[s] = fm_issued_on_dp(ctx, &l, DT_COLL_REDUCE_SCATTER);
        }
        R_OK(dt_tensor_full_tensor(loss, &r->loss[s], sizeof r->loss[s]));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
        R_OK(keep_grads(r, &m, rank, s));
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
    }
    R_OK(dt_optim_destroy(opt));
    fm_free(&m);
    dt_mesh_release(mesh);
    dt_tensor_memory left; /* nothing a gather ahead or a deferred reduce made outlives it */
    R_OK(dt_ctx_tensor_memory(ctx, &left));
    R_CHECK(left.tensors == 0 && left.bytes == 0, "%lld tensors (%lld bytes) outlive the run",
            (long long)left.tensors, (long long)left.bytes);
    return DT_OK;
}

/* Unit k's gathered bytes: its parameters' whole tensors (units: the embedding, each block,
 * the final norm with the head). */
static int64_t unit_bytes(int k) {
    int first = k == 0 ? 0 : k <= NB ? 1 + (k - 1) * FM_BLOCK_PARAMS : NP - 2;
    int n = k == 0 ? 1 : k <= NB ? FM_BLOCK_PARAMS : 2;
    int64_t b = 0;
    for (int i = first; i < first + n; i++) {
        int64_t shape[2];
        int nd = fm_param_shape(&cfg, i, shape);
        b += shape[0] * (nd == 2 ? shape[1] : 1) * (int64_t)sizeof(float);
    }
    return b;
}

/* The rule, simulated: forward gathers (every unit resharded after forward, so backward
 * gathers each again alone) and reduce_scatters per step. */
static void expected(int64_t limit, int64_t *ag, int64_t *rs) {
    int batches = 0;
    for (int k = 0; k < NU; batches++) {
        int64_t total = unit_bytes(k++);
        while (limit > 0 && k < NU && total + unit_bytes(k) <= limit)
            total += unit_bytes(k++);
    }
    int alone = 0, deferred = 0;
    int64_t held = 0;
    for (int k = NU - 1; k >= 0; k--) { /* backward completes the units last to first */
        if (limit > 0 && held + unit_bytes(k) <= limit)
            held += unit_bytes(k), deferred = 1;
        else
            alone++;
    }
    *ag = batches + NU;
    *rs = alone + deferred;
}

static void run_free(run *r) {
    for (int i = 0; i < MAXR; i++)
        free(r->grads[i]);
}

static void check_dp(int dp) {
    int64_t block = unit_bytes(1), all = 0;
    for (int k = 0; k < NU; k++)
        all += unit_bytes(k);
    /* off; everything in one; the embedding with two blocks, then the rest (backward: the head
     * and the last block deferred, the two blocks before alone, the embedding deferred); a
     * block's bytes (forward: each unit alone; backward: the head and the embedding deferred,
     * the blocks alone) */
    const int64_t limits[] = {0, all, unit_bytes(0) + 2 * block, block};
    run ref = {.dp = dp, .limit = 0};
    t_run(dp, body, &ref);
    for (size_t i = 1; i < sizeof limits / sizeof limits[0]; i++) {
        run r = {.dp = dp, .limit = limits[i]};
        t_run(dp, body, &r);
        cr_assert(!memcmp(r.loss, ref.loss, sizeof r.loss), "dp=%d limit %lld: loss curve differs",
                  dp, (long long)r.limit);
        for (int k = 0; k < dp; k++) {
            cr_assert_eq(r.ngrads[k], ref.ngrads[k]);
            cr_assert(!memcmp(r.grads[k], ref.grads[k], r.ngrads[k] * sizeof(float)),
                      "dp=%d limit %lld: rank %d's gradients differ from no coalescing's", dp,
                      (long long)r.limit, k);
        }
        int64_t ag, rs, ag0, rs0;
        expected(r.limit, &ag, &rs);
        expected(0, &ag0, &rs0);
        for (int s = 0; s < STEPS; s++) {
            /* on top of what the model issues on dp anyway (ref's, minus its units') */
            cr_assert_eq(r.ag[s] - (ref.ag[s] - ag0), ag,
                         "dp=%d limit %lld step %d: %lld "
                         "all_gathers, want %lld more than the model's %lld",
                         dp, (long long)r.limit, s, (long long)r.ag[s], (long long)ag,
                         (long long)(ref.ag[s] - ag0));
            cr_assert_eq(r.rs[s] - (ref.rs[s] - rs0), rs,
                         "dp=%d limit %lld step %d: %lld "
                         "reduce_scatters, want %lld more than the model's %lld",
                         dp, (long long)r.limit, s, (long long)r.rs[s], (long long)rs,
                         (long long)(ref.rs[s] - rs0));
        }
        cr_log_info("dp=%d limit %lld: %lld all_gathers and %lld reduce_scatters a step (none "
                    "coalesced: %lld, %lld), the same bits",
                    dp, (long long)r.limit, (long long)r.ag[0], (long long)r.rs[0],
                    (long long)ref.ag[0], (long long)ref.rs[0]);
        run_free(&r);
    }
    run_free(&ref);
}

Test(fsdp_coalesce, dp4) {
    check_dp(4);
}
Test(fsdp_coalesce, dp3_uneven) {
    check_dp(3);
}
Test(fsdp_coalesce, dp2) {
    check_dp(2);
}
