/* CUDA scaled dot-product attention as the CPU computes it: S = q k^T (cuBLAS, strided over
 * batch and head), scale, causal mask and a stable softmax per row, then S v. S is
 * materialised in f32 (f64 for f64) for a bounded number of heads at a time; not a flash kernel. */
#include <math.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/kernel_args.h"

#define CHUNK_BYTES ((size_t)256 << 20) /* S (and widened v, out) per chunk of heads */

static __device__ __forceinline__ float ex(float v) { return expf(v); }
static __device__ __forceinline__ double ex(double v) { return exp(v); }

/* Row i (query i mod Tq) of S (rows, Tk) becomes softmax(S[i, :lim] * scale), zero past lim,
 * with the CPU's steps: scale and store, max, exp and store, sum in double, times 1 / sum. */
template <typename C, int G>
__global__ void __launch_bounds__(G == 32 ? DT_CU_THREADS : G)
    softrows_kernel(C *S, int64_t rows, int64_t Tq, int64_t Tk, int causal, C scale) {
    __shared__ C smax[32];
    __shared__ double ssum[32];
    int per = blockDim.x / G, t = threadIdx.x % G;
    for (int64_t row = (int64_t)blockIdx.x * per + threadIdx.x / G; row < rows;
         row += (int64_t)gridDim.x * per) {
        C *s = S + row * Tk;
        int64_t i = row % Tq, lim = causal && i + 1 < Tk ? i + 1 : Tk;
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
    }
}

template <typename C>
static void softrows(cudaStream_t st, C *S, int64_t rows, int64_t Tq, int64_t Tk, int causal,
                     C scale) {
    switch (dt_cu_row_threads(Tk)) {
    case 32:
        softrows_kernel<C, 32><<<dt_cuda_blocks((size_t)rows, DT_CU_THREADS / 32), DT_CU_THREADS,
                                 0, st>>>(S, rows, Tq, Tk, causal, scale);
        break;
    case 256:
        softrows_kernel<C, 256><<<dt_cuda_blocks((size_t)rows, 1), 256, 0, st>>>(S, rows, Tq, Tk,
                                                                                causal, scale);
        break;
    default:
        softrows_kernel<C, 1024><<<dt_cuda_blocks((size_t)rows, 1), 1024, 0, st>>>(
            S, rows, Tq, Tk, causal, scale);
        break;
    }
}

/* bf16/f16 <-> f32 for the second product, whose left operand S is f32 (as on the CPU). */
template <typename T> __global__ void widen_kernel(const T *src, float *dst, size_t n) {
    DT_CU_FOR(i, n) dst[i] = dt_cu_t<T>::ld(src[i]);
}
template <typename T> __global__ void narrow_kernel(const float *src, T *dst, size_t n) {
    DT_CU_FOR(i, n) dst[i] = dt_cu_t<T>::st(src[i]);
}

static int64_t batch_of(const dt_local *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim - 2; d++) n *= t->shape[d];
    return n;
}

