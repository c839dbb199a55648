/* Ops on DTensors: for every op, a matrix of input placements on 1-D and 2-D meshes (uneven
 * shapes included); the gathered result must equal the op on the full tensors computed on
 * one rank. Integer results exactly, floats within 1e-4 relative (f32) or 2e-2 (bf16).
 * Plus the collectives of known patterns (tensor-parallel MLP with and without sequence
 * parallelism) and the redistribute modes. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

typedef struct op_case {
    const char *name;
    dt_op op;
    dt_op_args args;
    int n;
    int nd[3];
    int64_t shape[3][4];
    dt_dtype dtype[3];
    int positive; /* inputs > 0 (log, sqrt, rsqrt, pow) */
    int64_t index_range; /* integer inputs in [0, range) */
} op_case;

#define F DT_F32
#define A(...) ((dt_op_args){__VA_ARGS__})
static const op_case cases[] = {
    {"add broadcast", DT_OP_ADD, A(0), 2, {2, 1}, {{7, 6}, {6}}, {F, F}},
    {"sub", DT_OP_SUB, A(0), 2, {2, 2}, {{5, 3}, {5, 3}}, {F, F}},
    {"mul bcast rows", DT_OP_MUL, A(0), 2, {2, 2}, {{6, 5}, {6, 1}}, {F, F}},
    {"div", DT_OP_DIV, A(0), 2, {2, 2}, {{4, 6}, {4, 6}}, {F, F}, 1},
    {"maximum", DT_OP_MAXIMUM, A(0), 2, {3, 3}, {{2, 3, 5}, {2, 3, 5}}, {F, F}},
    {"minimum i32", DT_OP_MINIMUM, A(0), 2, {2, 2}, {{5, 4}, {5, 4}}, {DT_I32, DT_I32}},
    {"add i64", DT_OP_ADD, A(0), 2, {1, 1}, {{9}, {9}}, {DT_I64, DT_I64}},
    {"exp", DT_OP_EXP, A(0), 1, {2}, {{5, 7}}, {F}},
    {"log", DT_OP_LOG, A(0), 1, {2}, {{6, 3}}, {F}, 1},
    {"rsqrt", DT_OP_RSQRT, A(0), 1, {1}, {{11}}, {F}, 1},
    {"gelu", DT_OP_GELU, A(0), 1, {3}, {{2, 5, 3}}, {F}},
    {"silu bf16", DT_OP_SILU, A(0), 1, {2}, {{6, 4}}, {DT_BF16}},
    {"tanh f64", DT_OP_TANH, A(0), 1, {2}, {{3, 5}}, {DT_F64}},
    {"sigmoid", DT_OP_SIGMOID, A(0), 1, {2}, {{4, 4}}, {F}},
    {"relu", DT_OP_RELU, A(0), 1, {2}, {{3, 12}}, {F}},
    {"neg", DT_OP_NEG, A(0), 1, {2}, {{5, 5}}, {F}},
    {"pow", DT_OP_POW_SCALAR, A(.scalar = 2), 1, {2}, {{5, 3}}, {F}, 1},
    {"mul_scalar", DT_OP_MUL_SCALAR, A(.scalar = -1.5), 1, {2}, {{7, 2}}, {F}},
    {"add_scalar", DT_OP_ADD_SCALAR, A(.scalar = 3), 1, {2}, {{4, 5}}, {F}},
    {"mm", DT_OP_MM, A(0), 2, {2, 2}, {{12, 8}, {8, 10}}, {F, F}},
    {"mm uneven", DT_OP_MM, A(0), 2, {2, 2}, {{5, 7}, {7, 3}}, {F, F}},
    {"mm bf16", DT_OP_MM, A(0), 2, {2, 2}, {{6, 4}, {4, 6}}, {DT_BF16, DT_BF16}},
    {"bmm", DT_OP_BMM, A(0), 2, {3, 3}, {{4, 6, 5}, {4, 5, 3}}, {F, F}},
    {"matmul bcast", DT_OP_MATMUL, A(0), 2, {3, 2}, {{3, 5, 4}, {4, 6}}, {F, F}},
    {"addmm", DT_OP_ADDMM, A(0), 3, {1, 2, 2}, {{4}, {12, 8}, {8, 4}}, {F, F, F}},
    {"linear", DT_OP_LINEAR, A(0), 3, {3, 2, 1}, {{2, 5, 8}, {6, 8}, {6}}, {F, F, F}},
    {"sum dim", DT_OP_SUM, A(.ndims = 1, .dims = {1}), 1, {3}, {{4, 6, 3}}, {F}},
    {"sum all i64", DT_OP_SUM, A(0), 1, {2}, {{7, 5}}, {DT_I64}},
    {"mean keepdim", DT_OP_MEAN, A(.ndims = 1, .dims = {0}, .keepdim = 1), 1, {2}, {{12, 5}}, {F}},
    {"mean uneven", DT_OP_MEAN, A(.ndims = 1, .dims = {0}), 1, {2}, {{13, 8}}, {F}},
    {"amax", DT_OP_AMAX, A(.ndims = 2, .dims = {0, 2}), 1, {3}, {{6, 4, 5}}, {F}},
    {"amin", DT_OP_AMIN, A(.ndims = 1, .dims = {-1}), 1, {2}, {{5, 9}}, {F}},
    {"max all", DT_OP_MAX, A(0), 1, {2}, {{5, 7}}, {F}},
    {"min dim i32", DT_OP_MIN, A(.ndims = 1, .dims = {0}), 1, {2}, {{9, 3}}, {DT_I32}},
    {"argmax", DT_OP_ARGMAX, A(.dim = 1), 1, {2}, {{6, 7}}, {F}},
    {"argmin", DT_OP_ARGMIN, A(.dim = 0, .keepdim = 1), 1, {2}, {{9, 4}}, {F}},
    {"var", DT_OP_VAR, A(.ndims = 1, .dims = {0}, .correction = 1), 1, {2}, {{9, 4}}, {F}},
    {"std", DT_OP_STD, A(.ndims = 1, .dims = {1}, .correction = 0), 1, {2}, {{4, 7}}, {F}},
    {"softmax", DT_OP_SOFTMAX, A(.dim = -1), 1, {3}, {{2, 3, 7}}, {F}},
    {"log_softmax", DT_OP_LOG_SOFTMAX, A(.dim = 0), 1, {2}, {{6, 5}}, {F}},
    {"layer_norm", DT_OP_LAYER_NORM, A(0), 3, {3, 1, 1}, {{4, 3, 8}, {8}, {8}}, {F, F, F}},
    {"rms_norm", DT_OP_RMS_NORM, A(0), 2, {2, 1}, {{5, 6}, {6}}, {F, F}},
    {"embedding", DT_OP_EMBEDDING, A(0), 2, {2, 2}, {{11, 6}, {3, 5}}, {F, DT_I64}, 0, 11},
    {"cross_entropy", DT_OP_CROSS_ENTROPY, A(.reduction_mean = 1), 2, {2, 1}, {{8, 10}, {8}},
     {F, DT_I64}, 0, 10},
    {"cross_entropy none", DT_OP_CROSS_ENTROPY, A(0), 2, {3, 2}, {{4, 7, 3}, {4, 3}},
     {F, DT_I32}, 0, 7},
    {"sdpa causal", DT_OP_SDPA, A(.causal = 1), 3, {4, 4, 4}, {{2, 4, 5, 8}, {2, 4, 5, 8},
     {2, 4, 5, 8}}, {F, F, F}},
    {"transpose", DT_OP_TRANSPOSE, A(.dim = 0, .dim2 = 2), 1, {3}, {{3, 4, 5}}, {F}},
    {"permute", DT_OP_PERMUTE, A(.ndims = 3, .dims = {2, 0, 1}), 1, {3}, {{4, 3, 6}}, {F}},
    {"view merge", DT_OP_VIEW, A(.shape_ndim = 1, .shape = {48}), 1, {2}, {{8, 6}}, {F}},
    {"view split", DT_OP_VIEW, A(.shape_ndim = 3, .shape = {2, -1, 6}), 1, {2}, {{8, 6}}, {F}},
    {"slice", DT_OP_SLICE, A(.dim = 1, .start = 3, .end = 7), 1, {2}, {{5, 9}}, {F}},
    {"unsqueeze", DT_OP_UNSQUEEZE, A(.dim = 1), 1, {2}, {{6, 4}}, {F}},
    {"squeeze", DT_OP_SQUEEZE, A(.dim = 1), 1, {3}, {{6, 1, 4}}, {F}},
    {"expand", DT_OP_EXPAND, A(.shape_ndim = 3, .shape = {3, 5, 4}), 1, {2}, {{5, 1}}, {F}},
    {"cat", DT_OP_CAT, A(.dim = 1), 2, {2, 2}, {{4, 3}, {4, 5}}, {F, F}},
    {"cat three", DT_OP_CAT, A(.dim = 0), 3, {2, 2, 2}, {{2, 3}, {1, 3}, {3, 3}}, {F, F, F}},
    {"where", DT_OP_WHERE, A(0), 3, {2, 2, 1}, {{5, 6}, {5, 6}, {6}}, {DT_I32, F, F}, 0, 2},
};
#define NCASES (sizeof cases / sizeof cases[0])

