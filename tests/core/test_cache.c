/* The bounded strategy and plan caches: many sequence lengths keep each cache within its
 * capacity while results still equal the unsharded computation; evictions, hits and misses
 * are counted per mesh and in the rank's totals (and printed in the summary); a plan borrowed
 * from the cache and retained, or held by a pending async redistribute, outlives its
 * eviction; CLOCK keeps recently hit entries. */
#include <stdlib.h>

#include "core/lru.h"
#include "helpers.h"
#include "redistribute/redistribute_impl.h"

static dt_cache_stats cstats(dt_mesh *mesh, dt_cache_kind kind) {
    dt_cache_stats s = {0};
    dt_mesh_cache_stats(mesh, kind, &s);
    return s;
}

#define R_COUNTS(s, h, m, e, n)                                                                    \
    R_CHECK((s).hits == (h) && (s).misses == (m) && (s).evictions == (e) && (s).entries == (n),    \
            "expected %d hits, %d misses, %d evictions, %d entries; got %llu, %llu, %llu, %llu",   \
            (h), (m), (e), (n), (unsigned long long)(s).hits, (unsigned long long)(s).misses,      \
            (unsigned long long)(s).evictions, (unsigned long long)(s).entries)

/* ---- ops over many sequence lengths ------------------------------------------------------ */

enum { C = 8, H = 6, NSEQ = 24, STRATEGY_CAP = 4, PLAN_CAP = 6 };

/* y = x @ w for x (T, C) [S(0), S(1)] and w (C, H) [R, S(0)], gathered through a
 * redistribute to [R, R], against the product computed here. */
static dt_status mm_once(dt_mesh *mesh, int T) {
    float x[NSEQ * C], w[C * H], y[NSEQ * H];
    t_fill(DT_F32, x, (size_t)T * C, (uint64_t)T);
    t_fill(DT_F32, w, C * H, 99);
    int64_t xs[2] = {T, C}, ws[2] = {C, H};
    dt_placement xp[2] = {dt_shard(0), dt_shard(1)}, wp[2] = {dt_replicate(), dt_shard(0)};
    dt_placement rr[2] = {dt_replicate(), dt_replicate()};
    dt_tensor *xt, *wt, *yt, *yr;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, 2, xp, DT_ALL_RANKS, &xt));
    R_OK(dt_tensor_distribute(mesh, w, DT_F32, 2, ws, 2, wp, DT_ALL_RANKS, &wt));
    R_OK(dt_mm(xt, wt, &yt));
    R_OK(dt_tensor_redistribute(yt, 2, rr, &yr));
    R_OK(dt_tensor_full_tensor(yr, y, sizeof y));
    for (int i = 0; i < T; i++)
        for (int j = 0; j < H; j++) {
            double want = 0;
            for (int k = 0; k < C; k++)
                want += (double)x[i * C + k] * w[k * H + j];
            R_CHECK(y[i * H + j] == (float)want, "T %d: y[%d][%d] = %g, want %g", T, i, j,
                    (double)y[i * H + j], want);
        }
    dt_tensor_release(xt), dt_tensor_release(wt), dt_tensor_release(yt), dt_tensor_release(yr);
    return DT_OK;
}

