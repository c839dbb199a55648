/* The op list: every built-in op described once. The name and family tables, each op's arity,
 * argument schema, kernel slot and backward rule (registry.c) and the generated typed wrappers
 * (api.c) come from it. Internal: users see the enum (its values fixed, each entry's ENUM is
 * DT_OP_<ENUM> in dtensor/ops.h) and the wrappers' declarations there. docs/ADDING_AN_OP.md
 * says how to add an op.
 *
 * X(ENUM, "name", family, min inputs, max inputs, kernel, arguments, wrapper, grad)
 *   family     the op_family in src/ops/ that infers, rules and computes it (dt_family_<x>)
 *   kernel     the dt_kernels slot (src/ops/kernels.h) it runs, none for composites and copies
 *   arguments  the dt_op_args fields it reads, as ARG_* bits (src/ops/op_impl.h): only those
 *              key the strategy cache, so equal calls share one entry
 *   wrapper    its typed wrapper, declared in dtensor/ops.h
 *   grad       its backward rule, dt_grad_<grad>, in its family's file: none for an op without
 *              a derivative (argmax), through for a composite (its constituent ops record the
 *              graph)
 *
 * The lists are grouped by wrapper form: each group's wrappers are declared and defined by one
 * macro; DT_OP_OTHER_LIST's are written by hand. */
#ifndef DT_OPS_OP_LIST_H
#define DT_OPS_OP_LIST_H

/* dt_status wrapper(dt_tensor *a, dt_tensor *b, dt_tensor **out) */
#define DT_OP_BINARY_LIST(X)                                                                       \
    X(ADD, "add", pointwise, 2, 2, binary, 0, dt_add, add)                                         \
    X(SUB, "sub", pointwise, 2, 2, binary, 0, dt_sub, sub)                                         \
    X(MUL, "mul", pointwise, 2, 2, binary, 0, dt_mul, mul)                                         \
    X(DIV, "div", pointwise, 2, 2, binary, 0, dt_div, div)                                         \
    X(MAXIMUM, "maximum", pointwise, 2, 2, binary, 0, dt_maximum, maximum)                         \
    X(MINIMUM, "minimum", pointwise, 2, 2, binary, 0, dt_minimum, minimum)                         \
    X(MM, "mm", matmul, 2, 2, matmul, ARG_TRANS, dt_mm, mm)                                        \
    X(BMM, "bmm", matmul, 2, 2, matmul, ARG_TRANS, dt_bmm, bmm)                                    \
    X(MATMUL, "matmul", matmul, 2, 2, matmul, ARG_TRANS, dt_matmul, matmul)                        \
    X(EMBEDDING, "embedding", embedding, 2, 2, embedding, 0, dt_embedding, embedding)              \
    X(PICK, "pick", pick, 2, 2, pick, 0, dt_pick, pick)

/* dt_status wrapper(dt_tensor *x, dt_tensor **out) */
#define DT_OP_UNARY_LIST(X)                                                                        \
    X(NEG, "neg", pointwise, 1, 1, unary, 0, dt_neg, neg)                                          \
    X(EXP, "exp", pointwise, 1, 1, unary, 0, dt_exp, exp)                                          \
    X(LOG, "log", pointwise, 1, 1, unary, 0, dt_log, log)                                          \
    X(SQRT, "sqrt", pointwise, 1, 1, unary, 0, dt_sqrt, sqrt)                                      \
    X(RSQRT, "rsqrt", pointwise, 1, 1, unary, 0, dt_rsqrt, rsqrt)                                  \
    X(ABS, "abs", pointwise, 1, 1, unary, 0, dt_abs, abs)                                          \
    X(RELU, "relu", pointwise, 1, 1, unary, 0, dt_relu, relu)                                      \
    X(GELU, "gelu", pointwise, 1, 1, unary, 0, dt_gelu, gelu)                                      \
    X(SILU, "silu", pointwise, 1, 1, unary, 0, dt_silu, silu)                                      \
    X(TANH, "tanh", pointwise, 1, 1, unary, 0, dt_tanh, tanh)                                      \
    X(SIGMOID, "sigmoid", pointwise, 1, 1, unary, 0, dt_sigmoid, sigmoid)                          \
    X(CONTIGUOUS, "contiguous", shape, 1, 1, none, 0, dt_contiguous, contiguous)

