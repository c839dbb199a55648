/* CUDA scaled dot-product attention through cuBLAS, for head dims the flash kernels
 * (attention.cu) do not take: S = q k^T strided over kv heads, scale, causal mask and a stable
 * softmax per row, then S v; the backward rebuilds P from the saved log-sum-exp and runs five
 * more products. S (and dP) are materialised in f32 (f64 for f64) for a bounded number of kv
 * heads at a time. */
#include <math.h>

#include "ops/cuda/attention_gemm.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/kernel_args.h"

#define CHUNK_BYTES ((size_t)256 << 20) /* scores and widened operands per chunk of heads */

static __device__ __forceinline__ float ex(float v) { return expf(v); }
static __device__ __forceinline__ double ex(double v) { return exp(v); }

/* G threads per row of S (rows, Tk), query row % Tq, with the CPU's steps. Forward (dP
 * NULL): the row becomes softmax(S[:lim] * scale), zero past lim (scale and store, max, exp and
 * store, sum in double, times 1 / sum); lse (NULL or rows) gets its log-sum-exp. Backward: S
 * becomes P = exp(S * scale - lse), dP becomes P (dP - sum_j P dP) * scale, both zero past
 * lim. */
template <typename C, int G>
__global__ void __launch_bounds__(G == 32 ? DT_CU_THREADS : G)
    rows_kernel(C *S, C *dP, C *lse, int64_t rows, int64_t Tq, int64_t Tk, int causal,
                C scale) {
    __shared__ C smax[32];
    __shared__ double ssum[32];
    int per = blockDim.x / G, t = threadIdx.x % G;
    for (int64_t row = (int64_t)blockIdx.x * per + threadIdx.x / G; row < rows;
         row += (int64_t)gridDim.x * per) {
        C *s = S + row * Tk;
        int64_t i = row % Tq, lim = causal && i + 1 < Tk ? i + 1 : Tk;
        if (dP) {
            C *dp = dP + row * Tk, l = lse[row];
            double dot = 0.0;
            for (int64_t j = t; j < lim; j += G) {
                C p = ex(s[j] * scale - l);
                s[j] = p;
                dot += (double)p * (double)dp[j];
            }
            C d = (C)dt_cu_group_reduce<G>(dot, dt_cu_sum(), ssum);
            for (int64_t j = t; j < Tk; j += G) {
                dp[j] = j < lim ? s[j] * (dp[j] - d) * scale : (C)0;
                if (j >= lim) s[j] = 0;
            }
            continue;
        }
        C mx = -INFINITY;
        for (int64_t j = t; j < lim; j += G) {
            C v = s[j] * scale;
            s[j] = v;
            mx = dt_cu_max()(mx, v);
        }
        mx = dt_cu_group_reduce<G>(mx, dt_cu_max(), smax);
        double sum = 0.0;
        for (int64_t j = t; j < lim; j += G) {
            C e = ex(s[j] - mx);
            s[j] = e;
            sum += (double)e;
        }
        sum = dt_cu_group_reduce<G>(sum, dt_cu_sum(), ssum);
        C inv = (C)(1.0 / sum);
        for (int64_t j = t; j < Tk; j += G) s[j] = j < lim ? s[j] * inv : (C)0;
        if (lse && t == 0) lse[row] = lim ? mx + (C)log(sum) : (C)-INFINITY;
    }
}

template <typename C>
static void rows(cudaStream_t st, C *S, C *dP, C *lse, int64_t n, int64_t Tq, int64_t Tk,
                 int causal, C scale) {
    switch (dt_cu_row_threads(Tk)) {
    case 32:
        rows_kernel<C, 32><<<dt_cuda_blocks((size_t)n, DT_CU_THREADS / 32), DT_CU_THREADS, 0,
                             st>>>(S, dP, lse, n, Tq, Tk, causal, scale);
        break;
    case 256:
        rows_kernel<C, 256><<<dt_cuda_blocks((size_t)n, 1), 256, 0, st>>>(S, dP, lse, n, Tq, Tk,
                                                                          causal, scale);
        break;
    default:
        rows_kernel<C, 1024><<<dt_cuda_blocks((size_t)n, 1), 1024, 0, st>>>(S, dP, lse, n, Tq, Tk,
                                                                            causal, scale);
        break;
    }
}

