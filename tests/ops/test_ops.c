/* Ops on DTensors: for every op, a matrix of input placements on 1-D and 2-D meshes (uneven
 * shapes included); the gathered result must equal the op on the full tensors computed on
 * one rank. Integer results exactly, floats within 1e-4 relative (f32) or 2e-2 (bf16).
 * Plus the collectives of known patterns (tensor-parallel MLP with and without sequence
 * parallelism) and the redistribute modes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "op_cases.h"

Test(ops, sharded_equals_unsharded) {
    static const char *const meshes[] = {"4", "3", "2x2"};
    int checked = 0;
    for (size_t ci = 0; ci < op_ncases; ci++) {
        const op_case *c = &op_cases[ci];
        op_run ref = {.c = c, .mesh = "1"};
        for (int i = 0; i < c->n; i++) ref.pl[i][0] = dt_replicate();
        t_run(1, op_body, &ref);
        for (size_t mi = 0; mi < 3; mi++) {
            int tries = op_case_tries(c, meshes[mi]);
            for (int t = 0; t < tries; t++) {
                op_run r = {.c = c, .mesh = meshes[mi]};
                op_case_placements(c, ci, meshes[mi], t, r.pl);
                t_run(op_mesh_ranks(meshes[mi]), op_body, &r);
                char msg[256];
                cr_assert(op_result_matches(&ref, &r, msg, sizeof msg), "%s (try %d): %s", c->name,
                          t, msg);
                free(r.result);
                checked++;
            }
        }
        free(ref.result);
    }
    cr_log_info("%d sharded op runs equal their unsharded result", checked);
}

/* Dropout's mask depends on the global index only: every mesh and placement gives the one-rank
 * result bit for bit (and each run checks itself against dt_tensor_rand, op_cases.c). */
Test(ops, dropout_sharded_equals_one_rank_bit_for_bit) {
    static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16};
    static const struct {
        const char *mesh;
        dt_placement pl[2];
    } runs[] = {
        {"4", {{DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM}}},
        {"3", {{DT_PLACEMENT_SHARD, 2, DT_REDUCE_SUM}}},
        {"3", {{DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}}},
        {"2", {{DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM}}},
        {"2x2", {{DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM}}},
        {"2x2", {{DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}}},
        {"2x3",
         {{DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 2, DT_REDUCE_SUM}}},
    };
    for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++) {
        dropout_run ref = {.mesh = "1", .dtype = dtypes[di], .p = 0.375};
        t_run(1, dropout_body, &ref);
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
            dropout_run r = {.mesh = runs[i].mesh, .dtype = dtypes[di], .p = 0.375};
            memcpy(r.pl, runs[i].pl, sizeof r.pl);
            t_run(op_mesh_ranks(r.mesh), dropout_body, &r);
            cr_assert(r.bytes == ref.bytes && !memcmp(r.out, ref.out, ref.bytes),
                      "dropout %s on mesh %s (run %zu) differs from one rank",
                      dt_dtype_name(dtypes[di]), r.mesh, i);
            free(r.out);
        }
        free(ref.out);
    }
}

/* Grouped-query attention keeps heads sharded exactly when every rank holds whole groups:
 * Hq 6 over Hkv 3 on 3 ranks and Hq 8 over Hkv 2 on 2 do (no redistribution), 8 over 2 on 4
 * ranks does not (kv heads 1,1,0,0 against q heads 2,2,2,2). And the sharded results equal
 * one rank's on meshes 2 and 3. */
