/* What every op family gives dispatch: output spec inference, single-mesh-dim strategy rows,
 * and the local computation. Families live one per file (pointwise.c, matmul.c, ...); the
 * table that binds ops to families is registry.c. */
#ifndef DT_OPS_OP_IMPL_H
#define DT_OPS_OP_IMPL_H

#include <stdbool.h>

#include "core/device.h"
#include "dtensor/ops.h"
#include "dtensor/tensor_impl.h"
#include "ops/kernels.h"
#include "ops/op_list.h"

#define DT_OP_MAX_INPUTS 5
#define DT_OP_MAX_AUX 2 /* outputs besides the first */
#define DT_OP_MAX_ROWS 64

/* An input as the rules see it: its global spec. */
typedef struct op_input {
    int ndim;
    const int64_t *shape;
    dt_dtype dtype;
} op_input;

/* One strategy for one mesh dim: the placement every input must have on it, and the
 * output's. Combined over mesh dims by dispatch. */
typedef struct rule_row {
    dt_placement in[DT_OP_MAX_INPUTS];
    dt_placement out;
} rule_row;

/* Output spec. */
typedef struct op_out {
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_dtype dtype;
    /* An aux output (op_family.aux) that sums over the first output's rows (a norm's weight
     * gradient): Partial(sum) on each mesh dim where the first output is sharded, instead of
     * the first output's placements. */
    bool sums_rows;
    /* An aux output that is input grad_of - 1's gradient (attention's dk and dv; 0: none):
     * Partial(sum) on each mesh dim where the first output is sharded but that input is
     * Replicate (each rank adds its own rows' share), else the first output's placement. */
    int grad_of;
} op_out;

/* This rank's view for the local computation. */
typedef struct local_call {
    dt_op op;
    const dt_op_args *args;
    int ninputs;
    dt_local in[DT_OP_MAX_INPUTS];
    int64_t in_offset[DT_OP_MAX_INPUTS][DT_MAX_NDIM]; /* global offset of each input block */
    const op_input *global;                           /* the inputs' global specs */
    dt_local out;
    int64_t out_offset[DT_MAX_NDIM]; /* global offset of the output block */
    int naux;                        /* the op's other outputs (0 when not computed) */
    dt_local aux[DT_OP_MAX_AUX];
    const dt_kernels *k;   /* of the device every block lives on */
    const dt_mem_ops *mem; /* the same device's copies */
} local_call;

/* One node autograd records for a fused forward (op_family.record_as): output out (0: the
 * first, k > 0: aux k - 1) recorded as made by op over operands in[0..n) (>= 0: the call's input
 * i; < 0: its output -1 - in), with args. */
typedef struct op_record_step {
    dt_op op;
    int n, in[3], out;
    dt_op_args args;
} op_record_step;

typedef struct op_family {
    bool composite;    /* built from other ops (composite.c runs it): no rules */
    bool inplace;      /* its kernel may write the output over input 0 (dt_op_call_inplace) */
    unsigned optional; /* bit i: input i may be NULL (a bias, a weight) */
    dt_status (*infer)(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out);
    /* Rows valid on a mesh dim of size mesh_size (of a mesh of mesh_total ranks). */
    int (*rules)(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows);
    dt_status (*compute)(local_call *c);
    /* Optional: whether a combination of rows (one per mesh dim; in[i][m], out[m]) is valid on
     * the whole mesh, for rules whose validity depends on how many ranks shard a dim together
     * (a view keeps a nested shard only when the product of those mesh dims divides it). */
    int (*combine_ok)(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_ndim,
                      const int *mesh_shape, const dt_placement (*in_pl)[DT_MESH_MAX_NDIM],
                      const dt_placement *out_pl);
    /* Optional: the op's outputs besides the first (attention's log-sum-exp, its backward's
     * dk and dv): their specs, the count returned (at most DT_OP_MAX_AUX). They take the first
     * output's placements, so every dim the rules may shard of the output must be the same dim
     * of each (chunked alike); or, with sums_rows, Partial(sum) where it is sharded. *for_grad
     * 1: computed only when the caller asks for them or the call records an autograd node
     * (which saves them for the backward rule); 0: always. */
    int (*aux)(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *aux,
               int *for_grad);
    /* Optional: a fused forward whose outputs are those of plain ops (rms_norm_residual's sum
     * and norm) is recorded as those ops' nodes, the steps returned (at most 1 +
     * DT_OP_MAX_AUX), in order: every output gets a gradient and the backward is theirs. */
    int (*record_as)(dt_op op, const dt_op_args *a, op_record_step *steps);
} op_family;

extern const op_family dt_family_pointwise, dt_family_matmul, dt_family_reduce,
    dt_family_softmax, dt_family_norm, dt_family_embedding, dt_family_pick,
    dt_family_composite, dt_family_attention, dt_family_shape, dt_family_user, dt_family_cat,
    dt_family_rope, dt_family_dropout, dt_family_gather, dt_family_scan,
    dt_family_vector_norm, dt_family_scatter, dt_family_fused, dt_family_norm_backward;

