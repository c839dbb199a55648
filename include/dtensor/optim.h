/* Optimizers over DTensor parameters: torch.optim.SGD and torch.optim.AdamW, fused.
 *
 * A parameter is a leaf that requires grad, in any placements but Partial, on any mesh. Its
 * state (SGD's momentum buffer; AdamW's exp_avg and exp_avg_sq) is made in the parameter's
 * mesh, placements and device, so an FSDP-sharded parameter has sharded moments. A step reads
 * each parameter's gradient (dt_tensor_grad), which after dt_backward with grad sync on is in
 * the parameter's placements, and updates every parameter's local shard in place with one
 * fused kernel over all shards on a device: no communication, no autograd recording. A
 * gradient in other placements (grad sync off leaves Partial ones) is an error: sync first.
 *
 * Mixed precision: a group with master_weights keeps an f32 copy of each bf16/f16 parameter;
 * the step updates the copy (state in f32) and writes it, rounded, into the parameter the model
 * computes with. The step also takes an f32 gradient for such a parameter; autograd itself
 * still accumulates and reduces a bf16 parameter's gradient in bf16 (f32 gradient accumulation
 * is not done yet).
 *
 * No call here is collective or blocks on other ranks; every rank holding shards of the
 * parameters must make the same calls with the same arguments (their states must agree). */
#ifndef DTENSOR_OPTIM_H
#define DTENSOR_OPTIM_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_optim dt_optim;

/* torch.optim.SGD's arguments (maximize and foreach aside). nesterov needs momentum > 0 and
 * dampening 0, as there. */
typedef struct dt_sgd_options {
    double lr, momentum, dampening, weight_decay;
    int nesterov;
} dt_sgd_options;

/* torch.optim.AdamW's arguments (amsgrad and maximize aside): decoupled weight decay, bias
 * correction. */
typedef struct dt_adamw_options {
    double lr, beta1, beta2, eps, weight_decay;
} dt_adamw_options;

/* A parameter group: n parameters (the array is borrowed; the optimizer retains each tensor),
 * with this group's weight decay (NULL: the options') and whether to keep f32 master weights
 * for its bf16/f16 parameters (f32 and f64 parameters are their own master). reduce_f32 (with
 * master_weights): the group's bf16/f16 parameters accumulate and reduce their gradients in f32
 * (dt_tensor_set_grad_dtype; torchtitan's mixed precision: bf16 compute, f32 master weights
 * and gradient reduction), set when the optimizer is made. */
typedef struct dt_param_group {
    dt_tensor *const *params;
    int n;
    const double *weight_decay;
    int master_weights;
    int reduce_f32;
} dt_param_group;

/* Make an optimizer over the parameters of ngroups groups (parameter k counts through the
 * groups in order; errors name it). State is made zeroed, master weights copied from the
 * parameters. DT_ERR_ARG for an option out of torch's range, a parameter that is not a leaf
 * requiring grad or that appears twice, DT_ERR_DTYPE for a non-float parameter,
 * DT_ERR_PLACEMENT for a Partial one. The caller owns *out (dt_optim_destroy). */
DT_API dt_status dt_optim_sgd_create(const dt_sgd_options *options, const dt_param_group *groups,
                                     int ngroups, dt_optim **out);
DT_API dt_status dt_optim_adamw_create(const dt_adamw_options *options,
                                       const dt_param_group *groups, int ngroups, dt_optim **out);
/* The same over every parameter of a materialized registry (dtensor/params.h), in its order,
 * one group (options' weight decay); DT_ERR_ARG for a registry not materialized or empty. */
typedef struct dt_params dt_params;
DT_API dt_status dt_optim_adamw_create_params(const dt_adamw_options *options,
                                              const dt_params *params, dt_optim **out);
/* Releases the state, the master weights and the optimizer's references to the parameters.
 * NULL is fine. */
DT_API dt_status dt_optim_destroy(dt_optim *optim);

