/* The CPU's fused optimizer step: every element of every item through ops/cpu/optim_math.h,
 * one pass over all parameters' local shards. AdamW on all-f32 items without master weights
 * (the common case) takes a loop of its own that the compiler vectorizes: the same
 * operations in the same order as dt_om_adamw_f, so the same bits. The items' elements, end to
 * end, are shared out by the intra-op pool; every element is its own, so any thread count
 * gives the same bits. */
#include <stdlib.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/pool.h"
#include "ops/cpu/optim_math.h"

#include "ops/cpu/simd.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512 1
#else
#define HAVE_AVX512 0
#endif

#define PIECE 8192 /* elements a pool chunk holds at least: smaller stays serial */

#if HAVE_AVX512
/* adamw_f32's sixteen-lane loop: the same operations in the same order (no fused multiply-add;
 * vdivps and vsqrtps round as divss and sqrtss do), so the same bits, with a third of the
 * divide and square-root issue of four lanes. Returns the first element it left. */
__attribute__((target("avx512f"))) static uint64_t
adamw_f32_avx512(const dt_optim_hyper *h, const dt_optim_item *it, uint64_t i, uint64_t end) {
    float *restrict p = it->param, *restrict m = it->state[0], *restrict v = it->state[1];
    const float *restrict g = it->grad;
    const __m512 vdecay = _mm512_set1_ps((float)1 - (float)(it->lr * it->weight_decay)),
                 vb1 = _mm512_set1_ps((float)(1 - h->beta1)), vb2 = _mm512_set1_ps((float)h->beta2),
                 vnb2 = _mm512_set1_ps((float)(1 - h->beta2)),
                 vbc2 = _mm512_set1_ps((float)it->bc2_sqrt), veps = _mm512_set1_ps((float)h->eps),
                 vstep = _mm512_set1_ps((float)it->step_size);
    for (; i + 16 <= end; i += 16) {
        __m512 pi = _mm512_mul_ps(_mm512_loadu_ps(p + i), vdecay), gi = _mm512_loadu_ps(g + i);
        __m512 mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i);
        mi = _mm512_add_ps(mi, _mm512_mul_ps(vb1, _mm512_sub_ps(gi, mi)));
        vi = _mm512_add_ps(_mm512_mul_ps(vb2, vi), _mm512_mul_ps(_mm512_mul_ps(vnb2, gi), gi));
        _mm512_storeu_ps(m + i, mi), _mm512_storeu_ps(v + i, vi);
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps);
        _mm512_storeu_ps(p + i, _mm512_sub_ps(pi, _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom))));
    }
    return i;
}
#endif

/* Elements [i, end) of an all-f32 AdamW item. */
static void adamw_f32(const dt_optim_hyper *h, const dt_optim_item *it, uint64_t i,
                      uint64_t end) {
    float *restrict p = it->param, *restrict m = it->state[0], *restrict v = it->state[1];
    const float *restrict g = it->grad;
    const float decay = (float)1 - (float)(it->lr * it->weight_decay);
    const float b1 = (float)(1 - h->beta1), b2 = (float)h->beta2, nb2 = (float)(1 - h->beta2);
    const float bc2 = (float)it->bc2_sqrt, eps = (float)h->eps, step = (float)it->step_size;
#if HAVE_AVX512
    if (dt_simd_level() >= DT_SIMD_AVX512) i = adamw_f32_avx512(h, it, i, end);
#endif
#if defined(__SSE__) /* four lanes; sqrtps and divps round as sqrtss and divss do */
    const __m128 vdecay = _mm_set1_ps(decay), vb1 = _mm_set1_ps(b1), vb2 = _mm_set1_ps(b2),
                 vnb2 = _mm_set1_ps(nb2), vbc2 = _mm_set1_ps(bc2), veps = _mm_set1_ps(eps),
                 vstep = _mm_set1_ps(step);
    for (; i + 4 <= end; i += 4) {
        __m128 pi = _mm_mul_ps(_mm_loadu_ps(p + i), vdecay), gi = _mm_loadu_ps(g + i);
        __m128 mi = _mm_loadu_ps(m + i), vi = _mm_loadu_ps(v + i);
        mi = _mm_add_ps(mi, _mm_mul_ps(vb1, _mm_sub_ps(gi, mi)));
        vi = _mm_add_ps(_mm_mul_ps(vb2, vi), _mm_mul_ps(_mm_mul_ps(vnb2, gi), gi));
        _mm_storeu_ps(m + i, mi), _mm_storeu_ps(v + i, vi);
        __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), vbc2), veps);
        _mm_storeu_ps(p + i, _mm_sub_ps(pi, _mm_mul_ps(vstep, _mm_div_ps(mi, denom))));
    }
#endif
    for (; i < end; i++) {
        float pi = p[i] * decay, gi = g[i];
        float mi = m[i] + b1 * (gi - m[i]);
        float vi = b2 * v[i] + nb2 * gi * gi;
        m[i] = mi, v[i] = vi;
        p[i] = pi - step * (mi / (sqrtf(vi) / bc2 + eps));
    }
}

typedef struct {
    const dt_optim_hyper *h;
    const dt_optim_item *items;
    const uint64_t *start; /* start[k]: item k's first element in the items' run; n + 1 */
    int n;
} step_job;

static int fast_adamw(const dt_optim_hyper *h, const dt_optim_item *it) {
    return h->rule == DT_OPTIM_RULE_ADAMW && !it->master && it->param_dtype == DT_F32 &&
           it->grad_dtype == DT_F32 && it->state_dtype == DT_F32;
}

static void step_range(void *arg, int64_t begin, int64_t end) {
    const step_job *j = arg;
    int lo = 0, hi = j->n; /* the item holding element begin: start[lo] <= begin < start[lo+1] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (j->start[mid] <= (uint64_t)begin) lo = mid;
        else hi = mid;
    }
    for (int k = lo; k < j->n && j->start[k] < (uint64_t)end; k++) {
        const dt_optim_item *it = &j->items[k];
        uint64_t a = (uint64_t)begin > j->start[k] ? (uint64_t)begin - j->start[k] : 0;
        uint64_t b = (uint64_t)end - j->start[k];
        if (b > it->numel) b = it->numel;
        if (fast_adamw(j->h, it)) adamw_f32(j->h, it, a, b);
        else
            for (uint64_t i = a; i < b; i++) dt_om_step(j->h, it, i);
    }
}

dt_status dt_cpu_optim_step(const dt_optim_hyper *h, const dt_optim_item *items, int n) {
    if (n <= 0) return DT_OK;
    uint64_t small[65], *start = n < 65 ? small : dt_host_alloc(sizeof *start * (size_t)(n + 1));
    if (!start)
        return dt_error(DT_ERR_NOMEM, "dt_cpu_optim_step: out of memory for %d items", n);
    start[0] = 0;
    for (int k = 0; k < n; k++) start[k + 1] = start[k] + items[k].numel;
    step_job j = {.h = h, .items = items, .start = start, .n = n};
    dt_parallel_for((int64_t)start[n], PIECE, step_range, &j);
    if (start != small) dt_host_free(start);
    return DT_OK;
}
