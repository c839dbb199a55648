/* Op dispatch: pick the cheapest sharding strategy for the inputs' specs (cached per mesh),
 * redistribute the inputs it needs changed, allocate the output and run the local part.
 *
 * A strategy gives every mesh dim one row of the op's single-mesh-dim rules; the candidates
 * are all combinations, priced by the cost of the redistribute plans the inputs would need
 * (the planner's model), ties broken by fewer inputs changed, then by row order. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "trace/trace_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"
#include "redistribute/redistribute_impl.h"

#define MAX_COMBOS 20000 /* beyond this, each mesh dim keeps its few closest rows */

typedef struct strategy {
    dt_placement in[DT_OP_MAX_INPUTS][DT_MESH_MAX_NDIM];
    dt_placement out[DT_MESH_MAX_NDIM];
    op_out spec;
    char text[160]; /* "S(0),R | R,S(1) -> S(0),S(1)", for traces */
} strategy;

/* ---- the per-mesh cache ------------------------------------------------------------------ */

#define BUCKETS 256

typedef struct entry {
    struct entry *next;
    uint64_t hash, model; /* the cost model version the choice was priced with */
    dt_op op;
    int n;
    op_out in_spec[DT_OP_MAX_INPUTS];
    dt_placement in_pl[DT_OP_MAX_INPUTS][DT_MESH_MAX_NDIM];
    dt_op_args args;
    strategy s;
} entry;

typedef struct cache {
    entry *buckets[BUCKETS];
} cache;

