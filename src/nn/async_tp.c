/* The DTensor entry points of dtensor/async_tp.h: argument checks, the placements of outputs
 * and gradients, and the autograd nodes whose backwards run the dual collective matmul. The
 * schedules themselves are nn/collective_mm.c's. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "core/device.h"
#include "dtensor/async_tp.h"
#include "dtensor/redistribute.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/collective_mm.h"

#define MAX_WEIGHTS 8

/* ---- checks --------------------------------------------------------------------------------- */

static dt_status check_x(const char *fn, const dt_tensor *x, int tp_dim, int seq_or_feature) {
    DT_CHECK(dt_tensor_check(fn, "x", x));
    int mnd = x->mesh->ndim;
    DT_ARG(tp_dim >= 0 && tp_dim < mnd, "%s: argument tp_dim = %d is not in [0, %d)", fn, tp_dim,
           mnd);
    if (x->ndim != 3)
        return dt_error(DT_ERR_SHAPE, "%s: x has %d dims, want (B, T, K)", fn, x->ndim);
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "%s: x is %s (f32 or f64 only)", fn, dt_dtype_name(x->dtype));
    for (int m = 0; m < mnd; m++) {
        dt_placement p = x->placements[m];
        char text[32];
        dt_placements_format(&p, 1, text, sizeof text);
        if (m == tp_dim && !(p.kind == DT_PLACEMENT_SHARD && p.dim == seq_or_feature))
            return dt_error(DT_ERR_PLACEMENT,
                            "%s: x is %s over mesh dim %d (tp); it must be "
                            "S(%d)",
                            fn, text, m, seq_or_feature);
        if (m != tp_dim &&
            !(p.kind == DT_PLACEMENT_REPLICATE || (p.kind == DT_PLACEMENT_SHARD && p.dim == 0)))
            return dt_error(DT_ERR_PLACEMENT,
                            "%s: x is %s over mesh dim %d: mesh dims other "
                            "than tp may only replicate or shard the batch",
                            fn, text, m);
    }
    return DT_OK;
}

/* w (N, K) of x's mesh and dtype, Shard(shard_dim) over tp, Replicate elsewhere. */
static dt_status check_w(const char *fn, const char *arg, const dt_tensor *w, const dt_tensor *x,
                         int tp_dim, int shard_dim) {
    DT_CHECK(dt_tensor_check(fn, arg, w));
    if (!dt_mesh_equal(w->mesh, x->mesh))
        return dt_error(DT_ERR_MESH, "%s: %s and x live on different meshes", fn, arg);
    if (w->dtype != x->dtype)
        return dt_error(DT_ERR_DTYPE, "%s: %s is %s, x is %s", fn, arg, dt_dtype_name(w->dtype),
                        dt_dtype_name(x->dtype));
    if (w->device.kind != x->device.kind || w->device.index != x->device.index)
        return dt_error(DT_ERR_DEVICE, "%s: %s and x live on different devices", fn, arg);
    if (w->ndim != 2 || w->shape[1] != x->shape[2])
        return dt_error(DT_ERR_SHAPE,
                        "%s: %s must be (N, %lld) (x's last dim), not %d-D with "
                        "last dim %lld",
                        fn, arg, (long long)x->shape[2], w->ndim, (long long)w->shape[w->ndim - 1]);
    for (int m = 0; m < w->mesh->ndim; m++) {
        dt_placement want = m == tp_dim ? dt_shard(shard_dim) : dt_replicate();
        if (!dt_placement_equal(w->placements[m], want)) {
            char text[32];
            dt_placements_format(&w->placements[m], 1, text, sizeof text);
            return dt_error(DT_ERR_PLACEMENT, "%s: %s is %s over mesh dim %d; it must be %s", fn,
                            arg, text, m, m == tp_dim ? (shard_dim ? "S(1)" : "S(0)") : "R");
        }
    }
    return DT_OK;
}

static dt_status check_mode(const char *fn, dt_async_tp_mode mode) {
    DT_ARG(mode == DT_ASYNC_TP_RING || mode == DT_ASYNC_TP_ORDERED,
           "%s: argument mode = %d is not DT_ASYNC_TP_RING or DT_ASYNC_TP_ORDERED", fn, (int)mode);
    return DT_OK;
}

