/* CUDA scaled dot-product attention, flash style, as the CPU computes it (ops/cpu/attention.c):
 * one block per (batch, query head, query tile), key and value tiles through shared memory, an
 * online softmax, and no (Tq, Tk) matrix; the backward recomputes P per tile from the saved
 * log-sum-exp, dq per query tile and dk/dv per (batch, kv head, key tile), so no two blocks
 * write one element (no atomics: the same bits every run). Head dims above DMAX take the
 * cuBLAS path (attention_gemm.cu). */
#include <math.h>

#include "ops/cuda/attention_gemm.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/kernel_args.h"

namespace {

/* Head dims up to DMAX; NT threads a block. Tiles: query rows x keys, sized so each kernel's
 * four DMAX-wide tiles fit the 48 KiB of static shared memory (f32 34 KiB, f64 33 KiB). */
constexpr int DMAX = 128, NT = 128;
template <typename C> struct tile;
template <> struct tile<float> { static constexpr int BQ = 16, BK = 16; };
template <> struct tile<double> { static constexpr int BQ = 8, BK = 8; };

/* One call's sizes (dt_sdpa_dims) and options, by value to every block. */
struct plan {
    int64_t g, Tq, R, Tk, D, Dv, nqt, nkt;
    int causal;
    double scale;
    int64_t Hq, Hkv; /* where rows lie (dt_sdpa_row): q-side Hq heads of Tq, k-side Hkv of Tk */
    int seq_first;
    int64_t kv0, kvn; /* the kv heads read, k-side rows numbered over them (dt_sdpa_row_in) */
};

/* The memory row of heads-first row r of q, out, g, dq and lse; of k, v, dk and dv. */
__device__ __forceinline__ int64_t qrow(const plan &p, int64_t r) {
    return dt_sdpa_row(r, p.Hq, p.Tq, p.seq_first);
}
__device__ __forceinline__ int64_t krow_at(const plan &p, int64_t r) {
    return dt_sdpa_row_in(r, p.kvn, p.kv0, p.Hkv, p.Tk, p.seq_first);
}

__device__ __forceinline__ float ex(float v) {
    return expf(v);
}
__device__ __forceinline__ double ex(double v) {
    return exp(v);
}

/* Rows [row0, row0 + n) of src (rows of cols numbered over heads [h0, h0 + hn) of H heads of
 * T rows, placed as seq_first says) into dst's first rows, widened; the rest of dst zero. */
template <typename T, typename C, int ROWS>
__device__ void load_rows(C (*dst)[DMAX], const T *src, int64_t row0, int n, int64_t cols,
                          int64_t hn, int64_t h0, int64_t H, int64_t Tn, int seq_first) {
    for (int i = threadIdx.x; i < ROWS * DMAX; i += NT) {
        int r = i / DMAX, c = i % DMAX;
        dst[r][c] =
            r < n && c < cols
                ? dt_cu_t<T>::ld(src[dt_sdpa_row_in(row0 + r, hn, h0, H, Tn, seq_first) * cols + c])
                : (C)0;
    }
}

/* Keys of [j0, j0 + nc) that query i sees (as on the CPU). */
__device__ __forceinline__ int visible(int causal, int64_t i, int64_t j0, int nc) {
    if (!causal) return nc;
    int64_t n = i - j0 + 1;
    return n < 0 ? 0 : n > nc ? nc : (int)n;
}

/* The keys query tile [i0, i0 + nr) reads. */
__device__ __forceinline__ int64_t key_end(const plan &p, int64_t i0, int nr) {
    return p.causal && i0 + nr < p.Tk ? i0 + nr : p.Tk;
}

template <typename C> __device__ __forceinline__ C dot(const C *a, const C *b, int64_t n) {
    C s = 0;
    for (int64_t d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

/* Block it: query tile it % nqt of query head it / nqt (batch-major). */
template <typename C>
__device__ __forceinline__ int64_t query_rows(const plan &p, int64_t it, int64_t *i0, int *nr) {
    constexpr int BQ = tile<C>::BQ;
    int64_t bh = it / p.nqt, b = bh / p.g;
    *i0 = it % p.nqt * BQ;
    *nr = p.Tq - *i0 < BQ ? (int)(p.Tq - *i0) : BQ;
    return b * p.R + bh % p.g * p.Tq + *i0;
}

template <typename T, typename C>
__global__ void __launch_bounds__(NT)
    fwd_kernel(const T *q, const T *k, const T *v, T *out, C *lse, plan p) {
    constexpr int BQ = tile<C>::BQ, BK = tile<C>::BK, L = NT / BQ, PER = DMAX / L;
    __shared__ C Qs[BQ][DMAX], Ks[BK][DMAX], Vs[BK][DMAX], S[BQ][BK], m[BQ], alpha[BQ];
    __shared__ double l[BQ];
    int64_t it = blockIdx.x, i0;
    int nr, r = threadIdx.x / L, lane = threadIdx.x % L;
    int64_t row0 = query_rows<C>(p, it, &i0, &nr), kv = it / p.nqt / p.g * p.Tk;
    load_rows<T, C, BQ>(Qs, q, row0, nr, p.D, p.Hq, 0, p.Hq, p.Tq, p.seq_first);
    if (threadIdx.x < BQ) m[threadIdx.x] = -INFINITY, l[threadIdx.x] = 0;
    C acc[PER];
    for (int e = 0; e < PER; e++)
        acc[e] = 0;
    int64_t jend = key_end(p, i0, nr);
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
        int nc = jend - j0 < BK ? (int)(jend - j0) : BK;
        __syncthreads(); /* the last tile's readers are done */
        load_rows<T, C, BK>(Ks, k, kv + j0, nc, p.D, p.kvn, p.kv0, p.Hkv, p.Tk, p.seq_first);
        load_rows<T, C, BK>(Vs, v, kv + j0, nc, p.Dv, p.kvn, p.kv0, p.Hkv, p.Tk, p.seq_first);
        __syncthreads();
        for (int i = threadIdx.x; i < BQ * BK; i += NT)
            S[i / BK][i % BK] = dot<C>(Qs[i / BK], Ks[i % BK], p.D) * (C)p.scale;
        __syncthreads();
        if ((int)threadIdx.x < nr) { /* the row's online softmax step, as the CPU's fwd_tile */
            int rr = threadIdx.x, lim = visible(p.causal, i0 + rr, j0, nc);
            C mx = m[rr], a = 1;
            for (int c = 0; c < lim; c++)
                if (S[rr][c] > mx || S[rr][c] != S[rr][c]) mx = S[rr][c];
            if (lim == 0 || mx == -INFINITY) {
                for (int c = 0; c < BK; c++)
                    S[rr][c] = 0;
            } else {
                if (mx != m[rr]) a = m[rr] == -INFINITY ? (C)0 : ex(m[rr] - mx);
                l[rr] *= a, m[rr] = mx;
                double sum = 0;
                for (int c = 0; c < BK; c++) {
                    S[rr][c] = c < lim ? ex(S[rr][c] - mx) : (C)0;
                    sum += (double)S[rr][c];
                }
                l[rr] += sum;
            }
            alpha[rr] = a;
        }
        __syncthreads();
        if (r < nr)
            for (int e = 0; e < PER; e++) {
                int col = lane + e * L;
                if (col >= p.Dv) break;
                C x = acc[e] * alpha[r];
                for (int c = 0; c < nc; c++)
                    x += S[r][c] * Vs[c][col];
                acc[e] = x;
            }
    }
    __syncthreads();
    if (r >= nr) return;
    C inv = l[r] > 0 ? (C)(1.0 / l[r]) : (C)0; /* no key: zeros, lse -inf */
    for (int e = 0; e < PER && lane + e * L < p.Dv; e++)
        out[qrow(p, row0 + r) * p.Dv + lane + e * L] = dt_cu_t<T>::st(acc[e] * inv);
    if (lse && lane == 0) lse[qrow(p, row0 + r)] = l[r] > 0 ? m[r] + (C)log(l[r]) : (C)-INFINITY;
}

/* P and dP (or dS) of one (query tile, key tile) pair from the staged tiles: P = exp(s scale -
 * lse) where visible, else 0; with dsum, dp becomes dS scale = P (dP - dsum) scale. */
template <typename C>
__device__ void probs(C (*P)[tile<C>::BK], C (*dP)[tile<C>::BK], C (*Qs)[DMAX], C (*Gs)[DMAX],
                      C (*Ks)[DMAX], C (*Vs)[DMAX], const C *lse, const double *dsum, int64_t row0,
                      int64_t i0, int nr, int64_t j0, int nc, const plan &p) {
    constexpr int BQ = tile<C>::BQ, BK = tile<C>::BK;
    for (int i = threadIdx.x; i < BQ * BK; i += NT) {
        int rr = i / BK, c = i % BK;
        int vis = rr < nr && c < visible(p.causal, i0 + rr, j0, nc);
        C pr = vis ? ex(dot<C>(Qs[rr], Ks[c], p.D) * (C)p.scale - lse[qrow(p, row0 + rr)]) : (C)0;
        C dp = vis ? dot<C>(Gs[rr], Vs[c], p.Dv) : (C)0;
        if (dsum) dp = vis ? pr * (dp - (C)dsum[row0 + rr]) * (C)p.scale : (C)0;
        P[rr][c] = pr, dP[rr][c] = dp;
    }
}

/* dq of a query tile, and its rows' dsum = sum_j P dP (a first sweep over the keys). */
template <typename T, typename C>
__global__ void __launch_bounds__(NT) dq_kernel(const T *g, const T *q, const T *k, const T *v,
                                                const C *lse, T *dq, double *dsum, plan p) {
    constexpr int BQ = tile<C>::BQ, BK = tile<C>::BK, L = NT / BQ, PER = DMAX / L;
    __shared__ C Qs[BQ][DMAX], Gs[BQ][DMAX], Ks[BK][DMAX], Vs[BK][DMAX], P[BQ][BK], dP[BQ][BK];
    int64_t it = blockIdx.x, i0;
    int nr, r = threadIdx.x / L, lane = threadIdx.x % L;
    int64_t row0 = query_rows<C>(p, it, &i0, &nr), kv = it / p.nqt / p.g * p.Tk;
    load_rows<T, C, BQ>(Qs, q, row0, nr, p.D, p.Hq, 0, p.Hq, p.Tq, p.seq_first);
    load_rows<T, C, BQ>(Gs, g, row0, nr, p.Dv, p.Hq, 0, p.Hq, p.Tq, p.seq_first);
    if ((int)threadIdx.x < nr) dsum[row0 + threadIdx.x] = 0;
    C acc[PER];
    for (int e = 0; e < PER; e++)
        acc[e] = 0;
    int64_t jend = key_end(p, i0, nr);
    for (int sweep = 0; sweep < 2; sweep++)
        for (int64_t j0 = 0; j0 < jend; j0 += BK) {
            int nc = jend - j0 < BK ? (int)(jend - j0) : BK;
            __syncthreads();
            load_rows<T, C, BK>(Ks, k, kv + j0, nc, p.D, p.kvn, p.kv0, p.Hkv, p.Tk, p.seq_first);
            load_rows<T, C, BK>(Vs, v, kv + j0, nc, p.Dv, p.kvn, p.kv0, p.Hkv, p.Tk, p.seq_first);
            __syncthreads();
            probs<C>(P, dP, Qs, Gs, Ks, Vs, lse, sweep ? dsum : NULL, row0, i0, nr, j0, nc, p);
            __syncthreads();
            if (!sweep) {
                if ((int)threadIdx.x < nr) { /* key order, in double, as the CPU */
                    int rr = threadIdx.x, lim = visible(p.causal, i0 + rr, j0, nc);
                    double s = dsum[row0 + rr];
                    for (int c = 0; c < lim; c++)
                        s += (double)P[rr][c] * dP[rr][c];
                    dsum[row0 + rr] = s;
                }
                continue;
            }
            if (r < nr)
                for (int e = 0; e < PER; e++) {
                    int col = lane + e * L;
                    if (col >= p.D) break;
                    C x = acc[e];
                    for (int c = 0; c < nc; c++)
                        x += dP[r][c] * Ks[c][col];
                    acc[e] = x;
                }
        }
    if (r >= nr) return;
    for (int e = 0; e < PER && lane + e * L < p.D; e++)
        dq[qrow(p, row0 + r) * p.D + lane + e * L] = dt_cu_t<T>::st(acc[e]);
}

/* dk and dv of a key tile of one kv head: the group's query heads and their tiles in order. */
template <typename T, typename C>
__global__ void __launch_bounds__(NT)
    dkv_kernel(const T *g, const T *q, const T *k, const T *v, const C *lse, const double *dsum,
               T *dk, T *dv, plan p) {
    constexpr int BQ = tile<C>::BQ, BK = tile<C>::BK, L = NT / BK, PER = DMAX / L;
    __shared__ C Qs[BQ][DMAX], Gs[BQ][DMAX], Ks[BK][DMAX], Vs[BK][DMAX], P[BQ][BK], dS[BQ][BK];
    int64_t b = blockIdx.x / p.nkt, j0 = blockIdx.x % p.nkt * BK, krow = b * p.Tk + j0;
    int nc = p.Tk - j0 < BK ? (int)(p.Tk - j0) : BK, c = threadIdx.x / L, lane = threadIdx.x % L;
    load_rows<T, C, BK>(Ks, k, krow, nc, p.D, p.kvn, p.kv0, p.Hkv, p.Tk, p.seq_first);
    load_rows<T, C, BK>(Vs, v, krow, nc, p.Dv, p.kvn, p.kv0, p.Hkv, p.Tk, p.seq_first);
    C ak[PER], av[PER];
    for (int e = 0; e < PER; e++)
        ak[e] = av[e] = 0;
    for (int64_t hh = 0; hh < p.g; hh++)
        for (int64_t t = 0; t < p.nqt; t++) {
            int64_t i0 = t * BQ, row0 = b * p.R + hh * p.Tq + i0;
            int nr = p.Tq - i0 < BQ ? (int)(p.Tq - i0) : BQ;
            if (p.causal && i0 + nr - 1 < j0) continue; /* no row sees these keys */
            __syncthreads();
            load_rows<T, C, BQ>(Qs, q, row0, nr, p.D, p.Hq, 0, p.Hq, p.Tq, p.seq_first);
            load_rows<T, C, BQ>(Gs, g, row0, nr, p.Dv, p.Hq, 0, p.Hq, p.Tq, p.seq_first);
            __syncthreads();
            probs<C>(P, dS, Qs, Gs, Ks, Vs, lse, dsum, row0, i0, nr, j0, nc, p);
            __syncthreads();
            if (c >= nc) continue;
            for (int e = 0; e < PER; e++) {
                int col = lane + e * L;
                if (col < p.Dv) {
                    C x = av[e];
                    for (int rr = 0; rr < nr; rr++)
                        x += P[rr][c] * Gs[rr][col];
                    av[e] = x;
                }
                if (col < p.D) {
                    C x = ak[e];
                    for (int rr = 0; rr < nr; rr++)
                        x += dS[rr][c] * Qs[rr][col];
                    ak[e] = x;
                }
            }
        }
    if (c >= nc) return;
    for (int e = 0; e < PER; e++) {
        int col = lane + e * L;
        if (col < p.D) dk[krow_at(p, krow + c) * p.D + col] = dt_cu_t<T>::st(ak[e]);
        if (col < p.Dv) dv[krow_at(p, krow + c) * p.Dv + col] = dt_cu_t<T>::st(av[e]);
    }
}

template <typename C> plan make_plan(const dt_sdpa_dims &d, int causal, double scale) {
    return plan{d.g,
                d.Tq,
                d.R,
                d.Tk,
                d.D,
                d.Dv,
                (d.Tq + tile<C>::BQ - 1) / tile<C>::BQ,
                (d.Tk + tile<C>::BK - 1) / tile<C>::BK,
                causal,
                scale,
                d.Hq,
                d.Hkv,
                d.seq_first,
                d.kv0,
                d.kvn};
}

/* The cuBLAS path reads heads-first rows only. */
dt_status gemm_layout_check(const char *fn, const dt_sdpa_dims &d) {
    if (!d.seq_first) return DT_OK;
    return dt_error(DT_ERR_ARG,
                    "%s: seq_first (..., T, H, D) takes head dims up to %d here "
                    "(D = %lld, Dv = %lld); use heads-first inputs",
                    fn, DMAX, (long long)d.D, (long long)d.Dv);
}

} // namespace

dt_status dt_cuda_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                       int seq_first, dt_sdpa_heads heads, double scale, dt_local *out,
                       dt_local *lse) {
    const char *fn = "dt_cuda_sdpa";
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check(fn, seq_first, heads, q, k, v, out, lse, &d));
    if (d.D > DMAX || d.Dv > DMAX) {
        DT_CHECK(gemm_layout_check(fn, d));
        return dt_cuda_sdpa_gemm(q, k, v, causal, heads, scale, out, lse);
    }
    DT_CU_RANK(r, fn);
    if (d.B == 0 || d.Tq == 0) return DT_OK;
    return dt_cu_visit<false>(q->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        typedef typename dt_cu_t<T>::C C;
        plan p = make_plan<C>(d, causal, scale);
        fwd_kernel<T, C><<<(unsigned)(d.B * d.g * p.nqt), NT, 0, r->compute>>>(
            (const T *)q->data, (const T *)k->data, (const T *)v->data, (T *)out->data,
            lse ? (C *)lse->data : (C *)NULL, p);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}

