/* The op cases and the body that runs one (see op_cases.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op_cases.h"

#define F DT_F32
#define A(...) ((dt_op_args){__VA_ARGS__})
const op_case op_cases[] = {
    {"add broadcast", DT_OP_ADD, A(0), 2, {2, 1}, {{7, 6}, {6}}, {F, F}},
    {"sub", DT_OP_SUB, A(0), 2, {2, 2}, {{5, 3}, {5, 3}}, {F, F}},
    {"mul bcast rows", DT_OP_MUL, A(0), 2, {2, 2}, {{6, 5}, {6, 1}}, {F, F}},
    {"div", DT_OP_DIV, A(0), 2, {2, 2}, {{4, 6}, {4, 6}}, {F, F}, 1},
    {"maximum", DT_OP_MAXIMUM, A(0), 2, {3, 3}, {{2, 3, 5}, {2, 3, 5}}, {F, F}},
    {"minimum i32", DT_OP_MINIMUM, A(0), 2, {2, 2}, {{5, 4}, {5, 4}}, {DT_I32, DT_I32}},
    {"add i64", DT_OP_ADD, A(0), 2, {1, 1}, {{9}, {9}}, {DT_I64, DT_I64}},
    {"exp", DT_OP_EXP, A(0), 1, {2}, {{5, 7}}, {F}},
    {"log", DT_OP_LOG, A(0), 1, {2}, {{6, 3}}, {F}, 1},
    {"sqrt", DT_OP_SQRT, A(0), 1, {2}, {{7, 3}}, {F}, 1},
    {"abs f64", DT_OP_ABS, A(0), 1, {2}, {{5, 6}}, {DT_F64}},
    {"rsqrt", DT_OP_RSQRT, A(0), 1, {1}, {{11}}, {F}, 1},
    {"gelu", DT_OP_GELU, A(0), 1, {3}, {{2, 5, 3}}, {F}},
    {"silu bf16", DT_OP_SILU, A(0), 1, {2}, {{6, 4}}, {DT_BF16}},
    {"tanh f64", DT_OP_TANH, A(0), 1, {2}, {{3, 5}}, {DT_F64}},
    {"sigmoid", DT_OP_SIGMOID, A(0), 1, {2}, {{4, 4}}, {F}},
    {"relu", DT_OP_RELU, A(0), 1, {2}, {{3, 12}}, {F}},
    {"neg", DT_OP_NEG, A(0), 1, {2}, {{5, 5}}, {F}},
    {"pow", DT_OP_POW_SCALAR, A(.scalar = 2), 1, {2}, {{5, 3}}, {F}, 1},
    {"mul_scalar", DT_OP_MUL_SCALAR, A(.scalar = -1.5), 1, {2}, {{7, 2}}, {F}},
    {"add_scalar", DT_OP_ADD_SCALAR, A(.scalar = 3), 1, {2}, {{4, 5}}, {F}},
    {"mm", DT_OP_MM, A(0), 2, {2, 2}, {{12, 8}, {8, 10}}, {F, F}},
    {"mm uneven", DT_OP_MM, A(0), 2, {2, 2}, {{5, 7}, {7, 3}}, {F, F}},
    {"mm bf16", DT_OP_MM, A(0), 2, {2, 2}, {{6, 4}, {4, 6}}, {DT_BF16, DT_BF16}},
    {"bmm", DT_OP_BMM, A(0), 2, {3, 3}, {{4, 6, 5}, {4, 5, 3}}, {F, F}},
    {"matmul bcast", DT_OP_MATMUL, A(0), 2, {3, 2}, {{3, 5, 4}, {4, 6}}, {F, F}},
    {"addmm", DT_OP_ADDMM, A(0), 3, {1, 2, 2}, {{4}, {12, 8}, {8, 4}}, {F, F, F}},
    {"linear", DT_OP_LINEAR, A(0), 3, {3, 2, 1}, {{2, 5, 8}, {6, 8}, {6}}, {F, F, F}},
    {"sum dim", DT_OP_SUM, A(.ndims = 1, .dims = {1}), 1, {3}, {{4, 6, 3}}, {F}},
    {"sum all i64", DT_OP_SUM, A(0), 1, {2}, {{7, 5}}, {DT_I64}},
    {"mean keepdim", DT_OP_MEAN, A(.ndims = 1, .dims = {0}, .keepdim = 1), 1, {2}, {{12, 5}}, {F}},
    {"mean uneven", DT_OP_MEAN, A(.ndims = 1, .dims = {0}), 1, {2}, {{13, 8}}, {F}},
    {"amax", DT_OP_AMAX, A(.ndims = 2, .dims = {0, 2}), 1, {3}, {{6, 4, 5}}, {F}},
    {"amin", DT_OP_AMIN, A(.ndims = 1, .dims = {-1}), 1, {2}, {{5, 9}}, {F}},
    {"max all", DT_OP_MAX, A(0), 1, {2}, {{5, 7}}, {F}},
    {"min dim i32", DT_OP_MIN, A(.ndims = 1, .dims = {0}), 1, {2}, {{9, 3}}, {DT_I32}},
    {"argmax", DT_OP_ARGMAX, A(.dim = 1), 1, {2}, {{6, 7}}, {F}},
    {"argmin", DT_OP_ARGMIN, A(.dim = 0, .keepdim = 1), 1, {2}, {{9, 4}}, {F}},
    {"var", DT_OP_VAR, A(.ndims = 1, .dims = {0}, .correction = 1), 1, {2}, {{9, 4}}, {F}},
    {"std", DT_OP_STD, A(.ndims = 1, .dims = {1}, .correction = 0), 1, {2}, {{4, 7}}, {F}},
    {"softmax", DT_OP_SOFTMAX, A(.dim = -1), 1, {3}, {{2, 3, 7}}, {F}},
    {"log_softmax", DT_OP_LOG_SOFTMAX, A(.dim = 0), 1, {2}, {{6, 5}}, {F}},
    {"layer_norm", DT_OP_LAYER_NORM, A(0), 3, {3, 1, 1}, {{4, 3, 8}, {8}, {8}}, {F, F, F}},
    {"rms_norm", DT_OP_RMS_NORM, A(0), 2, {2, 1}, {{5, 6}, {6}}, {F, F}},
    {"embedding", DT_OP_EMBEDDING, A(0), 2, {2, 2}, {{11, 6}, {3, 5}}, {F, DT_I64}, 0, 11},
    {"pick", DT_OP_PICK, A(0), 2, {2, 1}, {{6, 9}, {6}}, {F, DT_I64}, 0, 9},
    {"cross_entropy", DT_OP_CROSS_ENTROPY, A(.reduction = DT_REDUCTION_MEAN), 2, {2, 1}, {{8, 10}, {8}},
     {F, DT_I64}, 0, 10},
    {"cross_entropy none", DT_OP_CROSS_ENTROPY, A(0), 2, {3, 2}, {{4, 7, 3}, {4, 3}},
     {F, DT_I32}, 0, 7},
    {"sdpa causal", DT_OP_SDPA, A(.causal = 1), 3, {4, 4, 4}, {{2, 4, 5, 8}, {2, 4, 5, 8},
     {2, 4, 5, 8}}, {F, F, F}},
    {"transpose", DT_OP_TRANSPOSE, A(.dim = 0, .dim2 = 2), 1, {3}, {{3, 4, 5}}, {F}},
    {"permute", DT_OP_PERMUTE, A(.ndims = 3, .dims = {2, 0, 1}), 1, {3}, {{4, 3, 6}}, {F}},
    {"view merge", DT_OP_VIEW, A(.shape_ndim = 1, .shape = {48}), 1, {2}, {{8, 6}}, {F}},
    {"view split", DT_OP_VIEW, A(.shape_ndim = 3, .shape = {2, -1, 6}), 1, {2}, {{8, 6}}, {F}},
    {"slice", DT_OP_SLICE, A(.dim = 1, .start = 3, .end = 7), 1, {2}, {{5, 9}}, {F}},
    {"unsqueeze", DT_OP_UNSQUEEZE, A(.dim = 1), 1, {2}, {{6, 4}}, {F}},
    {"squeeze", DT_OP_SQUEEZE, A(.dim = 1), 1, {3}, {{6, 1, 4}}, {F}},
    {"contiguous", DT_OP_CONTIGUOUS, A(0), 1, {3}, {{3, 5, 2}}, {F}},
    {"expand", DT_OP_EXPAND, A(.shape_ndim = 3, .shape = {3, 5, 4}), 1, {2}, {{5, 1}}, {F}},
    {"cat", DT_OP_CAT, A(.dim = 1), 2, {2, 2}, {{4, 3}, {4, 5}}, {F, F}},
    {"cat three", DT_OP_CAT, A(.dim = 0), 3, {2, 2, 2}, {{2, 3}, {1, 3}, {3, 3}}, {F, F, F}},
    {"stack", DT_OP_STACK, A(.dim = 1), 2, {2, 2}, {{5, 3}, {5, 3}}, {F, F}},
    {"stack three last", DT_OP_STACK, A(.dim = -1), 3, {2, 2, 2}, {{3, 5}, {3, 5}, {3, 5}},
     {F, F, F}},
    {"swiglu", DT_OP_SWIGLU, A(0), 2, {2, 2}, {{5, 6}, {5, 6}}, {F, F}},
    {"cross_entropy sum smoothed", DT_OP_CROSS_ENTROPY,
     A(.reduction = DT_REDUCTION_SUM, .label_smoothing = 0.1), 2, {2, 1}, {{7, 6}, {7}},
     {F, DT_I64}, 0, 6},
    {"cross_entropy mean smoothed", DT_OP_CROSS_ENTROPY,
     A(.reduction = DT_REDUCTION_MEAN, .label_smoothing = 0.3), 2, {3, 2}, {{3, 5, 2}, {3, 2}},
     {F, DT_I32}, 0, 5},
    {"where", DT_OP_WHERE, A(0), 3, {2, 2, 1}, {{5, 6}, {5, 6}, {6}}, {DT_I32, F, F}, 0, 2},
    /* model-code ops: rope (x (B, T, H, D), cos/sin (T, D/2)), grouped-query attention
     * (Hq 8 over Hkv 2, 6 over 3), layer_norm over the last 2 dims, dropout */
    {"rope", DT_OP_ROPE, A(0), 3, {4, 2, 2}, {{3, 5, 3, 4}, {5, 2}, {5, 2}}, {F, F, F}},
    {"rope f64", DT_OP_ROPE, A(0), 3, {4, 2, 2}, {{2, 7, 2, 6}, {7, 3}, {7, 3}},
     {DT_F64, DT_F64, DT_F64}},
    {"sdpa gqa 8/2", DT_OP_SDPA, A(.causal = 1), 3, {4, 4, 4}, {{2, 8, 5, 4}, {2, 2, 5, 4},
     {2, 2, 5, 4}}, {F, F, F}},
    {"sdpa gqa 6/3", DT_OP_SDPA, A(0), 3, {4, 4, 4}, {{3, 6, 4, 4}, {3, 3, 4, 4}, {3, 3, 4, 4}},
     {F, F, F}},
    {"layer_norm last=2", DT_OP_LAYER_NORM, A(.ndims = 2), 3, {3, 2, 2}, {{5, 3, 4}, {3, 4},
     {3, 4}}, {F, F, F}},
    {"rms_norm last 2 from weight", DT_OP_RMS_NORM, A(0), 2, {3, 2}, {{3, 4, 3}, {4, 3}}, {F, F}},
    /* the norms without weight and bias, and layer_norm with a weight but no bias */
    {"layer_norm plain", DT_OP_LAYER_NORM, A(0), 1, {2}, {{6, 5}}, {F}},
    {"layer_norm weight only", DT_OP_LAYER_NORM, A(0), 2, {3, 1}, {{3, 4, 6}, {6}}, {F, F}},
    {"rms_norm plain last=2", DT_OP_RMS_NORM, A(.ndims = 2), 1, {3}, {{3, 4, 5}}, {F}},
    {"sdpa scaled Tq<Tk Dv<D", DT_OP_SDPA, A(.causal = 1, .scalar = 0.3), 3, {4, 4, 4},
     {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}}, {F, F, F}},
    /* attention's backward: q, k, v, grad_out, lse (f32 rows; bf16 inputs keep f32 rows) */
    {"sdpa_backward gqa causal", DT_OP_SDPA_BACKWARD, A(.causal = 1), 5, {4, 4, 4, 4, 3},
     {{2, 8, 5, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, {2, 8, 5, 4}, {2, 8, 5}}, {F, F, F, F, F}},
    {"sdpa_backward scaled Tq<Tk", DT_OP_SDPA_BACKWARD, A(.causal = 1, .scalar = 0.3), 5,
     {4, 4, 4, 4, 3}, {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, {2, 2, 3, 3}, {2, 2, 3}},
     {F, F, F, F, F}},
    {"sdpa_backward bf16", DT_OP_SDPA_BACKWARD, A(0), 5, {3, 3, 3, 3, 2},
     {{3, 4, 4}, {3, 6, 4}, {3, 6, 4}, {3, 4, 4}, {3, 4}},
     {DT_BF16, DT_BF16, DT_BF16, DT_BF16, F}},
    {"dropout", DT_OP_DROPOUT, A(.scalar = 0.3, .seed = 7, .offset = 3), 1, {2}, {{7, 5}}, {F}},
    {"dropout 3-D bf16", DT_OP_DROPOUT, A(.scalar = 0.5, .seed = 99), 1, {3}, {{3, 5, 2}},
     {DT_BF16}},
    /* gather: index rows equal to x's on dim 0 (sharded alike), fewer on dim 2 */
    {"gather", DT_OP_GATHER, A(.dim = 1), 2, {3, 3}, {{5, 7, 6}, {5, 3, 4}}, {F, DT_I64}, 0, 7},
    {"gather i32 index", DT_OP_GATHER, A(.dim = 0), 2, {2, 2}, {{9, 5}, {6, 5}}, {F, DT_I32}, 0, 9},
    /* scatter_add: src spans out on dim 0 (sharded alike), not on dim 2; gather's adjoint */
    {"scatter_add", DT_OP_SCATTER_ADD, A(.dim = 1, .shape = {5, 7, 6}, .shape_ndim = 3), 2,
     {3, 3}, {{5, 3, 4}, {5, 3, 4}}, {F, DT_I64}, 0, 7},
    {"scatter_add index bcast", DT_OP_SCATTER_ADD, A(.dim = 0, .shape = {9, 5}, .shape_ndim = 2),
     2, {2, 2}, {{12, 5}, {12, 1}}, {F, DT_I64}, 0, 9},
    {"scatter_add rows i32", DT_OP_SCATTER_ADD, A(.dim = 0, .shape = {9, 5}, .shape_ndim = 2), 2,
     {2, 2}, {{12, 5}, {12, 5}}, {F, DT_I32}, 0, 9},
    {"one_hot", DT_OP_ONE_HOT, A(.k = 7), 1, {2}, {{5, 3}}, {DT_I64}, 0, 7},
    {"topk", DT_OP_TOPK, A(.k = 3, .dim = 1), 1, {3}, {{5, 7, 3}}, {F}},
    {"topk smallest i32", DT_OP_TOPK, A(.k = 2, .dim = 0, .smallest = 1), 1, {2}, {{9, 5}},
     {DT_I32}},
    {"cumsum", DT_OP_CUMSUM, A(.dim = 1), 1, {3}, {{5, 6, 3}}, {F}},
    {"cumsum i64", DT_OP_CUMSUM, A(.dim = 0), 1, {2}, {{7, 5}}, {DT_I64}},
    {"vector_norm 2", DT_OP_VECTOR_NORM, A(.scalar = 2), 1, {2}, {{7, 6}}, {F}},
    {"vector_norm inf dim", DT_OP_VECTOR_NORM, A(.scalar = INFINITY, .ndims = 1, .dims = {1}), 1,
     {3}, {{3, 9, 4}}, {F}},
    {"vector_norm 1 keepdim", DT_OP_VECTOR_NORM, A(.scalar = 1, .ndims = 1, .dims = {0},
     .keepdim = 1), 1, {2}, {{10, 3}}, {F}},
    {"vector_norm 3 f64", DT_OP_VECTOR_NORM, A(.scalar = 3, .ndims = 2, .dims = {0, 2}), 1, {3},
     {{5, 2, 6}}, {DT_F64}},
    {"vector_norm -inf", DT_OP_VECTOR_NORM, A(.scalar = -INFINITY, .ndims = 1, .dims = {-1}), 1,
     {2}, {{4, 9}}, {F}},
    {"vector_norm 0", DT_OP_VECTOR_NORM, A(.scalar = 0), 1, {2}, {{6, 5}}, {F}},
    /* fused: silu_mul (SwiGLU), log_softmax_pick (cross entropy) and their backward ops */
    {"silu_mul", DT_OP_SILU_MUL, A(0), 2, {2, 2}, {{5, 6}, {5, 6}}, {F, F}},
    {"silu_mul bf16 3-D", DT_OP_SILU_MUL, A(0), 2, {3, 3}, {{3, 5, 2}, {3, 5, 2}},
     {DT_BF16, DT_BF16}},
    {"silu_mul_backward", DT_OP_SILU_MUL_BACKWARD, A(0), 3, {2, 2, 2}, {{5, 6}, {5, 6}, {5, 6}},
     {F, F, F}},
    {"log_softmax_pick", DT_OP_LOG_SOFTMAX_PICK, A(0), 2, {2, 1}, {{8, 10}, {8}}, {F, DT_I64}, 0,
     10},
    {"log_softmax_pick 3-D i32", DT_OP_LOG_SOFTMAX_PICK, A(0), 2, {3, 2}, {{4, 7, 3}, {4, 3}},
     {F, DT_I32}, 0, 7},
    {"log_softmax_pick_backward", DT_OP_LOG_SOFTMAX_PICK_BACKWARD, A(0), 4, {2, 1, 2, 1},
     {{6, 9}, {6}, {6, 2}, {6}}, {F, DT_I64, F, F}, 0, 9},
    /* the norms' fused backward: x, weight, grad; gw (and gb) are other outputs */
    {"rms_norm_backward", DT_OP_RMS_NORM_BACKWARD, A(.scalar = 1e-5), 3, {3, 1, 3},
     {{4, 3, 8}, {8}, {4, 3, 8}}, {F, F, F}},
    {"layer_norm_backward last=2", DT_OP_LAYER_NORM_BACKWARD, A(.ndims = 2), 3, {3, 2, 3},
     {{5, 3, 4}, {3, 4}, {5, 3, 4}}, {F, F, F}},
    {"rms_norm_residual", DT_OP_RMS_NORM_RESIDUAL, A(.scalar = 1e-5), 3, {2, 2, 1},
     {{5, 6}, {5, 6}, {6}}, {F, F, F}},
    {"rms_norm_residual 3-D bf16", DT_OP_RMS_NORM_RESIDUAL, A(0), 3, {3, 3, 1},
     {{3, 4, 8}, {3, 4, 8}, {8}}, {DT_BF16, DT_BF16, DT_BF16}},
    {"vector_norm 0.5 bf16", DT_OP_VECTOR_NORM, A(.scalar = 0.5, .ndims = 1, .dims = {0}), 1,
     {2}, {{8, 3}}, {DT_BF16}},
    /* more shapes for the matmul and shape ops' gradients: broadcast batch dims on either
     * side, a bias broadcast along rows, negative dims, slices touching either end */
    {"bmm batch bcast", DT_OP_BMM, A(0), 2, {3, 3}, {{1, 4, 3}, {5, 3, 2}}, {F, F}},
    {"matmul both batch", DT_OP_MATMUL, A(0), 2, {4, 3}, {{2, 1, 4, 3}, {3, 3, 5}}, {F, F}},
    {"matmul 2-D @ 3-D", DT_OP_MATMUL, A(0), 2, {2, 3}, {{4, 6}, {3, 6, 5}}, {F, F}},
    {"addmm column bias", DT_OP_ADDMM, A(0), 3, {2, 2, 2}, {{5, 1}, {5, 7}, {7, 3}}, {F, F, F}},
    /* operands given transposed (the backward's g^T x, g w^T): read in place, sharded dims
     * moved with the swap */
    {"mm trans_a", DT_OP_MM, A(.trans_a = 1), 2, {2, 2}, {{8, 12}, {8, 10}}, {F, F}},
    {"mm trans_b uneven", DT_OP_MM, A(.trans_b = 1), 2, {2, 2}, {{5, 7}, {3, 7}}, {F, F}},
    {"mm trans_a trans_b", DT_OP_MM, A(.trans_a = 1, .trans_b = 1), 2, {2, 2}, {{7, 5}, {3, 7}},
     {F, F}},
    {"mm trans_a bf16", DT_OP_MM, A(.trans_a = 1), 2, {2, 2}, {{4, 6}, {4, 6}},
     {DT_BF16, DT_BF16}},
    {"bmm trans_a", DT_OP_BMM, A(.trans_a = 1), 2, {3, 3}, {{4, 5, 6}, {4, 5, 3}}, {F, F}},
    {"matmul bcast trans_a", DT_OP_MATMUL, A(.trans_a = 1), 2, {3, 2}, {{3, 4, 5}, {4, 6}},
     {F, F}},
    {"matmul both batch trans_b", DT_OP_MATMUL, A(.trans_b = 1), 2, {4, 3},
     {{2, 1, 4, 3}, {3, 5, 3}}, {F, F}},
    {"permute 4-D", DT_OP_PERMUTE, A(.ndims = 4, .dims = {3, 1, -4, 2}), 1, {4}, {{2, 3, 4, 5}},
     {F}},
    {"slice head", DT_OP_SLICE, A(.dim = 0, .start = 0, .end = 5), 1, {2}, {{9, 3}}, {F}},
    {"slice tail last dim", DT_OP_SLICE, A(.dim = -1, .start = 2, .end = 7), 1, {3},
     {{3, 2, 7}}, {F}},
    {"unsqueeze last", DT_OP_UNSQUEEZE, A(.dim = -1), 1, {2}, {{3, 5}}, {F}},
    {"squeeze last", DT_OP_SQUEEZE, A(.dim = -1), 1, {3}, {{4, 5, 1}}, {F}},
    {"expand middle", DT_OP_EXPAND, A(.shape_ndim = 3, .shape = {4, 3, 6}), 1, {3}, {{4, 1, 6}},
     {F}},
    {"expand new dims -1", DT_OP_EXPAND, A(.shape_ndim = 3, .shape = {2, -1, 5}), 1, {2},
     {{3, 1}}, {F}},
    {"cat last", DT_OP_CAT, A(.dim = -1), 2, {3, 3}, {{3, 2, 4}, {3, 2, 1}}, {F, F}},
    {"stack first", DT_OP_STACK, A(.dim = 0), 2, {2, 2}, {{4, 3}, {4, 3}}, {F, F}},
    {"transpose 2-D", DT_OP_TRANSPOSE, A(.dim = 0, .dim2 = 1), 1, {2}, {{7, 5}}, {F}},
    {"transpose negative", DT_OP_TRANSPOSE, A(.dim = -1, .dim2 = -3), 1, {4}, {{2, 3, 4, 5}},
     {F}},
    {"view 3-D to 2-D", DT_OP_VIEW, A(.shape_ndim = 2, .shape = {12, 5}), 1, {3}, {{4, 3, 5}},
     {F}},
    {"view 1-D to 3-D", DT_OP_VIEW, A(.shape_ndim = 3, .shape = {2, 3, 4}), 1, {1}, {{24}}, {F}},
    {"view regroup", DT_OP_VIEW, A(.shape_ndim = 3, .shape = {6, 2, 4}), 1, {4}, {{2, 3, 4, 2}},
     {F}},
    /* comparisons and sign; where with a float condition; more shapes for the rules of the
     * pointwise and reduction ops (continuous data: no ties for maximum/minimum or amax) */
    {"eq i32 ties", DT_OP_EQ, A(0), 2, {2, 1}, {{7, 5}, {5}}, {DT_I32, DT_I32}, 0, 3},
    {"ne", DT_OP_NE, A(0), 2, {2, 2}, {{6, 5}, {6, 5}}, {F, F}},
    {"gt bcast", DT_OP_GT, A(0), 2, {2, 2}, {{7, 4}, {7, 1}}, {F, F}},
    {"ge bf16", DT_OP_GE, A(0), 2, {3, 1}, {{3, 5, 4}, {4}}, {DT_BF16, DT_BF16}},
    {"lt f64", DT_OP_LT, A(0), 2, {1, 2}, {{6}, {5, 6}}, {DT_F64, DT_F64}},
    {"le i64 ties", DT_OP_LE, A(0), 2, {2, 2}, {{9, 3}, {9, 3}}, {DT_I64, DT_I64}, 0, 4},
    {"sign", DT_OP_SIGN, A(0), 1, {2}, {{7, 5}}, {F}},
    {"sign i32", DT_OP_SIGN, A(0), 1, {1}, {{11}}, {DT_I32}},
    {"where float cond", DT_OP_WHERE, A(0), 3, {2, 1, 2}, {{4, 5}, {5}, {4, 5}}, {F, F, F}},
    {"maximum bcast f64", DT_OP_MAXIMUM, A(0), 2, {2, 1}, {{6, 5}, {5}}, {DT_F64, DT_F64}},
    {"minimum bcast", DT_OP_MINIMUM, A(0), 2, {3, 2}, {{2, 4, 3}, {4, 1}}, {F, F}},
    {"amax keepdim", DT_OP_AMAX, A(.ndims = 1, .dims = {1}, .keepdim = 1), 1, {3}, {{3, 7, 4}},
     {F}},
    {"amin all", DT_OP_AMIN, A(0), 1, {2}, {{6, 5}}, {F}},
    {"max dims", DT_OP_MAX, A(.ndims = 2, .dims = {0, -1}), 1, {3}, {{5, 3, 4}}, {F}},
    {"min dim", DT_OP_MIN, A(.ndims = 1, .dims = {1}), 1, {2}, {{6, 7}}, {DT_F64}},
    {"cumsum last f64", DT_OP_CUMSUM, A(.dim = -1), 1, {2}, {{4, 9}}, {DT_F64}},
    {"pow -1.5", DT_OP_POW_SCALAR, A(.scalar = -1.5), 1, {2}, {{6, 4}}, {F}, 1},
    {"pow 0", DT_OP_POW_SCALAR, A(.scalar = 0), 1, {1}, {{9}}, {F}},
    {"vector_norm -1", DT_OP_VECTOR_NORM, A(.scalar = -1, .ndims = 1, .dims = {1}), 1, {2},
     {{5, 6}}, {F}},
};
#undef A
#undef F
const size_t op_ncases = sizeof op_cases / sizeof op_cases[0];

