/* Redistribute: every row of the conformance table (plan and exact result on real ranks),
 * named transitions with their exact collectives and bytes, async, the plan cache, explain
 * and bad input. The randomized property suite is in test_redistribute_property.c. */
#include <stdlib.h>
#include <time.h>

#include "helpers.h"

/* "all_gather[dim0+dim1];all_to_all[dim1]" for the plan's collectives, "none" if none. */
static void plan_signature(const dt_plan *plan, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < dt_plan_nsteps(plan); i++) {
        dt_plan_step s;
        dt_plan_step_get(plan, i, &s);
        if (s.kind > DT_STEP_REDUCE_SCATTER) continue; /* local */
        o += (size_t)snprintf(buf + o, cap - o, "%s%s[", o ? ";" : "", dt_step_kind_name(s.kind));
        for (int m = 0, first = 1; m < DT_MESH_MAX_NDIM; m++)
            if (s.mesh_mask & (1u << m)) {
                o += (size_t)snprintf(buf + o, cap - o, "%sdim%d", first ? "" : "+", m);
                first = 0;
            }
        o += (size_t)snprintf(buf + o, cap - o, "]");
    }
    if (!o) snprintf(buf, cap, "none");
}

/* 1 when sig equals one of the " OR "-separated alternatives. */
static int matches_any(const char *sig, const char *expected) {
    size_t n = strlen(sig);
    for (const char *p = expected;;) {
        const char *end = strstr(p, " OR ");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, sig, n) == 0) return 1;
        if (!end) return 0;
        p = end + 4;
    }
}

typedef struct row {
    char id[16], mesh[32], shape[32], src[64], dst[64], expected[512];
} row;

static int read_rows(row *rows, int cap) {
    char path[512], line[4096];
    FILE *f = t_open_conformance("redistribute_cases.tsv", path, sizeof path);
    cr_assert(f, "cannot open the conformance cases (%s)", path);
    cr_log_info("conformance cases from %s", path);
    int n = 0;
    fgets(line, sizeof line, f); /* header */
    while (n < cap && fgets(line, sizeof line, f)) {
        char *cols[8] = {0};
        int c = t_split_tabs(line, cols, 8);
        if (c < 6) continue;
        row *r = &rows[n++];
        snprintf(r->id, sizeof r->id, "%s", cols[0]);
        snprintf(r->mesh, sizeof r->mesh, "%s", cols[1]);
        snprintf(r->shape, sizeof r->shape, "%s", cols[2]);
        snprintf(r->src, sizeof r->src, "%s", cols[3]);
        snprintf(r->dst, sizeof r->dst, "%s", cols[4]);
        snprintf(r->expected, sizeof r->expected, "%s", cols[5]);
    }
    fclose(f);
    return n;
}

/* Runs one row on real ranks: distribute, redistribute, compare with the original, and
 * compare the collectives actually issued with the plan's. */
typedef struct run_arg {
    const row *r;
    int nd;
    int64_t shape[DT_MAX_NDIM];
    dt_placement src[DT_MESH_MAX_NDIM], dst[DT_MESH_MAX_NDIM];
    int ncoll;
} run_arg;

