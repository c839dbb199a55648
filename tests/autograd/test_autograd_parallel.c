/* Autograd on parallel layouts: the collectives a backward issues (Megatron MLP, sequence
 * parallel, DDP and FSDP gradient sync, accumulation without sync), the gradients against
 * naive loops and one rank, the graph's and gradients' lifetime (live tensors and bytes), the
 * grad-mode switches and the seed of Partial losses. Everything in f64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/tensor_impl.h"
#include "helpers.h"

static double *values(uint64_t seed, size_t n, double scale) {
    double *v = malloc(n * sizeof *v);
    for (size_t k = 0; k < n; k++) v[k] = t_value(seed, k) / scale;
    return v;
}

static dt_status dist(dt_mesh *mesh, const double *buf, int ndim, const int64_t *shape,
                      const dt_placement *pl, dt_tensor **out) {
    return dt_tensor_distribute(mesh, buf, DT_F64, ndim, shape, dt_mesh_ndim(mesh), pl,
                                DT_ALL_RANKS, out);
}

/* Calls of kind on communicators labelled group ("tp", "dp", ...) since the last reset. */
static uint64_t issued_on(dt_ctx *ctx, dt_coll_kind kind, const char *group) {
    dt_comm_stats s;
    dt_comm_stats_get(ctx, &s);
    uint64_t n = 0;
    for (int e = 0; e < s.nentries; e++)
        if (s.entries[e].kind == kind && !strcmp(s.entries[e].group, group))
            n += s.entries[e].calls;
    return n;
}

/* t's placements must be want (n mesh dims). */
static dt_status placed(dt_tensor *t, int n, const dt_placement *want, const char *what) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    char have[96], need[96];
    dt_placements_format(info.placements, n, have, sizeof have);
    dt_placements_format(want, n, need, sizeof need);
    for (int m = 0; m < n; m++)
        R_CHECK(dt_placement_equal(info.placements[m], want[m]), "%s is %s, want %s", what, have,
                need);
    return DT_OK;
}

/* The full tensor t must equal want (n elements) to tol relative. */
static dt_status equals(dt_tensor *t, const double *want, size_t n, double tol, const char *what) {
    double *got = malloc(n * sizeof *got);
    dt_status st = dt_tensor_full_tensor(t, got, n * sizeof *got);
    for (size_t k = 0; k < n && st == DT_OK; k++)
        if (!(fabs(got[k] - want[k]) <= tol * (1 + fabs(want[k]))))
            st = t_fail(__FILE__, __LINE__, "%s[%zu] = %.15g, want %.15g", what, k, got[k],
                        want[k]);
    free(got);
    return st;
}

/* ---- Megatron MLP: y = (x W1^T)^2 W2^T, loss = sum(y * w) ----------------------------------- */

enum { T = 8, C = 8, H = 16 };

typedef struct mlp_grad {
    const char *mesh; /* "tp=4", or "tp=1" for the one-rank gradients */
    int sp;           /* sequence parallel: x, y and w sharded on T */
    double *g[3];     /* out on rank 0: the full gradients of x, W1, W2 */
} mlp_grad;

/* The gradients by hand: a = x W1^T, act = a * a, y = act W2^T, dy = w. */
static void mlp_naive(const double *x, const double *w1, const double *w2, const double *w,
                      double *gx, double *gw1, double *gw2) {
    double a[T][H], dact[T][H], da[T][H]; /* per call: every rank thread runs it at once */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            a[t][h] = 0;
            for (int c = 0; c < C; c++) a[t][h] += x[t * C + c] * w1[h * C + c];
            dact[t][h] = 0;
            for (int c = 0; c < C; c++) dact[t][h] += w[t * C + c] * w2[c * H + h];
            da[t][h] = 2 * a[t][h] * dact[t][h];
        }
    for (int c = 0; c < C; c++)
        for (int h = 0; h < H; h++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += w[t * C + c] * a[t][h] * a[t][h];
            gw2[c * H + h] = s;
        }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += da[t][h] * x[t * C + c];
            gw1[h * C + c] = s;
        }
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int h = 0; h < H; h++) s += da[t][h] * w1[h * C + c];
            gx[t * C + c] = s;
        }
}

