/* Op dispatch in two steps that record nothing (autograd/record.c records around them): choose
 * the cheapest sharding strategy for the inputs' specs (cached per mesh), and compute: move
 * the inputs it needs changed, allocate the outputs and run the local part.
 *
 * A strategy gives every mesh dim one row of the op's single-mesh-dim rules; the candidates
 * are all combinations, priced by the cost of the redistribute plans the inputs would need
 * (the planner's model), ties broken by fewer inputs changed, then by row order. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "core/check.h"
#include "core/lru.h"
#include "dtensor/agree.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/dispatch_impl.h"
#include "ops/dispatch_memo.h"
#include "ops/op_impl.h"
#include "ops/strategy.h"
#include "redistribute/redistribute_impl.h"

/* args nullable (no arguments). A call like the op's last one on this mesh finds its entry in
 * the memo (dispatch_memo.h) without building a key; the rest is in dispatch_cache.c. */
static dt_status lookup(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                        const dt_op_args *args, const strategy **out) {
    dt_mesh *mesh = in[0]->mesh;
    uint64_t model = dt_cost_model_version(mesh->ctx);
    dt_lru *cache = mesh->caches[DT_CACHE_STRATEGY];
    dt_memo *memo = cache ? dt_memo_slot(mesh, op) : NULL;
    dt_lru_entry *e = dt_memo_match(memo, cache, op, in, n, args, mesh->ndim, model);
    if (e) {
        *out = dt_lru_hit(cache, e);
        return DT_OK;
    }
    return dt_strategy_lookup_slow(op, f, in, n, args, model, out);
}

/* ---- running ----------------------------------------------------------------------------- */

/* The common case in one pass: a built-in op, its input count, every input present, live, not
 * dropped, on input 0's mesh object and device. Anything else (an optional input left out, a
 * user op, an equal mesh made apart, an error) takes the full check, which names the fault. */
static bool plainly_valid(dt_op op, dt_tensor *const *in, int n) {
    const op_desc *d = dt_op_desc(op);
    if (!d || !in || n < d->min_inputs || n > d->max_inputs || !in[0]) return false;
    const dt_mesh *mesh = in[0]->mesh;
    dt_device dev = in[0]->device;
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = in[i];
        if (!t || t->magic != DT_TENSOR_LIVE || t->dropped || t->mesh != mesh ||
            t->device.kind != dev.kind || t->device.index != dev.index)
            return false;
    }
    return true;
}