static dt_status many_lengths_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_STRATEGY, STRATEGY_CAP));
    R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_PLAN, PLAN_CAP));
    R_OK(dt_comm_stats_reset(ctx));
    for (int T = 1; T <= NSEQ; T++) { /* T = 1 leaves a dp rank empty */
        R_OK(mm_once(mesh, T));
        dt_cache_stats s = cstats(mesh, DT_CACHE_STRATEGY), p = cstats(mesh, DT_CACHE_PLAN);
        R_CHECK(s.entries <= STRATEGY_CAP && p.entries <= PLAN_CAP,
                "T %d: %llu strategies, %llu plans held", T, (unsigned long long)s.entries,
                (unsigned long long)p.entries);
    }
    /* One mm per length, each a new shape: all misses, evictions once full. */
    dt_cache_stats s = cstats(mesh, DT_CACHE_STRATEGY), p = cstats(mesh, DT_CACHE_PLAN);
    R_COUNTS(s, 0, NSEQ, NSEQ - STRATEGY_CAP, STRATEGY_CAP);
    R_CHECK(s.capacity == STRATEGY_CAP && p.capacity == PLAN_CAP, "capacities %llu, %llu",
            (unsigned long long)s.capacity, (unsigned long long)p.capacity);
    R_CHECK(p.entries == PLAN_CAP && p.evictions == p.misses - PLAN_CAP && p.misses >= NSEQ,
            "plans: %llu misses, %llu evictions, %llu entries", (unsigned long long)p.misses,
            (unsigned long long)p.evictions, (unsigned long long)p.entries);
    R_OK(mm_once(mesh, NSEQ)); /* still cached: one hit, plans too */
    dt_cache_stats s2 = cstats(mesh, DT_CACHE_STRATEGY), p2 = cstats(mesh, DT_CACHE_PLAN);
    R_COUNTS(s2, 1, NSEQ, NSEQ - STRATEGY_CAP, STRATEGY_CAP);
    R_CHECK(p2.misses == p.misses && p2.hits > p.hits,
            "plans after a repeat: %llu misses "
            "(was %llu), %llu hits (was %llu)",
            (unsigned long long)p2.misses, (unsigned long long)p.misses,
            (unsigned long long)p2.hits, (unsigned long long)p.hits);
    R_OK(mm_once(mesh, 1)); /* evicted long ago: planned again, still right */
    s2 = cstats(mesh, DT_CACHE_STRATEGY);
    R_COUNTS(s2, 1, NSEQ + 1, NSEQ + 1 - STRATEGY_CAP, STRATEGY_CAP);
    /* The rank's totals are this mesh's counters (no other mesh looked anything up). */
    dt_comm_stats st;
    R_OK(dt_comm_stats_get(ctx, &st));
    for (int k = 0; k < DT_CACHE_KIND_COUNT; k++) {
        dt_cache_stats m = cstats(mesh, (dt_cache_kind)k), t = st.caches[k];
        R_CHECK(t.hits == m.hits && t.misses == m.misses && t.evictions == m.evictions,
                "cache %d: totals %llu/%llu/%llu, mesh %llu/%llu/%llu", k,
                (unsigned long long)t.hits, (unsigned long long)t.misses,
                (unsigned long long)t.evictions, (unsigned long long)m.hits,
                (unsigned long long)m.misses, (unsigned long long)m.evictions);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cache, many_sequence_lengths_stay_bounded_and_correct) {
    t_run(4, many_lengths_body, NULL);
}

/* ---- plans: exact counts, CLOCK, shrinking --------------------------------------------- */

/* The cached plan of a (T, 4) tensor from S(0) to R. */
static dt_status plan_of(dt_mesh *mesh, int T, const dt_plan **plan_out) {
    int64_t shape[2] = {T, 4};
    dt_placement s0[1] = {dt_shard(0)}, r[1] = {dt_replicate()};
    dt_tensor *t;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, 1, s0, &t));
    dt_status st = dt_tensor_redistribute_plan(t, 1, r, plan_out);
    dt_tensor_release(t);
    return st;
}

