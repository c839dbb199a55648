/* The CPU flash attention's f32 path in AVX-512F (attention.c takes it for f32, bf16 and f16
 * storage when dt_simd_level() allows): fused multiply-add register blocks, one pass per score
 * row (scale, causal mask, max, exp, sum), f32 operands read in place, and a backward that
 * makes each P and dP tile once. Every item owns the rows it writes and sums in a fixed order,
 * so any thread count gives the same bits; other paths agree to a rounding tolerance only. */
#include "ops/cpu/attention_job.h"

#if DT_ATTN_AVX512
#include <immintrin.h>
#include <math.h>

#include "ops/cpu/transpose16.h"

#define A512 __attribute__((target("avx512f")))

/* Query rows x keys per tile: a 32 x 64 score tile (8 KiB), 4 vectors a row. */
enum { QT = 32, KT = 64 };

static inline int64_t up16(int64_t n) {
    return (n + 15) / 16 * 16;
}

/* ---- tile products ------------------------------------------------------------------------- */

/* c (MR rows, ldc apart; NV vectors of 16 columns, the last one's lanes outside `last` neither
 * read nor written) = (acc ? c : 0) + a . b, k terms per element fused in order t = 0, 1, ...:
 * a's element (i, t) at a[i * ai + t * at], b's row t at b + t * ldb. */
#define BLOCK(MR, NV)                                                                              \
    static A512 void blk_##MR##x##NV(float *restrict c, int64_t ldc, const float *restrict a,      \
                                     int64_t ai, int64_t at, const float *restrict b, int64_t ldb, \
                                     int64_t k, __mmask16 last, int acc) {                         \
        __m512 v[MR][NV];                                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                      \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) v[r][u] =                         \
                acc ? _mm512_maskz_loadu_ps(u == NV - 1 ? last : 0xffff, c + r * ldc + 16 * u)     \
                    : _mm512_setzero_ps();                                                         \
        for (int64_t t = 0; t < k; t++) {                                                          \
            __m512 bv[NV];                                                                         \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) bv[u] =                           \
                _mm512_maskz_loadu_ps(u == NV - 1 ? last : 0xffff, b + t * ldb + 16 * u);          \
            _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                                \
                __m512 x = _mm512_set1_ps(a[r * ai + t * at]);                                     \
                _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) v[r][u] =                     \
                    _mm512_fmadd_ps(x, bv[u], v[r][u]);                                            \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                      \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++)                                   \
                _mm512_mask_storeu_ps(c + r * ldc + 16 * u, u == NV - 1 ? last : 0xffff, v[r][u]); \
    }

/* 64 columns: 4 rows (16 accumulators, twice the fused multiply-adds in flight that two ports
 * of 4 cycles' latency need); 32: 8 rows; 16 or fewer: 8 rows of one vector. */
BLOCK(4, 4)
BLOCK(1, 4)
BLOCK(8, 2)
BLOCK(1, 2)
BLOCK(8, 1)
BLOCK(1, 1)
#undef BLOCK

#define ROWS(MR, NV, LAST)                                                                         \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + MR <= m; i += MR)                                                               \
            blk_##MR##x##NV(c + i * ldc + j, ldc, a + i * ai, ai, at, b + j, ldb, k, LAST, acc);   \
        for (; i < m; i++)                                                                         \
            blk_1x##NV(c + i * ldc + j, ldc, a + i * ai, ai, at, b + j, ldb, k, LAST, acc);        \
    } while (0)

/* c (m x n, rows ldc apart) = (acc ? c : 0) + a . b, as the blocks define it. */
static A512 void mm(float *restrict c, int64_t ldc, const float *restrict a, int64_t ai, int64_t at,
                    const float *restrict b, int64_t ldb, int64_t m, int64_t n, int64_t k,
                    int acc) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64)
        ROWS(4, 4, 0xffff);
    for (; j + 32 <= n; j += 32)
        ROWS(8, 2, 0xffff);
    for (; j < n; j += 16) {
        __mmask16 last = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        ROWS(8, 1, last);
    }
}
#undef ROWS

