/* Gradients of every op with a backward rule, for every case of tests/common/op_cases.c in f64:
 * loss = sum(op(inputs) * w) for a fixed w. On one rank the autograd gradients must equal
 * central finite differences of the loss; on meshes 4, 3 and 2x2 (uneven shapes, placements
 * drawn as the ops suite draws them) the sharded gradients, gathered, must equal the
 * one-rank ones. Ops whose rule is pending are listed, not failed; ops without a derivative
 * are checked to say so. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "op_cases.h"

typedef struct grun {
    const op_case *c;
    const char *mesh;
    dt_placement pl[OP_CASE_MAX_IN][2];
    int fd_input, fd_elem; /* >= 0: input fd_input's element fd_elem moved by fd_step */
    double fd_step;
    /* out, on rank 0: */
    double loss;
    double *grad[OP_CASE_MAX_IN];
    dt_status backward_status;
    char why[256];
} grun;

static int is_float(dt_dtype t) { return t == DT_F32 || t == DT_F64 || t == DT_BF16 || t == DT_F16; }

/* Whether input i gets a gradient: float inputs, but where's condition (a selector, as torch's
 * bool condition: it gets none even when it is a float that requires grad). */
static int has_grad(const op_case *c, int i) {
    return is_float(c->dtype[i]) && !(c->op == DT_OP_WHERE && i == 0);
}

static size_t count(const op_case *c, int i) {
    size_t n = 1;
    for (int d = 0; d < c->nd[i]; d++) n *= (size_t)c->shape[i][d];
    return n;
}

/* The case's input i as the ops suite fills it, float inputs in f64. */
static void fill(const op_case *c, int i, void *buf) {
    for (size_t k = 0; k < count(c, i); k++) {
        double v = t_value((uint64_t)(i * 977 + 5), k);
        if (!is_float(c->dtype[i])) {
            int64_t id = c->index_range ? (int64_t)(v + 16) % c->index_range : (int64_t)v;
            dt_convert_from_f64(c->dtype[i], &(double){(double)id},
                                (char *)buf + k * dt_dtype_size(c->dtype[i]), 1);
            continue;
        }
        v /= 8;
        if (c->positive) v = fabs(v) + 0.25;
        ((double *)buf)[k] = v;
    }
}

static dt_dtype dtype_of(const op_case *c, int i) {
    return is_float(c->dtype[i]) ? DT_F64 : c->dtype[i];
}

static dt_status grad_body(dt_ctx *ctx, void *arg) {
    grun *r = arg;
    const op_case *c = r->c;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    dt_tensor *in[OP_CASE_MAX_IN] = {0}, *out = NULL, *w = NULL, *prod = NULL, *loss = NULL;
    for (int i = 0; i < c->n; i++) {
        double *buf = malloc(count(c, i) * 8 + 8);
        fill(c, i, buf);
        if (i == r->fd_input) buf[r->fd_elem] += r->fd_step;
        R_OK(dt_tensor_distribute(mesh, buf, dtype_of(c, i), c->nd[i], c->shape[i], mnd, r->pl[i],
                                  DT_ALL_RANKS, &in[i]));
        free(buf);
        if (is_float(c->dtype[i]) && r->fd_input < 0) R_OK(dt_tensor_set_requires_grad(in[i], 1));
    }
    R_OK(dt_op_call(c->op, in, c->n, &c->args, &out));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(out, &info));
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    double *wb = malloc(info.numel * 8 + 8);
    for (size_t k = 0; k < info.numel; k++) wb[k] = t_value(4242, k);
    R_OK(dt_tensor_distribute(mesh, wb, DT_F64, info.ndim, info.shape, mnd, rep, DT_ALL_RANKS, &w));
    free(wb);
    R_OK(dt_mul(out, w, &prod));
    R_OK(dt_sum(prod, NULL, 0, 0, &loss));
    R_OK(dt_tensor_full_tensor(loss, &r->loss, sizeof r->loss));
    r->backward_status = DT_OK;
    if (r->fd_input < 0) {
        dt_status st = dt_backward(loss);
        if (st != DT_OK) {
            r->backward_status = st;
            snprintf(r->why, sizeof r->why, "%s", dt_last_error());
        }
        for (int i = 0; i < c->n && st == DT_OK; i++) {
            if (!has_grad(c, i)) {
                R_CHECK(dt_tensor_grad(in[i]) == NULL, "%s: input %d got a gradient", c->name, i);
                continue;
            }
            dt_tensor *g = dt_tensor_grad(in[i]);
            R_CHECK(g != NULL, "%s: input %d got no gradient", c->name, i);
            double *full = malloc(count(c, i) * 8 + 8);
            R_OK(dt_tensor_full_tensor(g, full, count(c, i) * 8));
            if (dt_ctx_rank(ctx) == 0) r->grad[i] = full;
            else free(full);
        }
    }
    for (int i = 0; i < c->n; i++) dt_tensor_release(in[i]);
    dt_tensor_release(out), dt_tensor_release(w), dt_tensor_release(prod);
    dt_tensor_release(loss);
    dt_mesh_release(mesh);
    return DT_OK;
}