static dt_status mlp_grad_body(dt_ctx *ctx, void *arg) {
    mlp_grad *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int64_t xs[2] = {T, C}, w1s[2] = {H, C}, w2s[2] = {C, H};
    double *x = values(1, T * C, 4), *w1 = values(2, H * C, 16), *w2 = values(3, C * H, 16),
           *w = values(4, T * C, 4);
    dt_placement col[1] = {dt_shard(0)}, row[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    const dt_placement *io = r->sp ? col : rep; /* S(0): the sequence dim */
    dt_tensor *tx, *tw1, *tw2, *tw, *h, *act, *o, *y, *yw, *loss;
    R_OK(dist(mesh, x, 2, xs, io, &tx));
    R_OK(dist(mesh, w1, 2, w1s, col, &tw1));
    R_OK(dist(mesh, w2, 2, w2s, row, &tw2));
    R_OK(dist(mesh, w, 2, xs, io, &tw));
    R_OK(dt_tensor_set_requires_grad(tx, 1));
    R_OK(dt_tensor_set_requires_grad(tw1, 1));
    R_OK(dt_tensor_set_requires_grad(tw2, 1));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_linear(tx, tw1, NULL, &h)); /* (T, C) -> (T, H/tp) */
    R_OK(dt_mul(h, h, &act));           /* gelu's stand-in: its rule is not written yet */
    R_OK(dt_linear(act, tw2, NULL, &o)); /* (T, H/tp) -> (T, C) partial */
    R_OK(dt_tensor_redistribute(o, 1, io, &y));
    uint64_t ar = t_issued(ctx, DT_COLL_ALL_REDUCE), ag = t_issued(ctx, DT_COLL_ALL_GATHER),
             rs = t_issued(ctx, DT_COLL_REDUCE_SCATTER), all = t_issued_total(ctx);
    int tp = dt_mesh_dim_size(mesh, 0) > 1;
    if (tp && r->sp)
        R_CHECK(ag == 1 && rs == 1 && all == 2, "sequence-parallel forward: %llu collectives "
                "(%llu all_gather, %llu reduce_scatter)", (unsigned long long)all,
                (unsigned long long)ag, (unsigned long long)rs);
    if (tp && !r->sp)
        R_CHECK(ar == 1 && all == 1, "tensor-parallel forward: %llu collectives, %llu all_reduce",
                (unsigned long long)all, (unsigned long long)ar);
    R_OK(dt_mul(y, tw, &yw));
    R_OK(dt_sum(yw, NULL, 0, 0, &loss));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_backward(loss));
    ar = t_issued(ctx, DT_COLL_ALL_REDUCE), ag = t_issued(ctx, DT_COLL_ALL_GATHER);
    rs = t_issued(ctx, DT_COLL_REDUCE_SCATTER), all = t_issued_total(ctx);
    /* The mirror of the forward: the output's gradient is gathered where the output was
     * reduce_scattered, the input's reduce_scattered where the input was gathered. */
    if (tp && all != (r->sp ? 2u : 1u) && dt_ctx_rank(ctx) == 0) { /* the table, for the failure */
        dt_comm_stats cs;
        dt_comm_stats_get(ctx, &cs);
        dt_comm_stats_print(&cs, "MLP backward", stderr);
    }
    if (tp && r->sp)
        R_CHECK(ag == 1 && rs == 1 && all == 2, "sequence-parallel backward: %llu collectives "
                "(%llu all_gather, %llu reduce_scatter, %llu all_reduce)",
                (unsigned long long)all, (unsigned long long)ag, (unsigned long long)rs,
                (unsigned long long)ar);
    if (tp && !r->sp)
        R_CHECK(ar == 1 && all == 1, "tensor-parallel backward: %llu collectives, %llu "
                "all_reduce (one, for x's gradient)", (unsigned long long)all,
                (unsigned long long)ar);
    dt_tensor *leaf[3] = {tx, tw1, tw2};
    const dt_placement *want[3] = {io, col, row};
    const char *names[3] = {"x's gradient", "W1's gradient", "W2's gradient"};
    const size_t n[3] = {T * C, H * C, C * H};
    double *naive[3] = {malloc(n[0] * 8), malloc(n[1] * 8), malloc(n[2] * 8)};
    mlp_naive(x, w1, w2, w, naive[0], naive[1], naive[2]);
    for (int i = 0; i < 3; i++) {
        dt_tensor *g = dt_tensor_grad(leaf[i]);
        R_CHECK(g != NULL, "%s is missing", names[i]);
        R_OK(placed(g, 1, want[i], names[i])); /* sharded like the leaf: no reduction needed */
        R_OK(equals(g, naive[i], n[i], 1e-12, names[i]));
        double *full = malloc(n[i] * 8);
        R_OK(dt_tensor_full_tensor(g, full, n[i] * 8));
        if (dt_ctx_rank(ctx) == 0) r->g[i] = full;
        else free(full);
        free(naive[i]);
    }
    dt_tensor *all_t[] = {tx, tw1, tw2, tw, h, act, o, y, yw, loss};
    for (size_t i = 0; i < DT_COUNT_OF(all_t); i++) dt_tensor_release(all_t[i]);
    dt_mesh_release(mesh);
    free(x), free(w1), free(w2), free(w);
    return DT_OK;
}