static size_t numel(const op_case *c, int i) {
    size_t n = 1;
    for (int d = 0; d < c->nd[i]; d++) n *= (size_t)c->shape[i][d];
    return n;
}

static void fill(const op_case *c, int i, void *buf) {
    size_t n = numel(c, i), es = dt_dtype_size(c->dtype[i]);
    for (size_t k = 0; k < n; k++) {
        double v = t_value((uint64_t)(i * 977 + 5), k);
        if (c->dtype[i] == DT_I32 || c->dtype[i] == DT_I64) {
            if (c->index_range) v = (double)((int64_t)(v + 16) % c->index_range);
        } else {
            v /= 8; /* |v| <= 2 keeps exp and friends tame */
            if (c->positive) v = fabs(v) + 0.25;
        }
        dt_convert_from_f64(c->dtype[i], &v, (char *)buf + k * es, 1);
    }
}

dt_status op_body(dt_ctx *ctx, void *arg) {
    op_run *r = arg;
    const op_case *c = r->c;
    dt_mesh *mesh;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    dt_tensor *in[OP_CASE_MAX_IN] = {0}, *out = NULL;
    for (int i = 0; i < c->n; i++) {
        void *buf = malloc(numel(c, i) * 8 + 8);
        fill(c, i, buf);
        R_OK(dt_tensor_distribute(mesh, buf, c->dtype[i], c->nd[i], c->shape[i], dt_mesh_ndim(mesh),
                                  r->pl[i], DT_ALL_RANKS, &in[i]));
        free(buf);
    }
    dt_status st = dt_op_call(c->op, in, c->n, &c->args, &out);
    if (st != DT_OK) {
        char p[OP_CASE_MAX_IN * 64];
        op_run_placements(r, p, sizeof p);
        return t_fail(__FILE__, __LINE__, "%s on %s with %s: %s", c->name, r->mesh, p,
                      dt_last_error());
    }
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(out, &info));
    size_t es = dt_dtype_size(info.dtype);
    char *full = malloc(info.numel * es + 8);
    R_OK(dt_tensor_full_tensor(out, full, info.numel * es));
    if (dt_ctx_rank(ctx) == 0) {
        r->result_n = info.numel;
        r->result_nd = info.ndim;
        memcpy(r->result_shape, info.shape, sizeof info.shape);
        r->result = malloc(info.numel * sizeof(double) + 8);
        dt_convert_to_f64(info.dtype, full, r->result, info.numel);
    }
    free(full);
    for (int i = 0; i < c->n; i++) dt_tensor_release(in[i]);
    dt_tensor_release(out);
    dt_mesh_release(mesh);
    return DT_OK;
}

