/* dtensor-explain: what redistribute and op dispatch would do, without starting ranks (calls
 * that are not one dispatched op, such as std or unbind, are run on threads of this process).
 *   dtensor-explain --mesh 2x4 --shape 8,6 --dtype f32 --from "S(0),R" --to "R,S(1)"
 *   dtensor-explain --mesh tp=2 --ranks 0,1 --to-mesh tp=2 --to-ranks 2,3 --shape 8,6
 *                   --from "S(0)" --to "S(1)"      (across meshes: dt_xplan)
 *   dtensor-explain --op mm --mesh 4 --shapes "12,8;8,16" --placements "S(0);R"
 *   dtensor-explain --cases tests/conformance/propagation_cases.tsv
 *   dtensor-explain --plugin ./libmyops.so --cases my_rows.tsv
 *   dtensor-explain --train-mesh dp=2,tp=2 --rank 1 [train's flags] [--json FILE]
 *                   (one rank's view of a training step: tools/explain_train.c) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "explain.h"

static int usage(const char *why) {
    if (why) fprintf(stderr, "dtensor-explain: %s\n", why);
    fprintf(stderr,
            "usage: dtensor-explain --mesh 2x4|dp=2,tp=4 --shape 8,6 --from PLACEMENTS --to "
            "PLACEMENTS [--dtype f32]\n"
            "         [--ranks 0,1] [--to-mesh MESH [--to-ranks 2,3]]: across meshes of one "
            "world\n"
            "       dtensor-explain --op OP --mesh MESH --shapes \"12,8;8,16\" --placements "
            "\"S(0);R\" [--dtypes \"f32;f32\"]\n"
            "       dtensor-explain --cases ROWS.tsv [--cases MORE.tsv] [--strict]\n"
            "       dtensor-explain --train-mesh dp=2,tp=2 [--rank R] [train's flags] "
            "[--json FILE]: one rank's training step\n"
            "  any of them: [--plugin ./libops.so]... [--latency-us 5] [--step-us 1] "
            "[--bandwidth-gbps 10]\n"
            "placements: one per mesh dim, e.g. \"S(0),R\", \"P(sum),S(1)\"; ';' between inputs\n"
            "OP: mm, add, mean(dim=0), softmax(dim=-1), view(8,6->48), t, unbind(dim=0), "
            "ones_like, new_full(shape=[4,4],value=1), ... (docs/explain.md) or a registered "
            "op's name\n"
            "--plugin: a shared object whose " DT_PLUGIN_ENTRY "() registers ops (dtensor/"
            "explain.h)\n"
            "--cases: one line per row (pass, or what differs); exit 1 when a row differs or "
            "fails\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "dtensor-explain: %s%s%s\n", what ? what : "", what ? ": " : "",
            dt_last_error());
    return 1;
}

static int load_plugin(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dtensor-explain: --plugin %s: %s\n", path, dlerror());
        return 1;
    }
    dt_plugin_register_fn entry;
    *(void **)&entry = dlsym(h, DT_PLUGIN_ENTRY); /* the POSIX way to a function pointer */
    if (!entry) {
        fprintf(stderr, "dtensor-explain: --plugin %s defines no %s()\n", path, DT_PLUGIN_ENTRY);
        return 1;
    }
    dt_status st = entry();
    if (st != DT_OK) {
        fprintf(stderr, "dtensor-explain: --plugin %s: %s() returned %s: %s\n", path,
                DT_PLUGIN_ENTRY, dt_status_str(st), dt_last_error());
        return 1;
    }
    return 0; /* the plugin stays loaded: its ops are called */
}

static int parse_shape(const char *text, int64_t *shape, int *ndim) {
    *ndim = 0;
    if (strcmp(text, "") == 0 || strcmp(text, "()") == 0) return 0;
    for (const char *p = text;;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || *ndim == DT_MAX_NDIM) return -1;
        shape[(*ndim)++] = v;
        if (*end == '\0') return 0;
        if (*end != ',' && *end != 'x') return -1;
        p = end + 1;
    }
}

/* Prints a text call's result, sized by a first call with no buffer. */
typedef dt_status (*text_fn)(const void *arg, char *buf, size_t cap, size_t *len);

static int print_text(text_fn fn, const void *arg) {
    size_t len = 0;
    dt_status st = fn(arg, NULL, 0, &len);
    char *buf = st == DT_ERR_SIZE ? malloc(len) : NULL;
    if (buf) st = fn(arg, buf, len, NULL);
    if (st != DT_OK) {
        free(buf);
        return fail(NULL);
    }
    fputs(buf, stdout);
    free(buf);
    return 0;
}

typedef struct opts {
    const char *mesh, *shape, *from, *to, *dtype, *op, *shapes, *placements, *dtypes;
    const char *ranks, *to_mesh, *to_ranks; /* across meshes */
    dt_cost_model model;
    int mesh_shape[DT_MESH_MAX_NDIM], mnd;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    const char *name_ptrs[DT_MESH_MAX_NDIM];
    const char *const *names_or_null;
    explain_row row;
} opts;