static dt_status row_body(dt_ctx *ctx, void *arg) {
    run_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, a->r->mesh, &mesh));
    size_t n = 1;
    for (int d = 0; d < a->nd; d++) n *= (size_t)a->shape[d];
    double *full = malloc(n * sizeof *full + 8), *back = malloc(n * sizeof *back + 8);
    for (size_t i = 0; i < n; i++) full[i] = t_value(7, i);
    dt_tensor *t, *u;
    R_OK(dt_tensor_distribute(mesh, full, DT_F64, a->nd, a->shape, dt_mesh_ndim(mesh), a->src,
                              DT_ALL_RANKS, &t));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_tensor_redistribute(t, dt_mesh_ndim(mesh), a->dst, &u));
    dt_comm_stats stats;
    R_OK(dt_comm_stats_get(ctx, &stats));
    uint64_t issued = stats.calls[DT_COLL_ALL_GATHER] + stats.calls[DT_COLL_ALL_REDUCE] +
                      stats.calls[DT_COLL_REDUCE_SCATTER] + stats.calls[DT_COLL_ALL_TO_ALL];
    R_CHECK(issued == (uint64_t)a->ncoll && stats.calls[DT_COLL_SEND] == 0,
            "%s: %llu collectives issued, the plan has %d", a->r->id, (unsigned long long)issued,
            a->ncoll);
    R_OK(dt_tensor_full_tensor(u, back, n * sizeof *back));
    for (size_t i = 0; i < n; i++)
        R_CHECK(back[i] == full[i], "%s: element %zu is %g, want %g", a->r->id, i, back[i],
                full[i]);
    dt_tensor_release(t);
    dt_tensor_release(u);
    free(full);
    free(back);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(redistribute, conformance_table) {
    static row rows[512];
    int n = read_rows(rows, 512), failed = 0;
    cr_assert_gt(n, 10, "only %d conformance rows", n);
    for (int i = 0; i < n; i++) {
        row *r = &rows[i];
        run_arg a = {.r = r};
        int ms[DT_MESH_MAX_NDIM], mnd = t_parse_dims(r->mesh, ms, DT_MESH_MAX_NDIM), nsrc, ndst;
        a.nd = 0;
        int dims[DT_MAX_NDIM];
        int nd = t_parse_dims(r->shape, dims, DT_MAX_NDIM);
        for (int d = 0; d < nd; d++) a.shape[d] = dims[d];
        a.nd = nd;
        cr_assert_eq(dt_placements_parse(r->src, a.src, DT_MESH_MAX_NDIM, &nsrc), DT_OK, "%s",
                     r->id);
        cr_assert_eq(dt_placements_parse(r->dst, a.dst, DT_MESH_MAX_NDIM, &ndst), DT_OK, "%s",
                     r->id);
        dt_plan *plan;
        cr_assert_eq(dt_plan_create(mnd, ms, a.nd, a.shape, DT_F64, a.src, a.dst, NULL, &plan),
                     DT_OK, "%s: %s", r->id, dt_last_error());
        char sig[512];
        plan_signature(plan, sig, sizeof sig);
        a.ncoll = dt_plan_ncollectives(plan);
        dt_plan_release(plan);
        if (!matches_any(sig, r->expected)) {
            cr_log_error("%s mesh %s shape %s %s -> %s: plan %s, expected %s", r->id, r->mesh,
                         r->shape, r->src, r->dst, sig, r->expected);
            failed++;
        }
        int nranks = 1;
        for (int m = 0; m < mnd; m++) nranks *= ms[m];
        t_run(nranks, row_body, &a);
    }
    cr_assert_eq(failed, 0, "%d of %d conformance plans differ (see the log)", failed, n);
    cr_log_info("%d conformance rows: plans match and results are exact", n);
}

/* Named transitions: the exact collectives (kind, group size, calls) and the bytes of rank 0's
 * buffers, read from the communication counters after a real run. */
typedef struct named {
    const char *name, *mesh, *src, *dst;
    int64_t shape[2];
    dt_coll_kind kind; /* DT_COLL_KIND_COUNT = no communication */
    int group;
    uint64_t bytes_in, bytes_out; /* rank 0, f32 */
} named;

static const named transitions[] = {
    {"shard to replicate", "4", "S(0)", "R", {16, 8}, DT_COLL_ALL_GATHER, 4, 128, 512},
    {"uneven shard to replicate", "4", "S(0)", "R", {7, 3}, DT_COLL_ALL_GATHER, 4, 24, 84},
    {"empty shards to replicate", "4", "S(1)", "R", {2, 3}, DT_COLL_ALL_GATHER, 4, 8, 24},
    {"partial to replicate", "4", "P(sum)", "R", {16, 8}, DT_COLL_ALL_REDUCE, 4, 512, 512},
    {"partial max to replicate", "4", "P(max)", "R", {16, 8}, DT_COLL_ALL_REDUCE, 4, 512, 512},
    {"partial to shard", "4", "P(sum)", "S(0)", {16, 8}, DT_COLL_REDUCE_SCATTER, 4, 512, 128},
    {"partial avg to shard", "4", "P(avg)", "S(1)", {16, 8}, DT_COLL_REDUCE_SCATTER, 4, 512, 128},
    {"shard dim change", "4", "S(0)", "S(1)", {16, 8}, DT_COLL_ALL_TO_ALL, 4, 128, 128},
    {"uneven shard dim change", "4", "S(1)", "S(0)", {8, 5}, DT_COLL_ALL_TO_ALL, 4, 64, 40},
    {"replicate to shard", "4", "R", "S(0)", {16, 8}, DT_COLL_KIND_COUNT, 0, 0, 0},
    {"replicate to partial", "4", "R", "P(sum)", {16, 8}, DT_COLL_KIND_COUNT, 0, 0, 0},
    {"partial avg to sum", "4", "P(avg)", "P(sum)", {16, 8}, DT_COLL_KIND_COUNT, 0, 0, 0},
    {"partial max to sum", "4", "P(max)", "P(sum)", {16, 8}, DT_COLL_ALL_REDUCE, 4, 512, 512},
    {"nested gather, fused", "2x2", "S(0),S(0)", "R,R", {16, 8}, DT_COLL_ALL_GATHER, 4, 128, 512},
    {"partials, fused", "2x2", "P(sum),P(sum)", "R,R", {16, 8}, DT_COLL_ALL_REDUCE, 4, 512, 512},
    {"move a shard across mesh dims", "2x2", "S(0),R", "R,S(0)", {16, 8}, DT_COLL_ALL_GATHER, 2,
     256, 512},
    {"size-1 mesh dim", "4x1", "S(0),S(1)", "S(0),R", {16, 8}, DT_COLL_KIND_COUNT, 0, 0, 0},
};