dt_status dt_dispatch_check(dt_op op, dt_tensor *const *in, int n) {
    if (plainly_valid(op, in, n)) return DT_OK;
    DT_CHECK(dt_op_inputs_check("dt_op_call", op, (const void *const *)in, n));
    for (int i = 0; i < n; i++) {
        if (in[i] && in[i]->magic != DT_TENSOR_LIVE)
            return dt_error(DT_ERR_ARG, "%s: input %d (%p) is a released tensor", dt_op_name(op), i,
                            (void *)in[i]);
        if (in[i] && dt_tensor_storage_dropped(in[i]))
            return dt_error(DT_ERR_ARG,
                            "%s: input %d's storage was dropped after a forward "
                            "(activation checkpointing or FSDP resharding): only "
                            "backward may read it",
                            dt_op_name(op), i);
        /* Meshes compare by value: two made alike over the same ranks are one. */
        if (in[i] && in[i]->mesh != in[0]->mesh && !dt_mesh_equal(in[i]->mesh, in[0]->mesh))
            return dt_error(DT_ERR_MESH,
                            "%s: input %d lives on another mesh than input 0 (shape "
                            "or ranks differ; move it with "
                            "dt_tensor_redistribute_to)",
                            dt_op_name(op), i);
        if (in[i] && (in[i]->device.kind != in[0]->device.kind ||
                      in[i]->device.index != in[0]->device.index))
            return dt_error(DT_ERR_DEVICE,
                            "%s: input %d is on %s:%d but input 0 is on %s:%d "
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
    int mode = dt_redistribute_mode_of(t->mesh->ctx);
    if (mode == DT_REDISTRIBUTE_EXPLICIT)
        return dt_error(DT_ERR_PLACEMENT,
                        "%s: input %d is %s but the chosen strategy needs %s "
                        "(explicit mode: redistribute it first)",
                        dt_op_name(op), i, have, need);
    if (mode == DT_REDISTRIBUTE_LOG)
        fprintf(stderr, "[dtensor rank %d] %s: input %d %s -> %s\n", t->mesh->ctx->rank,
                dt_op_name(op), i, have, need);
    return dt_redistribute_run(t, want, out);
}

/* Field by field and the whole shape array (a fixed-size copy, inlined; a tensor's dims past
 * ndim are zero): no zeroing of the block first, no memcpy call. */
static void local_of(const dt_tensor *t, dt_local *l) {
    l->data = t->data, l->dtype = t->dtype, l->ndim = t->ndim, l->device = t->device;
    _Static_assert(sizeof l->shape == sizeof t->local_shape, "block and tensor shapes differ");
    memcpy(l->shape, t->local_shape, sizeof l->shape);
}

/* The collectives whose results an op's inputs are (their trace ids, at most
 * DT_TRACE_MAX_DEPS): what the op and its kernel waited for. A kernel's output is stream
 * order on the compute row, not listed. */
static int input_deps(dt_ctx *ctx, dt_tensor *const *use, int n, int64_t *deps) {
    int nd = 0;
    for (int i = 0; i < n && nd < DT_TRACE_MAX_DEPS; i++) {
        if (!use[i] || !use[i]->trace_src) continue;
        int lane = dt_trace_lane_of(ctx->trace, use[i]->trace_src);
        if (lane == DT_LANE_COMM || lane == DT_LANE_COMM_THREAD) deps[nd++] = use[i]->trace_src;
    }
    return nd;
}

/* The local kernel on inputs already in the strategy's placements, into o's storage. */
static dt_status compute_local(dt_op op, const op_family *f, dt_tensor *const *use, int n,
                               const dt_op_args *a, dt_tensor *o, dt_tensor *const *ax, int na) {
    dt_ctx *ctx = o->mesh->ctx;
    dt_device dev = o->device;
    /* A rank outside the mesh holds nothing of any input or of the output: nothing to run. */
    if (o->mesh->rank < 0) return DT_OK;
    op_input gin[DT_OP_MAX_INPUTS];
    /* Filled field by field, not zeroed whole: the call's 1 KiB of blocks and offsets cost a
     * small op more than its kernel. Slots past n and absent inputs read as empty blocks. */
    local_call c;
    c.op = op, c.args = a, c.ninputs = n, c.global = gin, c.naux = na;
    c.k = dt_kernels_of(dev.kind), c.mem = dt_mem_ops_of(dev.kind);
    dt_dispatch_globals(use, n, gin);
    for (int i = 0; i < n; i++) {
        if (use[i]) {
            local_of(use[i], &c.in[i]);
            memcpy(c.in_offset[i], use[i]->local_offset, sizeof c.in_offset[i]);
        } else {
            memset(&c.in[i], 0, sizeof c.in[i]);
            memset(c.in_offset[i], 0, sizeof c.in_offset[i]);
        }
    }
    for (int i = n; i < DT_OP_MAX_INPUTS; i++)
        c.in[i].data = NULL, c.in[i].ndim = 0;
    local_of(o, &c.out);
    memcpy(c.out_offset, o->local_offset, sizeof c.out_offset);
    for (int i = 0; i < na; i++)
        local_of(ax[i], &c.aux[i]);
    double tk = ctx->trace ? dt_now_us() : 0;
    dt_status st = f->compute(&c);
    if (ctx->trace && dt_trace_is_on(ctx->trace)) { /* its outputs name it, for readers */
        int64_t deps[DT_TRACE_MAX_DEPS];
        dt_trace_args ta = {.deps = deps,
                            .ndeps = input_deps(ctx, use, n, deps),
                            .op = dt_op_name(op),
                            .module = dt_comm_module_tls};
        int64_t id = dt_trace_add_args(ctx->trace, DT_LANE_COMPUTE, dt_op_name(op), tk, &ta,
                                       "%zu elements out", o->local_numel);
        o->trace_src = id;
        for (int i = 0; i < na; i++)
            ax[i]->trace_src = id;
    }
    return st;
}

/* An aux output's placements from the first output's (op_out.sums_rows, grad_of) and, for
 * grad_of, the placements its input was used in. */
static const dt_placement *aux_placements(const op_out *spec, const dt_mesh *mesh,
                                          const dt_placement *out, dt_tensor *const *use,
                                          dt_placement *buf) {
    if (!spec->sums_rows && !spec->grad_of) return out;
    const dt_placement *src = spec->grad_of ? use[spec->grad_of - 1]->placements : NULL;
    for (int m = 0; m < mesh->ndim; m++) {
        int sum =
            out[m].kind == DT_PLACEMENT_SHARD && (!src || src[m].kind == DT_PLACEMENT_REPLICATE);
        buf[m] = sum ? PP(DT_REDUCE_SUM) : out[m];
    }
    return buf;
}

dt_status dt_op_replay(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                       dt_tensor *out) {
    const op_family *f = dt_op_family(op);
    if (f->composite)
        return dt_error(DT_ERR_ARG, "%s: a composite records no node of its own", dt_op_name(op));
    DT_CHECK(dt_op_kernel_check(op, dt_kernels_of(out->device.kind)));
    dt_ctx_bind(out->mesh->ctx);
    const dt_op_args *a = args ? args : &dt_dispatch_no_args;
    /* The other outputs (attention's log-sum-exp) are computed as the forward did, into
     * temporaries: the node kept its own. */
    op_input gin[DT_OP_MAX_INPUTS];
    dt_dispatch_globals(in, n, gin);
    op_out spec[DT_OP_MAX_AUX];
    int for_grad = 0, na = f->aux ? f->aux(op, gin, n, a, spec, &for_grad) : 0;
    dt_tensor *ax[DT_OP_MAX_AUX] = {0};
    dt_status st = DT_OK;
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int i = 0; i < na && st == DT_OK; i++)
        st = dt_tensor_alloc(out->mesh, out->device, spec[i].dtype, spec[i].ndim, spec[i].shape,
                             aux_placements(&spec[i], out->mesh, out->placements, in, pl), &ax[i]);
    if (st == DT_OK) st = compute_local(op, f, in, n, a, out, ax, na);
    for (int i = 0; i < na; i++)
        dt_tensor_release(ax[i]);
    return st;
}

/* The op's other outputs (f->aux) when this call computes them: n specs in spec, 0 when
 * none. want: the caller asked for them or the call records a node. */
static int aux_specs(dt_op op, const op_family *f, const op_input *gin, int n, const dt_op_args *a,
                     int want, op_out *spec) {
    int for_grad = 0;
    int na = f->aux ? f->aux(op, gin, n, a, spec, &for_grad) : 0;
    return !for_grad || want ? na : 0;
}

dt_status dt_dispatch_choose(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                             const dt_op_choice **out) {
    const op_family *f = dt_op_family(op);
    DT_ASSERT(f && !f->composite);
    DT_CHECK(dt_op_kernel_check(op, dt_kernels_of(in[0]->device.kind)));
    return lookup(op, f, in, n, args, out);
}

dt_status dt_dispatch_route(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                            dt_route_fn decide, dt_placement (*start)[DT_MESH_MAX_NDIM]) {
    DT_ASSERT(dt_op_family(op)->composite); /* dispatch keeps no strategy under this key */
    cache_slot at;
    strategy *s;
    DT_CHECK(dt_strategy_cache_find(op, in, n, args, &at, &s));
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return dt_error(DT_ERR_NOMEM, "dispatch: out of memory");
        DT_CHECK(dt_strategy_cache_put(
            &at, s, decide(op, in, n, args ? args : &dt_dispatch_no_args, s->in)));
    }
    memcpy(start, s->in, sizeof s->in[0] * (size_t)n);
    return DT_OK;
}