/* One step (optimizer.step()): every parameter with a gradient is updated in place; those
 * without one are skipped (their state and step count unchanged), as torch does. Every
 * gradient is checked before anything changes: DT_ERR_PLACEMENT naming the parameter when its
 * gradient's placements differ from its own, DT_ERR_ARG / DT_ERR_DTYPE / DT_ERR_DEVICE when
 * its shape, dtype (the parameter's, or f32 with master weights) or device differ. One kernel
 * call per device; queued on the device (the CPU's runs before this returns). */
DT_API dt_status dt_optim_step(dt_optim *optim);
/* Drops every parameter's gradient (torch's zero_grad(set_to_none=True)). */
DT_API dt_status dt_optim_zero_grad(dt_optim *optim);

/* The learning rate of every group from the next step on (a schedule sets it each step). */
DT_API dt_status dt_optim_set_lr(dt_optim *optim, double lr);
DT_API dt_status dt_optim_get_lr(const dt_optim *optim, double *out);
/* The number of parameters, and parameter k's state, borrowed: which = 0 for SGD's momentum
 * buffer (NULL without momentum) or AdamW's exp_avg, 1 for exp_avg_sq, 2 for the f32 master
 * copy (NULL without one). */
DT_API dt_status dt_optim_param_count(const dt_optim *optim, int *out);
/* Parameter k (borrowed: the optimizer's reference), and the optimizer's kind as torch names
 * its class ("AdamW", "SGD"; a static string). */
DT_API dt_status dt_optim_param(const dt_optim *optim, int k, dt_tensor **out);
DT_API dt_status dt_optim_kind(const dt_optim *optim, const char **out);
DT_API dt_status dt_optim_state(const dt_optim *optim, int k, int which, dt_tensor **out);

/* The state as named tensors, for a checkpoint (dtensor/checkpoint.h): *out = how many there
 * are; tensor i (borrowed) with its name "<param>.<slot>" written into name_out (cap bytes),
 * where param_names[k] names parameter k and slot is SGD's "momentum_buffer", AdamW's
 * "exp_avg" and "exp_avg_sq", or "master" for an f32 master copy (torch's state_dict names).
 * Ordered by parameter, then slot. DT_ERR_SIZE when the name does not fit. Loading a
 * checkpoint into these tensors restores the state in place. */
DT_API dt_status dt_optim_state_count(const dt_optim *optim, int *out);
DT_API dt_status dt_optim_state_named(const dt_optim *optim, const char *const *param_names, int i,
                                      char *name_out, size_t cap, dt_tensor **out);
/* Parameter k's step count (torch's state['step'], which AdamW's bias correction reads): to
 * keep in the checkpoint's blob and set back after loading. */
DT_API dt_status dt_optim_steps_get(const dt_optim *optim, int k, int64_t *out);
DT_API dt_status dt_optim_steps_set(dt_optim *optim, int k, int64_t steps);

/* Linear warmup, a stable phase, then cosine decay to a floor, as torchtitan's
 * linear_warmup_stable_decay with decay_type cosine: the learning rate of 0-based step is
 * lr * f with f = (step + 1) / (warmup_steps + 1) during warmup, 1 for stable_steps, then
 * lr_min + (1 - lr_min) * (1 + cos(pi * p)) / 2 with p = (step + 1 - warmup_steps -
 * stable_steps) / (decay_steps + 1); steps past the end keep the last value. lr_min is a
 * fraction of lr. Pure function of its arguments; DT_ERR_ARG for negative counts or step, or
 * lr_min outside [0, 1]. */
typedef struct dt_lr_schedule {
    double lr, lr_min;
    int64_t warmup_steps, stable_steps, decay_steps;
} dt_lr_schedule;
DT_API dt_status dt_lr_warmup_cosine(const dt_lr_schedule *schedule, int64_t step, double *out);

#ifdef __cplusplus
}
#endif
#endif