static dt_status plan_counts_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    const dt_plan *p;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_PLAN, 3));
    for (int T = 1; T <= 5; T++)
        R_OK(plan_of(mesh, T, &p));
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 0, 5, 2, 3); /* holds T = 3, 4, 5 */
    R_OK(plan_of(mesh, 5, &p));
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 1, 5, 2, 3);
    /* CLOCK: 3 and 5 are hit since the hand last passed; inserting 6 evicts 4. */
    R_OK(plan_of(mesh, 3, &p));
    R_OK(plan_of(mesh, 6, &p));
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 2, 6, 3, 3);
    R_OK(plan_of(mesh, 3, &p));
    R_OK(plan_of(mesh, 5, &p));
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 4, 6, 3, 3);
    R_OK(plan_of(mesh, 4, &p));
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 4, 7, 4, 3);
    /* Shrinking evicts at once; growing keeps what is there. */
    R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_PLAN, 1));
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 4, 7, 6, 1);
    R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_PLAN, 100));
    for (int T = 10; T < 60; T++)
        R_OK(plan_of(mesh, T, &p));
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 4, 57, 6, 51);
    R_COUNTS(cstats(mesh, DT_CACHE_STRATEGY), 0, 0, 0, 0); /* no op ran */
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cache, plan_counters_and_clock_order) {
    t_run(4, plan_counts_body, NULL);
}

/* ---- borrowed plans outlive their eviction ---------------------------------------------- */

static dt_status borrowed_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_PLAN, 1));
    const dt_plan *kept, *other;
    R_OK(plan_of(mesh, 8, &kept));
    R_OK(dt_plan_retain(kept));
    R_OK(plan_of(mesh, 9, &other)); /* evicts kept from the cache */
    R_COUNTS(cstats(mesh, DT_CACHE_PLAN), 0, 2, 1, 1);
    /* Still whole: the same text as a fresh plan of the same change. */
    int ms[1] = {4};
    int64_t shape[2] = {8, 4};
    dt_placement s0[1] = {dt_shard(0)}, r[1] = {dt_replicate()};
    dt_plan *fresh;
    R_OK(dt_plan_create(1, ms, 2, shape, DT_F32, s0, r, NULL, &fresh));
    char a[1024], b[1024];
    R_OK(dt_plan_format(kept, NULL, a, sizeof a, NULL));
    R_OK(dt_plan_format(fresh, NULL, b, sizeof b, NULL));
    R_CHECK(!strcmp(a, b), "evicted plan reads\n%s\nbut a fresh one\n%s", a, b);
    R_OK(dt_plan_release(kept));
    R_OK(dt_plan_release(fresh));
    R_ERR(dt_plan_retain(NULL), DT_ERR_ARG, "plan");
    R_OK(dt_plan_release(NULL));

    /* An async redistribute keeps its plan while other shapes push it out of the cache. */
    enum { T = 4096 };
    float *x = malloc(sizeof(float) * T * 4), *y = malloc(sizeof(float) * T * 4);
    R_CHECK(x && y, "out of memory");
    t_fill(DT_F32, x, (size_t)T * 4, 5);
    int64_t big[2] = {T, 4};
    dt_tensor *t, *u;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, big, 1, s0, DT_ALL_RANKS, &t));
    dt_request *req;
    R_OK(dt_tensor_redistribute_async(t, 1, r, &req));
    for (int n = 1; n <= 20; n++)
        R_OK(plan_of(mesh, n, &other));
    R_OK(dt_request_wait(req, &u));
    R_OK(dt_tensor_full_tensor(u, y, sizeof(float) * T * 4));
    R_CHECK(!memcmp(x, y, sizeof(float) * T * 4), "async redistribute changed the values");
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(u, &info));
    R_CHECK(info.local_numel == (size_t)T * 4, "the result holds %zu elements, not all %d",
            info.local_numel, T * 4);
    dt_tensor_release(t), dt_tensor_release(u);
    free(x), free(y);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cache, borrowed_and_pending_plans_outlive_eviction) {
    t_run(4, borrowed_body, NULL);
}

/* ---- settings ----------------------------------------------------------------------------- */

