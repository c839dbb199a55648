/* The MoE router, the load-balancing loss and the whole layer (dtensor/moe.h). The router and
 * the loss are written with the library's ops, so their gradients (to the router weight, and
 * through the gates and scores to x) come from autograd and their placements from dispatch;
 * the dispatch to experts is moe_plan.c and moe_experts.c. */
#include <stdlib.h>

#include "core/check.h"
#include "core/fiber.h"
#include "dtensor/create.h"
#include "dtensor/ops.h"
#include "dtensor/redistribute.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/moe_impl.h"

static void release_all(dt_tensor **t, int n) {
    for (int i = 0; i < n; i++)
        dt_tensor_release(t[i]);
}

/* hot (..., k, E) in dtype: 1 where experts (..., k) names expert e, else 0. Compared with the
 * ids 0..E-1 (replicated, made on every rank alike) rather than by one_hot or a gather, which
 * shard E over a mesh dim the tokens are replicated on (tensor parallel) when their inputs are
 * whole there: then the scores' gradient would be E-sharded there, and the router's backward
 * would reduce its row sums, the input gradient and the weight's gradient over it. Elementwise
 * ops keep the tokens' placements. */
static dt_status expert_mask(dt_tensor *experts, int64_t E, dt_dtype dtype, dt_tensor **out) {
    dt_mesh *mesh = experts->mesh;
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int m = 0; m < mesh->ndim; m++)
        pl[m] = dt_replicate();
    int64_t *id = malloc(sizeof *id * (size_t)E);
    if (!id)
        return dt_error(DT_ERR_NOMEM, "dt_moe: out of memory for %lld expert ids", (long long)E);
    for (int64_t e = 0; e < E; e++)
        id[e] = e;
    dt_tensor *t[3] = {NULL};
    dt_status st =
        dt_tensor_distribute(mesh, id, DT_I64, 1, &E, mesh->ndim, pl, DT_ALL_RANKS, &t[0]);
    free(id);
    if (st == DT_OK) st = dt_unsqueeze(experts, experts->ndim, &t[1]); /* (..., k, 1) */
    if (st == DT_OK) st = dt_eq(t[1], t[0], &t[2]);                    /* (..., k, E) */
    if (st == DT_OK) st = dt_cast(t[2], dtype, out);
    release_all(t, 3);
    return st;
}

static dt_status check_router(dt_tensor *x, dt_tensor *w, const dt_moe_opts *opts) {
    static const char FN[] = "dt_moe_router";
    DT_CHECK(dt_tensor_check(FN, "x", x));
    DT_CHECK(dt_tensor_check(FN, "router_w", w));
    DT_ARG(opts != NULL, "%s: argument opts is NULL", FN);
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "%s: x is %s (f32 or f64 only)", FN, dt_dtype_name(x->dtype));
    if (w->dtype != x->dtype)
        return dt_error(DT_ERR_DTYPE, "%s: router_w is %s, x is %s", FN, dt_dtype_name(w->dtype),
                        dt_dtype_name(x->dtype));
    if (x->ndim < 2)
        return dt_error(DT_ERR_SHAPE,
                        "%s: x needs shape (..., dim) with a token dim; it has %d "
                        "dims",
                        FN, x->ndim);
    if (w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1] || w->shape[0] < 1)
        return dt_error(DT_ERR_SHAPE, "%s: router_w needs shape (E, dim = %lld)", FN,
                        (long long)x->shape[x->ndim - 1]);
    DT_ARG(opts->top_k >= 1 && opts->top_k <= w->shape[0],
           "%s: opts->top_k = %d is not in [1, E = %lld]", FN, opts->top_k, (long long)w->shape[0]);
    DT_ARG(opts->score == DT_MOE_SOFTMAX || opts->score == DT_MOE_SIGMOID,
           "%s: opts->score = %d is not a dt_moe_score", FN, (int)opts->score);
    return DT_OK;
}

