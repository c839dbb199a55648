/* Ops on DTensors: for every op, a matrix of input placements on 1-D and 2-D meshes (uneven
 * shapes included); the gathered result must equal the op on the full tensors computed on
 * one rank. Integer results exactly, floats within 1e-4 relative (f32) or 2e-2 (bf16).
 * Plus the collectives of known patterns (tensor-parallel MLP with and without sequence
 * parallelism) and the redistribute modes. */
#include <math.h>
#include <stdlib.h>

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
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, bad, DT_COUNT_OF(s0), s0, &odd));
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
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, s, DT_F32, 1, ss, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &ts));
    dt_tensor *in[2] = {tx, ts};
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_op_call(row_scale, in, 2, NULL, &out));
    R_CHECK(t_issued_total(ctx) == 0, "row-sharded inputs need no communication");
    R_OK(dt_tensor_full(out, back, sizeof back));
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
