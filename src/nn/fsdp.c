/* FSDP units (dtensor/fsdp.h): packed all_gathers and reduce_scatters over the dp group, the
 * gathered parameters as saved tensors the engine asks the unit to refill (autograd/saved.h),
 * and prefetching on the communication thread. Knows nothing of what the model computes.
 *
 * A rank's part of a unit's flat buffer (a slot) holds each parameter's shard at off[p],
 * padded to len[p], the largest shard of that parameter over the dp group; the gathered
 * buffer is the dp group's slots in group-rank order. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/saved.h"
#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "comm/request.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/fsdp.h"
#include "dtensor/redistribute.h"
#include "dtensor/runtime.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/fsdp_float8.h"
#include "nn/fsdp_impl.h"
#include "trace/trace_impl.h"

dt_fsdp_options dt_fsdp_options_default(void) {
    return (dt_fsdp_options){.dp_dim = 0, .reshard_after_forward = 1, .prefetch = 1};
}

static void count_gathered(dt_fsdp *f, int64_t bytes) {
    f->gathered_bytes += bytes;
    if (f->gathered_bytes > f->stats.max_gathered_bytes)
        f->stats.max_gathered_bytes = f->gathered_bytes;
}

/* ---- gather ------------------------------------------------------------------------------ */

static void gather_free(unit *u) {
    mem_of(u)->free(u->gsend), mem_of(u)->free(u->grecv);
    u->gsend = u->grecv = NULL;
    dt_fsdp_pieces_gather_free(u);
}

/* Packs this rank's shards (e4m3 bytes under float8_all_gather, bf16 under bf16_all_gather)
 * and issues the unit's all_gather on the communication thread; a direct unit's carries the
 * units up to end (exclusive) too. */
static dt_status gather_start(unit *u, int end) {
    if (u->direct) return dt_fsdp_pieces_gather_start(u, end);
    const dt_mem_ops *mem = mem_of(u);
    dt_fsdp *f = u->f;
    bool f8 = f->opt.float8_all_gather, bf = f->opt.bf16_all_gather;
    size_t es = f8 ? 1 : bf ? 2 : u->es; /* bytes of an element on the wire */
    u->gsend = mem->alloc(u->slot * es);
    u->grecv = mem->alloc(u->slot * es * (size_t)f->dp_size);
    dt_status st = u->gsend && u->grecv ? DT_OK : DT_ERR_NOMEM;
    /* Only the padding after a short shard is zeroed (never read, but sent: no stale bytes on
     * the wire); the shards overwrite the rest. */
    for (int p = 0; p < u->n && st == DT_OK; p++) {
        size_t have = u->param[p]->local_numel;
        if (have < u->len[p])
            st = mem->zero((char *)u->gsend + (u->off[p] + have) * es, (u->len[p] - have) * es);
    }
    if (st == DT_OK && f8) st = dt_fsdp8_pack(u->n, u->param, u->off, u->scale8, u->gsend);
    if (st == DT_OK && bf) dt_fsdp_bf16_pack(u->n, u->param, u->off, u->gsend);
    for (int p = 0; p < u->n && st == DT_OK && !f8 && !bf; p++)
        if (bytes_of(u->param[p]))
            st = mem->copy((char *)u->gsend + u->off[p] * u->es, u->param[p]->data,
                           bytes_of(u->param[p]));
    const char *caller = dt_comm_caller_swap("fsdp_unit"); /* the unit's own, not an op's */
    if (st == DT_OK)
        st = dt_all_gather_start(f->comm, u->gsend, u->grecv, u->slot,
                                 f8 ? DT_F8E4M3 : bf ? DT_BF16 : u->param[0]->dtype,
                                 &u->gather);
    dt_comm_caller_swap(caller);
    if (st != DT_OK) {
        gather_free(u);
        return st == DT_ERR_NOMEM ? dt_error(DT_ERR_NOMEM, "fsdp: out of memory for unit %d's "
                                                           "gather", u->index)
                                  : st;
    }
    return DT_OK;
}

/* Waits for leader l's gather: l and the units that ride it have landed, with its outcome. */
static void land(unit *l) {
    dt_request *req = l->gather;
    l->gather = NULL;
    int64_t by = 0;
    dt_status st = dt_request_wait_traced(req, NULL, &by);
    for (int j = l->index; j < (l->batch_end > l->index ? l->batch_end : l->index + 1); j++) {
        unit *v = l->f->u[j];
        v->ahead = AHEAD_LANDED, v->ahead_st = st, v->ahead_by = by;
    }
    l->batch_end = 0;
}