static void mlp_check(int sp) {
    mlp_grad one = {.mesh = "tp=1", .sp = sp}, four = {.mesh = "tp=4", .sp = sp};
    t_run(1, mlp_grad_body, &one);
    t_run(4, mlp_grad_body, &four);
    const size_t n[3] = {T * C, H * C, C * H};
    for (int i = 0; i < 3; i++) {
        for (size_t k = 0; k < n[i]; k++)
            cr_assert(fabs(four.g[i][k] - one.g[i][k]) <= 1e-12 * (1 + fabs(one.g[i][k])),
                      "gradient %d [%zu]: %.15g on tp=4, %.15g on one rank", i, k,
                      four.g[i][k], one.g[i][k]);
        free(one.g[i]), free(four.g[i]);
    }
}

Test(autograd_parallel, tensor_parallel_mlp_backward_issues_one_all_reduce) { mlp_check(0); }

Test(autograd_parallel, sequence_parallel_mlp_backward_mirrors_its_forward) { mlp_check(1); }

/* ---- gradient sync on dp=2 x tp=2: y = x W^T, loss = sum(y * w), x sharded over dp ---------- */

enum { B = 16, K = 4, N = 8 }; /* x (B, K), W (N, K), y and w (B, N) */

typedef struct sync_run {
    int fsdp;       /* W (S(1), S(0)): sharded over dp too; else (R, S(0)), replicated over dp */
    int microbatch; /* two backwards without sync, then one with */
} sync_run;

static dt_status sync_body(dt_ctx *ctx, void *arg) {
    const sync_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    int64_t xs[2] = {B, K}, ws[2] = {N, K}, ys[2] = {B, N};
    dt_placement px[2] = {dt_shard(0), dt_replicate()}, py[2] = {dt_shard(0), dt_shard(1)};
    dt_placement pw[2] = {r->fsdp ? dt_shard(1) : dt_replicate(), dt_shard(0)};
    double *w0 = values(11, N * K, 8), *lw = values(12, B * N, 4);
    dt_tensor *tw, *tlw;
    R_OK(dist(mesh, w0, 2, ws, pw, &tw));
    R_OK(dist(mesh, lw, 2, ys, py, &tlw));
    R_OK(dt_tensor_set_requires_grad(tw, 1));
    const int steps = r->microbatch ? 3 : 1;
    double *want = calloc(N * K, sizeof *want);
    const dt_coll_kind reduction = r->fsdp ? DT_COLL_REDUCE_SCATTER : DT_COLL_ALL_REDUCE;
    const char *rname = r->fsdp ? "reduce_scatter" : "all_reduce";
    for (int k = 0; k < steps; k++) {
        int synced = k == steps - 1;
        R_OK(dt_ctx_set_grad_sync(ctx, synced));
        double *x = values(20 + (uint64_t)k, B * K, 4);
        for (int n = 0; n < N; n++) /* d/dW of sum(x W^T * w) is w^T x */
            for (int c = 0; c < K; c++)
                for (int b = 0; b < B; b++) want[n * K + c] += lw[b * N + n] * x[b * K + c];
        dt_tensor *tx, *y, *yw, *loss;
        R_OK(dist(mesh, x, 2, xs, px, &tx));
        free(x);
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_linear(tx, tw, NULL, &y));
        R_OK(placed(y, 2, py, "y"));
        uint64_t gathers = issued_on(ctx, DT_COLL_ALL_GATHER, "dp"), all = t_issued_total(ctx);
        R_CHECK(all == (uint64_t)r->fsdp && gathers == (uint64_t)r->fsdp,
                "forward: %llu collectives, %llu all_gather over dp (FSDP gathers W once)",
                (unsigned long long)all, (unsigned long long)gathers);
        R_OK(dt_mul(y, tlw, &yw));
        R_OK(dt_sum(yw, NULL, 0, 0, &loss));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_backward(loss));
        uint64_t red = issued_on(ctx, reduction, "dp");
        all = t_issued_total(ctx);
        R_CHECK(red == (uint64_t)synced && all == (uint64_t)synced,
                "backward %d (sync %s): %llu collectives, %llu %s over dp, want %d", k,
                synced ? "on" : "off", (unsigned long long)all, (unsigned long long)red, rname,
                synced);
        dt_tensor *g = dt_tensor_grad(tw);
        R_CHECK(g != NULL, "W has no gradient after backward %d", k);
        if (synced) {
            R_OK(placed(g, 2, pw, "W's synced gradient"));
        } else {
            dt_placement pend[2] = {dt_partial(DT_REDUCE_SUM), dt_shard(0)};
            R_OK(placed(g, 2, pend, "W's unsynced gradient")); /* Partial over dp */
        }
        R_OK(equals(g, want, N * K, 1e-12, "W's gradient"));
        dt_tensor_release(tx), dt_tensor_release(y), dt_tensor_release(yw);
        dt_tensor_release(loss);
    }
    dt_tensor_release(tw), dt_tensor_release(tlw);
    dt_mesh_release(mesh);
    free(w0), free(lw), free(want);
    return DT_OK;
}

