/* dt_moe_experts (dtensor/moe.h): the rows of a routing plan sent to their experts' ep ranks
 * with all_to_allv, the local experts as grouped GEMMs (ops/kernels.h's dt_cpu_grouped_mm),
 * the results sent back and summed with the gates; and the backward that runs the same two
 * exchanges for the gradients. Rank-local data is copied into f64 once. Shapes: N local
 * tokens, k slots, D = dim, H = hidden, El local experts; nsend rows leave (in the plan's send
 * order), nrecv arrive (by source rank, then local expert) and are regrouped by expert for
 * the GEMMs ("expert-major"). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/moe_impl.h"
#include "ops/kernels.h"

static const char FN[] = "dt_moe_experts";

/* What backward needs besides the inputs. */
typedef struct saved {
    dt_moe_plan *plan; /* a reference */
    int64_t D, H;
    int64_t *perm;   /* [nrecv]: expert-major row i is received row perm[i] */
    double *xg;      /* (nrecv, D) expert-major: the rows the experts saw */
    double *h1, *h3; /* (nrecv, H): x w1 and x w3 */
    double *yback;   /* (nsend, D): the expert outputs back home, in send order */
} saved;

static void saved_free(void *p) {
    saved *s = p;
    if (!s) return;
    dt_moe_plan_destroy(s->plan);
    free(s->perm), free(s->xg), free(s->h1), free(s->h3), free(s->yback), free(s);
}

static void to_f64(const dt_tensor *t, double *dst) {
    if (!t->local_numel) return; /* an empty shard's data may be NULL */
    if (t->dtype == DT_F64)
        memcpy(dst, t->data, t->local_numel * sizeof(double));
    else
        for (size_t i = 0; i < t->local_numel; i++)
            dst[i] = ((const float *)t->data)[i];
}

/* A tensor of like's mesh, device and dtype with the given spec, filled from src (f64). */
static dt_status tensor_from(const dt_tensor *like, const int64_t *shape, int ndim,
                             const dt_placement *pl, const double *src, dt_tensor **out) {
    DT_CHECK(dt_tensor_alloc(like->mesh, like->device, like->dtype, ndim, shape, pl, out));
    dt_tensor *t = *out;
    if (!t->local_numel) return DT_OK;
    if (t->dtype == DT_F64)
        memcpy(t->data, src, t->local_numel * sizeof(double));
    else
        for (size_t i = 0; i < t->local_numel; i++)
            ((float *)t->data)[i] = (float)src[i];
    return DT_OK;
}

/* rows of width doubles: send_rows[r] to ep rank r, recv_rows[r] from it. */
static dt_status exchange(const dt_moe_plan *p, const double *send, const int64_t *send_rows,
                          double *recv, const int64_t *recv_rows, int64_t width) {
    int ep = p->info.ep;
    size_t *c = malloc(sizeof(size_t) * 2 * (size_t)ep);
    if (!c) return dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    for (int r = 0; r < ep; r++)
        c[r] = (size_t)(send_rows[r] * width), c[ep + r] = (size_t)(recv_rows[r] * width);
    dt_status st = dt_all_to_allv(p->comm, send, c, NULL, recv, c + ep, NULL, DT_F64);
    free(c);
    return st;
}

/* perm[i] for expert-major row i: received rows come by source rank, then local expert. */
static void expert_major(const dt_moe_plan *p, int64_t *perm) {
    int64_t El = p->info.local_experts, ep = p->info.ep, i = 0;
    for (int64_t j = 0; j < El; j++) {
        int64_t src = 0; /* first received row of (rank r, expert j) */
        for (int64_t r = 0; r < ep; r++) {
            int64_t before = src;
            for (int64_t jj = 0; jj < j; jj++)
                before += p->recv_per_expert[r * El + jj];
            for (int64_t c = 0; c < p->recv_per_expert[r * El + j]; c++)
                perm[i++] = before + c;
            src += p->recv_counts[r];
        }
    }
}

static double silu(double v) {
    return v / (1 + exp(-v));
}

/* ---- forward ------------------------------------------------------------------------------ */

