/* Saved tensors that can be dropped and rematerialized, and the engine's other hooks.
 *
 * A node keeps its inputs alive until backward (they are what its rule reads). An owner (an
 * activation-checkpoint region, an FSDP unit) may free such a tensor's storage after the
 * forward (dt_tensor_storage_drop) and attach hooks: before a node's rule runs, backward
 * calls refill for every dropped input, and the owner puts the values back (recomputing
 * them, or gathering them again). An FSDP unit also takes the gradient of its gathered
 * parameters (grad_ready) to reduce them together. Owners never hold what they hook: detach
 * tells them when a hooked tensor dies. */
#ifndef DT_AUTOGRAD_SAVED_H
#define DT_AUTOGRAD_SAVED_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/autograd.h"
#include "dtensor/ops.h"

typedef struct dt_saved_hooks {
    /* Puts t's values back (t is dropped; it may refill other tensors of its owner too).
     * Collective when the owner's recomputation is: every rank reaches it at the same point
     * of the same graph. */
    dt_status (*refill)(struct dt_saved_hooks *h, dt_tensor *t);
    /* Nullable. t = redistribute(leaf) and backward has t's whole gradient g: the hook takes
     * g (consumed) instead of it being added to the leaf; called only with grad sync on. */
    dt_status (*grad_ready)(struct dt_saved_hooks *h, dt_tensor *t, dt_tensor *g);
    /* t is being freed: forget it. */
    void (*detach)(struct dt_saved_hooks *h, dt_tensor *t);
} dt_saved_hooks;

/* Refills t when it is dropped (through its hooks). */
dt_status dt_saved_refill(dt_tensor *t);

/* Runs fn(user) once when the backward now running on ctx ends (before leaf gradients are
 * synced), in the order registered; a failure is the backward's. Only during a backward. */
typedef struct dt_backward_hook {
    dt_status (*fn)(void *user);
    void *user;
    struct dt_backward_hook *next;
} dt_backward_hook;
dt_status dt_autograd_at_backward_end(dt_ctx *ctx, dt_status (*fn)(void *user), void *user);
/* Removes the hooks registered with fn and user (their owner is going away). */
void dt_autograd_cancel_backward_end(dt_ctx *ctx, dt_status (*fn)(void *user), void *user);
/* Runs fn(user) once when the next backward on ctx begins (before its first node runs), in
 * the order registered; a failure is the backward's: the end of a forward, for an owner that
 * cannot tell otherwise (FSDP units declared on a registry). Any time; and its cancel. */
dt_status dt_autograd_at_backward_begin(dt_ctx *ctx, dt_status (*fn)(void *user), void *user);
void dt_autograd_cancel_backward_begin(dt_ctx *ctx, dt_status (*fn)(void *user), void *user);

/* Activation checkpointing (recompute.c): record notes every tensor a recorded op makes while
 * a region is open on its rank. */
void dt_ac_note(dt_ctx *ctx, dt_tensor *t);

/* The op of a tensor's node (-1 for a redistribute, a custom node or a leaf), its inputs, and
 * whether a backward already ran through it: what recomputation replays. A custom node's
 * (dt_autograd_record_custom: ring attention) forward is the caller's code, which nothing can
 * replay: its output is never dropped. */
int dt_node_op(const dt_tensor *t);
int dt_node_inputs(const dt_tensor *t, dt_tensor ***in_out, const dt_op_args **args_out);
bool dt_node_done(const dt_tensor *t);
bool dt_node_custom(const dt_tensor *t);
/* The bytes of the other outputs t's node keeps for its rule (never dropped). */
int64_t dt_node_saved_bytes(const dt_tensor *t);

#endif
