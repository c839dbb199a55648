/* Per-element math of the fused optimizer step (torch.optim.SGD and AdamW, one element of one
 * parameter), shared by the CPU loop (ops/cpu/optim.c) and the CUDA kernel (ops/cuda/optim.cu)
 * so both compute the same thing. Plain C, header-only; no loops over elements here. */
#ifndef DT_OPS_CPU_OPTIM_MATH_H
#define DT_OPS_CPU_OPTIM_MATH_H

#include <math.h>
#include <stdint.h>

#include "core/half.h"
#include "ops/kernels.h"

#if defined(__CUDACC__)
#define DT_OM_FN static inline __host__ __device__
#else
#define DT_OM_FN static inline
#endif

/* Loads widen to the math type T; stores round once. Float dtypes only (the optimizer checks). */
#define DT_OPTIM_FNS(SUF, T, SQRT)                                                                 \
    DT_OM_FN T dt_om_ld_##SUF(dt_dtype t, const void *p, uint64_t i) {                             \
        switch (t) {                                                                               \
        case DT_F64: return (T)((const double *)p)[i];                                             \
        case DT_BF16: return (T)dt_bf16_to_f32(((const uint16_t *)p)[i]);                          \
        case DT_F16: return (T)dt_f16_to_f32(((const uint16_t *)p)[i]);                            \
        default: return (T)((const float *)p)[i];                                                  \
        }                                                                                          \
    }                                                                                              \
    DT_OM_FN T dt_om_st_##SUF(dt_dtype t, void *p, uint64_t i, T v) {                              \
        switch (t) {                                                                               \
        case DT_F64: ((double *)p)[i] = (double)v; break;                                          \
        case DT_BF16: ((uint16_t *)p)[i] = dt_f32_to_bf16((float)v); break;                        \
        case DT_F16: ((uint16_t *)p)[i] = dt_f32_to_f16((float)v); break;                          \
        default: ((float *)p)[i] = (float)v; break;                                                \
        }                                                                                          \
        return dt_om_ld_##SUF(t, p, i); /* the value as stored, for what reads it next */          \
    }                                                                                              \
    /* torch.optim.SGD: g += wd p; buf = g (first step) or momentum buf + (1 - dampening) g;     \
     * g = g + momentum buf (nesterov) or buf; p -= lr g. */                                       \
    DT_OM_FN T dt_om_sgd_##SUF(const dt_optim_hyper *h, const dt_optim_item *it, uint64_t i,       \
                               T p, T g) {                                                         \
        T wd = (T)it->weight_decay, mom = (T)h->momentum;                                          \
        if (wd != (T)0) g = g + wd * p;                                                            \
        if (it->state[0]) {                                                                        \
            T b = it->first ? g                                                                    \
                            : mom * dt_om_ld_##SUF(it->state_dtype, it->state[0], i) +             \
                                  ((T)1 - (T)h->dampening) * g;                                    \
            b = dt_om_st_##SUF(it->state_dtype, it->state[0], i, b);                               \
            g = h->nesterov ? g + mom * b : b;                                                     \
        }                                                                                          \
        return p - (T)it->lr * g;                                                                  \
    }                                                                                              \
    /* torch.optim.AdamW: p *= 1 - lr wd; m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2)  \
     * g^2; p -= step_size m / (sqrt(v) / bc2_sqrt + eps). */                                      \
    DT_OM_FN T dt_om_adamw_##SUF(const dt_optim_hyper *h, const dt_optim_item *it, uint64_t i,     \
                                 T p, T g) {                                                       \
        dt_dtype sd = it->state_dtype;                                                             \
        p = p * ((T)1 - (T)(it->lr * it->weight_decay));                                           \
        T m = dt_om_ld_##SUF(sd, it->state[0], i), v = dt_om_ld_##SUF(sd, it->state[1], i);        \
        m = dt_om_st_##SUF(sd, it->state[0], i, m + (T)(1 - h->beta1) * (g - m));                  \
        v = dt_om_st_##SUF(sd, it->state[1], i, (T)h->beta2 * v + (T)(1 - h->beta2) * g * g);      \
        T denom = SQRT(v) / (T)it->bc2_sqrt + (T)h->eps;                                           \
        return p - (T)it->step_size * (m / denom);                                                 \
    }                                                                                              \
    /* Element i of item it: read (master or param), update, write back (master, then param). */  \
    DT_OM_FN void dt_om_step_##SUF(const dt_optim_hyper *h, const dt_optim_item *it, uint64_t i) { \
        T p = it->master ? (T)((const float *)it->master)[i]                                       \
                         : dt_om_ld_##SUF(it->param_dtype, it->param, i);                          \
        T g = dt_om_ld_##SUF(it->grad_dtype, it->grad, i);                                         \
        p = h->rule == DT_OPTIM_RULE_SGD ? dt_om_sgd_##SUF(h, it, i, p, g)                         \
                                         : dt_om_adamw_##SUF(h, it, i, p, g);                      \
        if (it->master) ((float *)it->master)[i] = (float)p;                                       \
        dt_om_st_##SUF(it->param_dtype, it->param, i, p);                                          \
    }

DT_OPTIM_FNS(f, float, sqrtf)
DT_OPTIM_FNS(d, double, sqrt)
#undef DT_OPTIM_FNS

/* Element i of it in its math type: f64 when the state is f64, else f32. */
DT_OM_FN void dt_om_step(const dt_optim_hyper *h, const dt_optim_item *it, uint64_t i) {
    if (it->state_dtype == DT_F64) dt_om_step_d(h, it, i);
    else dt_om_step_f(h, it, i);
}

#endif
