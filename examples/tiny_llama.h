/* A small Llama-style model written once, as torchtitan's Llama: token embedding, blocks of
 * RMSNorm + causal grouped-query attention with RoPE + RMSNorm + SwiGLU MLP, a final norm and
 * a vocabulary projection into cross_entropy. Parameters live in a registry under torchtitan's
 * names (tok_embeddings.weight, layers.0.attention.wq.weight, ...), one group per block, and
 * are drawn with the mesh-independent generator, so one seed gives one model on any mesh.
 * How it runs in parallel is a layout: data parallel over one mesh dim (batch sharded;
 * parameters replicated or FSDP-sharded), tensor parallel over another through a plan of
 * PyTorch's styles (tl_plan), optionally with sequence parallelism and loss parallelism,
 * context parallel over a third (the sequence sharded in the load-balanced order, attention by
 * ring, parameters replicated there with their gradients reduced like DDP's); with
 * cfg.experts each block's MLP is a MoE whose experts are sharded over an ep dim
 * (tiny_llama_moe.c). Used by tests/nn/test_train.c, tests/nn/test_parallel_train.c,
 * bench/bench_train.c and examples/train.c. */
#ifndef DT_EXAMPLES_TINY_LLAMA_H
#define DT_EXAMPLES_TINY_LLAMA_H

#include <dtensor.h>

typedef struct tl_config {
    int vocab, seq, batch, dim, layers, heads, kv_heads, hidden;
    int experts, top_k; /* experts > 0: a MoE feed-forward per block (tiny_llama_moe.c) */
} tl_config;

typedef struct tl_layout {
    int dp_dim, tp_dim;    /* mesh dims; -1: none */
    int dp_replicate_dim;  /* HSDP: a second data-parallel mesh dim, parameters replicated
                              there (0 = none, else the mesh dim + 1) */
    int fsdp;              /* parameters Shard over dp (else replicated: DDP) */
    int sequence_parallel; /* norms and residuals sharded over the sequence on tp */
    int loss_parallel;     /* logits stay vocab-sharded into cross_entropy */
    dt_ac_mode ac;         /* activation checkpointing per block (dtensor/ac.h) */
    int64_t ac_budget;     /* ac measured: the bytes each block may keep for backward on each
                              rank (dt_ac_policy_options.budget_bytes) */
    int ac_measure_steps;  /* ac measured: steps measured before choosing (0: the default, 1) */
    int fsdp_units;        /* with fsdp: FSDP units declared as torchtitan's (dt_fully_shard):
                              one per block and a root unit (tok_embeddings, norm, output);
                              one all_gather per unit, prefetch, reshard after forward but for
                              the root and the last block */
    int fsdp_no_coalesce;  /* with fsdp_units: each unit gathers and reduces alone, as FSDP2
                              (dt_fully_shard_options.no_coalesce) */
    int cp_dim;            /* context parallel: the sequence sharded over this mesh dim in
                              dt_cp_position's order, attention by dt_ring_sdpa (0 = none, else
                              the mesh dim + 1) */
    int ep_dim;            /* MoE: the expert-parallel mesh dim + 1 (0 = none: then a one-rank
                              mesh dim must be named ep); the batch is sharded there too */
    const dt_style_rule *plan; /* nplan > 0: this tensor-parallel plan instead of tl_plan's
                                  (borrowed; a pipeline stage keeps the rules naming its part) */
    int nplan;
    int float8;            /* the blocks' linears (attention and dense MLP) as torchao's
                              Float8Linear (dt_module_set_float8); the output projection stays
                              f32, as torchtitan's float8 filter leaves it */
    int float8_all_gather; /* with fsdp_units: the units' parameters gathered in e4m3
                              (torchtitan's enable_fsdp_float8_all_gather) */
    int bf16;              /* torchtitan's mixed_precision_param = "bfloat16": every linear
                              (blocks and output projection) multiplies bf16-rounded inputs and
                              weights with f32 accumulation (dt_module_set_bf16), and with
                              fsdp_units the units gather their parameters in bf16; master
                              weights, gradients and optimizer state stay f32. With float8,
                              the blocks' linears stay float8 and the output projection is
                              bf16, as torchtitan runs float8 under bf16 mixed precision */
    /* with sequence_parallel: the sequence's all_gathers and reduce_scatters around the tp
       linears overlapped with their GEMMs, per tp peer (dtensor/async_tp.h) */
    dt_async_tp_mode async_tp;
} tl_layout;

/* A block's MoE feed-forward (tiny_llama_moe.c): the router (E, dim) and the experts' w1, w3
 * (E, dim, hidden) and w2 (E, hidden, dim), by registry index. */
typedef struct tl_moe {
    dt_module self;
    int router, w1, w2, w3;
} tl_moe;

typedef struct tl_block {
    dt_module attention_norm, ffn_norm;
    dt_nn_attention attention;
    dt_nn_mlp feed_forward; /* dense */
    tl_moe moe;             /* cfg.experts > 0 */
} tl_block;