/* ---- row passes ---------------------------------------------------------------------------- */

/* exp of each lane: x = n ln2 + r (|r| <= ln2 / 2), exp(r) by its degree-7 Taylor polynomial
 * in fused multiply-adds, times 2^n by scalef. Below -110 (and -inf) gives 0, NaN stays NaN. */
static inline A512 __m512 vexp(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-110.0f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 5040), _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Lanes [16u, 16u + 16) of a row's first lim entries. */
static inline __mmask16 lanes(int lim, int u) {
    int left = lim - 16 * u;
    return left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

/* Keys of tile [j0, j0 + nc) that query i sees: all, or (causal) those j <= i. */
static inline int visible(int causal, int64_t i, int64_t j0, int nc) {
    if (!causal) return nc;
    int64_t n = i - j0 + 1;
    return n < 0 ? 0 : n > nc ? nc : (int)n;
}

/* The low and high 8 lanes of x. */
static inline A512 __m256 lo256(__m512 x) {
    return _mm512_castps512_ps256(x);
}
static inline A512 __m256 hi256(__m512 x) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
}

/* A forward score row s (nv vectors) in one pass: scaled, masked past lim, its max taken into
 * *m (what earlier tiles summed, l's 16 lanes and acc's Dv entries, rescaled to it), then
 * exp(s scale - *m) stored back as P (zero past lim) and added into l's lanes. */
static A512 void fwd_row(float *s, int lim, int nv, float scale, float *m, double *l, float *acc,
                         int64_t Dv) {
    __m512 x[4], vmax = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale);
    for (int u = 0; u < nv; u++) {
        x[u] = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * u), vs);
        vmax = _mm512_mask_max_ps(vmax, lanes(lim, u), vmax, x[u]);
    }
    float mt = _mm512_reduce_max_ps(vmax), mo = *m, mn = mt > mo ? mt : mo;
    if (mn == -INFINITY) { /* no key with a finite score yet: the row stays empty */
        for (int u = 0; u < nv; u++)
            _mm512_storeu_ps(s + 16 * u, _mm512_setzero_ps());
        return;
    }
    if (mn != mo) { /* rescale what earlier tiles summed against the old max */
        float alpha = mo == -INFINITY ? 0 : _mm512_cvtss_f32(vexp(_mm512_set1_ps(mo - mn)));
        __m512 va = _mm512_set1_ps(alpha);
        __m512d vd = _mm512_set1_pd(alpha);
        _mm512_storeu_pd(l, _mm512_mul_pd(_mm512_loadu_pd(l), vd));
        _mm512_storeu_pd(l + 8, _mm512_mul_pd(_mm512_loadu_pd(l + 8), vd));
        for (int64_t e = 0; e < Dv; e += 16) {
            __mmask16 k = Dv - e >= 16 ? 0xffff : (__mmask16)((1u << (Dv - e)) - 1);
            _mm512_mask_storeu_ps(acc + e, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, acc + e), va));
        }
        *m = mn;
    }
    __m512 vm = _mm512_set1_ps(mn);
    __m512d lo = _mm512_loadu_pd(l), hi = _mm512_loadu_pd(l + 8);
    for (int u = 0; u < nv; u++) {
        __m512 p = _mm512_maskz_mov_ps(lanes(lim, u), vexp(_mm512_sub_ps(x[u], vm)));
        _mm512_storeu_ps(s + 16 * u, p);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(lo256(p)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(hi256(p)));
    }
    _mm512_storeu_pd(l, lo);
    _mm512_storeu_pd(l + 8, hi);
}

/* A backward row: its scores s become P = exp(s scale - lse) (zero past lim; s scale rounded
 * as the forward rounds it, so a row's lone visible key has P exactly 1), and dsum's 16 double
 * lanes take P dP in (delta is subtracted from dP, so its error would not cancel). */
