/* Tensor-level redistribute, pure: the per-mesh plan cache, the cost model of a rank, and the
 * blocking and non-blocking runs of a plan. Nothing here records for autograd: the public
 * dt_tensor_redistribute and its async form are autograd/record.c's, over these. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "comm/request.h"
#include "comm/worker.h"
#include "core/check.h"
#include "core/lru.h"
#include "dtensor/agree.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "redistribute/execute.h"
#include "redistribute/redistribute_impl.h"

/* The rank's redistribute state, in its context's redistribute slot: all zero is the
 * default model (not yet set) and implicit redistribution. */
typedef struct redist_state {
    bool model_set;
    dt_cost_model model;
    uint64_t version; /* bumped by every dt_ctx_set_cost_model */
    int mode;         /* dt_redistribute_mode, read by op dispatch */
} redist_state;
_Static_assert(sizeof(redist_state) <= DT_CTX_SLOT_BYTES, "redistribute state outgrew its slot");

static redist_state *state_of(dt_ctx *ctx) {
    redist_state *s = dt_ctx_slot(ctx, DT_CTX_SLOT_REDISTRIBUTE);
    if (!s->model_set) s->model = dt_cost_model_default(), s->model_set = true;
    return s;
}

int dt_redistribute_mode_of(dt_ctx *ctx) {
    return state_of(ctx)->mode;
}

dt_status dt_ctx_set_redistribute_mode(dt_ctx *ctx, dt_redistribute_mode mode) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG((unsigned)mode <= DT_REDISTRIBUTE_EXPLICIT,
           "dt_ctx_set_redistribute_mode: argument mode has unknown value %d", (int)mode);
    state_of(ctx)->mode = (int)mode;
    return DT_OK;
}

uint64_t dt_cost_model_version(dt_ctx *ctx) {
    return state_of(ctx)->version;
}

dt_cost_model dt_cost_model_of(dt_ctx *ctx) {
    return state_of(ctx)->model;
}

dt_status dt_ctx_set_cost_model(dt_ctx *ctx, const dt_cost_model *model) {
    DT_ARG_NOT_NULL(ctx);
    if (model)
        DT_ARG(model->latency_us >= 0 && model->step_us >= 0 && model->bandwidth_gbps > 0,
               "dt_ctx_set_cost_model: model {latency_us %g, step_us %g, bandwidth_gbps %g} "
               "needs non-negative latencies and a positive bandwidth",
               model->latency_us, model->step_us, model->bandwidth_gbps);
    redist_state *s = state_of(ctx);
    s->model = model ? *model : dt_cost_model_default();
    s->version++;
    return DT_OK;
}

/* ---- plan cache: one bounded cache per mesh object (core/lru.h) --------------------------
 * Keyed by (cost model version, shape, dtype, src, dst). The cache holds one reference on each
 * plan: an evicted plan lives on while a request or a caller that retained it holds another. */

static void plan_unref(void *plan) { dt_plan_release(plan); }

#define PLAN_KEY_WORDS (2 + DT_MAX_NDIM + 2 * DT_PLACEMENTS_KEY_WORDS)

dt_status dt_redistribute_cached_plan(dt_tensor *t, const dt_placement *dst, const dt_plan **out) {
    dt_mesh *mesh = t->mesh;
    redist_state *rs = state_of(mesh->ctx);
    dt_lru *c = mesh->caches[DT_CACHE_PLAN];
    if (!c) DT_CHECK(dt_mesh_cache_make(mesh, DT_CACHE_PLAN, plan_unref, &c));
    uint64_t key[PLAN_KEY_WORDS];
    unsigned n = 0;
    key[n++] = rs->version;
    key[n++] = (uint64_t)t->ndim | (uint64_t)t->dtype << 8 | (uint64_t)mesh->ndim << 16;
    for (int d = 0; d < t->ndim; d++) key[n++] = (uint64_t)t->shape[d];
    n += dt_placements_key(t->placements, mesh->ndim, key + n);
    n += dt_placements_key(dst, mesh->ndim, key + n);
    uint64_t h = dt_lru_hash(key, n);
    dt_plan *plan = dt_lru_get(c, key, n, h);
    if (plan) {
        *out = plan;
        return DT_OK;
    }
    DT_CHECK(dt_plan_search(mesh->ndim, mesh->shape, t->ndim, t->shape, t->dtype, t->placements,
                            dst, &rs->model, &plan));
    dt_status st = dt_lru_put(c, key, n, h, plan);
    if (st != DT_OK) {
        dt_plan_release(plan);
        return st;
    }
    *out = plan;
    return DT_OK;
}