double tolerance(const op_case *c) {
    if (c->dtype[0] == DT_BF16 || c->dtype[0] == DT_F16) return 3e-2;
    if (c->dtype[0] == DT_F64) return 1e-10;
    if (c->dtype[0] == DT_I32 || c->dtype[0] == DT_I64) return 0;
    return 2e-4;
}

/* Candidate placements for input i on one mesh dim: R, P(sum) and S(d) for every dim. */
static dt_placement option(int k) {
    if (k == 0) return dt_replicate();
    if (k == 1) return dt_partial(DT_REDUCE_SUM);
    return dt_shard(k - 2);
}

int op_mesh_ranks(const char *mesh) {
    int n = 1, mnd = 0;
    const char *p = mesh;
    while (*p) {
        n *= (int)strtol(p, (char **)&p, 10);
        mnd++;
        if (*p == 'x') p++;
    }
    return mnd ? n : 0;
}

static int mesh_ndim(const char *mesh) {
    int mnd = 1;
    for (const char *p = mesh; *p; p++) mnd += *p == 'x';
    return mnd;
}

static int combos(const op_case *c, int mnd) {
    int n = 1;
    for (int i = 0; i < c->n; i++)
        for (int m = 0; m < mnd; m++) n *= c->nd[i] + 2;
    return n;
}

