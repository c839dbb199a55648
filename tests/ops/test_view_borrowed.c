/* Views that borrow their input's storage (ops/op_impl.h, dt_view_borrowed): where the view keeps
 * every placement and grad mode is off they hold x's own block, elsewhere dt_view's copy, with
 * dt_view's placements and values either way; and linear's weight gradient, which flattens g
 * and x that way, equals a naive f64 loop within tolerance, has the bits of the product of
 * explicitly copied views, and runs no view kernel in backward (counted in the rank's trace). */
#include <math.h>
#include <stdlib.h>

#include "dtensor/tensor_impl.h"
#include "helpers.h"
#include "ops/op_impl.h"

/* ---- borrowed where the placements stay --------------------------------------------------- */

typedef struct view_case {
    int64_t B, T, C;
    dt_placement p[2]; /* per mesh dim (a 1-D mesh reads p[0]) */
    int borrow;        /* whether the (B, T, C) -> (B T, C) view keeps them all */
} view_case;

/* x (B, T, C) with placements c->p viewed as (B T, C) both ways: same spec and values; the
 * borrowed one holds x's block exactly where c->borrow says (and the block is not empty), and x
 * stays whole after it. */
static dt_status view_case_run(dt_mesh *mesh, const view_case *c) {
    int64_t shape[3] = {c->B, c->T, c->C}, flat[2] = {c->B * c->T, c->C};
    size_t n = (size_t)(c->B * c->T * c->C);
    float *src = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)),
          *b = malloc(n * sizeof(float));
    R_CHECK(src && a && b, "out of memory");
    t_fill(DT_F32, src, n, 5);
    dt_tensor *x, *v, *w;
    int nd = dt_mesh_ndim(mesh);
    R_OK(dt_tensor_distribute(mesh, src, DT_F32, 3, shape, nd, c->p, DT_ALL_RANKS, &x));
    R_OK(dt_view_borrowed(x, 2, flat, &v));
    R_OK(dt_view(x, 2, flat, &w));
    char text[64];
    R_OK(dt_placements_format(c->p, nd, text, sizeof text));
    int borrow = c->borrow && x->local_numel > 0; /* an empty block: nothing to borrow */
    R_CHECK((v->data == x->data) == borrow,
            "(%lld, %lld, %lld) %s on %d ranks: borrowed %d, "
            "want %d",
            (long long)c->B, (long long)c->T, (long long)c->C, text, dt_ctx_size(dt_mesh_ctx(mesh)),
            v->data == x->data, borrow);
    R_CHECK(!v->owned == borrow, "%s: owned %d", text, v->owned);
    R_CHECK(v->ndim == 2 && v->shape[0] == flat[0] && v->shape[1] == flat[1], "%s: shape", text);
    for (int m = 0; m < nd; m++)
        R_CHECK(dt_placement_equal(v->placements[m], w->placements[m]),
                "%s: mesh dim %d placed otherwise than dt_view's", text, m);
    R_CHECK(v->local_numel == w->local_numel, "%s: local block of %zu, dt_view's %zu", text,
            v->local_numel, w->local_numel);
    R_CHECK(!memcmp(v->data, w->data, v->local_numel * sizeof(float)), "%s: local values differ",
            text);
    R_OK(dt_tensor_full_tensor(v, a, n * sizeof(float)));
    R_OK(dt_tensor_full_tensor(w, b, n * sizeof(float)));
    R_CHECK(!memcmp(a, b, n * sizeof(float)), "%s: values differ from dt_view's", text);
    dt_tensor_release(v), dt_tensor_release(w);
    R_OK(dt_tensor_full_tensor(x, a, n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        R_CHECK(a[i] == (float)t_value(5, i), "%s: x[%zu] changed", text, i);
    dt_tensor_release(x);
    free(src), free(a), free(b);
    return DT_OK;
}

static dt_status borrow_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx);
    dt_mesh *line, *grid = NULL;
    R_OK(dt_mesh_create(ctx, 1, (int[]){n}, NULL, &line));
    dt_placement R = dt_replicate(), S0 = dt_shard(0), S1 = dt_shard(1), S2 = dt_shard(2),
                 P = dt_partial(DT_REDUCE_SUM);
    view_case line_cases[] = {
        {4, 6, 5, {R}, 1},       {4, 6, 5, {P}, 1},
        {4, 6, 5, {S2}, 1},      /* the kept dim, alone in its group */
        {4, 6, 5, {S0}, 1},      /* B even: whole rows of T stay together */
        {3, 6, 5, {S0}, n == 1}, /* B uneven: chunks of B T differ */
        {4, 6, 5, {S1}, 0},      /* T: not the group's leading dim */
        {4, 0, 5, {R}, 0},       /* nothing to borrow */
    };
    for (size_t i = 0; i < sizeof line_cases / sizeof line_cases[0]; i++)
        R_OK(view_case_run(line, &line_cases[i]));
    if (n == 4) {
        R_OK(dt_mesh_create(ctx, 2, (int[]){2, 2}, NULL, &grid));
        view_case grid_cases[] = {
            {4, 6, 5, {S0, S2}, 1}, /* FSDP x TP */
            {4, 6, 5, {S0, S0}, 1}, /* nested, 4 | B */
            {2, 6, 5, {S0, S0}, 0}, /* nested: each mesh dim divides B, their product not */
            {6, 4, 5, {S0, S0}, 0}, {4, 6, 5, {S0, S1}, 0}, {4, 6, 5, {P, R}, 1},
        };
        for (size_t i = 0; i < sizeof grid_cases / sizeof grid_cases[0]; i++)
            R_OK(view_case_run(grid, &grid_cases[i]));
        dt_mesh_release(grid);
    }
    dt_mesh_release(line);
    return DT_OK;
}

