/* torch.profiler Chrome traces (one per rank, plain or gzip) -> one dtensor trace: reads each
 * file's events, nests the Python thread's cpu_ops, puts them on dtensor's lanes (ops, compute,
 * comm, comm thread, steps) with ids, modules, steps and the few dependencies torch records.
 * Collectives are recognised in torch_trace_comm.c. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "torch_trace.h"
#include "torch_trace_impl.h"

enum { LANE_OPS = 0, LANE_COMPUTE = 1, LANE_STEPS = 5 };

int tt_fail(char *err, size_t errcap, const char *path, const char *fmt, ...) {
    if (!err || !errcap) return -1;
    int n = snprintf(err, errcap, "%s: ", path ? path : "dt_torch_trace_convert");
    if (n < 0 || (size_t)n >= errcap) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errcap - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* The whole file, through zlib so that gzip (tensorboard_trace_handler's use_gzip) and plain
 * JSON read alike. */
static char *read_all(const char *path, size_t *len, char *err, size_t errcap) {
    gzFile f = gzopen(path, "rb");
    if (!f) return tt_fail(err, errcap, path, "cannot open: %s", strerror(errno)), NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (int got; buf; n += (size_t)got) {
        if (cap - n < (1 << 16)) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
            if (!buf) break;
        }
        got = gzread(f, buf + n, (unsigned)(cap - n));
        if (got < 0) {
            int code;
            tt_fail(err, errcap, path, "cannot read: %s", gzerror(f, &code));
            free(buf);
            gzclose(f);
            return NULL;
        }
        if (got == 0) break;
    }
    gzclose(f);
    if (!buf) return tt_fail(err, errcap, path, "out of memory"), NULL;
    *len = n;
    return buf;
}

static int cmp_ev(const void *a, const void *b) {
    const tt_ev *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->dur > y->dur ? -1 : x->dur < y->dur; /* the parent (longer) first */
}

/* By start, parents first; an empty list (NULL) stays as it is (qsort wants a pointer). */
static void sort_ev(tt_ev *a, size_t n) {
    if (n) qsort(a, n, sizeof *a, cmp_ev);
}

static int push(tt_ev **arr, size_t *n, size_t *cap, tt_ev e) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        tt_ev *na = realloc(*arr, c * sizeof *na);
        if (!na) return -1;
        *arr = na;
        *cap = c;
    }
    (*arr)[(*n)++] = e;
    return 0;
}

static long long tid_of(const json_t *ev) {
    const json_t *t = json_object_get(ev, "tid");
    return json_is_integer(t)                                   ? json_integer_value(t)
           : json_is_real(t) && fabs(json_real_value(t)) < 1e15 ? (long long)json_real_value(t)
                                                                : -1;
}

/* Ops that only allocate, view or describe tensors: they are never a compute-lane kernel, so
 * an op whose children are all of these (aten::mm calls aten::resolve_conj) is the kernel. */
static int does_work(const char *name) {
    /* clang-format off */
    static const char *const none[] = {
        "empty", "empty_strided", "empty_like", "as_strided", "view", "_unsafe_view", "reshape",
        "_reshape_alias", "resolve_conj", "resolve_neg", "detach", "detach_", "alias", "t",
        "transpose", "permute", "expand", "expand_as", "slice", "select", "narrow", "squeeze",
        "unsqueeze", "flatten", "unflatten", "split", "chunk", "unbind", "result_type", "to",
        "lift_fresh", "set_", "resize_", "contiguous", "item", "_local_scalar_dense",
        "scalar_tensor", "is_nonzero", "size", "stride", "numel", "view_as", "split_with_sizes",
        "_has_compatible_shallow_copy_type",
    };
    /* clang-format on */
    if (strncmp(name, "aten::", 6)) return 0; /* c10d::, autograd nodes, record_functions */
    name += 6;
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (!strcmp(name, none[i])) return 0;
    return 1;
}

