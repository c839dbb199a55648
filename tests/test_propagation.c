/* Every row of ../shared/conformance/propagation_cases.tsv whose op dtensor has: the output
 * placements dispatch picks and the collectives its input redistributions issue must be one
 * of the listed minimum-cost answers. Rows for ops dtensor does not have are printed with the
 * reason. MaskP(sum) (PyTorch's masked partial of an embedding lookup) is our P(sum). */
#include <ctype.h>
#include <stdlib.h>

#include "helpers.h"

typedef struct prow {
    char id[16], op[64], shapes[128], placements[128], out[128], redist[512], mesh[16];
} prow;

static int read_prows(prow *rows, int cap) {
    char path[512], line[4096];
    FILE *f = t_open_conformance("propagation_cases.tsv", path, sizeof path);
    cr_assert(f, "cannot open %s", path);
    int n = 0;
    fgets(line, sizeof line, f);
    while (n < cap && fgets(line, sizeof line, f)) {
        char *c[10];
        if (t_split_tabs(line, c, 10) < 9) continue;
        prow *r = &rows[n++];
        snprintf(r->id, sizeof r->id, "%s", c[0]);
        snprintf(r->op, sizeof r->op, "%s", c[1]);
        snprintf(r->shapes, sizeof r->shapes, "%s", c[2]);
        snprintf(r->placements, sizeof r->placements, "%s", c[3]);
        snprintf(r->out, sizeof r->out, "%s", c[4]);
        snprintf(r->redist, sizeof r->redist, "%s", c[5]);
        snprintf(r->mesh, sizeof r->mesh, "%s", c[8]);
    }
    fclose(f);
    return n;
}

/* Maps the row's op text to an op and its arguments; 0 with a reason when dtensor lacks it. */
static int map_op(const char *text, const int64_t *shape0, dt_op *op, dt_op_args *a,
                  const char **why) {
    memset(a, 0, sizeof *a);
    int64_t v[8];
    int nv = 0;
    const char *arrow = strstr(text, "->");
    if (!strcmp(text, "mm")) *op = DT_OP_MM;
    else if (!strcmp(text, "addmm")) *op = DT_OP_ADDMM;
    else if (!strcmp(text, "bmm")) *op = DT_OP_BMM;
    else if (!strcmp(text, "t")) *op = DT_OP_TRANSPOSE, a->dim = 0, a->dim2 = 1;
    else if (!strcmp(text, "add")) *op = DT_OP_ADD;
    else if (!strcmp(text, "mul")) *op = DT_OP_MUL;
    else if (!strcmp(text, "mul(scalar)")) *op = DT_OP_MUL_SCALAR, a->scalar = 2;
    else if (!strcmp(text, "add(scalar)")) *op = DT_OP_ADD_SCALAR, a->scalar = 2;
    else if (!strcmp(text, "minimum")) *op = DT_OP_MINIMUM;
    else if (!strcmp(text, "maximum")) *op = DT_OP_MAXIMUM;
    else if (!strcmp(text, "relu")) *op = DT_OP_RELU;
    else if (sscanf(text, "mean(dim=%d)", &a->dims[0]) == 1) *op = DT_OP_MEAN, a->ndims = 1;
    else if (sscanf(text, "amax(dim=%d)", &a->dims[0]) == 1) *op = DT_OP_AMAX, a->ndims = 1;
    else if (sscanf(text, "softmax(dim=%d)", &a->dim) == 1) *op = DT_OP_SOFTMAX;
    else if (!strcmp(text, "layer_norm(last)")) *op = DT_OP_LAYER_NORM;
    else if (!strcmp(text, "cross_entropy(mean)")) *op = DT_OP_CROSS_ENTROPY, a->reduction_mean = 1;
    else if (!strcmp(text, "cross_entropy(none)")) *op = DT_OP_CROSS_ENTROPY;
    else if (!strcmp(text, "embedding")) *op = DT_OP_EMBEDDING;
    else if ((!strncmp(text, "view(", 5) || !strncmp(text, "reshape(", 8)) && arrow) {
        *op = DT_OP_VIEW;
        for (const char *p = arrow + 2; *p && *p != ')';) {
            v[nv++] = strtoll(p, (char **)&p, 10);
            if (*p == ',') p++;
        }
        a->shape_ndim = nv;
        memcpy(a->shape, v, sizeof(int64_t) * (size_t)nv);
    } else if (!strncmp(text, "permute(", 8)) {
        *op = DT_OP_PERMUTE;
        for (const char *p = text + 8; *p && *p != ')';) {
            a->dims[a->ndims++] = (int)strtol(p, (char **)&p, 10);
            if (*p == ',') p++;
        }
    } else if (!strcmp(text, "slice([:,8:])")) {
        *op = DT_OP_SLICE, a->dim = 1, a->start = 8, a->end = shape0[1];
    } else {
        *why = "op not in dtensor's op list";
        return 0;
    }
    return 1;
}

