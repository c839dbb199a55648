/* CUDA matmul: cuBLAS GEMMs on row-major data with NumPy batch broadcasting. Batch dims are
 * collapsed on the host into as few strided-batched calls as the broadcast layout allows
 * (stride 0 for a broadcast operand); bf16/f16 run with f32 compute and one rounding. float8
 * operands take cuBLASLt's float8 GEMM where the device (sm_89+) and the shape allow it, else
 * they are widened exactly to f32 on the device and take the f32 GEMM (as on the CPU). */
#include <limits.h>
#include <stdint.h>

#include "core/float8.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/kernel_args.h"

#define MAX_BATCH 65535 /* batches per cuBLAS call; larger counts are split */

static size_t storage_size(cudaDataType t) {
    switch (t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    default: return 4;
    }
}

/* Row-major C (M, N) = A (M, K) B (K, N) is column-major C^T (N, M) = B^T (N, K) A^T (K, M):
 * cuBLAS's first operand is our B (transposed when B is given as (N, K)), its second our A
 * (transposed when A is given as (K, M)). */
dt_status dt_cu_gemm(dt_cuda_rank *r, const char *fn, cudaDataType ab, cudaDataType c,
                     cublasComputeType_t ct, int trans, int64_t M, int64_t N, int64_t K,
                     const void *A, int64_t sa, const void *B, int64_t sb, void *C, int64_t sc,
                     int64_t batch) {
    if (batch == 0 || M == 0 || N == 0) return DT_OK;
    size_t es = storage_size(c), ab_es = storage_size(ab);
    if (K == 0) { /* empty sums; all-zero bits are 0 in every float dtype */
        for (int64_t i = 0; i < batch; i++) {
            if (sc == M * N) { /* dense: one memset for all of them */
                DT_CHECK(dt_cuda_status(cudaMemsetAsync(C, 0, (size_t)(batch * M * N) * es,
                                                        r->compute), fn));
                break;
            }
            DT_CHECK(dt_cuda_status(cudaMemsetAsync((char *)C + (size_t)(i * sc) * es, 0,
                                                    (size_t)(M * N) * es, r->compute), fn));
        }
        return DT_OK;
    }
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return dt_error(DT_ERR_UNSUPPORTED, "%s: GEMM (%lld, %lld, %lld) exceeds cuBLAS's int "
                        "dims", fn, (long long)M, (long long)N, (long long)K);
    static const float one_f = 1.0f, zero_f = 0.0f;
    static const double one_d = 1.0, zero_d = 0.0;
    int f64 = ct == CUBLAS_COMPUTE_64F || ct == CUBLAS_COMPUTE_64F_PEDANTIC;
    const void *alpha = f64 ? (const void *)&one_d : (const void *)&one_f;
    const void *beta = f64 ? (const void *)&zero_d : (const void *)&zero_f;
    int tb = trans & DT_CU_TRANS_B, ta = trans & DT_CU_TRANS_A;
    cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    int n = (int)N, m = (int)M, k = (int)K, ldb = tb ? k : n, lda = ta ? m : k;
    for (int64_t i0 = 0; i0 < batch; i0 += MAX_BATCH) {
        int cnt = (int)(batch - i0 < MAX_BATCH ? batch - i0 : MAX_BATCH);
        const char *a = (const char *)A + (size_t)(i0 * sa) * ab_es;
        const char *b = (const char *)B + (size_t)(i0 * sb) * ab_es;
        char *cp = (char *)C + (size_t)(i0 * sc) * es;
        cublasStatus_t s;
        if (cnt == 1)
            s = cublasGemmEx(r->blas, op_b, op_a, n, m, k, alpha, b, ab, ldb, a, ab, lda, beta,
                             cp, c, n, ct, CUBLAS_GEMM_DEFAULT);
        else
            s = cublasGemmStridedBatchedEx(r->blas, op_b, op_a, n, m, k, alpha, b, ab, ldb, sb,
                                           a, ab, lda, sa, beta, cp, c, n, sc, cnt, ct,
                                           CUBLAS_GEMM_DEFAULT);
        DT_CHECK(dt_cublas_status(s, fn));
    }
    return DT_OK;
}

__global__ void widen_f8_kernel(const uint8_t *src, float *dst, size_t n, int e5m2) {
    dt_f8_format f = dt_f8_format_of(e5m2);
    DT_CU_FOR(i, n) dst[i] = dt_f8_to_f32_fmt(src[i], f);
}