static dt_status named_body(dt_ctx *ctx, void *arg) {
    const named *t = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, t->mesh, &mesh));
    dt_placement src[4], dst[4];
    int n;
    R_OK(dt_placements_parse(t->src, src, 4, &n));
    R_OK(dt_placements_parse(t->dst, dst, 4, &n));
    float x[128] = {0};
    dt_tensor *a, *b;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, t->shape, dt_mesh_ndim(mesh), src, DT_ALL_RANKS,
                              &a));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_tensor_redistribute(a, dt_mesh_ndim(mesh), dst, &b));
    dt_comm_stats s;
    R_OK(dt_comm_stats_get(ctx, &s));
    if (t->kind == DT_COLL_KIND_COUNT) {
        R_CHECK(s.nentries == 0, "%s: expected no communication, got %d kinds (first %s)", t->name,
                s.nentries, dt_coll_kind_name(s.entries[0].kind));
    } else if (dt_ctx_rank(ctx) == 0) {
        R_CHECK(s.nentries == 1, "%s: expected one kind of collective, got %d", t->name,
                s.nentries);
        const dt_comm_stats_entry *e = &s.entries[0];
        R_CHECK(e->kind == t->kind && e->group_size == t->group && e->calls == 1,
                "%s: got %llu x %s over %d, expected 1 x %s over %d", t->name,
                (unsigned long long)e->calls, dt_coll_kind_name(e->kind), e->group_size,
                dt_coll_kind_name(t->kind), t->group);
        R_CHECK(e->bytes_in == t->bytes_in && e->bytes_out == t->bytes_out,
                "%s: rank 0 moved %llu B in, %llu B out; expected %llu, %llu", t->name,
                (unsigned long long)e->bytes_in, (unsigned long long)e->bytes_out,
                (unsigned long long)t->bytes_in, (unsigned long long)t->bytes_out);
    }
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(redistribute, named_transitions_issue_exact_collectives) {
    for (size_t i = 0; i < sizeof transitions / sizeof transitions[0]; i++) {
        int nranks = 1, ms[4];
        int mnd = t_parse_dims(transitions[i].mesh, ms, 4);
        for (int m = 0; m < mnd; m++) nranks *= ms[m];
        t_run(nranks, named_body, (void *)&transitions[i]);
    }
}

/* Several requests in flight at once, interleaved with blocking collectives on the same mesh:
 * each result equals the blocking redistribute's. */