/* compute's common case, a new output alone from inputs already in place, untraced: no moves
 * to undo, no other outputs, nothing handed back but the output. */
static dt_status compute_plain(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                               const dt_op_args *a, const dt_op_choice *s, dt_tensor **out) {
    dt_mesh *mesh = in[0]->mesh;
    dt_ctx_bind(mesh->ctx);
    dt_tensor *o;
    DT_CHECK(dt_tensor_alloc_laid_out(mesh, in[0]->device, s->spec.dtype, s->spec.ndim,
                                      s->spec.shape, s->out, s->out_local_shape,
                                      s->out_local_offset, &o));
    dt_status st = compute_local(op, f, in, n, a, o, NULL, 0);
    if (st != DT_OK) {
        dt_tensor_release(o);
        return st;
    }
    *out = o;
    return DT_OK;
}

/* into: the tensor that takes the output (dt_dispatch_compute_into, checked there), else
 * NULL for a new one. */
static dt_status compute(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                         const dt_op_choice *s, int want_aux, dt_tensor *into, dt_tensor **used,
                         dt_tensor **out, dt_tensor **aux, int *naux) {
    const op_family *f = dt_op_family(op);
    const dt_op_args *a = args ? args : &dt_dispatch_no_args;
    dt_mesh *mesh = in[0]->mesh;
    dt_ctx *ctx = mesh->ctx;
    unsigned all = (1u << n) - 1;
    if (!into && !used && !f->aux && !ctx->trace && (s->in_place & all) == all) {
        *naux = 0;
        return compute_plain(op, f, in, n, a, s, out);
    }
    double t0 = ctx->trace ? dt_now_us() : 0;
    dt_ctx_bind(ctx);
    dt_tensor *moved[DT_OP_MAX_INPUTS] = {0}, *use[DT_OP_MAX_INPUTS] = {0};
    dt_tensor *o = NULL, *ax[DT_OP_MAX_AUX] = {0};
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++) {
        use[i] = in[i];
        if (!in[i] || (s->in_place >> i & 1)) continue;
        if ((st = redistribute_input(op, i, in[i], s->in[i], &moved[i])) == DT_OK)
            use[i] = moved[i];
    }
    op_out aspec[DT_OP_MAX_AUX];
    int na = 0;
    if (f->aux) { /* most ops have no other outputs: no global specs to gather for them */
        op_input gin[DT_OP_MAX_INPUTS];
        dt_dispatch_globals(use, n, gin);
        na = aux_specs(op, f, gin, n, a, want_aux, aspec);
    }
    dt_device dev = in[0]->device;
    char text[sizeof s->text];
    text[0] = '\0';
    if (st == DT_OK && into)
        dt_tensor_retain(o = into);
    else if (st == DT_OK)
        st = dt_tensor_alloc_laid_out(mesh, dev, s->spec.dtype, s->spec.ndim, s->spec.shape, s->out,
                                      s->out_local_shape, s->out_local_offset, &o);
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int i = 0; i < na && st == DT_OK; i++)
        st = dt_tensor_alloc(mesh, dev, aspec[i].dtype, aspec[i].ndim, aspec[i].shape,
                             aux_placements(&aspec[i], mesh, s->out, use, pl), &ax[i]);
    if (st == DT_OK) {
        if (ctx->trace) memcpy(text, s->text, sizeof text); /* s is not read past this point */
        st = compute_local(op, f, use, n, a, o, ax, na);
    }
    if (st != DT_OK) {
        for (int i = 0; i < n; i++)
            dt_tensor_release(moved[i]);
        dt_tensor_release(o);
        for (int i = 0; i < na; i++)
            dt_tensor_release(ax[i]);
        return st;
    }
    if (ctx->trace && dt_trace_is_on(ctx->trace)) {
        int64_t deps[DT_TRACE_MAX_DEPS];
        dt_trace_args ta = {.deps = deps,
                            .ndeps = input_deps(ctx, use, n, deps),
                            .op = dt_op_name(op),
                            .module = dt_comm_module_tls};
        dt_trace_add_args(ctx->trace, DT_LANE_OPS, dt_op_name(op), t0, &ta, "%s", text);
    }
    /* The inputs as the kernel used them: an input that was moved is handed over (the
     * caller's autograd records the move), the others are passed back retained. */
    for (int i = 0; i < n; i++) {
        if (used && moved[i])
            used[i] = moved[i];
        else if (used)
            used[i] = in[i] ? (dt_tensor_retain(in[i]), in[i]) : NULL;
        else if (moved[i])
            dt_tensor_release(moved[i]);
    }
    *out = o;
    for (int i = 0; i < na; i++)
        aux[i] = ax[i];
    *naux = na;
    return DT_OK;
}