/* Lands the gather that carries u (its own or a leader's): its outcome and trace event. */
static dt_status gather_wait(unit *u, int64_t *by) {
    if (u->gather) land(u);
    else if (u->ahead == AHEAD_FLYING) land(u->f->u[u->leader]);
    u->ahead = AHEAD_NONE;
    *by = u->ahead_by;
    return u->ahead_st;
}

/* A gather of u nobody will use: waited for, its buffers freed. */
static dt_status gather_abandon(unit *u) {
    dt_status st = DT_OK;
    int64_t by;
    if (u->gather || u->ahead) st = gather_wait(u, &by);
    gather_free(u);
    return st;
}

/* Waits for the unit's gather and copies every rank's shard into the gathered parameters
 * whose storage is present (dropped ones are given storage first when refill is set). */
static dt_status gather_finish(unit *u, bool refill) {
    int64_t gathered_by = 0; /* the all_gather's trace event: the parameters' readers wait for it */
    dt_status st = gather_wait(u, &gathered_by);
    const dt_mem_ops *mem = mem_of(u);
    /* Direct: the storage the peers wrote goes to the gathered parameters as it is (this
     * forward's new ones took theirs in new_full). */
    for (int p = 0; p < u->n && st == DT_OK && u->direct; p++) {
        dt_tensor *full = u->full[p];
        full->trace_src = gathered_by;
        if (!u->gbuf[p] || !refill) continue; /* taken, empty, or not to be refilled */
        if (!dt_tensor_storage_dropped(full)) dt_tensor_storage_drop(full); /* same values */
        else count_gathered(u->f, (int64_t)bytes_of(full));
        dt_tensor_storage_adopt(full, u->gbuf[p]);
        u->gbuf[p] = NULL;
    }
    if (st == DT_OK && u->f->opt.float8_all_gather) /* the codes widened into f32 slots */
        st = dt_fsdp8_widen(mem, u->n, u->off, u->len, u->slot, u->f->dp_size, u->scale8,
                            &u->grecv);
    if (st == DT_OK && u->f->opt.bf16_all_gather) /* bf16 widened into f32 slots (exact) */
        st = dt_fsdp_bf16_widen(mem, u->slot * (size_t)u->f->dp_size, &u->grecv);
    for (int p = 0; p < u->n && st == DT_OK && !u->direct; p++) {
        dt_tensor *full = u->full[p];
        if (refill && dt_tensor_storage_dropped(full)) {
            st = dt_tensor_storage_alloc(full);
            if (st == DT_OK) count_gathered(u->f, (int64_t)bytes_of(full));
        }
        for (int r = 0; r < u->f->dp_size && st == DT_OK; r++) {
            int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM], zero[DT_MAX_NDIM] = {0};
            chunk_of(u, p, r, shape, off);
            full->trace_src = gathered_by;
            if (!dt_shape_numel(shape, full->ndim)) continue;
            for (int d = 0; d < full->ndim; d++) off[d] -= full->local_offset[d];
            st = mem->box_copy(full->data, full->local_shape, off,
                               (char *)u->grecv + ((size_t)r * u->slot + u->off[p]) * u->es,
                               shape, zero, shape, full->ndim, u->es);
        }
    }
    gather_free(u);
    return st;
}

static void drop_full(unit *u) {
    for (int p = 0; p < u->n; p++)
        if (u->full[p] && !dt_tensor_storage_dropped(u->full[p])) {
            count_gathered(u->f, -(int64_t)bytes_of(u->full[p]));
            dt_tensor_storage_drop(u->full[p]);
        }
}

static void forget_full(unit *u) {
    drop_full(u);
    for (int p = 0; p < u->n; p++) {
        if (u->full[p] && u->full[p]->ag) /* an old graph through it can no longer refill it: */
            u->full[p]->ag->hooks = NULL; /* backward then fails cleanly */
        dt_tensor_release(u->full[p]);
        u->full[p] = NULL;
    }
}

/* This forward's gathered parameters: new tensors, each recorded as a redistribute of its
 * parameter (outside any activation-checkpoint region: the unit refills them itself). */
