/* A row's call run on ranks of the local runtime (tools/explain.h): what dt_op_choose cannot
 * answer from specs (composites, unbind, split, the like-factories, new_full, cast) is answered
 * by doing it, with generated inputs, and reading the output's placements and the collectives
 * the rank's comm counters saw. Nothing here decides a placement. */
#include <stdlib.h>
#include <string.h>

#include "explain.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status try_st_ = (call);                                                                \
        if (try_st_ != DT_OK) return try_st_;                                                      \
    } while (0)

enum { RUN_MAX_RANKS = 64, RUN_MAX_OUTS = 256 };
#define RUN_MAX_NUMEL ((size_t)1 << 24)

static size_t numel(const dt_spec *s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= (size_t)s->shape[d];
    return n;
}

/* Index inputs (embedding ids, class labels, gather and scatter indices) hold valid ids: the
 * size of the dim they index. */
static int64_t index_range(const explain_row *r) {
    const dt_spec *x = &r->in[0];
    const dt_op_args *a = &r->call.args;
    if (r->call.form != EXPLAIN_OP) return 1;
    switch (r->call.op) {
    case DT_OP_EMBEDDING:
        return x->ndim ? x->shape[0] : 1;
    case DT_OP_CROSS_ENTROPY:
        return x->ndim > 1 ? x->shape[1] : 1;
    case DT_OP_PICK:
        return x->ndim ? x->shape[x->ndim - 1] : 1;
    case DT_OP_GATHER: {
        int d = a->dim < 0 ? a->dim + x->ndim : a->dim;
        return d >= 0 && d < x->ndim ? x->shape[d] : 1;
    }
    case DT_OP_SCATTER_ADD: {
        int d = a->dim < 0 ? a->dim + a->shape_ndim : a->dim;
        return d >= 0 && d < a->shape_ndim ? a->shape[d] : 1;
    }
    case DT_OP_ONE_HOT:
        return a->k > 0 ? a->k : 1;
    default:
        return 1;
    }
}

dt_status explain_input_make(dt_mesh *mesh, const explain_row *r, int i, dt_tensor **out) {
    const dt_spec *s = &r->in[i];
    size_t n = numel(s);
    int index = s->dtype == DT_I64 || s->dtype == DT_I32;
    int64_t range = index_range(r);
    double *v = malloc(n * sizeof *v + 8);
    void *buf = malloc(n * 8 + 8);
    dt_status st = v && buf ? DT_OK : dt_error_set(DT_ERR_NOMEM, "input %d: out of memory", i);
    for (size_t k = 0; st == DT_OK && k < n; k++) /* small values, exact in every dtype */
        v[k] = index ? (double)((int64_t)k % range)
                     : (double)((int64_t)((k * 7 + (size_t)i * 5) % 17) - 8) / 8;
    if (st == DT_OK) st = dt_convert_from_f64(s->dtype, v, buf, n);
    if (st == DT_OK)
        st = dt_tensor_distribute(mesh, buf, s->dtype, s->ndim, s->shape, s->nplacements,
                                  s->placements, DT_ALL_RANKS, out);
    free(buf), free(v);
    return st;
}

/* "d0+d1" (the communicator's label: its mesh dims' names) -> "dim0+dim1"; 0 when a name is
 * not one of mesh's dims. */
static int label_dims(const dt_mesh *mesh, const char *label, char *out, size_t cap) {
    char copy[64];
    snprintf(copy, sizeof copy, "%s", label);
    size_t o = 0;
    out[0] = '\0';
    for (char *save, *name = strtok_r(copy, "+", &save); name; name = strtok_r(NULL, "+", &save)) {
        int m;
        if (dt_mesh_dim_index(mesh, name, &m) != DT_OK) return 0;
        o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, "%sdim%d", o ? "+" : "", m);
    }
    return o > 0 && o < cap;
}