/* ---- shared pieces -------------------------------------------------------------------------- */

static dt_status geom_of(const dt_tensor *x, int tp_dim, dt_cmm_geom *g) {
    *g = (dt_cmm_geom){.ctx = x->mesh->ctx,
                       .dtype = x->dtype,
                       .device = x->device,
                       .B = x->local_shape[0],
                       .T = x->shape[1]};
    DT_CHECK(dt_mesh_lane_comm(x->mesh, 1u << tp_dim, 1, &g->comm));
    g->n = dt_comm_size(g->comm), g->me = dt_comm_rank(g->comm);
    g->chunk = (g->T + g->n - 1) / g->n;
    return DT_OK;
}

/* x's placements with tp's replaced by p */
static void placements_with(const dt_tensor *x, int tp_dim, dt_placement p, dt_placement *out) {
    memcpy(out, x->placements, sizeof(dt_placement) * (size_t)x->mesh->ndim);
    out[tp_dim] = p;
}

/* A weight's gradient placements: Shard(shard_dim) over tp; Partial where x shards the batch
 * (each rank summed its own rows), Replicate elsewhere. */
static void weight_grad_placements(const dt_tensor *x, int tp_dim, int shard_dim,
                                   dt_placement *out) {
    for (int m = 0; m < x->mesh->ndim; m++)
        out[m] = m == tp_dim                                   ? dt_shard(shard_dim)
                 : x->placements[m].kind == DT_PLACEMENT_SHARD ? dt_partial(DT_REDUCE_SUM)
                                                               : dt_replicate();
}

static dt_status alloc_like(const dt_tensor *x, int64_t d0, int64_t d1, int64_t d2,
                            const dt_placement *p, dt_tensor **out) {
    int64_t shape[3] = {d0, d1, d2};
    return dt_tensor_alloc(x->mesh, x->device, x->dtype, 3, shape, p, out);
}

/* grad in the placements want (a new reference either way) */
static dt_status placed(dt_tensor *grad, const dt_placement *want, dt_tensor **out) {
    int same = 1;
    for (int m = 0; m < grad->mesh->ndim; m++)
        same &= dt_placement_equal(grad->placements[m], want[m]);
    if (same) {
        dt_tensor_retain(grad);
        *out = grad;
        return DT_OK;
    }
    return dt_tensor_redistribute(grad, grad->mesh->ndim, want, out);
}

/* The weight gradient dw (N, M local) = a^T @ b over the R local rows of a (R, N), b (R, M). */
static dt_status weight_grad(const dt_tensor *x, const dt_tensor *w, int tp_dim, int shard_dim,
                             const void *a, int64_t R, const void *b, dt_tensor **out) {
    dt_placement p[DT_MESH_MAX_NDIM];
    weight_grad_placements(x, tp_dim, shard_dim, p);
    dt_tensor *dw;
    DT_CHECK(dt_tensor_alloc(w->mesh, w->device, w->dtype, 2, w->shape, p, &dw));
    dt_status st = dt_cmm_gemm_tn(w->device, w->dtype, a, R, dw->local_shape[0], b,
                                  dw->local_shape[1], dw->data);
    if (st != DT_OK) {
        dt_tensor_release(dw);
        return st;
    }
    *out = dw;
    return DT_OK;
}

/* ---- all_gather then matmul ----------------------------------------------------------------- */

/* y (B, rows(me), N) = reduce_scatter(the sum of the terms' products); like gives the rows */
static dt_status rs_run(const dt_tensor *like, int nt, const dt_cmm_term *t, int tp_dim,
                        dt_async_tp_mode mode, dt_tensor *y) {
    dt_cmm_geom g;
    DT_CHECK(geom_of(like, tp_dim, &g));
    return dt_cmm_mm_reduce_scatter(&g, nt, t, mode == DT_ASYNC_TP_ORDERED, y->data);
}