static size_t numel(const op_case *c, int i) {
    size_t n = 1;
    for (int d = 0; d < c->nd[i]; d++) n *= (size_t)c->shape[i][d];
    return n;
}

static void fill(const op_case *c, int i, void *buf) {
    size_t n = numel(c, i), es = dt_dtype_size(c->dtype[i]);
    for (size_t k = 0; k < n; k++) {
        double v = t_value((uint64_t)(i * 977 + 5), k);
        if (c->dtype[i] == DT_I32 || c->dtype[i] == DT_I64) {
            if (c->index_range) v = (double)((int64_t)(v + 16) % c->index_range);
        } else {
            v /= 8; /* |v| <= 2 keeps exp and friends tame */
            if (c->positive) v = fabs(v) + 0.25;
        }
        dt_convert_from_f64(c->dtype[i], &v, (char *)buf + k * es, 1);
    }
}

typedef struct run_arg {
    const op_case *c;
    const char *mesh;
    dt_placement pl[3][2];
    double *result; /* out: full result, as doubles */
    size_t result_n;
    int64_t result_shape[DT_MAX_NDIM];
    int result_nd;
} run_arg;

static dt_status op_body(dt_ctx *ctx, void *arg) {
    run_arg *r = arg;
    const op_case *c = r->c;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    dt_tensor *in[3] = {0}, *out = NULL;
    for (int i = 0; i < c->n; i++) {
        void *buf = malloc(numel(c, i) * 8 + 8);
        fill(c, i, buf);
        R_OK(dt_tensor_distribute(mesh, buf, c->dtype[i], c->nd[i], c->shape[i], r->pl[i],
                                  DT_ALL_RANKS, &in[i]));
        free(buf);
    }
    dt_status st = dt_op_call(c->op, in, c->n, &c->args, &out);
    if (st != DT_OK) {
        char p[3][64] = {"", "", ""};
        for (int i = 0; i < c->n; i++) dt_placements_format(r->pl[i], dt_mesh_ndim(mesh), p[i], 64);
        return t_fail(__FILE__, __LINE__, "%s on %s with %s | %s | %s: %s", c->name, r->mesh, p[0],
                      p[1], p[2], dt_last_error());
    }
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(out, &info));
    size_t es = dt_dtype_size(info.dtype);
    char *full = malloc(info.numel * es + 8);
    R_OK(dt_tensor_full(out, full, info.numel * es));
    if (dt_ctx_rank(ctx) == 0) {
        r->result_n = info.numel;
        r->result_nd = info.ndim;
        memcpy(r->result_shape, info.shape, sizeof info.shape);
        r->result = malloc(info.numel * sizeof(double) + 8);
        dt_convert_to_f64(info.dtype, full, r->result, info.numel);
    }
    free(full);
    for (int i = 0; i < c->n; i++) dt_tensor_release(in[i]);
    dt_tensor_release(out);
    dt_mesh_release(mesh);
    return DT_OK;
}

