/* The collectives of one rank of a torch.profiler trace: where they were issued (the innermost
 * c10d:: op on the Python thread, or a record_param_comms event where the backend writes one),
 * where they ran (gloo's "gloo:<kind>" events on its own threads), their kind in dtensor's
 * names, their sizes, group and per-group sequence number. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch_trace_impl.h"

/* dtensor's collective name for a torch one ("c10d::allgather_into_tensor_coalesced_",
 * "gloo:all_reduce", record_param_comms' "_reduce_scatter_base"); NULL if not a collective. */
static const char *kind_of(const char *name) {
    char s[96];
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < sizeof s; p++)
        if (*p != '_') s[n++] = (char)tolower((unsigned char)*p); /* all_gather == allgather */
    s[n] = '\0';
    static const struct {
        const char *pat, *kind;
    } map[] = {
        /* most specific first: "reducescatter" contains "reduce", "allgather" "gather" */
        {"reducescatter", "reduce_scatter"},
        {"allgather", "all_gather"},
        {"allreduce", "all_reduce"},
        {"alltoall", "all_to_all"},
        {"broadcast", "broadcast"},
        {"barrier", "barrier"},
        {"send", "send"},
        {"recv", "recv"},
        {"gather", "gather"},
        {"scatter", "scatter"},
        {"reduce", "reduce"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strstr(s, map[i].pat)) return map[i].kind;
    return NULL;
}

int tt_dtype_size(const char *t) {
    static const struct {
        const char *name;
        int size;
    } sizes[] = {
        {"float", 4},
        {"Float", 4},
        {"double", 8},
        {"Double", 8},
        {"c10::Half", 2},
        {"Half", 2},
        {"c10::BFloat16", 2},
        {"BFloat16", 2},
        {"long int", 8},
        {"Long", 8},
        {"long", 8},
        {"int", 4},
        {"Int", 4},
        {"short int", 2},
        {"Short", 2},
        {"signed char", 1},
        {"Char", 1},
        {"unsigned char", 1},
        {"Byte", 1},
        {"bool", 1},
        {"Bool", 1},
        {"c10::complex<float>", 8},
        {"c10::complex<double>", 16},
        {"c10::Float8_e4m3fn", 1},
        {"c10::Float8_e5m2", 1},
    };
    if (!t) return 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(t, sizes[i].name)) return sizes[i].size;
    return 0;
}

long long tt_numel(const json_t *dims) {
    if (!json_is_array(dims)) return 0;
    size_t n = json_array_size(dims);
    if (n == 0 || json_is_number(json_array_get(dims, 0))) { /* one shape; [] is a scalar */
        long long e = 1;
        for (size_t i = 0; i < n; i++) {
            double d = json_number_value(json_array_get(dims, i));
            if (!(d >= 0 && d <= 1e12) || (d >= 1 && e > (1LL << 50) / (long long)d))
                return 0; /* not a shape anyone recorded: no size rather than a wrong one */
            e *= (long long)d;
        }
        return e;
    }
    long long e = 0; /* a list of tensors (or of lists of them) */
    for (size_t i = 0; i < n && e < (1LL << 50); i++)
        e += tt_numel(json_array_get(dims, i));
    return e;
}

static const char *arg_str(const json_t *args, const char *key) {
    return json_string_value(json_object_get(args, key));
}

static long long arg_int(const json_t *args, const char *key) {
    double v = json_number_value(json_object_get(args, key)); /* 0 if not a number */
    return v >= 0 && v <= 1e15 ? (long long)v : -1;
}

/* The first entry of the event's "Input type" list that names a dtype of known size. */
static int input_dtype_size(const json_t *args) {
    const json_t *types = json_object_get(args, "Input type");
    for (size_t i = 0; i < json_array_size(types); i++) {
        int s = tt_dtype_size(json_string_value(json_array_get(types, i)));
        if (s) return s;
    }
    return 0;
}