/* x's gradient, reduce_scatter(sum_i dy[i] @ w[i]) in x's layout: the dual collective matmul */
static dt_status input_grad(dt_tensor *x, int n, dt_tensor *const *dy, dt_tensor *const *w,
                            int tp_dim, dt_async_tp_mode mode, dt_tensor **out) {
    dt_cmm_term t[MAX_WEIGHTS];
    for (int i = 0; i < n; i++) /* (.., N_i local) @ w_i (N_i local, K) */
        t[i] = (dt_cmm_term){dy[i]->data, dy[i]->local_shape[2], {w[i]->data, x->shape[2], 0}};
    DT_CHECK(alloc_like(x, x->shape[0], x->shape[1], x->shape[2], x->placements, out));
    dt_status st = rs_run(x, n, t, tp_dim, mode, *out);
    if (st != DT_OK) dt_tensor_release(*out), *out = NULL;
    return st;
}

/* What the nodes of one dt_all_gather_linear share: the gathered x; with several weights, the
 * output gradients as they reach their nodes, kept for the node of the input's token, which
 * the output nodes take in place of x: it runs after all of them (they consume it) and turns
 * their gradients into x's in one collective matmul. */
typedef struct ag_shared {
    int refs, nw, tp_dim;
    dt_async_tp_mode mode;
    dt_device device;                            /* where xg lives */
    dt_placement yp[DT_MESH_MAX_NDIM];           /* the outputs' placements */
    void *xg;                                    /* (B, T, K) local */
    dt_tensor *dy[MAX_WEIGHTS], *w[MAX_WEIGHTS]; /* retained, until the token's node */
} ag_shared;

static void unstash(ag_shared *sh) {
    for (int i = 0; i < sh->nw; i++) {
        dt_tensor_release(sh->dy[i]), dt_tensor_release(sh->w[i]);
        sh->dy[i] = sh->w[i] = NULL;
    }
}

static void shared_drop(ag_shared *sh) {
    if (--sh->refs) return;
    unstash(sh);
    dt_mem_ops_of(sh->device.kind)->free(sh->xg), free(sh);
}

typedef struct ag_node {
    ag_shared *sh;
    int i; /* the output's weight; -1: the token's node */
} ag_node;

static void ag_node_free(void *p) {
    shared_drop(((ag_node *)p)->sh);
    free(p);
}

/* A zero scalar, replicated: the token, and its gradient. */
static dt_status zero_scalar(const dt_tensor *x, dt_tensor **out) {
    dt_placement rep[DT_MESH_MAX_NDIM];
    for (int m = 0; m < x->mesh->ndim; m++)
        rep[m] = dt_replicate();
    int64_t one = 1;
    DT_CHECK(dt_tensor_alloc(x->mesh, x->device, x->dtype, 1, &one, rep, out));
    return dt_mem_ops_of(x->device.kind)->zero((*out)->data, dt_dtype_size(x->dtype));
}

static dt_status token_backward(void *state, dt_tensor *const *in, const bool *need,
                                dt_tensor *grad, dt_tensor **gin) {
    (void)grad; /* zeros: the gradients are the stashed ones */
    ag_shared *sh = ((ag_node *)state)->sh;
    dt_tensor *dy[MAX_WEIGHTS], *w[MAX_WEIGHTS];
    int n = 0;
    for (int i = 0; i < sh->nw; i++)
        if (sh->dy[i]) dy[n] = sh->dy[i], w[n++] = sh->w[i];
    dt_status st =
        need[0] && n ? input_grad(in[0], n, dy, w, sh->tp_dim, sh->mode, &gin[0]) : DT_OK;
    unstash(sh);
    return st;
}

static dt_status ag_backward(void *state, dt_tensor *const *in, const bool *need, dt_tensor *grad,
                             dt_tensor **gin) {
    const ag_node *node = state;
    ag_shared *sh = node->sh;
    dt_tensor *x = in[0], *w = in[1], *dy; /* x: the token, with several weights */
    DT_CHECK(placed(grad, sh->yp, &dy));   /* (B, T, N local) */
    dt_status st = DT_OK;
    if (need[1])
        st = weight_grad(dy, w, sh->tp_dim, 0, dy->data, dy->local_shape[0] * dy->shape[1], sh->xg,
                         &gin[1]);
    if (st == DT_OK && need[0] && sh->nw == 1) {
        st = input_grad(x, 1, &dy, &w, sh->tp_dim, sh->mode, &gin[0]);
    } else if (st == DT_OK && need[0]) {
        st = zero_scalar(x, &gin[0]);
        if (st == DT_OK) {
            dt_tensor_retain(w);
            sh->dy[node->i] = dy, sh->w[node->i] = w, dy = NULL;
        }
    }
    dt_tensor_release(dy);
    return st;
}

