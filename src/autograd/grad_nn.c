/* Backward rules of the model ops: softmax, log_softmax, layer_norm, rms_norm, rope, dropout,
 * pick and scaled dot-product attention. Each is written with the library's ops (no local
 * data, no collectives): what must be recomputed from the forward (the normalised input, the
 * attention probabilities) is recomputed here. */
#include <math.h>

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"

#define IN(i) (c->in[(i)])

/* Runs x while every call so far succeeded: a rule chains its ops with it and frees its
 * temporaries once at the end. */
#define DO(x)                                                                                      \
    do {                                                                                           \
        if (st == DT_OK) st = (x);                                                                 \
    } while (0)

static void release_all(dt_tensor **t, int n) {
    for (int i = 0; i < n; i++) dt_tensor_release(t[i]), t[i] = NULL;
}

/* On failure the rule returns no gradient at all. */
static dt_status finish(const dt_grad_call *c, dt_tensor **gin, dt_status st) {
    if (st != DT_OK) release_all(gin, c->n);
    return st;
}

/* ---- softmax ----------------------------------------------------------------------------- */

/* y = softmax(x): gx = y (g - sum(g y)) along dim. */
dt_status dt_grad_softmax(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *t[4] = {0}; /* y, g y, sum, g - sum */
    int dim = c->args->dim;
    dt_status st = dt_softmax(IN(0), dim, &t[0]);
    DO(dt_mul(c->grad, t[0], &t[1]));
    DO(dt_sum(t[1], &dim, 1, 1, &t[2]));
    DO(dt_sub(c->grad, t[2], &t[3]));
    DO(dt_mul(t[0], t[3], &gin[0]));
    release_all(t, 4);
    return finish(c, gin, st);
}

/* y = log_softmax(x): gx = g - softmax(x) sum(g) along dim. */
dt_status dt_grad_log_softmax(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *t[3] = {0}; /* softmax, sum g, product */
    int dim = c->args->dim;
    dt_status st = dt_softmax(IN(0), dim, &t[0]);
    DO(dt_sum(c->grad, &dim, 1, 1, &t[1]));
    DO(dt_mul(t[0], t[1], &t[2]));
    DO(dt_sub(c->grad, t[2], &gin[0]));
    release_all(t, 3);
    return finish(c, gin, st);
}

/* ---- layer_norm, rms_norm ---------------------------------------------------------------- */

/* Over the last k dims, xc = x - mean(x) (x for rms), rstd = 1 / sqrt(mean(xc^2) + eps),
 * xhat = xc rstd, y = xhat w + b. With h = g w:
 *   gx = rstd (h - mean(h) - xhat mean(h xhat))   (no mean(h) term for rms)
 *   gw = g xhat and gb = g, summed over the leading dims. */
static dt_status norm_rule(const dt_grad_call *c, int rms, dt_tensor **gin) {
    dt_tensor *x = IN(0), *w = c->n > 1 ? IN(1) : NULL, *b = c->n > 2 ? IN(2) : NULL;
    int k = c->args->ndims > 0 ? c->args->ndims : w ? w->ndim : b ? b->ndim : 1;
    int dims[DT_MAX_NDIM];
    for (int i = 0; i < k; i++) dims[i] = x->ndim - k + i;
    double eps = c->args->scalar > 0 ? c->args->scalar : 1e-5;
    enum { MU, XC, SQ, VAR, VE, RSTD, XHAT, H, HX, M2, XM2, A, M1, A2, GX, N };
    dt_tensor *t[N] = {0};
    dt_status st = DT_OK;
    if (rms) {
        DO(dt_tensor_retain(x));
        if (st == DT_OK) t[XC] = x;
    } else {
        DO(dt_mean(x, dims, k, 1, &t[MU]));
        DO(dt_sub(x, t[MU], &t[XC]));
    }
    DO(dt_mul(t[XC], t[XC], &t[SQ]));
    DO(dt_mean(t[SQ], dims, k, 1, &t[VAR]));
    DO(dt_add_scalar(t[VAR], eps, &t[VE]));
    DO(dt_rsqrt(t[VE], &t[RSTD]));
    DO(dt_mul(t[XC], t[RSTD], &t[XHAT]));
    if (c->need[0]) {
        if (w) {
            DO(dt_mul(c->grad, w, &t[H]));
        } else {
            DO(dt_tensor_retain(c->grad));
            if (st == DT_OK) t[H] = c->grad;
        }
        DO(dt_mul(t[H], t[XHAT], &t[HX]));
        DO(dt_mean(t[HX], dims, k, 1, &t[M2]));
        DO(dt_mul(t[XHAT], t[M2], &t[XM2]));
        DO(dt_sub(t[H], t[XM2], &t[A]));
        if (!rms) {
            DO(dt_mean(t[H], dims, k, 1, &t[M1]));
            DO(dt_sub(t[A], t[M1], &t[A2]));
        } else {
            DO(dt_tensor_retain(t[A]));
            if (st == DT_OK) t[A2] = t[A];
        }
        DO(dt_mul(t[A2], t[RSTD], &gin[0]));
    }
    if (w && c->need[1]) {
        DO(dt_mul(c->grad, t[XHAT], &t[GX]));
        DO(dt_grad_sum_to(t[GX], w->ndim, w->shape, &gin[1]));
    }
    if (b && c->need[2]) DO(dt_grad_sum_to(c->grad, b->ndim, b->shape, &gin[2]));
    release_all(t, N);
    return finish(c, gin, st);
}