static int number(const json_t *ev, const char *key, double *out) {
    const json_t *v = json_object_get(ev, key);
    if (!json_is_number(v)) return -1;
    *out = json_number_value(v);
    return isfinite(*out) ? 0 : -1;
}

/* Reads one file into r: the main thread (the one with the ProfilerStep spans, else the one of
 * the first cpu_op), its cpu_ops, module frames and steps, and every thread's gloo runs. */
static int load_rank(tt_rank *r, const char *path, int index, char *err, size_t errcap) {
    r->path = path;
    r->rank = index;
    size_t len = 0;
    char *text = read_all(path, &len, err, errcap);
    if (!text) return -1;
    json_error_t je;
    r->root = json_loadb(text, len, 0, &je);
    free(text);
    if (!r->root)
        return tt_fail(err, errcap, path, "not JSON (line %d, column %d: %s)", je.line, je.column,
                       je.text);
    json_t *events = json_object_get(r->root, "traceEvents");
    if (!json_is_array(events))
        return tt_fail(err, errcap, path, "no \"traceEvents\" array: not a torch.profiler trace");
    json_t *dist = json_object_get(r->root, "distributedInfo");
    if (dist) {
        json_t *rk = json_object_get(dist, "rank");
        if (!json_is_integer(rk) || json_integer_value(rk) < 0 || json_integer_value(rk) > 1 << 20)
            return tt_fail(err, errcap, path, "distributedInfo.rank is not a rank number");
        r->rank = (int)json_integer_value(rk);
        r->backend = json_string_value(json_object_get(dist, "backend"));
        json_t *pgs = json_object_get(dist, "pg_config");
        if (json_array_size(pgs) == 1) { /* one group: every collective ran on it */
            json_t *pg = json_array_get(pgs, 0);
            r->pg_label = json_string_value(json_object_get(pg, "pg_desc"));
            if (!r->pg_label) r->pg_label = json_string_value(json_object_get(pg, "pg_name"));
            json_t *sz = json_object_get(pg, "pg_size");
            r->pg_size = json_is_integer(sz) ? (int)json_integer_value(sz) : 0;
        }
    }
    /* pass 1: the main thread */
    size_t nev = json_array_size(events), cap_ops = 0, cap_frames = 0, cap_steps = 0, cap_runs = 0;
    long long step_tid = -1;
    for (size_t i = 0; i < nev && step_tid < 0; i++) {
        const char *name = json_string_value(json_object_get(json_array_get(events, i), "name"));
        if (name && !strncmp(name, "ProfilerStep#", 13))
            step_tid = tid_of(json_array_get(events, i));
    }
    /* pass 2: the events, checked */
    size_t ncpu = 0;
    for (size_t i = 0; i < nev; i++) {
        json_t *ev = json_array_get(events, i);
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        if (!json_is_object(ev) || !ph || strcmp(ph, "X")) continue;
        const char *cat = json_string_value(json_object_get(ev, "cat"));
        if (!cat || (strcmp(cat, "cpu_op") && strcmp(cat, "user_annotation") &&
                     strcmp(cat, "python_function")))
            continue; /* the profiler's own spans, GPU activity: not converted */
        const char *name = json_string_value(json_object_get(ev, "name"));
        tt_ev e = {.name = name, .parent = -1, .top = -1, .out_id = -1, .tid = tid_of(ev)};
        if (!name) return tt_fail(err, errcap, path, "traceEvents[%zu]: no \"name\" string", i);
        if (number(ev, "ts", &e.ts) || number(ev, "dur", &e.dur) || e.dur < 0)
            return tt_fail(err, errcap, path,
                           "traceEvents[%zu] (\"%s\"): \"ts\" or \"dur\" missing or not a "
                           "number >= 0",
                           i, name);
        long long tid = e.tid;
        if (tid < 0 && !json_is_string(json_object_get(ev, "tid")))
            return tt_fail(err, errcap, path, "traceEvents[%zu] (\"%s\"): no \"tid\"", i, name);
        e.args = json_object_get(ev, "args");
        if (!json_is_object(e.args)) e.args = NULL;
        int fail = 0;
        if (!strncmp(name, "gloo:", 5)) {
            fail = push(&r->runs, &r->nruns, &cap_runs, e);
        } else if (!strcmp(cat, "cpu_op")) {
            ncpu++;
            if (step_tid < 0) step_tid = tid; /* no steps: the thread of the first cpu_op */
            if (tid == step_tid) fail = push(&r->ops, &r->nops, &cap_ops, e);
        } else if (tid == step_tid && !strncmp(name, "ProfilerStep#", 13)) {
            fail = push(&r->steps, &r->nsteps, &cap_steps, e);
        } else if (tid == step_tid && !strncmp(name, "nn.Module: ", 11)) {
            fail = push(&r->frames, &r->nframes, &cap_frames, e);
        }
        if (fail) return tt_fail(err, errcap, path, "out of memory");
    }
    if (!ncpu)
        return tt_fail(err, errcap, path,
                       "no cpu_op events: not a torch.profiler trace of CPU activity");
    r->main_tid = step_tid;
    sort_ev(r->ops, r->nops);
    sort_ev(r->frames, r->nframes);
    sort_ev(r->steps, r->nsteps);
    sort_ev(r->runs, r->nruns);
    return 0;
}

