/* MoE routing plans by hand (dtensor/moe.h): the capacity drops of both policies on a routing
 * written out here, bad input to the layer (status and message, nothing returned), and the
 * experts' grouped GEMM kernel against plain loops. The layer against a dense loop:
 * test_moe.c. */
#include <math.h>

#include "helpers.h"
#include "ops/kernels.h"

#define E 8
#define D 4
#define H 6

/* ---- the capacity, by hand ----------------------------------------------------------------- */

/* ep = 2, E = 4, k = 2, 4 tokens a rank, capacity_factor 0.5: C = ceil(0.5 * 8 / 4) = 1. */
static const int64_t cap_ids[16] = {0, 1, 0, 2, 1, 0, 0, 3, /* rank 0 */
                                    3, 2, 3, 2, 3, 2, 3, 2 /* rank 1 */};
static const double cap_gates[16] = {.6, .4, .7, .3, .5, .5, .7, .2,
                                     .9, .1, .9, .1, .9, .1, .9, .1};

static dt_status capacity_body(dt_ctx *ctx, void *p) {
    (void)p;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "ep=2", &mesh));
    int me = dt_mesh_coord(mesh, 0);
    int64_t s[2] = {8, 2};
    dt_placement pl = dt_shard(0);
    dt_tensor *ids, *gates;
    R_OK(dt_tensor_distribute(mesh, cap_ids, DT_I64, 2, s, 1, &pl, DT_ALL_RANKS, &ids));
    R_OK(dt_tensor_distribute(mesh, cap_gates, DT_F64, 2, s, 1, &pl, DT_ALL_RANKS, &gates));
    /* Rank 0, expert 0: assignments 0 (.6), 2 (.7), 5 (.5), 6 (.7): POSITION keeps 0, PROBS 2
     * (the earlier of the two .7); expert 1: 1 (.4), 4 (.5): POSITION keeps 1, PROBS 4; experts
     * 2 and 3 have one each. Rank 1: expert 2 keeps 1, expert 3 keeps 0 (equal gates). */
    static const int64_t order[2][2][4] = {{{0, 1, 3, 7}, {2, 4, 3, 7}}, {{1, 0}, {1, 0}}};
    static const int64_t sent[2][2] = {{2, 2}, {0, 2}}, recv[2][4] = {{1, 1, 0, 0}, {1, 1, 1, 1}};
    for (int policy = 0; policy < 2; policy++) {
        dt_moe_opts o = {.top_k = 2,
                         .capacity_factor = 0.5,
                         .drop = policy ? DT_MOE_DROP_PROBS : DT_MOE_DROP_POSITION};
        dt_moe_plan *plan;
        dt_moe_plan_info in;
        R_OK(dt_moe_plan_create(ids, gates, 4, 0, &o, &plan));
        R_OK(dt_moe_plan_info_get(plan, &in));
        int64_t nsend = me ? 2 : 4;
        R_CHECK(in.capacity == 1 && in.nsend == nsend && in.dropped == 8 - nsend,
                "policy %d: capacity %lld, %lld sent, %lld dropped", policy, (long long)in.capacity,
                (long long)in.nsend, (long long)in.dropped);
        for (int i = 0; i < nsend; i++)
            R_CHECK(in.send_order[i] == order[me][policy][i],
                    "policy %d: send row %d is %lld, "
                    "want %lld",
                    policy, i, (long long)in.send_order[i], (long long)order[me][policy][i]);
        for (int q = 0; q < 2; q++)
            R_CHECK(in.send_counts[q] == sent[me][q], "send_counts");
        for (int i = 0; i < 4; i++)
            R_CHECK(in.recv_per_expert[i] == recv[me][i], "recv %d", i);
        R_OK(dt_moe_plan_destroy(plan));
    }
    /* No capacity, or a large one: nothing dropped. */
    for (int i = 0; i < 2; i++) {
        dt_moe_opts o = {.top_k = 2, .capacity_factor = i ? 4.0 : 0.0};
        dt_moe_plan *plan;
        dt_moe_plan_info in;
        R_OK(dt_moe_plan_create(ids, i ? gates : NULL, 4, 0, &o, &plan));
        R_OK(dt_moe_plan_info_get(plan, &in));
        R_CHECK(in.dropped == 0 && in.nsend == 8 && in.capacity == (i ? 8 : -1),
                "capacity_factor %g: %lld dropped, capacity %lld", o.capacity_factor,
                (long long)in.dropped, (long long)in.capacity);
        R_OK(dt_moe_plan_destroy(plan));
    }
    dt_tensor_release(ids), dt_tensor_release(gates);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(moe, capacity_drops) {
    t_run(2, capacity_body, NULL);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static dt_status errors_body(dt_ctx *ctx, void *p) {
    (void)p;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "ep=4", &mesh));
    dt_placement s0 = dt_shard(0), r = dt_replicate();
    int64_t sx[2] = {8, D}, sr[2] = {E, D}, s13[3] = {E, D, H}, s2[3] = {E, H, D};
    int64_t sr6[2] = {6, D}, s6[3] = {6, D, H}, s62[3] = {6, H, D};
    dt_tensor *x, *xr, *rw, *rw32, *w1, *w2, *w3, *w1r, *rw6, *w16, *w26,
        *out = T_SENTINEL(dt_tensor *);
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, sx, 1, &s0, &x));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, sx, 1, &r, &xr));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, sr, 1, &r, &rw));
    R_OK(dt_tensor_ones(mesh, DT_F32, 2, sr, 1, &r, &rw32));
    R_OK(dt_tensor_ones(mesh, DT_F64, 3, s13, 1, &s0, &w1));
    R_OK(dt_tensor_ones(mesh, DT_F64, 3, s2, 1, &s0, &w2));
    R_OK(dt_tensor_ones(mesh, DT_F64, 3, s13, 1, &s0, &w3));
    R_OK(dt_tensor_ones(mesh, DT_F64, 3, s13, 1, &r, &w1r));
    R_OK(dt_tensor_ones(mesh, DT_F64, 2, sr6, 1, &r, &rw6));
    R_OK(dt_tensor_ones(mesh, DT_F64, 3, s6, 1, &s0, &w16));
    R_OK(dt_tensor_ones(mesh, DT_F64, 3, s62, 1, &s0, &w26));
    dt_moe_opts o = {.top_k = 0};
    R_ERR(dt_moe_forward(x, rw, w1, w2, w3, 0, &o, &out, NULL), DT_ERR_ARG, "opts->top_k = 0");
    o.top_k = 9;
    R_ERR(dt_moe_forward(x, rw, w1, w2, w3, 0, &o, &out, NULL), DT_ERR_ARG, "opts->top_k = 9");
    o.top_k = 2;
    R_ERR(dt_moe_forward(x, rw6, w16, w26, w16, 0, &o, &out, NULL), DT_ERR_ARG,
          "num_experts = 6 is not a positive multiple of the ep size 4");
    R_ERR(dt_moe_forward(x, rw32, w1, w2, w3, 0, &o, &out, NULL), DT_ERR_DTYPE, "router_w is f32");
    R_ERR(dt_moe_forward(x, rw, w1, w1, w3, 0, &o, &out, NULL), DT_ERR_SHAPE,
          "w2 has shape (8, 4, 6), want (8, 6, 4)");
    R_ERR(dt_moe_forward(x, rw, w1, w2, w3, 1, &o, &out, NULL), DT_ERR_ARG, "ep_dim = 1");
    R_ERR(dt_moe_forward(xr, rw, w1, w2, w3, 0, &o, &out, NULL), DT_ERR_PLACEMENT,
          "it must shard a token dim");
    R_ERR(dt_moe_forward(x, rw, w1r, w2, w3, 0, &o, &out, NULL), DT_ERR_PLACEMENT,
          "w1 must be Shard(0) on mesh dim 0 (ep)");
    o.capacity_factor = -1;
    R_ERR(dt_moe_forward(x, rw, w1, w2, w3, 0, &o, &out, NULL), DT_ERR_ARG, "capacity_factor = -1");
    R_CHECK(out == T_SENTINEL(dt_tensor *), "out set on failure");
    dt_tensor *all[] = {x, xr, rw, rw32, w1, w2, w3, w1r, rw6, w16, w26};
    for (int i = 0; i < 11; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(moe, bad_input) {
    t_run(4, errors_body, NULL);
}

/* ---- the grouped GEMM kernel ---------------------------------------------------------------- */

Test(moe, grouped_mm_equals_loops) {
    enum { G = 4, K = 3, N = 5, R = 9 };
    const int64_t rows[G] = {3, 0, 5, 1}; /* an empty group among them */
    double a[R * N], bb[R * N], b[G * N * N], c[G * N * N];
    for (int i = 0; i < R * N; i++)
        a[i] = sin(i + 1), bb[i] = cos(i * 3 + 2);
    for (int i = 0; i < G * N * N; i++)
        b[i] = cos(i * 0.7);
    for (int mode = 0; mode < 3; mode++) {
        for (int i = 0; i < G * N * N; i++)
            c[i] = 99; /* TN must overwrite an empty group's block with zeros */
        dt_cpu_grouped_mm((dt_grouped_mm)mode, G, rows, K, N, a, mode == 2 ? bb : b, c);
        for (int64_t g = 0, r0 = 0; g < G; r0 += rows[g++]) {
            int64_t ni = mode == 2 ? K : rows[g];
            for (int64_t i = 0; i < ni; i++)
                for (int64_t j = 0; j < N; j++) {
                    double want = 0, got;
                    if (mode == 0) /* rows of a @ b_g (K, N) */
                        for (int64_t k = 0; k < K; k++)
                            want += a[(r0 + i) * K + k] * b[g * K * N + k * N + j];
                    else if (mode == 1) /* rows of a @ b_g^T, b_g (N, K) */
                        for (int64_t k = 0; k < K; k++)
                            want += a[(r0 + i) * K + k] * b[g * N * K + j * K + k];
                    else /* (rows of a)^T @ rows of bb */
                        for (int64_t r = 0; r < rows[g]; r++)
                            want += a[(r0 + r) * K + i] * bb[(r0 + r) * N + j];
                    got = mode == 2 ? c[g * K * N + i * N + j] : c[(r0 + i) * N + j];
                    cr_assert(fabs(got - want) <= 1e-12,
                              "mode %d group %lld (%lld, %lld): %g, "
                              "want %g",
                              mode, (long long)g, (long long)i, (long long)j, got, want);
                }
        }
    }
}