Test(autograd_parallel, ddp_gradient_is_all_reduced_over_dp) {
    sync_run r = {.fsdp = 0};
    t_run(4, sync_body, &r);
}

Test(autograd_parallel, fsdp_gradient_is_reduce_scattered_over_dp) {
    sync_run r = {.fsdp = 1};
    t_run(4, sync_body, &r);
}

Test(autograd_parallel, ddp_micro_batches_without_sync_reduce_once) {
    sync_run r = {.fsdp = 0, .microbatch = 1};
    t_run(4, sync_body, &r);
}

Test(autograd_parallel, fsdp_micro_batches_without_sync_reduce_once) {
    sync_run r = {.fsdp = 1, .microbatch = 1};
    t_run(4, sync_body, &r);
}

/* ---- lifetime: the graph and the gradients leave nothing behind ----------------------------- */

/* The rank's live tensors and owned bytes (dt_ctx_tensor_memory). */
static void live_now(dt_ctx *ctx, int64_t *tensors, int64_t *bytes) {
    dt_tensor_memory m = {0};
    dt_ctx_tensor_memory(ctx, &m);
    *tensors = m.tensors, *bytes = m.bytes;
}

static dt_status live_is(dt_ctx *ctx, int64_t tensors, int64_t bytes, const char *when) {
    int64_t n, b;
    live_now(ctx, &n, &b);
    R_CHECK(n == tensors && b == bytes, "%s: %lld tensors of %lld bytes live, want %lld of %lld",
            when, (long long)n, (long long)b, (long long)tensors, (long long)bytes);
    return DT_OK;
}

static int64_t local_bytes(dt_tensor *t) {
    dt_tensor_info info;
    return dt_tensor_info_get(t, &info) == DT_OK ? (int64_t)info.local_bytes : -1;
}

/* The MLP on tp=4 with only the loss kept: the graph holds the intermediates until backward,
 * which frees them; zero_grad frees the gradients. */