static const char *keep_string(tt_rank *r, char *s) {
    char **ns = s ? realloc(r->strings, (r->nstrings + 1) * sizeof *ns) : NULL;
    if (!ns) return free(s), NULL;
    r->strings = ns;
    return r->strings[r->nstrings++] = s;
}

/* The cpu_ops' nesting, which of them are kernels and collective issues, and the module each
 * top-level op ran in (the enclosing "nn.Module: <Class>_<k>" frames, outermost first). */
static int analyse(tt_rank *r, char *err, size_t errcap) {
    int *stack = malloc((r->nops + r->nframes + 1) * sizeof *stack), sp = 0;
    if (!stack) return tt_fail(err, errcap, r->path, "out of memory");
    for (size_t i = 0; i < r->nops; i++) {
        tt_ev *e = &r->ops[i];
        while (sp && r->ops[stack[sp - 1]].ts + r->ops[stack[sp - 1]].dur <= e->ts)
            sp--;
        e->parent = sp ? stack[sp - 1] : -1;
        e->top = sp ? r->ops[stack[0]].top : (int)i;
        stack[sp++] = (int)i;
        if (!strcmp(e->name, "record_param_comms")) r->rpc = 1;
    }
    for (size_t i = 0; i < r->nops; i++) {
        int work = does_work(r->ops[i].name), comm = !strncmp(r->ops[i].name, "c10d::", 6);
        /* an ancestor already marked has its own ancestors marked */
        for (int a = r->ops[i].parent; work && a >= 0 && !r->ops[a].work_below;
             a = r->ops[a].parent)
            r->ops[a].work_below = 1;
        for (int a = r->ops[i].parent; comm && a >= 0 && !r->ops[a].comm_below;
             a = r->ops[a].parent)
            r->ops[a].comm_below = 1;
    }
    for (size_t i = 0; i < r->nops; i++) {
        tt_ev *e = &r->ops[i];
        e->is_issue = r->rpc ? !strcmp(e->name, "record_param_comms")
                             : !strncmp(e->name, "c10d::", 6) && !e->comm_below;
    }
    /* modules: the frames open at each top-level op's start */
    size_t fi = 0;
    sp = 0;
    const char *last = "";
    for (size_t i = 0; i < r->nops; i++) {
        tt_ev *e = &r->ops[i];
        for (; fi < r->nframes && r->frames[fi].ts <= e->ts; fi++) {
            while (sp &&
                   r->frames[stack[sp - 1]].ts + r->frames[stack[sp - 1]].dur <= r->frames[fi].ts)
                sp--;
            stack[sp++] = (int)fi;
        }
        while (sp && r->frames[stack[sp - 1]].ts + r->frames[stack[sp - 1]].dur <= e->ts)
            sp--;
        if (e->parent >= 0) {
            e->module = r->ops[e->top].module;
            continue;
        }
        size_t len = 1;
        for (int k = 0; k < sp; k++)
            len += strlen(r->frames[stack[k]].name + 11) + 1;
        char *m = malloc(len);
        if (!m) return free(stack), tt_fail(err, errcap, r->path, "out of memory");
        m[0] = '\0';
        for (int k = 0; k < sp; k++) {
            if (k) strcat(m, ".");
            strcat(m, r->frames[stack[k]].name + 11); /* past "nn.Module: " */
        }
        if (!strcmp(m, last)) {
            free(m);
            e->module = last;
        } else if (!(e->module = last = keep_string(r, m))) {
            return free(stack), tt_fail(err, errcap, r->path, "out of memory");
        }
    }
    free(stack);
    return 0;
}