static void free_run(grun *r) {
    for (int i = 0; i < OP_CASE_MAX_IN; i++) free(r->grad[i]);
}

static int is_comparison(dt_op op) { return op >= DT_OP_EQ && op <= DT_OP_LE; }

/* Whether the case has a float input and a float output (ops with index outputs and the
 * comparisons have no derivative). */
static int differentiable(const op_case *c) {
    int any = 0;
    for (int i = 0; i < c->n; i++) any |= is_float(c->dtype[i]);
    return any && c->op != DT_OP_ARGMAX && c->op != DT_OP_ARGMIN && c->op != DT_OP_ONE_HOT &&
           c->op != DT_OP_TOPK && c->op != DT_OP_SDPA_BACKWARD &&
           c->op != DT_OP_SILU_MUL_BACKWARD && c->op != DT_OP_LOG_SOFTMAX_PICK_BACKWARD &&
           c->op != DT_OP_LAYER_NORM_BACKWARD && c->op != DT_OP_RMS_NORM_BACKWARD &&
           !is_comparison(c->op);
}

/* argmax of a tensor that needs a gradient, summed: the backward reaches argmax and says it
 * has no derivative, naming it. */
static dt_status argmax_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    dt_placement s0[1] = {dt_shard(0)};
    int64_t shape[2] = {4, 5};
    double buf[20];
    for (int k = 0; k < 20; k++) buf[k] = t_value(7, (size_t)k);
    dt_tensor *x, *idx, *s;
    R_OK(dt_tensor_distribute(mesh, buf, DT_F64, 2, shape, 1, s0, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    R_OK(dt_argmax(x, 1, 0, &idx));
    R_OK(dt_sum(idx, NULL, 0, 0, &s));
    R_ERR(dt_backward(s), DT_ERR_UNSUPPORTED, "argmax has no derivative");
    R_CHECK(dt_tensor_grad(x) == NULL, "x got a gradient through argmax");
    dt_tensor_release(s), dt_tensor_release(idx);
    /* every comparison likewise, named; a mask used as where's condition is no obstacle:
     * where(x > 0, x, 0) is differentiable (its gradient skips the condition's graph) */
    for (dt_op op = DT_OP_EQ; op <= DT_OP_LE; op++) {
        dt_tensor *in[2] = {x, x}, *m;
        R_OK(dt_op_call(op, in, 2, NULL, &m));
        R_OK(dt_sum(m, NULL, 0, 0, &s));
        R_ERR(dt_backward(s), DT_ERR_UNSUPPORTED, "no derivative");
        R_CHECK(strstr(dt_last_error(), dt_op_name(op)) && dt_tensor_grad(x) == NULL,
                "backward through %s: %s", dt_op_name(op), dt_last_error());
        dt_tensor_release(s), dt_tensor_release(m);
    }
    dt_tensor *zero, *y, *mask;
    R_OK(dt_tensor_zeros_like(x, &zero));
    R_OK(dt_gt(x, zero, &mask));
    R_OK(dt_where(mask, x, zero, &y));
    R_OK(dt_sum(y, NULL, 0, 0, &s));
    R_OK(dt_backward(s));
    double grad[20];
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(x), grad, sizeof grad));
    for (int k = 0; k < 20; k++)
        R_CHECK(grad[k] == (buf[k] > 0), "where(x > 0, x, 0): gradient [%d] of x = %g is %g", k,
                buf[k], grad[k]);
    dt_tensor_release(s), dt_tensor_release(y), dt_tensor_release(mask), dt_tensor_release(zero);
    dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd, ops_without_a_derivative_say_so) { t_run(2, argmax_body, NULL); }

