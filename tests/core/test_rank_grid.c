/* The rank grid invariant on real local ranks: for every factorization world = dp x pp x cp x
 * tp x ep of 8 and of 16 ranks, the mesh "dp,pp,cp,tp,ep" gives each rank the row-major
 * coordinate of its world rank (ep fastest), and each dimension's group, and each pair of
 * dimensions' flattened group, holds exactly the ranks that differ from this one only there,
 * in coordinate order. Expected values are computed here from strides, and every group is
 * also exercised: an all_reduce of the members' world ranks must give the expected sum. A
 * shape whose product is not the world is refused. */
#include <stdlib.h>

#include "helpers.h"

#define NDIM 5
static const char *const names[NDIM] = {"dp", "pp", "cp", "tp", "ep"};

/* The next 5-tuple of positive sizes with product n after f (f[0] = 0 starts); 0 when done. */
static int next_factorization(int n, int *f) {
    for (;;) {
        int d = NDIM - 1;
        if (f[0] == 0) {
            for (int i = 0; i < NDIM; i++) f[i] = 1;
        } else {
            while (d >= 0 && f[d] == n) f[d--] = 1;
            if (d < 0) return 0;
            f[d]++;
        }
        long p = 1;
        for (int i = 0; i < NDIM; i++) p *= f[i];
        if (p == n) return 1;
    }
}

static dt_status check_grid(dt_ctx *ctx, const int *shape, int *ngroups) {
    int me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, NDIM, shape, names, &mesh));
    int stride[NDIM], coord[NDIM];
    for (int d = NDIM - 1, s = 1; d >= 0; d--) stride[d] = s, s *= shape[d];
    for (int d = 0; d < NDIM; d++) coord[d] = me / stride[d] % shape[d];
    R_CHECK(dt_mesh_rank(mesh) == me, "mesh rank %d on world rank %d", dt_mesh_rank(mesh), me);
    for (int d = 0; d < NDIM; d++)
        R_CHECK(dt_mesh_coord(mesh, d) == coord[d], "%dx%dx%dx%dx%d: rank %d's %s = %d, want %d",
                shape[0], shape[1], shape[2], shape[3], shape[4], me, names[d],
                dt_mesh_coord(mesh, d), coord[d]);
    /* Every single dim and every pair of dims, flattened row-major. */
    for (unsigned mask = 1; mask < (1u << NDIM); mask++) {
        if (__builtin_popcount(mask) > 2) continue;
        dt_comm *c;
        R_OK(dt_mesh_mask_comm(mesh, mask, &c));
        int size = 1, pos = 0;
        for (int d = 0; d < NDIM; d++)
            if (mask & (1u << d)) size *= shape[d], pos = pos * shape[d] + coord[d];
        R_CHECK(dt_comm_size(c) == size && dt_comm_rank(c) == pos,
                "mask 0x%x: group rank %d of %d, want %d of %d", mask, dt_comm_rank(c),
                dt_comm_size(c), pos, size);
        int64_t want_sum = 0;
        for (int i = 0; i < size; i++) { /* member i: this rank's coordinate with the dims of
                                            mask set from i, row-major */
            int r = me, rest = i;
            for (int d = NDIM - 1; d >= 0; d--) {
                if (!(mask & (1u << d))) continue;
                r += (rest % shape[d] - coord[d]) * stride[d];
                rest /= shape[d];
            }
            R_CHECK(r >= 0 && r < n && dt_comm_world_rank(c, i) == r,
                    "mask 0x%x: member %d is world rank %d, want %d", mask, i,
                    dt_comm_world_rank(c, i), r);
            want_sum += r;
        }
        int64_t mine = me, sum = -1;
        R_OK(dt_all_reduce(c, &mine, &sum, 1, DT_I64, DT_REDUCE_SUM));
        R_CHECK(sum == want_sum, "mask 0x%x: the members' world ranks sum to %lld, want %lld",
                mask, (long long)sum, (long long)want_sum);
        ++*ngroups;
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

static dt_status grid_body(dt_ctx *ctx, void *arg) {
    int *count = arg, n = dt_ctx_size(ctx), f[NDIM] = {0}, groups = 0, meshes = 0;
    while (next_factorization(n, f)) {
        R_OK(check_grid(ctx, f, &groups));
        meshes++;
    }
    int bad[NDIM] = {2, 2, 2, 2, 2};
    dt_mesh *m = T_SENTINEL(dt_mesh *);
    R_ERR(dt_mesh_create(ctx, NDIM, bad, names, &m), DT_ERR_MESH, "has 32 ranks but the world has");
    if (dt_ctx_rank(ctx) == 0) *count = meshes;
    return DT_OK;
}

/* Ordered factorizations of 2^k into 5 factors: C(k + 4, 4). */
Test(rank_grid, every_factorization_of_8) {
    int count = 0;
    t_run(8, grid_body, &count);
    cr_assert_eq(count, 35);
}

Test(rank_grid, every_factorization_of_16) {
    int count = 0;
    t_run(16, grid_body, &count);
    cr_assert_eq(count, 70);
}