static dt_status new_full(unit *u) {
    forget_full(u);
    dt_ctx *ctx = u->f->mesh->ctx;
    dt_autograd_state *ag = dt_autograd_of(ctx);
    struct dt_ac_region *region = ag->ac_region;
    ag->ac_region = NULL;
    dt_status st = DT_OK;
    for (int p = 0; p < u->n && st == DT_OK; p++) {
        dt_tensor *w = u->param[p];
        dt_placement pl[DT_MESH_MAX_NDIM];
        memcpy(pl, w->placements, sizeof pl);
        pl[u->f->opt.dp_dim] = dt_replicate();
        /* A direct gather in flight fills storage of its own: the tensor takes it. */
        void *data = u->gbuf ? u->gbuf[p] : NULL;
        st = data ? dt_tensor_new(w->mesh, w->device, w->dtype, w->ndim, w->shape, pl, data,
                                  true, &u->full[p])
                  : dt_tensor_alloc(w->mesh, w->device, w->dtype, w->ndim, w->shape, pl,
                                    &u->full[p]);
        if (st != DT_OK) break;
        if (data) u->gbuf[p] = NULL;
        count_gathered(u->f, (int64_t)bytes_of(u->full[p]));
        dt_grad_slot *slot = NULL;
        if ((st = dt_ag_make(u->full[p], &slot)) != DT_OK) break;
        slot->hooks = &u->hooks;
        if (dt_autograd_wants(&w, 1)) st = dt_autograd_record_redistribute(w, u->full[p]);
    }
    ag->ac_region = region;
    return st;
}

/* Issues unit j's gather ahead of its use, when it has none in flight. */
static dt_status prefetch(dt_fsdp *f, int j, bool backward) {
    if (!f->opt.prefetch || j < 0 || j >= f->n || f->u[j]->gather || f->u[j]->ahead)
        return DT_OK;
    unit *v = f->u[j];
    bool held = v->full[0] && !dt_tensor_storage_dropped(v->full[0]);
    if (held || (backward && (!v->full[0] || v->ngrad))) return DT_OK; /* held: used as is */
    DT_CHECK(gather_start(v, backward ? j + 1 : dt_fsdp_batch_end(f, j)));
    f->stats.prefetches++;
    if (backward) f->stats.backward_gathers++;
    else f->stats.forward_gathers++;
    return DT_OK;
}

/* ---- the engine's hooks ------------------------------------------------------------------ */

static void clear_grads(unit *u) {
    for (int p = 0; p < u->n; p++) dt_tensor_release(u->grad[p]), u->grad[p] = NULL;
    u->ngrad = 0;
}

/* At the end of every backward that reached a unit: units some of whose parameters got no
 * gradient reduce with zeros for them, every reduce is waited for, gathers nobody used are
 * dropped, and all gathered storage goes. */
static dt_status backward_end(void *user) {
    dt_fsdp *f = user;
    f->end_registered = false;
    dt_status st = DT_OK;
    for (int k = 0; k < f->n; k++) {
        unit *u = f->u[k];
        for (int p = 0; p < u->n && st == DT_OK && u->ngrad && u->ngrad < u->n; p++) {
            if (u->grad[p]) continue;
            dt_tensor *full = u->full[p];
            st = dt_tensor_zeros(full->mesh, full->dtype, full->ndim, full->shape, f->mesh->ndim,
                                 full->placements, &u->grad[p]);
        }
        if (st == DT_OK && u->ngrad && u->ngrad < u->n) st = dt_fsdp_reduce_start(u);
        if (u->rs) {
            dt_status s2 = st == DT_OK ? dt_fsdp_reduce_finish(u) : dt_request_wait(u->rs, NULL);
            if (st != DT_OK) u->rs = NULL, dt_fsdp_reduce_free(u);
            if (st == DT_OK) st = s2;
        }
    }
    /* The deferred reduces, as one (after every unit's own: the order of issue is the same on
     * every rank). On an earlier failure they still run: the peers are in them. */
    dt_status s3 = dt_fsdp_reduce_deferred(f);
    if (st == DT_OK) st = s3;
    for (int k = 0; k < f->n; k++) {
        unit *u = f->u[k];
        dt_status s2 = gather_abandon(u);
        if (st == DT_OK) st = s2;
        clear_grads(u);
        drop_full(u);
    }
    return st;
}

static dt_status note_backward(dt_fsdp *f) {
    if (f->end_registered) return DT_OK;
    DT_CHECK(dt_autograd_at_backward_end(f->mesh->ctx, backward_end, f));
    f->end_registered = true;
    return DT_OK;
}