/* "all_to_all[dim0]" for each collective of the plan, appended to list. */
static void plan_collectives(const dt_plan *plan, char list[][64], int *n) {
    for (int i = 0; i < dt_plan_nsteps(plan); i++) {
        dt_plan_step s;
        dt_plan_step_get(plan, i, &s);
        if (s.kind > DT_STEP_REDUCE_SCATTER) continue;
        int o = snprintf(list[*n], 64, "%s[", dt_step_kind_name(s.kind));
        for (int m = 0, first = 1; m < 8; m++)
            if (s.mesh_mask & (1u << m)) {
                o += snprintf(list[*n] + o, (size_t)(64 - o), "%sdim%d", first ? "" : "+", m);
                first = 0;
            }
        snprintf(list[*n] + o, (size_t)(64 - o), "]");
        (*n)++;
    }
}

/* The collectives an alternative lists: every "[...]" after "->", except "[local]". */
static int expected_collectives(const char *alt, char list[][64]) {
    int n = 0;
    for (const char *p = strstr(alt, "->"); p; p = strstr(p + 1, "->")) {
        const char *b = strchr(p, '[');
        if (!b) break;
        int depth = 0;
        const char *e = b;
        for (; *e; e++) {
            depth += *e == '[';
            depth -= *e == ']';
            if (!depth) break;
        }
        char inner[256];
        snprintf(inner, sizeof inner, "%.*s", (int)(e - b - 1), b + 1);
        /* "a;b" inside one bracket: several collectives for one input */
        for (char *tok = strtok(inner, ";"); tok; tok = strtok(NULL, ";")) {
            while (*tok == ' ') tok++;
            if (strcmp(tok, "local") != 0) snprintf(list[n++], 64, "%s", tok);
        }
        p = e;
    }
    return n;
}

static int cmp_str(const void *a, const void *b) { return strcmp(a, b); }

static int same_lists(char a[][64], int na, char b[][64], int nb) {
    if (na != nb) return 0;
    qsort(a, (size_t)na, 64, cmp_str);
    qsort(b, (size_t)nb, 64, cmp_str);
    for (int i = 0; i < na; i++)
        if (strcmp(a[i], b[i])) return 0;
    return 1;
}

typedef struct prun {
    const prow *r;
    dt_op op;
    dt_op_args args;
    int n, nd[3];
    int64_t shape[3][8];
    dt_placement pl[3][4];
    char got_out[128], got_coll[8][64];
    int ncoll;
} prun;

