/* The CPU's fused optimizer step: every element of every item through ops/cpu/optim_math.h,
 * one pass over all parameters' local shards. AdamW on all-f32 items without master weights
 * (the common case) takes a loop of its own that the compiler vectorizes: the same
 * operations in the same order as dt_om_adamw_f, so the same bits. */
#include "ops/cpu/optim_math.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

static void adamw_f32(const dt_optim_hyper *h, const dt_optim_item *it) {
    float *restrict p = it->param, *restrict m = it->state[0], *restrict v = it->state[1];
    const float *restrict g = it->grad;
    const float decay = (float)1 - (float)(it->lr * it->weight_decay);
    const float b1 = (float)(1 - h->beta1), b2 = (float)h->beta2, nb2 = (float)(1 - h->beta2);
    const float bc2 = (float)it->bc2_sqrt, eps = (float)h->eps, step = (float)it->step_size;
    uint64_t i = 0;
#if defined(__SSE__) /* four lanes; sqrtps and divps round as sqrtss and divss do */
    const __m128 vdecay = _mm_set1_ps(decay), vb1 = _mm_set1_ps(b1), vb2 = _mm_set1_ps(b2),
                 vnb2 = _mm_set1_ps(nb2), vbc2 = _mm_set1_ps(bc2), veps = _mm_set1_ps(eps),
                 vstep = _mm_set1_ps(step);
    for (; i + 4 <= it->numel; i += 4) {
        __m128 pi = _mm_mul_ps(_mm_loadu_ps(p + i), vdecay), gi = _mm_loadu_ps(g + i);
        __m128 mi = _mm_loadu_ps(m + i), vi = _mm_loadu_ps(v + i);
        mi = _mm_add_ps(mi, _mm_mul_ps(vb1, _mm_sub_ps(gi, mi)));
        vi = _mm_add_ps(_mm_mul_ps(vb2, vi), _mm_mul_ps(_mm_mul_ps(vnb2, gi), gi));
        _mm_storeu_ps(m + i, mi), _mm_storeu_ps(v + i, vi);
        __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), vbc2), veps);
        _mm_storeu_ps(p + i, _mm_sub_ps(pi, _mm_mul_ps(vstep, _mm_div_ps(mi, denom))));
    }
#endif
    for (; i < it->numel; i++) {
        float pi = p[i] * decay, gi = g[i];
        float mi = m[i] + b1 * (gi - m[i]);
        float vi = b2 * v[i] + nb2 * gi * gi;
        m[i] = mi, v[i] = vi;
        p[i] = pi - step * (mi / (sqrtf(vi) / bc2 + eps));
    }
}

dt_status dt_cpu_optim_step(const dt_optim_hyper *h, const dt_optim_item *items, int n) {
    for (int k = 0; k < n; k++) {
        const dt_optim_item *it = &items[k];
        if (h->rule == DT_OPTIM_RULE_ADAMW && !it->master && it->param_dtype == DT_F32 &&
            it->grad_dtype == DT_F32 && it->state_dtype == DT_F32) {
            adamw_f32(h, it);
            continue;
        }
        for (uint64_t i = 0; i < it->numel; i++) dt_om_step(h, it, i);
    }
    return DT_OK;
}