static dt_status refill(dt_saved_hooks *h, dt_tensor *t) {
    (void)t;
    unit *u = (unit *)h;
    dt_fsdp *f = u->f;
    DT_CHECK(note_backward(f));
    if (!u->gather && !u->ahead) {
        DT_CHECK(gather_start(u, u->index + 1));
        f->stats.backward_gathers++;
    }
    DT_CHECK(gather_finish(u, true));
    return prefetch(f, u->index - 1, true);
}

static dt_status grad_ready(dt_saved_hooks *h, dt_tensor *t, dt_tensor *g) {
    unit *u = (unit *)h;
    dt_status st = note_backward(u->f);
    int p = 0;
    while (p < u->n && u->full[p] != t) p++;
    if (st == DT_OK && (p == u->n || u->grad[p]))
        st = dt_error(DT_ERR_ARG, "fsdp: unit %d got a gradient for a tensor it did not gather "
                                  "in this forward", u->index);
    if (st != DT_OK) {
        dt_tensor_release(g);
        return st;
    }
    u->grad[p] = g;
    /* The unit's backward has begun: issue the previous unit's gather now, so it overlaps this
     * unit's backward. Refill does the same, but a unit kept gathered after its forward (the
     * last block, the root) is never refilled, and its predecessor's gather would otherwise
     * start only when backward reaches it: a stall every rank waits on. */
    if (u->ngrad == 0 && (st = prefetch(u->f, u->index - 1, true)) != DT_OK) return st;
    if (++u->ngrad < u->n) return DT_OK;
    /* Every use of the unit's parameters is behind us: reduce, and free the gathered ones. */
    st = dt_fsdp_reduce_start(u);
    drop_full(u);
    return st;
}

static void detach(dt_saved_hooks *h, dt_tensor *t) {
    (void)h;
    t->ag->hooks = NULL; /* the unit holds its gathered tensors: this is a graph's last copy */
}

/* ---- the public calls -------------------------------------------------------------------- */

dt_status dt_fsdp_create(dt_mesh *mesh, const dt_fsdp_options *options, dt_fsdp **out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(out);
    dt_fsdp_options o = options ? *options : dt_fsdp_options_default();
    DT_ARG(o.dp_dim >= 0 && o.dp_dim < mesh->ndim,
           "dt_fsdp_create: options->dp_dim = %d is not a dim of a %d-D mesh", o.dp_dim,
           mesh->ndim);
    DT_ARG(!(o.float8_all_gather && o.bf16_all_gather),
           "dt_fsdp_create: options->float8_all_gather and options->bf16_all_gather are both "
           "set; a unit gathers in one dtype");
    dt_comm *comm;
    DT_CHECK(dt_mesh_lane_comm(mesh, 1u << o.dp_dim, 1, &comm));
    dt_fsdp *f = calloc(1, sizeof *f);
    if (!f) return dt_error(DT_ERR_NOMEM, "dt_fsdp_create: out of memory");
    *f = (dt_fsdp){.mesh = mesh, .opt = o, .comm = comm, .dp_size = mesh->shape[o.dp_dim]};
    dt_mesh_retain(mesh);
    *out = f;
    return DT_OK;
}

dt_status dt_fsdp_shard_param(dt_fsdp *fsdp, dt_tensor *param, dt_tensor **out) {
    DT_ARG_NOT_NULL(fsdp);
    DT_TENSOR_ARG(param);
    DT_ARG_NOT_NULL(out);
    DT_ARG(param->mesh == fsdp->mesh, "dt_fsdp_shard_param: param lives on another mesh");
    int mnd = fsdp->mesh->ndim, dp = fsdp->opt.dp_dim;
    DT_ARG(param->placements[dp].kind == DT_PLACEMENT_REPLICATE,
           "dt_fsdp_shard_param: param is not Replicate over mesh dim %d (dp_dim)", dp);
    int d = 0;
    for (; d < param->ndim; d++) {
        int taken = 0;
        for (int m = 0; m < mnd; m++)
            taken |= param->placements[m].kind == DT_PLACEMENT_SHARD && param->placements[m].dim == d;
        if (!taken) break;
    }
    DT_ARG(d < param->ndim, "dt_fsdp_shard_param: param (%d-D) has no dim that other mesh dims "
                            "leave unsharded", param->ndim);
    dt_placement pl[DT_MESH_MAX_NDIM];
    memcpy(pl, param->placements, sizeof pl);
    pl[dp] = dt_shard(d);
    dt_ctx *ctx = fsdp->mesh->ctx;
    dt_autograd_of(ctx)->no_grad_depth++;
    dt_tensor *t;
    dt_status st = dt_tensor_redistribute(param, mnd, pl, &t);
    if (st == DT_OK && t == param) { /* nothing moved (a dp of one): a leaf of its own */
        dt_tensor_release(t);
        st = dt_contiguous(param, &t);
    }
    dt_autograd_of(ctx)->no_grad_depth--;
    if (st != DT_OK) return st;
    st = dt_tensor_set_requires_grad(t, dt_ag(param)->requires_grad);
    if (st != DT_OK) dt_tensor_release(t);
    else *out = t;
    return st;
}

