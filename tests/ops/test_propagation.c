/* Every row of ../shared/conformance/propagation_cases.tsv whose op dtensor has: the output
 * placements dispatch picks and the collectives its input redistributions issue must be one
 * of the listed minimum-cost answers. The rows are read and checked by the code of
 * dtensor-explain --cases (tools/explain_cases.c), answered twice: by dt_op_choose without
 * ranks (what the tool runs), and by dispatch on real local ranks, which must also agree with
 * dt_op_choose exactly. Rows for ops dtensor does not have are printed with the reason. */
#include <stdlib.h>
#include <string.h>

#include "../../tools/explain.h"
#include "helpers.h"

static void conformance_path(char *path, size_t cap) {
    FILE *f = t_open_conformance("propagation_cases.tsv", path, cap);
    cr_assert(f, "cannot open %s", path);
    fclose(f);
}

/* Runs the table with engine and logs its lines; differences fail the test. */
static void check_table(const char *path, explain_engine engine, int min_pass) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    explain_totals t;
    int rc = explain_check_file(path, engine, NULL, 0, out, &t);
    fclose(out);
    for (char *save, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, ": differs: ") || strstr(line, ": error: "))
            cr_log_error("%s", line);
        else
            cr_log_info("%s", line);
    }
    free(text);
    cr_assert_neq(rc, 2, "%s cannot be used as a table (see the log)", path);
    cr_assert_eq(rc, 0, "%d of %d propagation rows differ, %d failed (see the log)", t.differ,
                 t.rows, t.errors);
    cr_assert_geq(t.passed, min_pass, "only %d rows passed", t.passed);
}

/* ---- the engine of real ranks: dispatch on the local runtime ------------------------------ */

typedef struct prun {
    const explain_row *r;
    explain_seen *seen;
} prun;

/* Index inputs (embedding ids, class labels) hold valid ids. */
static int64_t index_range(const explain_row *r) {
    const dt_spec *x = &r->in[0];
    if (r->op == DT_OP_EMBEDDING) return x->shape[0];
    if (r->op == DT_OP_CROSS_ENTROPY && x->ndim > 1) return x->shape[1];
    if (r->op == DT_OP_PICK && x->ndim > 0) return x->shape[x->ndim - 1];
    if (r->op == DT_OP_GATHER) {
        int d = r->args.dim < 0 ? r->args.dim + x->ndim : r->args.dim;
        return d >= 0 && d < x->ndim ? x->shape[d] : 1;
    }
    if (r->op == DT_OP_ONE_HOT && r->args.k > 0) return r->args.k;
    return 1;
}

