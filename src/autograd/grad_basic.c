/* Backward rules of the arithmetic, matmul, reduction and view ops. Every rule builds its
 * gradients from the library's ops; shapes follow NumPy broadcasting, undone by
 * dt_grad_sum_to. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"

#define IN(i) (c->in[(i)])

/* out = sum_to(x, input i's shape), x consumed. */
static dt_status to_input(const dt_grad_call *c, int i, dt_tensor *x, dt_tensor **out) {
    dt_status st = dt_grad_sum_to(x, IN(i)->ndim, IN(i)->shape, out);
    dt_tensor_release(x);
    return st;
}

/* x * y, or -(x * y) when negate. */
static dt_status product(dt_tensor *x, dt_tensor *y, int negate, dt_tensor **out) {
    if (!negate) return dt_mul(x, y, out);
    dt_tensor *p;
    DT_CHECK(dt_mul(x, y, &p));
    dt_status st = dt_neg(p, out);
    dt_tensor_release(p);
    return st;
}

dt_status dt_grad_add(const dt_grad_call *c, dt_tensor **gin) {
    for (int i = 0; i < 2; i++)
        if (c->need[i]) DT_CHECK(dt_grad_sum_to(c->grad, IN(i)->ndim, IN(i)->shape, &gin[i]));
    return DT_OK;
}

dt_status dt_grad_sub(const dt_grad_call *c, dt_tensor **gin) {
    if (c->need[0]) DT_CHECK(dt_grad_sum_to(c->grad, IN(0)->ndim, IN(0)->shape, &gin[0]));
    if (c->need[1]) {
        dt_tensor *n;
        dt_status st = dt_neg(c->grad, &n);
        if (st == DT_OK) st = to_input(c, 1, n, &gin[1]);
        if (st != DT_OK) return dt_tensor_release(gin[0]), gin[0] = NULL, st;
    }
    return DT_OK;
}

dt_status dt_grad_mul(const dt_grad_call *c, dt_tensor **gin) {
    dt_status st = DT_OK;
    for (int i = 0; i < 2 && st == DT_OK; i++) {
        if (!c->need[i]) continue;
        dt_tensor *p;
        st = dt_mul(c->grad, IN(1 - i), &p);
        if (st == DT_OK) st = to_input(c, i, p, &gin[i]);
    }
    if (st != DT_OK) dt_tensor_release(gin[0]), gin[0] = NULL;
    return st;
}

/* d(a/b) = g/b, -g a / b^2. */
dt_status dt_grad_div(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *q = NULL, *r = NULL;
    dt_status st = dt_div(c->grad, IN(1), &q); /* g / b */
    if (st == DT_OK && c->need[0]) {
        dt_tensor_retain(q);
        st = to_input(c, 0, q, &gin[0]);
    }
    if (st == DT_OK && c->need[1]) {
        dt_tensor *ab = NULL;
        st = dt_div(IN(0), IN(1), &ab); /* a / b */
        if (st == DT_OK) st = product(q, ab, 1, &r);
        dt_tensor_release(ab);
        if (st == DT_OK) st = to_input(c, 1, r, &gin[1]);
    }
    dt_tensor_release(q);
    if (st != DT_OK) dt_tensor_release(gin[0]), gin[0] = NULL;
    return st;
}

dt_status dt_grad_neg(const dt_grad_call *c, dt_tensor **gin) { return dt_neg(c->grad, &gin[0]); }

dt_status dt_grad_add_scalar(const dt_grad_call *c, dt_tensor **gin) {
    DT_CHECK(dt_tensor_retain(c->grad));
    gin[0] = c->grad;
    return DT_OK;
}

dt_status dt_grad_contiguous(const dt_grad_call *c, dt_tensor **gin) {
    return dt_grad_add_scalar(c, gin);
}

dt_status dt_grad_mul_scalar(const dt_grad_call *c, dt_tensor **gin) {
    return dt_mul_scalar(c->grad, c->args->scalar, &gin[0]);
}