/* Ties and kinks, which the finite-difference cases avoid, with x (2, 4) sharded on the dim
 * the reductions reduce: amax and the inf-norm split the gradient evenly among tied elements
 * (the inf-norm with x's sign), maximum halves it where the operands tie, abs and relu give 0
 * at 0 (as torch). */
static dt_status ties_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    static const double xv[8] = {1, 3, 3, 2, -4, 4, 0, 1}, yv[8] = {1, 0, 5, 2, 0, 4, 1, 1};
    static const double want[5][8] = {
        {0, .5, .5, 0, 0, 1, 0, 0},     /* sum(amax(x, dim 1)) */
        {0, .5, .5, 0, -.5, .5, 0, 0},  /* sum(vector_norm(x, inf, dim 1)) */
        {.5, 1, 0, .5, 0, .5, 0, .5},   /* sum(maximum(x, y)) */
        {1, 1, 1, 1, -1, 1, 0, 1},      /* sum(abs(x)) */
        {1, 1, 1, 1, 0, 1, 0, 1},       /* sum(relu(x)) */
    };
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    dt_placement s1[1] = {dt_shard(1)};
    int64_t shape[2] = {2, 4};
    int dim = 1;
    for (int k = 0; k < 5; k++) {
        dt_tensor *x, *y, *out = NULL, *s;
        R_OK(dt_tensor_distribute(mesh, xv, DT_F64, 2, shape, 1, s1, DT_ALL_RANKS, &x));
        R_OK(dt_tensor_distribute(mesh, yv, DT_F64, 2, shape, 1, s1, DT_ALL_RANKS, &y));
        R_OK(dt_tensor_set_requires_grad(x, 1));
        if (k == 0) R_OK(dt_amax(x, &dim, 1, 0, &out));
        if (k == 1) R_OK(dt_vector_norm(x, INFINITY, &dim, 1, 0, &out));
        if (k == 2) R_OK(dt_maximum(x, y, &out));
        if (k == 3) R_OK(dt_abs(x, &out));
        if (k == 4) R_OK(dt_relu(x, &out));
        R_OK(dt_sum(out, NULL, 0, 0, &s));
        R_OK(dt_backward(s));
        double g[8];
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(x), g, sizeof g));
        for (int i = 0; i < 8; i++)
            R_CHECK(g[i] == want[k][i], "case %d: gradient [%d] is %g, want %g", k, i, g[i],
                    want[k][i]);
        dt_tensor_release(s), dt_tensor_release(out), dt_tensor_release(y);
        dt_tensor_release(x);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd, ties_share_the_gradient_and_kinks_give_zero) { t_run(2, ties_body, NULL); }

