/* Propagation rows (tools/explain.h): read from a table, answered by an engine (dt_op_choose
 * here; dispatch on real ranks in the conformance test), compared with the row's answers.
 * A row passes when the output placements and the collectives the inputs' redistributions
 * issue are one of the listed minimum-cost answers (tests/conformance/README.md). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "explain.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status try_st_ = (call);                                                                \
        if (try_st_ != DT_OK) return try_st_;                                                      \
    } while (0)

static void trim(char *s) {
    size_t a = strspn(s, " \t"), n = strlen(s);
    while (n > a && (s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        n--;
    memmove(s, s + a, n - a);
    s[n - a] = '\0';
}

/* Splits text at ';' into at most max trimmed parts (in place); returns how many. */
static int split_inputs(char *text, char **parts, int max) {
    int n = 0;
    for (char *save, *p = strtok_r(text, ";", &save); p; p = strtok_r(NULL, ";", &save)) {
        if (n == max) return max + 1;
        trim(p);
        parts[n++] = p;
    }
    return n;
}

static dt_status parse_shape(const char *text, dt_spec *s) {
    s->ndim = 0;
    const char *p = text;
    if (*p == '(') p++;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == ')' || !*p) break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0)
            return dt_error_set(DT_ERR_PARSE, "input shape \"%s\" is not a list of sizes", text);
        if (s->ndim == DT_MAX_NDIM)
            return dt_error_set(DT_ERR_PARSE, "input shape \"%s\" has more than %d dims", text,
                                DT_MAX_NDIM);
        s->shape[s->ndim++] = v;
        for (p = end; *p == ' '; p++) {
        }
        if (*p == ',' || *p == 'x') p++;
    }
    return DT_OK;
}

dt_status explain_row_parse(explain_row *r, const char *op_text, const char *mesh,
                            const char *shapes, const char *placements, const char *dtypes) {
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    snprintf(r->op_text, sizeof r->op_text, "%s", op_text);
    snprintf(r->mesh_text, sizeof r->mesh_text, "%s", mesh);
    snprintf(r->shapes, sizeof r->shapes, "%s", shapes);
    snprintf(r->placements, sizeof r->placements, "%s", placements);
    TRY(dt_mesh_parse(mesh, r->mesh_shape, names, &r->mesh_ndim));
    char sbuf[256], pbuf[256], dbuf[256];
    char *sp[DT_OP_MAX_USER_INPUTS + 1], *pp[DT_OP_MAX_USER_INPUTS + 1],
        *dp[DT_OP_MAX_USER_INPUTS + 1];
    snprintf(sbuf, sizeof sbuf, "%s", shapes);
    snprintf(pbuf, sizeof pbuf, "%s", placements);
    snprintf(dbuf, sizeof dbuf, "%s", dtypes ? dtypes : "");
    int ns = split_inputs(sbuf, sp, DT_OP_MAX_USER_INPUTS);
    int np = split_inputs(pbuf, pp, DT_OP_MAX_USER_INPUTS);
    int nd = split_inputs(dbuf, dp, DT_OP_MAX_USER_INPUTS);
    if (ns < 1 || ns > DT_OP_MAX_USER_INPUTS)
        return dt_error_set(DT_ERR_PARSE, "input shapes \"%s\": 1 to %d inputs, ' ; ' between",
                            shapes, DT_OP_MAX_USER_INPUTS);
    if (np != ns || (nd && nd != ns))
        return dt_error_set(DT_ERR_PARSE, "%d input shapes but %d placements%s", ns, np,
                            nd && nd != ns ? " and another count of dtypes" : "");
    r->n = ns;
    for (int i = 0; i < ns; i++) {
        dt_spec *s = &r->in[i];
        *s = (dt_spec){.dtype = DT_F32};
        TRY(parse_shape(sp[i], s));
        dt_status st = dt_placements_parse(pp[i], s->placements, DT_MESH_MAX_NDIM, &s->nplacements);
        if (st != DT_OK) return st;
        if (s->nplacements != r->mesh_ndim)
            return dt_error_set(DT_ERR_PLACEMENT, "input %d: %d placements (%s) on a %d-D mesh", i,
                                s->nplacements, pp[i], r->mesh_ndim);
    }
    TRY(explain_call_parse(op_text, r->n, r->in, &r->call));
    for (int i = 0; i < ns; i++) {
        if (nd)
            TRY(dt_dtype_parse(dp[i], &r->in[i].dtype));
        else
            r->in[i].dtype = explain_call_input_dtype(&r->call, i);
    }
    return DT_OK;
}