static dt_status forward(saved *s, const dt_tensor *x, const dt_tensor *gates, const dt_tensor *w1,
                         const dt_tensor *w2, const dt_tensor *w3, double *out) {
    const dt_moe_plan *p = s->plan;
    const dt_moe_plan_info *in = &p->info;
    int64_t D = s->D, H = s->H, El = in->local_experts, k = in->top_k;
    size_t ns = (size_t)in->nsend + 1, nr = (size_t)in->nrecv + 1;
    double *xd = malloc(sizeof(double) * (x->local_numel + 1));
    double *gd = malloc(sizeof(double) * (gates->local_numel + 1));
    double *wd[3] = {malloc(sizeof(double) * (w1->local_numel + 1)),
                     malloc(sizeof(double) * (w2->local_numel + 1)),
                     malloc(sizeof(double) * (w3->local_numel + 1))};
    double *buf = malloc(sizeof(double) * ns * (size_t)D);
    double *recv = malloc(sizeof(double) * nr * (size_t)D);
    double *a = malloc(sizeof(double) * nr * (size_t)H);
    s->perm = malloc(sizeof(int64_t) * nr);
    s->xg = malloc(sizeof(double) * nr * (size_t)D);
    s->h1 = malloc(sizeof(double) * nr * (size_t)H),
    s->h3 = malloc(sizeof(double) * nr * (size_t)H);
    s->yback = malloc(sizeof(double) * ns * (size_t)D);
    dt_status st = DT_OK;
    if (!xd || !gd || !wd[0] || !wd[1] || !wd[2] || !buf || !recv || !a || !s->perm || !s->xg ||
        !s->h1 || !s->h3 || !s->yback) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for %lld rows", FN, (long long)in->nrecv);
        goto done;
    }
    to_f64(x, xd), to_f64(gates, gd), to_f64(w1, wd[0]), to_f64(w2, wd[1]), to_f64(w3, wd[2]);
    /* (N, D) -> (nsend, D): the token of each sent assignment, by destination */
    for (int64_t i = 0; i < in->nsend; i++)
        memcpy(buf + i * D, xd + in->send_order[i] / k * D, sizeof(double) * (size_t)D);
    DT_CHECK_GOTO(exchange(p, buf, in->send_counts, recv, in->recv_counts, D), st, done);
    expert_major(p, s->perm);
    for (int64_t i = 0; i < in->nrecv; i++)
        memcpy(s->xg + i * D, recv + s->perm[i] * D, sizeof(double) * (size_t)D);
    /* the local experts: (nrecv, D) -> (nrecv, H) -> (nrecv, D) */
    dt_cpu_grouped_mm(DT_GROUPED_NN, El, p->expert_rows, D, H, s->xg, wd[0], s->h1);
    dt_cpu_grouped_mm(DT_GROUPED_NN, El, p->expert_rows, D, H, s->xg, wd[2], s->h3);
    for (int64_t i = 0; i < in->nrecv * H; i++)
        a[i] = silu(s->h1[i]) * s->h3[i];
    double *y = malloc(sizeof(double) * nr * (size_t)D);
    if (!y) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
        goto done;
    }
    dt_cpu_grouped_mm(DT_GROUPED_NN, El, p->expert_rows, H, D, a, wd[1], y);
    for (int64_t i = 0; i < in->nrecv; i++) /* back to the order they came in */
        memcpy(recv + s->perm[i] * D, y + i * D, sizeof(double) * (size_t)D);
    free(y);
    DT_CHECK_GOTO(exchange(p, recv, in->recv_counts, s->yback, in->send_counts, D), st, done);
    /* combine: out[t] = sum of gate * expert output over t's kept assignments */
    memset(out, 0, sizeof(double) * (size_t)(in->tokens * D));
    for (int64_t i = 0; i < in->nsend; i++) {
        int64_t as = in->send_order[i], t = as / k;
        for (int64_t d = 0; d < D; d++)
            out[t * D + d] += gd[as] * s->yback[i * D + d];
    }
done:
    free(xd), free(gd), free(wd[0]), free(wd[1]), free(wd[2]), free(buf), free(recv), free(a);
    return st;
}

/* ---- backward ----------------------------------------------------------------------------- */

typedef struct grads {
    double *x, *g, *w[3]; /* (N, D), (N, k), and w1, w2, w3's local shapes */
} grads;