/* The top-level op running at time t on the main thread, -1 if none. */
static int top_at(const tt_rank *r, const int *tops, size_t ntops, double t) {
    size_t lo = 0, hi = ntops;
    while (lo < hi) { /* the last top-level op starting at or before t */
        size_t mid = (lo + hi) / 2;
        if (r->ops[tops[mid]].ts <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo) return -1;
    const tt_ev *e = &r->ops[tops[lo - 1]];
    return t <= e->ts + e->dur + 1e-3 ? tops[lo - 1] : -1;
}

/* N of "ProfilerStep#N", -1 if it is not a number we can hold. */
static int step_number(const char *name) {
    char *end;
    long n = strtol(name + 13, &end, 10);
    return end != name + 13 && n >= 0 && n < (1L << 30) ? (int)n : -1;
}

static int step_at(const tt_rank *r, double t) {
    for (size_t k = 0; k < r->nsteps; k++)
        if (t >= r->steps[k].ts && t < r->steps[k].ts + r->steps[k].dur)
            return step_number(r->steps[k].name);
    return -1;
}

static json_t *new_event(const char *name, const char *cat, double ts, double dur, int pid, int tid,
                         int id, json_t *args) {
    json_object_set_new(args, "id", json_integer(id));
    return json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", name, "cat", cat, "ph",
                     "X", "ts", round(ts * 1e3) / 1e3, "dur", round(dur * 1e3) / 1e3, "pid", pid,
                     "tid", tid, "args", args);
}

/* The recorded shapes as text, for the detail line. */
static void detail_dims(const tt_ev *e, char *buf, size_t cap) {
    char *dims = json_dumps(json_object_get(e->args, "Input Dims"), JSON_COMPACT);
    snprintf(buf, cap, "%s%s%s", e->name, dims ? " " : "", dims ? dims : "");
    free(dims);
}

static void add_dep(json_t *args, int id) {
    json_t *deps = json_object_get(args, "deps");
    for (size_t i = 0; i < json_array_size(deps); i++)
        if (json_integer_value(json_array_get(deps, i)) == id) return;
    json_array_append_new(deps, json_integer(id));
}

static void set_common(json_t *args, const char *module, int step) {
    json_object_set_new(args, "module", json_string(module ? module : ""));
    if (step >= 0) json_object_set_new(args, "step", json_integer(step));
    json_object_set_new(args, "deps", json_array());
}

