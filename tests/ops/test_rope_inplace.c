/* dt_rope_ (dt_op_call_inplace): the rotation written over x equals dt_rope's bits and a
 * rotation in f64 done here, on one rank and sharded (batch, sequence with its tables, heads);
 * no storage is allocated; its gradient equals the out-of-place one and the f64 transpose of
 * the rotation; and the refusals: a node that recorded x before fails dt_backward by name, a
 * leaf that requires grad and an x the strategy would move are named errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "rank_helpers.h"

enum { B = 2, T = 6, H = 4, D = 8, P = D / 2, N = B * T * H * D };

/* x (B, T, H, D) and its tables on a mesh of 2 ranks, as the case places them. */
typedef struct setup {
    dt_mesh *mesh;
    dt_tensor *cos, *sin;
    double cv[T * P], sv[T * P]; /* the tables' values */
} setup;

static dt_status setup_make(dt_ctx *ctx, dt_placement table_pl, setup *u) {
    R_OK(dt_mesh_create_str(ctx, "2", &u->mesh));
    R_OK(dt_rope_tables(u->mesh, DT_F64, T, D, 10000.0, 1, &table_pl, &u->cos, &u->sin));
    R_OK(dt_tensor_full_tensor(u->cos, u->cv, sizeof u->cv));
    R_OK(dt_tensor_full_tensor(u->sin, u->sv, sizeof u->sv));
    return DT_OK;
}

static void setup_free(setup *u) {
    dt_tensor_release(u->cos), dt_tensor_release(u->sin);
    dt_mesh_release(u->mesh);
}

/* y = x rotated by sign * theta at each pair, in f64 from the tables' values. */
static void rotate(const setup *u, const double *x, double sign, double *y) {
    for (size_t k = 0; k < N; k += 2) {
        size_t i = k / 2 % P, t = k / (H * D) % T;
        double c = u->cv[t * P + i], s = sign * u->sv[t * P + i];
        y[k] = x[k] * c - x[k + 1] * s;
        y[k + 1] = x[k] * s + x[k + 1] * c;
    }
}

typedef struct place_case {
    dt_placement x, tables;
} place_case;

/* Forward: same bits as dt_rope, the rotation done here within 1e-12, *out is x, and the
 * rank's tensor bytes do not grow (no storage allocated), with and without autograd. */
static dt_status forward_body(dt_ctx *ctx, void *arg) {
    const place_case *pc = arg;
    setup u;
    R_OK(setup_make(ctx, pc->tables, &u));
    int64_t shape[4] = {B, T, H, D};
    double *xv = malloc(sizeof(double) * 4 * N), *want = xv + N, *got = xv + 2 * N,
           *ref = xv + 3 * N;
    for (size_t k = 0; k < N; k++)
        xv[k] = t_value(31, k);
    rotate(&u, xv, 1, want);
    for (int grad = 0; grad < 2; grad++) {
        dt_tensor *x, *y, *a = NULL, *ro;
        R_OK(dt_tensor_distribute(u.mesh, xv, DT_F64, 4, shape, 1, &pc->x, DT_ALL_RANKS, &x));
        R_OK(dt_rope(x, u.cos, u.sin, &ro));
        R_OK(dt_tensor_full_tensor(ro, ref, sizeof(double) * N));
        if (grad) { /* x made by a recorded op, as the model's view makes it */
            a = x;
            R_OK(dt_tensor_set_requires_grad(a, 1));
            R_OK(dt_mul_scalar(a, 1.0, &x));
        }
        dt_tensor_memory before, after;
        R_OK(dt_ctx_tensor_memory(ctx, &before));
        R_OK(dt_rope_(x, u.cos, u.sin, &y));
        R_OK(dt_ctx_tensor_memory(ctx, &after));
        R_CHECK(y == x, "grad %d: *out is not x", grad);
        R_CHECK(after.bytes == before.bytes, "grad %d: tensor bytes %lld -> %lld", grad,
                (long long)before.bytes, (long long)after.bytes);
        R_OK(dt_tensor_full_tensor(y, got, sizeof(double) * N));
        for (size_t k = 0; k < N; k++) {
            R_CHECK(!memcmp(&got[k], &ref[k], sizeof(double)),
                    "grad %d element %zu: in place %.17g, dt_rope %.17g", grad, k, got[k], ref[k]);
            R_CHECK(fabs(got[k] - want[k]) <= 1e-12, "element %zu: %.17g, f64 rotation %.17g", k,
                    got[k], want[k]);
        }
        dt_tensor_release(y), dt_tensor_release(x), dt_tensor_release(a), dt_tensor_release(ro);
    }
    free(xv);
    setup_free(&u);
    return DT_OK;
}

