/* Collective matmuls on one rank's local blocks (async tensor parallelism, dtensor/async_tp.h):
 * an all_gather over the sequence fused with the matmul that reads it, and a matmul fused with
 * the reduce_scatter of its result over the sequence. Each is cut per tp peer, so one chunk's
 * GEMM runs while the next chunk moves (nn/tp_exchange.h). Plain row-major buffers of f32 or
 * f64 on one device (the CPU, or CUDA through the kernel and memory tables); nothing here
 * knows placements or autograd (nn/async_tp.c does). */
#ifndef DT_NN_COLLECTIVE_MM_H
#define DT_NN_COLLECTIVE_MM_H

#include <stdint.h>

#include "comm/comm_impl.h"

/* One tp group's view of a (B, T, .) activation whose sequence T is cut over the n members
 * in torch.chunk pieces: member o holds rows [dt_cmm_off(o), dt_cmm_off(o) + dt_cmm_rows(o)). */
typedef struct dt_cmm_geom {
    dt_ctx *ctx;   /* for the trace */
    dt_comm *comm; /* the tp group, lane 1 (the communication thread's) */
    int n, me;
    dt_dtype dtype;   /* DT_F32 or DT_F64 */
    dt_device device; /* where every buffer lives */
    int64_t B, T, chunk;
} dt_cmm_geom;

int64_t dt_cmm_rows(const dt_cmm_geom *g, int o);
int64_t dt_cmm_off(const dt_cmm_geom *g, int o);

/* A GEMM's right operand: w (N, K) used transposed (x @ w^T, trans 1), or w (K, N) (trans 0). */
typedef struct dt_cmm_weight {
    const void *data;
    int64_t N;
    int trans;
} dt_cmm_weight;

/* out (M, N) = a (M, K) @ w, on this rank alone (K == 0: zeros), on device dev. */
dt_status dt_cmm_gemm(dt_device dev, dt_dtype dtype, const void *a, int64_t M, int64_t K,
                      const dt_cmm_weight *w, void *out);

/* All-gather then matmul: x (B, dt_cmm_rows(me), K) is this member's chunk; out[i] (B, T, N_i) =
 * all_gather(x) @ w[i] for i < nw. The chunks travel one ring step at a time (n - 1 steps,
 * each one send to the next member and one receive from the previous), each step's GEMMs on
 * the chunk already here. xg (B, T, K), nullable, receives the gathered x. Collective over
 * the group; blocks. */
dt_status dt_cmm_all_gather_mm(const dt_cmm_geom *g, const void *x, int64_t K, int nw,
                               const dt_cmm_weight *w, void *const *out, void *xg);

/* One product of a sum: x (B, T, K) @ w. */
typedef struct dt_cmm_term {
    const void *x;
    int64_t K;
    dt_cmm_weight w;
} dt_cmm_term;

/* Matmul then reduce_scatter: y (B, dt_cmm_rows(me), N) = the sum over members of their rows of
 * me of the sum over terms t[0..nt) (every w[i].N == N). Each member computes one peer's block per
 * step while the block before it moves: n - 1 steps of one send and one receive. ordered 0: a ring
 * that adds each arriving partial sum into the next block (two blocks of memory); ordered 1: each
 * block's partials go straight to their owner (a shifted exchange per step) and are summed there in
 * member order, as the local runtime's reduce_scatter sums (n blocks of memory). Collective
 * over the group; blocks. */
dt_status dt_cmm_mm_reduce_scatter(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, int ordered,
                                   void *y);

/* out (N, M) = a^T @ b for a (R, N), b (R, M) (a weight's gradient from an activation's
 * gradient and the activation). */
dt_status dt_cmm_gemm_tn(dt_device dev, dt_dtype dtype, const void *a, int64_t R, int64_t N,
                         const void *b, int64_t M, void *out);

#endif
