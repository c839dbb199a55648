/* CPU scaled dot-product attention, flash style: query tiles of BR rows meet key tiles of BC
 * keys with an online softmax, so no (Tq, Tk) matrix exists; the forward keeps only out and
 * each row's log-sum-exp, and the backward rebuilds P a tile at a time from them. f32, bf16
 * and f16 compute in f32: on AVX-512F CPUs in attention_avx512.c (fused multiply-adds), else in
 * the portable tiles of ops/cpu/attention_tile.h (no FMA, the same bits on SSE, AVX2 or
 * scalar); f64 in f64 there. Work items write disjoint rows, so any thread count gives the
 * same bits on one path; the paths agree to rounding. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/box.h"
#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/cpu/attention_job.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h"
#include "ops/kernel_args.h"
#include "ops/kernels.h"

/* Query rows x keys per tile: a 32 x 64 f32 score tile (8 KiB) and its operands at head dim 64
 * (q 8 KiB, k^T and v 16 KiB each) stay in L1/L2 of one core. */
enum { BR = 32, BC = 64 };

/* Rows [row0, row0 + n) of t (rows of `cols` elements, placed as m says) into dst in the
 * compute type: row r at dst + r * ld, or transposed (column r, dst + c * ld + r). */
static void load_f32(float *dst, int64_t ld, int trans, const dt_local *t, const sdpa_rows *m,
                     int64_t row0, int n, int64_t cols) {
    int r = 0;
    if (t->dtype == DT_F32 && trans) /* 8 rows at a time: each column's 8 floats lie together */
        for (; r + 8 <= n; r += 8) {
            const float *src[8];
            for (int u = 0; u < 8; u++)
                src[u] = (const float *)t->data + row_at(m, row0 + r + u, cols);
            for (int64_t c = 0; c < cols; c++)
                for (int u = 0; u < 8; u++)
                    dst[c * ld + r + u] = src[u][c];
        }
    for (; r < n; r++) {
        size_t at = row_at(m, row0 + r, cols);
        if (t->dtype == DT_F32) { /* the hot case: no per-element branch */
            const float *src = (const float *)t->data + at;
            if (!trans)
                memcpy(dst + r * ld, src, (size_t)cols * sizeof(float));
            else
                for (int64_t c = 0; c < cols; c++)
                    dst[c * ld + r] = src[c];
            continue;
        }
        const uint16_t *h = (const uint16_t *)t->data + at;
        int bf = t->dtype == DT_BF16;
        for (int64_t c = 0; c < cols; c++) {
            float x = bf ? dt_bf16_to_f32(h[c]) : dt_f16_to_f32(h[c]);
            dst[trans ? c * ld + r : r * ld + c] = x;
        }
    }
}

static void load_f64(double *dst, int64_t ld, int trans, const dt_local *t, const sdpa_rows *m,
                     int64_t row0, int n, int64_t cols) {
    for (int r = 0; r < n; r++) {
        const double *src = (const double *)t->data + row_at(m, row0 + r, cols);
        for (int64_t c = 0; c < cols; c++)
            dst[trans ? c * ld + r : r * ld + c] = src[c];
    }
}

static void store_f64(dt_local *t, const sdpa_rows *m, int64_t row0, int n, int64_t cols,
                      const double *src) {
    for (int r = 0; r < n; r++)
        memcpy((double *)t->data + row_at(m, row0 + r, cols), src + r * cols,
               (size_t)cols * sizeof(double));
}

/* The portable tile products in AVX2 where the CPU has it, else SSE2: the same bits either way
 * (each output element's terms are added in one order, no FMA: ISO C mode keeps contraction
 * off). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DT_TILE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DT_TILE_CLONES
#endif

#define CT          double
#define TN(name)    name##_f64
#define DT_TILE_F32 0
#include "ops/cpu/attention_tile.h"
#undef CT
#undef TN
#undef DT_TILE_F32
#define CT          float
#define TN(name)    name##_f32
#define DT_TILE_F32 1
#include "ops/cpu/attention_tile.h"
#undef CT
#undef TN
#undef DT_TILE_F32

typedef void (*item_fn32)(const sdpa_job *, float *, int64_t);
typedef void (*item_fn64)(const sdpa_job *, double *, int64_t);

/* One pass: every item of [b, e) with one zeroed work buffer (zero: the padding columns of
 * a last, narrower key tile are read as zeros). */
#define DEFINE_RANGE(NAME, F32, F64)                                                               \
    static void NAME(void *arg, int64_t b, int64_t e) {                                            \
        sdpa_job *J = arg;                                                                         \
        void *w = dt_host_calloc(J->work_bytes);                                                   \
        if (!w) {                                                                                  \
            __atomic_store_n(&J->failed, 1, __ATOMIC_RELAXED);                                     \
            return;                                                                                \
        }                                                                                          \
        for (int64_t it = b; it < e; it++) {                                                       \
            if (J->q->dtype == DT_F64)                                                             \
                F64(J, w, it);                                                                     \
            else                                                                                   \
                F32(J, w, it);                                                                     \
        }                                                                                          \
        dt_host_free(w);                                                                           \
    }

DEFINE_RANGE(fwd_range, fwd_item_f32, fwd_item_f64)
DEFINE_RANGE(dq_range, dq_item_f32, dq_item_f64)
DEFINE_RANGE(dkv_range, dkv_item_f32, dkv_item_f64)

#if DT_ATTN_AVX512
/* The AVX-512 path's passes: its items need no zeroed memory. */
#define DEFINE_RANGE512(NAME, ITEM)                                                                \
    static void NAME(void *arg, int64_t b, int64_t e) {                                            \
        sdpa_job *J = arg;                                                                         \
        void *w = dt_host_alloc(J->work_bytes);                                                    \
        if (!w) {                                                                                  \
            __atomic_store_n(&J->failed, 1, __ATOMIC_RELAXED);                                     \
            return;                                                                                \
        }                                                                                          \
        for (int64_t it = b; it < e; it++)                                                         \
            ITEM(J, w, it);                                                                        \
        dt_host_free(w);                                                                           \
    }
