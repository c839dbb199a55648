/* Random redistributions (see property_cases.h). */
#include <inttypes.h>
#include <stdlib.h>

#include "property_cases.h"

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r) {
    r->s += 0x9e3779b97f4a7c15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int below(rng *r, int n) { return (int)(next(r) % (uint64_t)n); }

static dt_placement random_placement(rng *r, int ndim) {
    int k = below(r, 20);
    if (k < 6) return dt_replicate();
    if (k < 15) return dt_shard(below(r, ndim) - (below(r, 4) == 0 ? ndim : 0));
    static const dt_reduce_op ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX, DT_REDUCE_MIN};
    return dt_partial(ops[below(r, 4)]);
}

/* Largest magnitude whose sums over 8 ranks stay exact in the dtype. */
static int64_t exact_bound(dt_dtype dt) {
    switch (dt) {
    case DT_BF16: return 256 / 8;
    case DT_F16: return 2048 / 8;
    default: return 1 << 20;
    }
}

dt_status property_body(dt_ctx *ctx, void *arg) {
    sweep *s = arg;
    rng r = {s->seed}; /* every rank draws the same cases */
    dt_mesh *mesh;
    if (s->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    R_OK(dt_mesh_create_str(ctx, s->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh), mult = 1;
    for (int m = 0; m < mnd; m++) mult *= dt_mesh_dim_size(mesh, m);
    for (int c = 0; c < s->cases; c++) {
        int nd = 1 + below(&r, 4);
        int64_t shape[4];
        size_t n = 1;
        for (int d = 0; d < nd; d++) n *= (size_t)(shape[d] = below(&r, nd > 2 ? 7 : 14));
        dt_dtype dt = (dt_dtype)below(&r, T_NUMERIC_DTYPES);
        dt_placement src[3], dst[3];
        for (int m = 0; m < mnd; m++) src[m] = random_placement(&r, nd);
        for (int m = 0; m < mnd; m++) dst[m] = random_placement(&r, nd);
        /* Multiples of every mesh size, so P(avg) <-> P(sum) scaling stays exact. */
        int64_t bound = exact_bound(dt) / mult;
        size_t es = dt_dtype_size(dt);
        char *x = malloc(n * es + 8), *back = malloc(n * es + 8);
        for (size_t i = 0; i < n; i++) {
            double v = (double)((int64_t)(next(&r) % (uint64_t)(2 * bound + 1)) - bound) * mult;
            dt_convert_from_f64(dt, &v, x + i * es, 1);
        }
        char ps[64], pd[64];
        dt_placements_format(src, mnd, ps, sizeof ps);
        dt_placements_format(dst, mnd, pd, sizeof pd);
        dt_tensor *t, *u, *want = NULL;
        R_OK(dt_tensor_distribute(mesh, x, dt, nd, shape, mnd, src, DT_ALL_RANKS, &t));
        dt_status st = dt_tensor_redistribute(t, mnd, dst, &u);
        R_CHECK(st == DT_OK, "seed %" PRIu64 " case %d: %s -> %s failed: %s", s->seed, c, ps, pd,
                dt_last_error());
        R_OK(dt_tensor_full_tensor(u, back, n * es));
        R_CHECK(n == 0 || memcmp(back, x, n * es) == 0,
                "seed %" PRIu64 " case %d mesh %s %s shape %d-D %s -> %s: full tensor differs",
                s->seed, c, s->mesh, dt_dtype_name(dt), nd, ps, pd);
        int partial = 0;
        for (int m = 0; m < mnd; m++) partial |= dst[m].kind == DT_PLACEMENT_PARTIAL;
        if (!partial) {
            R_OK(dt_tensor_distribute(mesh, x, dt, nd, shape, mnd, dst, DT_ALL_RANKS, &want));
            dt_tensor_info a, b;
            dt_tensor_info_get(u, &a);
            dt_tensor_info_get(want, &b);
            /* the shards may live on a GPU: compare host copies */
            R_CHECK(a.local_numel == b.local_numel, "rank %d: shard sizes differ",
                    dt_ctx_rank(ctx));
            R_OK(dt_tensor_local_to_host(u, x, n * es));
            R_OK(dt_tensor_local_to_host(want, back, n * es));
            R_CHECK(a.local_numel == 0 || memcmp(x, back, a.local_bytes) == 0,
                    "seed %" PRIu64 " case %d mesh %s %s -> %s: rank %d's shard differs", s->seed,
                    c, s->mesh, ps, pd, dt_ctx_rank(ctx));
        }
        dt_tensor_release(want);
        dt_tensor_release(u);
        dt_tensor_release(t);
        free(x);
        free(back);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

