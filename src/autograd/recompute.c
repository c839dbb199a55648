/* Activation checkpointing (dtensor/ac.h): a region notes the tensors recorded ops make, drops
 * the storage of those its mode does not keep, and refills them in backward by replaying
 * their nodes in the order they were made. Owns no tensor after dt_ac_end: each dropped
 * tensor holds the region (refs), and tells it when it dies (detach). */
#include <stdlib.h>
#include <string.h>

#include "autograd/ac_policy.h"
#include "autograd/autograd_impl.h"
#include "autograd/saved.h"
#include "comm/comm_impl.h"
#include "core/check.h"
#include "core/clock.h"
#include "dtensor/ac.h"
#include "dtensor/redistribute.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"

struct dt_ac_region {
    dt_saved_hooks hooks; /* first: the hooks of its dropped tensors point here */
    dt_ctx *ctx;
    dt_ac_mode mode;
    bool open;
    int refs;       /* the caller's while open, plus one per dropped tensor alive */
    dt_tensor **t;  /* open: the noted tensors (retained); closed: the dropped ones (borrowed,
                       NULL once dead), in the order they were made */
    int n, cap;
    dt_ac_policy *policy; /* measured: retained */
    dt_ac_entry *measure; /* measured, still measuring: where recomputation times go */
    int *pos;             /* measure: each dropped tensor's index among the noted ones */
};

static const char *const mode_names[DT_AC_MODE_COUNT] = {"none", "full", "selective",
                                                         "measured"};

const char *dt_ac_mode_name(dt_ac_mode mode) {
    return (unsigned)mode < DT_AC_MODE_COUNT ? mode_names[mode] : NULL;
}

dt_status dt_ac_mode_parse(const char *text, dt_ac_mode *out) {
    DT_ARG_NOT_NULL(text);
    DT_ARG_NOT_NULL(out);
    for (int m = 0; m < DT_AC_MODE_COUNT; m++)
        if (!strcmp(text, mode_names[m])) {
            *out = (dt_ac_mode)m;
            return DT_OK;
        }
    return dt_error(DT_ERR_ARG, "dt_ac_mode_parse: argument text = \"%s\" is not none, full, "
                                "selective or measured", text);
}

static void region_unref(dt_ac_region *r) {
    if (--r->refs) return;
    if (r->policy) dt_ac_policy_unref(r->policy);
    free(r->pos);
    free(r->t);
    free(r);
}

/* Whether selective checkpointing keeps what op made: the matmuls and attention, whose
 * recomputation costs the most. */
static bool selective_keeps(int op) {
    switch (op) {
    case DT_OP_MM:
    case DT_OP_BMM:
    case DT_OP_MATMUL:
    case DT_OP_ADDMM:
    case DT_OP_LINEAR:
    case DT_OP_SDPA: return true;
    default: return false;
    }
}

void dt_ac_note(dt_ctx *ctx, dt_tensor *t) {
    dt_ac_region *r = dt_autograd_of(ctx)->ac_region;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        dt_tensor **g = realloc(r->t, sizeof *g * (size_t)cap);
        if (!g) return; /* not noted: it stays, which is only less memory saved */
        r->t = g, r->cap = cap;
    }
    dt_tensor_retain(t);
    r->t[r->n++] = t;
}

/* t = its node's op (or redistribute) on its node's inputs, again, into t's new storage;
 * *us: how long that took, its inputs back (what keeping t would have saved). */
static dt_status recompute(dt_tensor *t, double *us) {
    dt_tensor **in;
    const dt_op_args *args;
    int n = dt_node_inputs(t, &in, &args);
    for (int i = 0; i < n; i++) DT_CHECK(dt_saved_refill(in[i]));
    int op = dt_node_op(t);
    if (dt_node_custom(t)) /* not reached: dt_ac_end keeps those */
        return dt_error(DT_ERR_ARG, "dt_backward: a custom node's output was dropped");
    double t0 = dt_now_us();
    dt_status st;
    if (op >= 0) {
        DT_CHECK(dt_tensor_storage_alloc(t));
        st = dt_op_replay((dt_op)op, in, n, args, t);
    } else {
        dt_tensor *moved;
        DT_CHECK(dt_tensor_redistribute(in[0], t->mesh->ndim, t->placements, &moved));
        st = dt_tensor_storage_alloc(t);
        size_t bytes = t->local_numel * dt_dtype_size(t->dtype);
        if (st == DT_OK && bytes) st = dt_tensor_mem(t)->copy(t->data, moved->data, bytes);
        dt_tensor_release(moved);
    }
    *us = dt_now_us() - t0;
    return st;
}

/* Every dropped tensor of the region that a node not yet run may read, in the order made
 * (so a tensor's inputs are back before it). */
static dt_status refill(dt_saved_hooks *h, dt_tensor *t) {
    (void)t;
    dt_ac_region *r = (dt_ac_region *)h;
    dt_status st = DT_OK;
    for (int i = 0; i < r->n && st == DT_OK; i++) {
        if (!r->t[i] || !r->t[i]->dropped || dt_node_done(r->t[i])) continue;
        double us = 0;
        st = recompute(r->t[i], &us);
        if (st == DT_OK && r->measure) dt_ac_policy_timed(r->measure, r->pos[i], us);
    }
    return st;
}