/* An issue and a run belong together when their kinds agree; gloo runs a coalesced
 * reduce_scatter as an all_reduce (then keeps its own chunk), so that pair agrees too. */
static int kinds_agree(const char *issue, const char *run) {
    return !strcmp(issue, run) || (!strcmp(issue, "reduce_scatter") && !strcmp(run, "all_reduce"));
}

/* Sizes from the issuing event: record_param_comms' element counts, or a c10d op's recorded
 * shapes (its first tensor argument is the output where the op has one, else in place). */
static void size_from_issue(tt_rank *r, tt_coll *c, int esize) {
    const tt_ev *e = &r->ops[c->issue];
    if (r->rpc) {
        long long in = arg_int(e->args, "In msg nelems"), out = arg_int(e->args, "Out msg nelems");
        int s = tt_dtype_size(arg_str(e->args, "dtype"));
        if (s) esize = s;
        c->dtype_known = esize > 0;
        c->bytes_in = in > 0 ? in * esize : 0;
        c->bytes_out = out > 0 ? out * esize : 0;
        c->out_elems = out > 0 ? out : 0;
        return;
    }
    const json_t *dims = json_object_get(e->args, "Input Dims");
    long long a = tt_numel(json_array_get(dims, 0)), b = tt_numel(json_array_get(dims, 1));
    c->dtype_known = esize > 0;
    c->out_elems = a;
    if (!strcmp(c->kind, "barrier")) {
        c->bytes_in = c->bytes_out = 0;
        c->out_elems = 0;
    } else if (!strcmp(c->kind, "all_gather") || !strcmp(c->kind, "reduce_scatter") ||
               !strcmp(c->kind, "all_to_all") || !strcmp(c->kind, "gather") ||
               !strcmp(c->kind, "scatter")) {
        c->bytes_out = a * esize; /* (outputs, inputs, ...) */
        c->bytes_in = b * esize;
    } else {
        c->bytes_in = c->bytes_out = a * esize; /* in place: all_reduce, broadcast, send, recv */
    }
}

/* Sizes from the run alone (its one input tensor) when no issue was recorded. */
static void size_from_run(tt_rank *r, tt_coll *c) {
    const json_t *args = r->runs[c->run].args;
    int esize = input_dtype_size(args);
    long long n = tt_numel(json_array_get(json_object_get(args, "Input Dims"), 0));
    c->dtype_known = esize > 0;
    c->bytes_in = c->bytes_out = !strcmp(c->kind, "barrier") ? 0 : n * esize;
    c->out_elems = n;
    if (!strcmp(c->kind, "all_gather") && c->group_size > 0) {
        c->bytes_out = c->bytes_in * c->group_size;
        c->out_elems = n * c->group_size;
    }
}

static void set_group(tt_rank *r, tt_coll *c) {
    c->group = r->pg_label ? r->pg_label : "";
    c->group_size = r->pg_label ? r->pg_size : 0;
    if (c->issue < 0 || !r->rpc) return;
    const json_t *a = r->ops[c->issue].args;
    const char *desc = arg_str(a, "Process Group Description");
    const char *name = arg_str(a, "Process Group Name");
    if (!name) name = arg_str(a, "pg_name");
    if (desc && *desc && strcmp(desc, "undefined"))
        c->group = desc;
    else if (name)
        c->group = name;
    long long gs = arg_int(a, "Group size");
    if (gs > 0) c->group_size = (int)gs;
}