/* Appends rank r's events (times relative to t0) to out; ids count from 0 per rank. */
static int emit_rank(tt_rank *r, double t0, json_t *out, char *err, size_t errcap) {
    int id = 0, pid = r->rank;
    char detail[192];
    for (size_t k = 0; k < r->nsteps; k++) {
        json_t *a = json_pack("{s:s, s:i}", "detail", r->steps[k].name, "step",
                              step_number(r->steps[k].name));
        json_array_append_new(out, new_event("step", "steps", r->steps[k].ts - t0, r->steps[k].dur,
                                             pid, LANE_STEPS, id++, a));
    }
    int *tops = malloc((r->nops + 1) * sizeof *tops);
    if (!tops) return tt_fail(err, errcap, r->path, "out of memory");
    size_t ntops = 0;
    for (size_t i = 0; i < r->nops; i++)
        if (r->ops[i].parent < 0) tops[ntops++] = (int)i;
    /* fwdbwd flows tie a backward node to the forward op that saved its inputs: the backward
     * op depends on it through data and ran for the same module */
    int *fwd_of = malloc((r->nops + 1) * sizeof *fwd_of);
    json_t *starts = json_object();
    if (!fwd_of || !starts) {
        free(tops), free(fwd_of), json_decref(starts);
        return tt_fail(err, errcap, r->path, "out of memory");
    }
    for (size_t i = 0; i < r->nops; i++)
        fwd_of[i] = -1;
    json_t *events = json_object_get(r->root, "traceEvents");
    for (int pass = 0; pass < 2; pass++) /* starts, then finishes */
        for (size_t i = 0; i < json_array_size(events); i++) {
            json_t *ev = json_array_get(events, i);
            const char *ph = json_string_value(json_object_get(ev, "ph"));
            const char *cat = json_string_value(json_object_get(ev, "cat"));
            double ts;
            if (!ph || !cat || strcmp(cat, "fwdbwd") || strcmp(ph, pass ? "f" : "s") ||
                tid_of(ev) != r->main_tid || number(ev, "ts", &ts))
                continue;
            int at = top_at(r, tops, ntops, ts);
            char key[32];
            snprintf(key, sizeof key, "%.0f", json_number_value(json_object_get(ev, "id")));
            json_t *from = json_object_get(starts, key);
            if (at < 0) continue;
            if (!pass)
                json_object_set_new(starts, key, json_integer(at));
            else if (from && json_integer_value(from) != at)
                fwd_of[at] = (int)json_integer_value(from);
        }
    json_decref(starts);
    free(tops);
    for (size_t i = 0; i < r->nops; i++)
        if (fwd_of[i] >= 0 && !*r->ops[i].module) r->ops[i].module = r->ops[fwd_of[i]].module;
    /* ops (top level) and kernels (work with no work below), in start order */
    for (size_t i = 0; i < r->nops; i++) {
        tt_ev *e = &r->ops[i];
        const char *module = r->ops[e->top].module;
        int step = step_at(r, e->ts);
        detail_dims(e, detail, sizeof detail);
        if (e->parent < 0) {
            const char *op = e->name;
            if (!strncmp(op, "autograd::engine::evaluate_function: ", 37)) op += 37;
            json_t *a = json_pack("{s:s, s:s}", "detail", detail, "op", op);
            set_common(a, module, step);
            e->out_id = id;
            e->out_args = a;
            json_array_append_new(
                out, new_event(e->name, "ops", e->ts - t0, e->dur, pid, LANE_OPS, id++, a));
        }
        if (does_work(e->name) && !e->work_below) {
            json_t *a = json_pack("{s:s}", "detail", detail);
            set_common(a, module, step);
            json_array_append_new(
                out, new_event(e->name, "compute", e->ts - t0, e->dur, pid, LANE_COMPUTE, id++, a));
        }
    }
    for (size_t i = 0; i < r->nops; i++)
        if (fwd_of[i] >= 0) add_dep(r->ops[i].out_args, r->ops[fwd_of[i]].out_id);
    free(fwd_of);
    /* collectives; an op that waits on a functional collective's output depends on it */
    int *coll_of = malloc((r->nops + 1) * sizeof *coll_of);
    if (!coll_of) return tt_fail(err, errcap, r->path, "out of memory");
    for (size_t i = 0; i < r->nops; i++)
        coll_of[i] = -1;
    for (size_t c = 0; c < r->ncolls; c++) {
        tt_coll *cl = &r->colls[c];
        const tt_ev *is = cl->issue >= 0 ? &r->ops[cl->issue] : NULL;
        const tt_ev *run = cl->run >= 0 ? &r->runs[cl->run] : NULL;
        if (is) coll_of[cl->issue] = (int)c;
        int nested = is && is->top != cl->issue;
        snprintf(detail, sizeof detail, "%s%s%s%s%s%s", is ? is->name : "", nested ? " in " : "",
                 nested ? r->ops[is->top].name : "", run ? (is ? "; ran as " : "ran as ") : "",
                 run ? run->name : "", cl->dtype_known ? "" : " (dtype not recorded: bytes 0)");
        json_t *a = json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:i}", "detail", detail, "kind",
                              cl->kind, "group", cl->group, "group_size", cl->group_size,
                              "bytes_in", (json_int_t)cl->bytes_in, "bytes_out",
                              (json_int_t)cl->bytes_out, "seq", cl->seq);
        set_common(a, is ? r->ops[is->top].module : "", step_at(r, cl->order));
        cl->id = id;
        json_array_append_new(
            out, new_event(cl->kind, "comm", cl->ts - t0, cl->dur, pid, cl->lane, id++, a));
    }
    /* a functional collective's result is waited on (wait_tensor) by the op that reads it:
     * the oldest pending one of the waited tensor's size */
    int *pending = malloc((r->ncolls + 1) * sizeof *pending), np = 0;
    if (!pending) return free(coll_of), tt_fail(err, errcap, r->path, "out of memory");
    for (size_t i = 0; i < r->nops; i++) {
        tt_ev *e = &r->ops[i];
        if (coll_of[i] >= 0) {
            int functional = 0;
            for (int a = e->parent; a >= 0 && !functional; a = r->ops[a].parent)
                functional = !strncmp(r->ops[a].name, "_c10d_functional::", 18);
            if (functional) pending[np++] = coll_of[i];
        }
        if (strcmp(e->name, "_c10d_functional::wait_tensor")) continue;
        long long n = tt_numel(json_array_get(json_object_get(e->args, "Input Dims"), 0));
        for (int k = 0; k < np; k++) {
            const tt_coll *cl = &r->colls[pending[k]];
            if (cl->out_elems != n) continue;
            add_dep(r->ops[e->top].out_args, cl->id);
            memmove(pending + k, pending + k + 1, (size_t)(np - k - 1) * sizeof *pending);
            np--;
            break;
        }
    }
    free(pending);
    free(coll_of);
    return 0;
}