static A512 void prob_row(float *s, const float *dp, int lim, int nv, float scale, float lse,
                          double *dsum) {
    if (lse == -INFINITY) lim = 0; /* a row with no key: P is zero */
    __m512 vs = _mm512_set1_ps(scale), vl = _mm512_set1_ps(lse);
    __m512d lo = _mm512_loadu_pd(dsum), hi = _mm512_loadu_pd(dsum + 8);
    for (int u = 0; u < nv; u++) {
        __mmask16 k = lanes(lim, u);
        __m512 x = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(s + 16 * u), vs), vl);
        __m512 p = _mm512_maskz_mov_ps(k, vexp(x));
        _mm512_storeu_ps(s + 16 * u, p);
        __m512 d = _mm512_maskz_loadu_ps(k, dp + 16 * u);
        lo = _mm512_fmadd_pd(_mm512_cvtps_pd(lo256(p)), _mm512_cvtps_pd(lo256(d)), lo);
        hi = _mm512_fmadd_pd(_mm512_cvtps_pd(hi256(p)), _mm512_cvtps_pd(hi256(d)), hi);
    }
    _mm512_storeu_pd(dsum, lo);
    _mm512_storeu_pd(dsum + 8, hi);
}

/* dp becomes dS scale = P (dP - delta) scale (zero where P is). */
static A512 void ds_row(const float *p, float *dp, int nv, float delta, float scale) {
    __m512 vd = _mm512_set1_ps(delta), vs = _mm512_set1_ps(scale);
    for (int u = 0; u < nv; u++) {
        __m512 x = _mm512_sub_ps(_mm512_loadu_ps(dp + 16 * u), vd);
        _mm512_storeu_ps(dp + 16 * u,
                         _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p + 16 * u), x), vs));
    }
}

/* ---- operands ------------------------------------------------------------------------------ */

/* n rows of t from row0 (one head's, placed as m says) as f32 rows *ld apart: in place for f32,
 * else widened into buf (*ld = cols). */
static const float *rows_f32(const dt_local *t, const sdpa_rows *m, int64_t row0, int64_t n,
                             int64_t cols, float *buf, int64_t *ld) {
    if (t->dtype == DT_F32) {
        *ld = (m->seq_first ? m->H : 1) * cols;
        return (const float *)t->data + (n ? row_at(m, row0, cols) : 0);
    }
    for (int64_t r = 0; r < n; r++) {
        const uint16_t *h = (const uint16_t *)t->data + row_at(m, row0 + r, cols);
        for (int64_t c = 0; c < cols; c++)
            buf[r * cols + c] = t->dtype == DT_BF16 ? dt_bf16_to_f32(h[c]) : dt_f16_to_f32(h[c]);
    }
    *ld = cols;
    return buf;
}

/* Rows [row0, row0 + n) of the output t (one head's) for an item to sum into: in place for f32
 * (*ld their distance), else buf (*ld = cols; store_f32 rounds it into t afterwards). */
static float *out_rows(dt_local *t, const sdpa_rows *m, int64_t row0, int64_t n, int64_t cols,
                       float *buf, int64_t *ld) {
    if (t->dtype != DT_F32 || n == 0) {
        *ld = cols;
        return buf;
    }
    *ld = (m->seq_first ? m->H : 1) * cols;
    return (float *)t->data + row_at(m, row0, cols);
}

/* The transpose of src (rows rows of cols floats, lds apart) as cols rows of dst (ldd apart):
 * dst[c ldd + r] = src[r lds + c] for r < rows, and 0 for rows <= r < width (K^T's padding to
 * whole vectors). 16 x 16 blocks, loaded masked past rows and cols and transposed in
 * registers. */
static A512 void transpose(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                           int64_t cols, int64_t width) {
    for (int64_t r0 = 0; r0 < width; r0 += 16) {
        int64_t nr = rows - r0 < 16 ? (rows - r0 > 0 ? rows - r0 : 0) : 16;
        __mmask16 ks = lanes((int)(width - r0 < 16 ? width - r0 : 16), 0);
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            int w = cols - c0 < 16 ? (int)(cols - c0) : 16;
            __mmask16 kl = lanes(w, 0);
            __m512 v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                v[i] = i < nr ? _mm512_maskz_loadu_ps(kl, src + (r0 + i) * lds + c0)
                              : _mm512_setzero_ps();
            dt_transpose16(v); /* v[j]: column c0 + j of the 16 rows */
            for (int j = 0; j < w; j++)
                _mm512_mask_storeu_ps(dst + (c0 + j) * ldd + r0, ks, v[j]);
        }
    }
}