/* The call itself, as a user makes it: the outputs into outs (at most max), their count. */
static dt_status call(const explain_row *r, dt_tensor *const *in, dt_tensor **outs, int max,
                      int *nout) {
    const explain_call *c = &r->call;
    dt_tensor_info x;
    *nout = 1;
    if (c->form != EXPLAIN_OP) {
        if (r->n != 1)
            return dt_error_set(DT_ERR_ARG, "%s takes 1 input, got %d", explain_call_name(c), r->n);
        TRY(dt_tensor_info_get(in[0], &x));
    }
    switch (c->form) {
    case EXPLAIN_OP:
        return dt_op_call(c->op, in, r->n, &c->args, &outs[0]);
    case EXPLAIN_IDENTITY:
        return dt_t(in[0], &outs[0]);
    case EXPLAIN_UNBIND: {
        int d = c->dim < 0 ? c->dim + x.ndim : c->dim;
        int n = d >= 0 && d < x.ndim ? (int)x.shape[d] : 0;
        if (n > max)
            return dt_error_set(DT_ERR_UNSUPPORTED, "unbind: %d pieces (at most %d)", n, max);
        *nout = n;
        return dt_unbind(in[0], c->dim, n, outs);
    }
    case EXPLAIN_SPLIT:
        *nout = c->nsizes;
        return dt_split(in[0], c->dim, c->sizes, c->nsizes, outs);
    case EXPLAIN_ZEROS_LIKE:
        return dt_tensor_zeros_like(in[0], &outs[0]);
    case EXPLAIN_ONES_LIKE:
        return dt_tensor_ones_like(in[0], &outs[0]);
    case EXPLAIN_EMPTY_LIKE:
        return dt_tensor_empty_like(in[0], &outs[0]);
    case EXPLAIN_FULL_LIKE:
        return dt_tensor_full_like(in[0], c->value, &outs[0]);
    case EXPLAIN_NEW_FULL:
        return dt_tensor_new_full(in[0], c->nsizes, c->sizes, c->value, &outs[0]);
    case EXPLAIN_CAST:
        return dt_cast(in[0], c->dtype, &outs[0]);
    default:
        return dt_error_set(DT_ERR_ARG, "explain_call_run: form %d is none", (int)c->form);
    }
}

dt_status explain_call_run(dt_ctx *ctx, const explain_row *r, dt_tensor *const *in,
                           explain_seen *seen) {
    dt_tensor *outs[RUN_MAX_OUTS] = {0};
    int nout = 0;
    TRY(dt_comm_stats_reset(ctx));
    dt_status st = call(r, in, outs, RUN_MAX_OUTS, &nout);
    if (st != DT_OK) return st;
    dt_comm_stats stats;
    dt_tensor_info first, info;
    st = dt_comm_stats_get(ctx, &stats);
    if (st == DT_OK && nout) st = dt_tensor_info_get(outs[0], &first);
    for (int k = 1; st == DT_OK && k < nout; k++) { /* pieces placed alike, or say which not */
        st = dt_tensor_info_get(outs[k], &info);
        for (int m = 0; st == DT_OK && m < first.mesh_ndim; m++)
            if (!dt_placement_equal(info.placements[m], first.placements[m]))
                st = dt_error_set(DT_ERR_PLACEMENT,
                                  "%s: output %d is placed otherwise than "
                                  "output 0 (mesh dim %d)",
                                  explain_call_name(&r->call), k, m);
    }
    int me = st == DT_OK && nout && dt_ctx_rank(ctx) == 0; /* rank 0 reports */
    if (me) {
        memcpy(seen->out, first.placements, sizeof(dt_placement) * (size_t)first.mesh_ndim);
        seen->out_dtype = first.dtype, seen->out_ndim = first.ndim, seen->nout = nout;
        memcpy(seen->out_shape, first.shape, sizeof first.shape);
    }
    for (int e = 0; me && e < stats.nentries; e++) {
        const dt_comm_stats_entry *en = &stats.entries[e];
        char dims[48];
        if (en->kind != DT_COLL_ALL_GATHER && en->kind != DT_COLL_ALL_TO_ALL &&
            en->kind != DT_COLL_ALL_REDUCE && en->kind != DT_COLL_REDUCE_SCATTER)
            continue;
        if (!label_dims(first.mesh, en->group, dims, sizeof dims)) {
            snprintf(dims, sizeof dims, "?");
            seen->kinds_only = 1;
        }
        for (uint64_t c = 0; c < en->calls && seen->ncoll < EXPLAIN_MAX_COLL; c++)
            snprintf(seen->coll[seen->ncoll++], 64, "%s[%s]", dt_coll_kind_name(en->kind), dims);
    }
    for (int k = 0; k < nout; k++)
        dt_tensor_release(outs[k]);
    return st;
}

/* ---- the engine ------------------------------------------------------------------------- */

typedef struct run {
    const explain_row *r;
    explain_seen *seen;
} run;