static dt_status redistribute_text(const void *arg, char *buf, size_t cap, size_t *len) {
    const opts *o = arg;
    int64_t shape[DT_MAX_NDIM];
    int ndim, nsrc, ndst;
    dt_placement src[DT_MESH_MAX_NDIM], dst[DT_MESH_MAX_NDIM];
    dt_dtype dtype;
    dt_status st = dt_dtype_parse(o->dtype, &dtype);
    if (st == DT_OK) st = dt_placements_parse(o->from, src, DT_MESH_MAX_NDIM, &nsrc);
    if (st == DT_OK) st = dt_placements_parse(o->to, dst, DT_MESH_MAX_NDIM, &ndst);
    if (st != DT_OK) return st;
    if (parse_shape(o->shape, shape, &ndim) != 0)
        return dt_error_set(DT_ERR_PARSE, "--shape takes sizes like 8,6, not \"%s\"", o->shape);
    if (nsrc != o->mnd || ndst != o->mnd)
        return dt_error_set(DT_ERR_PLACEMENT,
                            "the mesh has %d dims but --from has %d placements "
                            "and --to %d",
                            o->mnd, nsrc, ndst);
    return dt_redistribute_explain(o->mnd, o->mesh_shape, o->names_or_null, ndim, shape, dtype, src,
                                   dst, &o->model, buf, cap, len);
}

