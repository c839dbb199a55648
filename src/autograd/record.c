/* The one recording site: every differentiable entry point (an op call, a redistribute, its
 * async and cross-mesh forms) runs the pure layer beneath and records the node here. As in
 * PyTorch, the op dispatcher and redistribute know nothing of autograd: dt_op_call (ops) runs
 * through the recorder this file gives it, as PyTorch's dispatcher runs an op through the
 * autograd kernel registered for it; the redistributes are defined here over the pure ones. */
#include <string.h>

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"
#include "redistribute/redistribute_impl.h"

/* ---- ops ----------------------------------------------------------------------------- */

/* The node of a call, or the plain ops' nodes a fused forward records as (op_family's
 * record_as): each output then has its own node and gradient. */
static dt_status record_node(dt_op op, dt_tensor **used, int n, const dt_op_args *args,
                             dt_tensor *o, dt_tensor **ax, int na) {
    const op_family *f = dt_op_family(op);
    op_record_step steps[1 + DT_OP_MAX_AUX];
    int ns = f && f->record_as ? f->record_as(op, args, steps) : 0;
    if (!ns) return dt_autograd_record(op, used, n, args, o, ax, na);
    dt_tensor *outs[1 + DT_OP_MAX_AUX] = {o};
    for (int i = 0; i < na; i++) outs[1 + i] = ax[i];
    for (int k = 0; k < ns; k++) {
        const op_record_step *s = &steps[k];
        dt_tensor *in[3];
        for (int i = 0; i < s->n; i++) in[i] = s->in[i] >= 0 ? used[s->in[i]] : outs[-1 - s->in[i]];
        DT_CHECK(dt_autograd_record(s->op, in, s->n, &s->args, outs[s->out], NULL, 0));
    }
    return DT_OK;
}

/* dt_op_call's recorder (ops/op_impl.h): the call is checked and not a composite. */
static dt_status record_call(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                             dt_tensor **out, dt_tensor **aux) {
    const dt_op_choice *choice;
    DT_CHECK(dt_dispatch_choose(op, in, n, args, &choice));
    bool record = dt_autograd_wants(in, n);
    dt_tensor *used[DT_OP_MAX_INPUTS] = {0}, *o, *ax[DT_OP_MAX_AUX] = {0};
    int na = 0;
    DT_CHECK(dt_dispatch_compute(op, in, n, args, choice, record || aux, record ? used : NULL, &o,
                                 ax, &na));
    dt_status st = DT_OK;
    if (record) {
        /* The node holds the inputs as the kernel used them: one that dispatch moved is the
         * output of a recorded redistribute, so its gradient goes back through that move's
         * conjugate (an all_gather's reduce_scatter) and the rule computes on the moved values
         * without moving them again (a gathered input lives until backward). */
        for (int i = 0; i < n && st == DT_OK; i++)
            if (used[i] && used[i] != in[i] && dt_autograd_wants(&in[i], 1))
                st = dt_autograd_record_redistribute(in[i], used[i]);
        if (st == DT_OK) st = record_node(op, used, n, args, o, ax, na);
        for (int i = 0; i < n; i++)
            dt_tensor_release(used[i]);
    }
    if (st != DT_OK) {
        dt_tensor_release(o);
        for (int i = 0; i < na; i++)
            dt_tensor_release(ax[i]);
        return st;
    }
    *out = o;
    dt_op_aux_out(ax, na, aux);
    return DT_OK;
}

/* dt_op_call_inplace's recorder: in[0] takes the result. Recorded in place when in[0]'s old
 * values are needed by no one autograd knows of ahead of time: not by the op's own rule (an
 * input other than 0 that requires grad may read them: rope's tables), not by an activation-
 * checkpoint region (it replays its ops from their inputs) nor by an owner of in[0]'s
 * storage (saved hooks); there the call runs out of place, as dt_op_call. A node recorded
 * earlier with in[0] as input is caught by its version at dt_backward. */