static double tolerance(const op_case *c) {
    if (c->dtype[0] == DT_BF16 || c->dtype[0] == DT_F16) return 3e-2;
    if (c->dtype[0] == DT_F64) return 1e-10;
    if (c->dtype[0] == DT_I32 || c->dtype[0] == DT_I64) return 0;
    return 2e-4;
}

/* Candidate placements for input i on one mesh dim: R, P(sum) and S(d) for every dim. */
static dt_placement option(int k) {
    if (k == 0) return dt_replicate();
    if (k == 1) return dt_partial(DT_REDUCE_SUM);
    return dt_shard(k - 2);
}

Test(ops, sharded_equals_unsharded) {
    static const char *const meshes[] = {"4", "3", "2x2"};
    int checked = 0;
    for (size_t ci = 0; ci < NCASES; ci++) {
        const op_case *c = &cases[ci];
        run_arg ref = {.c = c, .mesh = "1"};
        for (int i = 0; i < c->n; i++) ref.pl[i][0] = dt_replicate();
        t_run(1, op_body, &ref);
        uint64_t rng = ci * 7919 + 1;
        for (size_t mi = 0; mi < 3; mi++) {
            int mnd = meshes[mi][1] == 'x' ? 2 : 1, nranks = mnd == 2 ? 4 : meshes[mi][0] - '0';
            int combos = 1;
            for (int i = 0; i < c->n; i++)
                for (int m = 0; m < mnd; m++) combos *= c->nd[i] + 2;
            int tries = combos < 24 ? combos : 24;
            for (int t = 0; t < tries; t++) {
                run_arg r = {.c = c, .mesh = meshes[mi]};
                int code = combos <= 24 ? t : (int)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % combos;
                for (int i = 0; i < c->n; i++)
                    for (int m = 0; m < mnd; m++) {
                        int k = code % (c->nd[i] + 2);
                        code /= c->nd[i] + 2;
                        /* integer index inputs stay R/S: a P(sum) of indices is not an index */
                        if (k == 1 && c->index_range) k = 0;
                        r.pl[i][m] = option(k);
                    }
                t_run(nranks, op_body, &r);
                cr_assert_eq(r.result_n, ref.result_n, "%s: %zu elements, want %zu", c->name,
                             r.result_n, ref.result_n);
                double tol = tolerance(c);
                for (size_t k = 0; k < ref.result_n; k++) {
                    double want = ref.result[k], got = r.result[k];
                    cr_assert(fabs(got - want) <= tol * (1 + fabs(want)) ||
                                  (isnan(got) && isnan(want)),
                              "%s on mesh %s (try %d): element %zu is %g, want %g", c->name,
                              meshes[mi], t, k, got, want);
                }
                free(r.result);
                checked++;
            }
        }
        free(ref.result);
    }
    cr_log_info("%d sharded op runs equal their unsharded result", checked);
}

