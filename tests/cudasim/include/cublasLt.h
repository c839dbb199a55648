/* cudasim stand-in (see cudasim.h): the slice of cuBLASLt that dtensor uses, its float8 GEMM.
 * Descriptors, layouts and attributes as cuBLASLt spells them; cublasLtMatmul computes in f64
 * from the codes and the scales, and refuses what cuBLASLt refuses for float8 operands
 * (tests/cudasim/cublaslt.cpp). */
#ifndef CUDASIM_CUBLASLT_H
#define CUDASIM_CUBLASLT_H

#include "cudasim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cudasim_lt_desc *cublasLtMatmulDesc_t;
typedef struct cudasim_lt_layout *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulAlgo_t {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
} cublasLtMatmulDescAttributes_t;

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t size);
/* Column-major rows x cols with leading dimension ld (elements). */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
/* D = alpha * (a_scale * op(A)) (b_scale * op(B)) + beta * C; algo NULL: cuBLASLt's own pick. */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t adesc, const void *B,
                              cublasLtMatrixLayout_t bdesc, const void *beta, const void *C,
                              cublasLtMatrixLayout_t cdesc, void *D, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