Test(rope_inplace, forward_equals_out_of_place_bits_without_storage) {
    const place_case cases[] = {
        {dt_replicate(), dt_replicate()}, /* both ranks whole */
        {dt_shard(0), dt_replicate()},    /* batch */
        {dt_shard(1), dt_shard(0)},       /* sequence, tables alike: each shard's positions */
        {dt_shard(2), dt_replicate()},    /* heads */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        place_case c = cases[i];
        t_run(2, forward_body, &c);
    }
}

/* Backward: loss = sum(rope(2 a) * w) through the in-place op and through dt_rope give a.grad
 * with the same bits, and both the f64 rotation of 2 w by -theta (the transpose). */
static dt_status grad_body(dt_ctx *ctx, void *arg) {
    const place_case *pc = arg;
    setup u;
    R_OK(setup_make(ctx, pc->tables, &u));
    int64_t shape[4] = {B, T, H, D};
    double *buf = malloc(sizeof(double) * 4 * N), *wv = buf + N, *want = buf + 2 * N,
           *got = buf + 3 * N;
    for (size_t k = 0; k < N; k++)
        buf[k] = t_value(41, k), wv[k] = t_value(43, k);
    for (size_t k = 0; k < N; k++)
        buf[k] = 2 * wv[k];
    rotate(&u, buf, -1, want);
    for (size_t k = 0; k < N; k++)
        buf[k] = t_value(41, k);
    double first[N];
    for (int inplace = 0; inplace < 2; inplace++) {
        dt_tensor *a, *w, *x, *y, *p, *loss;
        R_OK(dt_tensor_distribute(u.mesh, buf, DT_F64, 4, shape, 1, &pc->x, DT_ALL_RANKS, &a));
        R_OK(dt_tensor_distribute(u.mesh, wv, DT_F64, 4, shape, 1, &pc->x, DT_ALL_RANKS, &w));
        R_OK(dt_tensor_set_requires_grad(a, 1));
        R_OK(dt_mul_scalar(a, 2.0, &x));
        R_OK((inplace ? dt_rope_ : dt_rope)(x, u.cos, u.sin, &y));
        R_CHECK(!inplace || y == x, "in place gave a new tensor");
        R_OK(dt_mul(y, w, &p));
        R_OK(dt_sum(p, NULL, 0, 0, &loss));
        R_OK(dt_backward(loss));
        R_CHECK(dt_tensor_grad(a), "no gradient");
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(a), got, sizeof(double) * N));
        for (size_t k = 0; k < N; k++) {
            R_CHECK(fabs(got[k] - want[k]) <= 1e-12,
                    "in place %d, element %zu: grad %.17g, f64 "
                    "transpose %.17g",
                    inplace, k, got[k], want[k]);
            R_CHECK(!inplace || !memcmp(&got[k], &first[k], sizeof(double)),
                    "element %zu: in-place grad %.17g, out-of-place %.17g", k, got[k], first[k]);
        }
        memcpy(first, got, sizeof first);
        dt_tensor *all[] = {a, w, x, y, p, loss};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            dt_tensor_release(all[i]);
    }
    free(buf);
    setup_free(&u);
    return DT_OK;
}

Test(rope_inplace, gradient_equals_out_of_place_and_the_transpose) {
    const place_case cases[] = {
        {dt_replicate(), dt_replicate()},
        {dt_shard(1), dt_shard(0)},
        {dt_shard(2), dt_replicate()},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        place_case c = cases[i];
        t_run(2, grad_body, &c);
    }
}

