/* Per-element math of the pointwise kernels, in one place so the CPU loops and a later CUDA
 * path compute the same thing: float forms (f32, and bf16/f16 after widening), double forms
 * (f64) and wrapping integer forms. Plain C, header-only; no loops, no dtype dispatch here. */
#ifndef DT_OPS_CPU_ELEMENTWISE_H
#define DT_OPS_CPU_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>

#include "ops/kernels.h"

#if defined(__CUDACC__)
#define DT_EW_FN static inline __host__ __device__
#else
#define DT_EW_FN static inline
#endif

/* Float and double forms from one text: F is the libm suffix ("f" or empty). Max and min
 * propagate NaN, as torch.maximum does. GELU is GPT-2's tanh approximation. Sign is -1, 0 or
 * 1 (+0 for -0) and NaN for NaN (as NumPy; sign stays monotone, NaN included). Comparisons
 * give 1 or 0 in the operands' type; any comparison with NaN is 0 except NE's 1. */
/* The comparisons, 1 or 0 in T, the same for every type (NaN compares false but under ne). */
#define DT_EW_COMPARE_CASES(T)                                                                     \
    case DT_BINARY_EQ: return (T)(a == b);                                                         \
    case DT_BINARY_NE: return (T)(a != b);                                                         \
    case DT_BINARY_GT: return (T)(a > b);                                                          \
    case DT_BINARY_GE: return (T)(a >= b);                                                         \
    case DT_BINARY_LT: return (T)(a < b);                                                          \
    case DT_BINARY_LE: return (T)(a <= b);

#define DT_EW_FLOAT_FNS(SUF, T, F)                                                                 \
    DT_EW_FN T dt_ew_relu_##SUF(T x) { return x > (T)0 ? x : (x != x ? x : (T)0); }                \
    DT_EW_FN T dt_ew_sigmoid_##SUF(T x) { return (T)1 / ((T)1 + exp##F(-x)); }                     \
    DT_EW_FN T dt_ew_silu_##SUF(T x) { return x / ((T)1 + exp##F(-x)); }                           \
    DT_EW_FN T dt_ew_gelu_##SUF(T x) {                                                             \
        const T c = (T)0.79788456080286535588; /* sqrt(2 / pi) */                                  \
        return (T)0.5 * x * ((T)1 + tanh##F(c * (x + (T)0.044715 * x * x * x)));                   \
    }                                                                                              \
    DT_EW_FN T dt_ew_rsqrt_##SUF(T x) { return (T)1 / sqrt##F(x); }                                \
    DT_EW_FN T dt_ew_max_##SUF(T a, T b) { return (b > a || b != b) ? b : a; }                     \
    DT_EW_FN T dt_ew_min_##SUF(T a, T b) { return (b < a || b != b) ? b : a; }                     \
    DT_EW_FN T dt_ew_sign_##SUF(T x) {                                                             \
        return x > (T)0 ? (T)1 : x < (T)0 ? (T)-1 : x != x ? x : (T)0;                            \
    }                                                                                              \
    /* The whole unary table as one switch, for callers that map one element at a time. */         \
    DT_EW_FN T dt_ew_unary_##SUF(dt_unary f, T x, T s) {                                           \
        switch (f) {                                                                               \
        case DT_UNARY_NEG: return -x;                                                              \
        case DT_UNARY_EXP: return exp##F(x);                                                       \
        case DT_UNARY_LOG: return log##F(x);                                                       \
        case DT_UNARY_SQRT: return sqrt##F(x);                                                     \
        case DT_UNARY_RSQRT: return dt_ew_rsqrt_##SUF(x);                                          \
        case DT_UNARY_ABS: return fabs##F(x);                                                      \
        case DT_UNARY_RELU: return dt_ew_relu_##SUF(x);                                            \
        case DT_UNARY_GELU: return dt_ew_gelu_##SUF(x);                                            \
        case DT_UNARY_SILU: return dt_ew_silu_##SUF(x);                                            \
        case DT_UNARY_TANH: return tanh##F(x);                                                     \
        case DT_UNARY_SIGMOID: return dt_ew_sigmoid_##SUF(x);                                      \
        case DT_UNARY_POW_SCALAR: return pow##F(x, s);                                             \
        case DT_UNARY_ADD_SCALAR: return x + s;                                                    \
        case DT_UNARY_MUL_SCALAR: return x * s;                                                    \
        case DT_UNARY_SIGN: return dt_ew_sign_##SUF(x);                                            \
        default: return x;                                                                         \
        }                                                                                          \
    }                                                                                              \
    DT_EW_FN T dt_ew_binary_##SUF(dt_binary f, T a, T b) {                                         \
        switch (f) {                                                                               \
        case DT_BINARY_ADD: return a + b;                                                          \
        case DT_BINARY_SUB: return a - b;                                                          \
        case DT_BINARY_MUL: return a * b;                                                          \
        case DT_BINARY_DIV: return a / b;                                                          \
        case DT_BINARY_MAX: return dt_ew_max_##SUF(a, b);                                          \
        case DT_BINARY_MIN: return dt_ew_min_##SUF(a, b);                                          \
        DT_EW_COMPARE_CASES(T)                                                                     \
        default: return a;                                                                         \
        }                                                                                          \
    }