/* The name of a registered op, NULL when op is not one (user.c). */
const char *dt_user_op_name(dt_op op);

/* Number of inputs of a registered op, 0 when op is not one (user.c). */
int dt_user_op_ninputs(dt_op op);

/* The dt_op_args fields an op reads (the arguments column of ops/op_list.h). */
enum {
    ARG_SCALAR = 1u << 0,
    ARG_DIMS = 1u << 1, /* dims and ndims */
    ARG_KEEPDIM = 1u << 2,
    ARG_DIM = 1u << 3,
    ARG_DIM2 = 1u << 4,
    ARG_RANGE = 1u << 5, /* start and end */
    ARG_SHAPE = 1u << 6, /* shape and shape_ndim */
    ARG_CORRECTION = 1u << 7,
    ARG_CAUSAL = 1u << 8,
    ARG_REDUCTION = 1u << 9,
    ARG_IGNORE = 1u << 10, /* use_ignore_index and ignore_index */
    ARG_LABEL_SMOOTHING = 1u << 11,
    ARG_K = 1u << 12,
    ARG_SMALLEST = 1u << 13,
    ARG_SEED = 1u << 14, /* seed and offset: read by the kernel, never keyed */
    ARG_SEQ_FIRST = 1u << 15,
    ARG_TRANS = 1u << 16, /* trans_a and trans_b */
    ARG_ALL = (1u << 17) - 1,
};

struct dt_grad_call; /* ops/grad.h */

/* A built-in op as ops/op_list.h describes it. */
typedef struct op_desc {
    const char *name;
    const op_family *family;
    int min_inputs, max_inputs;
    int kernel;            /* offsetof its dt_kernels slot; -1: none (composites, copies) */
    const char *kernel_name;
    unsigned args;         /* ARG_* */
    const char *wrapper;   /* its typed wrapper's name */
    dt_status (*backward)(const struct dt_grad_call *c, dt_tensor **in_grad); /* ops/grad.h */
} op_desc;

/* Every built-in op's description, by its dt_op (registry.c). */
extern const op_desc dt_op_descs[DT_OP_COUNT];

/* The description of a built-in op, NULL for any other value. */
static inline const op_desc *dt_op_desc(dt_op op) {
    return (unsigned)op < DT_OP_COUNT ? &dt_op_descs[op] : NULL;
}

/* Dispatch without recording (dispatch.c), the two halves autograd/record.c records around.
 * check: in holds n live inputs of op on one mesh and device, none dropped (as fn op).
 * choose: the strategy for the call (the mesh's cache; valid until the next dispatch on the
 * mesh). compute: moves the inputs into the strategy's placements, allocates the outputs and
 * runs the kernel; used (nullable) receives each input as the kernel used it, as a new
 * reference (the move when one was made, NULL for an absent optional input); aux[0..*naux)
 * the op's other outputs, computed when the op always makes them or want_aux is set. */
typedef struct dt_op_choice dt_op_choice;
dt_status dt_dispatch_check(dt_op op, dt_tensor *const *in, int n);
dt_status dt_dispatch_choose(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                             const dt_op_choice **out);
dt_status dt_dispatch_compute(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                              const dt_op_choice *choice, int want_aux, dt_tensor **used,
                              dt_tensor **out, dt_tensor **aux, int *naux);
/* compute into in[0] itself (an op whose family allows it): in[0] must already be in the
 * strategy's placements, which must keep its spec; the other inputs move as compute moves
 * them. Its version counts up. No other outputs. Refused with a named DT_ERR_PLACEMENT or
 * DT_ERR_ARG otherwise (nothing written). */
dt_status dt_dispatch_compute_into(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                   const dt_op_choice *choice, dt_tensor **used);
/* For a composite (which has no strategy of its own): where each input should start, as
 * decide says, cached in the mesh's strategy cache under the key dispatch gives a call (op,
 * input specs, the arguments the op reads, the cost model), so that decide's pricing runs
 * once per spec. start (n rows) gets a copy. */
typedef dt_status (*dt_route_fn)(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                 dt_placement (*start)[DT_MESH_MAX_NDIM]);
dt_status dt_dispatch_route(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                            dt_route_fn decide, dt_placement (*start)[DT_MESH_MAX_NDIM]);

/* What ops asks of the autograd layer above it, which sets it (autograd/record.c) before it
 * marks the first tensor: until then no input can require grad, and ops runs its pure paths.
 * As PyTorch's dispatcher runs an op through the autograd kernel registered for it, ops calls
 * up only through this table: it includes nothing of autograd. */
