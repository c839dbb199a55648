/* Parallelizing a model declared in a registry (dtensor/params.h), as PyTorch's
 * parallelize_module and torchtitan's plans do it: a plan is data, a list of (module name
 * pattern, style); dt_parallelize checks it against the registry and records each module's
 * style and each parameter's placements, before the parameters are materialized.
 *
 * Styles act on one mesh dim, the tensor-parallel one (tp_dim); the other mesh dims of an
 * activation keep their placements (the batch stays sharded over data parallel). The layout
 * an input arrives in is read from the tensor itself (what PyTorch's input_layouts declare),
 * so one style serves a replicated and a sequence-sharded input alike: a colwise linear
 * all_gathers a Shard(1) input and takes a Replicate one as it is.
 *
 *   style               parameters over tp     input over tp   output over tp
 *   colwise (linear)    weight S(0), bias S(0) Replicate       Shard(-1), or its output
 *   colwise (embedding) weight S(1)            Replicate       Shard(-1), or its output
 *   rowwise (linear)    weight S(1), bias R    Shard(-1)       Replicate, or its output
 *   rowwise (embedding) weight S(0)            Replicate       Replicate, or its output
 *   sequence parallel   weight R (a norm)      Shard(1)        Shard(1)
 *   prepare input       -                      its input       -
 *   prepare output      -                      -               its output
 * A rowwise output of Shard(1) is sequence parallelism (the Partial sum reduce_scattered over
 * the sequence instead of all_reduced). Loss parallel is colwise on the vocabulary projection
 * with its output kept Shard(-1): the logits are never gathered, and dt_cross_entropy reduces
 * them where they lie (two all_reduces of per-row statistics) unless its cost model finds one
 * all_to_all of the logits cheaper (small logits on many ranks).
 *
 * Data parallelism over dp_dim places every parameter: DT_DP_REPLICATE keeps it whole there
 * (DDP: its gradient is all_reduced once per backward by grad sync), DT_DP_SHARD stores it
 * Shard over dp (FSDP without prefetch: dt_params_use all_gathers it for each forward use,
 * backward reduce_scatters its gradient into the shard; the optimizer's state is sharded
 * alike). The dp shard dim is 0, or the first dim tp does not shard; a parameter tp shards on
 * every dim stays replicated over dp.
 *
 * Expert parallelism over ep_dim (with ep set) places the parameters of every
 * DT_MODULE_EXPERTS module Shard(0) there, each ep rank holding E / ep whole experts, and
 * Replicate over tp (a style cannot reach them); FSDP over dp shards them along dim 1. The
 * layer (dt_moe_experts) takes them so, its tokens sharded over ep; their gradients arrive
 * Partial over the other mesh dims that shard the tokens, and grad sync reduces them there.
 * Other parameters take no placement from ep: a batch sharded over ep makes their gradients
 * Partial there, reduced like data parallel's. */
#ifndef DTENSOR_PARALLEL_H
#define DTENSOR_PARALLEL_H

#include "dtensor/async_tp.h"
#include "dtensor/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_style_kind {
    DT_STYLE_COLWISE = 1,
    DT_STYLE_ROWWISE,
    DT_STYLE_SEQUENCE_PARALLEL,
    DT_STYLE_PREPARE_INPUT,
    DT_STYLE_PREPARE_OUTPUT,
} dt_style_kind;

/* A style: its kind and, where set, the input / output layout over tp (a Shard dim may be
 * negative, counted from the tensor's end). Make them with the constructors below. */
typedef struct dt_style {
    dt_style_kind kind;
    int has_input, has_output;
    dt_placement input, output;
} dt_style;