static int cmp_order(const void *a, const void *b) {
    const tt_coll *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

int tt_collect_collectives(tt_rank *r, char *err, size_t errcap) {
    size_t nissue = 0;
    for (size_t i = 0; i < r->nops; i++)
        nissue += r->ops[i].is_issue;
    r->colls = calloc(nissue + r->nruns + 1, sizeof *r->colls);
    char *run_used = calloc(r->nruns + 1, 1);
    if (!r->colls || !run_used) {
        free(run_used);
        return tt_fail(err, errcap, r->path, "out of memory");
    }
    /* issues in start order, each with the first free run of an agreeing kind that starts
     * after it: gloo runs its queue in issue order, so a few runs ahead is enough */
    size_t first_free = 0;
    for (size_t i = 0; i < r->nops; i++) {
        tt_ev *e = &r->ops[i];
        if (!e->is_issue) continue;
        const char *kname = r->rpc ? arg_str(e->args, "Collective name") : e->name;
        const char *kind = kname ? kind_of(kname) : NULL;
        if (!kind) kind = kname && *kname ? kname : "?";
        tt_coll *c = &r->colls[r->ncolls++];
        *c = (tt_coll){.issue = (int)i,
                       .run = -1,
                       .kind = kind,
                       .ts = e->ts,
                       .dur = e->dur,
                       .order = e->ts,
                       .lane = 2};
        while (first_free < r->nruns && run_used[first_free])
            first_free++;
        for (size_t j = first_free; j < r->nruns && j < first_free + 8; j++) {
            const char *rk = kind_of(r->runs[j].name);
            if (run_used[j] || !rk || !kinds_agree(kind, rk) || r->runs[j].ts + 1.0 < e->ts)
                continue;
            run_used[j] = 1;
            c->run = (int)j;
            c->ts = r->runs[j].ts;
            c->dur = r->runs[j].dur;
            c->lane = r->runs[j].tid == r->main_tid ? 2 : 4;
            break;
        }
        set_group(r, c);
        /* the dtype: the run's tensor, else the issue's, else the nearest caller's (a
         * coalesced c10d op records only "TensorList") */
        int esize = c->run >= 0 ? input_dtype_size(r->runs[c->run].args) : 0;
        for (int a = (int)i; !esize && a >= 0; a = r->ops[a].parent)
            esize = input_dtype_size(r->ops[a].args);
        size_from_issue(r, c, esize);
        if (!c->group_size && c->bytes_in && c->bytes_out && strcmp(kind, "all_reduce"))
            c->group_size = (int)(c->bytes_out > c->bytes_in ? c->bytes_out / c->bytes_in
                                                             : c->bytes_in / c->bytes_out);
    }
    /* runs nobody issued in the recording (DDP's reducer calls the backend from C++, or the
     * issue fell before the window) */
    for (size_t j = 0; j < r->nruns; j++) {
        if (run_used[j]) continue;
        const char *kind = kind_of(r->runs[j].name);
        tt_coll *c = &r->colls[r->ncolls++];
        *c = (tt_coll){.issue = -1,
                       .run = (int)j,
                       .kind = kind ? kind : r->runs[j].name,
                       .ts = r->runs[j].ts,
                       .dur = r->runs[j].dur,
                       .order = r->runs[j].ts,
                       .lane = r->runs[j].tid == r->main_tid ? 2 : 4};
        set_group(r, c);
        size_from_run(r, c);
    }
    free(run_used);
    /* seq: the collective's index on its group, in the order this rank issued them (a
     * run-only collective counts at its run's start) */
    if (r->ncolls) qsort(r->colls, r->ncolls, sizeof *r->colls, cmp_order);
    const char **groups = calloc(r->ncolls + 1, sizeof *groups); /* distinct labels */
    int *count = calloc(r->ncolls + 1, sizeof *count), ngroups = 0;
    if (!groups || !count) {
        free(groups), free(count);
        return tt_fail(err, errcap, r->path, "out of memory");
    }
    for (size_t i = 0; i < r->ncolls; i++) {
        int g = 0;
        while (g < ngroups && strcmp(groups[g], r->colls[i].group))
            g++;
        if (g == ngroups) groups[ngroups++] = r->colls[i].group;
        r->colls[i].seq = count[g]++;
    }
    free(groups);
    free(count);
    return 0;
}