/* Collectives issued on this rank since the last reset, by kind. */
static uint64_t issued(dt_ctx *ctx, dt_coll_kind kind) {
    dt_comm_stats s;
    dt_comm_stats_get(ctx, &s);
    return s.calls[kind];
}

static uint64_t issued_total(dt_ctx *ctx) {
    dt_comm_stats s;
    dt_comm_stats_get(ctx, &s);
    uint64_t n = 0;
    for (int k = 0; k < DT_COLL_KIND_COUNT; k++) n += s.calls[k];
    return n;
}

/* Megatron MLP on a tp mesh of 4: x @ W1^T (column parallel), gelu, @ W2^T (row parallel).
 * Without sequence parallelism the forward issues exactly one all_reduce; with it (x and
 * the output sharded on the sequence dim) exactly one all_gather and one reduce_scatter. */
static dt_status mlp_body(dt_ctx *ctx, void *arg) {
    int sequence_parallel = *(int *)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=4", &mesh));
    int64_t xs[2] = {8, 16}, w1s[2] = {64, 16}, w2s[2] = {16, 64};
    float x[8 * 16], w1[64 * 16], w2[16 * 64], ref_h[8 * 64], ref_y[8 * 16], y[8 * 16];
    t_fill(DT_F32, x, 128, 1), t_fill(DT_F32, w1, 1024, 2), t_fill(DT_F32, w2, 1024, 3);
    for (int i = 0; i < 1024; i++) w1[i] /= 16, w2[i] /= 16;
    dt_placement col[1] = {dt_shard(0)}, row[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    dt_placement seq[1] = {dt_shard(0)};
    dt_tensor *tx, *tw1, *tw2, *h, *g, *o, *out;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, sequence_parallel ? seq : rep, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, w1, DT_F32, 2, w1s, col, DT_ALL_RANKS, &tw1));
    R_OK(dt_tensor_distribute(mesh, w2, DT_F32, 2, w2s, row, DT_ALL_RANKS, &tw2));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_linear(tx, tw1, NULL, &h));
    R_OK(dt_unary_op(DT_OP_GELU, h, &g));
    R_OK(dt_linear(g, tw2, NULL, &o));
    R_OK(dt_tensor_redistribute(o, sequence_parallel ? seq : rep, &out));
    if (sequence_parallel) {
        R_CHECK(issued(ctx, DT_COLL_ALL_GATHER) == 1 && issued(ctx, DT_COLL_REDUCE_SCATTER) == 1 &&
                    issued_total(ctx) == 2,
                "sequence-parallel MLP: %llu collectives (%llu all_gather, %llu reduce_scatter)",
                (unsigned long long)issued_total(ctx),
                (unsigned long long)issued(ctx, DT_COLL_ALL_GATHER),
                (unsigned long long)issued(ctx, DT_COLL_REDUCE_SCATTER));
    } else {
        R_CHECK(issued(ctx, DT_COLL_ALL_REDUCE) == 1 && issued_total(ctx) == 1,
                "tensor-parallel MLP: %llu collectives, %llu all_reduce",
                (unsigned long long)issued_total(ctx),
                (unsigned long long)issued(ctx, DT_COLL_ALL_REDUCE));
    }
    /* The reference, unsharded, in double. */
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 64; j++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)x[i * 16 + k] * w1[j * 16 + k];
            ref_h[i * 64 + j] = (float)(0.5 * s * (1 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s))));
        }
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 16; j++) {
            double s = 0;
            for (int k = 0; k < 64; k++) s += (double)ref_h[i * 64 + k] * w2[j * 64 + k];
            ref_y[i * 16 + j] = (float)s;
        }
    R_OK(dt_tensor_full(out, y, sizeof y));
    for (int i = 0; i < 128; i++)
        R_CHECK(fabsf(y[i] - ref_y[i]) <= 1e-3f * (1 + fabsf(ref_y[i])), "y[%d] = %g, want %g", i,
                y[i], ref_y[i]);
    dt_tensor *all[] = {tx, tw1, tw2, h, g, o, out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops, tensor_parallel_mlp_issues_one_all_reduce) {
    int sp = 0;
    t_run(4, mlp_body, &sp);
}