static dt_status backward_rows(const saved *s, const dt_tensor *gates, const dt_tensor *w1,
                               const dt_tensor *w2, const dt_tensor *w3, const double *dout,
                               grads *gr) {
    const dt_moe_plan *p = s->plan;
    const dt_moe_plan_info *in = &p->info;
    int64_t D = s->D, H = s->H, El = in->local_experts, k = in->top_k;
    size_t ns = (size_t)in->nsend + 1, nr = (size_t)in->nrecv + 1;
    double *gd = malloc(sizeof(double) * (gates->local_numel + 1));
    double *wd[3] = {malloc(sizeof(double) * (w1->local_numel + 1)),
                     malloc(sizeof(double) * (w2->local_numel + 1)),
                     malloc(sizeof(double) * (w3->local_numel + 1))};
    double *buf = malloc(sizeof(double) * ns * (size_t)D);
    double *recv = malloc(sizeof(double) * nr * (size_t)D);
    double *dy = malloc(sizeof(double) * nr * (size_t)D);
    double *a = malloc(sizeof(double) * nr * (size_t)H);
    double *dh1 = malloc(sizeof(double) * nr * (size_t)H);
    double *dh3 = malloc(sizeof(double) * nr * (size_t)H);
    double *dx2 = malloc(sizeof(double) * nr * (size_t)D);
    dt_status st = DT_OK;
    if (!gd || !wd[0] || !wd[1] || !wd[2] || !buf || !recv || !dy || !a || !dh1 || !dh3 || !dx2) {
        st = dt_error(DT_ERR_NOMEM, "dt_backward: %s: out of memory", FN);
        goto done;
    }
    to_f64(gates, gd), to_f64(w1, wd[0]), to_f64(w2, wd[1]), to_f64(w3, wd[2]);
    /* At home: d gate = dout[t] . y, and the rows' gradient gate * dout[t], in send order.
     * Dropped assignments are in no row: their gate's gradient stays 0. */
    memset(gr->g, 0, sizeof(double) * (size_t)(in->tokens * k));
    for (int64_t i = 0; i < in->nsend; i++) {
        int64_t as = in->send_order[i], t = as / k;
        double dg = 0;
        for (int64_t d = 0; d < D; d++) {
            dg += dout[t * D + d] * s->yback[i * D + d];
            buf[i * D + d] = gd[as] * dout[t * D + d];
        }
        gr->g[as] = dg;
    }
    DT_CHECK_GOTO(exchange(p, buf, in->send_counts, recv, in->recv_counts, D), st, done);
    for (int64_t i = 0; i < in->nrecv; i++)
        memcpy(dy + i * D, recv + s->perm[i] * D, sizeof(double) * (size_t)D);
    /* The experts backward, expert-major, each step one grouped GEMM. */
    for (int64_t i = 0; i < in->nrecv * H; i++)
        a[i] = silu(s->h1[i]) * s->h3[i];
    dt_cpu_grouped_mm(DT_GROUPED_TN, El, p->expert_rows, H, D, a, dy, gr->w[1]); /* a^T dy */
    dt_cpu_grouped_mm(DT_GROUPED_NT, El, p->expert_rows, D, H, dy, wd[1], a);    /* da = dy w2^T */
    for (int64_t i = 0; i < in->nrecv * H; i++) {
        double h = s->h1[i], sg = 1 / (1 + exp(-h));
        dh1[i] = a[i] * s->h3[i] * sg * (1 + h * (1 - sg)); /* silu'(h) = sg (1 + h (1 - sg)) */
        dh3[i] = a[i] * h * sg;
    }
    dt_cpu_grouped_mm(DT_GROUPED_TN, El, p->expert_rows, D, H, s->xg, dh1, gr->w[0]);
    dt_cpu_grouped_mm(DT_GROUPED_TN, El, p->expert_rows, D, H, s->xg, dh3, gr->w[2]);
    dt_cpu_grouped_mm(DT_GROUPED_NT, El, p->expert_rows, H, D, dh1, wd[0], dy);
    dt_cpu_grouped_mm(DT_GROUPED_NT, El, p->expert_rows, H, D, dh3, wd[2], dx2);
    for (int64_t i = 0; i < in->nrecv; i++) /* dx rows back in arrival order */
        for (int64_t d = 0; d < D; d++)
            recv[s->perm[i] * D + d] = dy[i * D + d] + dx2[i * D + d];
    /* The reverse all_to_allv: the token gradients home. */
    DT_CHECK_GOTO(exchange(p, recv, in->recv_counts, buf, in->send_counts, D), st, done);
    memset(gr->x, 0, sizeof(double) * (size_t)(in->tokens * D));
    for (int64_t i = 0; i < in->nsend; i++) {
        int64_t t = in->send_order[i] / k;
        for (int64_t d = 0; d < D; d++)
            gr->x[t * D + d] += buf[i * D + d];
    }
done:
    free(gd), free(wd[0]), free(wd[1]), free(wd[2]), free(buf), free(recv), free(dy), free(a);
    free(dh1), free(dh3), free(dx2);
    return st;
}