/* The refusals, each named; x is left as it was where the call is refused up front. */
static dt_status refuse_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    setup u;
    R_OK(setup_make(ctx, dt_replicate(), &u));
    int64_t shape[4] = {B, T, H, D};
    double *xv = malloc(sizeof(double) * 2 * N), *got = xv + N;
    for (size_t k = 0; k < N; k++)
        xv[k] = t_value(51, k);
    dt_placement rep = dt_replicate(), feat = dt_shard(3);
    dt_tensor *a, *x, *sq, *y = NULL, *p, *loss;
    /* a node that recorded x (x * x saves x) before x was rotated in place */
    R_OK(dt_tensor_distribute(u.mesh, xv, DT_F64, 4, shape, 1, &rep, DT_ALL_RANKS, &a));
    R_OK(dt_tensor_set_requires_grad(a, 1));
    R_OK(dt_mul_scalar(a, 1.0, &x));
    R_OK(dt_mul(x, x, &sq));
    R_OK(dt_rope_(x, u.cos, u.sin, &y));
    dt_tensor_release(y);
    R_OK(dt_add(sq, x, &p));
    R_OK(dt_sum(p, NULL, 0, 0, &loss));
    R_ERR(dt_backward(loss), DT_ERR_ARG, "modified by an in-place op after mul recorded it");
    dt_tensor_release(loss), dt_tensor_release(p), dt_tensor_release(sq), dt_tensor_release(x);
    /* a leaf that requires grad */
    R_ERR(dt_rope_(a, u.cos, u.sin, &y), DT_ERR_ARG, "leaf that requires grad");
    R_OK(dt_tensor_full_tensor(a, got, sizeof(double) * N));
    R_CHECK(!memcmp(got, xv, sizeof(double) * N), "a refused call wrote the leaf");
    dt_tensor_release(a);
    /* the feature dim sharded: no strategy keeps x where it is */
    R_OK(dt_tensor_distribute(u.mesh, xv, DT_F64, 4, shape, 1, &feat, DT_ALL_RANKS, &x));
    R_ERR(dt_rope_(x, u.cos, u.sin, &y), DT_ERR_PLACEMENT, "rope (in place): input 0 is");
    R_OK(dt_tensor_full_tensor(x, got, sizeof(double) * N));
    R_CHECK(!memcmp(got, xv, sizeof(double) * N), "a refused call wrote x");
    dt_tensor_release(x);
    /* an op without an in-place form */
    dt_tensor *in[2] = {u.cos, u.sin};
    R_ERR(dt_op_call_inplace(DT_OP_ADD, in, 2, NULL, &y), DT_ERR_ARG, "no in-place form");
    free(xv);
    setup_free(&u);
    return DT_OK;
}

Test(rope_inplace, refusals_are_named) {
    t_run(2, refuse_body, NULL);
}

/* Tables that require grad: their gradient reads x's values before the rotation, so the call
 * runs out of place (a new tensor) and both gradients equal dt_rope's. */
static dt_status tables_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    setup u;
    R_OK(setup_make(ctx, dt_replicate(), &u));
    R_OK(dt_tensor_set_requires_grad(u.cos, 1));
    int64_t shape[4] = {B, T, H, D};
    double *xv = malloc(sizeof(double) * N);
    for (size_t k = 0; k < N; k++)
        xv[k] = t_value(61, k);
    dt_placement rep = dt_replicate();
    double g[2][T * P];
    for (int inplace = 0; inplace < 2; inplace++) {
        dt_tensor *a, *x, *y, *loss;
        R_OK(dt_tensor_distribute(u.mesh, xv, DT_F64, 4, shape, 1, &rep, DT_ALL_RANKS, &a));
        R_OK(dt_tensor_set_requires_grad(a, 1));
        R_OK(dt_mul_scalar(a, 1.0, &x));
        R_OK((inplace ? dt_rope_ : dt_rope)(x, u.cos, u.sin, &y));
        R_CHECK(y != x, "in place with tables that require grad");
        R_OK(dt_sum(y, NULL, 0, 0, &loss));
        R_OK(dt_backward(loss));
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(u.cos), g[inplace], sizeof g[inplace]));
        R_OK(dt_tensor_zero_grad(u.cos));
        dt_tensor_release(loss), dt_tensor_release(y), dt_tensor_release(x), dt_tensor_release(a);
    }
    R_CHECK(!memcmp(g[0], g[1], sizeof g[0]), "dcos differs in place");
    free(xv);
    setup_free(&u);
    return DT_OK;
}

Test(rope_inplace, tables_that_require_grad_run_out_of_place) {
    t_run(2, tables_body, NULL);
}