static dt_status lifetime_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=4", &mesh));
    int64_t xs[2] = {T, C}, w1s[2] = {H, C}, w2s[2] = {C, H};
    double *x = values(1, T * C, 4), *w1 = values(2, H * C, 16), *w2 = values(3, C * H, 16);
    dt_placement col[1] = {dt_shard(0)}, row[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    int64_t n0, b0;
    live_now(ctx, &n0, &b0);
    dt_tensor *tx, *tw1, *tw2, *h, *act, *o, *y, *loss;
    R_OK(dist(mesh, x, 2, xs, rep, &tx));
    R_OK(dist(mesh, w1, 2, w1s, col, &tw1));
    R_OK(dist(mesh, w2, 2, w2s, row, &tw2));
    free(x), free(w1), free(w2);
    R_OK(dt_tensor_set_requires_grad(tw1, 1));
    R_OK(dt_tensor_set_requires_grad(tw2, 1));
    int64_t params = local_bytes(tx) + local_bytes(tw1) + local_bytes(tw2);
    R_OK(live_is(ctx, n0 + 3, b0 + params, "the parameters and x"));
    for (int round = 0; round < 2; round++) { /* the second sees the first left nothing */
        R_OK(dt_linear(tx, tw1, NULL, &h));
        R_OK(dt_mul(h, h, &act));
        R_OK(dt_linear(act, tw2, NULL, &o));
        R_OK(dt_tensor_redistribute(o, 1, rep, &y));
        R_OK(dt_sum(y, NULL, 0, 0, &loss));
        R_ERR(dt_tensor_set_requires_grad(h, 0), DT_ERR_ARG, "recorded op");
        R_ERR(dt_backward(y), DT_ERR_ARG, "elements");
        dt_tensor_release(h), dt_tensor_release(act), dt_tensor_release(o);
        dt_tensor_release(y);
        int64_t n, b;
        live_now(ctx, &n, &b);
        R_CHECK(n == n0 + 3 + 5, "the graph holds %lld tensors besides the loss and the leaves, "
                "want 4 (h, act, o, y)", (long long)(n - n0 - 4));
        R_OK(dt_backward(loss));
        dt_tensor *g1 = dt_tensor_grad(tw1), *g2 = dt_tensor_grad(tw2);
        R_CHECK(g1 && g2 && dt_tensor_grad(tx) == NULL, "gradients: W1 %p, W2 %p, x %p",
                (void *)g1, (void *)g2, (void *)dt_tensor_grad(tx));
        R_OK(live_is(ctx, n0 + 3 + 3,
                     b0 + params + local_bytes(loss) + local_bytes(g1) + local_bytes(g2),
                     "after backward: the leaves, the loss and two gradients"));
        R_ERR(dt_backward(loss), DT_ERR_ARG, "freed");
        dt_tensor_release(loss);
        R_OK(dt_tensor_zero_grad(tw1));
        R_OK(dt_tensor_zero_grad(tw2));
        R_OK(live_is(ctx, n0 + 3, b0 + params, "after zero_grad"));
    }
    dt_tensor_release(tx), dt_tensor_release(tw1), dt_tensor_release(tw2);
    R_OK(live_is(ctx, n0, b0, "at the end"));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd_parallel, backward_and_zero_grad_leave_only_the_parameters) {
    t_run(4, lifetime_body, NULL);
}

/* Grad mode scopes, requires_grad on what cannot have one, and in-place updates. */
static dt_status switches_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t shape[1] = {6};
    dt_placement s0[1] = {dt_shard(0)};
    double *v = values(5, 6, 4), *u = values(6, 6, 4), after[6];
    dt_tensor *p, *upd, *q, *idx;
    R_OK(dist(mesh, v, 1, shape, s0, &p));
    R_OK(dist(mesh, u, 1, shape, s0, &upd));
    R_OK(dt_tensor_set_requires_grad(p, 1));
    R_OK(dt_tensor_zeros(mesh, DT_I64, 1, shape, 1, s0, &idx));
    R_ERR(dt_tensor_set_requires_grad(idx, 1), DT_ERR_ARG, "cannot require grad");
    /* nested no_grad: nothing records until the outer scope closes */
    R_CHECK(dt_grad_enabled(ctx), "grad mode starts off");
    R_OK(dt_no_grad_enter(ctx));
    R_OK(dt_no_grad_enter(ctx));
    R_OK(dt_no_grad_exit(ctx));
    R_CHECK(!dt_grad_enabled(ctx), "grad mode is on inside the outer no_grad scope");
    R_OK(dt_mul(p, upd, &q));
    R_CHECK(!dt_tensor_requires_grad(q), "an op under no_grad recorded a node");
    R_OK(dt_tensor_set_requires_grad(q, 0)); /* a leaf: no node was recorded */
    dt_tensor_release(q);
    /* the optimizer's update: in place, allowed under no_grad */
    R_OK(dt_add_(p, upd));
    R_OK(dt_mul_(p, upd));
    R_OK(dt_no_grad_exit(ctx));
    R_ERR(dt_no_grad_exit(ctx), DT_ERR_ARG, "no dt_no_grad_enter");
    R_CHECK(dt_grad_enabled(ctx), "grad mode stays off after its scopes closed");
    for (int k = 0; k < 6; k++) after[k] = (v[k] + u[k]) * u[k];
    R_OK(equals(p, after, 6, 0, "p after p += u; p *= u"));
    R_CHECK(dt_tensor_requires_grad(p), "p no longer requires grad after its update");
    R_OK(dt_mul(p, upd, &q));
    R_CHECK(dt_tensor_requires_grad(q), "an op on p with grad mode on recorded nothing");
    dt_tensor_release(q);
    /* in place while recording: refused, on either side, and p is unchanged */
    R_ERR(dt_add_(p, upd), DT_ERR_ARG, "requires grad");
    R_ERR(dt_mul_(upd, p), DT_ERR_ARG, "requires grad");
    R_OK(equals(p, after, 6, 0, "p after refused updates"));
    R_OK(equals(upd, u, 6, 0, "u after a refused update"));
    /* in place on a tensor a recorded op saved: allowed (neither side requires grad), but the
     * backward that would read the overwritten values is refused by name */
    dt_tensor *prod, *total;
    R_OK(dt_mul(p, upd, &prod));
    R_OK(dt_add_(upd, upd));
    R_OK(dt_sum(prod, NULL, 0, 0, &total));
    R_ERR(dt_backward(total), DT_ERR_ARG, "modified by an in-place op after mul recorded it");
    dt_tensor_release(total), dt_tensor_release(prod);
    dt_tensor_release(p), dt_tensor_release(upd), dt_tensor_release(idx);
    free(v), free(u);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd_parallel, grad_mode_scopes_requires_grad_and_in_place_updates) {
    t_run(2, switches_body, NULL);
}

