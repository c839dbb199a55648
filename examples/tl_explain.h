/* One rank's view of one training step of tiny_llama.h's model, without a cluster: the step
 * runs on the local runtime (every rank a thread, as examples/train.c does with --ranks) and
 * rank R's part is recorded and explained:
 *   1. R's coordinate on every mesh dim (and its pipeline stage);
 *   2. every parameter: registry name, global shape, stored and compute placements, R's shard;
 *   3. per module ("layers.0.attention.wq"), the collectives of its forward and backward:
 *      kind, group, bytes and the op whose inputs needed them (dt_comm_set_observer), and the
 *      step's totals per (kind, group), which equal dt_comm_stats of the same step;
 *   4. sequence parallel: where a module's input or output changes layout over tp;
 *   5. pipeline: the stage's blocks and its schedule's actions in order, with the micro-batches
 *      whose activations are alive after each;
 *   6. context parallel: per ring step, whose key/value block R's queries see (its original
 *      sequence positions) and where blocks and their gradients travel;
 *   7. expert parallel: for the first batch (the first MoE layer R runs: layer 0, or its
 *      stage's first; the first micro-batch under a pipeline), the rows R sends to each ep
 *      peer and its tokens per expert.
 * The model, layout, pipeline and batch are set up as examples/train.c sets them (the batch
 * from tl_batch's synthetic rule: text NULL, step 0, seed 1234). */
#ifndef DT_EXAMPLES_TL_EXPLAIN_H
#define DT_EXAMPLES_TL_EXPLAIN_H

#include <stdio.h>

#include <jansson.h>

#include "tiny_llama_pp.h"

typedef struct tl_explain_setup {
    const char *mesh; /* "dp=2,pp=2,cp=2,tp=2", as train --mesh; the world is its product */
    tl_config cfg;    /* the model (tiny_llama.h) */
    int fsdp;         /* parameters sharded over dp (train --fsdp) */
    int fsdp_units;   /* FSDP units; -1: train's default (on for a dense model, no pipeline) */
    int sp;           /* sequence parallel over tp (train --sp) */
    int bucket_kb;    /* grad sync's bucket cap in KiB; -1: the library's default */
    dt_ac_mode ac;
    int micro;                     /* micro-batches per step, with a pp dim */
    dt_pipeline_schedule schedule; /* with a pp dim */
} tl_explain_setup;

/* Runs one step of s on the local runtime and returns rank's view as a new JSON object
 * (the caller owns it: json_decref) in *out. Blocks; starts and joins the mesh's ranks as
 * threads. DT_ERR_ARG names the field at fault (a bad mesh, rank outside the world, micro not
 * dividing the batch, FSDP units under a pipeline); errors of the step are returned as they
 * are. Not collective (call it from one thread). */
dt_status tl_explain_json(const tl_explain_setup *s, int rank, json_t **out);

/* tl_explain_json of the first step of a make train config (train_config.h) as the trainer
 * runs it (trainer.h: its loader's first batch of data's text, its model or custom's, its step
 * with clipping and accumulation as configured), through the trainer's probe: the step's
 * totals are those a run of the config counts. */
struct tr_config;
struct tr_data;
struct tr_model;
dt_status tl_explain_train(const struct tr_config *c, const struct tr_data *data,
                           const struct tr_model *custom, int rank, json_t **out);

/* The view of tl_explain_json as text (tl_explain_text.c). */
dt_status tl_explain_print(const json_t *view, FILE *f);

/* tl_explain_json, printed as text into text_out (nullable) and written as JSON into
 * json_out (nullable). */
dt_status tl_explain(const tl_explain_setup *s, int rank, FILE *text_out, FILE *json_out);

#endif