dt_status dt_moe_router(dt_tensor *x, dt_tensor *router_w, const dt_moe_opts *opts,
                        dt_tensor **gates_out, dt_tensor **experts_out, dt_tensor **scores_out) {
    DT_ARG_NOT_NULL(gates_out);
    DT_ARG_NOT_NULL(experts_out);
    DT_CHECK(check_router(x, router_w, opts));
    int last = x->ndim - 1;
    dt_tensor *t[9] = {NULL}; /* logits, scores, values, indices, sum, gates, 3 temporaries */
    dt_status st = dt_linear(x, router_w, NULL, &t[0]); /* (..., dim) -> (..., E) */
    if (st == DT_OK)
        st =
            opts->score == DT_MOE_SOFTMAX ? dt_softmax(t[0], last, &t[1]) : dt_sigmoid(t[0], &t[1]);
    if (st == DT_OK) st = dt_topk(t[1], opts->top_k, last, 1, &t[6], &t[3]); /* (..., k) */
    /* the values as sum_e scores[..., e] * hot[..., s, e] (expert_mask: their gradient keeps
     * the scores' placements); the same numbers as topk's */
    if (st == DT_OK) st = expert_mask(t[3], router_w->shape[0], x->dtype, &t[7]);
    if (st == DT_OK) st = dt_unsqueeze(t[1], last, &t[8]); /* (..., 1, E) */
    release_all(t + 6, 1), t[6] = NULL;
    if (st == DT_OK) st = dt_mul(t[8], t[7], &t[6]);
    if (st == DT_OK) st = dt_sum(t[6], &(int){last + 1}, 1, 0, &t[2]);
    release_all(t + 6, 3), t[6] = t[7] = t[8] = NULL;
    if (st == DT_OK && opts->route_norm) {
        st = dt_sum(t[2], &last, 1, 1, &t[4]);
        if (st == DT_OK) st = dt_div(t[2], t[4], &t[5]);
    } else if (st == DT_OK) {
        t[5] = t[2], t[2] = NULL;
    }
    if (st != DT_OK) {
        release_all(t, 9);
        return st;
    }
    *gates_out = t[5], *experts_out = t[3];
    if (scores_out) *scores_out = t[1], t[1] = NULL;
    t[5] = t[3] = NULL;
    release_all(t, 9);
    return DT_OK;
}

