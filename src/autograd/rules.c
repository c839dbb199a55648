/* The backward rule of every built-in op: the grad column of the op list, bound here so that
 * ops below know nothing of gradients. */
#include "autograd/autograd_impl.h"

static const dt_grad_fn rules[] = {
#define RULE(e, name, family, lo, hi, kernel, args, wrapper, grad) [DT_OP_##e] = dt_grad_##grad,
    DT_OP_LIST(RULE)
#undef RULE
};
_Static_assert(sizeof rules / sizeof rules[0] == DT_OP_COUNT, "a built-in op has no rule entry");

dt_grad_fn dt_grad_rule(dt_op op) { return (unsigned)op < DT_OP_COUNT ? rules[op] : NULL; }