static void free_rank(tt_rank *r) {
    for (size_t i = 0; i < r->nstrings; i++)
        free(r->strings[i]);
    free(r->strings);
    free(r->ops);
    free(r->frames);
    free(r->steps);
    free(r->runs);
    free(r->colls);
    json_decref(r->root);
}

/* Process and lane names, and the run's description for a page that shows it. */
static void emit_meta(const tt_rank *r, json_t *out) {
    static const struct {
        int tid;
        const char *name;
    } lanes[] = {{0, "ops"}, {1, "compute"}, {2, "comm"}, {4, "comm thread"}, {5, "steps"}};
    char name[64], layout[128];
    snprintf(name, sizeof name, "rank %d (torch)", r->rank);
    json_array_append_new(out, json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph",
                                         "M", "pid", r->rank, "args", "name", name));
    json_array_append_new(out, json_pack("{s:s, s:s, s:i, s:{s:i}}", "name", "process_sort_index",
                                         "ph", "M", "pid", r->rank, "args", "sort_index", r->rank));
    for (size_t i = 0; i < sizeof lanes / sizeof lanes[0]; i++)
        json_array_append_new(out, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name",
                                             "ph", "M", "pid", r->rank, "tid", lanes[i].tid, "args",
                                             "name", lanes[i].name));
    /* no "gflops": the trace does not say how fast this machine multiplies */
    snprintf(layout, sizeof layout, "torch.profiler%s%s%s%s", r->backend ? ", " : "",
             r->backend ? r->backend : "", r->pg_label ? ", group " : "",
             r->pg_label ? r->pg_label : "");
    json_array_append_new(out,
                          json_pack("{s:s, s:s, s:i, s:{s:s, s:s}}", "name", "dt_run", "ph", "M",
                                    "pid", r->rank, "args", "name", "pytorch", "layout", layout));
}