dt_status dt_redistribute_prepare(const char *fn, dt_tensor *t, int ndst, const dt_placement *dst,
                                  const dt_plan **plan_out) {
    DT_CHECK(dt_tensor_check(fn, "tensor", t));
    if (dt_tensor_storage_dropped(t))
        return dt_error(DT_ERR_ARG, "%s: the tensor's storage was dropped after a forward "
                                    "(activation checkpointing or FSDP resharding)", fn);
    DT_CHECK(dt_placement_count_check(fn, "dst placements", ndst, dst, t->mesh->ndim));
    /* The tensor's own spec was checked when it was made: only the target is the caller's. */
    dt_placement norm[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_placements_check(fn, dst, ndst, t->ndim, t->dtype, norm));
    return dt_redistribute_cached_plan(t, norm, plan_out);
}

dt_status dt_redistribute_agree(const char *fn, dt_tensor *t, int ndst, const dt_placement *dst) {
    if (!t || t->magic != DT_TENSOR_LIVE || !dt_agree_debug(t->mesh->ctx)) return DT_OK;
    int on;
    DT_CHECK(dt_agree_debug_on(t->mesh->ctx, &on));
    if (!on) return DT_OK;
    dt_agree *a = malloc(sizeof *a);
    if (!a) return dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    dt_agree_init(a, fn);
    dt_agree_tensor(a, "tensor", t);
    dt_agree_placements(a, "target", dst, ndst);
    dt_status st = dt_agree_on_mesh(t->mesh, a, DT_AGREE_DEBUG_ENV);
    free(a);
    return st;
}

dt_status dt_tensor_redistribute_plan(dt_tensor *tensor, int ndst, const dt_placement *dst,
                                      const dt_plan **out) {
    DT_ARG_NOT_NULL(out);
    return dt_redistribute_prepare("dt_tensor_redistribute_plan", tensor, ndst, dst, out);
}

/* The communicator of every step on a lane (NULL for local steps). */
static dt_status step_comms(dt_tensor *t, const dt_plan *plan, int lane, dt_comm ***out) {
    dt_comm **comms = calloc((size_t)(plan->nsteps ? plan->nsteps : 1), sizeof *comms);
    if (!comms) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
    for (int i = 0; i < plan->nsteps; i++) {
        if (!dt_step_is_collective(plan->steps[i].kind)) continue;
        dt_status st = dt_mesh_lane_comm(t->mesh, plan->steps[i].mesh_mask, lane, &comms[i]);
        if (st != DT_OK) {
            free(comms);
            return st;
        }
    }
    *out = comms;
    return DT_OK;
}

/* On a rank outside the tensor's mesh (a sub-mesh made elsewhere) the tensor holds nothing,
 * and so does the result: no data moves, the spec changes (and autograd records it above, as
 * on the member ranks). */
static dt_status move_outside(dt_tensor *t, const dt_plan *plan, dt_tensor **out) {
    if (plan->nsteps == 0) {
        dt_tensor_retain(t);
        *out = t;
        return DT_OK;
    }
    return dt_tensor_new(t->mesh, t->device, t->dtype, t->ndim, t->shape, plan->dst, NULL, true,
                         out);
}

