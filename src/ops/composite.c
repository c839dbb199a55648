/* Ops built from other ops, so that dispatch places every piece: var/std (a sum-based
 * variance, exact on uneven shards), swiglu (fused silu_mul, or silu and mul to broadcast) and
 * cross_entropy
 * (the target's log-probability per sample, negated, optionally label-smoothed, summed or
 * averaged; loss parallel when the class dim is sharded and keeping it so is cheaper than
 * moving the logits). They sit above the recording site, like PyTorch's composite-implicit
 * ops: each constituent runs through dt_op_call and records its own node, so the graph needs
 * no rule of theirs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "dtensor/explain.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"
#include "redistribute/redistribute_impl.h"

static dt_status call1(dt_op op, dt_tensor *x, const dt_op_args *a, dt_tensor **out) {
    return dt_op_call(op, &x, 1, a, out);
}

static dt_status call2(dt_op op, dt_tensor *x, dt_tensor *y, dt_tensor **out) {
    dt_tensor *in[2] = {x, y};
    return dt_op_call(op, in, 2, NULL, out);
}

/* ---- var and std -------------------------------------------------------------------------
 * var = sum((x - mean(x))^2) / (N - correction); std = sqrt(var). Run as they come, a
 * sharded reduced dim costs one reduction for the mean and (std) one more before the sqrt;
 * moving x once so the reduced dims are whole costs one collective and leaves every piece
 * local. Both routes are priced as dispatch prices a single op (each piece placed by
 * dt_op_choose over specs, the rank's cost model), and the cheaper one runs: the fewest
 * collectives where they are small, and no gathered x where x is large (docs/ops.md). */

/* The pieces of variance, each one op on the tensors named by its inputs: X is the input,
 * and piece k's output is tensor k + 1. */
enum { X_IN = 0, V_MEAN, V_SUB, V_SQ, V_SUM, V_SCALE, V_SQRT, V_NPIECES };
typedef struct piece {
    dt_op op;
    int in0, in1; /* -1: none */
} piece;
static const piece variance_pieces[V_NPIECES - 1] = {
    {DT_OP_MEAN, X_IN, -1}, {DT_OP_SUB, X_IN, V_MEAN},     {DT_OP_MUL, V_SUB, V_SUB},
    {DT_OP_SUM, V_SQ, -1},  {DT_OP_MUL_SCALAR, V_SUM, -1}, {DT_OP_SQRT, V_SCALE, -1}};

/* The args of piece k: the mean keeps the reduced dims (for the broadcast), the sum does not,
 * the scale divides by N - correction. */
static dt_op_args piece_args(int k, const dt_op_args *a, int64_t count) {
    dt_op_args p = {0};
    if (k == V_MEAN - 1 || k == V_SUM - 1) p = *a, p.keepdim = k == V_MEAN - 1 ? 1 : a->keepdim;
    if (k == V_SCALE - 1) p.scalar = 1.0 / (double)(count - a->correction);
    return p;
}

static int npieces(dt_op op) {
    return op == DT_OP_STD ? V_NPIECES - 1 : V_NPIECES - 2;
}

/* The estimated cost (us) of the pieces' moves when x starts at pl: each piece placed as
 * dispatch would place it, from specs alone. */