int op_case_tries(const op_case *c, const char *mesh) {
    int n = combos(c, mesh_ndim(mesh));
    return n < 24 ? n : 24;
}

void op_case_placements(const op_case *c, size_t ci, const char *mesh, int t,
                        dt_placement pl[OP_CASE_MAX_IN][2]) {
    int mnd = mesh_ndim(mesh), n = combos(c, mnd);
    uint64_t h = (ci * 7919 + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)t * 6364136223846793005ull +
                 (uint64_t)op_mesh_ranks(mesh) * 1442695040888963407ull;
    h ^= h >> 29;
    int code = n <= 24 ? t : (int)((h * 0xbf58476d1ce4e5b9ull) >> 33) % n;
    for (int i = 0; i < c->n; i++)
        for (int m = 0; m < mnd; m++) {
            int k = code % (c->nd[i] + 2);
            code /= c->nd[i] + 2;
            /* integer index inputs stay R/S: a P(sum) of indices is not an index */
            if (k == 1 && c->index_range) k = 0;
            pl[i][m] = option(k);
        }
}

void op_run_placements(const op_run *r, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->c->n && used + 64 < cap; i++) {
        if (i) used += (size_t)snprintf(buf + used, cap - used, " | ");
        dt_placements_format(r->pl[i], mesh_ndim(r->mesh), buf + used, cap - used);
        used += strlen(buf + used);
    }
}