/* ---- engines ------------------------------------------------------------------------------ */

void explain_seen_add_plan(explain_seen *seen, const dt_plan *plan) {
    for (int i = 0; i < dt_plan_nsteps(plan) && seen->ncoll < EXPLAIN_MAX_COLL; i++) {
        dt_plan_step s;
        dt_plan_step_get(plan, i, &s);
        if (s.kind != DT_STEP_ALL_GATHER && s.kind != DT_STEP_ALL_TO_ALL &&
            s.kind != DT_STEP_ALL_REDUCE && s.kind != DT_STEP_REDUCE_SCATTER)
            continue;
        char *c = seen->coll[seen->ncoll++];
        int o = snprintf(c, 64, "%s[", dt_step_kind_name(s.kind));
        for (int m = 0, first = 1; m < DT_MESH_MAX_NDIM && o < 60; m++)
            if (s.mesh_mask & (1u << m)) {
                o += snprintf(c + o, (size_t)(64 - o), "%sdim%d", first ? "" : "+", m);
                first = 0;
            }
        snprintf(c + o, (size_t)(64 - o), "]");
    }
}

dt_status explain_engine_choose(const explain_row *r, explain_seen *seen, void *user) {
    const dt_cost_model *model = user;
    const dt_spec *in[DT_OP_MAX_USER_INPUTS];
    for (int i = 0; i < r->n; i++)
        in[i] = &r->in[i];
    if (r->call.form == EXPLAIN_IDENTITY) { /* dt_t of a 1-D tensor: x itself */
        if (r->n != 1) return dt_error_set(DT_ERR_ARG, "t takes 1 input, got %d", r->n);
        memcpy(seen->out, r->in[0].placements, sizeof(dt_placement) * (size_t)r->mesh_ndim);
        seen->out_dtype = r->in[0].dtype, seen->out_ndim = r->in[0].ndim;
        memcpy(seen->out_shape, r->in[0].shape, sizeof(int64_t) * (size_t)r->in[0].ndim);
        return dt_placements_normalize(seen->out, r->mesh_ndim, r->in[0].ndim);
    }
    if (r->call.form != EXPLAIN_OP)
        return dt_error_set(DT_ERR_UNSUPPORTED, "%s runs several ops or none: no single strategy",
                            explain_call_name(&r->call));
    dt_op_choice c;
    TRY(dt_op_choose(r->call.op, r->mesh_ndim, r->mesh_shape, in, r->n, &r->call.args, model, &c));
    memcpy(seen->out, c.output, sizeof c.output);
    seen->out_dtype = c.out_dtype, seen->out_ndim = c.out_ndim;
    memcpy(seen->out_shape, c.out_shape, sizeof c.out_shape);
    for (int i = 0; i < r->n; i++) {
        if (!c.changed[i]) continue;
        dt_plan *plan;
        TRY(dt_plan_create(r->mesh_ndim, r->mesh_shape, r->in[i].ndim, r->in[i].shape,
                           r->in[i].dtype, r->in[i].placements, c.inputs[i], model, &plan));
        explain_seen_add_plan(seen, plan);
        dt_plan_release(plan);
    }
    return DT_OK;
}

/* ---- comparing -------------------------------------------------------------------------- */

/* The collectives an alternative lists: every "[...]" after "->", except "[local]". */
static int expected_collectives(const char *alt, char list[][64], int max) {
    int n = 0;
    for (const char *p = strstr(alt, "->"); p; p = strstr(p + 1, "->")) {
        const char *b = strchr(p, '[');
        if (!b) break;
        int depth = 0;
        const char *e = b;
        for (; *e; e++) {
            depth += (*e == '[') - (*e == ']');
            if (!depth) break;
        }
        if (!*e) break;
        char inner[256];
        snprintf(inner, sizeof inner, "%.*s", (int)(e - b - 1), b + 1);
        /* "a;b" inside one bracket: several collectives for one input */
        for (char *save, *tok = strtok_r(inner, ";", &save); tok && n < max;
             tok = strtok_r(NULL, ";", &save)) {
            trim(tok);
            if (strcmp(tok, "local") != 0) snprintf(list[n++], 64, "%s", tok);
        }
        p = e;
    }
    return n;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(a, b);
}

