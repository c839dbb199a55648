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

static int parse_dims(const char *text, int *out, int max) {
    int n = 0;
    for (const char *p = text; *p && n < max;) {
        out[n++] = (int)strtol(p, (char **)&p, 10);
        if (*p == 'x' || *p == ',') p++;
        else if (*p) return -1;
    }
    return n;
}

typedef struct row {
    char id[16], mesh[32], shape[32], src[64], dst[64], expected[512];
} row;

static FILE *open_cases(const char *name, char *path, size_t cap) {
    const char *src = getenv("DT_SOURCE_DIR");
    /* The shared folder next to the repository is the newest; the copy in tests/ travels. */
    snprintf(path, cap, "%s/../shared/conformance/%s", src ? src : "..", name);
    FILE *f = fopen(path, "r");
    if (f) return f;
    snprintf(path, cap, "%s/tests/conformance/%s", src ? src : "..", name);
    return fopen(path, "r");
}

static int read_rows(row *rows, int cap) {
    char path[512], line[4096];
    FILE *f = open_cases("redistribute_cases.tsv", path, sizeof path);
    cr_assert(f, "cannot open the conformance cases (%s)", path);
    cr_log_info("conformance cases from %s", path);
    int n = 0;
    fgets(line, sizeof line, f); /* header */
    while (n < cap && fgets(line, sizeof line, f)) {
        char *cols[8] = {0};
        int c = 0;
        for (char *p = line; c < 8; c++) {
            cols[c] = p;
            char *tab = strchr(p, '\t');
            if (!tab) {
                p[strcspn(p, "\n")] = '\0';
                c++;
                break;
            }
            *tab = '\0';
            p = tab + 1;
        }
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
    R_OK(dt_tensor_distribute(mesh, full, DT_F64, a->nd, a->shape, a->src, DT_ALL_RANKS, &t));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_tensor_redistribute(t, a->dst, &u));
    dt_comm_stats stats;
    R_OK(dt_comm_stats_get(ctx, &stats));
    uint64_t issued = stats.calls[DT_COLL_ALL_GATHER] + stats.calls[DT_COLL_ALL_REDUCE] +
                      stats.calls[DT_COLL_REDUCE_SCATTER] + stats.calls[DT_COLL_ALL_TO_ALL];
    R_CHECK(issued == (uint64_t)a->ncoll && stats.calls[DT_COLL_SEND] == 0,
            "%s: %llu collectives issued, the plan has %d", a->r->id, (unsigned long long)issued,
            a->ncoll);
    R_OK(dt_tensor_full(u, back, n * sizeof *back));
    for (size_t i = 0; i < n; i++)
        R_CHECK(back[i] == full[i], "%s: element %zu is %g, want %g", a->r->id, i, back[i], full[i]);
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
        int ms[DT_MESH_MAX_NDIM], mnd = parse_dims(r->mesh, ms, DT_MESH_MAX_NDIM), nsrc, ndst;
        a.nd = 0;
        int dims[DT_MAX_NDIM];
        int nd = parse_dims(r->shape, dims, DT_MAX_NDIM);
        for (int d = 0; d < nd; d++) a.shape[d] = dims[d];
        a.nd = nd;
        cr_assert_eq(dt_placements_parse(r->src, a.src, DT_MESH_MAX_NDIM, &nsrc), DT_OK, "%s", r->id);
        cr_assert_eq(dt_placements_parse(r->dst, a.dst, DT_MESH_MAX_NDIM, &ndst), DT_OK, "%s", r->id);
        dt_plan *plan;
        cr_assert_eq(dt_plan_create(mnd, ms, a.nd, a.shape, DT_F64, a.src, a.dst, NULL, &plan),
                     DT_OK, "%s: %s", r->id, dt_last_error());
        char sig[512];
        plan_signature(plan, sig, sizeof sig);
        a.ncoll = dt_plan_ncollectives(plan);
        dt_plan_destroy(plan);
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
