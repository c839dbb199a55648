/* Activation checkpointing (dtensor/ac.h): a region notes the tensors recorded ops make, drops
 * the storage of those its mode does not keep, and refills them in backward by replaying
 * their nodes in the order they were made. Owns no tensor after dt_ac_end: each dropped
 * tensor holds the region (refs), and tells it when it dies (detach). */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/saved.h"
#include "comm/comm_impl.h"
#include "core/check.h"
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
};

static const char *const mode_names[DT_AC_MODE_COUNT] = {"none", "full", "selective"};

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
    return dt_error(DT_ERR_ARG, "dt_ac_mode_parse: argument text = \"%s\" is not none, full or "
                                "selective", text);
}

static void region_unref(dt_ac_region *r) {
    if (--r->refs) return;
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

/* t = its node's op (or redistribute) on its node's inputs, again, into t's new storage. */
static dt_status recompute(dt_tensor *t) {
    dt_tensor **in;
    const dt_op_args *args;
    int n = dt_node_inputs(t, &in, &args);
    for (int i = 0; i < n; i++) DT_CHECK(dt_saved_refill(in[i]));
    int op = dt_node_op(t);
    if (dt_node_custom(t)) /* not reached: dt_ac_end keeps those */
        return dt_error(DT_ERR_ARG, "dt_backward: a custom node's output was dropped");
    if (op >= 0) {
        DT_CHECK(dt_tensor_storage_alloc(t));
        return dt_op_replay((dt_op)op, in, n, args, t);
    }
    dt_tensor *moved;
    DT_CHECK(dt_tensor_redistribute(in[0], t->mesh->ndim, t->placements, &moved));
    dt_status st = dt_tensor_storage_alloc(t);
    size_t bytes = t->local_numel * dt_dtype_size(t->dtype);
    if (st == DT_OK && bytes) st = dt_tensor_mem(t)->copy(t->data, moved->data, bytes);
    dt_tensor_release(moved);
    return st;
}

/* Every dropped tensor of the region that a node not yet run may read, in the order made
 * (so a tensor's inputs are back before it). */
static dt_status refill(dt_saved_hooks *h, dt_tensor *t) {
    (void)t;
    dt_ac_region *r = (dt_ac_region *)h;
    dt_status st = DT_OK;
    for (int i = 0; i < r->n && st == DT_OK; i++)
        if (r->t[i] && r->t[i]->dropped && !dt_node_done(r->t[i])) st = recompute(r->t[i]);
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

dt_status dt_ac_end(dt_ac_region *region, int nkeep, dt_tensor *const *keep) {
    DT_ARG_NOT_NULL(region);
    DT_ARG(region->open, "dt_ac_end: the region was closed already");
    DT_ARG(nkeep >= 0 && (nkeep == 0 || keep), "dt_ac_end: argument keep is NULL for nkeep = %d",
           nkeep);
    dt_ac_region *r = region;
    dt_autograd_state *ag = dt_autograd_of(r->ctx);
    if (ag->ac_region == r) ag->ac_region = NULL;
    r->open = false;
    int m = 0;
    for (int i = 0; i < r->n; i++) {
        dt_tensor *t = r->t[i];
        bool kept = atomic_load(&t->refs) == 1 || dt_ag(t)->hooks || !t->owned ||
                    dt_node_custom(t) ||
                    (r->mode == DT_AC_SELECTIVE && selective_keeps(dt_node_op(t)));
        for (int k = 0; k < nkeep && !kept; k++) kept = keep[k] == t;
        if (!kept) {
            dt_tensor_storage_drop(t);
            t->ag->hooks = &r->hooks; /* noted: a recorded op's output */
            r->refs++;
            r->t[m++] = t;
        }
        dt_tensor_release(t); /* a dropped one lives on in the nodes that saved it */
    }
    r->n = m;
    region_unref(r);
    return DT_OK;
}