Test(ops, sequence_parallel_mlp_issues_one_all_gather_and_one_reduce_scatter) {
    int sp = 1;
    t_run(4, mlp_body, &sp);
}

/* Explicit mode refuses implicit redistribution, naming the op and input; log mode prints it
 * and goes on; in-place ops keep the tensor object. */
static dt_status modes_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int64_t s[2] = {8, 8};
    float x[64];
    t_fill(DT_F32, x, 64, 9);
    dt_placement s0[1] = {dt_shard(0)}, s1[1] = {dt_shard(1)};
    dt_tensor *a, *b, *c = NULL;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, s0, DT_ALL_RANKS, &a));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, s1, DT_ALL_RANKS, &b));
    R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_EXPLICIT));
    R_ERR(dt_add(a, b, &c), DT_ERR_PLACEMENT, "add: input");
    R_CHECK(c == NULL, "out written on failure");
    R_OK(dt_add(a, a, &c)); /* no redistribution needed: fine */
    dt_tensor_release(c);
    R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_LOG));
    R_OK(dt_add(a, b, &c));
    R_ERR(dt_ctx_set_redistribute_mode(ctx, (dt_redistribute_mode)7), DT_ERR_ARG, "mode");
    R_OK(dt_ctx_set_redistribute_mode(ctx, DT_REDISTRIBUTE_IMPLICIT));
    float back[64];
    R_OK(dt_tensor_full(c, back, sizeof back));
    for (int i = 0; i < 64; i++) R_CHECK(back[i] == 2 * x[i], "add element %d", i);
    /* in place */
    dt_tensor *keep = a;
    R_OK(dt_mul_(a, b));
    R_CHECK(a == keep, "in-place op replaced the object");
    R_OK(dt_tensor_full(a, back, sizeof back));
    for (int i = 0; i < 64; i++) R_CHECK(back[i] == x[i] * x[i], "mul_ element %d", i);
    /* errors */
    dt_tensor *m = NULL;
    int64_t bad[2] = {8, 3};
    dt_tensor *odd;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, bad, s0, &odd));
    R_ERR(dt_add(a, odd, &m), DT_ERR_SHAPE, "broadcast");
    R_ERR(dt_mm(odd, a, &m), DT_ERR_SHAPE, "contracted");
    R_ERR(dt_op_call((dt_op)999, &a, 1, NULL, &m), DT_ERR_ARG, "op");
    R_ERR(dt_op_call(DT_OP_ADD, &a, 1, NULL, &m), DT_ERR_ARG, "inputs");
    R_ERR(dt_add(a, NULL, &m), DT_ERR_ARG, "NULL");
    R_CHECK(m == NULL, "out written on failure");
    dt_tensor_release(odd);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(c);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops, redistribute_modes_in_place_and_errors) { t_run(4, modes_body, NULL); }