Test(autograd, gradients_equal_finite_differences_and_one_rank) {
    static const char *const meshes[] = {"4", "3", "2x2"};
    int checked = 0, pending = 0;
    for (size_t ci = 0; ci < op_ncases; ci++) {
        const op_case *c = &op_cases[ci];
        if (!differentiable(c)) continue;
        grun ref = {.c = c, .mesh = "1", .fd_input = -1};
        for (int i = 0; i < c->n; i++) ref.pl[i][0] = dt_replicate();
        t_run(1, grad_body, &ref);
        if (ref.backward_status == DT_ERR_UNSUPPORTED) {
            cr_log_info("%s: %s", c->name, ref.why);
            pending++;
            continue;
        }
        cr_assert_eq(ref.backward_status, DT_OK, "%s: backward: %s", c->name, ref.why);
        /* one rank against central differences */
        for (int i = 0; i < c->n; i++) {
            if (!has_grad(c, i)) continue;
            for (size_t k = 0; k < count(c, i); k++) {
                const double h = 1e-5;
                grun up = {.c = c, .mesh = "1", .fd_input = i, .fd_elem = (int)k, .fd_step = h};
                grun dn = up;
                dn.fd_step = -h;
                for (int j = 0; j < c->n; j++) up.pl[j][0] = dn.pl[j][0] = dt_replicate();
                t_run(1, grad_body, &up);
                t_run(1, grad_body, &dn);
                double fd = (up.loss - dn.loss) / (2 * h), ad = ref.grad[i][k];
                cr_assert(fabs(fd - ad) <= 1e-5 * (1 + fabs(ad)),
                          "%s: d loss / d input %d [%zu]: autograd %.10g, central differences "
                          "%.10g", c->name, i, k, ad, fd);
            }
        }
        /* sharded against one rank */
        for (size_t mi = 0; mi < 3; mi++) {
            int tries = op_case_tries(c, meshes[mi]);
            for (int t = 0; t < tries && t < 6; t++) {
                grun r = {.c = c, .mesh = meshes[mi], .fd_input = -1};
                op_case_placements(c, ci, meshes[mi], t, r.pl);
                t_run(op_mesh_ranks(meshes[mi]), grad_body, &r);
                cr_assert_eq(r.backward_status, DT_OK, "%s on %s (try %d): backward: %s",
                             c->name, meshes[mi], t, r.why);
                for (int i = 0; i < c->n; i++) {
                    if (!has_grad(c, i)) continue;
                    for (size_t k = 0; k < count(c, i); k++)
                        cr_assert(fabs(r.grad[i][k] - ref.grad[i][k]) <=
                                      1e-9 * (1 + fabs(ref.grad[i][k])),
                                  "%s on %s (try %d): gradient of input %d [%zu] is %.12g, one "
                                  "rank gives %.12g", c->name, meshes[mi], t, i, k,
                                  r.grad[i][k], ref.grad[i][k]);
                }
                free_run(&r);
                checked++;
            }
        }
        free_run(&ref);
    }
    cr_log_info("%d sharded gradient runs equal one rank's; %d cases wait for a rule", checked,
                pending);
}

/* y = redistribute(x) then loss = sum(y * w): x's gradient is w, in x's placements, whether
 * the move is blocking or a request waited on (the node is recorded at the wait). */
static dt_status redistribute_body(dt_ctx *ctx, void *arg) {
    int async = *(int *)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int64_t shape[2] = {5, 6};
    double xb[30], wb[30], got[30];
    for (int k = 0; k < 30; k++) xb[k] = t_value(3, (size_t)k), wb[k] = t_value(9, (size_t)k);
    dt_placement src[2] = {dt_shard(0), dt_shard(1)}, dst[2] = {dt_replicate(), dt_shard(0)};
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    dt_tensor *x, *w, *y, *p, *loss;
    R_OK(dt_tensor_distribute(mesh, xb, DT_F64, 2, shape, 2, src, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, wb, DT_F64, 2, shape, 2, rep, DT_ALL_RANKS, &w));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    if (async) {
        dt_request *req;
        R_OK(dt_tensor_redistribute_async(x, 2, dst, &req));
        R_OK(dt_request_wait(req, &y));
    } else {
        R_OK(dt_tensor_redistribute(x, 2, dst, &y));
    }
    R_CHECK(dt_tensor_requires_grad(y), "the redistributed tensor does not require grad");
    R_OK(dt_mul(y, w, &p));
    R_OK(dt_sum(p, NULL, 0, 0, &loss));
    R_OK(dt_backward(loss));
    dt_tensor *g = dt_tensor_grad(x);
    R_CHECK(g != NULL, "x got no gradient");
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(g, &info));
    R_CHECK(dt_placement_equal(info.placements[0], src[0]) &&
                dt_placement_equal(info.placements[1], src[1]),
            "the gradient is not in x's placements");
    R_OK(dt_tensor_full_tensor(g, got, sizeof got));
    for (int k = 0; k < 30; k++) R_CHECK(got[k] == wb[k], "grad[%d] = %g, want %g", k, got[k], wb[k]);
    dt_tensor_release(loss), dt_tensor_release(p), dt_tensor_release(y);
    dt_tensor_release(w), dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd, redistribute_is_differentiable_blocking_and_async) {
    for (int async = 0; async < 2; async++) t_run(4, redistribute_body, &async);
}

/* A bf16 weight replicated over dp (batch sharded over dp) on 2x2: with its gradient dtype
 * f32 the gradient is f32, in the weight's placements, equal to x^T w summed in double (the
 * inputs are exact in bf16 and their products in f32), and the dp all_reduce moves f32 bytes;
 * by default the gradient is bf16 and the all_reduce moves half the bytes. */