static dt_status prop_body(dt_ctx *ctx, void *arg) {
    prun *p = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, p->r->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh), ms[4];
    for (int m = 0; m < mnd; m++) ms[m] = dt_mesh_dim_size(mesh, m);
    dt_tensor *in[3] = {0};
    for (int i = 0; i < p->n; i++) {
        size_t n = 1;
        for (int d = 0; d < p->nd[i]; d++) n *= (size_t)p->shape[i][d];
        int index = (p->op == DT_OP_EMBEDDING || p->op == DT_OP_CROSS_ENTROPY) && i == 1;
        dt_dtype dt = index ? DT_I64 : DT_F32;
        int64_t range = p->op == DT_OP_EMBEDDING ? p->shape[0][0] : p->shape[0][1];
        void *buf = malloc(n * 8 + 8);
        for (size_t k = 0; k < n; k++) {
            if (index) ((int64_t *)buf)[k] = (int64_t)k % range;
            else ((float *)buf)[k] = (float)t_value(i + 1, k) / 8;
        }
        R_OK(dt_tensor_distribute(mesh, buf, dt, p->nd[i], p->shape[i], dt_mesh_ndim(mesh),
                                  p->pl[i], DT_ALL_RANKS, &in[i]));
        free(buf);
    }
    int me = dt_ctx_rank(ctx) == 0; /* rank 0 reports */
    if (p->op == DT_OP_CROSS_ENTROPY) { /* composite: read what ran */
        dt_tensor *out;
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_op_call(p->op, in, p->n, &p->args, &out));
        dt_tensor_info info;
        dt_tensor_info_get(out, &info);
        dt_comm_stats s;
        dt_comm_stats_get(ctx, &s);
        if (me) dt_placements_format(info.placements, mnd, p->got_out, sizeof p->got_out);
        for (int e = 0; me && e < s.nentries; e++)
            for (uint64_t c = 0; c < s.entries[e].calls; c++)
                snprintf(p->got_coll[p->ncoll++], 64, "%s[dim0]",
                         dt_coll_kind_name(s.entries[e].kind));
        dt_tensor_release(out);
    } else {
        dt_placement want[3 * 4], out[4];
        R_OK(dt_op_strategy(p->op, in, p->n, &p->args, want, out));
        if (me) dt_placements_format(out, mnd, p->got_out, sizeof p->got_out);
        for (int i = 0; me && i < p->n; i++) {
            dt_plan *plan;
            R_OK(dt_plan_create(mnd, ms, p->nd[i], p->shape[i], DT_F32, p->pl[i], want + i * mnd,
                                NULL, &plan));
            plan_collectives(plan, p->got_coll, &p->ncoll);
            dt_plan_destroy(plan);
        }
    }
    for (int i = 0; i < p->n; i++) dt_tensor_release(in[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(propagation, conformance_rows) {
    static prow rows[256];
    int n = read_prows(rows, 256), checked = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        prow *r = &rows[i];
        prun p = {.r = r};
        /* inputs: " ; "-separated shapes and placements */
        char shapes[128], pls[128];
        snprintf(shapes, sizeof shapes, "%s", r->shapes);
        snprintf(pls, sizeof pls, "%s", r->placements);
        char *save1, *save2;
        for (char *s = strtok_r(shapes, ";", &save1); s; s = strtok_r(NULL, ";", &save1)) {
            int k = p.n++;
            for (char *q = s; *q;) {
                while (*q == ' ' || *q == '(' || *q == ')') q++;
                if (!*q) break;
                p.shape[k][p.nd[k]++] = strtoll(q, &q, 10);
                if (*q == ',') q++;
            }
        }
        int k = 0;
        for (char *s = strtok_r(pls, ";", &save2); s; s = strtok_r(NULL, ";", &save2), k++) {
            int np;
            cr_assert_eq(dt_placements_parse(s, p.pl[k], 4, &np), DT_OK, "%s: %s", r->id,
                         dt_last_error());
        }
        const char *why = "";
        if (!map_op(r->op, p.shape[0], &p.op, &p.args, &why)) {
            cr_log_info("%s %s: skipped: %s", r->id, r->op, why);
            continue;
        }
        int mnd = 1, nranks = 1;
        for (const char *q = r->mesh; *q; q++) mnd += *q == 'x';
        for (const char *q = r->mesh; *q;) {
            nranks *= (int)strtol(q, (char **)&q, 10);
            if (*q == 'x') q++;
        }
        t_run(nranks, prop_body, &p);
        /* Compare with each alternative. */
        char got[128];
        snprintf(got, sizeof got, "%s", p.got_out);
        int ok = 0;
        char redist[512];
        snprintf(redist, sizeof redist, "%s", r->redist);
        for (char *alt = redist, *next; alt && !ok; alt = next) {
            next = strstr(alt, " OR ");
            if (next) *next = '\0', next += 4;
            char want_out[128];
            snprintf(want_out, sizeof want_out, "%s", r->out);
            if (alt[0] == '[') { /* "[S(1)] in1: ..." names the output of this alternative */
                char *close = strchr(alt, ']');
                snprintf(want_out, sizeof want_out, "%.*s", (int)(close - alt - 1), alt + 1);
                alt = close + 1;
            }
            for (char *m; (m = strstr(want_out, "MaskP"));) memmove(m, m + 4, strlen(m + 4) + 1);
            int out_ok = 0;
            for (char *o = want_out, *on; o && !out_ok; o = on) {
                on = strstr(o, " OR ");
                if (on) *on = '\0', on += 4;
                out_ok = !strcmp(o, got);
            }
            char want_coll[8][64], have[8][64];
            int nw = strstr(alt, "none") == alt ? 0 : expected_collectives(alt, want_coll);
            memcpy(have, p.got_coll, sizeof have);
            int coll_ok = p.op == DT_OP_CROSS_ENTROPY ? nw == p.ncoll
                                                      : same_lists(have, p.ncoll, want_coll, nw);
            ok = out_ok && coll_ok;
        }
        checked++;
        if (!ok) {
            failed++;
            char coll[512] = "";
            for (int c = 0; c < p.ncoll; c++) strcat(coll, p.got_coll[c]), strcat(coll, " ");
            cr_log_error("%s %s %s on %s: got %s with [%s], expected %s with %s", r->id, r->op,
                         r->placements, r->mesh, got, coll, r->out, r->redist);
        }
    }
    cr_log_info("%d propagation rows checked, %d differ", checked, failed);
    cr_assert_eq(failed, 0, "%d of %d propagation rows differ (see the log)", failed, checked);
}