static dt_status record_inplace(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                dt_tensor **out) {
    dt_tensor *x = in[0];
    const dt_grad_slot *xs = dt_ag(x);
    if (xs->requires_grad && !xs->node)
        return dt_error(DT_ERR_ARG,
                        "%s (in place): input 0 is a leaf that requires grad; its "
                        "values are what its gradient is for (use %s out of place)",
                        dt_op_name(op), dt_op_name(op));
    bool record = dt_autograd_wants(in, n);
    bool keep_old = dt_autograd_of(x->mesh->ctx)->ac_region || xs->hooks;
    for (int i = 1; i < n; i++)
        keep_old |= in[i] && dt_ag(in[i])->requires_grad;
    if (record && keep_old) return record_call(op, in, n, args, out, NULL);
    const dt_op_choice *choice;
    DT_CHECK(dt_dispatch_choose(op, in, n, args, &choice));
    dt_tensor *before = NULL, *used[DT_OP_MAX_INPUTS] = {0};
    /* The history's holder first, so that a failure leaves x unwritten: x's spec, reading
     * x's storage (no copy; its rule never reads it). */
    if (record)
        DT_CHECK(dt_tensor_new(x->mesh, x->device, x->dtype, x->ndim, x->shape, x->placements,
                               x->data, false, &before));
    dt_status st = dt_dispatch_compute_into(op, in, n, args, choice, record ? used : NULL);
    if (st == DT_OK && record) {
        for (int i = 1; i < n && st == DT_OK; i++)
            if (used[i] && used[i] != in[i] && dt_autograd_wants(&in[i], 1))
                st = dt_autograd_record_redistribute(in[i], used[i]);
        used[0] = x;
        if (st == DT_OK) st = dt_autograd_record_inplace(op, used, n, args, before);
        used[0] = NULL;
        dt_tensor_release(x); /* the reference compute_into passed back in used[0] */
    }
    for (int i = 1; i < n; i++)
        dt_tensor_release(used[i]);
    dt_tensor_release(before); /* the node holds it */
    if (st != DT_OK) return st;
    dt_tensor_retain(*out = x);
    return DT_OK;
}

static dt_status record_move(dt_tensor *x, const dt_placement *dst, dt_tensor **out);

static void no_grad(dt_ctx *ctx, int enter) {
    dt_autograd_of(ctx)->no_grad_depth += enter ? 1 : -1;
}

static bool grad_on(dt_ctx *ctx) {
    return !dt_autograd_of(ctx)->no_grad_depth;
}

static const dt_op_recorder recorder = {.call = record_call,
                                        .call_inplace = record_inplace,
                                        .move = record_move,
                                        .no_grad = no_grad,
                                        .grad_on = grad_on};

void dt_autograd_start(void) {
    dt_ops_set_recorder(&recorder);
}

/* ---- redistribute ---------------------------------------------------------------------- */

/* y = move(in) made: differentiable, the gradient goes back by the dual move (engine.c). A
 * move with nothing to do hands back the input itself, whose gradient is its own. */
static dt_status record_moved(dt_tensor *in, dt_tensor *y) {
    if (y == in || !dt_autograd_wants(&in, 1)) return DT_OK;
    return dt_autograd_record_redistribute(in, y);
}

/* The same at an async move's wait, decided when it was asked for. */
static dt_status record_at_wait(dt_tensor *in, dt_tensor *y) {
    return y == in ? DT_OK : dt_autograd_record_redistribute(in, y);
}

static dt_status moved(dt_tensor *in, dt_tensor *y, dt_tensor **out) {
    dt_status st = record_moved(in, y);
    if (st != DT_OK) {
        dt_tensor_release(y);
        return st;
    }
    *out = y;
    return DT_OK;
}

dt_status dt_tensor_redistribute(dt_tensor *tensor, int ndst, const dt_placement *dst,
                                 dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    const dt_plan *plan;
    /* DT_DEBUG_ARGS: the ranks compare the arguments before they are checked. */
    DT_CHECK(dt_redistribute_agree("dt_tensor_redistribute", tensor, ndst, dst));
    DT_CHECK(dt_redistribute_prepare("dt_tensor_redistribute", tensor, ndst, dst, &plan));
    dt_tensor *y;
    DT_CHECK(dt_redistribute_execute(tensor, plan, &y));
    return moved(tensor, y, out);
}