int op_result_matches(const op_run *ref, const op_run *r, char *msg, size_t cap) {
    const op_case *c = r->c;
    if (r->result_n != ref->result_n) {
        snprintf(msg, cap, "mesh %s: %zu elements, want %zu", r->mesh, r->result_n, ref->result_n);
        return 0;
    }
    double tol = tolerance(c);
    for (size_t k = 0; k < ref->result_n; k++) {
        double want = ref->result[k], got = r->result[k];
        if (fabs(got - want) <= tol * (1 + fabs(want)) || (isnan(got) && isnan(want))) continue;
        char p[OP_CASE_MAX_IN * 64];
        op_run_placements(r, p, sizeof p);
        snprintf(msg, cap, "mesh %s with %s: element %zu is %g, want %g", r->mesh, p, k, got,
                 want);
        return 0;
    }
    return 1;
}

dt_status mlp_body(dt_ctx *ctx, void *arg) {
    const mlp_run *r = arg;
    const int T = r->T, C = r->C, H = r->H;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=4", &mesh));
    int64_t xs[2] = {T, C}, w1s[2] = {H, C}, w2s[2] = {C, H};
    float *x = malloc(sizeof(float) * (size_t)(T * C)),
          *w1 = malloc(sizeof(float) * (size_t)(H * C)),
          *w2 = malloc(sizeof(float) * (size_t)(C * H)),
          *h = malloc(sizeof(float) * (size_t)(T * H)),
          *ref = malloc(sizeof(float) * (size_t)(T * C)),
          *y = malloc(sizeof(float) * (size_t)(T * C));
    t_fill(DT_F32, x, (size_t)(T * C), 1), t_fill(DT_F32, w1, (size_t)(H * C), 2);
    t_fill(DT_F32, w2, (size_t)(C * H), 3);
    for (int i = 0; i < H * C; i++) w1[i] /= r->wscale, w2[i] /= r->wscale;
    dt_placement col[1] = {dt_shard(0)}, row[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    const dt_placement *io = r->sequence_parallel ? col : rep; /* S(0): the sequence dim */
    dt_tensor *tx, *tw1, *tw2, *th, *tg, *to, *out;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, 1, io, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, w1, DT_F32, 2, w1s, DT_COUNT_OF(col), col, DT_ALL_RANKS, &tw1));
    R_OK(dt_tensor_distribute(mesh, w2, DT_F32, 2, w2s, DT_COUNT_OF(row), row, DT_ALL_RANKS, &tw2));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_linear(tx, tw1, NULL, &th));
    R_OK(dt_unary_op(DT_OP_GELU, th, &tg));
    R_OK(dt_linear(tg, tw2, NULL, &to));
    R_OK(dt_tensor_redistribute(to, 1, io, &out));
    if (r->sequence_parallel) {
        R_CHECK(t_issued(ctx, DT_COLL_ALL_GATHER) == 1 &&
                    t_issued(ctx, DT_COLL_REDUCE_SCATTER) == 1 && t_issued_total(ctx) == 2,
                "sequence-parallel MLP: %llu collectives (%llu all_gather, %llu reduce_scatter)",
                (unsigned long long)t_issued_total(ctx),
                (unsigned long long)t_issued(ctx, DT_COLL_ALL_GATHER),
                (unsigned long long)t_issued(ctx, DT_COLL_REDUCE_SCATTER));
    } else {
        R_CHECK(t_issued(ctx, DT_COLL_ALL_REDUCE) == 1 && t_issued_total(ctx) == 1,
                "tensor-parallel MLP: %llu collectives, %llu all_reduce",
                (unsigned long long)t_issued_total(ctx),
                (unsigned long long)t_issued(ctx, DT_COLL_ALL_REDUCE));
    }
    /* The reference, unsharded, in double. */
    for (int i = 0; i < T; i++)
        for (int j = 0; j < H; j++) {
            double a = 0;
            for (int k = 0; k < C; k++) a += (double)x[i * C + k] * w1[j * C + k];
            h[i * H + j] =
                (float)(0.5 * a * (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a))));
        }
    for (int i = 0; i < T; i++)
        for (int j = 0; j < C; j++) {
            double a = 0;
            for (int k = 0; k < H; k++) a += (double)h[i * H + k] * w2[j * H + k];
            ref[i * C + j] = (float)a;
        }
    R_OK(dt_tensor_full_tensor(out, y, sizeof(float) * (size_t)(T * C)));
    for (int i = 0; i < T * C; i++)
        R_CHECK(fabsf(y[i] - ref[i]) <= 1e-3f * (1 + fabsf(ref[i])), "y[%d] = %g, want %g", i,
                y[i], ref[i]);
    dt_tensor *all[] = {tx, tw1, tw2, th, tg, to, out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    free(x), free(w1), free(w2), free(h), free(ref), free(y);
    return DT_OK;
}