static dt_status gqa_strategy_body(dt_ctx *ctx, void *arg) {
    const int *want_heads = arg; /* [0]: Hq, [1]: Hkv, [2]: expect S(1) kept */
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, want_heads[3] == 3 ? "3" : want_heads[3] == 2 ? "2" : "4", &mesh));
    int64_t qs[4] = {2, want_heads[0], 4, 4}, ks[4] = {2, want_heads[1], 4, 4};
    dt_placement s1[1] = {dt_shard(1)}, ins[3], outp[1];
    dt_tensor *in[3];
    R_OK(dt_tensor_zeros(mesh, DT_F32, 4, qs, 1, s1, &in[0]));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 4, ks, 1, s1, &in[1]));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 4, ks, 1, s1, &in[2]));
    R_OK(dt_op_strategy(DT_OP_SDPA, in, 3, NULL, ins, outp));
    int kept = outp[0].kind == DT_PLACEMENT_SHARD && outp[0].dim == 1;
    for (int i = 0; i < 3; i++) kept &= ins[i].kind == DT_PLACEMENT_SHARD && ins[i].dim == 1;
    R_CHECK(kept == want_heads[2], "Hq %d, Hkv %d on %d ranks: heads %s", want_heads[0],
            want_heads[1], want_heads[3], kept ? "kept sharded" : "moved");
    for (int i = 0; i < 3; i++) dt_tensor_release(in[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* On a 2-D mesh the heads may be split by one mesh dim (tp; batch on the other): whole
 * groups when the kv heads line up over that dim alone; split by both (nested) only when the
 * kv heads divide evenly over all four ranks. */
static dt_status gqa_2d_body(dt_ctx *ctx, void *arg) {
    const char *const *c = arg; /* placements, Hq, Hkv, "kept" or "moved" */
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int64_t qs[4] = {2, atoi(c[1]), 4, 4}, ks[4] = {2, atoi(c[2]), 4, 4};
    dt_placement pl[2], ins[3][2], outp[2];
    int np;
    R_OK(dt_placements_parse(c[0], pl, 2, &np));
    dt_tensor *in[3];
    R_OK(dt_tensor_zeros(mesh, DT_F32, 4, qs, 2, pl, &in[0]));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 4, ks, 2, pl, &in[1]));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 4, ks, 2, pl, &in[2]));
    R_OK(dt_op_strategy(DT_OP_SDPA, in, 3, NULL, &ins[0][0], outp));
    int kept = 1;
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 2; m++) kept &= dt_placement_equal(ins[i][m], pl[m]);
    R_CHECK(kept == !strcmp(c[3], "kept"), "Hq %s, Hkv %s as %s on 2x2: %s, want %s", c[1], c[2],
            c[0], kept ? "kept" : "moved", c[3]);
    for (int i = 0; i < 3; i++) dt_tensor_release(in[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops, gqa_heads_shard_only_with_whole_groups) {
    static const char *const cases2d[][4] = {{"S(0),S(1)", "4", "2", "kept"},
                                             {"S(0),S(1)", "8", "2", "kept"},
                                             {"S(1),S(1)", "8", "2", "moved"},
                                             {"S(1),S(1)", "8", "4", "kept"},
                                             {"S(0),S(1)", "6", "3", "moved"}};
    for (size_t i = 0; i < sizeof cases2d / sizeof cases2d[0]; i++)
        t_run(4, gqa_2d_body, (void *)cases2d[i]);
    static const int cases[][4] = {{6, 3, 1, 3}, {8, 2, 1, 2}, {8, 2, 0, 4}, {8, 4, 0, 3},
                                   {6, 6, 1, 4}, {12, 6, 0, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        t_run(cases[i][3], gqa_strategy_body, (void *)cases[i]);
    static const char *const meshes[] = {"2", "3", "2x2"};
    for (size_t ci = 0; ci < op_ncases; ci++) {
        const op_case *c = &op_cases[ci];
        if (strncmp(c->name, "sdpa gqa", 8)) continue;
        op_run ref = {.c = c, .mesh = "1"};
        for (int i = 0; i < c->n; i++) ref.pl[i][0] = dt_replicate();
        t_run(1, op_body, &ref);
        for (size_t mi = 0; mi < 3; mi++)
            for (int t = 0; t < op_case_tries(c, meshes[mi]); t++) {
                op_run r = {.c = c, .mesh = meshes[mi]};
                op_case_placements(c, ci, meshes[mi], t, r.pl);
                t_run(op_mesh_ranks(meshes[mi]), op_body, &r);
                char msg[256];
                cr_assert(op_result_matches(&ref, &r, msg, sizeof msg), "%s: %s", c->name, msg);
                free(r.result);
            }
        free(ref.result);
    }
}

/* dt_rope_tables as torchtitan's precompute_freqs_cis (angle t * theta^(-2i/D)) and sharded
 * like any tensor; the shape errors of the model-code ops. */
static dt_status rope_tables_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "3", &mesh));
    const int64_t T = 7, D = 6, P = 3;
    dt_placement s0[1] = {dt_shard(0)}, r[1] = {dt_replicate()};
    dt_tensor *c, *s, *x, *y, *w, *bad;
    R_OK(dt_rope_tables(mesh, DT_F64, T, D, 10000.0, 1, s0, &c, &s));
    double cv[21], sv[21];
    R_OK(dt_tensor_full_tensor(c, cv, sizeof cv));
    R_OK(dt_tensor_full_tensor(s, sv, sizeof sv));
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < P; i++) {
            double a = (double)t * pow(10000.0, -2.0 * (double)i / (double)D);
            R_CHECK(fabs(cv[t * P + i] - cos(a)) < 1e-12 && fabs(sv[t * P + i] - sin(a)) < 1e-12,
                    "table (%lld, %lld): cos %g sin %g, want %g %g", (long long)t, (long long)i,
                    cv[t * P + i], sv[t * P + i], cos(a), sin(a));
        }
    /* rope with those tables on a sequence-sharded x against the rotation done here */
    int64_t xs[4] = {2, T, 2, D};
    double xv[2 * 7 * 2 * 6], yv[2 * 7 * 2 * 6];
    for (size_t k = 0; k < sizeof xv / sizeof xv[0]; k++) xv[k] = t_value(5, k);
    dt_placement s1[1] = {dt_shard(1)};
    R_OK(dt_tensor_distribute(mesh, xv, DT_F64, 4, xs, 1, s1, DT_ALL_RANKS, &x));
    R_OK(dt_rope(x, c, s, &y));
    R_OK(dt_tensor_full_tensor(y, yv, sizeof yv));
    for (size_t k = 0; k < sizeof xv / sizeof xv[0]; k += 2) {
        int64_t i = (int64_t)(k / 2 % (size_t)P), t = (int64_t)(k / (size_t)(2 * D) % (size_t)T);
        double cc = cv[t * P + i], ss = sv[t * P + i];
        R_CHECK(fabs(yv[k] - (xv[k] * cc - xv[k + 1] * ss)) < 1e-12 &&
                    fabs(yv[k + 1] - (xv[k] * ss + xv[k + 1] * cc)) < 1e-12,
                "rope pair %zu", k / 2);
    }
    /* errors: D odd, tables of the wrong length, layer_norm ndims against the weight */
    R_CHECK(dt_rope_tables(mesh, DT_F32, T, 5, 1e4, 1, r, &bad, &bad) == DT_ERR_SHAPE, "D 5");
    int64_t odd[4] = {2, T, 2, 5};
    dt_tensor *xo;
    R_OK(dt_tensor_zeros(mesh, DT_F64, 4, odd, 1, r, &xo));
    R_CHECK(dt_rope(xo, c, s, &bad) == DT_ERR_SHAPE, "rope with D odd");
    int64_t ws[2] = {2, D};
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, ws, 1, r, &w));
    dt_tensor *in[3] = {x, w, NULL};
    dt_op_args a = {.ndims = 1};
    R_CHECK(dt_op_call(DT_OP_LAYER_NORM, in, 2, &a, &bad) == DT_ERR_SHAPE,
            "layer_norm ndims 1 with a 2-D weight");
    a.ndims = 2;
    R_OK(dt_op_call(DT_OP_LAYER_NORM, in, 2, &a, &bad));
    dt_tensor_release(bad);
    dt_tensor *all[] = {c, s, x, y, xo, w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops, rope_tables_and_model_op_errors) {
    t_run(3, rope_tables_body, NULL);
}