static dt_status prop_body(dt_ctx *ctx, void *arg) {
    prun *p = arg;
    const explain_row *r = p->r;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh_text, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    dt_tensor *in[DT_OP_MAX_USER_INPUTS] = {0};
    for (int i = 0; i < r->n; i++) {
        const dt_spec *s = &r->in[i];
        size_t n = 1;
        for (int d = 0; d < s->ndim; d++)
            n *= (size_t)s->shape[d];
        int index = s->dtype == DT_I64 || s->dtype == DT_I32;
        double *v = malloc(n * sizeof *v + 8);
        void *buf = malloc(n * 8 + 8);
        for (size_t k = 0; k < n; k++)
            v[k] = index ? (double)((int64_t)k % index_range(r)) : t_value((uint64_t)i + 1, k) / 8;
        R_OK(dt_convert_from_f64(s->dtype, v, buf, n));
        R_OK(dt_tensor_distribute(mesh, buf, s->dtype, s->ndim, s->shape, s->nplacements,
                                  s->placements, DT_ALL_RANKS, &in[i]));
        free(buf), free(v);
    }
    int me = dt_ctx_rank(ctx) == 0; /* rank 0 reports */
    dt_placement want[DT_OP_MAX_USER_INPUTS * DT_MESH_MAX_NDIM], out[DT_MESH_MAX_NDIM];
    dt_status st = dt_op_strategy(r->op, in, r->n, &r->args, want, out);
    if (st == DT_ERR_UNSUPPORTED) { /* built from other ops: run it and count what it issues */
        dt_tensor *o;
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_op_call(r->op, in, r->n, &r->args, &o));
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(o, &info));
        dt_comm_stats s;
        R_OK(dt_comm_stats_get(ctx, &s));
        if (me) memcpy(p->seen->out, info.placements, sizeof info.placements);
        p->seen->kinds_only = 1;
        for (int e = 0; me && e < s.nentries; e++)
            for (uint64_t c = 0; c < s.entries[e].calls && p->seen->ncoll < EXPLAIN_MAX_COLL; c++)
                snprintf(p->seen->coll[p->seen->ncoll++], 64, "%s[?]",
                         dt_coll_kind_name(s.entries[e].kind));
        dt_tensor_release(o);
    } else {
        R_OK(st);
        const dt_spec *specs[DT_OP_MAX_USER_INPUTS];
        for (int i = 0; i < r->n; i++)
            specs[i] = &r->in[i];
        dt_op_choice c;
        R_OK(dt_op_choose(r->op, r->mesh_ndim, r->mesh_shape, specs, r->n, &r->args, NULL, &c));
        for (int m = 0; m < mnd; m++) {
            R_CHECK(dt_placement_equal(out[m], c.output[m]),
                    "%s: dispatch and dt_op_choose "
                    "differ on the output's mesh dim %d",
                    r->id, m);
            for (int i = 0; i < r->n; i++)
                R_CHECK(dt_placement_equal(want[i * mnd + m], c.inputs[i][m]),
                        "%s: dispatch and "
                        "dt_op_choose differ on input %d, mesh dim %d",
                        r->id, i, m);
        }
        if (me) memcpy(p->seen->out, out, sizeof(dt_placement) * (size_t)mnd);
        for (int i = 0; me && i < r->n; i++) {
            const dt_plan *plan; /* the plan dispatch's redistribution runs */
            R_OK(dt_tensor_redistribute_plan(in[i], mnd, want + i * mnd, &plan));
            explain_seen_add_plan(p->seen, plan);
        }
    }
    for (int i = 0; i < r->n; i++)
        dt_tensor_release(in[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

static dt_status engine_ranks(const explain_row *r, explain_seen *seen, void *user) {
    (void)user;
    int nranks = 1;
    for (int m = 0; m < r->mesh_ndim; m++)
        nranks *= r->mesh_shape[m];
    prun p = {.r = r, .seen = seen};
    return dt_local_run(nranks, prop_body, &p, NULL);
}

Test(propagation, conformance_rows_without_ranks) {
    char path[512];
    conformance_path(path, sizeof path);
    check_table(path, explain_engine_choose, 48);
}

Test(propagation, conformance_rows_on_ranks) {
    char path[512];
    conformance_path(path, sizeof path);
    check_table(path, engine_ranks, 50);
}

/* The repository's copy: the shared rows plus rows of our own (D*, V*, ...), which only real
 * ranks answer for ops built from other ops (var, std, cross_entropy). */
Test(propagation, repository_rows_on_ranks) {
    const char *src = getenv("DT_SOURCE_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/tests/conformance/propagation_cases.tsv", src ? src : "..");
    check_table(path, engine_ranks, 80);
}

/* The op text map (tools/explain_ops.c) has a form for every op, which reads back as that op
 * with the same arguments. */
Test(propagation, op_text_covers_every_op) {
    dt_op_args rich = {.scalar = 0.5,
                       .dims = {1, 0},
                       .ndims = 2,
                       .keepdim = 1,
                       .dim = 1,
                       .dim2 = 0,
                       .start = 1,
                       .end = 3,
                       .shape = {4, -1},
                       .shape_ndim = 2,
                       .causal = 1,
                       .use_ignore_index = 1,
                       .ignore_index = 7,
                       .k = 3,
                       .smallest = 1};
    dt_spec x = {.dtype = DT_F32, .ndim = 3, .shape = {4, 6, 8}, .nplacements = 1};
    for (int op = 0; op < DT_OP_COUNT; op++) {
        char text[256], again[256];
        cr_assert_eq(explain_op_format((dt_op)op, &rich, text, sizeof text), DT_OK,
                     "op %d (%s): %s", op, dt_op_name((dt_op)op), dt_last_error());
        dt_op back;
        dt_op_args a;
        cr_assert_eq(explain_op_parse(text, 1, &x, &back, &a), DT_OK, "\"%s\": %s", text,
                     dt_last_error());
        cr_assert_eq(back, (dt_op)op, "\"%s\" reads back as %s", text, dt_op_name(back));
        cr_assert_eq(explain_op_format(back, &a, again, sizeof again), DT_OK);
        cr_assert_str_eq(again, text, "\"%s\" reads back as \"%s\"", text, again);
    }
}

/* A table that cannot be opened or read, or holds no rows, is an error naming the file, with
 * every total zero (they were left unset, and printed as 538976288). */
static void expect_unusable(const char *path, const char *why) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    explain_totals t;
    memset(&t, 0x20, sizeof t); /* what an unset stack slot held */
    int rc = explain_check_file(path, explain_engine_choose, NULL, 0, out, &t);
    fclose(out);
    cr_expect_eq(rc, 2, "%s: exit %d, expected 2", path, rc);
    cr_expect(text && strstr(text, path) && strstr(text, why), "%s: \"%s\" does not say \"%s\"",
              path, text ? text : "", why);
    cr_expect(t.rows == 0 && t.passed == 0 && t.differ == 0 && t.skipped == 0 && t.errors == 0,
              "%s: totals %d rows, %d passed, %d differ, %d skipped, %d errors", path, t.rows,
              t.passed, t.differ, t.skipped, t.errors);
    free(text);
}

Test(propagation, unusable_tables_are_errors) {
    char dir[] = "/tmp/dt_tables_XXXXXX", empty[64], header[64];
    cr_assert(mkdtemp(dir));
    snprintf(empty, sizeof empty, "%s/empty.tsv", dir);
    snprintf(header, sizeof header, "%s/header.tsv", dir);
    FILE *f = fopen(empty, "w");
    fclose(f);
    f = fopen(header, "w");
    fputs("# only a header\nid\top\tinput_shapes\tinput_placements\texpected_output_placements"
          "\texpected_input_redistribution\tmesh_shape\n",
          f);
    fclose(f);
    expect_unusable("/nonexistent/rows.tsv", "cannot open it");
    expect_unusable(dir, "cannot read it");
    expect_unusable(empty, "no header row");
    expect_unusable(header, "no rows");
    remove(empty), remove(header), remove(dir);
}
