/* make train's run configuration: one JSON file per run (examples/configs/), in sections named
 * as torchtitan's job config (model, parallelism, activation_checkpoint, optimizer,
 * lr_scheduler, training, eval, checkpoint, metrics), every key optional (the defaults are
 * make train's: examples/configs/default.json spells them all out). Flags override keys:
 * `--training.steps 50` sets any key by its dotted path, and the short flags of earlier
 * versions (--steps, --mesh, --dim, ...) stay as aliases of theirs (train_config.c's table).
 * Parsed with jansson; a key the trainer does not know, a value of the wrong type or out of
 * range is an error naming the key, the file and the value. */
#ifndef DT_EXAMPLES_TRAIN_CONFIG_H
#define DT_EXAMPLES_TRAIN_CONFIG_H

#include <stdio.h>

#include "tiny_llama_pp.h"

enum { TR_PATH_MAX = 1024, TR_MESH_MAX = 96, TR_PLAN_MAX = 32 };

typedef struct tr_config {
    /* model: tiny_llama.h's (experts > 0: the MoE form; the mesh then needs an ep dim) */
    tl_config model;
    /* parallelism: each dim's size (1: absent); the mesh is built from the sizes > 1 in the
     * order pp, dp_replicate, dp_shard, cp, ep, tp (the last varies fastest, as torchtitan's
     * world mesh), unless mesh names one explicitly ("dp=2,tp=2"). Their product is the world
     * (the number of in-process ranks, or the launcher's WORLD_SIZE with runtime "ucx"). */
    int dp_replicate, dp_shard, pp, cp, tp, ep;
    char mesh[TR_MESH_MAX];
    int fsdp;       /* parameters sharded over dp_shard (else replicated there: DDP) */
    int fsdp_units; /* FSDP units as torchtitan's fully_shard: root + one per block (-1: on for
                       the dense model outside a pipeline) */
    int fsdp_coalesce; /* small units' collectives together (dt_fully_shard_options) */
    int sequence_parallel, loss_parallel;
    int microbatches; /* under pp */
    dt_pipeline_schedule schedule;
    int virtual_stages;        /* interleaved 1F1B: model chunks per rank */
    dt_async_tp_mode async_tp; /* with sequence parallel: collective matmuls (off, ring, ordered) */
    int float8;                /* the blocks' linears in float8 (e4m3, tensorwise scales) */
    int bf16;                  /* training.mixed_precision_param = bfloat16 (tl_layout.bf16) */
    int64_t ac_budget_kib;     /* activation_checkpoint.mode measured: KiB a block may keep */
    int ac_measure_steps;      /* ... measured over this many steps first */
    /* parallelism.tp_plan: module pattern -> style name (tr_style_parse), replacing the
     * model's own plan (tiny_llama's tl_plan); a custom model's only plan */
    int nplan;
    struct {
        char pattern[96], style[32];
    } plan[TR_PLAN_MAX];
    char fsdp_unit_groups[96]; /* the groups that become FSDP units (the rest: the root) */
    int ucx;                   /* runtime "ucx": one process per rank under a launcher */
    int bucket_kb; /* grad sync's bucket cap in KiB (0: per gradient; -1: the default) */
    dt_ac_mode ac; /* activation_checkpoint.mode */
    /* optimizer (AdamW) and lr_scheduler (dt_lr_warmup_cosine; warmup 0 and decay 0: const) */
    dt_adamw_options adamw;
    dt_lr_schedule schedule_lr;
    /* training */
    int steps, grad_accum;
    double max_norm; /* gradient clipping by the global 2-norm; 0: off */
    uint64_t seed;
    char text[TR_PATH_MAX];
    double eval_fraction; /* the text's tail held out for eval */
    /* eval: every N steps (0: never) the mean loss of `batches` held-out batches */
    int eval_every, eval_batches;
    /* checkpoint: every N steps (0: never) into folder/step-N, keep_last newest kept (0: all);
     * resume from the newest complete one there at start when resume is set */
    char ckpt_folder[TR_PATH_MAX];
    int ckpt_every, keep_last, resume;
    /* metrics */
    char trace_out[TR_PATH_MAX];
    int trace_steps, comms, print_params, loss_digits, print_layout;
} tr_config;

/* The defaults: make train's model and layout (dp=2 x tp=2, FSDP units, sequence parallel). */
void tr_config_defaults(tr_config *c);

/* Reads argv: an optional config file (the first argument when it does not start with "--",
 * or --config PATH), then flags overriding its keys in order. 0: *c is ready (defaults, file,
 * flags, then the derived values checked: sizes multiply to world); 1: --help was asked
 * (usage printed to stdout); 2: an error, printed to stderr naming the key and value. */
int tr_config_parse(int argc, char **argv, tr_config *c);

/* The world the config's mesh needs (product of its sizes). */
int tr_config_world(const tr_config *c);

/* The style a plan entry names: colwise, colwise_replicate (output gathered), rowwise,
 * rowwise_sequence (output Shard(1): sequence parallel), sequence_parallel, prepare_replicate
 * (a container's input gathered), loss_parallel. DT_ERR_ARG naming it otherwise. */
dt_status tr_style_parse(const char *name, dt_style *out);

/* The config's plan as rules (patterns borrowed from c); *n = c->nplan. */
dt_status tr_config_plan(const tr_config *c, dt_style_rule *rules, int cap, int *n);

/* Usage: every key with its default, as --help prints it. */
void tr_config_usage(FILE *f);

#endif