dt_status dt_cuda_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                       double scale, dt_local *out) {
    const char *fn = "dt_cuda_sdpa";
    dt_dtype dt = q->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(dt));
    if (k->dtype != dt || v->dtype != dt || out->dtype != dt)
        return dt_error(DT_ERR_DTYPE, "%s: q, k, v and out dtypes differ", fn);
    if (q->ndim < 2 || k->ndim != q->ndim || v->ndim != q->ndim || out->ndim != q->ndim)
        return dt_error(DT_ERR_SHAPE, "%s: q, k, v, out need the same ndim >= 2", fn);
    int nd = q->ndim;
    int64_t g, Tq = q->shape[nd - 2], D = q->shape[nd - 1];
    int64_t Tk = k->shape[nd - 2], Dv = v->shape[nd - 1];
    /* B kv heads (times batch), each read by the g query heads adjacent in q: one
     * (g * Tq, D) matrix per kv head. */
    int64_t B = batch_of(k);
    if (!dt_gqa_groups(q, k, &g))
        return dt_error(DT_ERR_SHAPE, "%s: k's leading dims differ from q's other than by a "
                                      "divisor of q's heads (dim %d)", fn, nd - 3);
    if (batch_of(v) != B || batch_of(out) != batch_of(q) || k->shape[nd - 1] != D ||
        v->shape[nd - 2] != Tk || out->shape[nd - 2] != Tq || out->shape[nd - 1] != Dv)
        return dt_error(DT_ERR_SHAPE, "%s: shapes disagree (q (%lld, %lld), k (%lld, %lld), v "
                        "(%lld, %lld))", fn, (long long)Tq, (long long)D,
                        (long long)k->shape[nd - 2], (long long)k->shape[nd - 1],
                        (long long)v->shape[nd - 2], (long long)Dv);
    DT_CU_RANK(r, fn);
    size_t es = dt_dtype_size(dt);
    if (B == 0 || Tq == 0 || Dv == 0) return DT_OK;
    int64_t Tq1 = Tq; /* the causal mask's query is row % Tq1 */
    Tq *= g;
    if (Tk == 0) /* no keys: every output row is an empty sum */
        return dt_cuda_status(cudaMemsetAsync(out->data, 0, (size_t)(B * Tq * Dv) * es,
                                              r->compute), fn);

    int half = dt == DT_BF16 || dt == DT_F16, f64 = dt == DT_F64;
    size_t cs = f64 ? 8 : 4;
    cudaDataType t = dt_cu_data_type(dt), st_t = f64 ? CUDA_R_64F : CUDA_R_32F;
    /* bf16/f16 products are exact in f32: no TF32 for q k^T on those. */
    cublasComputeType_t ct1 = f64 ? CUBLAS_COMPUTE_64F : half ? CUBLAS_COMPUTE_32F
                                                              : dt_cu_f32_compute(r);
    cublasComputeType_t ct2 = f64 ? CUBLAS_COMPUTE_64F : dt_cu_f32_compute(r);
    size_t per = (size_t)(Tq * Tk) * cs + (half ? (size_t)(Tk * Dv + Tq * Dv) * 4 : 0);
    int64_t nb = (int64_t)(CHUNK_BYTES / per);
    if (nb < 1) nb = 1;
    if (nb > B) nb = B;
    dt_status st = DT_OK;
    void *S = dt_cuda_alloc((size_t)(nb * Tq * Tk) * cs);
    float *vf = NULL, *of = NULL;
    if (S && half) {
        vf = (float *)dt_cuda_alloc((size_t)(nb * Tk * Dv) * 4);
        of = vf ? (float *)dt_cuda_alloc((size_t)(nb * Tq * Dv) * 4) : NULL;
    }
    if (!S || (half && !of)) {
        st = DT_ERR_NOMEM;
        goto done;
    }
    for (int64_t b0 = 0; b0 < B; b0 += nb) {
        int64_t n = B - b0 < nb ? B - b0 : nb;
        const char *qb = (const char *)q->data + (size_t)(b0 * Tq * D) * es;
        const char *kb = (const char *)k->data + (size_t)(b0 * Tk * D) * es;
        const char *vb = (const char *)v->data + (size_t)(b0 * Tk * Dv) * es;
        char *ob = (char *)out->data + (size_t)(b0 * Tq * Dv) * es;
        /* (n, Tq, D) @ (n, Tk, D)^T -> S (n, Tq, Tk) */
        DT_CHECK_GOTO(dt_cu_gemm(r, fn, t, st_t, ct1, 1, Tq, Tk, D, qb, Tq * D, kb, Tk * D, S,
                                 Tq * Tk, n), st, done);
        if (f64)
            softrows<double>(r->compute, (double *)S, n * Tq, Tq1, Tk, causal, scale);
        else
            softrows<float>(r->compute, (float *)S, n * Tq, Tq1, Tk, causal, (float)scale);
        DT_CHECK_GOTO(DT_CUDA_LAUNCH_CHECK(fn), st, done);
        /* S (n, Tq, Tk) @ (n, Tk, Dv) -> (n, Tq, Dv) */
        if (!half) {
            DT_CHECK_GOTO(dt_cu_gemm(r, fn, t, t, ct2, 0, Tq, Dv, Tk, S, Tq * Tk, vb, Tk * Dv, ob,
                                     Tq * Dv, n), st, done);
            continue;
        }
        size_t nv = (size_t)(n * Tk * Dv), no = (size_t)(n * Tq * Dv);
        st = dt_cu_visit<false>(dt, [&](auto tag) {
            typedef decltype(tag) T;
            if constexpr (sizeof(T) == 2) {
                widen_kernel<T><<<dt_cuda_blocks(nv, DT_CU_THREADS), DT_CU_THREADS, 0,
                                  r->compute>>>((const T *)vb, vf, nv);
                DT_CHECK(DT_CUDA_LAUNCH_CHECK(fn));
                DT_CHECK(dt_cu_gemm(r, fn, CUDA_R_32F, CUDA_R_32F, ct2, 0, Tq, Dv, Tk, S, Tq * Tk,
                                    vf, Tk * Dv, of, Tq * Dv, n));
                narrow_kernel<T><<<dt_cuda_blocks(no, DT_CU_THREADS), DT_CU_THREADS, 0,
                                   r->compute>>>(of, (T *)ob, no);
                return DT_CUDA_LAUNCH_CHECK(fn);
            }
            return DT_OK;
        });
        if (st != DT_OK) goto done;
    }
done:
    dt_cuda_free(of); /* stream-ordered: the queued kernels still see them */
    dt_cuda_free(vf);
    dt_cuda_free(S);
    return st;
}