typedef struct wide_run {
    int f32;
    uint64_t reduce_bytes;
    float grad[8 * 6];
} wide_run;

static dt_status wide_body(dt_ctx *ctx, void *arg) {
    wide_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int64_t xs[2] = {4, 6}, ws[2] = {8, 6}, ys[2] = {4, 8};
    double xb[24], wb[48], gb[32];
    for (int k = 0; k < 24; k++) xb[k] = (double)((k * 7) % 11 - 5) / 4;
    for (int k = 0; k < 48; k++) wb[k] = (double)((k * 5) % 9 - 4) / 8;
    for (int k = 0; k < 32; k++) gb[k] = (double)((k * 3) % 7 - 3) / 2;
    uint16_t xh[24], wh[48], gh[32];
    R_OK(dt_convert_from_f64(DT_BF16, xb, xh, 24));
    R_OK(dt_convert_from_f64(DT_BF16, wb, wh, 48));
    R_OK(dt_convert_from_f64(DT_BF16, gb, gh, 32));
    dt_placement xpl[2] = {dt_shard(0), dt_replicate()}, wpl[2] = {dt_replicate(), dt_shard(0)};
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    dt_tensor *x, *w, *g, *y, *p, *loss;
    R_OK(dt_tensor_distribute(mesh, xh, DT_BF16, 2, xs, 2, xpl, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, wh, DT_BF16, 2, ws, 2, wpl, DT_ALL_RANKS, &w));
    R_OK(dt_tensor_distribute(mesh, gh, DT_BF16, 2, ys, 2, rep, DT_ALL_RANKS, &g));
    R_OK(dt_tensor_set_requires_grad(w, 1));
    if (r->f32) R_OK(dt_tensor_set_grad_dtype(w, DT_F32));
    R_OK(dt_linear(x, w, NULL, &y));
    R_OK(dt_mul(y, g, &p));
    R_OK(dt_sum(p, NULL, 0, 0, &loss));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_backward(loss));
    dt_comm_stats s;
    R_OK(dt_comm_stats_get(ctx, &s));
    r->reduce_bytes = s.bytes_in[DT_COLL_ALL_REDUCE];
    dt_tensor *gw = dt_tensor_grad(w);
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(gw, &info));
    R_CHECK(info.dtype == (r->f32 ? DT_F32 : DT_BF16), "the gradient is %s",
            dt_dtype_name(info.dtype));
    R_CHECK(dt_placement_equal(info.placements[0], wpl[0]) &&
                dt_placement_equal(info.placements[1], wpl[1]),
            "the gradient is not in w's placements");
    double full[48];
    uint16_t half[48];
    if (r->f32) R_OK(dt_tensor_full_tensor(gw, r->grad, sizeof r->grad));
    else {
        R_OK(dt_tensor_full_tensor(gw, half, sizeof half));
        R_OK(dt_convert_to_f64(DT_BF16, half, full, 48));
        for (int k = 0; k < 48; k++) r->grad[k] = (float)full[k];
    }
    /* d loss / d w[o][i] = sum over rows b of g[b][o] x[b][i] */
    for (int o = 0; o < 8 && r->f32; o++)
        for (int i = 0; i < 6; i++) {
            double want = 0;
            for (int b = 0; b < 4; b++) want += gb[b * 8 + o] * xb[b * 6 + i];
            R_CHECK(r->grad[o * 6 + i] == (float)want, "grad w[%d][%d] = %g, want %g", o, i,
                    r->grad[o * 6 + i], want);
        }
    dt_tensor_release(loss), dt_tensor_release(p), dt_tensor_release(y);
    dt_tensor_release(g), dt_tensor_release(w), dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(autograd, bf16_weight_gradient_accumulates_and_reduces_in_f32) {
    wide_run narrow = {.f32 = 0}, wide = {.f32 = 1};
    t_run(4, wide_body, &narrow);
    t_run(4, wide_body, &wide);
    cr_assert(wide.reduce_bytes == 2 * narrow.reduce_bytes && narrow.reduce_bytes > 0,
              "the dp all_reduce moved %llu bytes in f32 and %llu in bf16",
              (unsigned long long)wide.reduce_bytes, (unsigned long long)narrow.reduce_bytes);
}