/* d exp(x) = g exp(x) (the output, recomputed). */
dt_status dt_grad_exp(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *e;
    DT_CHECK(dt_exp(IN(0), &e));
    dt_status st = dt_mul(c->grad, e, &gin[0]);
    dt_tensor_release(e);
    return st;
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* a (M, K) @ b (K, N): ga = g b^T, gb = a^T g. */
dt_status dt_grad_mm(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *t = NULL;
    dt_status st = DT_OK;
    if (c->need[0]) {
        st = dt_transpose(IN(1), 0, 1, &t);
        if (st == DT_OK) st = dt_mm(c->grad, t, &gin[0]);
        dt_tensor_release(t);
    }
    if (st == DT_OK && c->need[1]) {
        st = dt_transpose(IN(0), 0, 1, &t);
        if (st == DT_OK) st = dt_mm(t, c->grad, &gin[1]);
        dt_tensor_release(t);
    }
    if (st != DT_OK) dt_tensor_release(gin[0]), gin[0] = NULL;
    return st;
}

/* Whether a mesh dim shards x (B, T, in) on T: flattening (B, T) to rows would move data then
 * (a shard survives a view only on its group's leading dim). Context parallel's sequence. */
static int seq_sharded(const dt_tensor *x) {
    for (int m = 0; x->ndim == 3 && m < dt_mesh_ndim(x->mesh); m++)
        if (x->placements[m].kind == DT_PLACEMENT_SHARD && x->placements[m].dim == 1) return 1;
    return 0;
}

/* x (..., in) @ w (out, in)^T + b: gx = g w, gw = g2^T x2, gb = g summed over the leading dims,
 * with g2, x2 the gradient and input flattened to rows; for x (B, T, in) sharded on T, gw = the
 * batch's sum of g^T x per batch row (T's shards become Partial sums, nothing re-shards). */
dt_status dt_grad_linear(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *x = IN(0), *w = IN(1), *g = c->grad;
    dt_status st = DT_OK;
    if (c->need[0]) st = dt_matmul(g, w, &gin[0]);
    int64_t rows = 1;
    for (int d = 0; d + 1 < x->ndim; d++) rows *= x->shape[d];
    int64_t gshape[2] = {rows, w->shape[0]}, xshape[2] = {rows, w->shape[1]};
    if (st == DT_OK && c->need[1] && seq_sharded(x)) {
        dt_tensor *gt = NULL, *p = NULL;
        int batch = 0;
        st = dt_transpose(g, 1, 2, &gt);            /* (B, out, T) */
        if (st == DT_OK) st = dt_matmul(gt, x, &p); /* (B, out, in) */
        if (st == DT_OK) st = dt_sum(p, &batch, 1, 0, &gin[1]);
        dt_tensor_release(gt), dt_tensor_release(p);
    } else if (st == DT_OK && c->need[1]) {
        dt_tensor *g2 = NULL, *gt = NULL, *x2 = NULL;
        st = dt_view(g, 2, gshape, &g2);
        if (st == DT_OK) st = dt_transpose(g2, 0, 1, &gt);
        if (st == DT_OK) st = dt_view(x, 2, xshape, &x2);
        if (st == DT_OK) st = dt_mm(gt, x2, &gin[1]);
        dt_tensor_release(g2), dt_tensor_release(gt), dt_tensor_release(x2);
    }
    if (st == DT_OK && c->n > 2 && c->need[2]) st = dt_grad_sum_to(g, 1, &w->shape[0], &gin[2]);
    if (st != DT_OK)
        for (int i = 0; i < 3; i++) dt_tensor_release(gin[i]), gin[i] = NULL;
    return st;
}

/* ---- reductions and views -------------------------------------------------------------- */

/* g of a reduction over args' dims, brought back to x's shape (keepdim form, then expanded),
 * times scale (1 for sum, 1/count for mean). */
static dt_status unreduce(const dt_grad_call *c, double scale, dt_tensor **out) {
    dt_tensor *x = IN(0);
    int64_t kept[DT_MAX_NDIM];
    unsigned mask = 0;
    for (int i = 0; i < c->args->ndims; i++) {
        int d = c->args->dims[i] < 0 ? c->args->dims[i] + x->ndim : c->args->dims[i];
        mask |= 1u << d;
    }
    if (!c->args->ndims) mask = (1u << x->ndim) - 1;
    double count = 1;
    for (int d = 0; d < x->ndim; d++) {
        kept[d] = mask & (1u << d) ? 1 : x->shape[d];
        if (mask & (1u << d)) count *= (double)x->shape[d];
    }
    dt_tensor *k = NULL, *e = NULL;
    dt_status st = dt_view(c->grad, x->ndim, kept, &k);
    if (st == DT_OK) st = dt_expand(k, x->ndim, x->shape, &e);
    dt_tensor_release(k);
    if (st != DT_OK) return st;
    if (scale == 1) {
        *out = e;
        return DT_OK;
    }
    st = dt_mul_scalar(e, scale < 0 ? 1 / count : scale, out);
    dt_tensor_release(e);
    return st;
}

dt_status dt_grad_sum(const dt_grad_call *c, dt_tensor **gin) { return unreduce(c, 1, &gin[0]); }
dt_status dt_grad_mean(const dt_grad_call *c, dt_tensor **gin) { return unreduce(c, -1, &gin[0]); }

dt_status dt_grad_view(const dt_grad_call *c, dt_tensor **gin) {
    return dt_view(c->grad, IN(0)->ndim, IN(0)->shape, &gin[0]);
}

dt_status dt_grad_transpose(const dt_grad_call *c, dt_tensor **gin) {
    return dt_transpose(c->grad, c->args->dim, c->args->dim2, &gin[0]);
}

/* ---- the two tokens that are not rules ------------------------------------------------- */

dt_status dt_grad_none(const dt_grad_call *c, dt_tensor **gin) {
    (void)gin;
    return dt_error(DT_ERR_UNSUPPORTED, "dt_backward: %s has no derivative (its output is an "
                                        "index or a comparison); detach its input or leave it "
                                        "out of the loss", dt_op_name(c->op));
}

dt_status dt_grad_through(const dt_grad_call *c, dt_tensor **gin) {
    (void)gin;
    return dt_error(DT_ERR_UNSUPPORTED, "dt_backward: %s is differentiated through the ops it "
                                        "is built from; it records no node of its own",
                    dt_op_name(c->op));
}