/* ops' recorded move (dt_op_recorder.move): dst checked and normalised by the caller. */
static dt_status record_move(dt_tensor *x, const dt_placement *dst, dt_tensor **out) {
    dt_tensor *y;
    DT_CHECK(dt_redistribute_run(x, dst, &y));
    return moved(x, y, out);
}

dt_status dt_tensor_redistribute_async(dt_tensor *tensor, int ndst, const dt_placement *dst,
                                       dt_request **out) {
    DT_ARG_NOT_NULL(out);
    const dt_plan *plan;
    /* DT_DEBUG_ARGS: the ranks compare the arguments before they are checked. */
    DT_CHECK(dt_redistribute_agree("dt_tensor_redistribute_async", tensor, ndst, dst));
    DT_CHECK(dt_redistribute_prepare("dt_tensor_redistribute_async", tensor, ndst, dst, &plan));
    /* Whether to record is decided now, in the grad mode of the call; the node is recorded on
     * the rank's own thread when the result is handed over. */
    return dt_redistribute_submit(tensor, plan,
                                  dt_autograd_wants(&tensor, 1) ? record_at_wait : NULL, out);
}

dt_status dt_tensor_redistribute_to(dt_tensor *tensor, dt_mesh *dst_mesh, int ndst,
                                    const dt_placement *dst, dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    dt_tensor *y;
    DT_CHECK(dt_redistribute_to_run(tensor, dst_mesh, ndst, dst, &y));
    return moved(tensor, y, out);
}

/* ---- in place ---------------------------------------------------------------------------- */

/* x takes over the result's data; the result shell goes. x keeps its placements, as in
 * PyTorch: a result that dispatch placed otherwise (add_(R weight, P(sum) grad) gives
 * P(sum)) is redistributed back to them first. */
static dt_status in_place(dt_op op, dt_tensor *x, dt_tensor *other) {
    DT_TENSOR_ARG(x);
    DT_TENSOR_ARG(other);
    /* Overwriting x would change what the graph computed from it (and x's own node or
     * other's gradient could not follow the new data): refused while recording, allowed under
     * dt_no_grad_enter, where optimizers update parameters. */
    DT_ARG(!dt_grad_enabled(x->mesh->ctx) ||
               (!dt_ag(x)->requires_grad && !dt_ag(other)->requires_grad),
           "%s_: %s requires grad and grad mode is on; update it inside dt_no_grad_enter / "
           "dt_no_grad_exit",
           dt_op_name(op), dt_ag(x)->requires_grad ? "x" : "other");
    dt_tensor *r;
    dt_tensor *in[2] = {x, other};
    DT_CHECK(dt_op_call(op, in, 2, NULL, &r));
    if (r->ndim != x->ndim || memcmp(r->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim)) {
        dt_tensor_release(r);
        return dt_error(DT_ERR_SHAPE,
                        "%s_: the result's shape differs from the input's (the "
                        "other input broadcasts it)",
                        dt_op_name(op));
    }
    int same = 1;
    for (int m = 0; m < x->mesh->ndim; m++)
        same &= dt_placement_equal(r->placements[m], x->placements[m]);
    if (!same) {
        dt_tensor *back;
        dt_status st = dt_tensor_redistribute(r, x->mesh->ndim, x->placements, &back);
        dt_tensor_release(r);
        if (st != DT_OK) {
            dt_error_prefix(op == DT_OP_ADD ? "dt_add_" : "dt_mul_");
            return st;
        }
        r = back;
    }
    void *data = x->data;
    int owned = x->owned;
    x->data = r->data, x->owned = r->owned;
    r->data = data, r->owned = owned;
    memcpy(x->placements, r->placements, sizeof x->placements);
    memcpy(x->local_shape, r->local_shape, sizeof x->local_shape);
    memcpy(x->local_offset, r->local_offset, sizeof x->local_offset);
    x->local_numel = r->local_numel;
    x->version++; /* a node that saved x refuses its backward (engine.c) */
    dt_tensor_release(r);
    return DT_OK;
}

dt_status dt_add_(dt_tensor *x, dt_tensor *other) {
    return in_place(DT_OP_ADD, x, other);
}
dt_status dt_mul_(dt_tensor *x, dt_tensor *other) {
    return in_place(DT_OP_MUL, x, other);
}