static void unit_free(unit *u) {
    if (!u) return;
    forget_full(u);
    clear_grads(u);
    dt_fsdp_pieces_free(u); /* while the parameters say where its buffers came from */
    for (int p = 0; p < u->n; p++) dt_tensor_release(u->param[p]);
    free(u->param), free(u->full), free(u->grad), free(u->gpl), free(u->off), free(u->len);
    free(u->scale8), free(u);
}

dt_status dt_fsdp_add_unit(dt_fsdp *fsdp, int n, dt_tensor *const *params, int *unit_out) {
    DT_ARG_NOT_NULL(fsdp);
    DT_ARG(n > 0 && params, "dt_fsdp_add_unit: a unit needs parameters (n = %d)", n);
    int dp = fsdp->opt.dp_dim;
    for (int p = 0; p < n; p++) {
        DT_CHECK(dt_tensor_check("dt_fsdp_add_unit", "params[i]", params[p]));
        const dt_tensor *w = params[p];
        DT_ARG(w->mesh == fsdp->mesh, "dt_fsdp_add_unit: params[%d] lives on another mesh", p);
        DT_ARG(!dt_ag(w)->node && w->placements[dp].kind == DT_PLACEMENT_SHARD,
               "dt_fsdp_add_unit: params[%d] is not a leaf sharded over mesh dim %d (give it "
               "dt_fsdp_shard_param's result)",
               p, dp);
        if (dt_ag(w)->grad_dtype)
            return dt_error(DT_ERR_UNSUPPORTED, "dt_fsdp_add_unit: params[%d] keeps its gradient "
                                                "in another dtype (dt_tensor_set_grad_dtype): "
                                                "FSDP units reduce in the parameters' dtype", p);
        DT_ARG(w->dtype == params[0]->dtype && w->device.kind == params[0]->device.kind,
               "dt_fsdp_add_unit: params[%d] differs in dtype or device from params[0] (one "
               "flat buffer per unit)", p);
        if (fsdp->opt.float8_all_gather || fsdp->opt.bf16_all_gather)
            DT_CHECK(dt_fsdp8_check(p, w, fsdp->opt.float8_all_gather ? "float8_all_gather"
                                                                      : "bf16_all_gather"));
    }
    if (fsdp->n == fsdp->cap) {
        int cap = fsdp->cap ? 2 * fsdp->cap : 8;
        unit **g = realloc(fsdp->u, sizeof *g * (size_t)cap);
        if (!g) return dt_error(DT_ERR_NOMEM, "dt_fsdp_add_unit: out of memory");
        fsdp->u = g, fsdp->cap = cap;
    }
    unit *u = calloc(1, sizeof *u);
    if (u) {
        *u = (unit){.hooks = {.refill = refill, .grad_ready = grad_ready, .detach = detach},
                    .f = fsdp, .index = fsdp->n, .n = n,
                    .reshard = fsdp->opt.reshard_after_forward != 0,
                    .es = dt_dtype_size(params[0]->dtype)};
        u->param = calloc((size_t)n, sizeof *u->param);
        u->full = calloc((size_t)n, sizeof *u->full);
        u->grad = calloc((size_t)n, sizeof *u->grad);
        u->gpl = calloc((size_t)n, sizeof *u->gpl);
        u->off = calloc((size_t)n, sizeof *u->off);
        u->len = calloc((size_t)n, sizeof *u->len);
        u->scale8 = calloc((size_t)n, sizeof *u->scale8);
    }
    if (!u || !u->param || !u->full || !u->grad || !u->gpl || !u->off || !u->len || !u->scale8) {
        if (u) free(u->param), free(u->full), free(u->grad), free(u->gpl), free(u->off),
            free(u->len), free(u->scale8);
        free(u);
        return dt_error(DT_ERR_NOMEM, "dt_fsdp_add_unit: out of memory");
    }
    for (int p = 0; p < n; p++) {
        dt_tensor_retain(params[p]);
        u->param[p] = params[p];
        for (int r = 0; r < fsdp->dp_size; r++) {
            int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
            chunk_of(u, p, r, shape, off);
            size_t numel = dt_shape_numel(shape, params[p]->ndim);
            if (numel > u->len[p]) u->len[p] = numel;
        }
        u->off[p] = u->slot;
        u->slot += u->len[p];
    }
    dt_status st = dt_fsdp_pieces_init(u);
    if (st != DT_OK) {
        unit_free(u);
        return st;
    }
    fsdp->u[fsdp->n] = u;
    if (unit_out) *unit_out = fsdp->n;
    fsdp->n++;
    return DT_OK;
}