static int same_lists(char a[][64], int na, char b[][64], int nb) {
    if (na != nb) return 0;
    qsort(a, (size_t)na, 64, cmp_str);
    qsort(b, (size_t)nb, 64, cmp_str);
    for (int i = 0; i < na; i++)
        if (strcmp(a[i], b[i])) return 0;
    return 1;
}

/* 1 when what was seen is one of the row's alternatives. */
static int matches(const explain_row *r, const explain_seen *seen) {
    char got[128], redist[1024];
    dt_placements_format(seen->out, r->mesh_ndim, got, sizeof got);
    snprintf(redist, sizeof redist, "%s", r->want_redist);
    for (char *alt = redist, *next; alt; alt = next) {
        next = strstr(alt, " OR ");
        if (next) *next = '\0', next += 4;
        char want_out[256];
        snprintf(want_out, sizeof want_out, "%s", r->want_out);
        if (alt[0] == '[' && strchr(alt, ']')) { /* "[S(1)] in1: ..." names this one's output */
            char *close = strchr(alt, ']');
            snprintf(want_out, sizeof want_out, "%.*s", (int)(close - alt - 1), alt + 1);
            alt = close + 1;
        }
        /* MaskP(sum) (PyTorch's masked partial of an embedding lookup) is our P(sum). */
        for (char *m; (m = strstr(want_out, "MaskP"));)
            memmove(m, m + 4, strlen(m + 4) + 1);
        int out_ok = 0;
        for (char *o = want_out, *on; o && !out_ok; o = on) {
            on = strstr(o, " OR ");
            if (on) *on = '\0', on += 4;
            trim(o);
            out_ok = !strcmp(o, got);
        }
        while (*alt == ' ')
            alt++;
        char want[EXPLAIN_MAX_COLL][64], have[EXPLAIN_MAX_COLL][64];
        int nw =
            strncmp(alt, "none", 4) == 0 ? 0 : expected_collectives(alt, want, EXPLAIN_MAX_COLL);
        memcpy(have, seen->coll, sizeof have);
        int coll_ok =
            seen->kinds_only ? nw == seen->ncoll : same_lists(have, seen->ncoll, want, nw);
        if (out_ok && coll_ok) return 1;
    }
    return 0;
}

/* ---- the table -------------------------------------------------------------------------- */

enum { C_ID, C_OP, C_SHAPES, C_PLACEMENTS, C_OUT, C_REDIST, C_MESH, C_DTYPES, C_COUNT };
static const char *const column_names[C_COUNT] = {"id",
                                                  "op",
                                                  "input_shapes",
                                                  "input_placements",
                                                  "expected_output_placements",
                                                  "expected_input_redistribution",
                                                  "mesh_shape",
                                                  "input_dtypes"};

static int split_tabs(char *line, char **cols, int max) {
    int n = 0;
    for (char *p = line; p && n < max;) {
        cols[n++] = p;
        char *tab = strchr(p, '\t');
        if (tab) *tab = '\0';
        p = tab ? tab + 1 : NULL;
    }
    for (int i = 0; i < n; i++)
        trim(cols[i]);
    return n;
}