static dt_status pieces_cost(dt_op op, const dt_tensor *x, const dt_placement *pl,
                             const dt_op_args *a, int64_t count, const dt_cost_model *model,
                             double *cost) {
    const dt_mesh *mesh = x->mesh;
    dt_spec t[V_NPIECES];
    t[X_IN] = (dt_spec){.dtype = x->dtype, .ndim = x->ndim, .nplacements = mesh->ndim};
    memcpy(t[X_IN].shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(t[X_IN].placements, pl, sizeof(dt_placement) * (size_t)mesh->ndim);
    *cost = 0;
    for (int k = 0; k < npieces(op); k++) {
        const piece *p = &variance_pieces[k];
        const dt_spec *in[2] = {&t[p->in0], p->in1 >= 0 ? &t[p->in1] : NULL};
        dt_op_args pa = piece_args(k, a, count);
        dt_op_choice c;
        DT_CHECK(
            dt_op_choose(p->op, mesh->ndim, mesh->shape, in, p->in1 >= 0 ? 2 : 1, &pa, model, &c));
        *cost += c.cost_us;
        dt_spec *o = &t[k + 1];
        *o = (dt_spec){.dtype = c.out_dtype, .ndim = c.out_ndim, .nplacements = mesh->ndim};
        memcpy(o->shape, c.out_shape, sizeof(int64_t) * (size_t)c.out_ndim);
        memcpy(o->placements, c.output, sizeof(dt_placement) * (size_t)mesh->ndim);
    }
    return DT_OK;
}

/* The reduced dims of a (var/std) as a mask of x's dims, and the count they hold. */
static dt_status reduced_dims(dt_op op, const dt_tensor *x, const dt_op_args *a, unsigned *mask,
                              int64_t *count) {
    *mask = 0, *count = 1;
    for (int i = 0; i < (a->ndims ? a->ndims : x->ndim); i++) {
        int d = a->ndims ? dt_norm_dim(a->dims[i], x->ndim) : i;
        if (d < 0)
            return dt_error(DT_ERR_ARG, "%s: dims[%d] = %d is out of range for a %d-D tensor",
                            dt_op_name(op), i, a->dims[i], x->ndim);
        if (!(*mask & (1u << d))) *count *= x->shape[d];
        *mask |= 1u << d;
    }
    return DT_OK;
}

/* Where variance should start (a dt_route_fn, cached by dispatch): x's own placements, or x's
 * with every shard of a reduced dim made Replicate when that move and the then local pieces
 * cost less than the pieces as they come. */
static dt_status variance_start(dt_op op, dt_tensor *const *in, int n, const dt_op_args *a,
                                dt_placement (*start)[DT_MESH_MAX_NDIM]) {
    (void)n;
    dt_tensor *x = in[0];
    dt_mesh *mesh = x->mesh;
    unsigned reduced;
    int64_t count;
    DT_CHECK(reduced_dims(op, x, a, &reduced, &count));
    dt_placement whole[DT_MESH_MAX_NDIM];
    int differs = 0;
    for (int m = 0; m < mesh->ndim; m++) {
        dt_placement p = x->placements[m];
        int cut = p.kind == DT_PLACEMENT_SHARD && (reduced >> p.dim & 1) && mesh->shape[m] > 1;
        whole[m] = cut ? dt_replicate() : p;
        differs |= cut;
    }
    memcpy(start[0], x->placements, sizeof(dt_placement) * (size_t)mesh->ndim);
    if (!differs) return DT_OK;
    dt_cost_model model = dt_cost_model_of(mesh->ctx);
    double as_is, after;
    const dt_plan *plan;
    DT_CHECK(pieces_cost(op, x, x->placements, a, count, &model, &as_is));
    DT_CHECK(dt_redistribute_cached_plan(x, whole, &plan));
    DT_CHECK(pieces_cost(op, x, whole, a, count, &model, &after));
    if (dt_plan_cost_us(plan) + after < as_is)
        memcpy(start[0], whole, sizeof(dt_placement) * (size_t)mesh->ndim);
    return DT_OK;
}

static dt_status variance(dt_op op, dt_tensor *x, const dt_op_args *a, dt_tensor **out) {
    unsigned mask;
    int64_t count;
    DT_CHECK(reduced_dims(op, x, a, &mask, &count));
    dt_placement start[1][DT_MESH_MAX_NDIM];
    int move = 0;
    if (dt_redistribute_mode_of(x->mesh->ctx) == DT_REDISTRIBUTE_IMPLICIT) { /* else no move */
        DT_CHECK(dt_dispatch_route(op, &x, 1, a, variance_start, start));
        for (int m = 0; m < x->mesh->ndim; m++)
            move |= !dt_placement_equal(start[0][m], x->placements[m]);
    }
    dt_tensor *t[V_NPIECES] = {0};
    dt_status st = move ? dt_ops_move(x, start[0], &t[X_IN]) : dt_tensor_retain(x);
    if (st == DT_OK && !move) t[X_IN] = x;
    for (int k = 0; k < npieces(op) && st == DT_OK; k++) {
        const piece *p = &variance_pieces[k];
        dt_tensor *in[2] = {t[p->in0], p->in1 >= 0 ? t[p->in1] : NULL};
        dt_op_args pa = piece_args(k, a, count);
        st = dt_op_call(p->op, in, p->in1 >= 0 ? 2 : 1, &pa, &t[k + 1]);
    }
    int last = npieces(op);
    if (st == DT_OK) *out = t[last], t[last] = NULL;
    for (int k = 0; k < V_NPIECES; k++)
        dt_tensor_release(t[k]);
    return st;
}

/* pick wants the class dim last: (N, C, d...) -> (N, d..., C). */
static dt_op_args class_last(int ndim) {
    dt_op_args perm = {.ndims = ndim};
    for (int i = 1; i < ndim - 1; i++) perm.dims[i] = i + 1;
    perm.dims[ndim - 1] = 1;
    return perm;
}

/* The mean over classes of log_softmax, per sample (N, d...): label smoothing's term. A sum
 * scaled by 1 / C, which a sharded class dim leaves a Partial sum (mean on uneven shards
 * would move the rows instead). */
static dt_status class_mean(dt_tensor *lsm, dt_tensor **out) {
    dt_op_args along = {.ndims = 1, .dims = {1}}, scale = {.scalar = 1.0 / (double)lsm->shape[1]};
    dt_tensor *s = NULL;
    dt_status st = call1(DT_OP_SUM, lsm, &along, &s);
    if (st == DT_OK) st = call1(DT_OP_MUL_SCALAR, s, &scale, out);
    dt_tensor_release(s);
    return st;
}

/* log_softmax(logits)[target] with the class dim whole: log_softmax re-shards the logits if
 * the class dim was sharded. smooth (NULL: not wanted) gets the class mean of log_softmax. */
static dt_status target_logprob_whole(dt_tensor *logits, dt_tensor *target, dt_tensor **out,
                                      dt_tensor **smooth) {
    /* Without smoothing, one fused pass (fused.c): the picked log-probability and each row's
     * log-sum-exp, no logits-sized log_softmax kept for the backward. */
    if (!smooth) return call2(DT_OP_LOG_SOFTMAX_PICK, logits, target, out);
    dt_op_args along = {.dim = 1}, perm = class_last(logits->ndim);
    dt_tensor *lsm = NULL, *moved = NULL;
    dt_status st = dt_op_call(DT_OP_LOG_SOFTMAX, &logits, 1, &along, &lsm);
    if (st == DT_OK) st = dt_op_call(DT_OP_PERMUTE, &lsm, 1, &perm, &moved);
    if (st == DT_OK) st = call2(DT_OP_PICK, moved, target, out);
    if (st == DT_OK && smooth) st = class_mean(lsm, smooth);
    dt_tensor_release(lsm), dt_tensor_release(moved);
    return st;
}

/* Loss parallel: the class dim stays sharded. The row max and the sum of exponentials are
 * reduced across the class shards (one value per sample each), the target logit is picked
 * where it lives (a Partial sum), and the logits never move. Smoothing's class mean of
 * log_softmax is mean(z) - log sum exp z, mean(z) one more value per sample. */
/* x with its pending sums (and maxes) reduced: Partial mesh dims made Replicate, the others
 * kept. The all_reduce dispatch would issue for the next op anyway, made explicit so autograd
 * records x whole: the backward of the op that reads it then finds a whole value (per sample)
 * and keeps the logits' class shards, instead of re-reducing x to whatever is cheapest for
 * itself (a reduce_scatter to batch shards, which would move the logits-sized gradients). */
static dt_status reduced(dt_tensor *x, dt_tensor **out) {
    dt_placement pl[DT_MESH_MAX_NDIM];
    int nd = x->mesh->ndim;
    for (int k = 0; k < nd; k++)
        pl[k] = x->placements[k].kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : x->placements[k];
    return dt_ops_move(x, pl, out);
}

static dt_status target_logprob_parallel(dt_tensor *logits, dt_tensor *target, dt_tensor **out,
                                         dt_tensor **smooth) {
    dt_op_args row = {.ndims = 1, .dims = {1}, .keepdim = 1}, sq = {.dim = 1};
    dt_op_args perm = class_last(logits->ndim);
    dt_tensor *mp = NULL, *m = NULL, *z = NULL, *e = NULL, *sp = NULL, *s = NULL, *l = NULL,
              *ls = NULL, *zp = NULL, *picked = NULL, *zm = NULL;
    /* The row max only shifts the exponentials: the loss does not depend on it, so it is
     * taken without grad (as torch's logsumexp detaches it) and its backward costs nothing. */
    dt_ctx *ctx = logits->mesh->ctx;
    int quiet = dt_ops_no_grad_enter(ctx);
    dt_status st = dt_op_call(DT_OP_AMAX, &logits, 1, &row, &mp); /* (N,1,d..) P(max) */
    if (st == DT_OK) st = reduced(mp, &m);                         /* all_reduce(max) */
    dt_ops_no_grad_exit(ctx, quiet);
    if (st == DT_OK) st = call2(DT_OP_SUB, logits, m, &z);
    if (st == DT_OK) st = call1(DT_OP_EXP, z, NULL, &e);
    if (st == DT_OK) st = call1(DT_OP_SUM, e, &row, &sp);          /* P(sum) */
    if (st == DT_OK) st = reduced(sp, &s);                         /* all_reduce(sum) */
    if (st == DT_OK) st = call1(DT_OP_LOG, s, NULL, &l);
    if (st == DT_OK) st = call1(DT_OP_SQUEEZE, l, &sq, &ls);
    if (st == DT_OK) st = dt_op_call(DT_OP_PERMUTE, &z, 1, &perm, &zp);
    if (st == DT_OK) st = call2(DT_OP_PICK, zp, target, &picked); /* P(sum) */
    if (st == DT_OK) st = call2(DT_OP_SUB, picked, ls, out);      /* z[t] - log sum exp z */
    if (st == DT_OK && smooth) st = class_mean(z, &zm);            /* P(sum) */
    if (st == DT_OK && smooth) st = call2(DT_OP_SUB, zm, ls, smooth);
    dt_tensor *all[] = {mp, m, z, e, sp, s, l, ls, zp, picked, zm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    return st;
}

/* Estimated cost of each route when the class dim is sharded: re-sharding the logits for
 * log_softmax, against two reductions of one value per sample. 1 when loss parallel wins. */
static int loss_parallel_cheaper(dt_tensor *logits) {
    const dt_mesh *mesh = logits->mesh;
    dt_placement keep[DT_MESH_MAX_NDIM], partial[DT_MESH_MAX_NDIM];
    int sharded = 0;
    for (int k = 0; k < mesh->ndim; k++) {
        keep[k] = partial[k] = logits->placements[k];
        if (logits->placements[k].kind == DT_PLACEMENT_SHARD && logits->placements[k].dim == 1 &&
            mesh->shape[k] > 1) {
            keep[k] = dt_replicate();
            partial[k] = dt_partial(DT_REDUCE_MAX);
            sharded = 1;
        }
    }
    if (!sharded) return 0;
    dt_placement want[DT_MESH_MAX_NDIM], outp[DT_MESH_MAX_NDIM];
    dt_op_args along = {.dim = 1};
    const dt_plan *move;
    if (dt_op_strategy(DT_OP_LOG_SOFTMAX, &logits, 1, &along, want, outp) != DT_OK ||
        dt_redistribute_cached_plan(logits, want, &move) != DT_OK)
        return 0;
    int64_t stats[DT_MAX_NDIM];
    memcpy(stats, logits->shape, sizeof(int64_t) * (size_t)logits->ndim);
    stats[1] = 1;
    dt_plan *reduce;
    if (dt_plan_create(mesh->ndim, mesh->shape, logits->ndim, stats, logits->dtype, partial, keep,
                       NULL, &reduce) != DT_OK)
        return 0;
    int cheaper = 2 * dt_plan_cost_us(reduce) < dt_plan_cost_us(move);
    dt_plan_release(reduce);
    return cheaper;
}

/* What the labels say, agreed by every rank: the first label (in global flat order) that
 * is neither a class nor ignored, and whether any row is ignored. */
typedef struct labels {
    int64_t bad_at, bad_value; /* bad_at = INT64_MAX when every label is fine */
    int64_t ignored;
} labels;

/* Global flat index of local element i of t. */
static int64_t global_index(const dt_tensor *t, size_t i) {
    int64_t g = 0, rest = (int64_t)i, idx[DT_MAX_NDIM];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->local_shape[d] ? rest % t->local_shape[d] : 0;
        rest = t->local_shape[d] ? rest / t->local_shape[d] : 0;
    }
    for (int d = 0; d < t->ndim; d++) g = g * t->shape[d] + t->local_offset[d] + idx[d];
    return g;
}

/* Reads this rank's labels and, when ranks hold different ones, gathers every rank's
 * summary (one small all_gather); a replicated target needs no communication. The kernels
 * skip class ids outside a shard, so an unchecked out-of-range label would be a silently
 * finite loss. */
static dt_status check_labels(dt_tensor *target, int64_t classes, const dt_op_args *a,
                              labels *out, uint8_t **ignored_mask_out) {
    if (target->dtype != DT_I64 && target->dtype != DT_I32)
        return dt_error(DT_ERR_DTYPE, "cross_entropy: target must be i64 or i32 class ids, got "
                                      "%s", dt_dtype_name(target->dtype));
    for (int m = 0; m < target->mesh->ndim; m++)
        if (target->placements[m].kind == DT_PLACEMENT_PARTIAL)
            return dt_error(DT_ERR_PLACEMENT, "cross_entropy: target is Partial on mesh dim %d; "
                                              "class ids must be replicated or sharded", m);
    size_t n = target->local_numel, es = dt_dtype_size(target->dtype);
    void *host = dt_host_alloc(n * es + 1); /* the rank's arena: no fresh pages each step */
    uint8_t *mask = dt_host_calloc(n + 1);
    dt_status st = host && mask ? dt_tensor_local_to_host(target, host, n * es) : DT_ERR_NOMEM;
    labels mine = {.bad_at = INT64_MAX};
    for (size_t i = 0; st == DT_OK && i < n; i++) {
        int64_t v = target->dtype == DT_I64 ? ((int64_t *)host)[i] : ((int32_t *)host)[i];
        if (a->use_ignore_index && v == a->ignore_index) {
            mask[i] = 1;
            mine.ignored++;
        } else if ((v < 0 || v >= classes) && mine.bad_at == INT64_MAX) {
            mine.bad_at = global_index(target, i);
            mine.bad_value = v;
        }
    }
    dt_host_free(host);
    if (st == DT_ERR_NOMEM) dt_error(st, "cross_entropy: out of memory for the labels");
    int replicated = 1;
    for (int m = 0; m < target->mesh->ndim; m++)
        replicated &= target->placements[m].kind == DT_PLACEMENT_REPLICATE ||
                      target->mesh->shape[m] == 1;
    *out = mine;
    if (st == DT_OK && !replicated) {
        dt_mesh *mesh = target->mesh;
        dt_comm *all;
        labels *every = malloc(sizeof(labels) * (size_t)mesh->nranks);
        st = every ? dt_mesh_mask_comm(mesh, (1u << mesh->ndim) - 1, &all) : DT_ERR_NOMEM;
        if (st == DT_OK) st = dt_all_gather(all, &mine, every, 3, DT_I64);
        for (int r = 0; st == DT_OK && r < mesh->nranks; r++) {
            if (every[r].bad_at < out->bad_at) out->bad_at = every[r].bad_at,
                                               out->bad_value = every[r].bad_value;
            if (r != mesh->rank) out->ignored += every[r].ignored;
        }
        free(every);
    }
    if (st == DT_OK && out->bad_at != INT64_MAX)
        st = dt_error(DT_ERR_ARG, "cross_entropy: target element %lld (flat, row-major) = %lld "
                                  "is not a class in [0, %lld)%s", (long long)out->bad_at,
                      (long long)out->bad_value, (long long)classes,
                      a->use_ignore_index ? " nor ignore_index" : "");
    if (st == DT_OK) *ignored_mask_out = mask;
    else dt_host_free(mask);
    return st;
}

/* Per-sample weight 1, or 0 where the label is ignored: a tensor with the target's spec, made
 * from this rank's mask (no communication). */
static dt_status keep_weights(dt_tensor *target, dt_dtype dtype, const uint8_t *mask,
                              dt_tensor **out) {
    size_t n = target->local_numel;
    void *w = dt_host_alloc(n * dt_dtype_size(dtype) + 1);
    if (!w) return dt_error(DT_ERR_NOMEM, "cross_entropy: out of memory for the weights");
    for (size_t i = 0; i < n; i++) {
        if (dtype == DT_F64) ((double *)w)[i] = mask[i] ? 0.0 : 1.0;
        else ((float *)w)[i] = mask[i] ? 0.0f : 1.0f;
    }
    dt_status st = dt_tensor_from_local(target->mesh, w, dtype, target->ndim, target->local_shape,
                                        target->mesh->ndim, target->placements, target->shape, 0,
                                        out);
    dt_host_free(w);
    return st;
}

/* -logprob per sample, 0 where ignored; summed, or averaged over the samples not ignored. */
static dt_status reduce_loss(dt_tensor *neg, dt_tensor *keep, dt_reduction how, dt_tensor **out) {
    dt_op_args all = {0};
    dt_tensor *kept = neg, *total = NULL, *count = NULL;
    dt_status st = keep ? call2(DT_OP_MUL, neg, keep, &kept) : dt_tensor_retain(neg);
    if (st != DT_OK || how == DT_REDUCTION_NONE) {
        if (st == DT_OK) *out = kept;
        return st;
    }
    if (!keep) st = call1(how == DT_REDUCTION_SUM ? DT_OP_SUM : DT_OP_MEAN, kept, &all, out);
    else if (how == DT_REDUCTION_SUM) st = call1(DT_OP_SUM, kept, &all, out);
    else {
        st = call1(DT_OP_SUM, kept, &all, &total);
        if (st == DT_OK) st = call1(DT_OP_SUM, keep, &all, &count);
        if (st == DT_OK) st = call2(DT_OP_DIV, total, count, out); /* all ignored: 0/0, as torch */
    }
    dt_tensor_release(kept), dt_tensor_release(total), dt_tensor_release(count);
    return st;
}

/* torch's label smoothing: -((1 - eps) * logprob[target] + eps * mean over classes of
 * log_softmax), per sample. */
static dt_status smoothed(dt_tensor *lp, dt_tensor *smooth, double eps, dt_tensor **out) {
    dt_op_args keep = {.scalar = eps - 1}, spread = {.scalar = -eps};
    dt_tensor *a = NULL, *b = NULL;
    dt_status st = call1(DT_OP_MUL_SCALAR, lp, &keep, &a);
    if (st == DT_OK) st = call1(DT_OP_MUL_SCALAR, smooth, &spread, &b);
    if (st == DT_OK) st = call2(DT_OP_ADD, a, b, out);
    dt_tensor_release(a), dt_tensor_release(b);
    return st;
}

/* logits (N, C, d1...) with the class dim 1, target (N, d1...) of class indices. */
static dt_status cross_entropy(dt_tensor *logits, dt_tensor *target, const dt_op_args *a,
                               dt_tensor **out) {
    if (logits->ndim < 2 || target->ndim != logits->ndim - 1)
        return dt_error(DT_ERR_SHAPE, "cross_entropy: logits (N, C, ...) and target (N, ...) "
                                      "expected, got %d-D and %d-D", logits->ndim, target->ndim);
    if (logits->dtype != DT_F32 && logits->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "cross_entropy: logits must be f32 or f64, got %s",
                        dt_dtype_name(logits->dtype));
    double eps = a->label_smoothing;
    if (!(eps >= 0 && eps <= 1))
        return dt_error(DT_ERR_ARG, "cross_entropy: label_smoothing = %g is not in [0, 1]", eps);
    if ((unsigned)a->reduction > DT_REDUCTION_SUM)
        return dt_error(DT_ERR_ARG, "cross_entropy: reduction = %d is not a dt_reduction",
                        (int)a->reduction);
    labels seen = {0};
    uint8_t *ignored = NULL;
    DT_CHECK(check_labels(target, logits->shape[1], a, &seen, &ignored));
    dt_tensor *lp = NULL, *smooth = NULL, *neg = NULL, *keep = NULL;
    dt_tensor **want_smooth = eps > 0 ? &smooth : NULL;
    dt_status st = seen.ignored ? keep_weights(target, logits->dtype, ignored, &keep) : DT_OK;
    dt_host_free(ignored);
    if (st == DT_OK)
        st = loss_parallel_cheaper(logits)
                 ? target_logprob_parallel(logits, target, &lp, want_smooth)
                 : target_logprob_whole(logits, target, &lp, want_smooth);
    if (st == DT_OK)
        st = smooth ? smoothed(lp, smooth, eps, &neg) : call1(DT_OP_NEG, lp, NULL, &neg);
    if (st == DT_OK) st = reduce_loss(neg, keep, a->reduction, out);
    dt_tensor_release(lp), dt_tensor_release(smooth), dt_tensor_release(neg);
    dt_tensor_release(keep);
    return st;
}

/* silu(gate) * up: one fused silu_mul when gate and up have one shape (fused.c); else
 * (broadcast) two dispatched ops, each placed on its own. */
static dt_status swiglu(dt_tensor *gate, dt_tensor *up, dt_tensor **out) {
    int same = gate->ndim == up->ndim && gate->dtype == up->dtype;
    for (int d = 0; same && d < gate->ndim; d++) same = gate->shape[d] == up->shape[d];
    if (same) return call2(DT_OP_SILU_MUL, gate, up, out);
    dt_tensor *g = NULL;
    dt_status st = call1(DT_OP_SILU, gate, NULL, &g);
    if (st == DT_OK) st = call2(DT_OP_MUL, g, up, out);
    dt_tensor_release(g);
    return st;
}

dt_status dt_composite_run(dt_op op, dt_tensor *const *in, int n, const dt_op_args *a,
                           dt_tensor **out) {
    if (op == DT_OP_CROSS_ENTROPY) {
        if (n != 2) return dt_error(DT_ERR_ARG, "cross_entropy: takes logits and target");
        return cross_entropy(in[0], in[1], a, out);
    }
    if (op == DT_OP_SWIGLU) {
        if (n != 2) return dt_error(DT_ERR_ARG, "swiglu: takes gate and up");
        return swiglu(in[0], in[1], out);
    }
    if (n != 1) return dt_error(DT_ERR_ARG, "%s: takes 1 input, got %d", dt_op_name(op), n);
    return variance(op, in[0], a, out);
}