/* A bump allocator over an item's work memory: 64-byte aligned pieces of n floats. */
typedef struct carve {
    char *p;
} carve;

static float *take(carve *c, int64_t n) {
    float *r = (float *)(void *)(((uintptr_t)c->p + 63) & ~(uintptr_t)63);
    c->p = (char *)(r + up16(n));
    return r;
}

/* Bytes of pieces of n[i] floats as take() cuts them (and the base's alignment slack). */
static size_t bytes_of(const int64_t *n, size_t count) {
    size_t b = 64;
    for (size_t i = 0; i < count; i++)
        b += (size_t)up16(n[i]) * sizeof(float) + 64;
    return b;
}

/* ---- forward: item (kv batch-head b), its group's query heads and tiles in order ------------ */

static void fwd_sizes(const sdpa_job *J, int64_t n[7]) {
    const dt_sdpa_dims *d = &J->d;
    int wide = J->q->dtype != DT_F32;
    int64_t s[7] = {d->D * up16(d->Tk),                /* k^T */
                    wide ? d->Tk * (d->D + d->Dv) : 0, /* k and v widened */
                    wide ? QT * d->D : 0,              /* q widened */
                    QT * KT,                           /* scores */
                    QT * d->Dv,                        /* acc */
                    QT * 32,                           /* l's 16 double lanes */
                    QT};                               /* m */
    memcpy(n, s, sizeof s);
}

size_t dt_attn512_fwd_bytes(const sdpa_job *J) {
    int64_t n[7];
    fwd_sizes(J, n);
    return bytes_of(n, 7);
}

A512 void dt_attn512_fwd_item(const sdpa_job *J, void *w, int64_t it) {
    const dt_sdpa_dims *d = &J->d;
    int64_t b = it, D = d->D, Dv = d->Dv, Tk = d->Tk, Tkp = up16(Tk);
    int64_t n[7];
    fwd_sizes(J, n);
    carve c = {w};
    float *kt = take(&c, n[0]), *kvw = take(&c, n[1]), *qw = take(&c, n[2]), *s = take(&c, n[3]);
    float *acc = take(&c, n[4]), *m = take(&c, n[6]), scale = (float)J->scale;
    double *l = (double *)(void *)take(&c, n[5]);
    int64_t kld, vld, qld;
    const float *k = rows_f32(J->k, &J->rk, b * Tk, Tk, D, kvw, &kld);
    const float *v = rows_f32(J->v, &J->rk, b * Tk, Tk, Dv, kvw + Tk * D, &vld);
    transpose(kt, Tkp, k, kld, Tk, D, Tkp);
    float *lse = J->lse ? (float *)J->lse->data : NULL;
    for (int64_t qt = 0; qt < d->g * J->nqt; qt++) { /* the group's heads, their query tiles */
        int64_t hh = qt / J->nqt, t = qt % J->nqt, i0 = t * QT, row0 = b * d->R + hh * d->Tq + i0;
        int nr = d->Tq - i0 < QT ? (int)(d->Tq - i0) : QT;
        const float *q = rows_f32(J->q, &J->rq, row0, nr, D, qw, &qld);
        for (int r = 0; r < nr; r++)
            m[r] = -INFINITY;
        memset(l, 0, sizeof(double) * (size_t)(nr * 16));
        memset(acc, 0, sizeof(float) * (size_t)(nr * Dv));
        int64_t kend = J->causal && i0 + nr < Tk ? i0 + nr : Tk;
        for (int64_t j0 = 0; j0 < kend; j0 += KT) { /* causal: tiles past the diagonal skipped */
            int nc = kend - j0 < KT ? (int)(kend - j0) : KT, nv = (int)(up16(nc) / 16);
            mm(s, KT, q, qld, 1, kt + j0, Tkp, nr, 16 * nv, D, 0); /* q k^T */
            for (int r = 0; r < nr; r++)
                fwd_row(s + r * KT, visible(J->causal, i0 + r, j0, nc), nv, scale, &m[r],
                        l + r * 16, acc + r * Dv, Dv);
            mm(acc, Dv, s, KT, 1, v + j0 * vld, vld, nr, Dv, nc, 1); /* acc += P v */
        }
        for (int r = 0; r < nr; r++) {
            double sum = _mm512_reduce_add_pd(
                _mm512_add_pd(_mm512_loadu_pd(l + r * 16), _mm512_loadu_pd(l + r * 16 + 8)));
            float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f; /* no key: zeros, lse -inf */
            for (int64_t e = 0; e < Dv; e++)
                acc[r * Dv + e] *= inv;
            if (lse)
                lse[row_at(&J->rq, row0 + r, 1)] = sum > 0 ? m[r] + (float)log(sum) : -INFINITY;
        }
        store_f32(J->out, &J->rq, row0, nr, Dv, acc);
    }
}