Test(view_borrowed, borrows_where_the_view_keeps_placements) {
    t_run(1, borrow_body, NULL);
    t_run(2, borrow_body, NULL);
    t_run(4, borrow_body, NULL);
}

/* With grad mode on an op could keep the view in its node past the caller: a copy then. */
static dt_status grad_mode_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){1}, NULL, &mesh));
    int64_t shape[3] = {2, 3, 4}, flat[2] = {6, 4};
    float src[24];
    t_fill(DT_F32, src, 24, 9);
    dt_placement r = dt_replicate();
    dt_tensor *x, *v;
    R_OK(dt_tensor_distribute(mesh, src, DT_F32, 3, shape, 1, &r, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_set_requires_grad(x, 1)); /* autograd's recorder is set from here on */
    R_OK(dt_view_borrowed(x, 2, flat, &v));
    R_CHECK(v->data != x->data && v->owned, "grad mode on: the view borrowed x's block");
    dt_tensor_release(v);
    R_OK(dt_no_grad_enter(ctx));
    R_OK(dt_view_borrowed(x, 2, flat, &v));
    R_OK(dt_no_grad_exit(ctx));
    R_CHECK(v->data == x->data && !v->owned, "grad mode off: the view copied");
    dt_tensor_release(v), dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(view_borrowed, copies_while_grad_mode_is_on) {
    t_run(1, grad_mode_body, NULL);
}

/* ---- linear's weight gradient ------------------------------------------------------------- */

enum { LB = 3, LT = 10, LIN = 40, LOUT = 24 };

typedef struct lin_arg {
    char trace[64]; /* where rank 0 writes the backward's trace ("" for none) */
} lin_arg;

/* y = linear(x (B, T, in), w (out, in)), backward from g: w's gradient against sum over (b, t)
 * of g x in f64, and bit-equal to mm(g2^T, x2) on copies made by dt_view. x is sharded on B
 * over the ranks (data parallel: B divides by 1 and 3 ranks) or replicated. */
static dt_status linear_body(dt_ctx *ctx, void *arg) {
    lin_arg *la = arg;
    dt_mesh *mesh;
    int n = dt_ctx_size(ctx);
    R_OK(dt_mesh_create(ctx, 1, (int[]){n}, NULL, &mesh));
    float xs[LB * LT * LIN], ws[LOUT * LIN], gs[LB * LT * LOUT], got[LOUT * LIN],
        want[LOUT * LIN]; /* each rank thread's own (19 KiB) */
    t_fill(DT_F32, xs, LB * LT * LIN, 1);
    t_fill(DT_F32, ws, LOUT * LIN, 2);
    t_fill(DT_F32, gs, LB * LT * LOUT, 3);
    int64_t xshape[3] = {LB, LT, LIN}, wshape[2] = {LOUT, LIN}, gshape[3] = {LB, LT, LOUT};
    dt_placement r = dt_replicate(), px = n > 1 ? dt_shard(0) : r;
    dt_tensor *x, *w, *g, *y;
    R_OK(dt_tensor_distribute(mesh, xs, DT_F32, 3, xshape, 1, &px, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, ws, DT_F32, 2, wshape, 1, &r, DT_ALL_RANKS, &w));
    R_OK(dt_tensor_distribute(mesh, gs, DT_F32, 3, gshape, 1, &px, DT_ALL_RANKS, &g));
    R_OK(dt_tensor_set_requires_grad(w, 1));
    R_OK(dt_linear(x, w, NULL, &y));
    if (la->trace[0] && dt_ctx_rank(ctx) == 0) R_OK(dt_trace_start(ctx));
    R_OK(dt_backward_with(y, g));
    if (la->trace[0] && dt_ctx_rank(ctx) == 0) {
        R_OK(dt_trace_stop(ctx));
        R_OK(dt_trace_write(ctx, la->trace));
    }
    dt_tensor *gw = dt_tensor_grad(w);
    R_CHECK(gw, "w has no gradient");
    R_OK(dt_tensor_full_tensor(gw, got, sizeof got));
    for (int o = 0; o < LOUT; o++)
        for (int i = 0; i < LIN; i++) {
            double s = 0, mag = 0;
            for (int bt = 0; bt < LB * LT; bt++) {
                double p = (double)gs[bt * LOUT + o] * (double)xs[bt * LIN + i];
                s += p, mag += fabs(p);
            }
            double tol = (LB * LT + 1) * 0x1p-24 * mag;
            R_CHECK(fabs(got[o * LIN + i] - s) <= tol, "gw[%d][%d] = %.9g, f64 %.9g (tol %.3g)", o,
                    i, got[o * LIN + i], s, tol);
        }
    /* the same product on explicit copies: the flattening must not change a bit */
    int64_t g2s[2] = {LB * LT, LOUT}, x2s[2] = {LB * LT, LIN};
    dt_tensor *g2, *x2, *p, *pr;
    R_OK(dt_no_grad_enter(ctx));
    R_OK(dt_view(g, 2, g2s, &g2));
    R_OK(dt_view(x, 2, x2s, &x2));
    R_CHECK(g2->data != g->data && x2->data != x->data, "dt_view made no copy");
    dt_op_args ta = {.trans_a = 1};
    R_OK(dt_op_call(DT_OP_MM, (dt_tensor *[]){g2, x2}, 2, &ta, &p));
    R_OK(dt_tensor_redistribute(p, 1, &r, &pr));
    R_OK(dt_no_grad_exit(ctx));
    R_OK(dt_tensor_full_tensor(pr, want, sizeof want));
    R_CHECK(!memcmp(got, want, sizeof got), "gw differs from mm on copied views");
    dt_tensor_release(g2), dt_tensor_release(x2), dt_tensor_release(p), dt_tensor_release(pr);
    dt_tensor_release(x), dt_tensor_release(w), dt_tensor_release(g), dt_tensor_release(y);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(view_borrowed, linear_weight_gradient_flattens_without_copies) {
    lin_arg la = {""};
    char *dir = t_tmpdir();
    snprintf(la.trace, sizeof la.trace, "%s/trace.json", dir);
    t_run(1, linear_body, &la);
    size_t len;
    char *json = t_slurp(la.trace, &len);
    t_rmtree(dir);
    /* the trace holds the backward's kernels: the product is there, no view ran */
    cr_assert(t_count(json, "\"name\":\"mm\",\"cat\":\"compute\"") >= 1, "no mm in the trace");
    cr_assert_eq(t_count(json, "\"name\":\"view\",\"cat\":\"compute\""), 0,
                 "backward ran a view kernel (a copy)");
    free(json);
    la.trace[0] = 0;
    t_run(3, linear_body, &la);
}

/* ---- views that take a block their input gives up -------------------------------------------- */

static int64_t live_bytes(dt_ctx *ctx) {
    dt_tensor_memory m;
    return dt_ctx_tensor_memory(ctx, &m) == DT_OK ? m.bytes : -1;
}

/* dt_view_consume takes x's block only when x has no other holder: with a second reference or
 * autograd state it copies and leaves x whole. The rank's live bytes count the block once
 * throughout, and fall back to where they were once both are released. */
static dt_status consume_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){dt_ctx_size(ctx)}, NULL, &mesh));
    int64_t shape[3] = {4, 3, 8}, flat[2] = {12, 8};
    float src[96], got[96];
    t_fill(DT_F32, src, 96, 4);
    dt_placement s0 = dt_shard(0);
    int64_t base = live_bytes(ctx);
    for (int holders = 0; holders < 3; holders++) { /* alone, retained, requiring grad */
        dt_tensor *x, *v;
        R_OK(dt_tensor_distribute(mesh, src, DT_F32, 3, shape, 1, &s0, DT_ALL_RANKS, &x));
        int64_t with_x = live_bytes(ctx);
        if (holders == 1) R_OK(dt_tensor_retain(x));
        if (holders == 2) R_OK(dt_tensor_set_requires_grad(x, 1));
        void *block = x->data;
        R_OK(dt_no_grad_enter(ctx));
        R_OK(dt_view_consume(x, 2, flat, &v));
        R_OK(dt_no_grad_exit(ctx));
        R_CHECK((v->data == block) == (holders == 0), "holders %d: took the block %d", holders,
                v->data == block);
        R_CHECK(holders == 0 ? !x->data && !x->owned : x->data == block && x->owned,
                "holders %d: x is left %p, owned %d", holders, x->data, x->owned);
        int64_t want = holders == 0 ? with_x : with_x + (with_x - base);
        R_CHECK(live_bytes(ctx) == want, "holders %d: %lld live bytes, want %lld", holders,
                (long long)live_bytes(ctx), (long long)want);
        R_OK(dt_tensor_full_tensor(v, got, sizeof got));
        for (int i = 0; i < 96; i++)
            R_CHECK(got[i] == src[i], "holders %d: element %d", holders, i);
        if (holders == 1) dt_tensor_release(x);
        dt_tensor_release(x), dt_tensor_release(v);
        R_CHECK(live_bytes(ctx) == base, "holders %d: %lld live bytes after, %lld before", holders,
                (long long)live_bytes(ctx), (long long)base);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(view_borrowed, consume_takes_a_block_only_from_its_sole_holder) {
    t_run(1, consume_body, NULL);
    t_run(2, consume_body, NULL);
}

/* view's backward hands the gradient's block on: x's gradient (of z = view(x) times 1) is g's
 * values, no view kernel runs in backward, and no bytes stay alive after. */
static dt_status view_grad_body(dt_ctx *ctx, void *arg) {
    const char *trace = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){1}, NULL, &mesh));
    int64_t shape[3] = {2, 5, 6}, flat[2] = {10, 6};
    float xs[60], gs[60], got[60];
    t_fill(DT_F32, xs, 60, 6);
    t_fill(DT_F32, gs, 60, 7);
    dt_placement r = dt_replicate();
    int64_t base = live_bytes(ctx);
    dt_tensor *x, *y, *z, *g;
    R_OK(dt_tensor_distribute(mesh, xs, DT_F32, 3, shape, 1, &r, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    R_OK(dt_view(x, 2, flat, &y));
    /* y's gradient is then a tensor of the engine's own (the seed g is the caller's too) */
    R_OK(dt_mul_scalar(y, 1.0, &z));
    R_OK(dt_tensor_distribute(mesh, gs, DT_F32, 2, flat, 1, &r, DT_ALL_RANKS, &g));
    R_OK(dt_trace_start(ctx));
    R_OK(dt_backward_with(z, g));
    R_OK(dt_trace_stop(ctx));
    R_OK(dt_trace_write(ctx, trace));
    R_CHECK(dt_tensor_grad(x), "x has no gradient");
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(x), got, sizeof got));
    R_CHECK(!memcmp(got, gs, sizeof got), "x's gradient is not g");
    dt_tensor_release(z), dt_tensor_release(y), dt_tensor_release(g), dt_tensor_release(x);
    R_CHECK(live_bytes(ctx) == base, "%lld live bytes after, %lld before",
            (long long)live_bytes(ctx), (long long)base);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(view_borrowed, view_backward_passes_the_gradient_block_on) {
    char *dir = t_tmpdir(), trace[128];
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    t_run(1, view_grad_body, trace);
    size_t len;
    char *json = t_slurp(trace, &len);
    t_rmtree(dir);
    cr_assert_eq(t_count(json, "\"name\":\"view\",\"cat\":\"compute\""), 0,
                 "backward ran a view kernel (a copy)");
    free(json);
}