static void rows_of(int f64, cudaStream_t st, void *S, void *dP, void *lse, int64_t n,
                    int64_t Tq, int64_t Tk, int causal, double scale) {
    if (f64)
        rows<double>(st, (double *)S, (double *)dP, (double *)lse, n, Tq, Tk, causal, scale);
    else
        rows<float>(st, (float *)S, (float *)dP, (float *)lse, n, Tq, Tk, causal, (float)scale);
}

/* bf16/f16 <-> f32: the products run on f32 copies (as on the CPU). */
template <typename T> __global__ void widen_kernel(const T *src, float *dst, size_t n) {
    DT_CU_FOR(i, n) dst[i] = dt_cu_t<T>::ld(src[i]);
}
template <typename T> __global__ void narrow_kernel(const float *src, T *dst, size_t n) {
    DT_CU_FOR(i, n) dst[i] = dt_cu_t<T>::st(src[i]);
}

/* One operand of a chunk of kv heads: per kv head n elements of t; bf16/f16 ones are widened
 * into (inputs) or narrowed from (outputs) an f32 buffer of the chunk. kv: a k-side operand,
 * whose blocks hold Hkv heads of which the call reads [kv0, kv0 + kvn) (dt_sdpa_dims). */
typedef struct operand {
    const dt_local *t;
    int64_t n;
    int out;
    float *buf;
    int kv;
} operand;

typedef struct chunk {
    const char *fn;
    dt_cuda_rank *r;
    dt_dtype dt;
    int half, f64;
    cudaDataType t;             /* storage type of every product's operands */
    cublasComputeType_t ct1;    /* products of inputs only (exact for bf16/f16 in f32) */
    cublasComputeType_t ct2;    /* products with computed scores */
    int64_t nb;                 /* kv heads per chunk */
    int64_t kv0, kvn, Hkv;      /* the kv heads read (dt_sdpa_dims): a chunk stays in a batch */
    size_t sbytes;              /* one score matrix per kv head */
    void *S, *dP;
} chunk;

static dt_status chunk_init(chunk *c, const char *fn, dt_cuda_rank *r, dt_dtype dt,
                            const dt_sdpa_dims *d, operand *ops, int nops, int backward) {
    *c = chunk{};
    c->fn = fn, c->r = r, c->dt = dt;
    c->half = dt == DT_BF16 || dt == DT_F16, c->f64 = dt == DT_F64;
    size_t cs = c->f64 ? 8 : 4;
    c->t = c->half ? CUDA_R_32F : dt_cu_data_type(dt);
    c->ct1 = c->f64 ? CUBLAS_COMPUTE_64F : c->half ? CUBLAS_COMPUTE_32F : dt_cu_f32_compute(r);
    c->ct2 = c->f64 ? CUBLAS_COMPUTE_64F : dt_cu_f32_compute(r);
    c->sbytes = (size_t)(d->R * d->Tk) * cs;
    size_t per = c->sbytes * (backward ? 2 : 1) + 1; /* + 1: no keys is no scores */
    for (int i = 0; c->half && i < nops; i++) per += (size_t)ops[i].n * 4;
    c->nb = (int64_t)(CHUNK_BYTES / per);
    if (c->nb < 1) c->nb = 1;
    if (c->nb > d->B) c->nb = d->B;
    c->kv0 = d->kv0, c->kvn = d->kvn, c->Hkv = d->Hkv;
    if (c->kvn < c->Hkv && c->nb > c->kvn) c->nb = c->kvn;
    c->S = dt_cuda_alloc(c->sbytes * (size_t)c->nb + 1);
    if (c->S && backward) c->dP = dt_cuda_alloc(c->sbytes * (size_t)c->nb + 1);
    int ok = c->S && (!backward || c->dP);
    for (int i = 0; ok && c->half && i < nops; i++)
        ok = (ops[i].buf = (float *)dt_cuda_alloc((size_t)(ops[i].n * c->nb) * 4 + 1)) != NULL;
    return ok ? DT_OK : dt_error(DT_ERR_NOMEM, "%s: no device memory for %lld kv heads' scores",
                                 fn, (long long)c->nb);
}

static void chunk_free(chunk *c, operand *ops, int nops) {
    for (int i = 0; i < nops; i++) dt_cuda_free(ops[i].buf); /* stream-ordered */
    dt_cuda_free(c->dP);
    dt_cuda_free(c->S);
}