/* dt_status wrapper(dt_tensor *x, double s, dt_tensor **out) */
#define DT_OP_SCALAR_LIST(X)                                                                       \
    X(POW_SCALAR, "pow_scalar", pointwise, 1, 1, unary, ARG_SCALAR, dt_pow_scalar, pow_scalar)     \
    X(ADD_SCALAR, "add_scalar", pointwise, 1, 1, unary, ARG_SCALAR, dt_add_scalar, add_scalar)     \
    X(MUL_SCALAR, "mul_scalar", pointwise, 1, 1, unary, ARG_SCALAR, dt_mul_scalar, mul_scalar)

/* dt_status wrapper(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out):
 * ndims 0 reduces every dim. */
#define DT_OP_REDUCE_LIST(X)                                                                       \
    X(SUM, "sum", reduce, 1, 1, reduce, ARG_DIMS | ARG_KEEPDIM, dt_sum, sum)                       \
    X(MEAN, "mean", reduce, 1, 1, reduce, ARG_DIMS | ARG_KEEPDIM, dt_mean, mean)                   \
    X(AMAX, "amax", reduce, 1, 1, reduce, ARG_DIMS | ARG_KEEPDIM, dt_amax, amax)                   \
    X(AMIN, "amin", reduce, 1, 1, reduce, ARG_DIMS | ARG_KEEPDIM, dt_amin, amin)                   \
    X(MAX, "max", reduce, 1, 1, reduce, ARG_DIMS | ARG_KEEPDIM, dt_max, max)                       \
    X(MIN, "min", reduce, 1, 1, reduce, ARG_DIMS | ARG_KEEPDIM, dt_min, min)                       \
    X(VAR, "var", composite, 1, 1, none, ARG_DIMS | ARG_KEEPDIM | ARG_CORRECTION, dt_var, through) \
    X(STD, "std", composite, 1, 1, none, ARG_DIMS | ARG_KEEPDIM | ARG_CORRECTION, dt_std, through)

/* dt_status wrapper(dt_tensor *x, int dim, dt_tensor **out) */
#define DT_OP_DIM_LIST(X)                                                                          \
    X(SOFTMAX, "softmax", softmax, 1, 1, softmax, ARG_DIM, dt_softmax, softmax)                    \
    X(LOG_SOFTMAX, "log_softmax", softmax, 1, 1, softmax, ARG_DIM, dt_log_softmax, log_softmax)    \
    X(UNSQUEEZE, "unsqueeze", shape, 1, 1, none, ARG_DIM, dt_unsqueeze, unsqueeze)                 \
    X(SQUEEZE, "squeeze", shape, 1, 1, none, ARG_DIM, dt_squeeze, squeeze)

