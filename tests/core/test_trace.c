/* Traces: what a rank records (op dispatches with their strategy, redistributions, kernels,
 * collectives with group and bytes), the Chrome trace-event files, merging, and the summary
 * counters by mesh dims. */
#include <stdlib.h>

#include "helpers.h"

static int count(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static char dir[256];

static dt_status trace_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    int64_t s[2] = {8, 8};
    float x[64];
    t_fill(DT_F32, x, 64, 3);
    dt_placement a_pl[2] = {dt_shard(0), dt_shard(1)}, b_pl[2] = {dt_replicate(), dt_shard(0)};
    dt_tensor *a, *b, *c, *d;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, DT_COUNT_OF(a_pl), a_pl, DT_ALL_RANKS, &a));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, DT_COUNT_OF(b_pl), b_pl, DT_ALL_RANKS, &b));
    R_OK(dt_mm(a, b, &c)); /* not recorded: tracing is off */
    dt_tensor_release(c);
    R_OK(dt_trace_start(ctx));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_mm(a, b, &c));
    dt_placement rr[2] = {dt_replicate(), dt_replicate()};
    R_OK(dt_tensor_redistribute(c, DT_COUNT_OF(rr), rr, &d));
    R_OK(dt_trace_stop(ctx));
    dt_tensor *e;
    R_OK(dt_add(d, d, &e)); /* not recorded: stopped */
    char path[512];
    snprintf(path, sizeof path, "%s/t.rank%d.json", dir, rank);
    R_OK(dt_trace_write(ctx, path));
    R_CHECK(count(path, "\"name\":\"mm\",\"cat\":\"ops\"") == 1, "one mm dispatch recorded");
    R_CHECK(count(path, "\"name\":\"mm\",\"cat\":\"compute\"") == 1, "one mm kernel recorded");
    R_CHECK(count(path, "\"name\":\"add\"") == 0, "add ran after the stop");
    R_CHECK(count(path, "\"name\":\"redistribute\"") >= 1, "redistribute recorded");
    R_CHECK(count(path, "\"cat\":\"comm\"") >= 2, "collectives recorded");
    R_CHECK(count(path, "S(0),S(1) | R,S(0) -> ") == 1, "the strategy is in the detail");
    /* Counters carry the mesh dims of every communicator. */
    dt_comm_stats st;
    R_OK(dt_comm_stats_get(ctx, &st));
    int labelled = 1;
    for (int i = 0; i < st.nentries; i++)
        labelled &= !strcmp(st.entries[i].group, "dp") || !strcmp(st.entries[i].group, "tp") ||
                    !strcmp(st.entries[i].group, "dp+tp");
    R_CHECK(st.nentries > 0 && labelled, "collectives labelled by mesh dims");
    R_ERR(dt_trace_write(ctx, "/nonexistent-dir/x.json"), DT_ERR_SYSTEM, "nonexistent");
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(c), dt_tensor_release(d);
    dt_tensor_release(e);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(trace, record_write_merge) {
    snprintf(dir, sizeof dir, "/tmp/dt_trace_XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    char cmd[512];
    t_run(4, trace_body, NULL);
    char paths[4][512], out[512];
    const char *p[4];
    for (int r = 0; r < 4; r++) {
        snprintf(paths[r], sizeof paths[r], "%s/t.rank%d.json", dir, r);
        p[r] = paths[r];
    }
    snprintf(out, sizeof out, "%s/merged.json", dir);
    cr_assert_eq(dt_trace_merge(p, 4, out), DT_OK, "%s", dt_last_error());
    for (int r = 0; r < 4; r++) {
        char needle[64];
        snprintf(needle, sizeof needle, "\"args\":{\"name\":\"rank %d\"}", r);
        cr_assert_eq(count(out, needle), 1, "rank %d's process row", r);
    }
    cr_assert_eq(count(out, "\"name\":\"thread_name\""), 12, "3 rows per rank");
    cr_assert_eq(count(out, "\"name\":\"mm\",\"cat\":\"ops\""), 4);
    /* Every line but the brackets is one event object; only the last has no comma. */
    cr_assert_eq(count(out, "},"), count(out, "{\"name\"") - 1);
    char html[512];
    snprintf(html, sizeof html, "%s/t.html", dir);
    cr_assert_eq(dt_trace_render_html(out, html), DT_OK, "%s", dt_last_error());
    cr_assert_gt(count(html, "<rect class=\"ev comm\""), 0);
    const char *missing[1] = {"/nonexistent.json"};
    T_ERR(dt_trace_merge(missing, 1, out), DT_ERR_ARG, "nonexistent");
    T_ERR(dt_trace_render_html("/nonexistent.json", html), DT_ERR_ARG, "nonexistent");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