dt_status dt_dispatch_compute(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                              const dt_op_choice *s, int want_aux, dt_tensor **used,
                              dt_tensor **out, dt_tensor **aux, int *naux) {
    /* The collectives it issues name it (the flight recorder, the check for stuck ranks). */
    const char *prev = dt_comm_caller_swap(dt_op_name(op));
    dt_status st = compute(op, in, n, args, s, want_aux, NULL, used, out, aux, naux);
    dt_comm_caller_swap(prev);
    return st;
}

dt_status dt_dispatch_compute_into(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                   const dt_op_choice *s, dt_tensor **used) {
    const char *name = dt_op_name(op);
    const op_family *f = dt_op_family(op);
    dt_tensor *x = in[0];
    int mnd = x->mesh->ndim;
    if (!f->inplace)
        return dt_error(DT_ERR_ARG,
                        "%s: has no in-place form (its kernel reads input 0 after "
                        "writing)",
                        name);
    if (!(s->in_place & 1u)) {
        char have[128], need[128];
        dt_placements_format(x->placements, mnd, have, sizeof have);
        dt_placements_format(s->in[0], mnd, need, sizeof need);
        return dt_error(DT_ERR_PLACEMENT,
                        "%s (in place): input 0 is %s but the chosen strategy "
                        "needs %s; redistribute it first or call the out-of-place op",
                        name, have, need);
    }
    int same = s->spec.ndim == x->ndim && s->spec.dtype == x->dtype;
    for (int d = 0; same && d < x->ndim; d++)
        same = s->spec.shape[d] == x->shape[d];
    for (int m = 0; same && m < mnd; m++)
        same = dt_placement_equal(s->out[m], x->placements[m]);
    if (!same)
        return dt_error(DT_ERR_ARG, "%s (in place): the output's spec differs from input 0's",
                        name);
    const char *prev = dt_comm_caller_swap(name);
    dt_tensor *o, *ax[DT_OP_MAX_AUX];
    int na = 0;
    dt_status st = compute(op, in, n, args, s, 0, x, used, &o, ax, &na);
    dt_comm_caller_swap(prev);
    if (st != DT_OK) return st;
    for (int i = 0; i < na; i++)
        dt_tensor_release(ax[i]);
    x->version++;
    dt_tensor_release(o); /* x itself: the caller holds it */
    return DT_OK;
}