static void cache_free(void *p) {
    cache *c = p;
    if (!c) return;
    for (int b = 0; b < BUCKETS; b++)
        for (entry *e = c->buckets[b], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    free(c);
}

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

/* Arguments are compared field by field: callers' structs may carry padding garbage. */
static uint64_t hash_args(uint64_t h, const dt_op_args *a) {
    union {
        double d;
        uint64_t u;
    } s = {.d = a->scalar};
    h = mix(h, s.u);
    for (int i = 0; i < a->ndims && i < DT_MAX_NDIM; i++) h = mix(h, (uint64_t)a->dims[i]);
    h = mix(h, (uint64_t)a->ndims);
    h = mix(h, (uint64_t)(a->keepdim | a->causal << 1 | a->reduction_mean << 2 | a->correction << 3));
    h = mix(h, (uint64_t)a->dim ^ (uint64_t)a->dim2 << 16);
    h = mix(h, (uint64_t)a->start ^ (uint64_t)a->end << 20);
    for (int i = 0; i < a->shape_ndim && i < DT_MAX_NDIM; i++) h = mix(h, (uint64_t)a->shape[i]);
    return mix(h, (uint64_t)a->shape_ndim);
}

static int same_args(const dt_op_args *a, const dt_op_args *b) {
    if (a->scalar != b->scalar || a->ndims != b->ndims || a->keepdim != b->keepdim ||
        a->dim != b->dim || a->dim2 != b->dim2 || a->start != b->start || a->end != b->end ||
        a->shape_ndim != b->shape_ndim || a->correction != b->correction ||
        a->causal != b->causal || a->reduction_mean != b->reduction_mean)
        return 0;
    for (int i = 0; i < a->ndims && i < DT_MAX_NDIM; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    for (int i = 0; i < a->shape_ndim && i < DT_MAX_NDIM; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static uint64_t hash_call(dt_op op, dt_tensor *const *in, int n, const dt_op_args *a, int mnd) {
    uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)op);
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = in[i];
        if (!t) {
            h = mix(h, 0xffff);
            continue;
        }
        h = mix(h, (uint64_t)t->ndim << 8 | (uint64_t)t->dtype);
        for (int d = 0; d < t->ndim; d++) h = mix(h, (uint64_t)t->shape[d]);
        for (int m = 0; m < mnd; m++)
            h = mix(h, (uint64_t)t->placements[m].kind << 16 | (uint64_t)t->placements[m].dim << 4 |
                           (uint64_t)t->placements[m].op);
    }
    return hash_args(h, a);
}

static int entry_matches(const entry *e, uint64_t h, dt_op op, dt_tensor *const *in, int n,
                         const dt_op_args *a, int mnd) {
    if (e->hash != h || e->op != op || e->n != n || !same_args(&e->args, a) ||
        e->model != dt_cost_model_version(in[0]->mesh->ctx))
        return 0;
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = in[i];
        if (!t) {
            if (e->in_spec[i].ndim != -1) return 0;
            continue;
        }
        if (e->in_spec[i].ndim != t->ndim || e->in_spec[i].dtype != t->dtype ||
            memcmp(e->in_spec[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
            return 0;
        for (int m = 0; m < mnd; m++)
            if (!dt_placement_equal(e->in_pl[i][m], t->placements[m])) return 0;
    }
    return 1;
}

/* ---- strategy search --------------------------------------------------------------------- */

static int valid_for(const dt_placement *p, int mnd, int ndim) {
    for (int m = 0; m < mnd; m++)
        if (p[m].kind == DT_PLACEMENT_SHARD && (p[m].dim < 0 || p[m].dim >= ndim)) return 0;
    return 1;
}

/* Many mesh dims multiply the combinations: keep, per mesh dim, the keep rows that leave the
 * most inputs as they are on that dim (row order breaks ties, so R -> R, first, stays). */
static int closest_rows(rule_row *rows, int nrows, dt_tensor *const *in, int n, int m, int keep) {
    if (nrows <= keep) return nrows;
    int score[DT_OP_MAX_ROWS];
    for (int r = 0; r < nrows; r++) {
        score[r] = 0;
        for (int i = 0; i < n; i++)
            score[r] += in[i] && dt_placement_equal(rows[r].in[i], in[i]->placements[m]);
    }
    for (int k = 0; k < keep; k++) { /* selection: move the best remaining row to slot k */
        int best = k;
        for (int r = k + 1; r < nrows; r++)
            if (score[r] > score[best]) best = r;
        rule_row tr = rows[k];
        int ts = score[k];
        rows[k] = rows[best], score[k] = score[best];
        rows[best] = tr, score[best] = ts;
    }
    return keep;
}

static dt_status choose(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                        const dt_op_args *a, strategy *best) {
    dt_mesh *mesh = in[0]->mesh;
    int mnd = mesh->ndim;
    op_input gin[DT_OP_MAX_INPUTS];
    for (int i = 0; i < n; i++)
        gin[i] = in[i] ? (op_input){in[i]->ndim, in[i]->shape, in[i]->dtype}
                       : (op_input){-1, NULL, DT_F32};
    DT_CHECK(f->infer(op, gin, n, a, &best->spec));
    /* Output shapes come from arguments too (view, expand): the one checked size product. */
    DT_CHECK(dt_shape_dtype_check(dt_op_name(op), best->spec.ndim, best->spec.shape,
                                  best->spec.dtype));
    static _Thread_local rule_row rows[DT_MESH_MAX_NDIM][DT_OP_MAX_ROWS];
    int nrows[DT_MESH_MAX_NDIM];
    long combos = 1;
    for (int m = 0; m < mnd; m++) {
        nrows[m] = f->rules(op, gin, n, a, mesh->shape[m], mesh->nranks, rows[m]);
        combos *= nrows[m];
    }
    for (int keep = 4; combos > MAX_COMBOS && keep >= 1; keep--) {
        combos = 1;
        for (int m = 0; m < mnd; m++) {
            nrows[m] = closest_rows(rows[m], nrows[m], in, n, m, keep);
            combos *= nrows[m];
        }
    }
    double best_cost = 0;
    int best_changed = 0, found = 0;
    int pick[DT_MESH_MAX_NDIM] = {0};
    for (long k = 0; k < combos; k++) {
        strategy s;
        long rem = k;
        for (int m = mnd - 1; m >= 0; m--) pick[m] = (int)(rem % nrows[m]), rem /= nrows[m];
        for (int m = 0; m < mnd; m++) {
            for (int i = 0; i < n; i++) s.in[i][m] = rows[m][pick[m]].in[i];
            s.out[m] = rows[m][pick[m]].out;
        }
        if (!valid_for(s.out, mnd, best->spec.ndim)) continue;
        double cost = 0;
        int changed = 0, ok = 1;
        for (int i = 0; i < n && ok; i++) {
            if (!in[i]) continue;
            ok = valid_for(s.in[i], mnd, in[i]->ndim);
            int same = 1;
            for (int m = 0; m < mnd; m++) same &= dt_placement_equal(s.in[i][m], in[i]->placements[m]);
            if (!ok || same) continue;
            const dt_plan *plan;
            DT_CHECK(dt_redistribute_cached_plan(in[i], s.in[i], &plan));
            cost += plan->cost_us;
            changed++;
        }
        if (!ok) continue;
        if (!found || cost < best_cost || (cost == best_cost && changed < best_changed)) {
            found = 1;
            best_cost = cost;
            best_changed = changed;
            memcpy(best->in, s.in, sizeof s.in);
            memcpy(best->out, s.out, sizeof s.out);
        }
    }
    if (!found)
        return dt_error(DT_ERR_PLACEMENT, "%s: no sharding strategy fits these inputs",
                        dt_op_name(op));
    return DT_OK;
}

/* "S(0),R | R,S(1) -> S(0),S(1)" for the trace. */
static void strategy_text(const strategy *s, int n, int mnd, char *buf, size_t cap) {
    size_t o = 0;
    char one[128];
    for (int i = 0; i < n && o < cap; i++) {
        dt_placements_format(s->in[i], mnd, one, sizeof one);
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? " | " : "", one);
    }
    dt_placements_format(s->out, mnd, one, sizeof one);
    if (o < cap) snprintf(buf + o, cap - o, " -> %s", one);
}

static dt_status lookup(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                        const dt_op_args *a, const strategy **out) {
    dt_mesh *mesh = in[0]->mesh;
    if (!mesh->op_cache) {
        if (!(mesh->op_cache = calloc(1, sizeof(cache))))
            return dt_error(DT_ERR_NOMEM, "dispatch: out of memory");
        mesh->op_cache_free = cache_free;
    }
    cache *c = mesh->op_cache;
    uint64_t h = hash_call(op, in, n, a, mesh->ndim);
    entry **head = &c->buckets[h % BUCKETS];
    for (entry *e = *head; e; e = e->next)
        if (entry_matches(e, h, op, in, n, a, mesh->ndim)) {
            *out = &e->s;
            return DT_OK;
        }
    entry *e = calloc(1, sizeof *e);
    if (!e) return dt_error(DT_ERR_NOMEM, "dispatch: out of memory");
    dt_status st = choose(op, f, in, n, a, &e->s);
    if (st != DT_OK) {
        free(e);
        return st;
    }
    strategy_text(&e->s, n, mesh->ndim, e->s.text, sizeof e->s.text);
    e->hash = h;
    e->model = dt_cost_model_version(mesh->ctx);
    e->op = op;
    e->n = n;
    e->args = *a;
    for (int i = 0; i < n; i++) {
        e->in_spec[i].ndim = in[i] ? in[i]->ndim : -1;
        if (!in[i]) continue;
        e->in_spec[i].dtype = in[i]->dtype;
        memcpy(e->in_spec[i].shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->ndim);
        memcpy(e->in_pl[i], in[i]->placements, sizeof(dt_placement) * (size_t)mesh->ndim);
    }
    e->next = *head;
    *head = e;
    *out = &e->s;
    return DT_OK;
}

/* ---- running ----------------------------------------------------------------------------- */

static dt_status check_inputs(dt_op op, const op_family *f, dt_tensor *const *in, int n) {
    DT_ARG(f != NULL, "dt_op_call: argument op has unknown value %d", (int)op);
    DT_ARG(in != NULL, "%s: argument inputs is NULL", dt_op_name(op));
    DT_ARG(n >= f->min_inputs && n <= f->max_inputs, "%s: takes %d to %d inputs, got %d",
           dt_op_name(op), f->min_inputs, f->max_inputs, n);
    for (int i = 0; i < n; i++) {
        DT_ARG(in[i] != NULL || (f->optional & (1u << i)), "%s: input %d is NULL",
               dt_op_name(op), i);
        if (in[i] && in[i]->magic != DT_TENSOR_LIVE)
            return dt_error(DT_ERR_ARG, "%s: input %d (%p) is a released tensor", dt_op_name(op),
                            i, (void *)in[i]);
        if (in[i] && in[i]->mesh != in[0]->mesh)
            return dt_error(DT_ERR_MESH, "%s: input %d lives on another mesh than input 0",
                            dt_op_name(op), i);
        if (in[i] && (in[i]->device.kind != in[0]->device.kind ||
                      in[i]->device.index != in[0]->device.index))
            return dt_error(DT_ERR_DEVICE, "%s: input %d is on %s:%d but input 0 is on %s:%d "
                                           "(move it with dt_tensor_to_device)",
                            dt_op_name(op), i, dt_mem_ops_of(in[i]->device.kind)->name,
                            in[i]->device.index, dt_mem_ops_of(in[0]->device.kind)->name,
                            in[0]->device.index);
    }
    return DT_OK;
}

static dt_status redistribute_input(dt_op op, int i, dt_tensor *t, const dt_placement *want,
                                    dt_tensor **out) {
    int mnd = t->mesh->ndim;
    char have[128], need[128];
    dt_placements_format(t->placements, mnd, have, sizeof have);
    dt_placements_format(want, mnd, need, sizeof need);
    int mode = t->mesh->ctx->redistribute_mode;
    if (mode == DT_REDISTRIBUTE_EXPLICIT)
        return dt_error(DT_ERR_PLACEMENT, "%s: input %d is %s but the chosen strategy needs %s "
                                          "(explicit mode: redistribute it first)",
                        dt_op_name(op), i, have, need);
    if (mode == DT_REDISTRIBUTE_LOG)
        fprintf(stderr, "[dtensor rank %d] %s: input %d %s -> %s\n", t->mesh->ctx->rank,
                dt_op_name(op), i, have, need);
    return dt_tensor_redistribute(t, t->mesh->ndim, want, out);
}

static void local_of(const dt_tensor *t, dt_local *l) {
    *l = (dt_local){.data = t->data, .dtype = t->dtype, .ndim = t->ndim, .device = t->device};
    memcpy(l->shape, t->local_shape, sizeof(int64_t) * (size_t)t->ndim);
}

static dt_status run(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                     const dt_op_args *a, const strategy *s, dt_tensor **out) {
    dt_mesh *mesh = in[0]->mesh;
    dt_ctx *ctx = mesh->ctx;
    double t0 = ctx->trace ? dt_now_us() : 0;
    dt_ctx_bind(ctx);
    dt_tensor *moved[DT_OP_MAX_INPUTS] = {0}, *use[DT_OP_MAX_INPUTS] = {0};
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++) {
        use[i] = in[i];
        if (!in[i]) continue;
        int same = 1;
        for (int m = 0; m < mesh->ndim; m++)
            same &= dt_placement_equal(s->in[i][m], in[i]->placements[m]);
        if (!same && (st = redistribute_input(op, i, in[i], s->in[i], &moved[i])) == DT_OK)
            use[i] = moved[i];
    }
    dt_tensor *o = NULL;
    dt_device dev = in[0]->device;
    if (st == DT_OK)
        st = dt_tensor_alloc(mesh, dev, s->spec.dtype, s->spec.ndim, s->spec.shape, s->out, &o);
    if (st == DT_OK) {
        op_input gin[DT_OP_MAX_INPUTS];
        local_call c = {.op = op, .args = a, .ninputs = n, .global = gin,
                        .k = dt_kernels_of(dev.kind), .mem = dt_mem_ops_of(dev.kind)};
        for (int i = 0; i < n; i++) {
            gin[i] = use[i] ? (op_input){use[i]->ndim, use[i]->shape, use[i]->dtype}
                            : (op_input){-1, NULL, DT_F32};
            if (!use[i]) continue;
            local_of(use[i], &c.in[i]);
            memcpy(c.in_offset[i], use[i]->local_offset, sizeof(int64_t) * (size_t)use[i]->ndim);
        }
        local_of(o, &c.out);
        double tk = ctx->trace ? dt_now_us() : 0;
        st = f->compute(&c);
        if (ctx->trace) dt_trace_record(ctx, DT_LANE_COMPUTE, dt_op_name(op), tk, "%zu elements out", o->local_numel);
    }
    for (int i = 0; i < n; i++) dt_tensor_release(moved[i]);
    if (st != DT_OK) {
        dt_tensor_release(o);
        return st;
    }
    if (ctx->trace) dt_trace_record(ctx, DT_LANE_OPS, dt_op_name(op), t0, "%s", s->text);
    *out = o;
    return DT_OK;
}

dt_status dt_op_call(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                     dt_tensor **out) {
    const op_family *f = dt_op_family(op);
    DT_CHECK(check_inputs(op, f, inputs, ninputs));
    DT_ARG(out != NULL, "%s: argument out is NULL", dt_op_name(op));
    dt_op_args zero = {0};
    if (!args) args = &zero;
    if (f->composite) return f->composite(op, inputs, ninputs, args, out);
    const strategy *s;
    DT_CHECK(lookup(op, f, inputs, ninputs, args, &s));
    return run(op, f, inputs, ninputs, args, s, out);
}

dt_status dt_op_strategy(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                         dt_placement *input_placements_out, dt_placement *output_placements_out) {
    const op_family *f = dt_op_family(op);
    DT_CHECK(check_inputs(op, f, inputs, ninputs));
    DT_ARG(input_placements_out && output_placements_out,
           "%s: input_placements_out or output_placements_out is NULL", dt_op_name(op));
    if (f->composite)
        return dt_error(DT_ERR_UNSUPPORTED, "%s is built from other ops: it has no single "
                                            "strategy", dt_op_name(op));
    dt_op_args zero = {0};
    const strategy *s;
    DT_CHECK(lookup(op, f, inputs, ninputs, args ? args : &zero, &s));
    int mnd = inputs[0]->mesh->ndim;
    for (int i = 0; i < ninputs; i++)
        memcpy(input_placements_out + i * mnd, s->in[i], sizeof(dt_placement) * (size_t)mnd);
    memcpy(output_placements_out, s->out, sizeof(dt_placement) * (size_t)mnd);
    return DT_OK;
}

dt_status dt_ctx_set_redistribute_mode(dt_ctx *ctx, dt_redistribute_mode mode) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG((unsigned)mode <= DT_REDISTRIBUTE_EXPLICIT,
           "dt_ctx_set_redistribute_mode: argument mode has unknown value %d", (int)mode);
    ctx->redistribute_mode = (int)mode;
    return DT_OK;
}