/* Records the backward of dt_all_gather_linear's outputs o[0..nw) (and with several weights
 * and an x that requires grad, the token's node); sh is taken. */
static dt_status ag_record(ag_shared *sh, dt_tensor *x, int nw, dt_tensor *const *w,
                           dt_tensor *const *o) {
    int token = nw > 1 && dt_autograd_wants(&x, 1);
    sh->refs = 1; /* this function's own, until it ends */
    dt_tensor *first = x;
    dt_status st = token ? zero_scalar(x, &first) : DT_OK;
    for (int i = token ? -1 : 0; i < nw && st == DT_OK; i++) {
        ag_node *a = malloc(sizeof *a);
        if (!a) {
            st = dt_error(DT_ERR_NOMEM, "dt_all_gather_linear: out of memory");
            break;
        }
        *a = (ag_node){sh, i};
        sh->refs++;
        dt_tensor *node_in[2] = {i < 0 ? x : first, i < 0 ? NULL : w[i]};
        /* on failure a is freed, its reference dropped */
        st = i < 0 ? dt_autograd_record_custom("all_gather_linear_input", node_in, 1, first,
                                               token_backward, a, ag_node_free)
                   : dt_autograd_record_custom("all_gather_linear", node_in, 2, o[i], ag_backward,
                                               a, ag_node_free);
    }
    if (token) dt_tensor_release(first); /* the output nodes hold it */
    shared_drop(sh);
    return st;
}

dt_status dt_all_gather_linear(dt_tensor *x, int nw, dt_tensor *const *w, int tp_dim,
                               dt_async_tp_mode mode, dt_tensor **outs) {
    static const char FN[] = "dt_all_gather_linear";
    DT_ARG_NOT_NULL(outs);
    DT_ARG(nw >= 1 && nw <= MAX_WEIGHTS && w, "%s: argument nw = %d is not in [1, %d]", FN, nw,
           MAX_WEIGHTS);
    DT_CHECK(check_x(FN, x, tp_dim, 1));
    DT_CHECK(check_mode(FN, mode));
    for (int i = 0; i < nw; i++) {
        char arg[16];
        snprintf(arg, sizeof arg, "w[%d]", i);
        DT_CHECK(check_w(FN, arg, w[i], x, tp_dim, 0));
    }
    dt_cmm_geom g;
    DT_CHECK(geom_of(x, tp_dim, &g));
    dt_placement p[DT_MESH_MAX_NDIM];
    placements_with(x, tp_dim, dt_shard(2), p);
    dt_tensor *o[MAX_WEIGHTS] = {0};
    dt_cmm_weight cw[MAX_WEIGHTS];
    void *od[MAX_WEIGHTS];
    int64_t K = x->shape[2];
    dt_tensor *in[1 + MAX_WEIGHTS] = {x};
    for (int i = 0; i < nw; i++)
        in[1 + i] = w[i];
    int record = dt_autograd_wants(in, 1 + nw);
    ag_shared *sh = calloc(1, sizeof *sh);
    dt_status st = sh ? DT_OK : dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    if (st == DT_OK) {
        *sh = (ag_shared){.nw = nw, .tp_dim = tp_dim, .mode = mode, .device = x->device};
        memcpy(sh->yp, p, sizeof p);
    }
    if (st == DT_OK && record) { /* kept for the weights' gradients, as dt_linear keeps x */
        sh->xg = dt_mem_ops_of(x->device.kind)
                     ->alloc((size_t)(g.B * g.T * K) * dt_dtype_size(x->dtype) + 1);
        if (!sh->xg) st = dt_error(DT_ERR_NOMEM, "%s: out of memory for the gathered x", FN);
    }
    for (int i = 0; i < nw && st == DT_OK; i++) {
        st = alloc_like(x, x->shape[0], x->shape[1], w[i]->shape[0], p, &o[i]);
        if (st == DT_OK)
            cw[i] = (dt_cmm_weight){w[i]->data, w[i]->local_shape[0], 1}, od[i] = o[i]->data;
    }
    if (st == DT_OK) st = dt_cmm_all_gather_mm(&g, x->data, K, nw, cw, od, sh->xg);
    if (st == DT_OK && record)
        st = ag_record(sh, x, nw, w, o);
    else if (sh)
        dt_mem_ops_of(sh->device.kind)->free(sh->xg), free(sh);
    if (st != DT_OK) {
        for (int i = 0; i < nw; i++)
            dt_tensor_release(o[i]);
        return st;
    }
    memcpy(outs, o, sizeof(dt_tensor *) * (size_t)nw);
    return DT_OK;
}