/* ---- dt_op_call --------------------------------------------------------------------------- */

static _Atomic(const dt_op_recorder *) recorder;

void dt_ops_set_recorder(const dt_op_recorder *r) {
    atomic_store(&recorder, r);
}

dt_status dt_ops_move(dt_tensor *x, const dt_placement *dst, dt_tensor **out) {
    const dt_op_recorder *rec = atomic_load_explicit(&recorder, memory_order_acquire);
    return rec ? rec->move(x, dst, out) : dt_redistribute_run(x, dst, out);
}

int dt_ops_no_grad_enter(dt_ctx *ctx) {
    const dt_op_recorder *rec = atomic_load_explicit(&recorder, memory_order_acquire);
    if (rec) rec->no_grad(ctx, 1);
    return rec != NULL;
}

bool dt_ops_grad_on(dt_ctx *ctx) {
    const dt_op_recorder *rec = atomic_load_explicit(&recorder, memory_order_acquire);
    return rec && rec->grad_on(ctx);
}

void dt_ops_no_grad_exit(dt_ctx *ctx, int entered) {
    const dt_op_recorder *rec = atomic_load_explicit(&recorder, memory_order_acquire);
    if (entered) rec->no_grad(ctx, 0); /* set once, never unset */
}

/* DT_DEBUG_ARGS (dtensor/agree.h): the ranks of the mesh compare the op, each input's spec and
 * the static arguments the op reads (as the strategy cache keys them) before anything runs. */
__attribute__((noinline, cold)) /* off the hot path: the call pays the test in call() only */
static dt_status
agree_call(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args) {
    int on;
    DT_CHECK(dt_agree_debug_on(in[0]->mesh->ctx, &on));
    if (!on) return DT_OK;
    dt_agree *a = malloc(sizeof *a);
    if (!a) return dt_error(DT_ERR_NOMEM, "%s: out of memory", dt_op_name(op));
    dt_agree_init(a, dt_op_name(op));
    dt_agree_add(a, "op", "%s", dt_op_name(op));
    dt_agree_add(a, "inputs", "%d", n);
    for (int i = 0; i < n; i++) {
        char what[24];
        snprintf(what, sizeof what, "input %d", i);
        if (in[i])
            dt_agree_tensor(a, what, in[i]);
        else
            dt_agree_add(a, what, "absent");
    }
    uint64_t key[DT_OP_ARGS_KEY_WORDS];
    unsigned nk = dt_op_args_key(op, args ? args : &dt_dispatch_no_args, key);
    if (nk) dt_agree_words(a, "static arguments (as keyed)", key, (int)nk);
    dt_status st = dt_agree_on_mesh(in[0]->mesh, a, DT_AGREE_DEBUG_ENV);
    free(a);
    return st;
}