/* "0,1,2" into world ranks (at most max); -1 when malformed. */
static int parse_ranks(const char *text, int *ranks, int max) {
    int n = 0;
    for (const char *p = text;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1 << 20 || n == max) return -1;
        ranks[n++] = (int)v;
        if (*end == '\0') return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

/* One mesh of a cross-mesh plan: its text and optional world ranks (default 0..n-1). */
static dt_status mesh_desc_of(const char *what, const char *text, const char *ranks_text,
                              int *ranks, dt_mesh_desc *d, char (*names)[DT_MESH_NAME_MAX + 1]) {
    dt_status st = dt_mesh_parse(text, d->shape, names, &d->ndim);
    if (st != DT_OK) return st;
    int n = 1;
    for (int m = 0; m < d->ndim; m++) n *= d->shape[m];
    d->ranks = NULL;
    if (!ranks_text) return DT_OK;
    if (parse_ranks(ranks_text, ranks, 4096) != n)
        return dt_error_set(DT_ERR_PARSE, "--%s \"%s\" must list the %d world ranks of mesh %s",
                            what, ranks_text, n, text);
    d->ranks = ranks;
    return DT_OK;
}

static dt_status xmesh_text(const void *arg, char *buf, size_t cap, size_t *len) {
    const opts *o = arg;
    static int sr[4096], dr[4096];
    char sn[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1], dn[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    dt_mesh_desc S, D;
    int64_t shape[DT_MAX_NDIM];
    int ndim, nsrc, ndst;
    dt_placement src[DT_MESH_MAX_NDIM], dst[DT_MESH_MAX_NDIM];
    dt_dtype dtype;
    dt_status st = mesh_desc_of("ranks", o->mesh, o->ranks, sr, &S, sn);
    if (st == DT_OK) st = mesh_desc_of("to-ranks", o->to_mesh, o->to_ranks, dr, &D, dn);
    if (st == DT_OK) st = dt_dtype_parse(o->dtype, &dtype);
    if (st == DT_OK) st = dt_placements_parse(o->from, src, DT_MESH_MAX_NDIM, &nsrc);
    if (st == DT_OK) st = dt_placements_parse(o->to, dst, DT_MESH_MAX_NDIM, &ndst);
    if (st != DT_OK) return st;
    if (parse_shape(o->shape, shape, &ndim) != 0)
        return dt_error_set(DT_ERR_PARSE, "--shape takes sizes like 8,6, not \"%s\"", o->shape);
    if (nsrc != S.ndim || ndst != D.ndim)
        return dt_error_set(DT_ERR_PLACEMENT, "--from has %d placements for a %d-D mesh, --to %d "
                                              "for a %d-D mesh", nsrc, S.ndim, ndst, D.ndim);
    const char *snp[DT_MESH_MAX_NDIM], *dnp[DT_MESH_MAX_NDIM];
    for (int m = 0; m < S.ndim; m++) snp[m] = sn[m];
    for (int m = 0; m < D.ndim; m++) dnp[m] = dn[m];
    dt_xplan *p;
    st = dt_xplan_create(&S, &D, ndim, shape, dtype, src, dst, &o->model, &p);
    if (st != DT_OK) return st;
    st = dt_xplan_format(p, strchr(o->mesh, '=') ? snp : NULL, strchr(o->to_mesh, '=') ? dnp : NULL,
                         buf, cap, len);
    dt_xplan_destroy(p);
    return st;
}

/* One dispatched op: dt_op_explain. Anything else (t of a 1-D tensor, a composite, unbind,
 * the like-factories, ...) is run on local ranks and its output and collectives printed. */
static dt_status op_text(const void *arg, char *buf, size_t cap, size_t *len) {
    const opts *o = arg;
    const explain_row *r = &o->row;
    const dt_spec *in[DT_OP_MAX_USER_INPUTS];
    for (int i = 0; i < r->n; i++)
        in[i] = &r->in[i];
    dt_status st = DT_ERR_UNSUPPORTED;
    if (r->call.form == EXPLAIN_OP)
        st = dt_op_explain(r->call.op, o->mnd, o->mesh_shape, o->names_or_null, in, r->n,
                           &r->call.args, &o->model, buf, cap, len);
    if (st != DT_ERR_UNSUPPORTED) return st;
    explain_seen seen = {0};
    st = explain_engine_tool(r, &seen, (void *)&o->model);
    if (st != DT_OK) return st;
    char text[4096];
    st = explain_run_format(r, &seen, text, sizeof text);
    if (st != DT_OK) return st;
    size_t n = strlen(text) + 1;
    if (len) *len = n;
    if (n > cap) return dt_error_set(DT_ERR_SIZE, "%zu bytes needed", n);
    memcpy(buf, text, n);
    return DT_OK;
}

int main(int argc, char **argv) {
    opts o = {.dtype = "f32", .model = dt_cost_model_default()};
    const char *cases[16];
    int ncases = 0, strict = 0;
    for (int i = 1; i < argc; i++) /* a training step's view: its own flags (train's) */
        if (strcmp(argv[i], "--train-mesh") == 0 || strcmp(argv[i], "--train") == 0)
            return explain_train_main(argc, argv);
    for (int i = 1; i < argc; i++) { /* plugins first: --op and --cases may name their ops */
        if (strcmp(argv[i], "--plugin") == 0 && i + 1 < argc && load_plugin(argv[++i])) return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return usage(NULL), 0;
        if (strcmp(a, "--strict") == 0) {
            strict = 1;
            continue;
        }
        if (!v) return usage("every option but --strict takes a value");
        if (strcmp(a, "--mesh") == 0)
            o.mesh = v;
        else if (strcmp(a, "--shape") == 0)
            o.shape = v;
        else if (strcmp(a, "--from") == 0)
            o.from = v;
        else if (strcmp(a, "--to") == 0)
            o.to = v;
        else if (strcmp(a, "--ranks") == 0)
            o.ranks = v;
        else if (strcmp(a, "--to-mesh") == 0)
            o.to_mesh = v;
        else if (strcmp(a, "--to-ranks") == 0)
            o.to_ranks = v;
        else if (strcmp(a, "--dtype") == 0)
            o.dtype = v;
        else if (strcmp(a, "--op") == 0)
            o.op = v;
        else if (strcmp(a, "--shapes") == 0)
            o.shapes = v;
        else if (strcmp(a, "--placements") == 0)
            o.placements = v;
        else if (strcmp(a, "--dtypes") == 0)
            o.dtypes = v;
        else if (strcmp(a, "--plugin") == 0) {
        } /* loaded above */
        else if (strcmp(a, "--cases") == 0 && ncases < 16)
            cases[ncases++] = v;
        else if (strcmp(a, "--latency-us") == 0)
            o.model.latency_us = atof(v);
        else if (strcmp(a, "--step-us") == 0)
            o.model.step_us = atof(v);
        else if (strcmp(a, "--bandwidth-gbps") == 0)
            o.model.bandwidth_gbps = atof(v);
        else
            return usage("unknown option");
        i++;
    }
    if (ncases) {
        if (o.op || o.mesh) return usage("--cases goes alone (each row names its op and mesh)");
        int rc = 0;
        for (int k = 0; k < ncases; k++) {
            int r =
                explain_check_file(cases[k], explain_engine_tool, &o.model, strict, stdout, NULL);
            rc = r > rc ? r : rc;
        }
        return rc;
    }
    if (!o.mesh) return usage("--mesh is needed (or --cases)");
    if (o.to_mesh || o.ranks || o.to_ranks) {
        if (!o.to_mesh) o.to_mesh = o.mesh; /* --ranks alone: the same shape over other ranks */
        if (!o.shape || !o.from || !o.to)
            return usage("across meshes: --shape, --from and --to are needed");
        return print_text(xmesh_text, &o);
    }
    if (dt_mesh_parse(o.mesh, o.mesh_shape, o.names, &o.mnd) != DT_OK) return fail("--mesh");
    for (int m = 0; m < o.mnd; m++)
        o.name_ptrs[m] = o.names[m];
    o.names_or_null = strchr(o.mesh, '=') ? o.name_ptrs : NULL; /* "2x2" prints as such */
    if (o.op) {
        if (!o.shapes || !o.placements) return usage("--op needs --shapes and --placements");
        if (explain_row_parse(&o.row, o.op, o.mesh, o.shapes, o.placements, o.dtypes) != DT_OK)
            return fail(o.op);
        return print_text(op_text, &o);
    }
    if (!o.shape || !o.from || !o.to)
        return usage("--mesh, --shape, --from and --to are needed (or --op, or --cases)");
    return print_text(redistribute_text, &o);
}