/* ---- Partial losses: the seed is Replicate ones whatever the loss's reduction --------------- */

static dt_status partial_loss_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int64_t shape[1] = {8};
    dt_placement s0[1] = {dt_shard(0)}, rep[1] = {dt_replicate()};
    dt_placement psum[1] = {dt_partial(DT_REDUCE_SUM)}, pavg[1] = {dt_partial(DT_REDUCE_AVG)};
    double *v = values(7, 8, 4), *w = values(8, 8, 4), want[8];
    dt_tensor *x, *tw, *xw;
    R_OK(dist(mesh, v, 1, shape, s0, &x));
    R_OK(dist(mesh, w, 1, shape, s0, &tw));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    for (int kind = 0; kind < 3; kind++) {
        dt_tensor *loss, *s = NULL, *r = NULL;
        R_OK(dt_mul(x, tw, &xw));
        R_OK(dt_sum(xw, NULL, 0, 0, &s)); /* over the sharded dim: P(sum) */
        R_OK(placed(s, 1, psum, "sum over a sharded dim"));
        if (kind == 0) {
            loss = s, s = NULL;
        } else if (kind == 1) { /* the same value as a pending average */
            R_OK(dt_tensor_redistribute(s, 1, rep, &r));
            R_OK(dt_tensor_redistribute(r, 1, pavg, &loss));
            R_OK(placed(loss, 1, pavg, "the P(avg) loss"));
        } else { /* mean over the sharded dim: P(avg) made by an op */
            R_OK(dt_mean(xw, NULL, 0, 0, &loss));
            R_OK(placed(loss, 1, pavg, "mean over a sharded dim"));
        }
        double lv, ref = 0;
        for (int k = 0; k < 8; k++) ref += v[k] * w[k] / (kind == 2 ? 8 : 1);
        R_OK(dt_tensor_full_tensor(loss, &lv, sizeof lv));
        R_CHECK(fabs(lv - ref) <= 1e-12 * (1 + fabs(ref)), "loss %d is %.15g, want %.15g", kind,
                lv, ref);
        R_OK(dt_backward(loss));
        for (int k = 0; k < 8; k++) want[k] = w[k] / (kind == 2 ? 8 : 1);
        R_OK(placed(dt_tensor_grad(x), 1, s0, "x's gradient"));
        R_OK(equals(dt_tensor_grad(x), want, 8, 1e-15, "x's gradient"));
        R_OK(dt_tensor_zero_grad(x));
        dt_tensor_release(loss), dt_tensor_release(s), dt_tensor_release(r);
        dt_tensor_release(xw);
    }
    dt_tensor_release(x), dt_tensor_release(tw);
    free(v), free(w);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd_parallel, partial_losses_are_seeded_with_replicated_ones) {
    t_run(4, partial_loss_body, NULL);
}