static dt_status call(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                      dt_tensor **out, dt_tensor **aux) {
    DT_CHECK(dt_dispatch_check(op, in, n));
    DT_ARG(out != NULL, "%s: argument out is NULL", dt_op_name(op));
    if (dt_agree_debug(in[0]->mesh->ctx)) DT_CHECK(agree_call(op, in, n, args));
    if (dt_op_family(op)->composite)
        return dt_composite_run(op, in, n, args ? args : &dt_dispatch_no_args, out);
    const dt_op_recorder *rec = atomic_load_explicit(&recorder, memory_order_acquire);
    if (rec) return rec->call(op, in, n, args, out, aux);
    /* No tensor was ever marked for autograd: nothing can record. */
    const dt_op_choice *choice;
    dt_tensor *ax[DT_OP_MAX_AUX];
    int na = 0;
    DT_CHECK(dt_dispatch_choose(op, in, n, args, &choice));
    DT_CHECK(dt_dispatch_compute(op, in, n, args, choice, aux != NULL, NULL, out, ax, &na));
    dt_op_aux_out(ax, na, aux);
    return DT_OK;
}

dt_status dt_op_call(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                     dt_tensor **out) {
    return call(op, inputs, ninputs, args, out, NULL);
}

dt_status dt_op_call_inplace(dt_op op, dt_tensor *const *inputs, int ninputs,
                             const dt_op_args *args, dt_tensor **out) {
    DT_CHECK(dt_dispatch_check(op, inputs, ninputs));
    DT_ARG(out != NULL, "%s: argument out is NULL", dt_op_name(op));
    if (!dt_op_family(op)->inplace)
        return dt_error(DT_ERR_ARG, "dt_op_call_inplace: op %s has no in-place form",
                        dt_op_name(op));
    if (dt_agree_debug(inputs[0]->mesh->ctx)) DT_CHECK(agree_call(op, inputs, ninputs, args));
    const dt_op_recorder *rec = atomic_load_explicit(&recorder, memory_order_acquire);
    if (rec) return rec->call_inplace(op, inputs, ninputs, args, out);
    const dt_op_choice *choice;
    DT_CHECK(dt_dispatch_choose(op, inputs, ninputs, args, &choice));
    DT_CHECK(dt_dispatch_compute_into(op, inputs, ninputs, args, choice, NULL));
    dt_tensor_retain(*out = inputs[0]);
    return DT_OK;
}

dt_status dt_op_call_aux(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                         dt_tensor **out, dt_tensor **aux, int naux) {
    const op_family *f = dt_op_family(op);
    DT_ARG(aux != NULL, "%s: argument aux is NULL", dt_op_name(op));
    int na = 0, for_grad;
    if (f && f->aux && inputs && ninputs > 0) {
        op_out spec[DT_OP_MAX_AUX];
        op_input gin[DT_OP_MAX_INPUTS];
        DT_CHECK(dt_dispatch_check(op, inputs, ninputs));
        dt_dispatch_globals(inputs, ninputs, gin);
        na = f->aux(op, gin, ninputs, args ? args : &dt_dispatch_no_args, spec, &for_grad);
    }
    DT_ARG(naux == na, "%s: argument naux is %d, the op has %d outputs besides the first",
           dt_op_name(op), naux, na);
    return call(op, inputs, ninputs, args, out, aux);
}

dt_status dt_dispatch_run(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                          dt_tensor **out) {
    const dt_op_choice *choice;
    dt_tensor *ax[DT_OP_MAX_AUX];
    int na = 0;
    DT_CHECK(dt_dispatch_check(op, in, n));
    DT_CHECK(dt_dispatch_choose(op, in, n, args, &choice));
    DT_CHECK(dt_dispatch_compute(op, in, n, args, choice, 0, NULL, out, ax, &na));
    for (int i = 0; i < na; i++)
        dt_tensor_release(ax[i]);
    return DT_OK;
}

dt_status dt_op_strategy(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                         dt_placement *input_placements_out, dt_placement *output_placements_out) {
    const op_family *f = dt_op_family(op);
    DT_CHECK(dt_dispatch_check(op, inputs, ninputs));
    DT_ARG(input_placements_out && output_placements_out,
           "%s: input_placements_out or output_placements_out is NULL", dt_op_name(op));
    if (f->composite)
        return dt_error(DT_ERR_UNSUPPORTED,
                        "%s is built from other ops: it has no single "
                        "strategy",
                        dt_op_name(op));
    const strategy *s;
    DT_CHECK(lookup(op, f, inputs, ninputs, args, &s));
    int mnd = inputs[0]->mesh->ndim;
    for (int i = 0; i < ninputs; i++)
        memcpy(input_placements_out + i * mnd, s->in[i], sizeof(dt_placement) * (size_t)mnd);
    memcpy(output_placements_out, s->out, sizeof(dt_placement) * (size_t)mnd);
    return DT_OK;
}