static dt_status settings_body(dt_ctx *ctx, void *arg) {
    size_t want = *(size_t *)arg;
    dt_mesh *mesh, *sub;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    for (int k = 0; k < DT_CACHE_KIND_COUNT; k++)
        R_CHECK(cstats(mesh, (dt_cache_kind)k).capacity == want,
                "cache %d: capacity %llu, "
                "want %zu",
                k, (unsigned long long)cstats(mesh, (dt_cache_kind)k).capacity, want);
    R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_PLAN, 5));
    const char *tp = "tp";
    R_OK(dt_mesh_submesh(mesh, &tp, 1, &sub));
    R_CHECK(cstats(sub, DT_CACHE_PLAN).capacity == 5 &&
                cstats(sub, DT_CACHE_STRATEGY).capacity == want,
            "a sub-mesh starts with its parent's capacities");
    R_ERR(dt_mesh_set_cache_capacity(mesh, DT_CACHE_PLAN, 0), DT_ERR_ARG, "capacity = 0");
    R_ERR(dt_mesh_set_cache_capacity(mesh, (dt_cache_kind)7, 4), DT_ERR_ARG, "kind");
    R_ERR(dt_mesh_set_cache_capacity(NULL, DT_CACHE_PLAN, 4), DT_ERR_ARG, "mesh");
    dt_cache_stats s;
    R_ERR(dt_mesh_cache_stats(mesh, (dt_cache_kind)-1, &s), DT_ERR_ARG, "kind");
    R_ERR(dt_mesh_cache_stats(mesh, DT_CACHE_PLAN, NULL), DT_ERR_ARG, "argument out");
    dt_mesh_release(sub);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(cache, capacity_default_env_and_errors) {
    size_t want = 4096;
    unsetenv("DT_CACHE_CAPACITY");
    t_run(4, settings_body, &want);
    setenv("DT_CACHE_CAPACITY", "7", 1);
    want = 7;
    t_run(4, settings_body, &want);
    setenv("DT_CACHE_CAPACITY", "lots", 1); /* ignored, with a warning */
    want = 4096;
    t_run(4, settings_body, &want);
    unsetenv("DT_CACHE_CAPACITY");
}

/* ---- the summary --------------------------------------------------------------------------- */

static dt_status summary_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    R_OK(dt_comm_stats_reset(ctx));
    int64_t shape[2] = {4, 4};
    dt_placement s0[1] = {dt_shard(0)}, s1[1] = {dt_shard(1)};
    dt_tensor *a, *b, *c;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, 1, s0, &a));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, 1, s1, &b));
    for (int i = 0; i < 3; i++) { /* one miss, two hits */
        R_OK(dt_add(a, b, &c));
        dt_tensor_release(c);
    }
    dt_comm_stats st;
    R_OK(dt_comm_stats_get(ctx, &st));
    dt_cache_stats s = st.caches[DT_CACHE_STRATEGY];
    R_CHECK(s.hits == 2 && s.misses == 1 && s.evictions == 0, "strategy totals %llu/%llu/%llu",
            (unsigned long long)s.hits, (unsigned long long)s.misses,
            (unsigned long long)s.evictions);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    R_CHECK(f, "open_memstream failed");
    R_OK(dt_comm_stats_print(&st, "rank", f));
    fclose(f);
    const char *line = strstr(text, "\n  strategy ");
    unsigned long long h = 0, m = 0, e = 9;
    dt_status ok = strstr(text, "evictions") && line &&
                           sscanf(line, " strategy %llu %llu %llu", &h, &m, &e) == 3 && h == 2 &&
                           m == 1 && e == 0 && strstr(text, "\n  plan ")
                       ? DT_OK
                       : t_fail(__FILE__, __LINE__, "summary lacks the cache counters:\n%s", text);
    free(text);
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_comm_stats_get(ctx, &st));
    R_CHECK(st.caches[DT_CACHE_STRATEGY].hits == 0, "reset keeps cache counters");
    dt_tensor_release(a), dt_tensor_release(b);
    dt_mesh_release(mesh);
    return ok;
}

Test(cache, summary_prints_hits_misses_evictions) {
    t_run(2, summary_body, NULL);
}

/* ---- the cache itself -------------------------------------------------------------------- */