/* One row: its line on out, and the verdict counted. */
static void check_row(const char *path, explain_row *r, char **cols, const int *at,
                      explain_engine engine, void *user, int strict, FILE *out, explain_totals *t) {
    const char *dtypes = at[C_DTYPES] >= 0 ? cols[at[C_DTYPES]] : NULL;
    if (dtypes && !*dtypes) dtypes = NULL;
    t->rows++;
    explain_seen seen = {0};
    dt_status st = explain_row_parse(r, cols[at[C_OP]], cols[at[C_MESH]], cols[at[C_SHAPES]],
                                     cols[at[C_PLACEMENTS]], dtypes);
    if (st == DT_OK) st = engine(r, &seen, user);
    if (st == DT_ERR_UNSUPPORTED) {
        t->skipped++;
        if (strict)
            fprintf(out, "%s:%d: %s %s: skipped (an error with --strict): %s\n", path, r->line,
                    r->id, r->op_text, dt_last_error());
        else
            fprintf(out, "%s %s: skipped: %s\n", r->id, r->op_text, dt_last_error());
        return;
    }
    if (st != DT_OK) {
        t->errors++;
        fprintf(out, "%s:%d: %s %s: error: %s (%s)\n", path, r->line, r->id, r->op_text,
                dt_last_error(), dt_status_str(st));
        return;
    }
    if (matches(r, &seen)) {
        t->passed++;
        fprintf(out, "%s %s: pass\n", r->id, r->op_text);
        return;
    }
    t->differ++;
    char got[128], coll[EXPLAIN_MAX_COLL * 66] = "";
    dt_placements_format(seen.out, r->mesh_ndim, got, sizeof got);
    for (int c = 0; c < seen.ncoll; c++) {
        strcat(coll, c ? ";" : "");
        strcat(coll, seen.coll[c]);
    }
    fprintf(out, "%s:%d: %s %s (%s on %s): differs: got %s with %s, expected %s with %s\n", path,
            r->line, r->id, r->op_text, r->placements, r->mesh_text, got,
            seen.ncoll ? coll : "none", r->want_out, r->want_redist);
}

int explain_check_file(const char *path, explain_engine engine, void *user, int strict, FILE *out,
                       explain_totals *totals) {
    explain_totals t = {0};
    if (totals) *totals = t; /* set on every return: a caller may print them */
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(out, "%s: cannot open it: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    int at[C_COUNT], lineno = 0, header = 0, rc = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        char *cols[64];
        char *first = line + strspn(line, " \t");
        if (*first == '#' || *first == '\n' || *first == '\r' || !*first) continue;
        int nc = split_tabs(line, cols, 64);
        if (!header) { /* the header row names the columns */
            char missing[512] = "";
            for (int c = 0; c < C_COUNT; c++) {
                at[c] = -1;
                for (int k = 0; k < nc; k++)
                    if (!strcmp(cols[k], column_names[c])) at[c] = k;
                if (at[c] < 0 && c != C_DTYPES) {
                    strcat(missing, *missing ? ", " : "");
                    strcat(missing, column_names[c]);
                }
            }
            if (*missing) {
                fprintf(out,
                        "%s:%d: the header row lacks the column(s) %s (tab-separated, as in "
                        "tests/conformance/propagation_cases.tsv)\n",
                        path, lineno, missing);
                rc = 2;
                break;
            }
            header = 1;
            continue;
        }
        int need = 0;
        for (int c = 0; c < C_COUNT; c++)
            need = at[c] >= need ? at[c] + 1 : need;
        while (nc < need)
            cols[nc++] = ""; /* trailing empty columns */
        explain_row r = {.line = lineno};
        snprintf(r.id, sizeof r.id, "%s", cols[at[C_ID]]);
        snprintf(r.op_text, sizeof r.op_text, "%s", cols[at[C_OP]]);
        snprintf(r.want_out, sizeof r.want_out, "%s", cols[at[C_OUT]]);
        snprintf(r.want_redist, sizeof r.want_redist, "%s", cols[at[C_REDIST]]);
        check_row(path, &r, cols, at, engine, user, strict, out, &t);
    }
    int read_error = ferror(f) ? errno : 0; /* a directory opens, then fails to read */
    free(line);
    fclose(f);
    if (read_error && !rc) {
        fprintf(out, "%s: cannot read it: %s\n", path, strerror(read_error));
        rc = 2;
    } else if (!header && !rc) {
        fprintf(out, "%s: no header row (an empty table, or not a tab-separated one)\n", path);
        rc = 2;
    } else if (!rc && !t.rows) {
        fprintf(out, "%s:%d: the table has a header row but no rows\n", path, lineno);
        rc = 2;
    }
    if (!rc) {
        fprintf(out, "%s: %d rows: %d pass, %d differ, %d skipped, %d errors\n", path, t.rows,
                t.passed, t.differ, t.skipped, t.errors);
        rc = t.differ || t.errors || (strict && t.skipped) ? 1 : 0;
    }
    if (totals) *totals = t;
    return rc;
}