dt_status dt_redistribute_run(dt_tensor *t, const dt_placement *dst, dt_tensor **out) {
    const dt_plan *plan;
    DT_CHECK(dt_redistribute_cached_plan(t, dst, &plan));
    return dt_redistribute_execute(t, plan, out);
}

dt_status dt_redistribute_execute(dt_tensor *tensor, const dt_plan *plan, dt_tensor **out) {
    if (tensor->mesh->rank < 0) return move_outside(tensor, plan, out);
    dt_comm **comms;
    DT_CHECK(step_comms(tensor, plan, 0, &comms));
    dt_ctx *ctx = tensor->mesh->ctx;
    double t0 = ctx->trace ? dt_now_us() : 0;
    dt_plan_retain(plan); /* nothing in execute plans on this mesh; this keeps it so */
    const char *prev = dt_comm_caller_swap(dt_comm_caller() ? dt_comm_caller() : "redistribute");
    dt_status st = dt_plan_execute(plan, tensor, comms, out);
    dt_comm_caller_swap(prev);
    free(comms);
    if (ctx->trace && st == DT_OK) {
        char a[128], b[128];
        dt_placements_format(plan->src, plan->mesh_ndim, a, sizeof a);
        dt_placements_format(plan->dst, plan->mesh_ndim, b, sizeof b);
        dt_trace_record(ctx, DT_LANE_OPS, "redistribute", t0, "%s -> %s: %d steps, %d collectives",
                        a, b, plan->nsteps, plan->ncollectives);
    }
    dt_plan_release(plan);
    return st;
}

/* ---- non-blocking ---------------------------------------------------------------------- */

typedef struct redist_request {
    dt_request base;
    dt_redistribute_done_fn done; /* nullable: called at wait with the input and result */
    dt_tensor *in;
    const dt_plan *plan; /* retained: the cache may evict it while the request runs */
    dt_comm **comms;
} redist_request;

static dt_status run_request(dt_request *base) {
    redist_request *r = (redist_request *)base;
    dt_tensor *y = NULL;
    const char *prev = dt_comm_caller_swap("redistribute");
    dt_status st = dt_plan_execute(r->plan, r->in, r->comms, &y);
    dt_comm_caller_swap(prev);
    r->base.out = y; /* published by the completion's lock */
    return st;
}

/* On the rank's own thread, when the result is handed over. */
static dt_status request_finish(dt_request *base) {
    redist_request *r = (redist_request *)base;
    return r->done ? r->done(r->in, r->base.out) : DT_OK;
}

static void release_result(void *t) {
    dt_tensor_release(t);
}

static void request_free(dt_request *base) {
    redist_request *r = (redist_request *)base;
    dt_plan_release(r->plan);
    dt_tensor_release(r->in);
    free(r->comms);
    free(r);
}

dt_status dt_redistribute_submit(dt_tensor *tensor, const dt_plan *plan,
                                 dt_redistribute_done_fn done, dt_request **out) {
    if (tensor->mesh->rank < 0)
        return dt_error(DT_ERR_UNSUPPORTED, "dt_tensor_redistribute_async: rank %d is not in the "
                                            "tensor's mesh (use dt_tensor_redistribute, which "
                                            "changes only the spec there)", tensor->mesh->ctx->rank);
    redist_request *r = calloc(1, sizeof *r);
    if (!r) return dt_error(DT_ERR_NOMEM, "dt_tensor_redistribute_async: out of memory");
    dt_status st = step_comms(tensor, plan, 1, &r->comms);
    if (st != DT_OK) {
        free(r);
        return st;
    }
    r->base.run = run_request, r->base.destroy = request_free, r->base.finish = request_finish;
    r->base.out_release = release_result;
    r->done = done;
    r->plan = plan;
    dt_plan_retain(plan);
    r->in = tensor;
    dt_tensor_retain(tensor);
    DT_CHECK(dt_request_submit(tensor->mesh->ctx, &r->base));
    *out = &r->base;
    return DT_OK;
}