/* One event a line, as src/trace/trace.c writes its files. */
static int write_out(const char *path, const json_t *out, char *err, size_t errcap) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return tt_fail(err, errcap, path, "path too long");
    FILE *f = fopen(tmp, "w");
    if (!f) return tt_fail(err, errcap, path, "cannot write: %s", strerror(errno));
    int bad = fputs("[\n", f) < 0;
    for (size_t i = 0; i < json_array_size(out) && !bad; i++) {
        char *line = json_dumps(json_array_get(out, i), JSON_COMPACT | JSON_REAL_PRECISION(15));
        bad = !line || fprintf(f, "%s%s\n", line, i + 1 < json_array_size(out) ? "," : "") < 0;
        free(line);
    }
    bad |= fputs("]\n", f) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        remove(tmp);
        return tt_fail(err, errcap, path, "cannot write: %s", strerror(errno));
    }
    return 0;
}

int dt_torch_trace_convert(const char *const *in_paths, int n_in, const char *out_path, char *err,
                           size_t errcap) {
    if (err && errcap) err[0] = '\0';
    if (!in_paths || n_in < 1)
        return tt_fail(err, errcap, NULL, "n_in = %d: give at least one input trace", n_in);
    if (!out_path) return tt_fail(err, errcap, NULL, "out_path is NULL");
    for (int i = 0; i < n_in; i++)
        if (!in_paths[i]) return tt_fail(err, errcap, NULL, "in_paths[%d] is NULL", i);
    tt_rank *ranks = calloc((size_t)n_in, sizeof *ranks);
    json_t *out = json_array();
    int rc = 0;
    if (!ranks || !out) rc = tt_fail(err, errcap, NULL, "out of memory");
    double t0 = INFINITY;
    for (int i = 0; i < n_in && !rc; i++) {
        tt_rank *r = &ranks[i];
        rc = load_rank(r, in_paths[i], i, err, errcap);
        for (int k = 0; k < i && !rc; k++)
            if (ranks[k].rank == r->rank)
                rc = tt_fail(err, errcap, in_paths[i], "rank %d is also the rank of %s", r->rank,
                             in_paths[k]);
        if (!rc) rc = analyse(r, err, errcap);
        if (!rc) rc = tt_collect_collectives(r, err, errcap);
        /* one clock for all ranks (one host, or clocks the profiler aligned) */
        for (size_t k = 0; !rc && k < r->nsteps; k++)
            t0 = fmin(t0, r->steps[k].ts);
        for (size_t k = 0; !rc && k < r->nops; k++)
            t0 = fmin(t0, r->ops[k].ts);
        for (size_t k = 0; !rc && k < r->nruns; k++)
            t0 = fmin(t0, r->runs[k].ts);
    }
    for (int i = 0; i < n_in && !rc; i++) {
        emit_meta(&ranks[i], out);
        rc = emit_rank(&ranks[i], t0, out, err, errcap);
    }
    if (!rc) rc = write_out(out_path, out, err, errcap);
    json_decref(out);
    for (int i = 0; ranks && i < n_in; i++)
        free_rank(&ranks[i]);
    free(ranks);
    return rc ? 1 : 0;
}