/* The weights' gradient placements: the weight's own, Partial(sum) on the mesh dims (other
 * than ep) whose ranks hold different tokens. */
static void weight_grad_placements(const dt_tensor *x, const dt_tensor *w, int ep_dim,
                                   dt_placement *pl) {
    for (int m = 0; m < w->mesh->ndim; m++)
        pl[m] = m != ep_dim && x->placements[m].kind == DT_PLACEMENT_SHARD
                    ? dt_partial(DT_REDUCE_SUM)
                    : w->placements[m];
}

static dt_status backward(void *state, dt_tensor *const *in, const bool *need, dt_tensor *grad,
                          dt_tensor **gin) {
    saved *s = state;
    dt_tensor *x = in[0], *gates = in[1], *dout = grad;
    int same = 1;
    for (int m = 0; m < x->mesh->ndim; m++)
        same &= dt_placement_equal(grad->placements[m], x->placements[m]);
    if (!same) DT_CHECK(dt_tensor_redistribute(grad, x->mesh->ndim, x->placements, &dout));
    grads gr = {malloc(sizeof(double) * (x->local_numel + 1)),
                malloc(sizeof(double) * (gates->local_numel + 1)),
                {malloc(sizeof(double) * (in[2]->local_numel + 1)),
                 malloc(sizeof(double) * (in[3]->local_numel + 1)),
                 malloc(sizeof(double) * (in[4]->local_numel + 1))}};
    double *dd = malloc(sizeof(double) * (dout->local_numel + 1));
    dt_status st = DT_OK;
    if (!gr.x || !gr.g || !gr.w[0] || !gr.w[1] || !gr.w[2] || !dd)
        st = dt_error(DT_ERR_NOMEM, "dt_backward: %s: out of memory", FN);
    if (st == DT_OK) {
        to_f64(dout, dd);
        st = backward_rows(s, gates, in[2], in[3], in[4], dd, &gr);
    }
    if (st == DT_OK && need[0])
        st = tensor_from(x, x->shape, x->ndim, x->placements, gr.x, &gin[0]);
    if (st == DT_OK && need[1])
        st = tensor_from(gates, gates->shape, gates->ndim, gates->placements, gr.g, &gin[1]);
    for (int i = 0; i < 3 && st == DT_OK; i++) {
        if (!need[2 + i]) continue;
        dt_placement pl[DT_MESH_MAX_NDIM];
        weight_grad_placements(x, in[2 + i], s->plan->ep_dim, pl);
        st = tensor_from(in[2 + i], in[2 + i]->shape, 3, pl, gr.w[i], &gin[2 + i]);
    }
    if (dout != grad) dt_tensor_release(dout);
    free(gr.x), free(gr.g), free(gr.w[0]), free(gr.w[1]), free(gr.w[2]), free(dd);
    return st;
}

/* ---- the entry point ---------------------------------------------------------------------- */

static dt_status check_like(const dt_moe_plan *p, const char *arg, const dt_tensor *t,
                            int64_t last) {
    int same = t->ndim == p->ndim && dt_mesh_equal(t->mesh, p->mesh);
    for (int d = 0; same && d < t->ndim - 1; d++)
        same = t->shape[d] == p->shape[d];
    for (int m = 0; same && m < p->mesh->ndim; m++)
        same = dt_placement_equal(t->placements[m], p->placements[m]);
    if (!same)
        return dt_error(DT_ERR_SHAPE,
                        "%s: %s's leading shape, mesh or placements differ from "
                        "the plan's experts tensor",
                        FN, arg);
    if (last >= 0 && t->shape[t->ndim - 1] != last)
        return dt_error(DT_ERR_SHAPE, "%s: %s's last dim is %lld, want %lld", FN, arg,
                        (long long)t->shape[t->ndim - 1], (long long)last);
    return DT_OK;
}

