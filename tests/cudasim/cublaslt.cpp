/* cudasim's cuBLASLt: the float8 matmul (CUDA_R_8F_E4M3 / E5M2 operands, per-tensor scale
 * pointers, f32 or bf16 output), computed in f64 from the codes on the stream. It refuses what
 * cuBLASLt refuses for float8, so a caller that passes here would pass on an sm_89+ GPU too. */
#include <cstdint>

#include "core/float8.h"
#include "core/half.h"
#include "cublasLt.h"

struct cudasim_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale_type;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    const float *a_scale = nullptr, *b_scale = nullptr; /* device pointers; NULL: 1 */
};

struct cudasim_lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};

namespace {

bool is_f8(cudaDataType t) {
    return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}

size_t elem_size(cudaDataType t) {
    return is_f8(t) ? 1 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : t == CUDA_R_64F ? 8 : 4;
}

double load(cudaDataType t, const void *p, size_t i) {
    switch (t) {
    case CUDA_R_8F_E4M3:
        return dt_f8_to_f32_fmt(((const uint8_t *)p)[i], dt_f8_format_of(0));
    case CUDA_R_8F_E5M2:
        return dt_f8_to_f32_fmt(((const uint8_t *)p)[i], dt_f8_format_of(1));
    case CUDA_R_16BF:
        return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

void store(cudaDataType t, void *p, size_t i, double v) {
    if (t == CUDA_R_16BF)
        ((uint16_t *)p)[i] = dt_f32_to_bf16((float)v);
    else
        ((float *)p)[i] = (float)v;
}

bool aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* A leading dimension cuBLASLt's float8 kernels take: at least the rows, 16 bytes' multiple. */
bool ld_ok(const cudasim_lt_layout *l) {
    return l->ld >= (int64_t)l->rows && ((size_t)l->ld * elem_size(l->type)) % 16 == 0;
}

} // namespace

extern "C" {

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new cudasim_lt_desc{compute, scale_type};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t size) {
    if (!desc || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        int32_t v;
        __builtin_memcpy(&v, buf, sizeof v);
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->ta : desc->tb) = (cublasOperation_t)v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: {
        if (size != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        const float *p;
        __builtin_memcpy(&p, buf, sizeof p);
        (attr == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER ? desc->a_scale : desc->b_scale) = p;
        return CUBLAS_STATUS_SUCCESS;
    }
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    if (!layout || ld < 0) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cudasim_lt_layout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

/* Only the float8 form: A and B float8 (not both e5m2), "TN" (A transposed, B not), f32
 * compute and scale type, C and D alike in f32 or bf16, every leading dimension and pointer on
 * 16 bytes. Anything else is CUBLAS_STATUS_NOT_SUPPORTED, as cuBLASLt's heuristic answers. */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t adesc, const void *B,
                              cublasLtMatrixLayout_t bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t cdesc, void *D, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    (void)algo, (void)workspace, (void)workspace_bytes;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !adesc || !bdesc || !cdesc || !ddesc || !alpha || !beta || !A || !B || !D)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!is_f8(adesc->type) || !is_f8(bdesc->type) ||
        (adesc->type == CUDA_R_8F_E5M2 && bdesc->type == CUDA_R_8F_E5M2))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->ta != CUBLAS_OP_T || desc->tb != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->compute != CUBLAS_COMPUTE_32F || desc->scale_type != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((ddesc->type != CUDA_R_32F && ddesc->type != CUDA_R_16BF) || cdesc->type != ddesc->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* op(A) is (m, k): A is stored k x m; B is k x n; C and D are m x n. */
    uint64_t k = adesc->rows, m = adesc->cols, n = bdesc->cols;
    if (bdesc->rows != k || cdesc->rows != m || cdesc->cols != n || ddesc->rows != m ||
        ddesc->cols != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!ld_ok(adesc) || !ld_ok(bdesc) || !ld_ok(cdesc) || !ld_ok(ddesc) || !aligned16(A) ||
        !aligned16(B) || !aligned16(D) || (C && !aligned16(C)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    double al = *(const float *)alpha, be = *(const float *)beta; /* host pointers: read now */
    if (be != 0 && !C) return CUBLAS_STATUS_INVALID_VALUE;
    cudasim_lt_desc d = *desc;
    cudasim_lt_layout la = *adesc, lb = *bdesc, lc = *cdesc, ld = *ddesc;
    cudasim_enqueue(stream, [=] {
        /* The scales are device memory: read when the GEMM runs, as the GPU reads them. */
        double s = al * (d.a_scale ? *d.a_scale : 1.0) * (d.b_scale ? *d.b_scale : 1.0);
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                double acc = 0;
                for (uint64_t l = 0; l < k; l++)
                    acc += load(la.type, A, i * (uint64_t)la.ld + l) *
                           load(lb.type, B, j * (uint64_t)lb.ld + l);
                double c = be != 0 ? be * load(lc.type, C, j * (uint64_t)lc.ld + i) : 0;
                store(ld.type, D, j * (uint64_t)ld.ld + i, s * acc + c);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