static void detach(dt_saved_hooks *h, dt_tensor *t) {
    dt_ac_region *r = (dt_ac_region *)h;
    for (int i = 0; i < r->n; i++)
        if (r->t[i] == t) r->t[i] = NULL;
    t->ag->hooks = NULL; /* a hooked tensor is a recorded op's output: it has a slot */
    region_unref(r);
}

dt_status dt_ac_begin(dt_ctx *ctx, dt_ac_mode mode, dt_ac_region **out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(out);
    DT_ARG((unsigned)mode < DT_AC_MODE_COUNT, "dt_ac_begin: argument mode has unknown value %d",
           (int)mode);
    DT_ARG(mode != DT_AC_MEASURED, "dt_ac_begin: argument mode = measured needs a policy (use "
                                   "dt_ac_begin_measured)");
    DT_ARG(!dt_autograd_of(ctx)->ac_region,
           "dt_ac_begin: a region is already open on this rank (regions do "
           "not nest)");
    dt_ac_region *r = calloc(1, sizeof *r);
    if (!r) return dt_error(DT_ERR_NOMEM, "dt_ac_begin: out of memory");
    *r = (dt_ac_region){.hooks = {.refill = refill, .detach = detach}, .ctx = ctx, .mode = mode,
                        .open = true, .refs = 1};
    if (mode != DT_AC_NONE) dt_autograd_of(ctx)->ac_region = r;
    *out = r;
    return DT_OK;
}

dt_status dt_ac_begin_measured(dt_ctx *ctx, dt_ac_policy *policy, dt_ac_region **out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(policy);
    DT_ARG_NOT_NULL(out);
    DT_CHECK(dt_ac_policy_bind(policy, ctx));
    dt_ac_region *r;
    DT_CHECK(dt_ac_begin(ctx, DT_AC_FULL, &r));
    r->mode = DT_AC_MEASURED;
    r->policy = policy;
    dt_ac_policy_retain(policy);
    *out = r;
    return DT_OK;
}

/* Which noted tensors full checkpointing drops (cand), and the bytes the region keeps alive
 * in any mode (the other tensors a node or the caller still holds, and the other outputs
 * their nodes saved): a policy's candidates and its block's minimum. */
static int64_t candidates(const dt_ac_region *r, int nkeep, dt_tensor *const *keep, bool *cand) {
    int64_t held = 0;
    for (int i = 0; i < r->n; i++) {
        dt_tensor *t = r->t[i];
        bool gone = atomic_load(&t->refs) == 1;
        bool kept = gone || dt_ag(t)->hooks || !t->owned || dt_node_custom(t);
        for (int k = 0; k < nkeep && !kept; k++) kept = keep[k] == t;
        cand[i] = !kept;
        if (kept && !gone && t->owned) held += (int64_t)(t->local_numel * dt_dtype_size(t->dtype));
        if (!gone) held += dt_node_saved_bytes(t); /* a node alive keeps its other outputs */
    }
    return held;
}

dt_status dt_ac_end(dt_ac_region *region, int nkeep, dt_tensor *const *keep) {
    DT_ARG_NOT_NULL(region);
    DT_ARG(region->open, "dt_ac_end: the region was closed already");
    DT_ARG(nkeep >= 0 && (nkeep == 0 || keep), "dt_ac_end: argument keep is NULL for nkeep = %d",
           nkeep);
    dt_ac_region *r = region;
    dt_autograd_state *ag = dt_autograd_of(r->ctx);
    if (ag->ac_region == r) ag->ac_region = NULL;
    r->open = false;
    /* cand[i]: full drops r->t[i]; stay[i]: the mode keeps it all the same */
    bool *cand = calloc((size_t)r->n + 1, 2 * sizeof *cand), *stay = NULL;
    dt_status st = cand ? DT_OK : dt_error(DT_ERR_NOMEM, "dt_ac_end: out of memory");
    if (cand) {
        stay = cand + r->n;
        int64_t held = candidates(r, nkeep, keep, cand);
        for (int i = 0; i < r->n; i++)
            stay[i] = r->mode == DT_AC_SELECTIVE && selective_keeps(dt_node_op(r->t[i]));
        if (r->mode == DT_AC_MEASURED)
            st = dt_ac_policy_plan(r->policy, r->ctx, r->t, r->n, cand, held, stay,
                                   &r->measure);
        if (r->measure && !(r->pos = malloc(sizeof *r->pos * (size_t)(r->n + 1))))
            r->measure = NULL; /* not measured: the policy waits for another region */
    }
    int m = 0;
    for (int i = 0; i < r->n; i++) {
        dt_tensor *t = r->t[i];
        if (cand && cand[i] && !stay[i]) {
            dt_tensor_storage_drop(t);
            t->ag->hooks = &r->hooks; /* noted: a recorded op's output */
            r->refs++;
            if (r->pos) r->pos[m] = i;
            r->t[m++] = t;
        }
        dt_tensor_release(t); /* a dropped one lives on in the nodes that saved it */
    }
    r->n = m;
    free(cand);
    region_unref(r);
    return st;
}