/* t widened into a new f32 block (*w; free w->data with dt_cuda_free, stream-ordered). */
static dt_status widen_f8(dt_cuda_rank *r, const dt_local *t, dt_local *w) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    *w = *t;
    w->dtype = DT_F32;
    if (!(w->data = dt_cuda_alloc(n * sizeof(float) + 1)))
        return dt_error(DT_ERR_NOMEM, "dt_cuda_matmul: no memory to widen %zu float8 values", n);
    if (n)
        widen_f8_kernel<<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            (const uint8_t *)t->data, (float *)w->data, n, t->dtype == DT_F8E5M2);
    return dt_cuda_status(cudaGetLastError(), "dt_cuda_matmul");
}

static unsigned long long lt_gemms;

unsigned long long dt_cuda_float8_lt_gemms(void) {
    return __atomic_load_n(&lt_gemms, __ATOMIC_RELAXED);
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Whether cuBLASLt's float8 GEMM takes this product: an sm_89+ device; b given as (N, K), not
 * broadcast over a batch (so a's rows are one (rows, K) matrix); not e5m2 x e5m2 (cuBLASLt has
 * no such kernel); K and N multiples of 16 and 16-byte pointers (its float8 layout rules). */
static int lt_f8_takes(dt_cuda_rank *r, const dt_local *a, const dt_local *b, int trans,
                       const dt_matmul_dims *m, const dt_local *out) {
    if (trans != DT_MM_TRANS_B || m->b_batches != 1 || m->K == 0 || m->K % 16 || m->N % 16 ||
        (a->dtype == DT_F8E5M2 && b->dtype == DT_F8E5M2) || out->dtype != DT_F32 ||
        !aligned16(a->data) || !aligned16(b->data) || !aligned16(out->data))
        return 0;
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, r->device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, r->device) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor >= 89;
}

static cudaDataType lt_f8_type(dt_dtype dt) {
    return dt == DT_F8E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* Row-major out (rows, N) = a (rows, K) @ b (N, K)^T in cuBLASLt's column-major terms:
 * D (N x rows) = op(A) B with A = b stored K x N (ld K) and transposed, B = a stored K x rows
 * (ld K): the "TN" form cuBLASLt requires for float8. Scales are left at cuBLASLt's default
 * (1): dt_mm's float8 product is unscaled, and dt_mm_scaled divides afterwards. */
static dt_status lt_f8_gemm(dt_cuda_rank *r, const dt_local *a, const dt_local *b, int64_t rows,
                            int64_t N, int64_t K, dt_local *out) {
    const char *fn = "dt_cuda_matmul (cuBLASLt float8)";
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    static const float one = 1.0f, zero = 0.0f;
    dt_status st;
    DT_CHECK_GOTO(dt_cublas_status(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                   fn), st, done);
    DT_CHECK_GOTO(dt_cublas_status(cublasLtMatmulDescSetAttribute(
                                       desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), fn),
                  st, done);
    DT_CHECK_GOTO(dt_cublas_status(cublasLtMatmulDescSetAttribute(
                                       desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), fn),
                  st, done);
    DT_CHECK_GOTO(dt_cublas_status(cublasLtMatrixLayoutCreate(&la, lt_f8_type(b->dtype),
                                                              (uint64_t)K, (uint64_t)N, K), fn),
                  st, done);
    DT_CHECK_GOTO(dt_cublas_status(cublasLtMatrixLayoutCreate(&lb, lt_f8_type(a->dtype),
                                                              (uint64_t)K, (uint64_t)rows, K),
                                   fn), st, done);
    DT_CHECK_GOTO(dt_cublas_status(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)N,
                                                              (uint64_t)rows, N), fn), st, done);
    /* beta 0: C is not read; cuBLASLt still wants its layout, D's serves. */
    DT_CHECK_GOTO(dt_cublas_status(cublasLtMatmul(r->lt, desc, &one, b->data, la, a->data, lb,
                                                  &zero, out->data, ld, out->data, ld, NULL,
                                                  r->workspace, r->workspace_bytes, r->compute),
                                   fn), st, done);
    __atomic_fetch_add(&lt_gemms, 1ull, __ATOMIC_RELAXED);
done:
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return st;
}

/* The kernel table's trans bits are cuBLAS helper's, so they pass through unchanged. */
static_assert((int)DT_MM_TRANS_A == (int)DT_CU_TRANS_A && (int)DT_MM_TRANS_B == (int)DT_CU_TRANS_B,
              "dt_cu_gemm's trans bits");