Test(ops, tensor_parallel_mlp_issues_one_all_reduce) {
    mlp_run r = {.T = 8, .C = 16, .H = 64, .wscale = 16};
    t_run(4, mlp_body, &r);
}

Test(ops, sequence_parallel_mlp_issues_one_all_gather_and_one_reduce_scatter) {
    mlp_run r = {.sequence_parallel = 1, .T = 8, .C = 16, .H = 64, .wscale = 16};
    t_run(4, mlp_body, &r);
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
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &a));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, DT_COUNT_OF(s1), s1, DT_ALL_RANKS, &b));
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
    R_OK(dt_tensor_full_tensor(c, back, sizeof back));
    for (int i = 0; i < 64; i++) R_CHECK(back[i] == 2 * x[i], "add element %d", i);
    /* in place */
    dt_tensor *keep = a;
    R_OK(dt_mul_(a, b));
    R_CHECK(a == keep, "in-place op replaced the object");
    R_OK(dt_tensor_full_tensor(a, back, sizeof back));
    for (int i = 0; i < 64; i++) R_CHECK(back[i] == x[i] * x[i], "mul_ element %d", i);
    /* errors */
    dt_tensor *m = NULL;
    int64_t bad[2] = {8, 3};
    dt_tensor *odd;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, bad, DT_COUNT_OF(s0), s0, &odd));
    R_ERR(dt_add(a, odd, &m), DT_ERR_SHAPE, "broadcast");
    R_ERR(dt_mm(odd, a, &m), DT_ERR_SHAPE, "contracted");
    R_ERR(dt_op_call((dt_op)999, &a, 1, NULL, &m), DT_ERR_ARG, "op");
    R_ERR(dt_op_call(DT_OP_ADD, &a, 1, NULL, &m), DT_ERR_ARG, "inputs");
    R_ERR(dt_add(a, NULL, &m), DT_ERR_ARG, "NULL");
    /* operands given transposed: only the plain products take them, K checked after the swap */
    dt_tensor *pair[2] = {a, odd}, *vec;
    int64_t eight = 8;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, &eight, DT_COUNT_OF(s0), s0, &vec));
    dt_tensor *vpair[2] = {vec, a};
    R_ERR(dt_op_call(DT_OP_LINEAR, pair, 2, &(dt_op_args){.trans_a = 1}, &m), DT_ERR_ARG,
          "trans_a");
    R_ERR(dt_op_call(DT_OP_MM, pair, 2, &(dt_op_args){.trans_b = 1}, &m), DT_ERR_SHAPE,
          "contracted");
    R_ERR(dt_op_call(DT_OP_MATMUL, vpair, 2, &(dt_op_args){.trans_a = 1}, &m), DT_ERR_SHAPE,
          "transposed");
    R_CHECK(m == NULL, "out written on failure");
    dt_tensor_release(vec);
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
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, s, DT_F32, 1, ss, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &ts));
    dt_tensor *in[2] = {tx, ts};
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_op_call(row_scale, in, 2, NULL, &out));
    R_CHECK(t_issued_total(ctx) == 0, "row-sharded inputs need no communication");
    R_OK(dt_tensor_full_tensor(out, back, sizeof back));
    for (int i = 0; i < 35; i++) R_CHECK(back[i] == x[i] * s[i / 5], "element %d", i);
    dt_tensor_release(out);
    /* Column-sharded x: s must be replicated; R_CHECK the strategy, then run it. */
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, DT_COUNT_OF(s1), s1, DT_ALL_RANKS, &tx1));
    dt_tensor *in1[2] = {tx1, ts};
    dt_placement want[2], outp[1];
    R_OK(dt_op_strategy(row_scale, in1, 2, NULL, want, outp));
    R_CHECK(dt_placement_equal(want[0], s1[0]) && dt_placement_equal(want[1], r[0]) &&
                dt_placement_equal(outp[0], s1[0]),
            "column strategy not chosen");
    R_OK(dt_op_call(row_scale, in1, 2, NULL, &out));
    R_OK(dt_tensor_full_tensor(out, back, sizeof back));
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
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, ls, DT_COUNT_OF(cls), cls, DT_ALL_RANKS, &lg));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, ls, DT_COUNT_OF(rep), rep, DT_ALL_RANKS, &lr));
    R_OK(dt_tensor_distribute(mesh, t, DT_I64, 1, ts, DT_COUNT_OF(rep), rep, DT_ALL_RANKS, &tg));
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
    R_OK(dt_tensor_full_tensor(loss, &got, sizeof got));
    R_OK(dt_tensor_full_tensor(ref, &want, sizeof want));
    R_CHECK(fabsf(got - want) <= 1e-5f * (1 + fabsf(want)), "loss %g, unsharded %g", got, want);
    dt_tensor_release(lg), dt_tensor_release(lr), dt_tensor_release(tg);
    dt_tensor_release(loss), dt_tensor_release(ref);
    free(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops, cross_entropy_loss_parallel_keeps_logits_in_place) { t_run(4, loss_parallel_body, NULL); }
