/* The op table: every op's name and family, in one place. */
#include "core/check.h"
#include "ops/op_impl.h"

static const char *const names[] = {
#define NAME(e, name) [DT_OP_##e] = name,
    DT_OP_LIST(NAME)
#undef NAME
};
_Static_assert(sizeof names / sizeof names[0] == DT_OP_COUNT, "op name table incomplete");

static const op_family *const families[] = {
    [DT_OP_ADD] = &dt_family_pointwise,     [DT_OP_SUB] = &dt_family_pointwise,
    [DT_OP_MUL] = &dt_family_pointwise,     [DT_OP_DIV] = &dt_family_pointwise,
    [DT_OP_MAXIMUM] = &dt_family_pointwise, [DT_OP_MINIMUM] = &dt_family_pointwise,
    [DT_OP_WHERE] = &dt_family_pointwise,   [DT_OP_NEG] = &dt_family_pointwise,
    [DT_OP_EXP] = &dt_family_pointwise,     [DT_OP_LOG] = &dt_family_pointwise,
    [DT_OP_SQRT] = &dt_family_pointwise,    [DT_OP_RSQRT] = &dt_family_pointwise,
    [DT_OP_ABS] = &dt_family_pointwise,     [DT_OP_RELU] = &dt_family_pointwise,
    [DT_OP_GELU] = &dt_family_pointwise,    [DT_OP_SILU] = &dt_family_pointwise,
    [DT_OP_TANH] = &dt_family_pointwise,    [DT_OP_SIGMOID] = &dt_family_pointwise,
    [DT_OP_POW_SCALAR] = &dt_family_pointwise, [DT_OP_ADD_SCALAR] = &dt_family_pointwise,
    [DT_OP_MUL_SCALAR] = &dt_family_pointwise,
    [DT_OP_MM] = &dt_family_matmul,         [DT_OP_BMM] = &dt_family_matmul,
    [DT_OP_MATMUL] = &dt_family_matmul,     [DT_OP_ADDMM] = &dt_family_matmul,
    [DT_OP_LINEAR] = &dt_family_matmul,
    [DT_OP_SUM] = &dt_family_reduce,        [DT_OP_MEAN] = &dt_family_reduce,
    [DT_OP_AMAX] = &dt_family_reduce,       [DT_OP_AMIN] = &dt_family_reduce,
    [DT_OP_MAX] = &dt_family_reduce,        [DT_OP_MIN] = &dt_family_reduce,
    [DT_OP_ARGMAX] = &dt_family_reduce,     [DT_OP_ARGMIN] = &dt_family_reduce,
    [DT_OP_VAR] = &dt_family_composite,     [DT_OP_STD] = &dt_family_composite,
    [DT_OP_SOFTMAX] = &dt_family_softmax,   [DT_OP_LOG_SOFTMAX] = &dt_family_softmax,
    [DT_OP_LAYER_NORM] = &dt_family_norm,   [DT_OP_RMS_NORM] = &dt_family_norm,
    [DT_OP_EMBEDDING] = &dt_family_embedding, [DT_OP_PICK] = &dt_family_pick,
    [DT_OP_CROSS_ENTROPY] = &dt_family_composite, [DT_OP_SDPA] = &dt_family_attention,
    [DT_OP_TRANSPOSE] = &dt_family_shape,   [DT_OP_PERMUTE] = &dt_family_shape,
    [DT_OP_VIEW] = &dt_family_shape,        [DT_OP_SLICE] = &dt_family_shape,
    [DT_OP_UNSQUEEZE] = &dt_family_shape,   [DT_OP_SQUEEZE] = &dt_family_shape,
    [DT_OP_CONTIGUOUS] = &dt_family_shape, [DT_OP_EXPAND] = &dt_family_shape,
    [DT_OP_CAT] = &dt_family_cat,
};
_Static_assert(sizeof families / sizeof families[0] == DT_OP_COUNT, "op family table incomplete");

const char *dt_op_name(dt_op op) {
    if ((unsigned)op < DT_OP_COUNT) return names[op];
    const char *user = dt_user_op_name(op);
    return user ? user : "?";
}

const op_family *dt_op_family(dt_op op) {
    if ((unsigned)op < DT_OP_COUNT) return families[op];
    return dt_user_op_name(op) ? &dt_family_user : NULL;
}