static int freed;
static void count_free(void *v) {
    freed += *(int *)v;
}

Test(cache, lru_clock_and_destructor) {
    static int vals[8] = {1, 2, 4, 8, 16, 32, 64, 128};
    dt_cache_stats total = {0};
    dt_lru *c;
    cr_assert_eq(dt_lru_create(3, count_free, &total, &c), DT_OK);
    uint64_t key[2] = {0, 42};
    for (int i = 0; i < 3; i++) {
        key[0] = (uint64_t)i;
        uint64_t h = dt_lru_hash(key, 2);
        cr_assert_null(dt_lru_get(c, key, 2, h));
        cr_assert_eq(dt_lru_put(c, key, 2, h, &vals[i]), DT_OK);
    }
    key[0] = 1; /* hit 1, then two inserts: 0 and 2 go, 1 stays */
    cr_assert_eq(dt_lru_get(c, key, 2, dt_lru_hash(key, 2)), &vals[1]);
    for (int i = 3; i < 5; i++) {
        key[0] = (uint64_t)i;
        cr_assert_eq(dt_lru_put(c, key, 2, dt_lru_hash(key, 2), &vals[i]), DT_OK);
    }
    cr_assert_eq(freed, 1 + 4, "evicted values: mask %d", freed);
    key[0] = 1;
    cr_assert_eq(dt_lru_get(c, key, 1, dt_lru_hash(key, 1)), NULL, "keys differ in length");
    cr_assert_eq(dt_lru_get(c, key, 2, dt_lru_hash(key, 2)), &vals[1]);
    cr_assert_eq(c->stats.entries, 3);
    cr_assert(total.hits == 2 && total.misses == 4 && total.evictions == 2, "totals %llu/%llu/%llu",
              (unsigned long long)total.hits, (unsigned long long)total.misses,
              (unsigned long long)total.evictions);
    dt_lru_destroy(c); /* frees 1, 3 and 4 */
    cr_assert_eq(freed, 1 + 4 + 2 + 8 + 16);
    cr_assert_eq(dt_lru_create(0, NULL, NULL, &c), DT_ERR_ARG);
}

/* Key codes of placements are equal exactly when dt_placement_equal says so, on every mesh
 * dim of a mesh of up to DT_MESH_MAX_NDIM dims. */
Test(cache, placement_key_codes) {
    dt_placement a[DT_MESH_MAX_NDIM], b[DT_MESH_MAX_NDIM];
    for (int n = 1; n <= DT_MESH_MAX_NDIM; n++)
        for (int m = 0; m < n; m++) {
            for (int i = 0; i < n; i++)
                a[i] = b[i] = dt_replicate();
            uint64_t ka[DT_PLACEMENTS_KEY_WORDS], kb[DT_PLACEMENTS_KEY_WORDS];
            a[m] = dt_shard(1), b[m] = dt_shard(1);
            b[m].op = DT_REDUCE_MAX; /* not part of a shard */
            unsigned na = dt_placements_key(a, n, ka), nb = dt_placements_key(b, n, kb);
            cr_assert(na == (unsigned)(n + 3) / 4 && na == nb && !memcmp(ka, kb, 8 * na));
            b[m] = dt_shard(2);
            dt_placements_key(b, n, kb);
            cr_assert(memcmp(ka, kb, 8 * na), "S(1) and S(2) on dim %d of %d share a key", m, n);
            a[m] = dt_partial(DT_REDUCE_SUM), b[m] = dt_partial(DT_REDUCE_AVG);
            dt_placements_key(a, n, ka), dt_placements_key(b, n, kb);
            cr_assert(memcmp(ka, kb, 8 * na), "P(sum) and P(avg) on dim %d of %d", m, n);
            b[m] = dt_replicate();
            dt_placements_key(b, n, kb);
            cr_assert(memcmp(ka, kb, 8 * na), "P(sum) and R on dim %d of %d", m, n);
        }
}
