/* A small transformer written for FSDP units and activation checkpointing over plain
 * parameter arrays: a token embedding, `blocks` pre-norm blocks (RMSNorm, causal attention,
 * RMSNorm, SwiGLU MLP, residuals), a final RMSNorm and a vocabulary head, trained on
 * next-token targets of a learnable rule. The same seed gives the same model on any mesh:
 * tensor parallelism puts q/k/v, gate/up and the head column-parallel and the output
 * projections row-parallel over tp_dim; the batch is sharded over dp_dim (and rep_dim); with
 * fsdp the parameters are sharded over dp_dim in units (the embedding, each block, the final
 * norm with the head) and each block's forward is an activation checkpointing region. Used
 * by tests/nn/test_fsdp.c and bench/bench_fsdp.c. */
#ifndef DT_EXAMPLES_FSDP_MODEL_H
#define DT_EXAMPLES_FSDP_MODEL_H

#include <dtensor.h>

typedef struct fm_config {
    int vocab, seq, batch, dim, heads, hidden, blocks;
} fm_config;

typedef struct fm_layout {
    int ndim, shape[2];
    const char *names[2];
    int dp_dim, rep_dim, tp_dim; /* -1: none. rep_dim: HSDP's replicate dim */
    int fsdp;                    /* shard parameters over dp_dim (else replicate them) */
    dt_fsdp_options fsdp_options;
    dt_ac_mode ac;
} fm_layout;

enum { FM_BLOCK_PARAMS = 9 }; /* attn_norm, wq, wk, wv, wo, mlp_norm, w1, w3, w2 */

typedef struct fm_model {
    fm_config cfg;
    fm_layout l;
    dt_mesh *mesh; /* borrowed */
    int np;        /* 1 + blocks * FM_BLOCK_PARAMS + 2 */
    dt_tensor **p; /* leaves requiring grad (sharded over dp_dim with fsdp) */
    dt_fsdp *fsdp; /* NULL without fsdp */
} fm_model;

/* Parameter i's global shape (returns its ndim). */
int fm_param_shape(const fm_config *c, int i, int64_t *shape);

dt_status fm_init(fm_model *m, dt_mesh *mesh, const fm_config *cfg, const fm_layout *l,
                  uint64_t seed);
void fm_free(fm_model *m);

/* The collectives of one kind this rank issued on the group of l's dp dim since the last
 * dt_comm_stats_reset (0 without a dp dim). */
int64_t fm_issued_on_dp(dt_ctx *ctx, const fm_layout *l, dt_coll_kind kind);

/* Step step's tokens (batch, seq) and targets, the same on every mesh. */
dt_status fm_batch(const fm_model *m, int step, dt_tensor **tokens, dt_tensor **targets);

/* The mean cross_entropy of the model's predictions. */
dt_status fm_loss(fm_model *m, dt_tensor *tokens, dt_tensor *targets, dt_tensor **out);

#endif