DT_EW_FLOAT_FNS(f32, float, f)
DT_EW_FLOAT_FNS(f64, double, )

/* Integer forms: arithmetic wraps (through the unsigned type) instead of overflowing, division
 * truncates toward zero, division by zero gives 0 and INT_MIN / -1 wraps to INT_MIN. */
#define DT_EW_INT_FNS(SUF, T, UT)                                                                  \
    DT_EW_FN T dt_ew_add_##SUF(T a, T b) { return (T)((UT)a + (UT)b); }                            \
    DT_EW_FN T dt_ew_sub_##SUF(T a, T b) { return (T)((UT)a - (UT)b); }                            \
    DT_EW_FN T dt_ew_mul_##SUF(T a, T b) { return (T)((UT)a * (UT)b); }                            \
    DT_EW_FN T dt_ew_neg_##SUF(T a) { return (T)((UT)0 - (UT)a); }                                 \
    DT_EW_FN T dt_ew_div_##SUF(T a, T b) {                                                         \
        return b == 0 ? (T)0 : b == -1 ? dt_ew_neg_##SUF(a) : (T)(a / b);                          \
    }                                                                                              \
    DT_EW_FN T dt_ew_abs_##SUF(T a) { return a < 0 ? dt_ew_neg_##SUF(a) : a; }                     \
    DT_EW_FN T dt_ew_relu_##SUF(T a) { return a > 0 ? a : (T)0; }                                  \
    DT_EW_FN T dt_ew_max_##SUF(T a, T b) { return a > b ? a : b; }                                 \
    DT_EW_FN T dt_ew_min_##SUF(T a, T b) { return a < b ? a : b; }                                 \
    DT_EW_FN T dt_ew_sign_##SUF(T a) { return (T)((a > 0) - (a < 0)); }                            \
    DT_EW_FN T dt_ew_binary_##SUF(dt_binary f, T a, T b) {                                         \
        switch (f) {                                                                               \
        case DT_BINARY_ADD: return dt_ew_add_##SUF(a, b);                                          \
        case DT_BINARY_SUB: return dt_ew_sub_##SUF(a, b);                                          \
        case DT_BINARY_MUL: return dt_ew_mul_##SUF(a, b);                                          \
        case DT_BINARY_DIV: return dt_ew_div_##SUF(a, b);                                          \
        case DT_BINARY_MAX: return dt_ew_max_##SUF(a, b);                                          \
        case DT_BINARY_MIN: return dt_ew_min_##SUF(a, b);                                          \
        DT_EW_COMPARE_CASES(T)                                                                     \
        default: return a;                                                                         \
        }                                                                                          \
    }

DT_EW_INT_FNS(i32, int32_t, uint32_t)
DT_EW_INT_FNS(i64, int64_t, uint64_t)

/* Whether dt_cpu_unary defines f for integer dtypes. */
DT_EW_FN int dt_ew_unary_int_ok(dt_unary f) {
    return f == DT_UNARY_NEG || f == DT_UNARY_ABS || f == DT_UNARY_RELU ||
           f == DT_UNARY_ADD_SCALAR || f == DT_UNARY_MUL_SCALAR || f == DT_UNARY_SIGN;
}

/* A double scalar as an integer operand: truncated toward zero, saturated, NaN as 0. */
DT_EW_FN int64_t dt_ew_scalar_i64(double s) {
    if (s != s) return 0;
    if (s >= 9223372036854775807.0) return INT64_MAX;
    if (s <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)s;
}

#endif
