/* The one recording site: every differentiable entry point below the layers above (an op
 * call, a redistribute, its async and cross-mesh forms) runs the pure layer beneath and
 * records the node here. As in PyTorch, the op dispatcher and redistribute know nothing of
 * autograd. */
#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "ops/op_impl.h"
#include "redistribute/redistribute_impl.h"

/* ---- ops ------------------------------------------------------------------------------- */

static dt_status call(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                      dt_tensor **out, dt_tensor **aux) {
    DT_CHECK(dt_dispatch_check(op, in, n));
    DT_ARG(out != NULL, "%s: argument out is NULL", dt_op_name(op));
    static const dt_op_args no_args;
    if (dt_op_family(op)->composite) return dt_composite_run(op, in, n, args ? args : &no_args, out);
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
        if (st == DT_OK) st = dt_autograd_record(op, used, n, args, o, ax, na);
        for (int i = 0; i < n; i++) dt_tensor_release(used[i]);
    }
    if (st != DT_OK) {
        dt_tensor_release(o);
        for (int i = 0; i < na; i++) dt_tensor_release(ax[i]);
        return st;
    }
    *out = o;
    for (int i = 0; i < na; i++) {
        if (aux) aux[i] = ax[i];
        else dt_tensor_release(ax[i]);
    }
    return DT_OK;
}

dt_status dt_op_call(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                     dt_tensor **out) {
    return call(op, inputs, ninputs, args, out, NULL);
}

dt_status dt_op_call_aux(dt_op op, dt_tensor *const *inputs, int ninputs,
                         const dt_op_args *args, dt_tensor **out, dt_tensor **aux, int naux) {
    static const dt_op_args no_args;
    const op_family *f = dt_op_family(op);
    DT_ARG(aux != NULL, "%s: argument aux is NULL", dt_op_name(op));
    int na = 0, for_grad;
    if (f && f->aux && inputs && ninputs > 0) {
        op_out spec[DT_OP_MAX_AUX];
        op_input gin[DT_OP_MAX_INPUTS];
        DT_CHECK(dt_dispatch_check(op, inputs, ninputs));
        for (int i = 0; i < ninputs; i++)
            gin[i] = inputs[i] ? (op_input){inputs[i]->ndim, inputs[i]->shape, inputs[i]->dtype}
                               : (op_input){-1, NULL, DT_F32};
        na = f->aux(op, gin, ninputs, args ? args : &no_args, spec, &for_grad);
    }
    DT_ARG(naux == na, "%s: argument naux is %d, the op has %d outputs besides the first",
           dt_op_name(op), naux, na);
    return call(op, inputs, ninputs, args, out, aux);
}

/* ---- redistribute ---------------------------------------------------------------------- */

/* y = move(in) made: differentiable, the gradient goes back by the dual move (engine.c). A
 * move with nothing to do hands back the input itself, whose gradient is its own. */
static dt_status record_move(dt_tensor *in, dt_tensor *y) {
    if (y == in || !dt_autograd_wants(&in, 1)) return DT_OK;
    return dt_autograd_record_redistribute(in, y);
}

/* The same at an async move's wait, decided when it was asked for. */
static dt_status record_at_wait(dt_tensor *in, dt_tensor *y) {
    return y == in ? DT_OK : dt_autograd_record_redistribute(in, y);
}

static dt_status moved(dt_tensor *in, dt_tensor *y, dt_tensor **out) {
    dt_status st = record_move(in, y);
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
    DT_CHECK(dt_redistribute_prepare("dt_tensor_redistribute", tensor, ndst, dst, &plan));
    dt_tensor *y;
    DT_CHECK(dt_redistribute_execute(tensor, plan, &y));
    return moved(tensor, y, out);
}

dt_status dt_tensor_redistribute_async(dt_tensor *tensor, int ndst, const dt_placement *dst,
                                       dt_request **out) {
    DT_ARG_NOT_NULL(out);
    const dt_plan *plan;
    DT_CHECK(dt_redistribute_prepare("dt_tensor_redistribute_async", tensor, ndst, dst, &plan));
    /* Whether to record is decided now, in the grad mode of the call; the node is recorded on
     * the rank's own thread when the result is handed over. */
    return dt_redistribute_submit(tensor, plan, dt_autograd_wants(&tensor, 1) ? record_at_wait : NULL,
                                  out);
}

dt_status dt_tensor_redistribute_to(dt_tensor *tensor, dt_mesh *dst_mesh, int ndst,
                                    const dt_placement *dst, dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    dt_tensor *y;
    DT_CHECK(dt_redistribute_to_run(tensor, dst_mesh, ndst, dst, &y));
    return moved(tensor, y, out);
}
