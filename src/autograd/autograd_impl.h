/* The autograd layer: the one place that records. dt_op_call (ops) runs through the recorder
 * record.c sets, the public redistributes are record.c's, and both record nodes here over the
 * pure layers below (ops' choose and compute, redistribute's run); dt_backward walks them and
 * runs each op's backward rule, which its family file in src/ops holds (ops/grad.h). Rules are
 * written with the library's own ops (dt_add, dt_mm, ...): the gradients they return are DTensors
 * in whatever placements dispatch gives them; they run with grad mode off. */
#ifndef DT_AUTOGRAD_IMPL_H
#define DT_AUTOGRAD_IMPL_H

#include <stdbool.h>

#include "comm/comm_impl.h"
#include "dtensor/autograd.h"
#include "dtensor/ops.h"
#include "dtensor/tensor_impl.h"
#include "ops/grad.h"

/* What autograd keeps of a tensor (dtensor/tensor_impl.h's opaque slot), made when autograd
 * first marks the tensor and freed with it. */
typedef struct dt_grad_slot {
    bool requires_grad;           /* a leaf marked so, or the output of a recorded op */
    struct dt_node *node;         /* the op that made it (owned), NULL for a leaf */
    dt_tensor *grad;              /* a leaf's accumulated gradient (owned) */
    int grad_dtype;               /* dt_dtype + 1 its gradient is accumulated in; 0: its own */
    unsigned sync_mark;           /* a leaf: the backward that listed it for its gradient sync */
    struct dt_saved_hooks *hooks; /* a dropped saved tensor's owner (saved.h); borrowed */
} dt_grad_slot;

/* t's slot for reading: an all-zero one when autograd never marked t. */
extern const dt_grad_slot dt_grad_slot_none;
static inline const dt_grad_slot *dt_ag(const dt_tensor *t) {
    return t->ag ? t->ag : &dt_grad_slot_none;
}
/* t's slot for writing, made on first use (DT_ERR_NOMEM when it cannot be). */
dt_status dt_ag_make(dt_tensor *t, dt_grad_slot **out);

/* A rank's autograd state, kept in its context's autograd slot (comm/comm_impl.h): all zero
 * is grad mode on, gradients synced, the default bucket size, no hooks and no open region. */
typedef struct dt_autograd_state {
    int no_grad_depth;                     /* dt_no_grad_enter scopes open (records when 0) */
    bool grad_unsynced;                    /* dt_ctx_set_grad_sync(ctx, 0) */
    size_t grad_bucket_bytes;              /* dt_ctx_set_grad_bucket_bytes + 1; 0: the default */
    struct dt_backward_hook *backward_end; /* run once when the running backward ends */
    struct dt_backward_hook *backward_begin; /* run once when the next backward begins */
    struct dt_ac_region *ac_region;        /* the open activation-checkpoint region, if any */
    unsigned backwards;                    /* backward passes ended (the measured AC policy) */
} dt_autograd_state;
_Static_assert(sizeof(dt_autograd_state) <= DT_CTX_SLOT_BYTES, "autograd state outgrew its slot");
static inline dt_autograd_state *dt_autograd_of(dt_ctx *ctx) {
    return (dt_autograd_state *)dt_ctx_slot(ctx, DT_CTX_SLOT_AUTOGRAD);
}

/* Sets dt_op_call's recorder (record.c); called before the first tensor is marked, so that
 * calls on tensors that may require grad run through it. */
void dt_autograd_start(void);

/* Whether a call on inputs records a node: grad mode is on and some input requires grad. */
bool dt_autograd_wants(dt_tensor *const *in, int n);

/* Records out = op(in, args) (out is new, made by dispatch); the node keeps the op's other
 * outputs saved[0..nsaved) for the rule. */
dt_status dt_autograd_record(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                             dt_tensor *out, dt_tensor *const *saved, int nsaved);
/* Records in[0] = op(in, args) computed in place (in[0]'s version already counted up):
 * before, a new tensor of in[0]'s spec that reads nothing (the node's rule must not read input
 * 0), takes in[0]'s history, and in[0] gets the node with before as its input 0, as PyTorch
 * rebases an in-place op's history. On failure nothing moved. */
dt_status dt_autograd_record_inplace(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                     dt_tensor *before);
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

#endif