/* Wrappers written by hand in ops.h. */
#define DT_OP_OTHER_LIST(X)                                                                        \
    X(WHERE, "where", pointwise, 3, 3, where, 0, dt_where, where)                                  \
    X(ADDMM, "addmm", matmul, 3, 3, matmul, 0, dt_addmm, addmm)                                    \
    X(LINEAR, "linear", matmul, 2, 3, matmul, 0, dt_linear, linear)                                \
    X(ARGMAX, "argmax", reduce, 1, 1, arg_reduce, ARG_DIM | ARG_KEEPDIM, dt_argmax, none)          \
    X(ARGMIN, "argmin", reduce, 1, 1, arg_reduce, ARG_DIM | ARG_KEEPDIM, dt_argmin, none)          \
    X(LAYER_NORM, "layer_norm", norm, 1, 3, layer_norm, ARG_SCALAR | ARG_DIMS, dt_layer_norm,      \
      layer_norm)                                                                                  \
    X(RMS_NORM, "rms_norm", norm, 1, 2, layer_norm, ARG_SCALAR | ARG_DIMS, dt_rms_norm, rms_norm)  \
    X(CROSS_ENTROPY, "cross_entropy", composite, 2, 2, none,                                       \
      ARG_REDUCTION | ARG_IGNORE | ARG_LABEL_SMOOTHING, dt_cross_entropy, through)                 \
    X(SDPA, "scaled_dot_product_attention", attention, 3, 3, sdpa,                                 \
      ARG_SCALAR | ARG_CAUSAL | ARG_SEQ_FIRST, dt_sdpa, sdpa)                                      \
    X(TRANSPOSE, "transpose", shape, 1, 1, permute, ARG_DIM | ARG_DIM2, dt_transpose, transpose)   \
    X(PERMUTE, "permute", shape, 1, 1, permute, ARG_DIMS, dt_permute, permute)                     \
    X(VIEW, "view", shape, 1, 1, none, ARG_SHAPE, dt_view, view)                                   \
    X(SLICE, "slice", shape, 1, 1, slice, ARG_DIM | ARG_RANGE, dt_slice, slice)                    \
    X(EXPAND, "expand", shape, 1, 1, expand, ARG_SHAPE, dt_expand, expand)                         \
    X(CAT, "cat", cat, 1, 4, none, ARG_DIM, dt_cat, cat)

/* Copies and composites with hand-written wrappers: stack (cat along a new dim) and swiglu
 * (silu(gate) * up, two dispatched ops). */
#define DT_OP_COMPOSE_LIST(X)                                                                      \
    X(STACK, "stack", cat, 1, 4, none, ARG_DIM, dt_stack, stack)                                   \
    X(SWIGLU, "swiglu", composite, 2, 2, none, 0, dt_swiglu, through)

/* Model-code ops, wrappers written by hand in ops.h (src/ops/api_nn.c, api.c). */
#define DT_OP_NN_LIST(X)                                                                           \
    X(ROPE, "rope", rope, 3, 3, rope, 0, dt_rope, rope)                                            \
    X(DROPOUT, "dropout", dropout, 1, 1, dropout, ARG_SCALAR | ARG_SEED, dt_dropout, dropout)      \
    X(SDPA_BACKWARD, "scaled_dot_product_attention_backward", attention, 5, 5, sdpa_backward,      \
      ARG_SCALAR | ARG_CAUSAL | ARG_SEQ_FIRST, dt_sdpa_backward, none)

/* Indexing, selection and scans; wrappers written by hand in ops.h. topk is the indices only
 * (dt_topk gathers the values with them). */
#define DT_OP_INDEX_LIST(X)                                                                        \
    X(GATHER, "gather", gather, 2, 2, gather, ARG_DIM, dt_gather, gather)                          \
    X(ONE_HOT, "one_hot", gather, 1, 1, one_hot, ARG_K, dt_one_hot, none)                          \
    X(TOPK, "topk", gather, 1, 1, topk, ARG_K | ARG_DIM | ARG_SMALLEST, dt_topk, none)             \
    X(CUMSUM, "cumsum", scan, 1, 1, cumsum, ARG_DIM, dt_cumsum, cumsum)

/* Norms (hand-written wrappers): vector_norm's ord is args.scalar (inf allowed). */
#define DT_OP_NORM_LIST(X)                                                                         \
    X(VECTOR_NORM, "vector_norm", vector_norm, 1, 1, vector_norm,                                  \
      ARG_SCALAR | ARG_DIMS | ARG_KEEPDIM, dt_vector_norm, vector_norm)

/* Comparisons, 1 where a (op) b holds and 0 elsewhere in the inputs' dtype (NumPy
 * broadcasting; NaN compares false except under ne): masks for where and for backward rules.
 * No derivative. Wrappers of the binary form, generated as DT_OP_BINARY_LIST's. */