DEFINE_RANGE512(fwd512_range, dt_attn512_fwd_item)
DEFINE_RANGE512(bwd512_range, dt_attn512_bwd_item)
#endif

/* Whether q's dtype runs on the AVX-512 path here (f32 compute, the CPU and DT_SIMD allow). */
static int use_avx512(const dt_local *q) {
    return DT_ATTN_AVX512 && q->dtype != DT_F64 && dt_simd_level() == DT_SIMD_AVX512;
}

static void job_init(sdpa_job *J, const dt_sdpa_dims *d, int causal, double scale) {
    memset(J, 0, sizeof *J);
    J->d = *d, J->causal = causal, J->scale = scale;
    J->rq = (sdpa_rows){d->Hq, d->Tq, d->seq_first, 0, d->Hq};
    J->rk = (sdpa_rows){d->Hkv, d->Tk, d->seq_first, d->kv0, d->kvn};
    J->nqt = (d->Tq + BR - 1) / BR, J->nkt = (d->Tk + BC - 1) / BC;
}

static dt_status job_run(sdpa_job *J, const char *fn, dt_range_fn range, int64_t items) {
    dt_parallel_for(items, 1, range, J);
    if (__atomic_load_n(&J->failed, __ATOMIC_RELAXED))
        return dt_error(DT_ERR_NOMEM, "%s: no memory for its %zu-byte tiles", fn, J->work_bytes);
    return DT_OK;
}

dt_status dt_cpu_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                      int seq_first, dt_sdpa_heads heads, double scale, dt_local *out,
                      dt_local *lse) {
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check("dt_cpu_sdpa", seq_first, heads, q, k, v, out, lse, &d));
    if (d.B == 0 || d.Tq == 0) return DT_OK;
    sdpa_job J;
    job_init(&J, &d, causal, scale);
    J.q = q, J.k = k, J.v = v, J.out = out, J.lse = lse;
#if DT_ATTN_AVX512
    if (use_avx512(q)) {
        J.work_bytes = dt_attn512_fwd_bytes(&J);
        return job_run(&J, "dt_cpu_sdpa", fwd512_range, d.B);
    }
#endif
    /* q, k^T, v, scores, acc, m tiles and l (double) rows */
    size_t cs = dt_dtype_size(dt_sdpa_lse_dtype(q->dtype));
    J.work_bytes = cs * (size_t)(BR * d.D + d.D * BC + BC * d.Dv + BR * BC + BR * d.Dv + BR + 1) +
                   sizeof(double) * (BR + 1);
    return job_run(&J, "dt_cpu_sdpa", fwd_range, d.B * d.g * J.nqt);
}

dt_status dt_cpu_sdpa_backward(const dt_local *g, const dt_local *q, const dt_local *k,
                               const dt_local *v, const dt_local *lse, int causal, int seq_first,
                               dt_sdpa_heads heads, double scale, dt_local *dq, dt_local *dk,
                               dt_local *dv) {
    const char *fn = "dt_cpu_sdpa_backward";
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check(fn, seq_first, heads, q, k, v, g, lse, &d));
    DT_CHECK(dt_sdpa_grads_check(fn, q, k, v, dq, dk, dv));
    if (d.kvn < d.Hkv) { /* the kv heads no query head here reads get nothing from this block */
        size_t es = dt_dtype_size(q->dtype);
        memset(dk->data, 0, es * dt_shape_numel(dk->shape, dk->ndim));
        memset(dv->data, 0, es * dt_shape_numel(dv->shape, dv->ndim));
    }
    if (d.B == 0) return DT_OK;
    sdpa_job J;
    job_init(&J, &d, causal, scale);
    J.q = q, J.k = k, J.v = v, J.g = g, J.lse = lse, J.dq = dq, J.dk = dk, J.dv = dv;
#if DT_ATTN_AVX512
    if (use_avx512(q)) { /* items by kv head: P and dP made once, dk and dv summed in place */
        J.work_bytes = dt_attn512_bwd_bytes(&J);
        return job_run(&J, fn, bwd512_range, d.B);
    }
#endif
    size_t cs = dt_dtype_size(dt_sdpa_lse_dtype(q->dtype));
    /* dq items: q, dO, k^T, v^T, k, dq tiles and P, dP over the whole key range;
     * dk/dv items: k^T, v^T, q, dO, P, dP, dk, dv tiles */
    size_t dq_elems = (size_t)(BR * d.D + BR * d.Dv + d.D * BC + d.Dv * BC + BC * d.D + BR * d.D) +
                      (size_t)(2 * J.nkt * BR * BC);
    size_t dkv_elems =
        (size_t)(d.D * BC + d.Dv * BC + BR * d.D + BR * d.Dv + 2 * BR * BC + BC * d.D + BC * d.Dv);
    J.dsum = dt_host_alloc(sizeof(double) * (size_t)(d.B * d.R) + 1);
    if (!J.dsum)
        return dt_error(DT_ERR_NOMEM, "%s: no memory for %lld row sums", fn,
                        (long long)(d.B * d.R));
    /* dsum first (the dq items find it), then the kv side reads it */
    J.work_bytes = cs * dq_elems + 1;
    dt_status st = job_run(&J, fn, dq_range, d.B * d.g * J.nqt);
    J.work_bytes = cs * dkv_elems + 1;
    if (st == DT_OK) st = job_run(&J, fn, dkv_range, d.B * J.nkt);
    dt_host_free(J.dsum);
    return st;
}