/* Where kv batch-head b (numbered over the heads read) starts in a k-side operand's block. */
static int64_t kv_head_at(const chunk *c, int64_t b) {
    return c->kvn == c->Hkv ? b : b / c->kvn * c->Hkv + c->kv0 + b % c->kvn;
}

/* The kv heads a chunk from b0 may take: up to nb, never past its batch's range of heads (the
 * k side is contiguous only within one). */
static int64_t chunk_len(const chunk *c, int64_t b0, int64_t B) {
    int64_t n = B - b0 < c->nb ? B - b0 : c->nb;
    if (c->kvn < c->Hkv && n > c->kvn - b0 % c->kvn) n = c->kvn - b0 % c->kvn;
    return n;
}

/* Operand o for kv heads [b0, b0 + n): its device data in the compute type (widened first
 * for an input). */
static dt_status operand_at(const chunk *c, operand *o, int64_t b0, int64_t n, void **p) {
    int64_t at = o->kv ? kv_head_at(c, b0) : b0;
    char *src = (char *)o->t->data + (size_t)(at * o->n) * dt_dtype_size(c->dt);
    *p = src;
    if (!c->half) return DT_OK;
    *p = o->buf;
    if (o->out) return DT_OK;
    size_t cnt = (size_t)(n * o->n);
    return dt_cu_visit<false>(c->dt, [&](auto tag) {
        typedef decltype(tag) T;
        if constexpr (sizeof(T) == 2)
            widen_kernel<T><<<dt_cuda_blocks(cnt, DT_CU_THREADS), DT_CU_THREADS, 0,
                              c->r->compute>>>((const T *)src, o->buf, cnt);
        return DT_CUDA_LAUNCH_CHECK(c->fn);
    });
}

/* Narrows an output operand's chunk back into its tensor (bf16/f16). */
static dt_status operand_done(const chunk *c, operand *o, int64_t b0, int64_t n) {
    if (!c->half || !o->out) return DT_OK;
    int64_t at = o->kv ? kv_head_at(c, b0) : b0;
    char *dst = (char *)o->t->data + (size_t)(at * o->n) * 2;
    size_t cnt = (size_t)(n * o->n);
    return dt_cu_visit<false>(c->dt, [&](auto tag) {
        typedef decltype(tag) T;
        if constexpr (sizeof(T) == 2)
            narrow_kernel<T><<<dt_cuda_blocks(cnt, DT_CU_THREADS), DT_CU_THREADS, 0,
                               c->r->compute>>>(o->buf, (T *)dst, cnt);
        return DT_CUDA_LAUNCH_CHECK(c->fn);
    });
}

dt_status dt_cuda_sdpa_gemm(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                            dt_sdpa_heads heads, double scale, dt_local *out, dt_local *lse) {
    const char *fn = "dt_cuda_sdpa";
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check(fn, 0, heads, q, k, v, out, lse, &d));
    DT_CU_RANK(r, fn);
    if (d.B == 0 || d.Tq == 0 || d.Dv == 0) return DT_OK;
    enum { Q, K, V, O, NOPS };
    operand ops[NOPS] = {{q, d.R * d.D, 0, NULL, 0},
                         {k, d.Tk * d.D, 0, NULL, 1},
                         {v, d.Tk * d.Dv, 0, NULL, 1},
                         {out, d.R * d.Dv, 1, NULL, 0}};
    chunk c;
    size_t ls = lse ? dt_dtype_size(lse->dtype) : 0;
    dt_status st = chunk_init(&c, fn, r, q->dtype, &d, ops, NOPS, 0);
    for (int64_t b0 = 0, n; b0 < d.B && st == DT_OK; b0 += n) {
        n = chunk_len(&c, b0, d.B);
        void *p[NOPS];
        for (int i = 0; i < NOPS && st == DT_OK; i++)
            st = operand_at(&c, &ops[i], b0, n, &p[i]);
        if (st != DT_OK) break;
        /* (n, R, D) @ (n, Tk, D)^T -> S (n, R, Tk) */
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, c.t, c.t, c.ct1, DT_CU_TRANS_B, d.R, d.Tk, d.D, p[Q],
                                 d.R * d.D, p[K], d.Tk * d.D, c.S, d.R * d.Tk, n),
                      st, done);
        rows_of(c.f64, r->compute, c.S, NULL,
                lse ? (char *)lse->data + (size_t)(b0 * d.R) * ls : NULL, n * d.R, d.Tq, d.Tk,
                causal, scale);
        DT_CHECK_GOTO(DT_CUDA_LAUNCH_CHECK(fn), st, done);
        /* S (n, R, Tk) @ (n, Tk, Dv) -> (n, R, Dv) */
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, c.t, c.t, c.ct2, 0, d.R, d.Dv, d.Tk, c.S, d.R * d.Tk, p[V],
                                 d.Tk * d.Dv, p[O], d.R * d.Dv, n),
                      st, done);
        st = operand_done(&c, &ops[O], b0, n);
    }