static dt_status run_body(dt_ctx *ctx, void *arg) {
    run *p = arg;
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, p->r->mesh_text, &mesh));
    dt_tensor *in[DT_OP_MAX_USER_INPUTS] = {0};
    dt_status st = DT_OK;
    for (int i = 0; i < p->r->n && st == DT_OK; i++)
        st = explain_input_make(mesh, p->r, i, &in[i]);
    if (st == DT_OK) st = explain_call_run(ctx, p->r, in, p->seen);
    for (int i = 0; i < p->r->n; i++)
        dt_tensor_release(in[i]);
    dt_mesh_release(mesh);
    return st;
}

dt_status explain_engine_run(const explain_row *r, explain_seen *seen, void *user) {
    (void)user;
    int nranks = 1;
    for (int m = 0; m < r->mesh_ndim; m++)
        nranks *= r->mesh_shape[m];
    if (nranks > RUN_MAX_RANKS)
        return dt_error_set(DT_ERR_UNSUPPORTED,
                            "%s is answered by running it, on at most %d "
                            "ranks (the mesh has %d)",
                            explain_call_name(&r->call), RUN_MAX_RANKS, nranks);
    for (int i = 0; i < r->n; i++)
        if (numel(&r->in[i]) > RUN_MAX_NUMEL)
            return dt_error_set(DT_ERR_UNSUPPORTED,
                                "%s is answered by running it, on inputs of "
                                "at most %zu elements (input %d has %zu)",
                                explain_call_name(&r->call), RUN_MAX_NUMEL, i, numel(&r->in[i]));
    run p = {.r = r, .seen = seen};
    return dt_local_run(nranks, run_body, &p, NULL);
}

dt_status explain_engine_tool(const explain_row *r, explain_seen *seen, void *user) {
    dt_status st = explain_engine_choose(r, seen, user);
    int runnable = r->call.form != EXPLAIN_OP || (unsigned)r->call.op < DT_OP_COUNT;
    if (st == DT_ERR_UNSUPPORTED && runnable) { /* composites and the other calls */
        explain_seen none = {0};
        *seen = none;
        st = explain_engine_run(r, seen, NULL);
    }
    return st;
}

dt_status explain_run_format(const explain_row *r, const explain_seen *seen, char *buf,
                             size_t cap) {
    char text[128], pl[16 * DT_MESH_MAX_NDIM];
    TRY(explain_call_format(&r->call, text, sizeof text));
    size_t o = 0;
#define PUT(...)                                                                                   \
    (o += (size_t)snprintf(buf + (o < cap ? o : cap), o < cap ? cap - o : 0, __VA_ARGS__))
    if (r->call.form == EXPLAIN_IDENTITY)
        PUT("%s on mesh %s: the input as is (dt_t of a %d-D tensor)\n", text, r->mesh_text,
            r->in[0].ndim);
    else
        PUT("%s on mesh %s: not one dispatched op; run on local ranks\n", text, r->mesh_text);
    for (int i = 0; i < r->n; i++) {
        dt_placements_format(r->in[i].placements, r->mesh_ndim, pl, sizeof pl);
        PUT("  input %d: %s[", i, dt_dtype_name(r->in[i].dtype));
        for (int d = 0; d < r->in[i].ndim; d++)
            PUT(d ? ",%lld" : "%lld", (long long)r->in[i].shape[d]);
        PUT("] %s\n", pl);
    }
    dt_placements_format(seen->out, r->mesh_ndim, pl, sizeof pl);
    PUT("  output: %s[", dt_dtype_name(seen->out_dtype));
    for (int d = 0; d < seen->out_ndim; d++)
        PUT(d ? ",%lld" : "%lld", (long long)seen->out_shape[d]);
    PUT("] %s", pl);
    if (seen->nout > 1) PUT(" (each of %d outputs)", seen->nout);
    PUT("\n  collectives:%s", seen->ncoll ? "" : " none");
    for (int c = 0; c < seen->ncoll; c++)
        PUT(" %s%s", seen->coll[c], c + 1 < seen->ncoll ? ";" : "");
    PUT("\ntotal: %d collective%s\n", seen->ncoll, seen->ncoll == 1 ? "" : "s");
#undef PUT
    if (o >= cap) return dt_error_set(DT_ERR_SIZE, "explain_run_format: %zu bytes needed", o + 1);
    return DT_OK;
}
