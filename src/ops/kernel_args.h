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

/* Whether dt is a float8 dtype: a float8 GEMM takes float8 a and b (either format each) and
 * writes f32, products accumulated in f32. */
static inline int dt_matmul_is_float8(dt_dtype dt) { return dt == DT_F8E4M3 || dt == DT_F8E5M2; }

/* A matmul kernel's trans bits: an operand given with its last two dims swapped, read in place
 * (a GEMM's backward needs g^T x and g w^T; a transposed copy would cost a pass over memory). */
enum {
    DT_MM_TRANS_B = 1, /* b is (..., N, K) */
    DT_MM_TRANS_A = 2  /* a is (..., K, M) */
};

/* Checks dtypes (float only, all equal; or float8 a and b into f32 out) and shapes, with trans
 * the DT_MM_TRANS_* bits. */
dt_status dt_matmul_check(const char *fn, const dt_local *a, const dt_local *b, int trans,
                          const dt_local *out, dt_matmul_dims *dims_out);

/* An attention call's sizes: B kv heads (times the batch), each read by g query heads whose
 * rows are adjacent in q, so a kv head's queries are one (R = g Tq, D) matrix. Rows are
 * numbered heads first, (batch, head, position); with seq_first the blocks hold them as
 * (batch, position, head) and dt_sdpa_row finds each. */
typedef struct dt_sdpa_dims {
    int64_t B, g, Tq, R, Tk, D, Dv;
    int64_t Hq, Hkv; /* heads of q and of k, v (1 for 2-D blocks) */
    /* The kv heads q reads, [kv0, kv0 + kvn) of the Hkv the blocks hold: all of them unless
     * dt_sdpa_heads names a range of a larger call's query heads (then B counts kvn per
     * batch and kv rows are numbered within the range). */
    int64_t kv0, kvn;
    int seq_first;
} dt_sdpa_dims;

/* Where row r (heads-first number: (batch * H + head) * T + position) of a block of H heads
 * and T positions lies: r itself heads first, else its (batch, position, head) number. One
 * definition for the CPU and CUDA kernels, so both address a layout alike. */
#ifdef __CUDACC__
__host__ __device__
#endif
    static inline int64_t
    dt_sdpa_row(int64_t r, int64_t H, int64_t T, int seq_first) {
    if (!seq_first) return r;
    int64_t bh = r / T, t = r % T;
    return (bh / H * T + t) * H + bh % H;
}

/* Where row r of a range of heads lies: r numbered over n heads (batch, head, position) that
 * are heads [h0, h0 + n) of a block of H heads of T positions (k and v read by a range of the
 * query heads: dt_sdpa_dims.kv0, kvn). */
#ifdef __CUDACC__
__host__ __device__
#endif
    static inline int64_t
    dt_sdpa_row_in(int64_t r, int64_t n, int64_t h0, int64_t H, int64_t T, int seq_first) {
    if (n == H) return dt_sdpa_row(r, H, T, seq_first);
    int64_t bh = r / T, t = r % T, b = bh / n, h = bh % n + h0;
    return seq_first ? (b * T + t) * H + h : (b * H + h) * T + t;
}

/* The dtype of attention's log-sum-exp rows: f64 for f64, else f32. */
static inline dt_dtype dt_sdpa_lse_dtype(dt_dtype qdtype) {
    return qdtype == DT_F64 ? DT_F64 : DT_F32;
}

/* Checks an attention call as fn (q, k, v; out of the output's shape, lse NULL or of the
 * rows' shape; every one of q's float dtype but lse) and fills *dims. seq_first: the blocks are
 * (..., T, H, D) and lse (..., Tq, Hq), checked as their heads-first transposes. k and v may have
 * fewer heads (dim ndim - 3) than q, a divisor of q's (grouped-query attention); every other
 * leading dim matches. heads (dt_sdpa_heads, total > 0): q's heads are a range of total, whose
 * kv heads k and v hold all of; the range must be whole groups from a group's start or lie in
 * one group (then kv0, kvn name the kv heads it reads). */
dt_status dt_sdpa_check(const char *fn, int seq_first, dt_sdpa_heads heads, const dt_local *q,
                        const dt_local *k, const dt_local *v, const dt_local *out,
                        const dt_local *lse, dt_sdpa_dims *dims);
/* Checks the backward's outputs: dq, dk, dv of q's, k's and v's shapes and dtype. */
dt_status dt_sdpa_grads_check(const char *fn, const dt_local *q, const dt_local *k,
                              const dt_local *v, const dt_local *dq, const dt_local *dk,
                              const dt_local *dv);

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