static dt_status unit_arg(const char *fn, dt_fsdp *fsdp, int unit) {
    DT_ARG(fsdp != NULL, "%s: argument fsdp is NULL", fn);
    DT_ARG(unit >= 0 && unit < fsdp->n, "%s: argument unit = %d, but there are %d units", fn,
           unit, fsdp->n);
    return DT_OK;
}

dt_status dt_fsdp_unit_begin(dt_fsdp *fsdp, int unit_index, dt_tensor **full_out) {
    DT_CHECK(unit_arg("dt_fsdp_unit_begin", fsdp, unit_index));
    DT_ARG_NOT_NULL(full_out);
    unit *u = fsdp->u[unit_index];
    dt_ctx *ctx = fsdp->mesh->ctx;
    u->t_begin = ctx->trace ? dt_now_us() : 0;
    if (!u->gather && !u->ahead) {
        DT_CHECK(gather_start(u, dt_fsdp_batch_end(fsdp, unit_index)));
        fsdp->stats.forward_gathers++;
    }
    dt_status st = new_full(u);
    if (st == DT_OK) st = gather_finish(u, false);
    else gather_abandon(u);
    if (st == DT_OK) st = prefetch(fsdp, unit_index + 1, false);
    if (st != DT_OK) return st;
    for (int p = 0; p < u->n; p++) full_out[p] = u->full[p];
    return DT_OK;
}

dt_status dt_fsdp_unit_end(dt_fsdp *fsdp, int unit_index) {
    DT_CHECK(unit_arg("dt_fsdp_unit_end", fsdp, unit_index));
    unit *u = fsdp->u[unit_index];
    if (u->reshard) drop_full(u);
    dt_ctx *ctx = fsdp->mesh->ctx;
    if (ctx->trace)
        dt_trace_record(ctx, DT_LANE_OPS, "fsdp_unit", u->t_begin, "unit %d forward%s",
                        unit_index, u->reshard ? ", resharded" : "");
    return DT_OK;
}

dt_status dt_fsdp_unit_set_reshard_after_forward(dt_fsdp *fsdp, int unit_index, int reshard) {
    DT_CHECK(unit_arg("dt_fsdp_unit_set_reshard_after_forward", fsdp, unit_index));
    fsdp->u[unit_index]->reshard = reshard != 0;
    return DT_OK;
}

dt_status dt_fsdp_destroy(dt_fsdp *fsdp) {
    if (!fsdp) return DT_OK;
    dt_status st = DT_OK;
    for (int k = 0; k < fsdp->n; k++) {
        unit *u = fsdp->u[k];
        dt_status s2 = gather_abandon(u);
        if (st == DT_OK) st = s2;
        if (u->rs) {
            dt_status s2 = dt_request_wait(u->rs, NULL);
            if (st == DT_OK) st = s2;
            dt_fsdp_reduce_free(u);
        }
        unit_free(u);
    }
    if (fsdp->end_registered) dt_autograd_cancel_backward_end(fsdp->mesh->ctx, backward_end, fsdp);
    free(fsdp->u);
    dt_mesh_release(fsdp->mesh);
    free(fsdp);
    return st;
}

dt_status dt_fsdp_stats_get(const dt_fsdp *fsdp, dt_fsdp_stats *out) {
    DT_ARG_NOT_NULL(fsdp);
    DT_ARG_NOT_NULL(out);
    *out = fsdp->stats;
    return DT_OK;
}

dt_status dt_fsdp_stats_reset(dt_fsdp *fsdp) {
    DT_ARG_NOT_NULL(fsdp);
    fsdp->stats = (dt_fsdp_stats){.max_gathered_bytes = fsdp->gathered_bytes};
    return DT_OK;
}