/* ---- matmul then reduce_scatter ------------------------------------------------------------- */

typedef struct rs_node {
    int tp_dim;
    dt_async_tp_mode mode;
} rs_node;

static dt_status rs_backward(void *state, dt_tensor *const *in, const bool *need, dt_tensor *grad,
                             dt_tensor **gin) {
    const rs_node *r = state;
    dt_tensor *x = in[0], *w = in[1], *dy;
    dt_placement p[DT_MESH_MAX_NDIM];
    placements_with(x, r->tp_dim, dt_shard(1), p);
    DT_CHECK(placed(grad, p, &dy)); /* (B, rows(me), N) */
    dt_cmm_geom g;
    dt_status st = geom_of(x, r->tp_dim, &g);
    int64_t N = w->shape[0], Kl = x->local_shape[2];
    size_t es = dt_dtype_size(x->dtype);
    const dt_mem_ops *m = dt_mem_ops_of(x->device.kind);
    void *dyg = need[1] ? m->alloc((size_t)(g.B * g.T * N) * es + 1) : NULL; /* (B, T, N) */
    if (st == DT_OK && need[1] && !dyg)
        st = dt_error(DT_ERR_NOMEM, "dt_backward: dt_linear_reduce_scatter: out of memory");
    dt_tensor *dx = NULL;
    if (st == DT_OK) st = alloc_like(x, x->shape[0], x->shape[1], x->shape[2], x->placements, &dx);
    dt_cmm_weight wl = {w->data, Kl, 0}; /* the dual: all_gather(dy) @ w, (.., N) @ (N, K local) */
    void *dxd = dx ? dx->data : NULL;
    if (st == DT_OK) st = dt_cmm_all_gather_mm(&g, dy->data, N, 1, &wl, &dxd, dyg);
    if (st == DT_OK && need[1])
        st = weight_grad(x, w, r->tp_dim, 1, dyg, g.B * g.T, x->data, &gin[1]);
    if (st == DT_OK && need[0]) gin[0] = dx, dx = NULL;
    dt_tensor_release(dx);
    dt_tensor_release(dy);
    m->free(dyg);
    return st;
}

dt_status dt_linear_reduce_scatter(dt_tensor *x, dt_tensor *w, int tp_dim, dt_async_tp_mode mode,
                                   dt_tensor **out) {
    static const char FN[] = "dt_linear_reduce_scatter";
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check_x(FN, x, tp_dim, 2));
    DT_CHECK(check_mode(FN, mode));
    DT_CHECK(check_w(FN, "w", w, x, tp_dim, 1));
    dt_placement p[DT_MESH_MAX_NDIM];
    placements_with(x, tp_dim, dt_shard(1), p);
    dt_tensor *y;
    DT_CHECK(alloc_like(x, x->shape[0], x->shape[1], w->shape[0], p, &y));
    dt_cmm_term t = {x->data, x->local_shape[2], {w->data, w->shape[0], 1}}; /* x @ w^T */
    dt_status st = rs_run(x, 1, &t, tp_dim, mode, y);
    dt_tensor *in[2] = {x, w};
    if (st == DT_OK && dt_autograd_wants(in, 2)) {
        rs_node *r = malloc(sizeof *r);
        if (!r)
            st = dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
        else {
            *r = (rs_node){tp_dim, mode};
            st = dt_autograd_record_custom("linear_reduce_scatter", in, 2, y, rs_backward, r, free);
        }
    }
    if (st != DT_OK) {
        dt_tensor_release(y);
        return st;
    }
    *out = y;
    return DT_OK;
}