static dt_status check_weight(const dt_moe_plan *p, const char *arg, const dt_tensor *w,
                              const dt_tensor *x, int64_t rows, int64_t cols) {
    DT_CHECK(dt_tensor_check(FN, arg, w));
    const dt_moe_plan_info *in = &p->info;
    if (w->dtype != x->dtype)
        return dt_error(DT_ERR_DTYPE, "%s: %s is %s, x is %s", FN, arg, dt_dtype_name(w->dtype),
                        dt_dtype_name(x->dtype));
    if (w->ndim != 3 || w->shape[0] != in->experts || w->shape[1] != rows ||
        (cols >= 0 && w->shape[2] != cols)) {
        char have[96] = "(", want[64];
        for (int d = 0; d < w->ndim && strlen(have) < 64; d++)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? ", " : "",
                     (long long)w->shape[d]);
        strcat(have, ")");
        if (cols >= 0)
            snprintf(want, sizeof want, "(%lld, %lld, %lld)", (long long)in->experts,
                     (long long)rows, (long long)cols);
        else
            snprintf(want, sizeof want, "(%lld, %lld, hidden)", (long long)in->experts,
                     (long long)rows);
        return dt_error(DT_ERR_SHAPE, "%s: %s has shape %s, want %s", FN, arg, have, want);
    }
    if (!dt_mesh_equal(w->mesh, p->mesh))
        return dt_error(DT_ERR_MESH, "%s: %s lives on another mesh", FN, arg);
    if (w->device.kind != DT_DEVICE_CPU)
        return dt_error(DT_ERR_UNSUPPORTED, "%s: CPU tensors only (for now)", FN);
    for (int m = 0; m < p->mesh->ndim; m++) {
        dt_placement pl = w->placements[m];
        /* a one-rank ep dim holds every expert either way */
        int ok = pl.kind == DT_PLACEMENT_REPLICATE
                     ? m != p->ep_dim || p->info.ep == 1
                     : m == p->ep_dim && pl.kind == DT_PLACEMENT_SHARD && pl.dim == 0;
        if (!ok)
            return dt_error(DT_ERR_PLACEMENT,
                            "%s: %s must be Shard(0) on mesh dim %d (ep) and "
                            "Replicate on the others; mesh dim %d differs",
                            FN, arg, p->ep_dim, m);
    }
    return DT_OK;
}

static dt_status check(dt_tensor *x, dt_tensor *gates, dt_moe_plan *p, dt_tensor *w1, dt_tensor *w2,
                       dt_tensor *w3) {
    DT_ARG_NOT_NULL(p);
    DT_CHECK(dt_tensor_check(FN, "x", x));
    DT_CHECK(dt_tensor_check(FN, "gates", gates));
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "%s: x is %s (f32 or f64 only)", FN, dt_dtype_name(x->dtype));
    if (gates->dtype != x->dtype)
        return dt_error(DT_ERR_DTYPE, "%s: gates is %s, x is %s", FN, dt_dtype_name(gates->dtype),
                        dt_dtype_name(x->dtype));
    if (x->device.kind != DT_DEVICE_CPU || gates->device.kind != DT_DEVICE_CPU)
        return dt_error(DT_ERR_UNSUPPORTED, "%s: CPU tensors only (for now)", FN);
    DT_CHECK(check_like(p, "x", x, -1));
    DT_CHECK(check_like(p, "gates", gates, p->info.top_k));
    int64_t D = x->shape[x->ndim - 1];
    DT_CHECK(check_weight(p, "w1", w1, x, D, -1));
    int64_t H = w1->shape[2];
    DT_CHECK(check_weight(p, "w3", w3, x, D, H));
    DT_CHECK(check_weight(p, "w2", w2, x, H, D));
    return DT_OK;
}

dt_status dt_moe_experts(dt_tensor *x, dt_tensor *gates, dt_moe_plan *plan, dt_tensor *w1,
                         dt_tensor *w2, dt_tensor *w3, dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check(x, gates, plan, w1, w2, w3));
    saved *s = calloc(1, sizeof *s);
    if (!s) return dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    dt_moe_plan_retain(plan);
    s->plan = plan, s->D = x->shape[x->ndim - 1], s->H = w1->shape[2];
    double *o = malloc(sizeof(double) * (x->local_numel + 1));
    dt_status st =
        o ? forward(s, x, gates, w1, w2, w3, o) : dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    dt_tensor *y = NULL;
    if (st == DT_OK) st = tensor_from(x, x->shape, x->ndim, x->placements, o, &y);
    free(o);
    dt_tensor *in[5] = {x, gates, w1, w2, w3};
    if (st == DT_OK && dt_autograd_wants(in, 5)) {
        st = dt_autograd_record_custom("moe_experts", in, 5, y, backward, s, saved_free);
        s = NULL; /* the node owns it (or freed it) */
    }
    saved_free(s);
    if (st != DT_OK) {
        dt_tensor_release(y);
        return st;
    }
    *out = y;
    return DT_OK;
}