#define DT_OP_COMPARE_LIST(X)                                                                      \
    X(EQ, "eq", pointwise, 2, 2, binary, 0, dt_eq, none)                                           \
    X(NE, "ne", pointwise, 2, 2, binary, 0, dt_ne, none)                                           \
    X(GT, "gt", pointwise, 2, 2, binary, 0, dt_gt, none)                                           \
    X(GE, "ge", pointwise, 2, 2, binary, 0, dt_ge, none)                                           \
    X(LT, "lt", pointwise, 2, 2, binary, 0, dt_lt, none)                                           \
    X(LE, "le", pointwise, 2, 2, binary, 0, dt_le, none)

/* sign(x): -1, 0 or 1 in x's dtype (NaN for NaN); its gradient is zero, as torch's. Wrapper of
 * the unary form, generated as DT_OP_UNARY_LIST's. */
#define DT_OP_SIGN_LIST(X) X(SIGN, "sign", pointwise, 1, 1, unary, 0, dt_sign, sign)

/* Scatter (hand-written wrappers): the adjoint of gather, the gradient of gather, embedding. */
#define DT_OP_SCATTER_LIST(X)                                                                      \
    X(SCATTER_ADD, "scatter_add", scatter, 2, 2, scatter_add, ARG_DIM | ARG_SHAPE, dt_scatter_add, \
      scatter_add)

/* Fused kernels (hand-written wrappers, src/ops/fused.c): swiglu runs silu_mul when gate and
 * up have one shape, cross_entropy runs log_softmax_pick when the class dim is whole. Each
 * forward's backward rule is its _backward op, one kernel pass with no intermediates.
 * rms_norm_residual (x + residual and its RMS norm in one pass; eps is args.scalar) records as
 * add and rms_norm nodes (its family's record_as), so both outputs get gradients.
 * layer_norm_backward and rms_norm_backward (src/ops/norm_backward.c) are the norms' backward
 * rules in one pass each: gx, and the weight's (and bias's) gradients as other outputs. */
#define DT_OP_FUSED_LIST(X)                                                                        \
    X(SILU_MUL, "silu_mul", fused, 2, 2, silu_mul, 0, dt_silu_mul, silu_mul)                       \
    X(SILU_MUL_BACKWARD, "silu_mul_backward", fused, 3, 3, silu_mul_backward, 0,                   \
      dt_silu_mul_backward, none)                                                                  \
    X(LOG_SOFTMAX_PICK, "log_softmax_pick", fused, 2, 2, log_softmax_pick, 0,                      \
      dt_log_softmax_pick, log_softmax_pick)                                                       \
    X(LOG_SOFTMAX_PICK_BACKWARD, "log_softmax_pick_backward", fused, 4, 4,                         \
      log_softmax_pick_backward, 0, dt_log_softmax_pick_backward, none)                          \
    X(RMS_NORM_RESIDUAL, "rms_norm_residual", fused, 3, 3, rms_norm_residual, ARG_SCALAR,          \
      dt_rms_norm_residual, through)                                                               \
    X(LAYER_NORM_BACKWARD, "layer_norm_backward", norm_backward, 3, 3, layer_norm_backward,        \
      ARG_SCALAR | ARG_DIMS, dt_layer_norm_backward, none)                                         \
    X(RMS_NORM_BACKWARD, "rms_norm_backward", norm_backward, 3, 3, layer_norm_backward,            \
      ARG_SCALAR | ARG_DIMS, dt_rms_norm_backward, none)

#define DT_OP_LIST(X)                                                                              \
    DT_OP_BINARY_LIST(X)                                                                           \
    DT_OP_UNARY_LIST(X) DT_OP_SCALAR_LIST(X) DT_OP_REDUCE_LIST(X) DT_OP_DIM_LIST(X)                \
        DT_OP_OTHER_LIST(X) DT_OP_COMPOSE_LIST(X) DT_OP_NN_LIST(X) DT_OP_INDEX_LIST(X)             \
            DT_OP_NORM_LIST(X) DT_OP_COMPARE_LIST(X) DT_OP_SIGN_LIST(X) DT_OP_SCATTER_LIST(X)    \
                DT_OP_FUSED_LIST(X)

#endif
