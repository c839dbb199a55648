/* The public autograd switches: which leaves require grad and in which dtype their gradients
 * accumulate, zero_grad, no-grad scopes, and whether gradients are synced. The graph and the
 * backward walk are in engine.c. */
#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"

dt_status dt_tensor_set_requires_grad(dt_tensor *tensor, int requires_grad) {
    DT_TENSOR_ARG(tensor);
    DT_ARG(!dt_ag(tensor)->node,
           "dt_tensor_set_requires_grad: the tensor was made by a recorded op "
           "(its gradient flows to that op's inputs); only leaves can be set");
    DT_ARG(!requires_grad || tensor->dtype == DT_F32 || tensor->dtype == DT_F64 ||
               tensor->dtype == DT_BF16 || tensor->dtype == DT_F16,
           "dt_tensor_set_requires_grad: a %s tensor cannot require grad (floats only)",
           dt_dtype_name(tensor->dtype));
    if (!requires_grad && !tensor->ag) return DT_OK;
    dt_grad_slot *s = NULL;
    DT_CHECK(dt_ag_make(tensor, &s));
    s->requires_grad = requires_grad != 0;
    return DT_OK;
}

dt_status dt_tensor_set_grad_dtype(dt_tensor *tensor, dt_dtype dtype) {
    DT_TENSOR_ARG(tensor);
    DT_ARG(!dt_ag(tensor)->node,
           "dt_tensor_set_grad_dtype: the tensor was made by a recorded op; only "
           "leaves keep gradients");
    DT_ARG(dtype == DT_F32 || dtype == DT_F64 || dtype == DT_BF16 || dtype == DT_F16,
           "dt_tensor_set_grad_dtype: argument dtype = %s is not a float dtype",
           dt_dtype_name(dtype));
    const dt_tensor *held = dt_ag(tensor)->grad;
    DT_ARG(!held || held->dtype == dtype,
           "dt_tensor_set_grad_dtype: the tensor holds a %s gradient; zero_grad first",
           dt_dtype_name(held ? held->dtype : dtype));
    dt_grad_slot *s = NULL;
    DT_CHECK(dt_ag_make(tensor, &s));
    s->grad_dtype = dtype == tensor->dtype ? 0 : (int)dtype + 1;
    return DT_OK;
}

int dt_tensor_requires_grad(const dt_tensor *tensor) {
    return tensor && tensor->magic == DT_TENSOR_LIVE && dt_ag(tensor)->requires_grad;
}

dt_tensor *dt_tensor_grad(const dt_tensor *tensor) {
    return tensor && tensor->magic == DT_TENSOR_LIVE ? dt_ag(tensor)->grad : NULL;
}

dt_status dt_tensor_zero_grad(dt_tensor *tensor) {
    DT_TENSOR_ARG(tensor);
    if (tensor->ag) dt_tensor_release(tensor->ag->grad), tensor->ag->grad = NULL;
    return DT_OK;
}

dt_status dt_no_grad_enter(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    dt_autograd_of(ctx)->no_grad_depth++;
    return DT_OK;
}

dt_status dt_no_grad_exit(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    dt_autograd_state *ag = dt_autograd_of(ctx);
    DT_ARG(ag->no_grad_depth > 0, "dt_no_grad_exit: no dt_no_grad_enter scope is open");
    ag->no_grad_depth--;
    return DT_OK;
}

int dt_grad_enabled(const dt_ctx *ctx) {
    return ctx && ((const dt_autograd_state *)dt_ctx_slot_peek(ctx, DT_CTX_SLOT_AUTOGRAD))
                          ->no_grad_depth == 0;
}

dt_status dt_ctx_set_grad_sync(dt_ctx *ctx, int sync) {
    DT_ARG_NOT_NULL(ctx);
    dt_autograd_of(ctx)->grad_unsynced = !sync;
    return DT_OK;
}