static dt_status async_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    int64_t shape[2] = {9, 7};
    double x[63], back[63];
    for (int i = 0; i < 63; i++) x[i] = t_value(3, (size_t)i);
    const char *targets[] = {"R,R", "S(1),S(0)", "S(0),R", "R,S(1)"};
    dt_placement src[2], dst[4][2];
    int n;
    R_OK(dt_placements_parse("S(0),S(1)", src, 2, &n));
    dt_tensor *t, *sync[4], *async[4];
    dt_request *req[4];
    R_OK(
        dt_tensor_distribute(mesh, x, DT_F64, 2, shape, dt_mesh_ndim(mesh), src, DT_ALL_RANKS, &t));
    for (int k = 0; k < 4; k++) {
        R_OK(dt_placements_parse(targets[k], dst[k], 2, &n));
        R_OK(dt_tensor_redistribute_async(t, dt_mesh_ndim(mesh), dst[k], &req[k]));
    }
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    for (int k = 0; k < 4; k++) {
        double one = 1, sum;
        R_OK(dt_all_reduce(world, &one, &sum, 1, DT_F64, DT_REDUCE_SUM));
        R_OK(dt_tensor_redistribute(t, dt_mesh_ndim(mesh), dst[k], &sync[k]));
    }
    for (int k = 3; k >= 0; k--) R_OK(dt_request_wait(req[k], &async[k]));
    for (int k = 0; k < 4; k++) {
        dt_tensor_info a, b;
        dt_tensor_info_get(async[k], &a);
        dt_tensor_info_get(sync[k], &b);
        R_CHECK(a.local_bytes == b.local_bytes &&
                    (a.local_bytes == 0 || memcmp(a.local_data, b.local_data, a.local_bytes) == 0),
                "async %s differs from blocking", targets[k]);
        R_OK(dt_tensor_full_tensor(async[k], back, sizeof back));
        R_CHECK(memcmp(back, x, sizeof x) == 0, "async %s: full tensor differs", targets[k]);
        dt_tensor_release(async[k]);
        dt_tensor_release(sync[k]);
    }
    /* The input may be released before the wait: the request holds it. */
    R_OK(dt_tensor_redistribute_async(t, dt_mesh_ndim(mesh), dst[0], &req[0]));
    dt_tensor_release(t);
    R_OK(dt_request_wait(req[0], &async[0]));
    R_OK(dt_tensor_full_tensor(async[0], back, sizeof back));
    R_CHECK(memcmp(back, x, sizeof x) == 0, "after release: full tensor differs");
    dt_tensor_release(async[0]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(redistribute, async_requests_match_blocking) { t_run(4, async_body, NULL); }

/* A rank that fails with requests queued on the others ends the run instead of hanging it. */
static dt_status async_fail_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    int64_t shape[1] = {64};
    float x[64] = {0};
    dt_placement s0[1] = {dt_shard(0)}, r[1] = {dt_replicate()};
    dt_tensor *t, *u = NULL;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 1, shape, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &t));
    dt_status st = DT_OK;
    if (dt_ctx_rank(ctx) == 2) {
        st = dt_error_set(DT_ERR_SHAPE, "rank 2 gives up");
    } else {
        dt_request *req;
        R_OK(dt_tensor_redistribute_async(t, DT_COUNT_OF(r), r, &req));
        dt_comm *world;
        R_OK(dt_ctx_world_comm(ctx, &world));
        dt_status b = dt_barrier(world); /* rank 2 never comes */
        R_CHECK(b == DT_ERR_ABORTED || b == DT_ERR_PEER_EXITED, "barrier returned %s",
                dt_status_str(b));
        dt_status w = dt_request_wait(req, &u);
        R_CHECK(w == DT_OK || w == DT_ERR_ABORTED, "wait returned %s", dt_status_str(w));
    }
    dt_tensor_release(u);
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return st;
}

Test(redistribute, failing_rank_with_requests_in_flight) {
    dt_status st = dt_local_run(4, async_fail_body, NULL, NULL);
    cr_assert_eq(st, DT_ERR_SHAPE, "%s", dt_last_error());
    cr_assert(strstr(dt_last_error(), "rank 2 gives up"), "%s", dt_last_error());
}