done:
    chunk_free(&c, ops, NOPS);
    return st;
}

dt_status dt_cuda_sdpa_backward_gemm(const dt_local *g, const dt_local *q, const dt_local *k,
                                     const dt_local *v, const dt_local *lse, int causal,
                                     dt_sdpa_heads heads, double scale, dt_local *dq, dt_local *dk,
                                     dt_local *dv) {
    const char *fn = "dt_cuda_sdpa_backward";
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check(fn, 0, heads, q, k, v, g, lse, &d));
    DT_CHECK(dt_sdpa_grads_check(fn, q, k, v, dq, dk, dv));
    DT_CU_RANK(r, fn);
    if (d.B == 0) return DT_OK;
    enum { G, Q, K, V, DQ, DK, DV, NOPS };
    int64_t nq = d.R * d.D, nk = d.Tk * d.D, nv = d.Tk * d.Dv;
    operand ops[NOPS] = {{g, d.R * d.Dv, 0, NULL, 0}, {q, nq, 0, NULL, 0},  {k, nk, 0, NULL, 1},
                         {v, nv, 0, NULL, 1},         {dq, nq, 1, NULL, 0}, {dk, nk, 1, NULL, 1},
                         {dv, nv, 1, NULL, 1}};
    chunk c;
    size_t ls = dt_dtype_size(lse->dtype);
    dt_status st = chunk_init(&c, fn, r, q->dtype, &d, ops, NOPS, 1);
    for (int64_t b0 = 0, n; b0 < d.B && st == DT_OK; b0 += n) {
        n = chunk_len(&c, b0, d.B);
        int64_t sn = d.R * d.Tk;
        void *p[NOPS];
        for (int i = 0; i < NOPS && st == DT_OK; i++) st = operand_at(&c, &ops[i], b0, n, &p[i]);
        if (st != DT_OK) break;
        /* S = q k^T, dP = g v^T: (n, R, Tk) */
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, c.t, c.t, c.ct1, DT_CU_TRANS_B, d.R, d.Tk, d.D, p[Q], nq,
                                 p[K], nk, c.S, sn, n), st, done);
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, c.t, c.t, c.ct1, DT_CU_TRANS_B, d.R, d.Tk, d.Dv, p[G],
                                 d.R * d.Dv, p[V], nv, c.dP, sn, n), st, done);
        rows_of(c.f64, r->compute, c.S, c.dP, (char *)lse->data + (size_t)(b0 * d.R) * ls,
                n * d.R, d.Tq, d.Tk, causal, scale);
        DT_CHECK_GOTO(DT_CUDA_LAUNCH_CHECK(fn), st, done);
        /* dq = dS k (n, R, D); dv = P^T g (n, Tk, Dv); dk = dS^T q (n, Tk, D) */
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, c.t, c.t, c.ct2, 0, d.R, d.D, d.Tk, c.dP, sn, p[K], nk,
                                 p[DQ], nq, n), st, done);
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, c.t, c.t, c.ct2, DT_CU_TRANS_A, d.Tk, d.Dv, d.R, c.S, sn,
                                 p[G], d.R * d.Dv, p[DV], nv, n), st, done);
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, c.t, c.t, c.ct2, DT_CU_TRANS_A, d.Tk, d.D, d.R, c.dP, sn,
                                 p[Q], nq, p[DK], nk, n), st, done);
        for (int i = DQ; i < NOPS && st == DT_OK; i++) st = operand_done(&c, &ops[i], b0, n);
    }
done:
    chunk_free(&c, ops, NOPS);
    return st;
}
