/* Mixture of experts with expert parallelism (torchtitan's MoE, Megatron's all-to-all token
 * dispatcher). A top-k router picks k of E experts per token; the token rows travel to the
 * ranks that hold their experts over an `ep` mesh dim (the counts first, then the rows, with
 * all_to_allv), the local experts run as one grouped GEMM, and the results travel back to be
 * summed with the gate weights. Experts are SwiGLU FFNs, w2(silu(x w1) * (x w3)), stored
 * Shard(0) over ep: each ep rank holds E / ep of them. The layer's input is sharded over ep
 * along a token dim (each ep rank routes its own tokens), as torchtitan's EP has it. */
#ifndef DTENSOR_MOE_H
#define DTENSOR_MOE_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Router scores: a softmax over the E logits, or a sigmoid per expert (DeepSeek-V3). */
typedef enum dt_moe_score { DT_MOE_SOFTMAX = 0, DT_MOE_SIGMOID } dt_moe_score;

/* Which assignments an expert over capacity drops (Megatron's drop policies): the ones with
 * the smallest gates (PROBS, ties dropping the later assignment), or the later ones in token
 * order (POSITION). An assignment is (token t, slot s), ordered t * top_k + s. */
typedef enum dt_moe_drop { DT_MOE_DROP_PROBS = 0, DT_MOE_DROP_POSITION } dt_moe_drop;

typedef struct dt_moe_opts {
    int top_k;          /* experts per token, 1 <= top_k <= E */
    dt_moe_score score; /* how logits become scores; the gates are the top-k scores */
    int route_norm;     /* non-zero: the k gates of a token are divided by their sum */
    /* 0: no token is dropped (the default). > 0: each expert takes at most
     * C = ceil(capacity_factor * N * top_k / E) assignments of a rank's N local tokens
     * (Megatron's capacity, per ep rank before the dispatch); the others are dropped by
     * `drop` and contribute nothing (their gate's gradient is 0). */
    double capacity_factor;
    dt_moe_drop drop;
} dt_moe_opts;

/* The router: logits = x router_w^T, scores by opts->score, and the top_k scores of each
 * token (ties taking the lower expert) as gates. x (..., dim) f32/f64, router_w (E, dim) of
 * x's dtype on x's mesh. gates (..., top_k) of x's dtype, differentiable in x and router_w;
 * experts (..., top_k) i64, the chosen expert ids in decreasing score; scores (..., E) the
 * scores (nullable: not returned). Placements follow dispatch (router_w replicated keeps x's
 * token sharding). The caller owns what is returned; on failure nothing is. Collective over
 * the mesh as ops are; blocks. */
DT_API dt_status dt_moe_router(dt_tensor *x, dt_tensor *router_w, const dt_moe_opts *opts,
                               dt_tensor **gates_out, dt_tensor **experts_out,
                               dt_tensor **scores_out);

/* The load-balancing auxiliary loss of Switch and torchtitan, E * sum_e f_e * P_e, over all
 * tokens of the mesh: f_e = (assignments to expert e) / (N * top_k), counted before any
 * capacity drop, and P_e = the mean over tokens of the token's scores normalised to sum 1 (the
 * softmax's probabilities as they are). 1 when the routing is uniform. scores (..., E) and
 * experts (..., top_k) as dt_moe_router returns them. out: a scalar of scores' dtype,
 * replicated, differentiable in scores (f carries no gradient); the caller scales it by its
 * coefficient. Collective over the mesh; blocks. */
DT_API dt_status dt_moe_aux_loss(dt_tensor *scores, dt_tensor *experts, dt_tensor **out);

/* A routing plan: which of this rank's token rows go to which ep rank, in which order, and
 * how many rows every expert receives. Made once per routing, read by dt_moe_experts (and its
 * backward, which keeps a reference). */
typedef struct dt_moe_plan dt_moe_plan;

