/* What the CPU and CUDA kernels work out alike before touching data: argument checks and
 * index plans on the host, so that both devices accept the same inputs with the same
 * messages and walk them the same way. Plain C, included by .c and .cu files. */
#ifndef DT_OPS_KERNEL_ARGS_H
#define DT_OPS_KERNEL_ARGS_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Broadcasting: out's shape with size-1 dims dropped and dims merged wherever every input
 * steps through them evenly (equal shapes become one flat dim), and each input's strides in
 * elements (0 on broadcast dims). Passed to CUDA kernels by value. */
typedef struct dt_bcast {
    int ndim; /* >= 1 */
    int64_t shape[DT_MAX_NDIM];
    int64_t stride[3][DT_MAX_NDIM];
} dt_bcast;

/* Plans nin (<= 3) inputs broadcast to out; DT_ERR_SHAPE naming fn and the input otherwise. */
dt_status dt_bcast_init(dt_bcast *it, const char *fn, const dt_local *out,
                        const dt_local *const *in, int nin);

/* A matmul's sizes: out (batch..., M, N) = a (batch..., M, K) @ b (batch..., K, N). */
typedef struct dt_matmul_dims {
    int nb;                   /* out's batch dims */
    int64_t M, K, N;
    int64_t sa[DT_MAX_NDIM];  /* a's and b's strides in matrices over out's batch dims, */
    int64_t sb[DT_MAX_NDIM];  /* 0 where they broadcast */
    size_t batches;           /* out's matrices */
    size_t b_batches;         /* b's matrices */
} dt_matmul_dims;

/* Checks dtypes (float only, all equal) and shapes (trans_b: b is (..., N, K)). */
dt_status dt_matmul_check(const char *fn, const dt_local *a, const dt_local *b, int trans_b,
                          const dt_local *out, dt_matmul_dims *dims_out);

/* The kv groups of a grouped-query attention call: k and v may have fewer heads (dim
 * ndim - 3) than q and out, a divisor of q's; every other leading dim matches. *g gets
 * Hq / Hkv (1 without groups); 0 when the shapes are not such a call. */
int dt_gqa_groups(const dt_local *q, const dt_local *k, int64_t *g);

/* scatter_add's checks: float src, i32/i64 index, dim in range, src, index and out of one
 * ndim. */
dt_status dt_scatter_check(const char *fn, const dt_local *src, int dim, const dt_local *index,
                           const dt_local *out);

/* topk's checks (a known dtype, dim in range, 0 <= k <= the dim's size) and x seen as
 * (outer, L, inner) around dim. */
dt_status dt_topk_check(const char *fn, const dt_local *x, int64_t k, int dim, int64_t *outer,
                        int64_t *len, int64_t *inner);

#ifdef __cplusplus
}
#endif
#endif
