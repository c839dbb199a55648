/* make train's training loop on one rank (trainer.c), from a tr_config (train_config.h): the
 * model of tiny_llama.h on the config's mesh (its pipeline stage under pp), AdamW with the
 * config's schedule, gradient accumulation and clipping, a byte-level loader over the text,
 * periodic eval, checkpoints every N steps (dtensor/train_state.h: model, optimizer, schedule,
 * step and data position in one call) and resume from the newest complete one. */
#ifndef DT_EXAMPLES_TRAINER_H
#define DT_EXAMPLES_TRAINER_H

#include "train_config.h"

/* The text: bytes [0, train_n) are trained on, [train_n, n) held out for eval. */
typedef struct tr_data {
    const unsigned char *text;
    size_t n, train_n;
} tr_data;

/* A model of one's own for the trainer (examples/my_llama.c): the trainer makes a registry on
 * the config's mesh, calls declare (modules and parameters, one group per block:
 * dt_params_begin_group), parallelizes it by the config's plan (parallelism.tp_plan) and data
 * parallelism (FSDP units on parallelism.fsdp_unit_groups plus the root, as torchtitan's
 * fully_shard), materializes it from training.seed, then calls loss for each batch: tokens and
 * targets (batch, seq) i64, the batch sharded over the data-parallel dims. It runs over
 * dp_replicate, dp_shard and tp; pp, cp and ep need what tiny_llama adds for them (stages, the
 * sequence order, expert banks) and are refused. self is size bytes, zeroed, one per rank;
 * release (nullable) frees what declare made besides the registry's. */
/* For model code: returns call's status when it fails. */
#define TR_TRY(call)                                                                               \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

/* The rotary tables of c's model (seq x head_dim / 2, base 1e4), replicated on p's mesh, for
 * dt_nn_attention_forward; the caller owns them. */
dt_status tr_rope_tables(dt_params *p, const tl_config *c, dt_tensor **cos, dt_tensor **sin);

typedef struct tr_model {
    const char *name;
    size_t size;
    dt_status (*declare)(void *self, dt_params *params, const tl_config *config);
    dt_tensor *(*loss)(void *self, dt_scope *scope, dt_tensor *tokens, dt_tensor *targets);
    void (*release)(void *self);
} tr_model;

/* A look at one step from inside (dtensor-explain --train, tl_explain.h): with a probe the run
 * makes the model and trains one step quietly (no table, progress line, eval, checkpoint,
 * resume or trace). before is called on each rank right after the step reset its collective
 * counts, after once the optimizer has stepped, with what the rank holds: its mesh, the
 * layout and model its layers ran (a pipeline stage's, with pipe set). */
typedef struct tr_probe {
    void (*before)(dt_ctx *ctx, void *user);
    dt_status (*after)(dt_ctx *ctx, void *user, dt_mesh *mesh, const tl_model *model,
                       const tl_pp *pipe);
    void *user;
} tr_probe;

typedef struct tr_run {
    const tr_config *c;
    const tr_model *custom; /* NULL: tiny_llama */
    const tr_probe *probe;  /* NULL: a training run */
    tr_data data;
    double peak_gflops; /* the machine's sgemm rate (0: unknown), for the fraction of peak */
} tr_run;

/* Reads c's text (training.text) into out, its tail held out for eval; the caller frees
 * out->text. 0, or 1 (unreadable) / 2 (too short for the config) with a message on stderr. */
int tr_data_load(const tr_config *c, tr_data *out);

/* The data loader: sample j of the run (j = 0, 1, ... over every step's batches) is the window
 * of seq + 1 bytes at (j * seq) mod (train_n - seq - 1), so consecutive samples read the text
 * in order and wrap at its end; a step's global batch is samples [pos, pos + batch), of which
 * each data-parallel rank keeps its rows (tl_batch_at's shard), and pos, saved in each
 * checkpoint, is where a resumed run goes on. starts gets batch entries. */
void tr_data_windows(const tr_data *d, int seq, int batch, int64_t pos, size_t *starts);
/* Eval batch i's windows: the held-out tail read from its start in the same order. */
void tr_data_eval_windows(const tr_data *d, int seq, int batch, int i, size_t *starts);

/* The per-rank body for dt_local_run / dt_ucx_run; arg is a tr_run. Rank 0 prints the
 * parallel layout (metrics.layout), a progress line per step, eval losses and checkpoints. */
dt_status tr_train(dt_ctx *ctx, void *arg);

/* make train's whole program (train_main.c) for custom (NULL: tiny_llama): the config from
 * argv, the text, the ranks, the trace; the process's exit code (0; 2 for a bad config). */
int tr_main(int argc, char **argv, const tr_model *custom);

/* The FLOPs of one training step of c's model: 6 x the parameters a token goes through but the
 * embedding's (the experts it is routed to) x tokens, plus attention's 12 x layers x dim x seq
 * per token, as torchtitan counts them. */
double tr_step_flops(const tr_config *c);

#endif
