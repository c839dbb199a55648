/* CPU grouped GEMM: one call over G groups of rows, each group with its own weight matrix and
 * its own row count (the experts of a MoE layer: expert g's rows are a contiguous block).
 * f64, OpenBLAS dgemm per group when built with it, else an i-k-j loop. Knows nothing of
 * experts, meshes or tokens. */
#include <limits.h>
#include <string.h>

#include "dt_config.h"
#include "ops/kernels.h"

#if DT_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* C (M, N) = op(A) op(B): A is (M, K), or (K, M) when ta; B is (K, N), or (N, K) when tb. */
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const double *A, const double *B,
                 double *C) {
    if (M == 0 || N == 0) return;
#if DT_HAVE_OPENBLAS
    if (M <= INT_MAX && N <= INT_MAX && K <= INT_MAX) {
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)M, (int)N, (int)K, 1.0, A, ta ? (int)M : (int)K, B, tb ? (int)K : (int)N,
                    0.0, C, (int)N);
        return;
    }
#endif
    memset(C, 0, sizeof(double) * (size_t)(M * N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            double a = ta ? A[k * M + i] : A[i * K + k];
            if (a == 0) continue;
            double *c = C + i * N;
            if (tb)
                for (int64_t j = 0; j < N; j++)
                    c[j] += a * B[j * K + k];
            else
                for (int64_t j = 0; j < N; j++)
                    c[j] += a * B[k * N + j];
        }
}

void dt_cpu_grouped_mm(dt_grouped_mm mode, int64_t groups, const int64_t *rows, int64_t K,
                       int64_t N, const double *a, const double *b, double *c) {
    int64_t r0 = 0;
    for (int64_t g = 0; g < groups; g++) {
        int64_t m = rows[g];
        switch (mode) {
        case DT_GROUPED_NN: /* rows of a (m, K) @ b_g (K, N) */
            gemm(0, 0, m, N, K, a + r0 * K, b + g * K * N, c + r0 * N);
            break;
        case DT_GROUPED_NT: /* rows of a (m, K) @ b_g^T, b_g (N, K) */
            gemm(0, 1, m, N, K, a + r0 * K, b + g * N * K, c + r0 * N);
            break;
        case DT_GROUPED_TN: /* c_g (K, N) = rows of a (m, K)^T @ rows of b (m, N) */
            if (m == 0)
                memset(c + g * K * N, 0, sizeof(double) * (size_t)(K * N));
            else
                gemm(1, 0, K, N, m, a + r0 * K, b + r0 * N, c + g * K * N);
            break;
        }
        r0 += m;
    }
}