dt_status dt_cuda_sdpa_backward(const dt_local *g, const dt_local *q, const dt_local *k,
                                const dt_local *v, const dt_local *lse, int causal, int seq_first,
                                dt_sdpa_heads heads, double scale, dt_local *dq, dt_local *dk,
                                dt_local *dv) {
    const char *fn = "dt_cuda_sdpa_backward";
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check(fn, seq_first, heads, q, k, v, g, lse, &d));
    DT_CHECK(dt_sdpa_grads_check(fn, q, k, v, dq, dk, dv));
    DT_CU_RANK(r, fn);
    if (d.kvn < d.Hkv) { /* the kv heads no query head here reads get nothing from this block */
        size_t es = dt_dtype_size(q->dtype);
        DT_CHECK(
            dt_cuda_status(cudaMemsetAsync(dk->data, 0, es * dt_cu_numel(dk), r->compute), fn));
        DT_CHECK(
            dt_cuda_status(cudaMemsetAsync(dv->data, 0, es * dt_cu_numel(dv), r->compute), fn));
    }
    if (d.D > DMAX || d.Dv > DMAX) {
        DT_CHECK(gemm_layout_check(fn, d));
        return dt_cuda_sdpa_backward_gemm(g, q, k, v, lse, causal, heads, scale, dq, dk, dv);
    }
    if (d.B == 0) return DT_OK;
    double *dsum = (double *)dt_cuda_alloc(sizeof(double) * (size_t)(d.B * d.R) + 1);
    if (!dsum)
        return dt_error(DT_ERR_NOMEM, "%s: no device memory for %lld row sums", fn,
                        (long long)(d.B * d.R));
    dt_status st = dt_cu_visit<false>(q->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        typedef typename dt_cu_t<T>::C C;
        plan p = make_plan<C>(d, causal, scale);
        const T *pg = (const T *)g->data, *pq = (const T *)q->data, *pk = (const T *)k->data,
                *pv = (const T *)v->data;
        const C *pl = (const C *)lse->data;
        if (d.Tq > 0) /* dsum first: the dk/dv blocks read it */
            dq_kernel<T, C><<<(unsigned)(d.B * d.g * p.nqt), NT, 0, r->compute>>>(
                pg, pq, pk, pv, pl, (T *)dq->data, dsum, p);
        DT_CHECK(DT_CUDA_LAUNCH_CHECK(fn));
        if (d.Tk > 0)
            dkv_kernel<T, C><<<(unsigned)(d.B * p.nkt), NT, 0, r->compute>>>(
                pg, pq, pk, pv, pl, dsum, (T *)dk->data, (T *)dv->data, p);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
    dt_cuda_free(dsum); /* stream-ordered */
    return st;
}