dt_status dt_cuda_matmul(const dt_local *a, const dt_local *b, int trans, dt_local *out) {
    dt_matmul_dims m;
    DT_CHECK(dt_matmul_check("dt_cuda_matmul", a, b, trans, out, &m));
    if (dt_matmul_is_float8(a->dtype)) {
        DT_CU_RANK(r8, "dt_cuda_matmul");
        int64_t rows = (int64_t)m.batches * m.M;
        if (rows == 0 || m.N == 0) return DT_OK;
        if (lt_f8_takes(r8, a, b, trans, &m, out))
            return lt_f8_gemm(r8, a, b, rows, m.N, m.K, out);
        dt_local wa, wb;
        wa.data = wb.data = NULL;
        dt_status st = widen_f8(r8, a, &wa);
        if (st == DT_OK) st = widen_f8(r8, b, &wb);
        if (st == DT_OK) st = dt_cuda_matmul(&wa, &wb, trans, out);
        dt_cuda_free(wb.data);
        dt_cuda_free(wa.data);
        return st;
    }
    dt_dtype dt = a->dtype;
    int nb = m.nb;
    int64_t M = m.M, K = m.K, N = m.N;
    const int64_t *sa = m.sa, *sb = m.sb;
    DT_CU_RANK(r, "dt_cuda_matmul");
    size_t batches = m.batches;
    if (batches == 0 || M == 0 || N == 0) return DT_OK;

    cudaDataType t = dt_cu_data_type(dt);
    cublasComputeType_t ct = dt == DT_F64 ? CUBLAS_COMPUTE_64F
                             : dt == DT_F32 ? dt_cu_f32_compute(r) : CUBLAS_COMPUTE_32F;
    int64_t mk = M * K, kn = K * N, mn = M * N;
    /* (B..., M, K) @ (K, N): one GEMM over B*M rows, as on the CPU (not for a transposed a,
     * whose matrices' rows are not one matrix's). */
    if (m.b_batches == 1 && (!(trans & DT_MM_TRANS_A) || batches == 1) &&
        (int64_t)batches * M <= INT_MAX)
        return dt_cu_gemm(r, "dt_cuda_matmul", t, t, ct, trans, (int64_t)batches * M, N, K,
                          a->data, 0, b->data, 0, out->data, 0, 1);

    /* Collapse out's batch dims: drop size-1 dims, merge a dim into the one before when both
     * operands step through them evenly. The innermost run becomes one strided-batched call,
     * the rest a host loop (only when a and b broadcast along different dims). */
    int nd = 0;
    int64_t size[DT_MAX_NDIM], ja[DT_MAX_NDIM], jb[DT_MAX_NDIM];
    for (int d = 0; d < nb; d++) {
        int64_t sz = out->shape[d];
        if (sz == 1) continue;
        if (nd > 0 && ja[nd - 1] == sa[d] * sz && jb[nd - 1] == sb[d] * sz) {
            size[nd - 1] *= sz;
            ja[nd - 1] = sa[d];
            jb[nd - 1] = sb[d];
        } else {
            size[nd] = sz;
            ja[nd] = sa[d];
            jb[nd] = sb[d];
            nd++;
        }
    }
    if (nd == 0) { /* every batch dim has size 1 */
        size[0] = 1;
        ja[0] = jb[0] = 0;
        nd = 1;
    }
    int64_t inner = size[nd - 1], idx[DT_MAX_NDIM] = {0}, oa = 0, ob = 0;
    size_t es = dt_dtype_size(dt), calls = batches / (size_t)inner;
    for (size_t i = 0; i < calls; i++) {
        DT_CHECK(dt_cu_gemm(r, "dt_cuda_matmul", t, t, ct, trans, M, N, K,
                            (const char *)a->data + (size_t)(oa * mk) * es, ja[nd - 1] * mk,
                            (const char *)b->data + (size_t)(ob * kn) * es, jb[nd - 1] * kn,
                            (char *)out->data + i * (size_t)(inner * mn) * es, mn, inner));
        for (int d = nd - 2; d >= 0; d--) {
            oa += ja[d];
            ob += jb[d];
            if (++idx[d] < size[d]) break;
            oa -= ja[d] * size[d];
            ob -= jb[d] * size[d];
            idx[d] = 0;
        }
    }
    return DT_OK;
}