/* What a plan holds, for this rank; the arrays are the plan's, valid while it lives. */
typedef struct dt_moe_plan_info {
    int ep, me;      /* the ep group's size and this rank's index in it */
    int64_t experts; /* E; this rank holds experts [me * local_experts, + local_experts) */
    int64_t local_experts;
    int top_k;
    int64_t tokens;   /* N: this rank's tokens */
    int64_t capacity; /* per expert per rank; -1: no limit */
    /* [E]: this rank's assignments to each expert before and after the capacity drop */
    const int64_t *routed_per_expert, *tokens_per_expert;
    int64_t dropped;            /* sum of routed - tokens */
    const int64_t *send_counts; /* [ep]: rows sent to each ep rank */
    int64_t nsend;              /* their sum */
    /* [nsend]: the assignment (t * top_k + s) of each sent row: by destination expert, then
     * by assignment (so by destination rank first) */
    const int64_t *send_order;
    /* [ep * local_experts]: rows from ep rank r for local expert j at [r * local_experts + j]
     * (the counts exchanged: rank r's tokens_per_expert for this rank's experts) */
    const int64_t *recv_per_expert;
    const int64_t *recv_counts; /* [ep]: rows received from each ep rank */
    int64_t nrecv;
} dt_moe_plan_info;

/* The plan for experts (..., top_k) i64 ids in [0, E) (dt_moe_router's), sharded over mesh dim
 * ep_dim along a token dim (not the last; Replicate is as good when ep_dim has one rank), on no
 * mesh dim Partial. E divisible by the ep size.
 * gates (experts' shape and placements, f32 or f64) rank the drops under DT_MOE_DROP_PROBS with
 * a capacity; nullable otherwise. An id out of range is DT_ERR_ARG on the rank that holds it.
 * Exchanges the counts (one all_to_all of i64 over the ep group): collective over ep_dim's
 * group; blocks. The caller owns the plan (dt_moe_plan_destroy). */
DT_API dt_status dt_moe_plan_create(dt_tensor *experts, dt_tensor *gates, int64_t num_experts,
                                    int ep_dim, const dt_moe_opts *opts, dt_moe_plan **out);
/* Drops the caller's reference (a dt_moe_experts output may keep the plan alive). NULL ok. */
DT_API dt_status dt_moe_plan_destroy(dt_moe_plan *plan);
/* Copies the plan's header (its arrays borrowed) into out. Not collective. */
DT_API dt_status dt_moe_plan_info_get(const dt_moe_plan *plan, dt_moe_plan_info *out);

/* Dispatch, experts and combine: out[t] = sum over t's kept assignments (t, s) to expert e of
 * gates[t, s] * w2_e^T (silu(w1_e^T x[t]) * w3_e^T x[t]). x (..., dim) f32/f64 on the CPU, gates
 * (..., top_k) of x's dtype, both with the plan's experts' leading shape and placements;
 * w1, w3 (E, dim, hidden) and w2 (E, hidden, dim) of x's dtype, Shard(0) over the plan's ep dim
 * (or Replicate when it has one rank) and replicated on the others. Rows travel and are computed in
 * f64: one all_to_allv there and one back; the local experts are one grouped GEMM per weight (w1,
 * w3, w2). out: x's shape, dtype and placements. Differentiable in x, gates, w1, w2, w3: backward
 * sends the output's gradient rows the same way and the token gradients back (two all_to_allv); the
 * weights' gradients are Shard(0) over ep and Partial(sum) on mesh dims that shard the tokens.
 * Collective over the ep group; blocks. */
DT_API dt_status dt_moe_experts(dt_tensor *x, dt_tensor *gates, dt_moe_plan *plan, dt_tensor *w1,
                                dt_tensor *w2, dt_tensor *w3, dt_tensor **out);

/* An observer of dt_moe_forward's routing, for explain tools: fn(user, x, router_w, plan) runs
 * after the plan is made, with the layer's input and router weight (borrowed) and the plan
 * (dt_moe_plan_info_get), all valid during the call only. Thread-local: it sees the calls of
 * the thread that set it (under the local runtime, one rank; fn NULL: none, the default). Not
 * collective; fn must not call into the layer. */
typedef void (*dt_moe_observer_fn)(void *user, dt_tensor *x, dt_tensor *router_w,
                                   const dt_moe_plan *plan);
DT_API void dt_moe_set_observer(dt_moe_observer_fn fn, void *user);
/* The whole layer: dt_moe_router, dt_moe_plan_create, dt_moe_experts. router_w (E, dim)
 * replicated; aux_out (nullable) receives dt_moe_aux_loss. The caller owns out and *aux_out;
 * on failure neither is returned. Collective over the mesh; blocks. */
DT_API dt_status dt_moe_forward(dt_tensor *x, dt_tensor *router_w, dt_tensor *w1, dt_tensor *w2,
                                dt_tensor *w3, int ep_dim, const dt_moe_opts *opts, dt_tensor **out,
                                dt_tensor **aux_out);

#ifdef __cplusplus
}
#endif
#endif