/* ---- backward: item (kv batch-head b), its group's query heads and tiles in order ----------- */

static void bwd_sizes(const sdpa_job *J, int64_t n[10]) {
    const dt_sdpa_dims *d = &J->d;
    int wide = J->q->dtype != DT_F32;
    int64_t Tkp = up16(d->Tk), s[10] = {
                                   d->D * Tkp,                         /* k^T */
                                   d->Dv * Tkp,                        /* v^T */
                                   Tkp * (d->D + d->Dv),               /* dk^T, dv^T */
                                   QT * J->nkt * KT,                   /* P of a query tile */
                                   QT * J->nkt * KT,                   /* dP, then dS */
                                   QT * (d->D > d->Dv ? d->D : d->Dv), /* dq; dk, dv rows staged */
                                   QT * 32,                            /* P dP lanes (double) */
                                   wide ? d->Tk * (d->D + d->Dv) : 0,  /* k and v widened */
                                   wide ? QT * (d->D + d->Dv) : 0,     /* q and dO widened */
                                   QT,                                 /* lse */
                               };
    memcpy(n, s, sizeof s);
}

size_t dt_attn512_bwd_bytes(const sdpa_job *J) {
    int64_t n[10];
    bwd_sizes(J, n);
    return bytes_of(n, 10);
}

