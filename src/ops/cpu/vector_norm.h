/* Per-element math of vector_norm, shared by the CPU loop and the CUDA kernel so both compute
 * the same thing: start, fold one |x|, finish. Accumulates in double. Header-only, no loops. */
#ifndef DT_OPS_CPU_VECTOR_NORM_H
#define DT_OPS_CPU_VECTOR_NORM_H

#include "ops/cpu/elementwise.h"

/* The identity of the fold: also the result of an empty reduction once finished. */
DT_EW_FN double dt_vn_start(double ord) {
    return ord == -INFINITY ? INFINITY : 0.0;
}

/* Folds v = x into acc; NaN propagates through max and min as through sums. */
DT_EW_FN double dt_vn_fold(double ord, double acc, double x) {
    double v = fabs(x);
    if (ord == INFINITY) return (v > acc || v != v) ? v : acc;
    if (ord == -INFINITY) return (v < acc || v != v) ? v : acc;
    if (ord == 0) return acc + (x != 0 ? 1.0 : 0.0); /* NaN counts, as in torch */
    if (ord == 1) return acc + v;
    if (ord == 2) return acc + v * v;
    return acc + pow(v, ord);
}

DT_EW_FN double dt_vn_finish(double ord, double acc) {
    if (ord == INFINITY || ord == -INFINITY || ord == 0 || ord == 1) return acc;
    if (ord == 2) return sqrt(acc);
    return pow(acc, 1.0 / ord);
}

#endif
