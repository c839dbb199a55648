/* Context parallelism: attention with the sequence sharded over a mesh dim (ring attention).
 * Each rank keeps its queries; the key/value blocks travel around the ring of that mesh dim,
 * one step per rank, each step's transfer running on the rank's communication thread while
 * the block already there is computed; the partial results merge with an online softmax (a
 * running max and sum of exponentials per query row, kept as log-sum-exp). For causal
 * attention the sequence may be laid out in the load-balanced order (each rank holds a head
 * chunk and its mirrored tail chunk), so every rank does about the same causal work. */
#ifndef DTENSOR_CONTEXT_H
#define DTENSOR_CONTEXT_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The load-balanced order of a sequence of length T over cp ranks: cut into 2*cp chunks of
 * torch.chunk sizes, laid out as chunk 0, 2cp-1, 1, 2cp-2, ..., cp-1, cp; sharded S(seq) over
 * cp ranks, rank i then holds chunks i and 2cp-1-i (exactly so when 2*cp divides T). Returns
 * the original position of row i of that order, -1 for arguments out of range (T < 0, cp < 1,
 * i not in [0, T)), dt_last_error() then naming the argument. Pure. */
DT_API int64_t dt_cp_position(int64_t T, int cp, int64_t i);

/* What dt_ring_sdpa does at one ring step on this rank, for explain tools: the step's key/value
 * block (the one cp rank `source` holds, its original sequence positions), and where blocks
 * travel. Forward: the block computed at step s came from cp rank me - s, and this rank's
 * current block goes on to `next` (none at the last step). Backward (backward = 1): the same
 * blocks, and the key/value gradient of block `source` so far (this rank's part added) goes
 * on to `next`, which it reaches home after the last step. Ranks are group ranks of the cp
 * dim; next_world / source_world the world ranks. */
typedef struct dt_ring_step {
    int backward, step, nsteps;
    int me, source, next; /* cp group ranks */
    int source_world, next_world;
    int64_t rows; /* the block's rows */
    const int64_t *positions; /* [rows], valid during the call */
    int sends_kv;   /* the current key/value block moves on to next after this step */
    int sends_dkv;  /* backward: the gradient of block source moves on to next */
} dt_ring_step;
typedef void (*dt_ring_observer_fn)(void *user, const dt_ring_step *step);
/* Sets the calling thread's observer of dt_ring_sdpa's steps (fn NULL: none, the default);
 * fn runs on that thread, on every rank whose thread set one (under the local runtime, each
 * rank is a thread). Not collective. */
DT_API void dt_ring_set_observer(dt_ring_observer_fn fn, void *user);

/* Ring attention: softmax(q k^T / sqrt(D) [causal]) v with the sequence dim (ndim - 2)
 * sharded S(ndim - 2) over mesh dim cp_dim. q (..., Hq, T, D), k (..., Hkv, T, D), v (...,
 * Hkv, T, Dv), f32 or f64 on the CPU; Hkv may divide Hq (grouped-query attention: query head h
 * reads kv head h / (Hq / Hkv)). Equal placements: cp_dim shards the sequence, other mesh dims
 * may shard the leading (batch, head) dims, keeping whole groups, or replicate; none is
 * Partial. load_balanced says the
 * sequence dim holds the tokens in dt_cp_position's order (the causal mask then compares
 * original positions); the output keeps that order and q's placements. cp - 1 ring steps
 * forward, each sending this rank's current key/value block (in f64) to the next rank.
 * Differentiable: backward runs the same ring (cp - 1 key/value steps, and cp steps that carry
 * each block's key/value gradient on until it is home), reading the log-sum-exp the forward
 * saved. Collective over the cp_dim group of each rank; blocks. */
DT_API dt_status dt_ring_sdpa(dt_tensor *q, dt_tensor *k, dt_tensor *v, int cp_dim, int causal,
                              int load_balanced, dt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