A512 void dt_attn512_bwd_item(const sdpa_job *J, void *w, int64_t b) {
    const dt_sdpa_dims *d = &J->d;
    int64_t D = d->D, Dv = d->Dv, Tk = d->Tk, Tkp = up16(Tk), n[10];
    bwd_sizes(J, n);
    carve c = {w};
    float *kt = take(&c, n[0]), *vt = take(&c, n[1]), *dkt = take(&c, n[2]), *dvt = dkt + Tkp * D;
    float *P = take(&c, n[3]), *dP = take(&c, n[4]), *dq = take(&c, n[5]);
    double *dsum = (double *)(void *)take(&c, n[6]);
    float *kvw = take(&c, n[7]), *qgw = take(&c, n[8]), *lse = take(&c, n[9]);
    float scale = (float)J->scale;
    int64_t kld, vld, qld, gld;
    const float *k = rows_f32(J->k, &J->rk, b * Tk, Tk, D, kvw, &kld);
    const float *v = rows_f32(J->v, &J->rk, b * Tk, Tk, Dv, kvw + Tk * D, &vld);
    transpose(kt, Tkp, k, kld, Tk, D, Tkp);
    transpose(vt, Tkp, v, vld, Tk, Dv, Tkp);
    memset(dkt, 0, sizeof(float) * (size_t)(Tkp * (D + Dv)));
    int64_t dqld;
    const float *lse_in = (const float *)J->lse->data;
    for (int64_t hh = 0; hh < d->g; hh++)
        for (int64_t t = 0; t < J->nqt; t++) {
            int64_t i0 = t * QT, row0 = b * d->R + hh * d->Tq + i0;
            int nr = d->Tq - i0 < QT ? (int)(d->Tq - i0) : QT;
            const float *q = rows_f32(J->q, &J->rq, row0, nr, D, qgw, &qld);
            const float *g = rows_f32(J->g, &J->rq, row0, nr, Dv, qgw + QT * D, &gld);
            for (int r = 0; r < nr; r++)
                lse[r] = lse_in[row_at(&J->rq, row0 + r, 1)];
            memset(dsum, 0, sizeof(double) * (size_t)(nr * 16));
            float *dqo = out_rows(J->dq, &J->rq, row0, nr, D, dq, &dqld);
            int64_t kend = J->causal && i0 + nr < Tk ? i0 + nr : Tk;
            for (int r = 0; kend == 0 && r < nr; r++) /* no key: dq is zero */
                memset(dqo + r * dqld, 0, sizeof(float) * (size_t)D);
            /* P and dP of every key tile, and dv; their row sums sum_j P dP (delta) */
            for (int64_t j0 = 0; j0 < kend; j0 += KT) {
                int nc = kend - j0 < KT ? (int)(kend - j0) : KT, nv = (int)(up16(nc) / 16);
                float *p = P + j0 / KT * QT * KT, *dp = dP + j0 / KT * QT * KT;
                mm(p, KT, q, qld, 1, kt + j0, Tkp, nr, 16 * nv, D, 0);   /* q k^T */
                mm(dp, KT, g, gld, 1, vt + j0, Tkp, nr, 16 * nv, Dv, 0); /* dO v^T */
                for (int r = 0; r < nr; r++)
                    prob_row(p + r * KT, dp + r * KT, visible(J->causal, i0 + r, j0, nc), nv, scale,
                             lse[r], dsum + r * 16);
                /* dv^T += dO^T P: 64 keys wide, as are the score tiles */
                mm(dvt + j0, Tkp, g, 1, gld, p, KT, Dv, 16 * nv, nr, 1);
            }
            float delta[QT];
            for (int r = 0; r < nr; r++)
                delta[r] = (float)_mm512_reduce_add_pd(_mm512_add_pd(
                    _mm512_loadu_pd(dsum + r * 16), _mm512_loadu_pd(dsum + r * 16 + 8)));
            for (int64_t j0 = 0; j0 < kend; j0 += KT) {
                int nc = kend - j0 < KT ? (int)(kend - j0) : KT, nv = (int)(up16(nc) / 16);
                float *p = P + j0 / KT * QT * KT, *dp = dP + j0 / KT * QT * KT;
                for (int r = 0; r < nr; r++)
                    ds_row(p + r * KT, dp + r * KT, nv, delta[r], scale);
                mm(dqo, dqld, dp, KT, 1, k + j0 * kld, kld, nr, D, nc, j0 > 0); /* dq += dS k */
                mm(dkt + j0, Tkp, q, 1, qld, dp, KT, D, 16 * nv, nr, 1);        /* dk^T += q^T dS */
            }
            if (dqo == dq) store_f32(J->dq, &J->rq, row0, nr, D, dq);
        }
    /* dk and dv rows: in place for f32, else through the dq tile's rows (QT at a time) */
    float *dx[2] = {dkt, dvt};
    dt_local *out[2] = {J->dk, J->dv};
    int64_t cols[2] = {D, Dv};
    for (int i = 0; i < 2; i++)
        for (int64_t j0 = 0; j0 < Tk; j0 += QT) {
            int64_t nj = Tk - j0 < QT ? Tk - j0 : QT, ld;
            float *o = out_rows(out[i], &J->rk, b * Tk + j0, nj, cols[i], dq, &ld);
            transpose(o, ld, dx[i] + j0, Tkp, cols[i], nj, cols[i]); /* rows back */
            if (o == dq) store_f32(out[i], &J->rk, b * Tk + j0, nj, cols[i], dq);
        }
}
#endif