typedef struct tl_model {
    tl_config cfg;
    tl_layout layout;
    dt_mesh *mesh;     /* borrowed */
    dt_params *params; /* owned */
    dt_module tok_embeddings, norm, output;
    tl_block *layers;     /* cfg.layers */
    dt_tensor *cos, *sin; /* rope tables (seq, head_dim / 2), replicated (context parallel:
                             rows in the load-balanced order, sharded S(0) over cp) */
    dt_ac_policy *ac;     /* layout.ac measured: the blocks' policy (owned) */
} tl_model;

/* The layout's mesh dims found by name on mesh (torchtitan's names): dp or dp_shard (the batch
 * sharded, parameters FSDP-sharded with fsdp), dp_replicate (HSDP's replicated dim), tp, cp and
 * ep; a name mesh lacks leaves its dim at none. The other fields stay as they are. Called on the
 * mesh the layers run on (a pipeline stage's sub-mesh has no pp dim, so its dims are not the
 * whole mesh's positions). */
void tl_layout_find_dims(const dt_mesh *mesh, tl_layout *layout);

/* The tensor-parallel plan of layout (torchtitan's for Llama), into rules[0..cap); *n_out rules. */
dt_status tl_plan(const tl_layout *layout, dt_style_rule *rules, int cap, int *n_out);

/* Declares, parallelizes (tl_plan, and layout's data parallelism) and materializes the model. */
dt_status tl_model_init(tl_model *m, dt_mesh *mesh, const tl_config *cfg, const tl_layout *layout,
                        uint64_t seed);
void tl_model_free(tl_model *m);
/* Part of the model, for a pipeline stage (tiny_llama_pp.h): the token embedding when embed,
 * blocks [first, end), the final norm and output projection when head. Its parameters have the
 * values they have in the whole model of seed (the generator is advanced past the ones declared
 * before them by drawing those and dropping them). tl_loss needs the whole model. */
typedef struct tl_part {
    int first, end, embed, head;
} tl_part;
dt_status tl_model_init_part(tl_model *m, dt_mesh *mesh, const tl_config *cfg,
                             const tl_layout *layout, uint64_t seed, const tl_part *part);

/* Step step's tokens (batch, seq), sharded over the batch on the data-parallel dims (and with
 * context parallel, the sequence in dt_cp_position's order, sharded over cp), and next-token
 * targets, replicated (cross_entropy then checks the labels without a collective; in the same
 * order), the same on every mesh: from text (n bytes; windows at positions drawn from step)
 * when text is set, else from a synthetic rule (mostly the previous token + 1). */
dt_status tl_batch(const tl_model *m, const unsigned char *text, size_t n, int step,
                   dt_tensor **tokens, dt_tensor **targets);

/* tl_batch with the rows laid out for a pipeline of nmicro micro-batches, which cuts each
 * data-parallel shard into nmicro chunks (dt_pipeline_step): micro-batch i then holds samples
 * [i B / nmicro, (i + 1) B / nmicro) of tl_batch's order, the same rows as a one-rank run's
 * micro-batch i whatever the data-parallel degree. (A mean loss does not care; MoE's aux loss,
 * a product of per-micro-batch means, does.) nmicro = 1 is tl_batch. */
dt_status tl_batch_micro(const tl_model *m, const unsigned char *text, size_t n, int step,
                         int nmicro, dt_tensor **tokens, dt_tensor **targets);

/* tl_batch_micro of the windows of text starting at starts[0..batch) (each seq + 1 bytes: the
 * tokens and their next-token targets), sample b of the batch the window at starts[b]: a data
 * loader's batches. DT_ERR_ARG naming the first window that does not fit in the n bytes. */
dt_status tl_batch_at(const tl_model *m, const unsigned char *text, size_t n,
                      const size_t *starts, int nmicro, dt_tensor **tokens, dt_tensor **targets);

/* MoE (tiny_llama_moe.c): a block's feed-forward declared, the plan's feed-forward rules for
 * it, and its forward (out: the feed-forward's output, added to *aux: the load-balancing loss
 * times TL_MOE_AUX). */
#define TL_MOE_AUX 1e-2
dt_status tl_moe_declare(dt_params *p, const tl_config *c, const char *name, tl_moe *out);
dt_status tl_moe_plan(const tl_layout *layout, dt_style_rule *rules, int cap, int *n_out);
dt_tensor *tl_moe_forward(dt_scope *s, const tl_model *m, const tl_moe *f, dt_tensor *h,
                          dt_tensor **aux);

/* The mean cross_entropy of the model's next-token predictions (plus the MoE's aux losses). */
dt_status tl_loss(const tl_model *m, dt_tensor *tokens, dt_tensor *targets, dt_tensor **out);
/* tl_loss's parts, for a pipeline stage (tiny_llama_pp.h): blocks [first, end) on x, and the
 * final norm, output projection and mean cross_entropy against targets (batch, seq), whose
 * batch may be a micro-batch's. NULL once s has failed. */
dt_tensor *tl_layers_forward(dt_scope *s, const tl_model *m, int first, int end, dt_tensor *x,
                             dt_tensor **aux);
dt_tensor *tl_head_loss(dt_scope *s, const tl_model *m, dt_tensor *x, dt_tensor *targets);

#endif