static dt_status cache_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int64_t shape[2] = {8, 8};
    dt_placement src[2] = {dt_shard(0), dt_shard(0)}, dst[2] = {dt_replicate(), dt_replicate()};
    dt_tensor *t;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, dt_mesh_ndim(mesh), src, &t));
    const dt_plan *p1, *p2, *p3;
    R_OK(dt_tensor_redistribute_plan(t, dt_mesh_ndim(mesh), dst, &p1));
    R_OK(dt_tensor_redistribute_plan(t, dt_mesh_ndim(mesh), dst, &p2));
    R_CHECK(p1 == p2, "the second lookup planned again");
    R_CHECK(dt_plan_nsteps(p1) == 1, "default model: one fused all_gather, got %d steps",
            dt_plan_nsteps(p1));
    /* Without latency a fused collective saves nothing: two gathers, re-planned. */
    dt_cost_model bw_only = {.latency_us = 0, .step_us = 0, .bandwidth_gbps = 10};
    R_OK(dt_ctx_set_cost_model(ctx, &bw_only));
    R_OK(dt_tensor_redistribute_plan(t, dt_mesh_ndim(mesh), dst, &p3));
    R_CHECK(p3 != p1 && dt_plan_nsteps(p3) == 2, "bandwidth-only model: %d steps",
            dt_plan_nsteps(p3));
    dt_tensor *u;
    R_OK(dt_tensor_redistribute(t, dt_mesh_ndim(mesh), dst, &u)); /* runs the two-step plan */
    dt_tensor_release(u);
    R_OK(dt_ctx_set_cost_model(ctx, NULL));
    R_OK(dt_tensor_redistribute_plan(t, dt_mesh_ndim(mesh), dst, &p2));
    R_CHECK(dt_plan_nsteps(p2) == 1, "default model restored: %d steps", dt_plan_nsteps(p2));
    dt_cost_model bad = {.latency_us = -1, .step_us = 0, .bandwidth_gbps = 10};
    R_ERR(dt_ctx_set_cost_model(ctx, &bad), DT_ERR_ARG, "latency_us -1");
    dt_placement far[2] = {dt_shard(3), dt_replicate()};
    R_ERR(dt_tensor_redistribute(t, DT_COUNT_OF(far), far, &u), DT_ERR_PLACEMENT, "S(3)");
    R_ERR(dt_tensor_redistribute(t, 1, NULL, &u), DT_ERR_ARG, "dst");
    R_ERR(dt_tensor_redistribute(NULL, dt_mesh_ndim(mesh), dst, &u), DT_ERR_ARG, "tensor");
    R_ERR(dt_tensor_redistribute(t, dt_mesh_ndim(mesh), dst, NULL), DT_ERR_ARG, "argument out");
    R_ERR(dt_tensor_redistribute_async(t, dt_mesh_ndim(mesh), dst, NULL), DT_ERR_ARG,
          "argument out");
    R_ERR(dt_request_wait(NULL, &u), DT_ERR_ARG, "request");
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(redistribute, plan_cache_and_cost_model) { t_run(4, cache_body, NULL); }

