/* The autograd graph: nodes recorded by op dispatch and redistribute, walked by dt_backward,
 * and the backward rules (one dt_grad_<name> per op, named in dtensor/op_list.h's grad
 * column). Rules are written with the library's own ops (dt_add, dt_mm, ...): the gradients
 * they return are DTensors in whatever placements dispatch gives them; they run with grad
 * mode off. */
#ifndef DT_AUTOGRAD_IMPL_H
#define DT_AUTOGRAD_IMPL_H

#include <stdbool.h>

#include "dtensor/autograd.h"
#include "dtensor/ops.h"

#define DT_GRAD_MAX_INPUTS 5

/* What a backward rule sees: the forward call and the gradient of its output. */
typedef struct dt_grad_call {
    dt_op op;
    const dt_op_args *args;
    int n;
    dt_tensor *const *in;  /* the forward's inputs, as they were (NULL where optional and absent) */
    dt_tensor *const *saved; /* the forward's other outputs (attention's log-sum-exp) */
    int nsaved;
    const bool *need;      /* need[i]: input i wants a gradient */
    dt_tensor *grad;       /* the gradient of the output (the output's shape) */
} dt_grad_call;

/* Sets in_grad[i] (a new tensor of input i's shape, any placements) for every i with need[i];
 * the others are left NULL. On failure nothing is returned. */
typedef dt_status (*dt_grad_fn)(const dt_grad_call *c, dt_tensor **in_grad);

/* The rule of every grad token in op_list.h (grad_*.c), and the two tokens that are not rules:
 * none (no derivative: a clear error when a gradient is needed) and through (composites,
 * whose constituents recorded the graph: never called). */
#define DT_GRAD_DECLARE(e, name, family, lo, hi, kernel, args, wrapper, grad)                      \
    dt_status dt_grad_##grad(const dt_grad_call *c, dt_tensor **in_grad);
DT_OP_LIST(DT_GRAD_DECLARE)
#undef DT_GRAD_DECLARE

/* Whether a call on inputs records a node: grad mode is on and some input requires grad. */
bool dt_autograd_wants(dt_tensor *const *in, int n);

/* Records out = op(in, args) (out is new, made by dispatch); the node keeps the op's other
 * outputs saved[0..nsaved) for the rule. */
dt_status dt_autograd_record(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                             dt_tensor *out, dt_tensor *const *saved, int nsaved);
/* Records out = redistribute(in) (src: in's placements). */
dt_status dt_autograd_record_redistribute(dt_tensor *in, dt_tensor *out);

/* A node whose backward is its maker's own function, for layers that run their own
 * communication (ring attention): backward(state, in, need, grad, in_grad) sets in_grad[i]
 * for every need[i], as a dt_grad_fn does; it runs with grad mode off. state is the maker's
 * (what forward saved); free_state (nullable) frees it when the graph goes. */
typedef dt_status (*dt_custom_backward_fn)(void *state, dt_tensor *const *in, const bool *need,
                                           dt_tensor *grad, dt_tensor **in_grad);
/* Records out = name(in) with that backward. On failure free_state(state) has run. */
dt_status dt_autograd_record_custom(const char *name, dt_tensor *const *in, int n, dt_tensor *out,
                                    dt_custom_backward_fn backward, void *state,
                                    void (*free_state)(void *));

/* Grad sync (grad_sync.c): moves the gradient of each leaves[i] (repeats allowed; leaves
 * without a gradient or already placed are skipped) into the leaf's placements, coalescing the
 * collectives of leaves that need the same ones into buckets. Collective over the leaves'
 * meshes: every rank passes the same leaves in the same order. */
dt_status dt_grad_sync(dt_tensor *const *leaves, int n);

/* A tensor's node, released with the tensor (tensor.c calls this). */
struct dt_node;
void dt_node_release(struct dt_node *node);

/* ---- helpers for rules (grad_util.c) ------------------------------------------------------ */

/* g summed down to shape (ndim dims) as NumPy broadcasting expanded it: leading extra dims
 * and dims where shape has 1 are summed. A new reference to g when the shapes already match. */
dt_status dt_grad_sum_to(dt_tensor *g, int ndim, const int64_t *shape, dt_tensor **out);

#endif