static inline dt_style dt_style_colwise(void) {
    dt_style s = {DT_STYLE_COLWISE,
                  1,
                  0,
                  {DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM, 0},
                  {DT_PLACEMENT_SHARD, -1, DT_REDUCE_SUM, 0}};
    return s;
}
/* Colwise whose output is redistributed to output (Replicate: gathered). */
static inline dt_style dt_style_colwise_to(dt_placement output) {
    dt_style s = dt_style_colwise();
    s.has_output = 1, s.output = output;
    return s;
}
static inline dt_style dt_style_rowwise(void) {
    dt_style s = {DT_STYLE_ROWWISE,
                  1,
                  1,
                  {DT_PLACEMENT_SHARD, -1, DT_REDUCE_SUM, 0},
                  {DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM, 0}};
    return s;
}
/* Rowwise whose Partial output goes to output: Shard(1) for sequence parallelism. */
static inline dt_style dt_style_rowwise_to(dt_placement output) {
    dt_style s = dt_style_rowwise();
    s.output = output;
    return s;
}
static inline dt_style dt_style_sequence_parallel(void) {
    dt_style s = {DT_STYLE_SEQUENCE_PARALLEL,
                  1,
                  1,
                  {DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM, 0},
                  {DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM, 0}};
    return s;
}
static inline dt_style dt_style_prepare_input(dt_placement input) {
    dt_style s = {
        DT_STYLE_PREPARE_INPUT, 1, 0, input, {DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM, 0}};
    return s;
}
static inline dt_style dt_style_prepare_output(dt_placement output) {
    dt_style s = {
        DT_STYLE_PREPARE_OUTPUT, 0, 1, {DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM, 0}, output};
    return s;
}
/* The vocabulary projection of loss parallel: colwise, output kept Shard(-1). */
static inline dt_style dt_style_loss_parallel(void) {
    return dt_style_colwise_to(dt_shard(-1));
}

/* "colwise", "rowwise", ...; "?" for an unknown kind. */
DT_API const char *dt_style_name(dt_style_kind kind);

/* One entry of a plan: modules whose name matches pattern get style. In a pattern '*' matches
 * one or more characters other than '.', so "layers.*.attention.wq" names the wq of every
 * block; other characters match themselves. */
typedef struct dt_style_rule {
    const char *pattern;
    dt_style style;
} dt_style_rule;

typedef enum dt_dp_mode {
    DT_DP_REPLICATE = 0, /* DDP */
    DT_DP_SHARD,         /* FSDP: Shard over dp, gathered at use */
} dt_dp_mode;

typedef struct dt_parallelize_options {
    int tp_dim;                /* mesh dim of tensor parallelism; -1: none (then no plan) */
    const dt_style_rule *plan; /* borrowed; nplan rules */
    int nplan;
    int dp_dim; /* mesh dim of data parallelism; -1: none */
    dt_dp_mode dp_mode;
    int ep; /* non-zero: expert parallelism over mesh dim ep_dim (0 leaves ep_dim unread, so
               zeroed options mean none) */
    int ep_dim;
    /* Async tensor parallelism (dtensor/async_tp.h; torchtitan's enable_async_tensor_parallel):
       DT_ASYNC_TP_RING or _ORDERED makes a colwise linear fed Shard(1) over tp run
       dt_all_gather_linear (attention's q, k, v and the MLP's w1, w3 sharing one gather) and
       a rowwise linear whose output goes to Shard(1) run dt_linear_reduce_scatter; bias-free
       linears on (B, T, in) f32/f64 CPU activations only, the others (CUDA tensors included)
       keep the synchronous form.
       DT_ASYNC_TP_OFF (0, zeroed options): redistribute, then dt_linear. */
    dt_async_tp_mode async_tp;
} dt_parallelize_options;

/* Applies options to a declared, not yet materialized registry. The plan is checked whole
 * before anything changes: DT_ERR_ARG naming the rule for a pattern that matches no module
 * (a misspelt name), a module two rules match, a style its module's kind cannot take (colwise
 * on a norm, sequence parallel on a linear, any but prepare styles on experts), a mesh dim out
 * of range, dp_dim == tp_dim, ep_dim equal to either, an unknown async_tp mode; and
 * for a registry already materialized or parallelized. Not collective. */
DT_API dt_status dt_parallelize(dt_params *params, const dt_parallelize_options *options);

/* The style a plan gave module (NULL: none). Borrowed. */
DT_API const dt_style *dt_module_style(dt_module module);

#ifdef __cplusplus
}
#endif
#endif
