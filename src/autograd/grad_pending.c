/* Ops whose backward rule is not written yet: a gradient through them is DT_ERR_UNSUPPORTED
 * naming the op. A rule moves out of this list when it lands with its gradient check. */
#include "autograd/autograd_impl.h"
#include "core/check.h"

#define PENDING(name)                                                                              \
    dt_status dt_grad_##name(const dt_grad_call *c, dt_tensor **gin) {                             \
        (void)gin;                                                                                 \
        return dt_error(DT_ERR_UNSUPPORTED, "dt_backward: %s has no backward rule yet",            \
                        dt_op_name(c->op));                                                        \
    }

PENDING(maximum)
PENDING(minimum)
PENDING(bmm)
PENDING(matmul)
PENDING(log)
PENDING(sqrt)
PENDING(rsqrt)
PENDING(abs)
PENDING(relu)
PENDING(gelu)
PENDING(silu)
PENDING(tanh)
PENDING(sigmoid)
PENDING(pow_scalar)
PENDING(amax)
PENDING(amin)
PENDING(max)
PENDING(min)
PENDING(unsqueeze)
PENDING(squeeze)
PENDING(where)
PENDING(addmm)
PENDING(permute)
PENDING(slice)
PENDING(expand)
PENDING(cat)
PENDING(stack)
PENDING(cumsum)
PENDING(vector_norm)