dt_status dt_moe_aux_loss(dt_tensor *scores, dt_tensor *experts, dt_tensor **out) {
    static const char FN[] = "dt_moe_aux_loss";
    DT_ARG_NOT_NULL(out);
    DT_CHECK(dt_tensor_check(FN, "scores", scores));
    DT_CHECK(dt_tensor_check(FN, "experts", experts));
    int nd = scores->ndim;
    if (experts->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: experts is %s (i64 expert ids)", FN,
                        dt_dtype_name(experts->dtype));
    int same = experts->ndim == nd && nd >= 2;
    for (int d = 0; same && d < nd - 1; d++)
        same = experts->shape[d] == scores->shape[d];
    if (!same)
        return dt_error(DT_ERR_SHAPE,
                        "%s: scores (..., E) and experts (..., top_k) need the same "
                        "leading shape",
                        FN);
    int64_t E = scores->shape[nd - 1], assignments = 1, scores_numel = 1;
    for (int d = 0; d < nd; d++)
        assignments *= experts->shape[d], scores_numel *= scores->shape[d];
    DT_ARG(assignments > 0, "%s: experts is empty (no tokens to balance)", FN);
    int dims[DT_MAX_NDIM + 1], last = nd - 1;
    for (int d = 0; d <= nd; d++)
        dims[d] = d;
    /* f (E): the share of assignments each expert got; P (E): its mean normalised score.
     * Both are made whole (one all_reduce each over the dims that shard the tokens) before
     * their product, so the loss is whole and its backward reduces nothing (f needs no
     * gradient; P's reduction's backward is local). */
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int m = 0; m < DT_MESH_MAX_NDIM; m++)
        pl[m] = dt_replicate();
    dt_tensor *t[9] = {NULL};
    dt_status st = expert_mask(experts, E, scores->dtype, &t[1]); /* (..., k, E) */
    if (st == DT_OK) st = dt_sum(t[1], dims, nd, 0, &t[2]);
    if (st == DT_OK) st = dt_mul_scalar(t[2], 1.0 / (double)assignments, &t[3]);
    if (st == DT_OK) st = dt_sum(scores, &last, 1, 1, &t[4]);
    if (st == DT_OK) st = dt_div(scores, t[4], &t[5]);
    /* the token mean as a sum scaled by 1 / tokens: a sum leaves sharded tokens a Partial sum
     * wherever they lie (a mean moves them first unless each sharded dim divides the mesh's
     * rank count) */
    if (st == DT_OK) st = dt_sum(t[5], dims, nd - 1, 0, &t[0]);
    if (st == DT_OK) st = dt_mul_scalar(t[0], (double)E / (double)scores_numel, &t[6]);
    dt_tensor *f = NULL, *P = NULL;
    if (st == DT_OK) st = dt_tensor_redistribute(t[3], scores->mesh->ndim, pl, &f);
    if (st == DT_OK) st = dt_tensor_redistribute(t[6], scores->mesh->ndim, pl, &P);
    if (st == DT_OK) st = dt_mul(f, P, &t[7]);
    if (st == DT_OK) st = dt_sum(t[7], NULL, 0, 0, &t[8]);
    dt_tensor *loss = NULL, *rep = NULL;
    if (st == DT_OK) st = dt_mul_scalar(t[8], (double)E, &loss);
    release_all(t, 9);
    dt_tensor_release(f), dt_tensor_release(P);
    if (st == DT_OK) st = dt_tensor_redistribute(loss, loss->mesh->ndim, pl, &rep);
    dt_tensor_release(loss);
    if (st != DT_OK) return st;
    *out = rep;
    return DT_OK;
}

static _Thread_local dt_moe_observer_fn observer;
static _Thread_local void *observer_user;
DT_FIBER_LOCAL(observer)
DT_FIBER_LOCAL(observer_user)

void dt_moe_set_observer(dt_moe_observer_fn fn, void *user) {
    observer = fn, observer_user = user;
}

dt_status dt_moe_forward(dt_tensor *x, dt_tensor *router_w, dt_tensor *w1, dt_tensor *w2,
                         dt_tensor *w3, int ep_dim, const dt_moe_opts *opts, dt_tensor **out,
                         dt_tensor **aux_out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check_router(x, router_w, opts));
    DT_ARG(ep_dim >= 0 && ep_dim < x->mesh->ndim,
           "dt_moe_forward: argument ep_dim = %d is not "
           "in [0, %d)",
           ep_dim, x->mesh->ndim);
    DT_CHECK(dt_moe_check_tokens("dt_moe_forward", "x", x, ep_dim));
    dt_tensor *gates = NULL, *experts = NULL, *scores = NULL, *y = NULL, *aux = NULL;
    dt_moe_plan *plan = NULL;
    dt_status st = dt_moe_router(x, router_w, opts, &gates, &experts, aux_out ? &scores : NULL);
    if (st == DT_OK)
        st = dt_moe_plan_create(experts, gates, router_w->shape[0], ep_dim, opts, &plan);
    if (st == DT_OK && observer) observer(observer_user, x, router_w, plan);
    if (st == DT_OK) st = dt_moe_experts(x, gates, plan, w1, w2, w3, &y);
    if (st == DT_OK && aux_out) st = dt_moe_aux_loss(scores, experts, &aux);
    dt_moe_plan_destroy(plan);
    dt_tensor_release(gates), dt_tensor_release(experts), dt_tensor_release(scores);
    if (st != DT_OK) {
        dt_tensor_release(y), dt_tensor_release(aux);
        return st;
    }
    *out = y;
    if (aux_out) *aux_out = aux;
    return DT_OK;
}