/* A user op registered with its rows: row_scale(x, s) = x * s[:, None], shardable along rows
 * (x and s sharded alike) and along columns (s replicated), linear in x. */
static dt_status row_scale_infer(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    if (in[0].ndim != 2 || in[1].ndim != 1 || in[1].shape[0] != in[0].shape[0])
        return dt_error_set(DT_ERR_SHAPE, "row_scale: x (R, C) and s (R) expected");
    *out = in[0];
    return DT_OK;
}

static dt_status row_scale_kernel(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n;
    (*(int *)user)++;
    const float *x = in[0].data, *s = in[1].data;
    float *o = out->data;
    for (int64_t i = 0; i < in[0].shape[0]; i++)
        for (int64_t j = 0; j < in[0].shape[1]; j++)
            o[i * in[0].shape[1] + j] = x[i * in[0].shape[1] + j] * s[i];
    return DT_OK;
}

static dt_op row_scale;
static int row_scale_calls;

static dt_status user_op_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int64_t xs[2] = {7, 5}, ss[1] = {7};
    float x[35], s[7], back[35];
    t_fill(DT_F32, x, 35, 4);
    t_fill(DT_F32, s, 7, 5);
    dt_placement s0[1] = {dt_shard(0)}, s1[1] = {dt_shard(1)}, r[1] = {dt_replicate()};
    dt_tensor *tx, *ts, *out, *tx1;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, s0, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, s, DT_F32, 1, ss, s0, DT_ALL_RANKS, &ts));
    dt_tensor *in[2] = {tx, ts};
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_op_call(row_scale, in, 2, NULL, &out));
    R_CHECK(issued_total(ctx) == 0, "row-sharded inputs need no communication");
    R_OK(dt_tensor_full(out, back, sizeof back));
    for (int i = 0; i < 35; i++) R_CHECK(back[i] == x[i] * s[i / 5], "element %d", i);
    dt_tensor_release(out);
    /* Column-sharded x: s must be replicated; R_CHECK the strategy, then run it. */
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, s1, DT_ALL_RANKS, &tx1));
    dt_tensor *in1[2] = {tx1, ts};
    dt_placement want[2], outp[1];
    R_OK(dt_op_strategy(row_scale, in1, 2, NULL, want, outp));
    R_CHECK(dt_placement_equal(want[0], s1[0]) && dt_placement_equal(want[1], r[0]) &&
                dt_placement_equal(outp[0], s1[0]),
            "column strategy not chosen");
    R_OK(dt_op_call(row_scale, in1, 2, NULL, &out));
    R_OK(dt_tensor_full(out, back, sizeof back));
    for (int i = 0; i < 35; i++) R_CHECK(back[i] == x[i] * s[i / 5], "element %d", i);
    R_CHECK(!strcmp(dt_op_name(row_scale), "row_scale"), "name %s", dt_op_name(row_scale));
    dt_tensor_release(out);
    dt_tensor_release(tx1);
    dt_tensor_release(tx);
    dt_tensor_release(ts);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops, registered_user_op) {
    static const dt_placement rows[][DT_OP_MAX_USER_INPUTS + 1] = {
        {{DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM},
         {DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM}},
        {{DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}, {DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM},
         {DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}},
        {{DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_SUM}, {DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM},
         {DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_SUM}},
    };
    dt_op_def def = {.name = "row_scale", .ninputs = 2, .rows = rows, .nrows = 3,
                     .infer = row_scale_infer, .kernel = row_scale_kernel,
                     .user = &row_scale_calls};
    cr_assert_eq(dt_op_register(&def, &row_scale), DT_OK, "%s", dt_last_error());
    cr_assert_geq(row_scale, DT_OP_COUNT);
    t_run(4, user_op_body, NULL);
    cr_assert_gt(row_scale_calls, 0);
    dt_op_def bad = def;
    bad.ninputs = 0;
    T_ERR(dt_op_register(&bad, &row_scale), DT_ERR_ARG, "ninputs");
    bad = def;
    bad.kernel = NULL;
    T_ERR(dt_op_register(&bad, &row_scale), DT_ERR_ARG, "kernel");
}