dt_status dt_grad_layer_norm(const dt_grad_call *c, dt_tensor **gin) {
    return norm_rule(c, 0, gin);
}

dt_status dt_grad_rms_norm(const dt_grad_call *c, dt_tensor **gin) {
    return norm_rule(c, 1, gin);
}

/* ---- rope, dropout ----------------------------------------------------------------------- */

/* p (B, T, H, D) summed over b, h and each pair: (T, D/2). */
static dt_status sum_pairs(dt_tensor *p, dt_tensor **out) {
    int64_t shape[5] = {p->shape[0], p->shape[1], p->shape[2], p->shape[3] / 2, 2};
    int dims[3] = {0, 2, 4};
    dt_tensor *v;
    DT_CHECK(dt_view(p, 5, shape, &v));
    dt_status st = dt_sum(v, dims, 3, 0, out);
    dt_tensor_release(v);
    return st;
}

/* A rotation is orthogonal: gx = rope(g, cos, -sin). For the tables, with x0, x1 a pair and
 * g0, g1 its gradient: dcos = sum g0 x0 + g1 x1 = sum g x, and dsin = sum g1 x0 - g0 x1 =
 * sum g rope(x, 0, 1) (a quarter turn), both summed over b, h and the pair. */
dt_status dt_grad_rope(const dt_grad_call *c, dt_tensor **gin) {
    enum { NSIN, GX, ZERO, ONE, ROT, GR, N };
    dt_tensor *t[N] = {0};
    dt_status st = DT_OK;
    if (c->need[0]) {
        DO(dt_neg(IN(2), &t[NSIN]));
        DO(dt_rope(c->grad, IN(1), t[NSIN], &gin[0]));
    }
    if (c->need[1]) {
        DO(dt_mul(c->grad, IN(0), &t[GX]));
        DO(sum_pairs(t[GX], &gin[1]));
    }
    if (c->need[2]) {
        DO(dt_tensor_zeros_like(IN(1), &t[ZERO]));
        DO(dt_tensor_ones_like(IN(2), &t[ONE]));
        DO(dt_rope(IN(0), t[ZERO], t[ONE], &t[ROT]));
        DO(dt_mul(c->grad, t[ROT], &t[GR]));
        DO(sum_pairs(t[GR], &gin[2]));
    }
    release_all(t, N);
    return finish(c, gin, st);
}

/* The mask depends only on the generator state and each element's global index, so the same
 * op with the same arguments on g keeps the same elements and scales them alike. */
dt_status dt_grad_dropout(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *g = c->grad;
    return dt_op_call(DT_OP_DROPOUT, &g, 1, c->args, &gin[0]);
}

/* ---- pick -------------------------------------------------------------------------------- */

/* pick(logits (..., C), target (...)): the gradient is g at each row's target class and 0
 * elsewhere, where(one_hot(target, C), g[..., None], 0). It is the logits' size, as the
 * gradient must be, and one_hot writes each rank's class range when the logits' class dim is
 * sharded (loss parallel), so nothing is gathered. A target outside [0, C) (cross_entropy's
 * ignored rows) picks 0, so its row gets no gradient: the target is clamped into range for
 * one_hot and g zeroed where clamping moved it (all on per-row tensors). */
dt_status dt_grad_pick(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *l = IN(0), *t = IN(1);
    int64_t C = l->shape[l->ndim - 1];
    enum { LO, HI, UP, TC, OFF, ZG, GZ, HOT, GU, ZERO, N };
    dt_tensor *x[N] = {0};
    dt_status st = dt_tensor_full_like(t, 0, &x[LO]);
    DO(dt_tensor_full_like(t, (double)(C - 1), &x[HI]));
    DO(dt_maximum(t, x[LO], &x[UP]));
    DO(dt_minimum(x[UP], x[HI], &x[TC]));
    DO(dt_sub(t, x[TC], &x[OFF])); /* non-zero where the target is out of range */
    DO(dt_tensor_zeros_like(c->grad, &x[ZG]));
    DO(dt_where(x[OFF], x[ZG], c->grad, &x[GZ]));
    DO(dt_one_hot(x[TC], C, &x[HOT]));
    DO(dt_unsqueeze(x[GZ], -1, &x[GU]));
    DO(dt_mul_scalar(x[GU], 0, &x[ZERO]));
    DO(dt_where(x[HOT], x[GU], x[ZERO], &gin[0]));
    release_all(x, N);
    return finish(c, gin, st);
}

/* ---- scaled dot-product attention -------------------------------------------------------- */

/* From the log-sum-exp the forward saved: one scaled_dot_product_attention_backward call,
 * sharded as the forward was (batch or heads), rebuilds P = exp(q k^T * scale - lse) a kv
 * head at a time and returns dq, dk and dv; no softmax pass and no (..., Tq, Tk) tensor. */
dt_status dt_grad_sdpa(const dt_grad_call *c, dt_tensor **gin) {
    if (c->nsaved < 1)
        return dt_error(DT_ERR_ARG, "dt_backward: scaled_dot_product_attention saved no "
                                    "log-sum-exp");
    dt_tensor *in[5] = {IN(0), IN(1), IN(2), c->grad, c->saved[0]}, *g[3], *aux[2];
    dt_status st = dt_op_call_aux(DT_OP_SDPA_BACKWARD, in, 5, c->args, &g[0], aux, 2);
    if (st != DT_OK) return st;
    g[1] = aux[0], g[2] = aux[1];
    for (int i = 0; i < 3; i++) {
        if (c->need[i]) gin[i] = g[i];
        else dt_tensor_release(g[i]);
    }
    return DT_OK;
}