dt_status dropout_body(dt_ctx *ctx, void *arg) {
    dropout_run *r = arg;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    const int64_t shape[3] = {5, 7, 3};
    const size_t n = 105, es = dt_dtype_size(r->dtype);
    double *xv = malloc(n * sizeof(double)), *yv = malloc(n * sizeof(double)),
           *uv = malloc(n * sizeof(double));
    unsigned char *buf = malloc(n * 8), *rb = malloc(n * 8), *ob = malloc(n * 8);
    for (size_t k = 0; k < n; k++) xv[k] = t_value(11, k) / 4;
    dt_convert_from_f64(r->dtype, xv, buf, n);
    dt_convert_to_f64(r->dtype, buf, xv, n);
    dt_tensor *x, *y, *u, *same;
    R_OK(dt_tensor_distribute(mesh, buf, r->dtype, 3, shape, mnd, r->pl, DT_ALL_RANKS, &x));
    dt_generator g = {42, 3}, g2 = g;
    R_OK(dt_dropout(x, r->p, 1, &g, &y));
    R_OK(dt_tensor_rand(mesh, r->dtype, 3, shape, mnd, r->pl, &g2, &u));
    R_CHECK(g.offset == g2.offset, "dropout advanced the generator to %llu, rand to %llu",
            (unsigned long long)g.offset, (unsigned long long)g2.offset);
    R_OK(dt_tensor_full_tensor(y, ob, n * es));
    R_OK(dt_tensor_full_tensor(u, rb, n * es));
    dt_convert_to_f64(r->dtype, ob, yv, n);
    dt_convert_to_f64(r->dtype, rb, uv, n);
    /* The kernel's arithmetic: x times 1 / (1 - p) in f32 (f64 for f64), rounded to dtype. */
    for (size_t k = 0; k < n; k++) {
        double want = 0;
        if (uv[k] >= r->p)
            want = r->dtype == DT_F64 ? xv[k] * (1.0 / (1.0 - r->p))
                                      : (double)((float)xv[k] * (float)(1.0 / (1.0 - r->p)));
        dt_convert_from_f64(r->dtype, &want, rb + k * es, 1);
    }
    R_CHECK(memcmp(rb, ob, n * es) == 0, "dropout on %s: not (rand >= %g) * x / (1 - p)",
            r->mesh, r->p);
    /* The shortcuts. */
    R_OK(dt_dropout(x, 0.5, 0, &g, &same));
    R_CHECK(same == x, "training 0 made a new tensor");
    dt_tensor_release(same);
    R_OK(dt_dropout(x, 0, 1, &g, &same));
    R_CHECK(same == x && g.offset == g2.offset, "p 0 made a new tensor or drew numbers");
    dt_tensor_release(same);
    R_CHECK(dt_dropout(x, 1.5, 1, &g, &same) == DT_ERR_ARG, "p 1.5 accepted");
    R_CHECK(dt_dropout(x, -0.1, 1, &g, &same) == DT_ERR_ARG, "p -0.1 accepted");
    R_OK(dt_dropout(x, 1, 1, &g, &same));
    R_OK(dt_tensor_full_tensor(same, rb, n * es));
    dt_convert_to_f64(r->dtype, rb, uv, n);
    for (size_t k = 0; k < n; k++) R_CHECK(uv[k] == 0, "p 1: element %zu is %g", k, uv[k]);
    dt_tensor_release(same);
    if (dt_ctx_rank(ctx) == 0) {
        r->out = ob, r->bytes = n * es;
        ob = NULL;
    }
    free(ob), free(rb), free(buf), free(uv), free(yv), free(xv);
    dt_tensor_release(u), dt_tensor_release(y), dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}
