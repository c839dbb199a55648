/* Cross-mesh plans without ranks (dt_xplan): the text dtensor-explain prints, and the
 * planner's invariant on random specs. The moves themselves run in test_xmesh.c. */
#include <stdlib.h>
#include <time.h>

#include "helpers.h"

/* The plan as text: 2x2 [S(0),S(0)] -> 4 [S(0)] over the same ranks keeps every block where it
 * is; a stage hand-off sends each box once; a Partial source is reduced first, here by a
 * reduce_scatter (each source rank then sends only the half its target keeps). */
Test(xplan, text) {
    dt_mesh_desc a = {.ndim = 2, .shape = {2, 2}}, b = {.ndim = 1, .shape = {4}};
    int r01[2] = {0, 1}, r23[2] = {2, 3};
    dt_mesh_desc c = {.ndim = 1, .shape = {2}, .ranks = r01}, d = {.ndim = 1, .shape = {2},
                                                                    .ranks = r23};
    dt_placement ss[2] = {dt_shard(0), dt_shard(0)}, s0 = dt_shard(0), s1 = dt_shard(1),
                 ps = dt_partial(DT_REDUCE_SUM);
    int64_t shape[2] = {8, 6};
    dt_xplan *p;
    char buf[4096];
    cr_assert_eq(dt_xplan_create(&a, &b, 2, shape, DT_F32, ss, &s0, NULL, &p), DT_OK, "%s",
                 dt_last_error());
    cr_assert_eq(dt_xplan_nmessages(p), 0);
    cr_assert_eq(dt_xplan_ntransfers(p), 4);
    cr_assert_eq(dt_xplan_format(p, NULL, NULL, buf, sizeof buf, NULL), DT_OK);
    cr_assert(strstr(buf, "rank 3 keeps") && strstr(buf, "[6:8,0:6]") &&
                  strstr(buf, "total: 0 messages"), "%s", buf);
    dt_xplan_destroy(p);
    int64_t s53[2] = {5, 3};
    cr_assert_eq(dt_xplan_create(&c, &d, 2, s53, DT_F32, &s0, &s1, NULL, &p), DT_OK);
    /* Target rank 2 holds columns 0:2, rank 3 column 2: two boxes each, one per source. */
    cr_assert_eq(dt_xplan_nmessages(p), 4);
    cr_assert_eq(dt_xplan_bytes(p), 5 * 3 * 4);
    cr_assert_eq(dt_xplan_format(p, (const char *[]){"tp"}, (const char *[]){"tp"}, buf,
                                 sizeof buf, NULL), DT_OK);
    cr_assert(strstr(buf, "tp=2 (ranks 0,1) S(0) -> tp=2 (ranks 2,3) S(1)") &&
                  strstr(buf, "rank 1 -> rank 3") && strstr(buf, "[3:5,2:3]"), "%s", buf);
    dt_xplan_destroy(p);
    cr_assert_eq(dt_xplan_create(&c, &d, 2, s53, DT_F32, &ps, &s0, NULL, &p), DT_OK);
    cr_assert(dt_xplan_before(p) != NULL && dt_xplan_after(p) == NULL);
    cr_assert_eq(dt_xplan_format(p, NULL, NULL, buf, sizeof buf, NULL), DT_OK);
    cr_assert(strstr(buf, "before, on the source mesh") && strstr(buf, "reduce_scatter"), "%s", buf);
    dt_xplan_destroy(p);
    int bad[2] = {1, 1};
    dt_mesh_desc dup = {.ndim = 1, .shape = {2}, .ranks = bad};
    T_ERR(dt_xplan_create(&c, &dup, 2, s53, DT_F32, &s0, &s0, NULL, &p), DT_ERR_ARG,
          "both world rank 1");
}