Test(redistribute, explain_without_ranks) {
    int ms[2] = {2, 4};
    int64_t shape[2] = {8, 6};
    dt_placement src[2] = {dt_shard(0), dt_replicate()}, dst[2] = {dt_replicate(), dt_shard(1)};
    const char *names[2] = {"dp", "tp"};
    char buf[2048];
    size_t len;
    cr_assert_eq(dt_redistribute_explain(2, ms, names, 2, shape, DT_F32, src, dst, NULL, buf,
                                         sizeof buf, &len), DT_OK, "%s", dt_last_error());
    cr_log_info("\n%s", buf);
    cr_assert(strstr(buf, "S(0),R -> R,S(1)") && strstr(buf, "all_gather") && strstr(buf, "dp") &&
              strstr(buf, "group 2") && strstr(buf, "total: 1 collective"), "%s", buf);
    cr_assert_eq(len, strlen(buf) + 1);
    T_ERR(dt_redistribute_explain(2, ms, names, 2, shape, DT_F32, src, dst, NULL, buf, 10, &len),
          DT_ERR_SIZE, "bytes");
    /* 8192 ranks: planned without starting any. */
    int big[3] = {8, 16, 64};
    int64_t bshape[3] = {1024, 4096, 130};
    dt_placement bs[3] = {dt_shard(0), dt_shard(1), dt_partial(DT_REDUCE_SUM)};
    dt_placement bd[3] = {dt_replicate(), dt_shard(0), dt_shard(2)};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(dt_redistribute_explain(3, big, NULL, 3, bshape, DT_BF16, bs, bd, NULL, buf,
                                         sizeof buf, NULL), DT_OK, "%s", dt_last_error());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_log_info("8x16x64 mesh planned in %.1f ms:\n%s",
                (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
                buf);
    cr_assert(strstr(buf, "reduce_scatter") || strstr(buf, "all_reduce"), "%s", buf);
    /* An 8-D mesh reversing eight shards: each mesh dim only holds its source placement, its
     * target or R, so the search stays small (3^8 states at most). */
    int m8[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    int64_t s8[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    dt_placement f8[8], t8[8];
    for (int m = 0; m < 8; m++) f8[m] = dt_shard(m), t8[m] = dt_shard(7 - m);
    dt_plan *plan;
    cr_assert_eq(dt_plan_create(8, m8, 8, s8, DT_BF16, f8, t8, NULL, &plan), DT_OK, "%s",
                 dt_last_error());
    cr_assert_geq(dt_plan_ncollectives(plan), 1);
    dt_plan_release(plan);
    /* Bad input. */
    T_ERR(dt_plan_create(0, ms, 2, shape, DT_F32, src, dst, NULL, &plan), DT_ERR_ARG, "mesh_ndim");
    int zero[2] = {2, 0};
    T_ERR(dt_plan_create(2, zero, 2, shape, DT_F32, src, dst, NULL, &plan), DT_ERR_MESH,
          "mesh_shape[1] = 0");
    dt_placement far[2] = {dt_shard(-3), dt_replicate()};
    T_ERR(dt_plan_create(2, ms, 2, shape, DT_F32, far, dst, NULL, &plan), DT_ERR_PLACEMENT,
          "S(-3)");
    T_ERR(dt_plan_create(2, ms, 2, shape, (dt_dtype)99, src, dst, NULL, &plan), DT_ERR_DTYPE,
          "dtype");
    dt_cost_model bad = {1, 1, 0};
    T_ERR(dt_plan_create(2, ms, 2, shape, DT_F32, src, dst, &bad, &plan), DT_ERR_ARG,
          "bandwidth");
    cr_assert_eq(dt_plan_create(2, ms, 2, shape, DT_F32, src, src, NULL, &plan), DT_OK);
    cr_assert_eq(dt_plan_nsteps(plan), 0);
    dt_plan_step step;
    T_ERR(dt_plan_step_get(plan, 0, &step), DT_ERR_ARG, "i = 0");
    dt_plan_release(plan);
}

/* The six transitions of the benchmark table at a size where the local runtime streams its
 * stores and reads strided boxes in place (S(1)->R and P->S(1) in one pass): every element
 * against the full tensor. x[i] = i % 1000; rank r holds (r + 1) x as its partial, so the
 * sum is 10 x on 4 ranks, exact in f32. (256, 8192) f32: 8 MiB, 2 MiB shards, 8 KiB runs. */
#define BIG_R 256
#define BIG_C 8192
static dt_status large_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    static const char *const cases[][2] = {{"S(0)", "R"},    {"S(1)", "R"},    {"P(sum)", "R"},
                                           {"P(sum)", "S(0)"}, {"P(sum)", "S(1)"}, {"S(0)", "S(1)"}};
    const int64_t shape[2] = {BIG_R, BIG_C};
    float *x = malloc(sizeof(float) * BIG_R * BIG_C);
    R_CHECK(x != NULL, "out of memory");
    for (int64_t i = 0; i < BIG_R * BIG_C; i++) x[i] = (float)(i % 1000);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    const float scale = (float)(dt_ctx_rank(ctx) + 1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dt_placement src[1], dst[1];
        int n;
        R_OK(dt_placements_parse(cases[c][0], src, 1, &n));
        R_OK(dt_placements_parse(cases[c][1], dst, 1, &n));
        dt_tensor *a, *b;
        const int partial = src[0].kind == DT_PLACEMENT_PARTIAL;
        if (partial) {
            float *mine = malloc(sizeof(float) * BIG_R * BIG_C);
            R_CHECK(mine != NULL, "out of memory");
            for (int64_t i = 0; i < BIG_R * BIG_C; i++) mine[i] = scale * x[i];
            R_OK(dt_tensor_from_local(mesh, mine, DT_F32, 2, shape, 1, src, shape, 0, &a));
            free(mine);
        } else {
            R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, src, DT_ALL_RANKS, &a));
        }
        R_OK(dt_tensor_redistribute(a, 1, dst, &b));
        dt_tensor_info in;
        R_OK(dt_tensor_info_get(b, &in));
        const float *got = in.local_data;
        const float want_scale = partial ? 10.0f : 1.0f;
        for (int64_t r = 0; r < in.local_shape[0]; r++)
            for (int64_t k = 0; k < in.local_shape[1]; k++) {
                float want = want_scale *
                             x[(r + in.local_offset[0]) * BIG_C + k + in.local_offset[1]];
                R_CHECK(got[r * in.local_shape[1] + k] == want, "%s -> %s: (%lld, %lld) is %g, "
                        "expected %g", cases[c][0], cases[c][1], (long long)(r + in.local_offset[0]),
                        (long long)(k + in.local_offset[1]), got[r * in.local_shape[1] + k], want);
            }
        dt_tensor_release(a);
        dt_tensor_release(b);
    }
    dt_mesh_release(mesh);
    free(x);
    return DT_OK;
}

Test(redistribute, large_transitions_exact) { t_run(4, large_body, NULL); }