typedef struct dt_op_recorder {
    /* dt_op_call's work on a checked, non-composite call (aux as dt_op_call_aux's, NULL when
     * not wanted): choose, compute, and record the node when grad mode wants one. */
    dt_status (*call)(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                      dt_tensor **out, dt_tensor **aux);
    /* dt_op_call_inplace's work: in[0] takes the result (see dt_dispatch_compute_into),
     * recorded as an in-place node when grad mode wants one; *out is in[0] retained, or a new
     * tensor where autograd must keep in[0]'s old values. */
    dt_status (*call_inplace)(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                              dt_tensor **out);
    /* x moved to dst (normalised placements), recorded as dt_tensor_redistribute records. */
    dt_status (*move)(dt_tensor *x, const dt_placement *dst, dt_tensor **out);
    /* Opens (enter 1) or closes (0) a no-grad scope on ctx. */
    void (*no_grad)(dt_ctx *ctx, int enter);
    /* Whether grad mode is on for ctx: an op called now would record a node when an input
     * requires grad. */
    bool (*grad_on)(dt_ctx *ctx);
} dt_op_recorder;
void dt_ops_set_recorder(const dt_op_recorder *r);
/* For ops' own composites and helpers: a move and a no-grad scope, through the recorder when
 * one is set (dispatch.c). enter returns what exit takes: whether it opened a scope (another
 * rank may set the recorder between the two). */
dt_status dt_ops_move(dt_tensor *x, const dt_placement *dst, dt_tensor **out);
int dt_ops_no_grad_enter(dt_ctx *ctx);
void dt_ops_no_grad_exit(dt_ctx *ctx, int entered);
/* Whether grad mode is on for ctx (false while no recorder is set: nothing records). */
bool dt_ops_grad_on(dt_ctx *ctx);

/* x viewed as shape (all dims given, no -1) for an op call of ops' own, with no copy where the
 * view keeps every placement as it is (R, Partial, a shard of a leading dim that stays whole
 * rows; shape.c) and grad mode is off: then *out borrows x's storage (owned false) and must be
 * released before x, and before the caller returns: no node, cache or result may hold it.
 * Otherwise (or for a dropped or empty block) *out is dt_view's copy. Same values either way. */
dt_status dt_view_borrowed(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out);

/* x viewed as shape for a caller about to release x: where x has no other holder (one
 * reference, no autograd state), owns its block and the view keeps every placement, *out takes
 * x's block and x is left without storage, as if dropped (only to be released); otherwise
 * *out is dt_view's copy and x is untouched. Same values either way. */
dt_status dt_view_consume(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out);

/* Runs a composite op (its family is dt_family_composite) from its constituent ops, each
 * called through dt_op_call (composite.c). */
dt_status dt_composite_run(dt_op op, dt_tensor *const *in, int n, const dt_op_args *a,
                           dt_tensor **out);

/* A call's other outputs ax[0..na): to aux when the caller asked for them (dt_op_call_aux),
 * else released. */
static inline void dt_op_aux_out(dt_tensor **ax, int na, dt_tensor **aux) {
    for (int i = 0; i < na; i++) {
        if (aux)
            aux[i] = ax[i];
        else
            dt_tensor_release(ax[i]);
    }
}

/* check, choose and compute in one, for ops' own callers that need no gradient (the total
 * norm of gradient clipping): no composites, no other outputs. */
dt_status dt_dispatch_run(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                          dt_tensor **out);

/* Runs op's local kernel again on inputs in (as its autograd node holds them: already in the
 * chosen strategy's placements) into out's storage, which has out's spec: what activation
 * checkpointing recomputes with. No redistribution, no recording (dispatch.c). */
dt_status dt_op_replay(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                       dt_tensor *out);

/* The family of a registered op, NULL when op is none (registry.c). */
const op_family *dt_op_family_user(dt_op op);

/* The family of op, built-in or registered. */
static inline const op_family *dt_op_family(dt_op op) {
    return (unsigned)op < DT_OP_COUNT ? dt_op_descs[op].family : dt_op_family_user(op);
}

/* The kernel op runs in table k, NULL when it runs none; DT_ERR_UNSUPPORTED naming the op and
 * the table when the table lacks it. */
dt_status dt_op_kernel_check(dt_op op, const dt_kernels *k);

/* Checks op is known and in holds n inputs it takes (NULL only where optional), as fn. */
dt_status dt_op_inputs_check(const char *fn, dt_op op, const void *const *in, int n);

/* The cache key words of args as op reads them (at most DT_OP_ARGS_KEY_WORDS); args NULL is
 * all zeros. Equal keys mean the op cannot tell the arguments apart. */
#define DT_OP_ARGS_KEY_WORDS (17 + DT_MAX_NDIM / 2 + DT_MAX_NDIM)
unsigned dt_op_args_key(dt_op op, const dt_op_args *args, uint64_t *key);

/* Placement shorthands for rule tables. */
#define RP ((dt_placement){DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM, 0})
#define SP(d) ((dt_placement){DT_PLACEMENT_SHARD, (d), DT_REDUCE_SUM, 0})
#define PP(op) ((dt_placement){DT_PLACEMENT_PARTIAL, 0, (op), 0})
#define NP(ord) ((dt_placement){DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_NORM, (ord)})

/* Normalises a possibly negative dim; -1 when out of range. */
static inline int dt_norm_dim(int d, int ndim) {
    if (d < 0) d += ndim;
    return d >= 0 && d < ndim ? d : -1;
}

#endif