/* Loss parallel: with a large class dim sharded, cross_entropy keeps the logits where they
 * are and only reduces values per sample (the max, the sum of exponentials, the target
 * logit): no all_gather or all_to_all, a few bytes per sample. With a tiny class dim, moving
 * the logits is cheaper (see the propagation conformance rows). The loss equals the
 * unsharded one. */
static dt_status loss_parallel_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=4", &mesh));
    enum { N = 64, C = 16387 }; /* 4 MiB of logits: moving them costs more than 2 x 64 values */
    int64_t ls[2] = {N, C}, ts[1] = {N};
    float *x = malloc(sizeof(float) * N * C);
    int64_t t[N];
    for (int i = 0; i < N * C; i++) x[i] = (float)t_value(11, (size_t)i) / 4;
    for (int i = 0; i < N; i++) t[i] = (i * 977) % C;
    dt_placement cls[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    dt_tensor *lg, *lr, *tg, *loss, *ref;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, ls, cls, DT_ALL_RANKS, &lg));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, ls, rep, DT_ALL_RANKS, &lr));
    R_OK(dt_tensor_distribute(mesh, t, DT_I64, 1, ts, rep, DT_ALL_RANKS, &tg));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_cross_entropy(lg, tg, 1, &loss));
    dt_comm_stats st;
    R_OK(dt_comm_stats_get(ctx, &st));
    uint64_t moved = 0;
    for (int k = 0; k < DT_COLL_KIND_COUNT; k++) moved += st.bytes_in[k];
    R_CHECK(st.calls[DT_COLL_ALL_GATHER] == 0 && st.calls[DT_COLL_ALL_TO_ALL] == 0 &&
                st.calls[DT_COLL_ALL_REDUCE] >= 1 && moved <= 4 * N * sizeof(float),
            "loss parallel: %llu all_gather, %llu all_to_all, %llu bytes in",
            (unsigned long long)st.calls[DT_COLL_ALL_GATHER],
            (unsigned long long)st.calls[DT_COLL_ALL_TO_ALL], (unsigned long long)moved);
    R_OK(dt_cross_entropy(lr, tg, 1, &ref));
    float got, want;
    R_OK(dt_tensor_full(loss, &got, sizeof got));
    R_OK(dt_tensor_full(ref, &want, sizeof want));
    R_CHECK(fabsf(got - want) <= 1e-5f * (1 + fabsf(want)), "loss %g, unsharded %g", got, want);
    dt_tensor_release(lg), dt_tensor_release(lr), dt_tensor_release(tg);
    dt_tensor_release(loss), dt_tensor_release(ref);
    free(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops, cross_entropy_loss_parallel_keeps_logits_in_place) { t_run(4, loss_parallel_body, NULL); }
