/* Every row of ../shared/conformance/propagation_cases.tsv whose op dtensor has: the output
 * placements dispatch picks and the collectives its input redistributions issue must be one
 * of the listed minimum-cost answers. The rows are read and checked by the code of
 * dtensor-explain --cases (tools/explain_cases.c), answered twice: by dt_op_choose without
 * ranks, and by dispatch on real local ranks, which must also agree with dt_op_choose exactly;
 * calls that are not one op (composites, unbind, the like-factories, ...) are run and their
 * collectives counted (tools/explain_run.c, as dtensor-explain does). Rows for ops dtensor does
 * not have are printed with the reason. */
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

static dt_status prop_body(dt_ctx *ctx, void *arg) {
    prun *p = arg;
    const explain_row *r = p->r;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh_text, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    dt_tensor *in[DT_OP_MAX_USER_INPUTS] = {0};
    for (int i = 0; i < r->n; i++)
        R_OK(explain_input_make(mesh, r, i, &in[i]));
    int me = dt_ctx_rank(ctx) == 0; /* rank 0 reports */
    dt_placement want[DT_OP_MAX_USER_INPUTS * DT_MESH_MAX_NDIM], out[DT_MESH_MAX_NDIM];
    const explain_call *call = &r->call;
    dt_status st = call->form == EXPLAIN_OP
                       ? dt_op_strategy(call->op, in, r->n, &call->args, want, out)
                       : DT_ERR_UNSUPPORTED;
    if (st == DT_ERR_UNSUPPORTED) { /* several ops or none: run it, count what it issues */
        R_OK(explain_call_run(ctx, r, in, p->seen));
    } else {
        R_OK(st);
        const dt_spec *specs[DT_OP_MAX_USER_INPUTS];
        for (int i = 0; i < r->n; i++)
            specs[i] = &r->in[i];
        dt_op_choice c;
        R_OK(dt_op_choose(call->op, r->mesh_ndim, r->mesh_shape, specs, r->n, &call->args, NULL,
                          &c));
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

/* The calls that are not one op (tools/explain_forms.c) read back as themselves, and mean
 * what their C call means: t is dt_t (the identity below 2 dims, an error above). */
Test(propagation, call_forms_read_back) {
    dt_spec x = {.dtype = DT_F32, .ndim = 2, .shape = {4, 6}, .nplacements = 1};
    explain_call calls[] = {
        {.form = EXPLAIN_UNBIND, .dim = 1},
        {.form = EXPLAIN_SPLIT, .dim = -1, .nsizes = 3, .sizes = {1, 2, 3}},
        {.form = EXPLAIN_ZEROS_LIKE},
        {.form = EXPLAIN_ONES_LIKE},
        {.form = EXPLAIN_EMPTY_LIKE},
        {.form = EXPLAIN_FULL_LIKE, .value = -2.5},
        {.form = EXPLAIN_NEW_FULL, .nsizes = 3, .sizes = {2, 0, 5}, .value = 0.125},
        {.form = EXPLAIN_NEW_FULL, .nsizes = 0, .value = 7},
        {.form = EXPLAIN_CAST, .dtype = DT_BF16},
    };
    int forms[EXPLAIN_FORM_COUNT] = {[EXPLAIN_OP] = 1, [EXPLAIN_IDENTITY] = 1};
    for (size_t i = 0; i < DT_COUNT_OF(calls); i++) {
        char text[256], again[256];
        cr_assert_eq(explain_call_format(&calls[i], text, sizeof text), DT_OK, "%s",
                     dt_last_error());
        explain_call back;
        cr_assert_eq(explain_call_parse(text, 1, &x, &back), DT_OK, "\"%s\": %s", text,
                     dt_last_error());
        cr_assert_eq(back.form, calls[i].form, "\"%s\" reads back as %s", text,
                     explain_call_name(&back));
        cr_assert_eq(explain_call_format(&back, again, sizeof again), DT_OK);
        cr_assert_str_eq(again, text, "\"%s\" reads back as \"%s\"", text, again);
        forms[calls[i].form] = 1;
    }
    for (int f = 0; f < EXPLAIN_FORM_COUNT; f++)
        cr_expect(forms[f], "form %d is not read back here", f);

    /* t as dt_t: 0-D and 1-D as is, 2-D transpose(0,1), 3-D an error; torch's spellings. */
    explain_call c;
    dt_spec v = {.dtype = DT_F32, .ndim = 1, .shape = {8}, .nplacements = 1};
    dt_spec s0 = {.dtype = DT_F32, .ndim = 0, .nplacements = 1};
    dt_spec t3 = {.dtype = DT_F32, .ndim = 3, .shape = {2, 3, 4}, .nplacements = 1};
    cr_assert_eq(explain_call_parse("t", 1, &v, &c), DT_OK, "%s", dt_last_error());
    cr_expect_eq(c.form, EXPLAIN_IDENTITY, "t of a 1-D tensor is not the identity");
    cr_assert_eq(explain_call_parse("t", 1, &s0, &c), DT_OK);
    cr_expect_eq(c.form, EXPLAIN_IDENTITY, "t of a 0-D tensor is not the identity");
    cr_assert_eq(explain_call_parse("t", 1, &x, &c), DT_OK);
    cr_expect(c.form == EXPLAIN_OP && c.op == DT_OP_TRANSPOSE && c.args.dim == 0 &&
                  c.args.dim2 == 1,
              "t of a 2-D tensor is not transpose(0,1)");
    cr_expect_neq(explain_call_parse("t", 1, &t3, &c), DT_OK, "t of a 3-D tensor read");
    cr_expect_neq(explain_call_parse("t(0,1)", 1, &x, &c), DT_OK, "t with arguments read");
    cr_assert_eq(explain_call_parse("broadcast_to(3,4,6)", 1, &x, &c), DT_OK);
    cr_expect(c.form == EXPLAIN_OP && c.op == DT_OP_EXPAND && c.args.shape_ndim == 3 &&
                  c.args.shape[0] == 3,
              "broadcast_to is not expand");
    cr_assert_eq(explain_call_parse("split(dim=1,size=4)", 1, &x, &c), DT_OK, "%s",
                 dt_last_error());
    cr_expect(c.form == EXPLAIN_SPLIT && c.nsizes == 2 && c.sizes[0] == 4 && c.sizes[1] == 2,
              "split(size=4) of 6 is not pieces of 4 and 2");
    dt_spec ln = {.dtype = DT_F32, .ndim = 3, .shape = {2, 8, 10}, .nplacements = 1};
    cr_assert_eq(explain_call_parse("layer_norm(normalized_shape=[8,10],eps=1e-5)", 1, &ln, &c),
                 DT_OK, "%s", dt_last_error());
    cr_expect(c.form == EXPLAIN_OP && c.op == DT_OP_LAYER_NORM && c.args.ndims == 2,
              "normalized_shape=[8,10] is not last=2");
    cr_expect_neq(explain_call_parse("layer_norm(normalized_shape=[8,9])", 1, &ln, &c), DT_OK,
                  "a normalized_shape that is not the input's last sizes read");
    cr_expect_neq(explain_call_parse("new_full(value=1)", 1, &x, &c), DT_OK,
                  "new_full without a shape read");
    cr_expect_neq(explain_call_parse("ones_like(2)", 1, &x, &c), DT_OK, "ones_like(2) read");
}
