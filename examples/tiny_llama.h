/* A small Llama-style model written against dtensor as model code is: token embedding,
 * RMSNorm, causal multi-head attention, SwiGLU MLP, a vocabulary projection and cross_entropy,
 * one block. Weights are drawn with the mesh-independent generator (dt_tensor_randn), so the
 * same seed gives the same model on any mesh and placements; tensor parallelism puts the
 * q/k/v, gate/up and vocabulary projections column-parallel and the output projections
 * row-parallel over one mesh dim, data parallelism shards the batch over another. Used by
 * tests/test_train.c and bench/bench_train.c. */
#ifndef DT_EXAMPLES_TINY_LLAMA_H
#define DT_EXAMPLES_TINY_LLAMA_H

#include <dtensor.h>

typedef struct tl_config {
    int vocab, seq, batch, dim, heads, hidden;
} tl_config;

enum { TL_NWEIGHTS = 12 };

typedef struct tl_model {
    tl_config cfg;
    dt_mesh *mesh; /* borrowed */
    int dp_dim;    /* mesh dim sharding the batch, -1: none */
    int tp_dim;    /* mesh dim of tensor parallelism, -1: none */
    dt_tensor *w[TL_NWEIGHTS]; /* leaves that require grad */
} tl_model;

/* The weights' names, in w's order ("emb", "attn_norm", "wq", ...). */
extern const char *const tl_weight_names[TL_NWEIGHTS];

/* Draws the model's weights (seed: the generator's) in the layout's placements. */
dt_status tl_model_init(tl_model *m, dt_mesh *mesh, const tl_config *cfg, int dp_dim, int tp_dim,
                        uint64_t seed);
void tl_model_free(tl_model *m);

/* Step step's tokens (batch, seq) and next-token targets, the same on every mesh, sharded over
 * the batch on dp_dim. */
dt_status tl_batch(const tl_model *m, int step, dt_tensor **tokens, dt_tensor **targets);

/* The mean cross_entropy of the model's next-token predictions. */
dt_status tl_loss(const tl_model *m, dt_tensor *tokens, dt_tensor *targets, dt_tensor **out);

#endif