/* ---- the planner's invariant on random specs (no ranks) --------------------------------------
 * Meshes of 1 to 3 dims over random distinct ranks of an 8-rank world, tensors of 0 to 3
 * dims with extents 0 to 7 (uneven and empty shards), placements R, S(d) and P(sum): every
 * target rank that keeps a value receives each element of its block exactly once, every box
 * lies in its sender's block (after the plan before), and the totals add up. */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void random_mesh(uint64_t *s, dt_mesh_desc *m, int *ranks) {
    int n = 1 + (int)(rng_next(s) % 8), perm[8];
    m->ndim = 1 + (int)(rng_next(s) % 3);
    for (int d = 0; d < m->ndim; d++) m->shape[d] = 1;
    for (int left = n, d = 0; d < m->ndim; d++) { /* a factorization of some size <= 8 */
        int f = 1 + (int)(rng_next(s) % (unsigned)left);
        m->shape[d] = f, left = left / f ? left / f : 1;
    }
    for (int i = 0; i < 8; i++) perm[i] = i;
    for (int i = 7; i > 0; i--) {
        int j = (int)(rng_next(s) % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int total = 1;
    for (int d = 0; d < m->ndim; d++) total *= m->shape[d];
    memcpy(ranks, perm, sizeof(int) * (size_t)total);
    m->ranks = ranks;
}

static void random_placements(uint64_t *s, int mnd, int ndim, dt_placement *p) {
    for (int m = 0; m < mnd; m++) {
        unsigned r = (unsigned)(rng_next(s) % 4);
        p[m] = r == 0 || ndim == 0 ? dt_replicate() : r == 3 ? dt_partial(DT_REDUCE_SUM)
                                                             : dt_shard((int)(rng_next(s) % (unsigned)ndim));
    }
}

static void mesh_coord(const dt_mesh_desc *m, int r, int *c) {
    for (int d = m->ndim - 1; d >= 0; d--) c[d] = r % m->shape[d], r /= m->shape[d];
}

static int mesh_index(const dt_mesh_desc *m, int world) {
    int n = 1;
    for (int d = 0; d < m->ndim; d++) n *= m->shape[d];
    for (int r = 0; r < n; r++)
        if (m->ranks[r] == world) return r;
    return -1;
}

Test(xplan, property) {
    const char *env = getenv("DT_PROPERTY_SEED"); /* replays a printed seed */
    uint64_t seed = env ? strtoull(env, NULL, 10) : 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
    uint64_t s = seed ? seed : 1;
    fprintf(stderr, "xplan property seed %llu (DT_PROPERTY_SEED replays it)\n",
            (unsigned long long)seed);
    for (int trial = 0; trial < 2000; trial++) {
        dt_mesh_desc S, D;
        int sr[8], dr[8];
        random_mesh(&s, &S, sr);
        random_mesh(&s, &D, dr);
        int ndim = (int)(rng_next(&s) % 4);
        int64_t shape[3];
        for (int d = 0; d < ndim; d++) shape[d] = (int64_t)(rng_next(&s) % 8);
        dt_placement sp[3], dp[3], mid[3], dmid[3];
        random_placements(&s, S.ndim, ndim, sp);
        random_placements(&s, D.ndim, ndim, dp);
        dt_xplan *p;
        cr_assert_eq(dt_xplan_create(&S, &D, ndim, shape, DT_F32, sp, dp, NULL, &p), DT_OK,
                     "seed %llu trial %d: %s", (unsigned long long)seed, trial, dt_last_error());
        memcpy(mid, sp, sizeof sp);
        const dt_plan *before = dt_xplan_before(p);
        if (before) {
            dt_plan_step last;
            cr_assert_eq(dt_plan_step_get(before, dt_plan_nsteps(before) - 1, &last), DT_OK);
            memcpy(mid, last.after, sizeof(dt_placement) * (size_t)S.ndim);
        }
        for (int m = 0; m < D.ndim; m++)
            dmid[m] = dp[m].kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : dp[m];
        int nd = 1, nmsg = 0;
        size_t bytes = 0;
        for (int d = 0; d < D.ndim; d++) nd *= D.shape[d];
        for (int j = 0; j < nd; j++) {
            int c[DT_MESH_MAX_NDIM], keeps = 1;
            int64_t ext[3] = {0}, off[3] = {0};
            mesh_coord(&D, j, c);
            for (int m = 0; m < D.ndim; m++)
                keeps &= !(dp[m].kind == DT_PLACEMENT_PARTIAL && c[m] != 0);
            cr_assert_eq(dt_shard_layout(D.ndim, D.shape, c, ndim, shape, dmid, ext, off), DT_OK);
            size_t numel = 1;
            for (int d = 0; d < ndim; d++) numel *= (size_t)ext[d];
            unsigned char *cover = calloc(numel + 1, 1);
            for (int i = 0; i < dt_xplan_ntransfers(p); i++) {
                dt_transfer t;
                cr_assert_eq(dt_xplan_transfer_get(p, i, &t), DT_OK);
                if (t.to != D.ranks[j]) continue;
                cr_assert(keeps, "seed %llu trial %d: rank %d gets data it zeroes",
                          (unsigned long long)seed, trial, t.to);
                /* The box lies in the sender's block (after the plan before). */
                int si = mesh_index(&S, t.from), sc[DT_MESH_MAX_NDIM];
                int64_t sext[3] = {0}, soff[3] = {0};
                cr_assert(si >= 0, "seed %llu trial %d: sender %d is not in the source mesh",
                          (unsigned long long)seed, trial, t.from);
                mesh_coord(&S, si, sc);
                cr_assert_eq(dt_shard_layout(S.ndim, S.shape, sc, ndim, shape, mid, sext, soff),
                             DT_OK);
                size_t n = 1;
                for (int d = 0; d < ndim; d++) {
                    cr_assert(t.off[d] >= soff[d] && t.off[d] + t.ext[d] <= soff[d] + sext[d] &&
                                  t.off[d] >= off[d] && t.off[d] + t.ext[d] <= off[d] + ext[d],
                              "seed %llu trial %d: a box outside its blocks",
                              (unsigned long long)seed, trial);
                    n *= (size_t)t.ext[d];
                }
                cr_assert_eq(t.bytes, n * 4);
                if (t.from != t.to) nmsg++, bytes += t.bytes;
                for (size_t e = 0; e < n; e++) { /* mark the box's elements in the block */
                    size_t rest = e, idx = 0;
                    int64_t at[3];
                    for (int d = ndim - 1; d >= 0; d--) at[d] = (int64_t)(rest % (size_t)t.ext[d]), rest /= (size_t)t.ext[d];
                    for (int d = 0; d < ndim; d++) idx = idx * (size_t)ext[d] + (size_t)(t.off[d] - off[d] + at[d]);
                    cover[idx]++;
                }
            }
            for (size_t e = 0; keeps && e < numel; e++)
                cr_assert_eq(cover[e], 1, "seed %llu trial %d: target rank %d gets element %zu "
                                          "%d times", (unsigned long long)seed, trial, D.ranks[j],
                             e, cover[e]);
            free(cover);
        }
        cr_assert_eq(dt_xplan_nmessages(p), nmsg);
        cr_assert_eq(dt_xplan_bytes(p), bytes);
        dt_xplan_destroy(p);
    }
}

