/* dt_topk's values and indices (one redistribution of x for both), one_hot's class-sharded
 * output from a replicated index, and the index errors every rank reports alike. The
 * sharded-vs-unsharded runs of the four ops are in op_cases.c. */
#include <string.h>

#include "helpers.h"

/* Indices of the 3 largest (smallest) of column j of x (12, 6): naive, ties to the lower row. */
static void naive_top3(const float *x, int j, int largest, int64_t *ix) {
    int used[12] = {0};
    for (int s = 0; s < 3; s++) {
        int best = -1;
        for (int i = 0; i < 12; i++) {
            if (used[i]) continue;
            float v = x[i * 6 + j], b = best < 0 ? 0 : x[best * 6 + j];
            if (best < 0 || (largest ? v > b : v < b)) best = i;
        }
        used[best] = 1;
        ix[s] = best;
    }
}

static dt_status topk_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int64_t shape[2] = {12, 6};
    float x[72], vals[18];
    int64_t idx[18];
    t_fill(DT_F32, x, 72, 9);
    x[7 * 6 + 2] = x[1 * 6 + 2]; /* a tie in column 2 */
    dt_placement s0[1] = {dt_shard(0)};
    dt_tensor *tx, *v, *ix;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, s0, DT_ALL_RANKS, &tx));
    for (int largest = 0; largest < 2; largest++) {
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_topk(tx, 3, 0, largest, &v, &ix));
        R_CHECK(t_issued_total(ctx) == 1, "topk issued %llu collectives, want 1 (x moved once)",
                (unsigned long long)t_issued_total(ctx));
        dt_tensor_info vi, ii;
        R_OK(dt_tensor_info_get(v, &vi));
        R_OK(dt_tensor_info_get(ix, &ii));
        R_CHECK(dt_placement_equal(vi.placements[0], ii.placements[0]) &&
                    vi.placements[0].kind == DT_PLACEMENT_SHARD && vi.placements[0].dim == 1,
                "values and indices should both be S(1)");
        R_CHECK(vi.shape[0] == 3 && vi.shape[1] == 6 && ii.dtype == DT_I64, "shapes");
        R_OK(dt_tensor_full_tensor(v, vals, sizeof vals));
        R_OK(dt_tensor_full_tensor(ix, idx, sizeof idx));
        for (int j = 0; j < 6; j++) {
            int64_t want[3];
            naive_top3(x, j, largest, want);
            for (int s = 0; s < 3; s++) {
                R_CHECK(idx[s * 6 + j] == want[s], "largest=%d column %d rank %d: index %lld, "
                        "want %lld", largest, j, s, (long long)idx[s * 6 + j],
                        (long long)want[s]);
                R_CHECK(vals[s * 6 + j] == x[want[s] * 6 + j], "value of column %d rank %d", j, s);
            }
        }
        dt_tensor_release(v), dt_tensor_release(ix);
    }
    R_ERR(dt_topk(tx, 13, 0, 1, &v, &ix), DT_ERR_ARG, "k = 13");
    dt_tensor_release(tx);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops_index, topk_values_and_indices_move_x_once) { t_run(4, topk_body, NULL); }

static dt_status one_hot_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "3", &mesh));
    int64_t shape[1] = {5}, ids[5] = {3, 0, 9, 3, 6}, back[50];
    dt_placement r[1] = {dt_replicate()}, s1[1] = {dt_shard(1)};
    dt_tensor *ti, *oh, *cls;
    R_OK(dt_tensor_distribute(mesh, ids, DT_I64, 1, shape, 1, r, DT_ALL_RANKS, &ti));
    R_OK(dt_one_hot(ti, 10, &oh));
    dt_tensor_info info; /* each rank writes its class range (10 over 3: 4, 4, 2) */
    R_OK(dt_tensor_info_get(oh, &info));
    R_CHECK(dt_placement_equal(info.placements[0], s1[0]), "one_hot of a whole index: S(1)");
    R_OK(dt_tensor_redistribute(oh, 1, s1, &cls));
    R_OK(dt_tensor_full_tensor(cls, back, sizeof back));
    for (int i = 0; i < 5; i++)
        for (int c = 0; c < 10; c++)
            R_CHECK(back[i * 10 + c] == (ids[i] == c), "one_hot[%d][%d] = %lld", i, c,
                    (long long)back[i * 10 + c]);
    dt_tensor_release(oh), dt_tensor_release(cls);
    R_ERR(dt_one_hot(ti, 0, &oh), DT_ERR_ARG, "num_classes = 0");
    /* a replicated index out of range fails on every rank */
    R_ERR(dt_one_hot(ti, 9, &oh), DT_ERR_ARG, "= 9 is outside [0, 9)");
    dt_tensor_release(ti);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops_index, one_hot_class_ranges_and_errors) { t_run(3, one_hot_body, NULL); }

/* x (6, 5) S(1) gathered along dim 1 with a replicated index: the masked gather (P(sum), no
 * communication); an index past the dim fails on every rank, not only the one it would hit. */
static dt_status gather_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int64_t xs[2] = {6, 5}, is[2] = {6, 2}, ix[12];
    float x[30], back[12];
    t_fill(DT_F32, x, 30, 3);
    for (int i = 0; i < 12; i++) ix[i] = (i * 3) % 5;
    dt_placement s1[1] = {dt_shard(1)}, r[1] = {dt_replicate()};
    dt_tensor *tx, *ti, *out;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, 1, s1, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, ix, DT_I64, 2, is, 1, r, DT_ALL_RANKS, &ti));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_gather(tx, 1, ti, &out));
    R_CHECK(t_issued_total(ctx) == 0, "the masked gather should not communicate");
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(out, &info));
    R_CHECK(info.placements[0].kind == DT_PLACEMENT_PARTIAL, "output should be P(sum)");
    R_OK(dt_tensor_full_tensor(out, back, sizeof back));
    for (int i = 0; i < 12; i++)
        R_CHECK(back[i] == x[(i / 2) * 5 + ix[i]], "gather element %d", i);
    dt_tensor_release(out), dt_tensor_release(ti);
    ix[11] = 5;
    R_OK(dt_tensor_distribute(mesh, ix, DT_I64, 2, is, 1, r, DT_ALL_RANKS, &ti));
    R_ERR(dt_gather(tx, 1, ti, &out), DT_ERR_ARG, "index[5,1] = 5 is outside [0, 5)");
    R_ERR(dt_gather(tx, 1, tx, &out), DT_ERR_DTYPE, "index must be i32 or i64, got f32");
    R_ERR(dt_gather(tx, 2, ti, &out), DT_ERR_ARG, "dim = 2 is out of range");
    R_ERR(dt_cumsum(tx, -3, &out), DT_ERR_ARG, "dim = -3 is out of range");
    R_ERR(dt_topk(NULL, 1, 0, 1, &out, &out), DT_ERR_ARG, "argument x is NULL");
    R_ERR(dt_topk(tx, 1, 0, 1, NULL, &out), DT_ERR_ARG, "values_out");
    dt_tensor_release(ti), dt_tensor_release(tx);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ops_index, masked_gather_and_every_rank_errors) { t_run(4, gather_body, NULL); }
